#!/bin/bash
# rdma_cm RC, many connections at once: `rverbs ucmatose` with rdma-core's
# `ucmatose` (cmatose) on rxe0 (10.0.0.1). Each run opens -c 4 RC
# connections through the connection manager; each side posts its
# receives before connecting/accepting, sends -C 10 messages on every
# connection and waits for the peer's, then the server disconnects them
# all. Three mixes (ours<->ours with -V, our server with their client,
# their server with our client), for two sizes on the first kernel (one
# message of 100 bytes, one of 4096 over four 1024-byte packets) and one
# elsewhere: a run passes when both processes exit 0 and each prints
# every line cmatose prints on its side, in order ("data transfers
# complete" once all -C messages of every connection arrived; ours also
# checked their size and order, and with -V their bytes).
# Rows go to the interop matrix; exits 1 if any failed.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
addr=10.0.0.1
conns=4
count=10
port=7471
limit=90
work=$(mktemp -d /tmp/ucmatose.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "ucmatose: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
if ! command -v ucmatose >/dev/null; then
    echo "ucmatose: rdma-core's ucmatose (rdmacm-utils) is missing" >&2
    exit 1
fi

rows=()
failed=0
run_no=0

. "$(dirname "$0")/lib/net.sh"
. "$(dirname "$0")/lib/ourlib.sh"

# What cmatose prints on each side, in this order.
server_lines=("cmatose: starting server" "initiating data transfers" "completing sends"
    "receiving data transfers" "data transfers complete" "cmatose: disconnecting"
    "disconnected" "test complete" "return status 0")
client_lines=("cmatose: starting client" "cmatose: connecting" "receiving data transfers"
    "sending replies" "data transfers complete" "test complete" "return status 0")

record() {
    local mix=$1 size=$2 why=$3 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    rows+=("$(printf '%-26s %-9s %-6s %s' "$mix" ucmatose "$size" "$result")")
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "rdma_cm RC (ucmatose)" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

cmd_of() {
    local who=$1 role=$2 size=$3 v=""
    if [ "$who" = ours ]; then
        printf '%q ucmatose' "$ours"
        # -V only when both sides are ours (cmatose sends unset bytes).
        [ "$4" = ours ] && v=" -V"
    elif [ "$who" = ourlib ]; then
        printf '%sucmatose' "$(ourlib_env)"
    else
        printf 'ucmatose'
    fi
    if [ "$role" = server ]; then
        printf ' -b %s' "$addr"
    else
        printf ' -s %s' "$addr"
    fi
    printf ' -p %s -c %s -C %s -S %s%s' "$port" "$conns" "$count" "$size" "$v"
}

# check_out FILE WHO LINE...: every LINE, whole, in FILE, in this order.
check_out() {
    local f=$1 who=$2 at=0 n
    shift 2
    for line in "$@"; do
        n=$(grep -nxF -- "$line" "$f" | head -1 | cut -d: -f1)
        if [ -z "$n" ]; then
            echo "$who: no '$line'; "
            return
        fi
        if [ "$n" -le "$at" ]; then
            echo "$who: '$line' out of order; "
            return
        fi
        at=$n
    done
}

run_mix() {
    local srv=$1 cli=$2 size=$3
    local mix="$srv(server)<->$cli(client)"
    [ "$srv" = "$cli" ] && mix="$srv<->$cli"
    run_no=$((run_no + 1))
    local so="$work/$run_no.server" co="$work/$run_no.client" why=""
    local other=rdma-core
    [ "$srv" = ours ] && [ "$cli" = ours ] && other=ours
    local scmd ccmd started
    scmd=$(cmd_of "$srv" server "$size" "$other")
    ccmd=$(cmd_of "$cli" client "$size" "$other")
    echo "=== $mix size $size ($conns connections, $count messages each way on each)"
    echo "server: $scmd"
    echo "client: $ccmd"
    started=$(date +%s)
    run_cm_pair "$port" "$limit" "$scmd" "$so" "$ccmd" "$co"
    [ "$SERVER_RC" -ne 0 ] && why+="server exit $SERVER_RC; "
    [ "$CLIENT_RC" -ne 0 ] && why+="client exit $CLIENT_RC; "
    why+=$(check_out "$so" server "${server_lines[@]}")
    why+=$(check_out "$co" client "${client_lines[@]}")
    echo "--- server output:"
    cat "$so" "$so.err" 2>/dev/null
    echo "--- client output:"
    cat "$co" "$co.err" 2>/dev/null
    echo "--- took $(($(date +%s) - started)) s"
    record "$mix" "$size" "$why"
}

for size in $(kernel_sizes 100 4096 -- 1024); do
    run_mix ours ours "$size"
    run_mix ours rdma-core "$size"
    run_mix rdma-core ours "$size"
done
# rdma-core's ucmatose on our libibverbs.so.1 against ucmatose on
# rdma-core's, both ways.
if ourlib_first_kernel ucmatose; then
    ourlib_check ucmatose -h
    run_mix ourlib rdma-core 1024
    run_mix rdma-core ourlib 1024
fi

echo
printf '%-26s %-9s %-6s %s\n' mix transport size result
for r in "${rows[@]}"; do
    echo "$r"
done
echo "ucmatose: ${#rows[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
