#!/bin/bash
# perftest on our libibverbs.so.1: Debian's unmodified ib_{send,write,read,
# atomic}_{bw,lat} (perftest 4.5) with our library first on
# LD_LIBRARY_PATH ("ourlib", verbs/ibverbs) against the same tool on
# rdma-core's, both ways, on rxe0 (GID index 1, TCP exchange). A run
# passes when both exit 0 and the client's result row echoes the size and
# the iteration count, with a latency above 0 (lat). Bandwidth is not
# judged: perftest's own timing prints 0.00 under TCG now and then. A run
# that fails is run once more (its first outputs printed): perftest's own
# timing and start-up under a loaded TCG host fail now and then, on
# rdma-core's library too; the row then says "ok (2nd try; 1st: ...)", and
# fails if the second try fails as well.
# Rows go to the interop matrix; exits 1 if any failed.
# These rows judge our library, the same on every kernel:
# xtask: first kernel only
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

dev=rxe0
addr=10.0.0.1
port=19600
iters=100
limit=90
work=$(mktemp -d /tmp/perftest_lib.XXXXXX)
trap 'rm -rf "$work"' EXIT

. "$(dirname "$0")/lib/net.sh"
. "$(dirname "$0")/lib/ourlib.sh"

for t in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
    if ! command -v "$t" >/dev/null; then
        echo "perftest_lib: perftest's $t is missing (apt install perftest)" >&2
        exit 1
    fi
done
ourlib_check ib_send_bw -h

rows=()
failed=0

# record MIX LABEL SIZE WHY [RESULT]: a failed row when WHY is set, else
# RESULT (ok).
record() {
    local mix=$1 label=$2 size=$3 why=$4 result=${5:-ok}
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    rows+=("$(printf '%-34s %-14s %-6s %s' "$mix" "$label" "$size" "$result")")
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "perftest $label" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

# check_row FILE SIZE KIND: what is wrong with FILE's first result row.
# bw rows: #bytes #iterations peak average rate; lat rows: #bytes
# #iterations t_min t_max t_typical ...
check_row() {
    local file=$1 size=$2 kind=$3 r
    r=$(awk '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print $1, $2, $3, $4, $5; exit }' "$file")
    if [ -z "$r" ]; then
        printf 'no result row; '
        return
    fi
    # shellcheck disable=SC2086
    set -- $r
    [ "$1" = "$size" ] || printf '#bytes %s, want %s; ' "$1" "$size"
    [ "$2" = "$iters" ] || printf '#iterations %s, want %s; ' "$2" "$iters"
    if [ "$kind" = lat ]; then
        awk -v x="${5:-0}" 'BEGIN { exit !(x + 0 > 0) }' || printf 'typical latency %s not > 0; ' "${5:-}"
    fi
}

# try TOOL SIZE SERVER CLIENT: one run on a new port; sets `why` (empty
# if it passed) and prints both outputs.
try() {
    local tool=$1 size=$2 srv=$3 cli=$4 kind=${1##*_}
    port=$((port + 1))
    local so="$work/$port.server" co="$work/$port.client"
    why=""
    local -a args=(-d "$dev" -x 1 -s "$size" -n "$iters" -p "$port")
    local -a senv=() cenv=()
    [ "$srv" = ourlib ] && senv=(env "LD_LIBRARY_PATH=$ourlib")
    [ "$cli" = ourlib ] && cenv=(env "LD_LIBRARY_PATH=$ourlib")
    echo "=== $tool -s $size: $srv(server) <-> $cli(client) (port $port)"
    timeout "$limit" "${senv[@]}" "$tool" "${args[@]}" >"$so" 2>&1 &
    local spid=$! src=0 crc=0
    if wait_listen "$port" "$spid" 300; then
        timeout "$limit" "${cenv[@]}" "$tool" "${args[@]}" "$addr" >"$co" 2>&1 || crc=$?
    else
        echo "server not listening on $port" >>"$co"
        crc=255
    fi
    if [ "$crc" -ne 0 ]; then
        for _ in $(seq 50); do
            kill -0 "$spid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$spid" 2>/dev/null
    fi
    wait "$spid" || src=$?
    [ "$src" -ne 0 ] && why+="server exit $src; "
    [ "$crc" -ne 0 ] && why+="client exit $crc; "
    why+=$(check_row "$co" "$size" "$kind")
    echo "--- server output:"
    cat "$so"
    echo "--- client output:"
    cat "$co"
}

# run TOOL SIZE SERVER CLIENT: SERVER and CLIENT are ourlib or perftest.
run() {
    local why first
    try "$@"
    if [ -n "$why" ]; then
        first=${why%; }
        echo "--- failed ($first): once more"
        try "$@"
        if [ -z "$why" ]; then
            record "$3(server)<->$4(client)" "$1" "$2" "" "ok (2nd try; 1st: $first)"
            return
        fi
        why="1st: $first; 2nd: $why"
    fi
    record "$3(server)<->$4(client)" "$1" "$2" "$why"
}

for tool in ib_send_bw ib_write_bw ib_read_bw ib_send_lat ib_write_lat ib_read_lat; do
    run "$tool" 4096 ourlib perftest
    run "$tool" 4096 perftest ourlib
done
for tool in ib_atomic_bw ib_atomic_lat; do
    run "$tool" 8 ourlib perftest
    run "$tool" 8 perftest ourlib
done
run ib_send_bw 64 ourlib perftest

echo
printf '%-34s %-14s %-6s %s\n' mix tool size result
for r in "${rows[@]}"; do
    echo "$r"
done
echo "perftest_lib: ${#rows[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
