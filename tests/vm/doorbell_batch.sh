#!/bin/sh
# The doorbell-batching example: chains of 32 RDMA WRITEs, then 32 RDMA
# READs, each chain posted with one doorbell and one signaled request, the
# bytes compared with what was written. Fails on any mismatch, error
# completion, or unexpected completion of an unsignaled request.
set -eu
"$RVERBS_TARGET_DIR/debug/examples/doorbell_batch" rxe0 -n 32 -s 1024
