#!/bin/bash
# `rverbs perf` on rxe0 (GID index 1), server and client in the VM:
#  - every operation x kind (write/send/read/atomic x bw/lat), one size,
#    -n 200 (bw) or 100 (lat): one side prints the table, the other --json;
#  - two -a sweeps (capped with --max-size, one with inline sends) and one
#    -D run;
#  - a server and client given different tests, and bad options: refused
#    with a clear error (exit 1).
# A run passes when both processes exit 0 and every result parses and is
# plausible: #bytes and #iterations echo the request, bandwidth and message
# rate > 0, latencies > 0 and ordered, and the --json output is one valid
# JSON document with one object per size (CPU times included). Prints a
# summary and exits 1 if any check failed.
# Our perf tool's options and output do not depend on the kernel (the
# datapath under it runs on every kernel in the test binaries and interop.sh):
# xtask: first kernel only
# The VM suite runs scripts with /bin/sh: this one needs bash.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
dev=rxe0
gid=1
port=19450
limit=60
work=$(mktemp -d /tmp/perf.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "perf: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
# Starting a program from the 9p share costs seconds under TCG; from the
# guest's tmpfs a fraction of that.
cp "$ours" "$work/rverbs"
ours="$work/rverbs"

# Ping-pong latency between two busy-polling processes is steadier when
# they do not share a vCPU: pin them apart when there are two.
pin_s=()
pin_c=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
    pin_s=(taskset -c 0)
    pin_c=(taskset -c 1)
fi

# The result checker, run once at the end (each Python start costs seconds
# under TCG). Each line of its input: NAME, SIDE, MODE (table|json), KIND
# (bw|lat|latdur), SIZES (comma-separated), ITERS (the -n given, 0 for a -D
# run: any count > 0), FILE; tab-separated. It prints NAME, SIDE and "ok"
# or what is wrong, tab-separated, per line.
cat >"$work/check.py" <<'PYEOF'
import json
import sys


def check_one(mode, kind, sizes, iters, path):
    sizes = [int(s) for s in sizes.split(",")]
    iters = int(iters)
    text = open(path).read()
    errors = []

    def check(cond, what):
        if not cond:
            errors.append(what)

    rows = []
    if mode == "json":
        try:
            doc = json.loads(text)
        except ValueError as e:
            return [f"invalid JSON: {e}"]
        for r in doc.get("results", []):
            check(r.get("cpu_user_sec", -1) >= 0 and r.get("cpu_sys_sec", -1) >= 0,
                  f"size {r.get('bytes')}: CPU times missing")
            if kind == "bw":
                rows.append((r["bytes"], r["iterations"], r["bw_average"],
                             r["msg_rate_mpps"]))
            elif kind == "lat":
                rows.append((r["bytes"], r["iterations"], r["t_min_usec"],
                             r["t_max_usec"], r["t_typical_usec"], r["t_avg_usec"],
                             r["t_stdev_usec"], r["p99_usec"], r["p99_9_usec"]))
            else:
                rows.append((r["bytes"], r["iterations"], r["t_avg_usec"], r["tps"]))
    else:
        lines = text.splitlines()
        start = next((i + 1 for i, l in enumerate(lines) if "#bytes" in l), None)
        if start is None:
            return ["no result header"]
        for l in lines[start:]:
            f = l.split()
            if not f or not f[0].isdigit():
                break
            try:
                rows.append(tuple(int(x) if i < 2 else float(x) for i, x in enumerate(f)))
            except ValueError:
                errors.append(f"unparsable row {l!r}")

    check(len(rows) == len(sizes), f"{len(rows)} result rows, want {len(sizes)}")
    want_fields = {"bw": 4 if mode == "json" else 5, "lat": 9, "latdur": 4}[kind]
    for want, r in zip(sizes, rows):
        if len(r) != want_fields:
            errors.append(f"row {r}: {len(r)} fields, want {want_fields}")
            continue
        check(r[0] == want, f"row {r}: #bytes {r[0]}, want {want}")
        if iters > 0:
            check(r[1] == iters, f"row {r}: #iterations {r[1]}, want {iters}")
        else:
            check(r[1] > 0, f"row {r}: no iterations counted")
        if kind == "bw":
            if mode == "json":
                check(r[2] > 0 and r[3] > 0, f"row {r}: bandwidth/message rate not > 0")
            else:
                # The table rounds to 0.01 MB/sec: a tiny size at a low
                # rate may show 0.00; the message rate may not.
                peak, avg, rate = r[2], r[3], r[4]
                tiny = r[0] * rate * 1e6 / 1048576 < 0.005
                check(rate > 0 and (avg > 0 or tiny) and peak >= 0,
                      f"row {r}: bandwidth/message rate not > 0")
        elif kind == "lat":
            tmin, tmax, typ, avg, sd, p99, p999 = r[2:]
            check(tmin > 0 and typ > 0 and avg > 0, f"row {r}: latency not > 0")
            check(tmin <= typ <= tmax and tmin <= avg <= tmax,
                  f"row {r}: latencies out of order")
            check(tmin <= p99 <= p999 and sd >= 0, f"row {r}: percentiles out of order")
        else:
            check(r[2] > 0 and r[3] > 0, f"row {r}: t_avg/tps not > 0")
    return errors


for line in open(sys.argv[1]):
    name, side, mode, kind, sizes, iters, path = line.rstrip("\n").split("\t")
    try:
        errs = check_one(mode, kind, sizes, iters, path)
    except Exception as e:  # a missing key, an unreadable file
        errs = [f"{type(e).__name__}: {e}"]
    print(f"{name}\t{side}\t{'; '.join(errs) if errs else 'ok'}")
PYEOF

summary=()
failed=0

. "$(dirname "$0")/lib/net.sh"

# pair SERVER_FLAGS CLIENT_FLAGS TEST_ARGS...: runs the server, then the
# client; sets so/se/co/ce (stdout/stderr files) and src/crc.
pair() {
    local sflags=$1 cflags=$2
    shift 2
    port=$((port + 1))
    so="$work/$port.s.out" se="$work/$port.s.err"
    co="$work/$port.c.out" ce="$work/$port.c.err"
    : >"$co"
    : >"$ce"
    local common=(-d "$dev" -x "$gid" -p "$port" --timeout 20)
    # shellcheck disable=SC2086
    timeout "$limit" "${pin_s[@]}" "$ours" perf "$@" "${common[@]}" $sflags >"$so" 2>"$se" &
    local spid=$!
    src=0
    crc=0
    if wait_listen "$port" "$spid" 150; then
        # shellcheck disable=SC2086
        timeout "$limit" "${pin_c[@]}" "$ours" perf "$@" "${common[@]}" $cflags 127.0.0.1 \
            >"$co" 2>"$ce" || crc=$?
    else
        echo "server not listening on $port" >"$ce"
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
}

record() {
    local name=$1 why=$2 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    summary+=("$(printf '%-40s %s' "$name" "$result")")
}

show() {
    echo "--- server (stdout, stderr):"
    cat "$so" "$se"
    echo "--- client (stdout, stderr):"
    cat "$co" "$ce"
}

# run NAME SERVER_MODE CLIENT_MODE KIND SIZES ITERS TEST_ARGS...: a pair
# whose results must check out on both sides (MODE: table or json); the
# exit statuses are noted now, the results checked at the end.
declare -A exit_why
names=()
run() {
    local name=$1 smode=$2 cmode=$3 kind=$4 sizes=$5 iters=$6
    shift 6
    local sflags="" cflags="" why=""
    [ "$smode" = json ] && sflags=--json
    [ "$cmode" = json ] && cflags=--json
    echo "=== $name: rverbs perf $* (server $smode, client $cmode)"
    local t0=$SECONDS
    pair "$sflags" "$cflags" "$@"
    show
    echo "--- took $((SECONDS - t0)) s"
    [ "$src" -ne 0 ] && why+="server exit $src; "
    [ "$crc" -ne 0 ] && why+="client exit $crc; "
    names+=("$name")
    exit_why[$name]=$why
    printf '%s\tserver\t%s\t%s\t%s\t%s\t%s\n' "$name" "$smode" "$kind" "$sizes" "$iters" "$so" \
        >>"$work/specs"
    printf '%s\tclient\t%s\t%s\t%s\t%s\t%s\n' "$name" "$cmode" "$kind" "$sizes" "$iters" "$co" \
        >>"$work/specs"
}

n=200
l=100
run "write bw" json table bw 65536 $n write bw -s 65536 -n $n
run "write lat" table json lat 64 $l write lat -s 64 -n $l
run "send bw" json table bw 65536 $n send bw -s 65536 -n $n
run "send lat" table json lat 64 $l send lat -s 64 -n $l
run "read bw" json table bw 65536 $n read bw -s 65536 -n $n
run "read lat" table json lat 64 $l read lat -s 64 -n $l
run "atomic bw" json table bw 8 $n atomic bw -n $n
run "atomic lat (CMP_AND_SWAP)" table json lat 8 $l atomic lat -A CMP_AND_SWAP -n $l
run "write bw -a --max-size 4096" table json bw 2,4,8,16,32,64,128,256,512,1024,2048,4096 20 \
    write bw -a --max-size 4096 -n 20
run "send lat -a --max-size 64 -I 32" json table lat 2,4,8,16,32,64 10 \
    send lat -a --max-size 64 -n 10 -I 32
run "send bw -D 3 -f 1" table json bw 65536 0 send bw -s 65536 -D 3 -f 1

# Check every result with one Python run, then record the runs.
python3 "$work/check.py" "$work/specs" >"$work/verdicts" ||
    echo "check.py failed" >&2
for name in "${names[@]}"; do
    why=${exit_why[$name]}
    checked=0
    while IFS=$'\t' read -r vname side verdict; do
        [ "$vname" = "$name" ] || continue
        checked=$((checked + 1))
        [ "$verdict" = ok ] || why+="$side: $verdict; "
    done <"$work/verdicts"
    [ "$checked" -eq 2 ] || why+="results not checked; "
    echo "=== results of $name"
    record "$name" "$why"
done

# Different tests on the two sides: both must refuse, naming both.
echo "=== mismatch: server -s 64, client -s 128"
pair "-s 64" "-s 128" write bw -n 20
show
why=""
[ "$src" -eq 1 ] || why+="server exit $src, want 1; "
[ "$crc" -eq 1 ] || why+="client exit $crc, want 1; "
grep -q "both sides must be given the same test" "$se" || why+="server error unclear; "
grep -q "the peer runs \`perf write bw -s 64 -n 20\`" "$ce" || why+="client error unclear; "
record "mismatched sides refused" "$why"

# Bad options: exit 1 with a clear message (the last two need the device).
bad() {
    local want=$1 rc=0 err why=""
    shift
    echo "=== rverbs perf $* (want: $want)"
    err=$(timeout 20 "$ours" perf "$@" 2>&1 >/dev/null) || rc=$?
    echo "$err"
    [ "$rc" -eq 1 ] || why+="exit $rc, want 1; "
    case "$err" in
    *"$want"*) ;;
    *) why+="no '$want' in the error; " ;;
    esac
    record "refused: $*" "$why"
}
bad "-s/--size must be at least 1" write bw -s 0
bad "must be 8" atomic bw -s 16
# One byte over what the port reports (rxe: 8 MiB on 6.1, 2 GiB on 6.12).
max_msg=$("$ours" devinfo -v -d "$dev" | awk '/max_msg_sz:/ {print $2; exit}')
[ -n "$max_msg" ] || { echo "perf.sh: rverbs devinfo printed no max_msg_sz"; exit 1; }
# Where the port allows the largest RC message (2^31) the tool's own cap
# refuses first; otherwise the port's limit does.
if [ $((max_msg)) -ge 2147483648 ]; then
    bad "the largest RC message" write bw -d "$dev" -x "$gid" -s $((max_msg + 1))
else
    bad "exceeds the port's max_msg_sz" write bw -d "$dev" -x "$gid" -s $((max_msg + 1))
fi
bad "exceeds what the device allows inline" send lat -d "$dev" -x "$gid" -I 1024 127.0.0.1

echo
for r in "${summary[@]}"; do
    echo "$r"
done
echo "perf: ${#summary[@]} checks, $failed failed"
[ "$failed" -eq 0 ]
