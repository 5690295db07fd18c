#!/bin/bash
# `rverbs perf` on rxe0 (GID index 1), server and client in the VM, over
# the default exchange (perftest's, over TCP):
#  - ours with ours: every operation x kind (write/send/read/atomic x
#    bw/lat), one size, -n 200 (bw) or 100 (lat): one side prints the
#    table, the other --json; two -a sweeps (capped with --max-size, one
#    with inline sends) and one -D run;
#  - ours with perftest's ib_<verb>_<kind> (no -R), both ways: every
#    operation x kind at one size, -n 100, and one -D run (write lat, our
#    client: each side on its own clock);
#  - a server and client given different tests, and bad options: refused
#    with a clear error (exit 1).
# A run passes when both processes exit 0 and every result parses and is
# plausible: #bytes and #iterations echo the request, bandwidth and message
# rate > 0, latencies > 0 and ordered, and the --json output is one valid
# JSON document with one object per size (CPU times included). Each side
# prints what perftest's would: the server of write, read and atomic bw
# the client's figures (of a sweep, the last size's), of read and atomic
# lat none (checked: no row). perftest's own rows and the client's
# figures our server relays from perftest are checked for #bytes and
# #iterations only ("echo": perftest's timing under TCG prints 0.00 now
# and then). The -R exchange is perf_cm.sh's. Prints a summary and exits
# 1 if any check failed.
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
for t in ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw ib_send_lat ib_write_lat ib_read_lat ib_atomic_lat; do
    if ! command -v "$t" >/dev/null; then
        echo "perf: perftest's $t is missing (apt install perftest)" >&2
        exit 1
    fi
done
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
# under TCG). Each line of its input: NAME, SIDE, MODE (table, json; echo:
# a table whose #bytes and #iterations only are checked; none: no result
# row, table or JSON), KIND (bw|lat|latdur), SIZES (comma-separated),
# ITERS (the -n given, 0 for a -D run: any count > 0), FILE;
# tab-separated. It prints NAME, SIDE and "ok" or what is wrong,
# tab-separated, per line.
cat >"$work/check.py" <<'PYEOF'
import json
import sys


def check_one(mode, kind, sizes, iters, path):
    sizes = [int(s) for s in sizes.split(",") if s]
    iters = int(iters)
    text = open(path).read()
    errors = []

    def check(cond, what):
        if not cond:
            errors.append(what)

    rows = []
    if mode == "none":
        mode = "json" if text.lstrip().startswith("{") else "table"
        if mode == "table" and "#bytes" not in text:
            return []
        sizes = []
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
        echo = mode == "echo"
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
        if mode == "echo":
            if len(r) < 2:
                errors.append(f"row {r}: no #iterations")
                continue
            check(r[0] == want, f"row {r}: #bytes {r[0]}, want {want}")
            check(r[1] == iters if iters > 0 else r[1] > 0,
                  f"row {r}: #iterations {r[1]}, want {iters or '> 0'}")
            continue
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

# side_cmd WHO FLAGS VERB KIND ARGS...: the command line (words) of one
# side: WHO ours (FLAGS appended) or perftest (ib_VERB_KIND, FLAGS unused);
# sets the array `cmd`.
side_cmd() {
    local who=$1 flags=$2 verb=$3 kind=$4
    shift 4
    if [ "$who" = ours ]; then
        # shellcheck disable=SC2206
        cmd=("$ours" perf "$verb" "$kind" "$@" -d "$dev" -x "$gid" -p "$port" --timeout 20 $flags)
    else
        cmd=("ib_${verb}_${kind}" "$@" -d "$dev" -x "$gid" -p "$port" -F)
    fi
}

# pair SERVER_FLAGS CLIENT_FLAGS TEST_ARGS...: runs the server, then the
# client (each ours or perftest's, as $srv_who and $cli_who say); sets
# so/se/co/ce (stdout/stderr files) and src/crc.
srv_who=ours
cli_who=ours
pair() {
    local sflags=$1 cflags=$2 cmd
    shift 2
    port=$((port + 1))
    so="$work/$port.s.out" se="$work/$port.s.err"
    co="$work/$port.c.out" ce="$work/$port.c.err"
    : >"$co"
    : >"$ce"
    side_cmd "$srv_who" "$sflags" "$@"
    timeout "$limit" "${pin_s[@]}" "${cmd[@]}" >"$so" 2>"$se" &
    local spid=$!
    src=0
    crc=0
    if wait_listen "$port" "$spid" 150; then
        side_cmd "$cli_who" "$cflags" "$@"
        timeout "$limit" "${pin_c[@]}" "${cmd[@]}" 127.0.0.1 >"$co" 2>"$ce" || crc=$?
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
# whose results must check out on both sides (MODE: table, json, echo or
# none, as check.py takes them; MODE:SIZES gives that side other sizes);
# the exit statuses are noted now, the results checked at the end.
declare -A exit_why
names=()
run() {
    local name=$1 smode=${2%%:*} cmode=${3%%:*} kind=$4 sizes=$5 iters=$6
    local ssizes=$sizes csizes=$sizes
    [ "$2" != "$smode" ] && ssizes=${2#*:}
    [ "$3" != "$cmode" ] && csizes=${3#*:}
    shift 6
    local sflags="" cflags="" why=""
    # A side that prints no row prints (ours) its JSON document.
    case $smode in json | none) sflags=--json ;; esac
    case $cmode in json | none) cflags=--json ;; esac
    echo "=== $name: $srv_who(server) <-> $cli_who(client): perf $* (server $smode, client $cmode)"
    local t0=$SECONDS
    pair "$sflags" "$cflags" "$@"
    show
    echo "--- took $((SECONDS - t0)) s"
    [ "$src" -ne 0 ] && why+="server exit $src; "
    [ "$crc" -ne 0 ] && why+="client exit $crc; "
    names+=("$name")
    exit_why[$name]=$why
    printf '%s\tserver\t%s\t%s\t%s\t%s\t%s\n' "$name" "$smode" "$kind" "$ssizes" "$iters" "$so" \
        >>"$work/specs"
    printf '%s\tclient\t%s\t%s\t%s\t%s\t%s\n' "$name" "$cmode" "$kind" "$csizes" "$iters" "$co" \
        >>"$work/specs"
}

# mix SERVER CLIENT RUN_ARGS...: `run` with each side ours or perftest.
mix() {
    srv_who=$1 cli_who=$2
    shift 2
    run "$@"
    srv_who=ours cli_who=ours
}

n=200
l=100
run "write bw" json table bw 65536 $n write bw -s 65536 -n $n
run "write lat" table json lat 64 $l write lat -s 64 -n $l
run "send bw" json table bw 65536 $n send bw -s 65536 -n $n
run "send lat" table json lat 64 $l send lat -s 64 -n $l
run "read bw" json table bw 65536 $n read bw -s 65536 -n $n
run "read lat" none json lat 64 $l read lat -s 64 -n $l
run "atomic bw" json table bw 8 $n atomic bw -n $n
run "atomic lat (CMP_AND_SWAP)" none table lat 8 $l atomic lat -A CMP_AND_SWAP -n $l
# The server of write bw prints the client's figures of the last size.
run "write bw -a --max-size 4096" table:4096 json bw 2,4,8,16,32,64,128,256,512,1024,2048,4096 20 \
    write bw -a --max-size 4096 -n 20
run "send lat -a --max-size 64 -I 32" json table lat 2,4,8,16,32,64 10 \
    send lat -a --max-size 64 -n 10 -I 32
run "send bw -D 3 -f 1" table json bw 65536 0 send bw -s 65536 -D 3 -f 1

# With perftest (no -R), both ways, every test at one size. Our side's
# figures are judged where it measures them (our server of write, read
# and atomic bw shows perftest's client's: echo); perftest's rows echo.
t_perftest=$SECONDS
p=100
for t in "write bw" "send bw" "read bw" "atomic bw" "write lat" "send lat" "read lat" "atomic lat"; do
    kind=${t#* }
    size=4096
    args=(-s 4096 -n $p)
    case $t in
    atomic*) size=8 args=(-n $p) ;;
    esac
    case $t in
    "write bw" | "read bw" | "atomic bw") ours_s=echo theirs_s=echo ;;
    "read lat" | "atomic lat") ours_s=none theirs_s=none ;;
    *) ours_s=json theirs_s=echo ;;
    esac
    # Our client: the table for bw, --json for lat.
    ours_c=table
    [ "$kind" = lat ] && ours_c=json
    # shellcheck disable=SC2086
    mix ours perftest "$t, ours(server)<->perftest" $ours_s echo "$kind" $size $p $t "${args[@]}"
    # shellcheck disable=SC2086
    mix perftest ours "$t, perftest(server)<->ours" $theirs_s $ours_c "$kind" $size $p $t "${args[@]}"
done
# A -D run, each side on its own clock. (perftest's sweep, 2 B to 8 MiB,
# costs 10-20 s a run under TCG: the steps between sizes, the same code
# over TCP as over rdma_cm, are run with perftest in perf_cm.sh, over TCP
# above between ours.)
mix perftest ours "write lat -D 2, perftest(server)<->ours" echo table latdur 4096 0 \
    write lat -s 4096 -D 2
echo "perf: the runs with perftest took $((SECONDS - t_perftest)) s"

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
