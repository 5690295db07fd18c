#!/bin/sh
# UD pingpong over the two-guest RoCE v2 link (cargo xtask vm2 or the vm2
# items of cargo xtask test): rdma-core's ibv_ud_pingpong server on guest a,
# client on guest b at RVERBS_PEER_ADDR, GID index 1, messages up to the
# link's 1024-byte MTU. When our `rverbs ud-pingpong` is built, also
# ours<->rdma-core in both directions. Each side must exit 0 and print the
# exact byte and iteration counts.
set -u
. "$(dirname "$0")/lib/pingpong.sh"

for size in 64 1024; do
    pp ud rdma-core rdma-core "$size"
done
if have_rverbs ud-pingpong; then
    for size in 64 1024; do
        pp ud rverbs rdma-core "$size"
        pp ud rdma-core rverbs "$size"
    done
else
    echo "note: $RVERBS ud-pingpong is not built: rdma-core<->rdma-core only"
fi
report
