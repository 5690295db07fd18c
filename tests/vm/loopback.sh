#!/bin/sh
# The loopback example: two RC QPs on rxe0, SEND/RECV, WRITE and READ of
# 4 KiB each verified byte for byte. Fails on any mismatch or error.
set -eu
"$RVERBS_TARGET_DIR/debug/examples/loopback" rxe0
