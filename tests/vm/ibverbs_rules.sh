#!/bin/bash
# libibverbs' documented rules on our libibverbs.so.1: the C program
# tests/ibverbs-c/rules.c (built by `cargo xtask ibverbs` as
# c-tests/rules) checks that ibv_destroy_cq waits for the acknowledgement
# of a completion event another thread holds, that a signal handler
# installed without SA_RESTART ends a blocked ibv_get_cq_event and
# ibv_get_async_event with EINTR (and with SA_RESTART the wait goes on),
# that async_fd blocks until the program makes it non-blocking, that a
# failed ibv_rereg_mr leaves the MR as it was, and that a QP attached to a
# multicast group is not destroyed (EBUSY) and still counts on its CQ and
# PD. It runs first on rdma-core's library (the reference: every check
# must pass there), then on ours, whose loading the dynamic loader's trace
# proves: both must pass every check, with the same verdict lines.
# Re-registration depends on the kernel (6.1's rxe refuses it): this runs
# on every kernel.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

here=$(dirname "$0")
. "$here/lib/ourlib.sh"
prog="$ourlib/c-tests/rules"
limit=120
failed=0

if [ ! -x "$prog" ]; then
    echo "ibverbs_rules: $prog is missing (cargo xtask ibverbs --debug)" >&2
    exit 1
fi
ourlib_check "$prog" -h

declare -A verdicts
for who in rdma-core ours; do
    env=()
    [ "$who" = ours ] && env=(env "LD_LIBRARY_PATH=$ourlib")
    start=$(date +%s)
    out=$(timeout "$limit" "${env[@]}" "$prog" rxe0 1 2>&1)
    status=$?
    secs=$(($(date +%s) - start))
    echo "$out" | sed -e "s/^/  $who: /"
    verdicts[$who]=$(echo "$out" | grep -E '^(ok|FAIL) ')
    if [ "$status" -eq 0 ] && echo "$out" | grep -q "^rules: ok"; then
        echo "ok   $who: every check passed (${secs} s)"
    else
        echo "FAIL $who: status $status after ${secs} s"
        failed=1
    fi
done
if [ "${verdicts[rdma-core]}" != "${verdicts[ours]}" ]; then
    echo "FAIL the verdicts differ:"
    diff <(echo "${verdicts[rdma-core]}") <(echo "${verdicts[ours]}") | sed -e 's/^/  /'
    failed=1
fi
exit "$failed"
