#!/bin/sh
# RC pingpong over the two-guest RoCE v2 link (cargo xtask vm2 or the vm2
# items of cargo xtask test): rdma-core's ibv_rc_pingpong server on guest a,
# client on guest b at RVERBS_PEER_ADDR, GID index 1 (the IPv4 RoCE v2 GID),
# small messages and one spanning several MTU-sized packets. When our
# `rverbs rc-pingpong` is built, also ours<->rdma-core in both directions.
# Each side must exit 0 and print the exact byte and iteration counts.
set -u
. "$(dirname "$0")/lib/pingpong.sh"

for size in 64 4096; do
    pp rc rdma-core rdma-core "$size"
done
if have_rverbs rc-pingpong; then
    for size in 64 4096; do
        pp rc rverbs rdma-core "$size"
        pp rc rdma-core rverbs "$size"
    done
else
    echo "note: $RVERBS rc-pingpong is not built: rdma-core<->rdma-core only"
fi
report
