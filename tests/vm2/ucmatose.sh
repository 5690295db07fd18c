#!/bin/bash
# ucmatose over the two-guest RoCE v2 link: the server on guest a (its own
# address), the client on guest b connecting to RVERBS_PEER_ADDR, -c 4
# RC connections at once, -C 10 messages of 1024 bytes each way on each.
# rdma-core<->rdma-core, then ours in both directions, then ours<->ours
# with -V (every byte checked). Each side must exit 0 and print
# "data transfers complete" and "return status 0".
# A run's client starts only once its server listens: guest a opens a TCP
# port (RUN's port + 1000) after its rdma_cm listener is up, and guest b
# waits until it can connect there (a rejected connection would leave
# the server waiting for the rest of its -c connections).
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u
: "${RVERBS_ROLE:?not in a two-guest run: use cargo xtask vm2 -- sh $0}"
: "${RVERBS_PEER_ADDR:?not in a two-guest run: use cargo xtask vm2 -- sh $0}"
TARGET=${RVERBS_TARGET_DIR:-$PWD/target}
RVERBS="${RVERBS_BIN:-$TARGET/debug/rverbs}"
CONNS=4
COUNT=10
SIZE=1024
RUN_LIMIT=90
READY_LIMIT=30
ROWS=""
FAILED=0
RUN_NO=0
# Guest a's address (the harness's convention; b connects to it).
SELF=10.0.1.1

. "$(dirname "$0")/../vm/lib/net.sh"

tool() {
    case "$1" in
    rdma-core) echo "ucmatose" ;;
    rverbs) echo "$RVERBS ucmatose" ;;
    esac
}

# one SERVER_IMPL CLIENT_IMPL [-V]
one() {
    local server=$1 client=$2 v=${3:-} port log rc cmd spid why=""
    RUN_NO=$((RUN_NO + 1))
    port=$((18800 + RUN_NO))
    log=$(mktemp)
    rc=0
    if [ "$RVERBS_ROLE" = a ]; then
        cmd="$(tool "$server") -b $SELF -p $port -c $CONNS -C $COUNT -S $SIZE $v"
        echo "run $RUN_NO: server: $cmd"
        timeout -k 5 "$RUN_LIMIT" $cmd >"$log" 2>"$log.err" &
        spid=$!
        if wait_cm_listen "$port" "$spid"; then
            ready_port $((port + 1000)) "$READY_LIMIT" || why+="the client never came; "
        else
            why+="not listening; "
        fi
        wait "$spid" || rc=$?
        want="disconnected"
    else
        cmd="$(tool "$client") -s $RVERBS_PEER_ADDR -p $port -c $CONNS -C $COUNT -S $SIZE $v"
        echo "run $RUN_NO: client: $cmd"
        if await_ready $((port + 1000)) "$READY_LIMIT"; then
            timeout -k 5 "$RUN_LIMIT" $cmd >"$log" 2>"$log.err" || rc=$?
        else
            why+="the server never listened; "
        fi
        want="sending replies"
    fi
    sed 's/^/    /' "$log" "$log.err"
    [ "$rc" -ne 0 ] && why+="exit $rc; "
    for line in "$want" "data transfers complete" "return status 0"; do
        grep -qxF "$line" "$log" || why+="no '$line'; "
    done
    rm -f "$log" "$log.err"
    result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        FAILED=1
    fi
    echo "--- result: $result"
    ROWS="$ROWS$(printf '%-24s %-9s %6s  %s' "a:$server b:$client" ucmatose "$SIZE" "$result")
"
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "a:$server b:$client" "rdma_cm RC ucmatose (2 VMs)" "$SIZE" "$result" >>"$RVERBS_REPORT"
    fi
}

one rdma-core rdma-core
one rverbs rdma-core
one rdma-core rverbs
one rverbs rverbs -V

side=server
[ "$RVERBS_ROLE" = b ] && side=client && sleep 1
echo "ucmatose results of guest $RVERBS_ROLE ($side side, $CONNS connections, $COUNT messages each way on each):"
printf '%-24s %-9s %6s  %s\n' mix transport size result
printf '%s' "$ROWS"
[ "$FAILED" -eq 0 ]
