#!/bin/bash
# libibverbs' IBVERBS_1.0 compatibility versions on a device: the C
# program tests/ibverbs-c/compat_1_0.c (built by `cargo xtask ibverbs` as
# c-tests/compat_1_0) binds the 1.0 versions of the core verbs explicitly,
# as a program linked against libibverbs 1.0 does, and checks the 1.0
# device list against the 1.1 one, then a round on rxe0: open, queries,
# PD, MR (and ibv_reg_mr_iova@IBVERBS_1.7), CQ on a channel, SRQ, two RC
# QPs connected to each other, a SEND through the 1.0 operations table,
# its completion event and completions, a failing post, an AH, and every
# destroy. It runs first on rdma-core's library (the reference: every step
# must pass there), then on ours, whose loading the dynamic loader's trace
# proves: both must pass every step, with the same lines.
# xtask: first kernel only
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

here=$(dirname "$0")
. "$here/lib/ourlib.sh"
prog="$ourlib/c-tests/compat_1_0"
limit=60
failed=0

if [ ! -x "$prog" ]; then
    echo "ibverbs_compat: $prog is missing (cargo xtask ibverbs --debug)" >&2
    exit 1
fi
ourlib_check "$prog"

declare -A lines
for who in rdma-core ours; do
    env=()
    [ "$who" = ours ] && env=(env "LD_LIBRARY_PATH=$ourlib")
    start=$(date +%s)
    out=$(timeout "$limit" "${env[@]}" "$prog" rxe0 1 2>&1)
    status=$?
    secs=$(($(date +%s) - start))
    echo "$out" | sed -e "s/^/  $who: /"
    lines[$who]=$(echo "$out" | grep -E '^(ok|FAIL) ')
    if [ "$status" -eq 0 ] && echo "$out" | grep -q "^compat_1_0: ok"; then
        echo "ok   $who: every step passed (${secs} s)"
    else
        echo "FAIL $who: status $status after ${secs} s"
        failed=1
    fi
done
if [ "${lines[rdma-core]}" != "${lines[ours]}" ]; then
    echo "FAIL the steps differ:"
    diff <(echo "${lines[rdma-core]}") <(echo "${lines[ours]}") | sed -e 's/^/  /'
    failed=1
fi
exit "$failed"
