#!/bin/sh
# rping over the two-guest RoCE v2 link, connected through rdma_cm: the
# server on guest a (its own address), the client on guest b connecting to
# RVERBS_PEER_ADDR, with -v -V (the client checks every echoed byte and
# fails on a mismatch). rdma-core<->rdma-core, then ours in both
# directions. Each side must exit 0; the client must print one
# "ping data: rdma-ping-N: ..." line per ping.
set -u
: "${RVERBS_ROLE:?not in a two-guest run: use cargo xtask vm2 -- sh $0}"
: "${RVERBS_PEER_ADDR:?not in a two-guest run: use cargo xtask vm2 -- sh $0}"
TARGET=${RVERBS_TARGET_DIR:-$PWD/target}
RVERBS="${RVERBS_BIN:-$TARGET/debug/rverbs}"
COUNT=10
RUN_LIMIT=60
CONNECT_LIMIT=25
ROWS=""
FAILED=0
RUN_NO=0
# Guest a's address (the harness's convention; b connects to it).
SELF=10.0.1.1

tool() {
    case "$1" in
    rdma-core) echo "rping" ;;
    rverbs) echo "$RVERBS rping" ;;
    esac
}

# one SERVER_IMPL CLIENT_IMPL SIZE
one() {
    server=$1 client=$2 size=$3
    RUN_NO=$((RUN_NO + 1))
    port=$((18700 + RUN_NO))
    log=$(mktemp)
    start=$(date +%s)
    if [ "$RVERBS_ROLE" = a ]; then
        cmd="$(tool "$server") -s -v -a $SELF -p $port -S $size"
        echo "run $RUN_NO: server: $cmd"
        rc=0
        timeout -k 5 "$RUN_LIMIT" $cmd >"$log" 2>"$log.err" || rc=$?
        want=0
    else
        cmd="$(tool "$client") -c -v -V -a $RVERBS_PEER_ADDR -p $port -S $size -C $COUNT"
        echo "run $RUN_NO: client: $cmd"
        while :; do
            rc=0
            # stdout apart: rping's buffered lines would be cut by stderr.
            timeout -k 5 "$RUN_LIMIT" $cmd >"$log" 2>"$log.err" || rc=$?
            # Only a rejected connection (no listener yet) is retried.
            [ "$rc" -ne 0 ] && grep -qi "rejected" "$log" "$log.err" || break
            [ $(($(date +%s) - start)) -lt "$CONNECT_LIMIT" ] || break
            sleep 0.5
        done
        want=$COUNT
    fi
    sed 's/^/    /' "$log" "$log.err"
    got=$(grep -c '^ping data: rdma-ping-' "$log")
    if [ "$rc" -ne 0 ]; then
        result="FAIL (exit $rc)"
    elif [ "$RVERBS_ROLE" = b ] && [ "$got" -ne "$want" ]; then
        result="FAIL ($got of $want pings)"
    else
        result="ok"
    fi
    rm -f "$log" "$log.err"
    [ "$result" = ok ] || FAILED=1
    ROWS="$ROWS$(printf '%-24s %-9s %6s  %s' "a:$server b:$client" rping "$size" "$result")
"
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "a:$server b:$client" "rdma_cm rping (2 VMs)" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

one rdma-core rdma-core 64
one rverbs rdma-core 64
one rdma-core rverbs 64
one rverbs rverbs 4096

side=server
[ "$RVERBS_ROLE" = b ] && side=client && sleep 1
echo "rping results of guest $RVERBS_ROLE ($side side, $COUNT pings each):"
printf '%-24s %-9s %6s  %s\n' mix transport size result
printf '%s' "$ROWS"
[ "$FAILED" -eq 0 ]
