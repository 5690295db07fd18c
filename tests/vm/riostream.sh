#!/bin/bash
# rsockets' direct placement interop: `rverbs riostream`
# (RdmaStream::iomap / iowrite) against rdma-core's `riostream`
# (librdmacm's riomap / riowrite) on rxe0 (10.0.0.1), both ways and ours
# with ours. Each side maps a region for its peer, which writes into it
# by offset with plain RDMA WRITEs and sets a marker byte the receiver
# polls for; `-T v` fills what is written with a running counter and
# checks what landed, as riostream does. A row passes only when both
# exit 0, both printed their result line, and neither printed "data
# verification failed".
#
# On every kernel: 64-byte transfers (inline) and 100 KB ones through
# 8 KiB buffers (`-B 4096`: the send ring wraps under the direct
# writes). On the first kernel also 8-byte ones, 1 MB, blocking mode and
# a 1000-turn latency run against rdma-core's server. Rows go to the
# interop matrix; exits 1 if any failed.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
addr=10.0.0.1
limit=180
work=$(mktemp -d /tmp/riostream.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "riostream: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
if ! command -v riostream >/dev/null; then
    echo "riostream: rdma-core's riostream (rdmacm-utils) is missing" >&2
    exit 1
fi

. "$(dirname "$0")/lib/kernel.sh"

prog=riostream
. "$(dirname "$0")/lib/rsockets.sh"

for pair in "ours ours" "ours rdma-core" "rdma-core ours"; do
    # shellcheck disable=SC2086
    set -- $pair
    run_mix "$1" "$2" "custom -T v" 64 1 -S 64 -C 100 -I 10 -T v
    run_mix "$1" "$2" "custom -T v -B 4096" 100000 1 -S 100000 -C 20 -I 2 -T v -B 4096
done
if first_kernel; then
    # Smaller than the 16-byte start exchange.
    run_mix ours ours "custom -T v" 8 1 -S 8 -C 10 -I 10 -T v
    run_mix ours rdma-core "custom -T v" 1000000 1 -S 1000000 -C 5 -I 1 -T v
    run_mix rdma-core ours "custom -T b -T v" 4096 1 -S 4096 -C 200 -I 5 -T b -T v
    # A latency run as the default series' first test does it (one
    # transfer a turn). The default series itself is not run: between
    # two of rdma-core's riostreams it fails too (its second test's
    # riomap gets ENOMEM: rsockets keeps the unmapped entry taken).
    run_mix rdma-core ours "custom -T v, one a turn" 64 1 -S 64 -C 1 -I 1000 -T v
fi

print_rows
