#!/bin/bash
# rsockets across the two-guest RoCE v2 link: `rverbs rstream` and
# rdma-core's `rstream`, the server on guest a, the client on guest b
# (RVERBS_PEER_ADDR), both ways and ours with ours, 100 KB transfers with
# every byte verified (-T v). A run's client starts once its server
# listens (guest a opens a TCP port, the run's port + 1000, after its
# rdma_cm listener is up).
#
# Then the link is cut under a stream (last: it stays cut; `cargo xtask
# test` mends it before its next script): guest b's
# client (ours, blocking, keep-alive every second) sends 1 MB transfers to
# guest a's server (ours, blocking, keep-alive every second); once a has
# received a good amount, a's neighbour entry for b is replaced by a MAC
# nobody has, so that nothing of a's reaches b. Both sides must then
# exit non-zero within 30 s, with an error, though each would otherwise
# wait 120 s for its peer: the writer's RDMA WRITEs exhaust their
# transport retries; the reader's keep-alive probes (and credit grants)
# do too, unless the writer's exit reached it first as a disconnect
# (b's packets still reach a): either is an error naming the failure.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u
: "${RVERBS_ROLE:?not in a two-guest run: use cargo xtask vm2 -- sh $0}"
: "${RVERBS_PEER_ADDR:?not in a two-guest run: use cargo xtask vm2 -- sh $0}"
: "${RVERBS_RUN_DIR:?not in a two-guest run}"
: "${RVERBS_PEER_RUN_DIR:?not in a two-guest run}"
TARGET=${RVERBS_TARGET_DIR:-$PWD/target}
RVERBS="${RVERBS_BIN:-$TARGET/debug/rverbs}"
RUN_LIMIT=90
READY_LIMIT=30
ROWS=""
FAILED=0
RUN_NO=0
SELF=10.0.1.1

. "$(dirname "$0")/../vm/lib/net.sh"

tool() {
    case "$1" in
    rdma-core) echo "stdbuf -oL rstream" ;;
    rverbs) echo "$RVERBS rstream --timeout 30" ;;
    esac
}

row() {
    local mix=$1 what=$2 size=$3 why=$4 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        FAILED=1
    fi
    echo "--- result: $result"
    ROWS="$ROWS$(printf '%-26s %-28s %8s  %s' "$mix" "$what" "$size" "$result")
"
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "rsockets rstream $what (2 VMs)" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

# one SERVER_IMPL CLIENT_IMPL: a verified 100 KB run.
one() {
    local server=$1 client=$2 port log rc=0 cmd spid why="" opts="-S 100000 -C 20 -I 2 -T v"
    RUN_NO=$((RUN_NO + 1))
    port=$((18900 + RUN_NO))
    log=$(mktemp)
    if [ "$RVERBS_ROLE" = a ]; then
        cmd="$(tool "$server") -b $SELF -p $port $opts"
        echo "run $RUN_NO: server: $cmd"
        timeout -k 5 "$RUN_LIMIT" $cmd >"$log" 2>&1 &
        spid=$!
        if wait_cm_listen "$port" "$spid"; then
            ready_port $((port + 1000)) "$READY_LIMIT" || why+="the client never came; "
        else
            why+="not listening; "
        fi
        wait "$spid" || rc=$?
    else
        cmd="$(tool "$client") -s $RVERBS_PEER_ADDR -p $port $opts"
        echo "run $RUN_NO: client: $cmd"
        if await_ready $((port + 1000)) "$READY_LIMIT"; then
            timeout -k 5 "$RUN_LIMIT" $cmd >"$log" 2>&1 || rc=$?
        else
            why+="the server never listened; "
        fi
    fi
    sed 's/^/    /' "$log"
    [ "$rc" -ne 0 ] && why+="exit $rc; "
    grep -q "^custom " "$log" || why+="no result line; "
    grep -q "data verification failed" "$log" && why+="data verification failed; "
    rm -f "$log"
    row "a:$server b:$client" "custom -T v" 100000 "$why"
}

# cut: the link cut under an open stream (see the top).
cut() {
    local port=18990 log="$RVERBS_RUN_DIR/cut.log" pid rc=0 why="" start took
    local opts="-S 1000000 -C 100000 -I 1 -T b -k 1"
    local cmd counter=/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts
    if [ "$RVERBS_ROLE" = a ]; then
        cmd="$RVERBS rstream --timeout 120 -b $SELF -p $port $opts"
        echo "cut: server: $cmd"
        $cmd >"$log" 2>&1 &
        pid=$!
        wait_cm_listen "$port" "$pid" && ready_port $((port + 1000)) "$READY_LIMIT"
        local base got=0 until_t=$(($(date +%s) + 60))
        base=$(cat "$counter")
        while [ "$got" -lt 2000 ] && [ "$(date +%s)" -lt "$until_t" ]; do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
            got=$(($(cat "$counter") - base))
        done
        # The link stays up but leads nowhere: guest a's packets to b go
        # to a MAC nobody has. (Taking a's eth0 down would not do: rxe
        # then holds a's sends back instead of sending them, and neither
        # retries nor fails them.) b's packets still reach a, a's ACKs do
        # not reach b: both sides' transport retries run out.
        echo "cut: $got RoCE packets in; a's path to b now leads to a dead MAC"
        ip neigh replace "$RVERBS_PEER_ADDR" lladdr 02:00:00:00:00:99 dev eth0 nud permanent ||
            why+="ip neigh replace failed; "
        : >"$RVERBS_RUN_DIR/cut"
    else
        cmd="$RVERBS rstream --timeout 120 -s $RVERBS_PEER_ADDR -p $port $opts"
        echo "cut: client: $cmd"
        await_ready $((port + 1000)) "$READY_LIMIT" || why+="the server never listened; "
        $cmd >"$log" 2>&1 &
        pid=$!
        local until_t=$(($(date +%s) + 90))
        while [ ! -e "$RVERBS_PEER_RUN_DIR/cut" ] && [ "$(date +%s)" -lt "$until_t" ]; do
            sleep 0.1
        done
        [ -e "$RVERBS_PEER_RUN_DIR/cut" ] || why+="guest a never cut the link; "
    fi
    start=$(date +%s)
    while kill -0 "$pid" 2>/dev/null && [ $(($(date +%s) - start)) -lt 30 ]; do
        sleep 0.2
    done
    took=$(($(date +%s) - start))
    if kill -0 "$pid" 2>/dev/null; then
        why+="still waiting 30 s after the cut; "
        kill -9 "$pid"
    fi
    wait "$pid" || rc=$?
    echo "cut: $RVERBS_ROLE exited $rc, ${took} s after the cut:"
    sed 's/^/    /' "$log"
    [ "$rc" -eq 0 ] && why+="exit 0 after the cut; "
    grep -qiE "abort|failed|reset|disconnect" "$log" || why+="no error naming the failure; "
    local side=writer
    [ "$RVERBS_ROLE" = a ] && side="reader, keep-alive"
    row "a:rverbs b:rverbs" "link cut ($side)" 1000000 "$why"
}

one rdma-core rverbs
one rverbs rdma-core
one rverbs rverbs
cut

side=server
[ "$RVERBS_ROLE" = b ] && side=client && sleep 1
echo "rstream results of guest $RVERBS_ROLE ($side side):"
printf '%-26s %-28s %8s  %s\n' mix test size result
printf '%s' "$ROWS"
[ "$FAILED" -eq 0 ]
