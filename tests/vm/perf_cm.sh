#!/bin/bash
# perftest interop over rdma_cm: `rverbs perf VERB KIND -R` with
# perftest's `ib_VERB_KIND -R` (Debian 12: perftest 4.5, version "6.06")
# on rxe0 (10.0.0.1). write bw: three mixes (our server with their
# client, their server with our client, ours<->ours), each for -s 4096
# and -s 65536, -n 1000. Every other test (send, read, atomic bw; send,
# write, read, atomic lat): both mixes with perftest at one size, -n 100,
# and ours<->ours on the first kernel.
# A run passes when both processes exit 0 and the client's result row
# parses with #bytes and #iterations echoing the request and a figure > 0
# (average bandwidth; lat: average latency); the server's row must echo
# #bytes and #iterations too: for write, read and atomic bw the client's
# figures relayed over perftest's report exchange, for send bw and send
# and write lat its own; the server of read and atomic lat prints no row
# (perftest's does not), which is checked too.
# Then, on the first kernel, -D runs and -a sweeps with perftest (below).
# Then our client against a port nobody listens on: a clear "rejected"
# error within its retry window. Rows go to the interop matrix
# ($RVERBS_REPORT); exits 1 if any failed.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
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
# -D seconds of the runs below (empty: -n $iters).
dur=""

# shellcheck source=tests/vm/lib/net.sh
. "$(dirname "$0")/lib/net.sh"
# shellcheck source=tests/vm/lib/ourlib.sh
. "$(dirname "$0")/lib/ourlib.sh"

record() {
    local mix=$1 test=$2 size=$3 why=$4 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    rows+=("$(printf '%-32s %-18s %-6s %s' "$mix" "$test -R" "$size" "$result")")
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "rdma_cm perf $test -R" "$size" "$result" \
            >>"$RVERBS_REPORT"
    fi
}

# cmd_of WHO ROLE TEST SIZE PORT: the command line of one side ("-" as
# SIZE: no -s, the test's own: atomics move 8 bytes).
cmd_of() {
    local who=$1 role=$2 test=$3 size=$4 p=$5 s=""
    case $size in
    -) ;;
    all) s="-a " ;;
    *) s="-s $size " ;;
    esac
    local n="-n $iters"
    [ -n "$dur" ] && n="-D $dur"
    if [ "$who" = ours ]; then
        printf '%q perf %s -R -d %s %s%s -p %s --timeout 60' \
            "$ours" "$test" "$dev" "$s" "$n" "$p"
    else
        [ "$who" = ourlib ] && ourlib_env
        printf 'ib_%s -R -d %s %s%s -p %s -F' "${test/ /_}" "$dev" "$s" "$n" "$p"
    fi
    if [ "$role" = client ]; then
        printf ' %s' "$addr"
    fi
}

# The fields of the first result row after the "#bytes" header of file
# $1 (empty if there is none): bw: bytes, iterations, peak, average,
# message rate; lat: bytes, iterations, t_min, t_max, t_typical, t_avg...
row_of() {
    awk '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { print; exit }' "$1"
}

# check_row SIDE FILE SIZE FIELD: what is wrong with the row, if anything;
# FIELD (the average bandwidth, 4, or latency, 6) must be > 0 unless it
# is "no".
check_row() {
    local side=$1 file=$2 size=$3 field=$4 r
    r=$(row_of "$file")
    if [ -z "$r" ]; then
        printf '%s: no result row; ' "$side"
        return
    fi
    # shellcheck disable=SC2086
    set -- $r
    [ "${1:-}" = "$size" ] || printf '%s: #bytes %s, want %s; ' "$side" "${1:-}" "$size"
    if [ -n "$dur" ]; then
        # -D: as many as fitted in the time, at least one.
        [ "${2:-0}" -gt 0 ] 2>/dev/null || printf '%s: #iterations %s, want > 0; ' "$side" "${2:-}"
    else
        [ "${2:-}" = "$iters" ] || printf '%s: #iterations %s, want %s; ' "$side" "${2:-}" "$iters"
    fi
    if [ "$field" != no ]; then
        local v=${!field:-0}
        awk -v v="$v" 'BEGIN { exit !(v + 0 > 0) }' ||
            printf '%s: figure %s (column %s) not > 0; ' "$side" "$v" "$field"
    fi
}

# show_outputs SERVER_OUT CLIENT_OUT: both sides' output, for the log.
show_outputs() {
    echo "--- server output:"
    cat "$1" "$1.err" 2>/dev/null
    echo "--- client output:"
    cat "$2" "$2.err" 2>/dev/null
}

# run_pair SERVER CLIENT TEST SIZE [CLIENT_EXTRA]: runs one pair on the
# next port (SIZE as cmd_of takes it; CLIENT_EXTRA appended to the
# client's command); sets MIX, SO and CO (the outputs) and WHY (the exit
# statuses that were not 0).
run_pair() {
    local srv=$1 cli=$2 test=$3 size=$4 extra=${5:-} scmd ccmd
    MIX="$srv(server)<->$cli(client)"
    [ "$srv" = "$cli" ] && MIX="$srv<->$cli"
    port=$((port + 1))
    SO="$work/$port.server" CO="$work/$port.client" WHY=""
    scmd=$(cmd_of "$srv" server "$test" "$size" "$port")
    ccmd=$(cmd_of "$cli" client "$test" "$size" "$port")$extra
    echo "=== $MIX $test size $size$extra (port $port)"
    echo "server: $scmd"
    echo "client: $ccmd"
    run_cm_pair "$port" "$limit" "$scmd" "$SO" "$ccmd" "$CO"
    [ "$SERVER_RC" -ne 0 ] && WHY+="server exit $SERVER_RC; "
    [ "$CLIENT_RC" -ne 0 ] && WHY+="client exit $CLIENT_RC; "
}

# run_mix SERVER CLIENT SIZE [TEST]: one run (TEST: "write bw" unless
# given; SIZE "-" for the test's own), its rows checked and recorded.
run_mix() {
    local srv=$1 cli=$2 size=$3 test=${4:-write bw}
    run_pair "$srv" "$cli" "$test" "$size"
    local mix=$MIX so=$SO co=$CO why=$WHY
    local want=$size
    [ "$size" = - ] && want=8
    # perftest's own timing prints 0.00 under TCG now and then (its cycle
    # counter against the CPU's nominal clock): on our library's rows the
    # row must echo the size and count, its bandwidth is not judged.
    local field=4
    [ "${test#* }" = lat ] && field=6
    # -D latency rows: #bytes, #iterations, t_avg, tps.
    [ -n "$dur" ] && [ "${test#* }" = lat ] && field=3
    [ "$srv" = ourlib ] || [ "$cli" = ourlib ] && field=no
    # perftest's own -D figures are not judged (its clock under TCG).
    [ -n "$dur" ] && [ "$cli" != ours ] && field=no
    why+=$(check_row client "$co" "$want" "$field")
    case $test in
    "read lat" | "atomic lat")
        # perftest's server of these prints no result row; ours neither.
        [ -z "$(row_of "$so")" ] || why+="server: a result row, want none; "
        ;;
    *) why+=$(check_row server "$so" "$want" no) ;;
    esac
    show_outputs "$so" "$co"
    record "$mix" "$test" "$size${dur:+ -D $dur}" "$why"
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

# Every other test, -n 100: both ways with perftest, and ours<->ours on
# the first kernel.
iters=100
t_other=$(date +%s)
for t in "send bw:4096" "read bw:4096" "atomic bw:-" "send lat:64" "write lat:64" \
    "read lat:64" "atomic lat:-"; do
    run_mix ours perftest "${t#*:}" "${t%%:*}"
    run_mix perftest ours "${t#*:}" "${t%%:*}"
    if first_kernel; then
        run_mix ours ours "${t#*:}" "${t%%:*}"
    fi
done
echo "perf_cm: the tests other than write bw took $(($(date +%s) - t_other)) s"

# -D 2 (a margin of 0): each side stops on its own clock, as perftest's
# do; a row's #iterations is what fitted, more than 0. On the first
# kernel: send bw and write lat both ways (both sides run), send lat with
# our server, write bw and read lat with our client.
if first_kernel; then
    iters=100
    dur=2
    run_mix ours perftest 4096 "send bw"
    run_mix perftest ours 4096 "send bw"
    run_mix ours perftest 64 "write lat"
    run_mix perftest ours 64 "write lat"
    run_mix ours perftest 64 "send lat"
    run_mix perftest ours 4096 "write bw"
    run_mix perftest ours 64 "read lat"
    dur=""
fi

# The sweep (-a: 2 bytes to 8 MiB, -n 5): perftest goes from one size to
# the next without a word in most tests, with a barrier before each size
# (send bw and lat) and after it (send bw) in the others; either side may
# be perftest's. The client prints a row per size, #iterations 5 each;
# the server a row per size where it measures (send bw and lat, write
# lat), the last size's (the client's figures) for write and read bw,
# none for read lat. Each sweep moves about 80 MB per direction (8 to
# 17 s under TCG, the latency ones the dearest), and what it adds to the
# single-size runs is the order of the steps between sizes, which no
# kernel changes: on the first kernel only, write bw (no step, the
# server idle, the last size's figures relayed), send bw (barriers
# before and after each size, both ways, our client with --json, checked
# as a JSON document) and write lat (the polled bytes, both ways). send
# lat (a barrier before each size: send bw's code without the one after)
# and read lat (the server idle: write bw's) were checked by hand (both
# pass) and are left out for time.
iters=5
sweep=""
for i in $(seq 1 23); do
    sweep+="$((1 << i)) "
done

# sizes_of FILE: the #bytes of every result row after the header.
sizes_of() {
    awk '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ { printf "%s ", $1 }' "$1"
}

# rows_ok SIDE FILE WANT: what is wrong with the rows of FILE (their
# sizes must be WANT, their #iterations $iters), if anything.
rows_ok() {
    local side=$1 file=$2 want=$3 got bad
    got=$(sizes_of "$file")
    [ "$got" = "$want" ] || printf '%s: sizes [%s], want [%s]; ' "$side" "$got" "$want"
    bad=$(awk -v n="$iters" '/#bytes/ { h = 1; next } h && $1 ~ /^[0-9]+$/ && $2 != n { c++ } END { print c + 0 }' "$file")
    [ "$bad" = 0 ] || printf '%s: %s rows without #iterations %s; ' "$side" "$bad" "$iters"
}

# json_ok FILE KIND: what is wrong with the JSON document of our client.
json_ok() {
    python3 - "$1" "$2" "$iters" "$sweep" <<'PY'
import json, sys
path, kind, iters, sweep = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
try:
    doc = json.load(open(path))
except Exception as e:
    print(f"client: no JSON document ({e}); ", end="")
    sys.exit()
rows = doc.get("results", [])
sizes = [r.get("bytes") for r in rows]
if sizes != [int(x) for x in sweep.split()]:
    print(f"client JSON: sizes {sizes}; ", end="")
if doc.get("side") != "client" or any(r.get("iterations") != iters for r in rows):
    print("client JSON: side or iterations wrong; ", end="")
key = "bw_average" if kind == "bw" else "t_avg_usec"
if not all((r.get(key) or 0) > 0 for r in rows):
    print(f"client JSON: a {key} not > 0; ", end="")
PY
}

# run_sweep SERVER CLIENT TEST [--json]: one -a run.
run_sweep() {
    local srv=$1 cli=$2 test=$3 json=${4:-} t0
    t0=$(date +%s)
    run_pair "$srv" "$cli" "$test" all "${json:+ $json}"
    echo "--- took $(($(date +%s) - t0)) s"
    local mix=$MIX so=$SO co=$CO why=$WHY
    if [ -n "$json" ]; then
        why+=$(json_ok "$co" "${test#* }")
    else
        why+=$(rows_ok client "$co" "$sweep")
    fi
    case $test in
    "write bw" | "read bw") why+=$(rows_ok server "$so" "8388608 ") ;;
    "read lat") why+=$(rows_ok server "$so" "") ;;
    *) why+=$(rows_ok server "$so" "$sweep") ;;
    esac
    show_outputs "$so" "$co"
    record "$mix" "$test" "-a${json:+ $json}" "$why"
}

if first_kernel; then
    t_sweep=$(date +%s)
    run_sweep perftest ours "write bw"
    run_sweep ours perftest "send bw"
    run_sweep perftest ours "send bw" --json
    run_sweep ours perftest "write lat"
    run_sweep perftest ours "write lat"
    echo "perf_cm: the sweeps took $(($(date +%s) - t_sweep)) s"
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
record "ours(client), nobody listening" "write bw" - "$why"

echo
printf '%-32s %-18s %-6s %s\n' mix test size result
for r in "${rows[@]}"; do
    echo "$r"
done
echo "perf_cm: ${#rows[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
