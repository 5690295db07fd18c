#!/bin/sh
# The devinfo example prints rxe0 with its port, active, and a RoCE v2 GID
# holding the guest's IPv4 address.
set -eu
out=$("$RVERBS_TARGET_DIR/debug/examples/devinfo" -d rxe0)
echo "$out"
echo "$out" | grep -q "hca_id:	rxe0"
echo "$out" | grep -q "state:			PORT_ACTIVE (4)"
echo "$out" | grep -q "::ffff:10.0.0.1, RoCE v2"
