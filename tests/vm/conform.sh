#!/bin/bash
# `cargo xtask conform` on rxe0, as a user with a device runs it
# (tools/xtask/src/conform.rs), with the binaries the harness built
# (--prebuilt): the interop matrix of rdma-core's ibv_*_pingpong and
# perftest tools on rdma-core's libibverbs and ours (all four mixes), and
# the uverbs commands cmd_seq.c sends on each library, recorded by
# tests/uverbs-trace and compared field by field. Its third part,
# rdma-core's pyverbs suite on both libraries, is pyverbs_suite.sh's job on
# every kernel (the same comparison, the same allowed file), so it is not
# run twice here. Passes when every item of the report passed.
# xtask: first kernel only
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

target=${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}
xtask="$target/debug/xtask"
out=$(mktemp -d /tmp/conform.XXXXXX)
trap 'rm -rf "$out"' EXIT

if [ ! -x "$xtask" ]; then
    echo "conform: $xtask is missing (cargo build -p xtask)" >&2
    exit 1
fi
rc=0
"$xtask" conform --dev rxe0 --prebuilt --target-dir "$target" --out "$out" \
    --only interop --only commands || rc=$?
if [ "$rc" -ne 0 ]; then
    echo "--- the command comparison:"
    sed -n '/^commands:/,$p' "$out/cmd_compare.log" 2>/dev/null
    # Each failed row's log (client, then server).
    grep "^FAIL" "$out/report.txt" | sed -n 's/.*(log: \(.*\))$/\1/p' | while read -r f; do
        echo "--- $f"
        tail -n 30 "$f"
    done
fi
# A row that passed on its second try: its first try's log.
grep "2nd try" "$out/report.txt" | sed -n 's/.*(log: \(.*\)\.log)$/\1.1st.log/p' | while read -r f; do
    echo "--- first try: $f"
    tail -n 30 "$f"
done
# The report must hold what it exists for: 24 interop rows, both
# libraries' runs of the sequence and their comparison.
n=$(grep -c "^ok   interop " "$out/report.txt" 2>/dev/null)
if [ "${n:-0}" -ne 24 ]; then
    echo "FAIL: $n of 24 interop rows passed"
    rc=1
fi
if ! grep -q "^ok   uverbs commands: ours against rdma-core's" "$out/report.txt"; then
    echo "FAIL: the command comparison did not pass"
    rc=1
fi
exit "$rc"
