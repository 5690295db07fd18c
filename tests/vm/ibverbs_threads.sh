#!/bin/bash
# libibverbs' thread-safety promise on our libibverbs.so.1: the C program
# tests/ibverbs-c/threads.c (built by `cargo xtask ibverbs` as
# c-tests/threads) has four threads post SENDs to one QP, two post
# receives to another, and two poll each CQ, all at once, and checks every
# completion and every message byte (exactly once, intact). It runs first
# on rdma-core's library (the reference: the test itself must pass there),
# then on ours, whose loading the dynamic loader's trace proves. Both must
# exit 0 and print "threads: ok".
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

here=$(dirname "$0")
. "$here/lib/ourlib.sh"
prog="$ourlib/c-tests/threads"
messages=20000
limit=150
failed=0

if [ ! -x "$prog" ]; then
    echo "ibverbs_threads: $prog is missing (cargo xtask ibverbs --debug)" >&2
    exit 1
fi
ourlib_check "$prog" -h

for who in rdma-core ours; do
    env=()
    [ "$who" = ours ] && env=(env "LD_LIBRARY_PATH=$ourlib")
    start=$(date +%s)
    out=$(timeout "$limit" "${env[@]}" "$prog" rxe0 1 "$messages" 2>&1)
    status=$?
    secs=$(($(date +%s) - start))
    if [ "$status" -eq 0 ] && echo "$out" | grep -q "^threads: ok:"; then
        echo "ok   $who: $out (${secs} s)"
    else
        echo "FAIL $who: status $status after ${secs} s: $out"
        failed=1
    fi
done
exit "$failed"
