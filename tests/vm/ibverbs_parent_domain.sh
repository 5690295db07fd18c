#!/bin/bash
# Thread domains and parent domains on rxe: the C program
# tests/ibverbs-c/parent_domain.c (built by `cargo xtask ibverbs` as
# c-tests/parent_domain) checks their rules (the EINVAL cases, the EBUSY
# orders of the parent domain, its protection domain and its thread
# domain, objects on a parent domain, and that rxe never calls a parent
# domain's allocators). rdma-core's librxe has no parent domains: on
# rdma-core's library the program must say so (EOPNOTSUPP, "skipped")
# and nothing else; on ours, whose loading the dynamic loader's trace
# proves, every check must pass. The same program is the reference check
# against libmlx5 on the emulated ConnectX-5 (run by hand there; see its
# header). Our library is the same on every kernel:
# xtask: first kernel only
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

here=$(dirname "$0")
. "$here/lib/ourlib.sh"
prog="$ourlib/c-tests/parent_domain"
limit=60
failed=0

if [ ! -x "$prog" ]; then
    echo "ibverbs_parent_domain: $prog is missing (cargo xtask ibverbs --debug)" >&2
    exit 1
fi
ourlib_check "$prog" -h

out=$(timeout "$limit" "$prog" rxe0 2>&1)
status=$?
echo "$out" | sed -e "s/^/  rdma-core: /"
if [ "$status" -eq 0 ] && echo "$out" | grep -q "^parent_domain: skipped" &&
    echo "$out" | grep -q "^info thread domains: EOPNOTSUPP"; then
    echo "ok   rdma-core: no thread or parent domains on rxe (EOPNOTSUPP), as expected"
else
    echo "FAIL rdma-core: status $status; expected librxe's EOPNOTSUPP"
    failed=1
fi

out=$(timeout "$limit" env "LD_LIBRARY_PATH=$ourlib" "$prog" rxe0 2>&1)
status=$?
echo "$out" | sed -e "s/^/  ours: /"
if [ "$status" -eq 0 ] && echo "$out" | grep -q "^parent_domain: ok" &&
    ! echo "$out" | grep -q "^FAIL"; then
    echo "ok   ours: every check passed"
else
    echo "FAIL ours: status $status"
    failed=1
fi
exit "$failed"
