#!/bin/bash
# rdma_cm interop: `rverbs rping` with rdma-core's `rping` on rxe0
# (10.0.0.1), connected through the kernel's connection manager. Three
# mixes (ours<->ours, our server with their client, their server with our
# client), each for a few sizes, all with -v -V: a run passes when both
# processes exit 0, the client printed one "ping data: rdma-ping-N: ..."
# line per ping with the expected pattern, and the server printed the
# same data. Then both ways with -q (rping's self-created QP) on both
# sides. Rows go to the interop matrix; exits 1 if any failed.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
addr=10.0.0.1
count=10
port=7300
limit=120
work=$(mktemp -d /tmp/rping.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "rping: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
if ! command -v rping >/dev/null; then
    echo "rping: rdma-core's rping (rdmacm-utils) is missing" >&2
    exit 1
fi

rows=()
failed=0

. "$(dirname "$0")/lib/net.sh"
. "$(dirname "$0")/lib/ourlib.sh"

record() {
    local mix=$1 size=$2 why=$3 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    rows+=("$(printf '%-26s %-9s %-6s %s' "$mix" rping "$size" "$result")")
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "rdma_cm rping" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

cmd_of() {
    local who=$1 role=$2 size=$3 p=$4
    if [ "$who" = ours ]; then
        printf '%q rping' "$ours"
    elif [ "$who" = ourlib ]; then
        printf '%srping' "$(ourlib_env)"
    else
        printf 'rping'
    fi
    if [ "$role" = server ]; then
        printf ' -s -v -a %s -p %s -S %s%s' "$addr" "$p" "$size" "$qflag"
    else
        printf ' -c -v -V -a %s -p %s -S %s -C %s%s' "$addr" "$p" "$size" "$count" "$qflag"
    fi
}
# " -q" (rping's self-created QPs) for both sides of the runs below.
qflag=""

# The pattern rping's client sends for ping $1 at size $2 (section 4 of
# its protocol): "rdma-ping-N: " then rotating characters 65..122.
expect_line() {
    awk -v n="$1" -v size="$2" 'BEGIN {
        s = "rdma-ping-" n ": "
        c = 65 + (n % 58)
        while (length(s) < size - 1) { s = s sprintf("%c", c); c++; if (c > 122) c = 65 }
        print s
    }'
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
    # stdout apart from stderr: rping's buffered stdout lines would be cut
    # by its unbuffered stderr in one file.
    run_cm_pair "$port" "$limit" "$scmd" "$so" "$ccmd" "$co"
    [ "$SERVER_RC" -ne 0 ] && why+="server exit $SERVER_RC; "
    [ "$CLIENT_RC" -ne 0 ] && why+="client exit $CLIENT_RC; "
    local n
    for n in $(seq 0 $((count - 1))); do
        local want
        want=$(expect_line "$n" "$size")
        grep -qxF "ping data: $want" "$co" || { why+="client lacks ping $n; "; break; }
        grep -qxF "server ping data: $want" "$so" || { why+="server lacks ping $n; "; break; }
    done
    local got
    got=$(grep -c '^ping data: ' "$co")
    [ "$got" -eq "$count" ] || why+="client printed $got pings, want $count; "
    echo "--- server output:"
    cat "$so" "$so.err" 2>/dev/null
    echo "--- client output:"
    cat "$co" "$co.err" 2>/dev/null
    record "$mix" "$size$qflag" "$why"
}

for size in $(kernel_sizes 64 23 4096 -- 4096); do
    run_mix ours ours "$size"
    run_mix ours rdma-core "$size"
    run_mix rdma-core ours "$size"
done
# -q on both sides: rping then creates its QP with verbs and moves it
# through the connection manager's attributes itself (librdmacm's other
# path); ours accepts the flag (its QPs are always the caller's).
qflag=" -q"
run_mix ours rdma-core 64
run_mix rdma-core ours 64
qflag=""
# rdma-core's rping on our libibverbs.so.1 (librdmacm loaded on it)
# against rping on rdma-core's, both ways.
if ourlib_first_kernel rping; then
    ourlib_check rping -h
    for size in 64 4096; do
        run_mix ourlib rdma-core "$size"
        run_mix rdma-core ourlib "$size"
    done
fi

echo
printf '%-26s %-9s %-6s %s\n' mix transport size result
for r in "${rows[@]}"; do
    echo "$r"
done
echo "rping: ${#rows[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
