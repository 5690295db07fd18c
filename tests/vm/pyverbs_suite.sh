#!/bin/bash
# rdma-core's own test suite as the judge of our libibverbs.so.1: Debian's
# python3-pyverbs suite (/usr/share/doc/rdma-core/tests, `run_tests.py
# --dev rxe0`) runs twice in this VM, once on rdma-core's library and once
# with ours first on LD_LIBRARY_PATH. lib/pyverbs_verdicts.py records each
# test's verdict (ok / fail / error / skip and its reason) as it ends;
# lib/pyverbs_compare.py prints the table and fails on any difference
# not listed with its reason in pyverbs_allowed.tsv (a test rdma-core
# skips may pass on ours). Neither run may crash the interpreter.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

here=$(dirname "$0")
dev=rxe0
limit=900
suite=/usr/share/doc/rdma-core/tests
work=$(mktemp -d /tmp/pyverbs_suite.XXXXXX)
trap 'rm -rf "$work"' EXIT

. "$here/lib/ourlib.sh"

if [ ! -f "$suite/run_tests.py" ]; then
    echo "pyverbs_suite: $suite is missing (apt install python3-pyverbs)" >&2
    exit 1
fi
ourlib_check python3 -c "import pyverbs.device"

# Debian gzips the documentation, the suite's modules with it.
cp -r "$suite" "$work/tests"
gunzip -f "$work"/tests/*.gz

failed=0
# run NAME [ENV...]: the suite on one library; its verdicts in
# $work/NAME.tsv, its output in $work/NAME.log.
run() {
    local name=$1 start rc=0
    shift
    start=$(date +%s)
    env "$@" timeout "$limit" python3 "$here/lib/pyverbs_verdicts.py" "$work/tests" \
        "$work/$name.tsv" "$dev" >"$work/$name.log" 2>&1 || rc=$?
    echo "pyverbs on $name: exit $rc after $(($(date +%s) - start)) s, $(wc -l <"$work/$name.tsv") verdicts"
    if [ -e "$work/$name.tsv.running" ]; then
        echo "FAIL: on $name the interpreter ended (exit $rc) inside $(cat "$work/$name.tsv.running")"
        tail -n 30 "$work/$name.log"
        failed=1
    fi
    # unittest exits 1 when a test failed; anything else is the harness.
    if [ "$rc" -gt 1 ]; then
        echo "FAIL: the suite on $name exited $rc"
        tail -n 30 "$work/$name.log"
        failed=1
    fi
}

run rdma-core
run ours "LD_LIBRARY_PATH=$ourlib"
for name in rdma-core ours; do
    echo "pyverbs on $name, its slowest tests (seconds):"
    sort -t "$(printf '\t')" -k2,2 -rn "$work/$name.tsv.times" | head -n 8 | sed -e 's/^/  /'
done

python3 "$here/lib/pyverbs_compare.py" "$work/rdma-core.tsv" "$work/ours.tsv" \
    "$here/pyverbs_allowed.tsv" || failed=1
if [ "$failed" -ne 0 ]; then
    # What failed on ours, for the log.
    grep -A 12 -E "^(ERROR|FAIL):" "$work/ours.log" | head -n 200
fi
[ "$failed" -eq 0 ]
