#!/bin/bash
# perftest interop over rdma_cm: `rverbs perf write bw -R` with perftest's
# `ib_write_bw -R` (Debian 12: perftest 4.5, version "6.06") on rxe0
# (10.0.0.1). Three mixes (our server with their client, their server
# with our client, ours<->ours), each for -s 4096 and -s 65536, -n 1000.
# A run passes when both processes exit 0 and the client's result row
# parses with #bytes and #iterations echoing the request and an average
# bandwidth > 0; the server's row (the client's figures, relayed over
# perftest's report exchange) must echo #bytes and #iterations too.
# Then our client against a port nobody listens on: a clear "rejected"
# error within its retry window. Rows go to the interop matrix
# ($RVERBS_REPORT); exits 1 if any failed.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs"
dev=rxe0
addr=10.0.0.1
iters=1000
port=19600
limit=120
work=$(mktemp -d /tmp/perf_cm.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "perf_cm: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
if ! command -v ib_write_bw >/dev/null; then
    echo "perf_cm: perftest's ib_write_bw is missing (apt install perftest)" >&2
    exit 1
fi
# Starting a program from the 9p share costs seconds under TCG; from the
# guest's tmpfs a fraction of that.
cp "$ours" "$work/rverbs"
ours="$work/rverbs"

rows=()
failed=0

# shellcheck source=tests/vm/lib/net.sh
. "$(dirname "$0")/lib/net.sh"
# shellcheck source=tests/vm/lib/ourlib.sh
. "$(dirname "$0")/lib/ourlib.sh"

record() {
    local mix=$1 size=$2 why=$3 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    rows+=("$(printf '%-32s %-18s %-6s %s' "$mix" "write bw -R" "$size" "$result")")
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "rdma_cm perf write bw -R" "$size" "$result" \
            >>"$RVERBS_REPORT"
    fi
}

# cmd_of WHO ROLE SIZE PORT: the command line of one side.
cmd_of() {
    local who=$1 role=$2 size=$3 p=$4
    if [ "$who" = ours ]; then
        printf '%q perf write bw -R -d %s -s %s -n %s -p %s --timeout 60' \
            "$ours" "$dev" "$size" "$iters" "$p"
    else
        [ "$who" = ourlib ] && ourlib_env
        printf 'ib_write_bw -R -d %s -s %s -n %s -p %s -F' "$dev" "$size" "$iters" "$p"
    fi
    if [ "$role" = client ]; then
        printf ' %s' "$addr"
    fi
}

# The first result row after the "#bytes" header of file $1: bytes,
# iterations, peak, average, message rate (empty if there is none).
row_of() {
    awk '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print $1, $2, $3, $4, $5; exit }' "$1"
}

# check_row SIDE FILE SIZE NEED_BW: what is wrong with the row, if anything.
check_row() {
    local side=$1 file=$2 size=$3 need_bw=$4 r
    r=$(row_of "$file")
    if [ -z "$r" ]; then
        printf '%s: no result row; ' "$side"
        return
    fi
    # shellcheck disable=SC2086
    set -- $r
    [ "${1:-}" = "$size" ] || printf '%s: #bytes %s, want %s; ' "$side" "${1:-}" "$size"
    [ "${2:-}" = "$iters" ] || printf '%s: #iterations %s, want %s; ' "$side" "${2:-}" "$iters"
    if [ "$need_bw" = yes ]; then
        awk -v bw="${4:-0}" 'BEGIN { exit !(bw + 0 > 0) }' ||
            printf '%s: average bandwidth %s not > 0; ' "$side" "${4:-}"
    fi
}

run_mix() {
    local srv=$1 cli=$2 size=$3
    local mix="$srv(server)<->$cli(client)"
    [ "$srv" = "$cli" ] && mix="$srv<->$cli"
    port=$((port + 1))
    local so="$work/$port.server" co="$work/$port.client" why=""
    local scmd ccmd
    scmd=$(cmd_of "$srv" server "$size" "$port")
    ccmd=$(cmd_of "$cli" client "$size" "$port")
    echo "=== $mix size $size (port $port)"
    echo "server: $scmd"
    echo "client: $ccmd"
    run_cm_pair "$port" "$limit" "$scmd" "$so" "$ccmd" "$co"
    [ "$SERVER_RC" -ne 0 ] && why+="server exit $SERVER_RC; "
    [ "$CLIENT_RC" -ne 0 ] && why+="client exit $CLIENT_RC; "
    # perftest's own timing prints 0.00 under TCG now and then (its cycle
    # counter against the CPU's nominal clock): on our library's rows the
    # row must echo the size and count, its bandwidth is not judged.
    local need_bw=yes
    [ "$srv" = ourlib ] || [ "$cli" = ourlib ] && need_bw=no
    why+=$(check_row client "$co" "$size" "$need_bw")
    why+=$(check_row server "$so" "$size" no)
    echo "--- server output:"
    cat "$so" "$so.err" 2>/dev/null
    echo "--- client output:"
    cat "$co" "$co.err" 2>/dev/null
    record "$mix" "$size" "$why"
}

for size in $(kernel_sizes 4096 65536 -- 4096); do
    run_mix ours perftest "$size"
    run_mix perftest ours "$size"
    run_mix ours ours "$size"
done
# perftest's ib_write_bw -R on our libibverbs.so.1 (librdmacm loaded on
# it) against itself on rdma-core's, both ways.
if ourlib_first_kernel perf_cm; then
    ourlib_check ib_write_bw -h
    run_mix ourlib perftest 4096
    run_mix perftest ourlib 4096
fi

# Nobody listening: our client gives up with a clear error (the server
# refuses the request: rejected) within its 5 s of retries, not a hang.
port=$((port + 1))
echo "=== ours(client), nobody listening on $port"
start=$(date +%s)
rc=0
timeout "$limit" "$ours" perf write bw -R -d "$dev" -s 4096 -n 10 -p "$port" "$addr" \
    >"$work/none.out" 2>"$work/none.err" || rc=$?
took=$(($(date +%s) - start))
cat "$work/none.out" "$work/none.err"
why=""
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || why+="exit $rc, want a failure of its own; "
grep -qi "rejected" "$work/none.err" || why+="no 'rejected' in the error; "
[ "$took" -le 30 ] || why+="took ${took}s; "
record "ours(client), nobody listening" - "$why"

echo
printf '%-32s %-18s %-6s %s\n' mix test size result
for r in "${rows[@]}"; do
    echo "$r"
done
echo "perf_cm: ${#rows[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
