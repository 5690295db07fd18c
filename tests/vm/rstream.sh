#!/bin/bash
# rsockets interop: `rverbs rstream` (rverbs_cm::stream) against rdma-core's
# `rstream` (librdmacm's rsockets) on rxe0 (10.0.0.1), both ways and ours
# with ours. Every run verifies the bytes (`-T v`: each side fills what it
# sends with a running counter and checks what it receives, as rstream
# does), so a row passes only when both exit 0, both printed their result
# line, and neither printed "data verification failed".
#
# Custom runs on every kernel: 64-byte transfers (inline), 100 KB ones
# through 8 KiB buffers (`-B 4096`: grants and credits run out all the
# time), 1 MB ones; the server bound to the address with `-b`, and our
# client too. On the
# first kernel also: rstream's default series (latency then bandwidth,
# 64 B to 1 MiB, two connections) against rdma-core's server, blocking
# mode (`-T b`), TCP mode (`-T s`) as the baseline, fork mode (`-T f`,
# sockets and a server forking per connection) both ways, and faults: the peer
# killed mid-transfer must make the survivor exit with an error within
# 20 s, where it would wait 60 (rdma-core's rstream, facing the same, hangs: only ours is the
# survivor here). Rows go to the interop matrix; exits 1 if any failed.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
addr=10.0.0.1
limit=180
work=$(mktemp -d /tmp/rstream.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "rstream: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
if ! command -v rstream >/dev/null; then
    echo "rstream: rdma-core's rstream (rdmacm-utils) is missing" >&2
    exit 1
fi

. "$(dirname "$0")/lib/kernel.sh"

prog=rstream
. "$(dirname "$0")/lib/rsockets.sh"

# run_kill SURVIVOR: rdma-core's side killed with SIGKILL 2 s into a long
# transfer; ours must exit non-zero, with an error, within 20 s.
run_kill() {
    local survivor_role=$1
    run_no=$((run_no + 1))
    local port=$((7500 + run_no))
    local oo="$work/$run_no.ours" to="$work/$run_no.theirs" why="" opid tpid orc=0
    local big="-S 1000000 -C 100000 -I 1"
    # Ours waits up to 60 s on a silent peer: noticing within 20 s is the
    # disconnect's doing, not the timeout's.
    local mine
    mine="$(printf '%q' "$ours") rstream --timeout 60"
    echo "=== ours($survivor_role) with rdma-core's peer killed"
    local start=$SECONDS
    if [ "$survivor_role" = server ]; then
        eval "timeout -k 5 90 $mine -b $addr -p $port $big" >"$oo" 2>&1 &
        opid=$!
        for _ in $(seq 100); do grep -q "^name" "$oo" && break; sleep 0.1; done
        rstream -s $addr -p $port $big >"$to" 2>&1 &
        tpid=$!
    else
        rstream -b $addr -p $port $big >"$to" 2>&1 &
        tpid=$!
        sleep 1
        eval "timeout -k 5 90 $mine -s $addr -p $port $big" >"$oo" 2>&1 &
        opid=$!
    fi
    sleep 3
    kill -9 "$tpid" 2>/dev/null || why+="rdma-core's side was gone before the kill; "
    local killed=$SECONDS
    wait "$opid" || orc=$?
    local took=$((SECONDS - killed))
    [ "$orc" -eq 0 ] && why+="ours exited 0 after its peer was killed; "
    [ "$orc" -eq 124 ] || [ "$orc" -eq 137 ] && why+="ours hung (killed by timeout); "
    [ "$took" -gt 20 ] && why+="ours took ${took} s to notice; "
    grep -qiE "reset|disconnect|abort|closed|failed" "$oo" || why+="no error naming the disconnect; "
    echo "--- ours (exit $orc, ${took} s after the kill):"
    cat "$oo"
    echo "--- $((SECONDS - start)) s"
    record "ours($survivor_role), peer killed" "peer killed mid-transfer" "1000000" "$why"
}

for pair in "ours ours" "ours rdma-core" "rdma-core ours"; do
    # shellcheck disable=SC2086
    set -- $pair
    run_mix "$1" "$2" "custom -T v" 64 1 -S 64 -C 100 -I 10 -T v
    run_mix "$1" "$2" "custom -T v -B 4096" 100000 1 -S 100000 -C 20 -I 2 -T v -B 4096
    run_mix "$1" "$2" "custom -T v" 1000000 1 -S 1000000 -C 5 -I 1 -T v
done
if first_kernel; then
    # rstream's default series: 4 latency and 4 bandwidth tests, a fixed
    # amount of work (100k 64-byte round trips, then 10k of 4 KiB, ...)
    # whose time follows the host's load: one loaded CI run spent 95 s on
    # the first test and 51 s on the second, and hit the 180 s limit in
    # the third. The limit bounds a hang, not the speed.
    limit=420
    run_mix rdma-core ours "default series -T v" "64-1m" 8 -T v
    limit=180
    run_mix ours rdma-core "custom -T b -T v" 4096 1 -S 4096 -C 200 -I 5 -T b -T v
    run_mix ours ours "custom -T b -T v" 4096 1 -S 4096 -C 200 -I 5 -T b -T v
    run_mix ours rdma-core "custom -T s -T v (TCP)" 100000 1 -S 100000 -C 20 -I 2 -T s -T v
    # rstream's fork mode: sockets, the server forking per connection.
    run_mix ours rdma-core "custom -T f -T v (TCP, forked server)" 100000 1 -S 100000 -C 20 -I 2 -T f -T v
    run_mix rdma-core ours "custom -T f -T v (TCP, forked server)" 100000 1 -S 100000 -C 20 -I 2 -T f -T v
    run_kill client
    run_kill server
fi

print_rows
