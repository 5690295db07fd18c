#!/bin/bash
# rdma_cm multicast over the two-guest RoCE v2 link: a receiver on guest a
# (bound to its own address) joins a group, the sender on guest b joins
# the same group and sends -C datagrams to it; they cross the link as IPv4
# multicast (guest a's netdev joined the IP group through the rdma_cm's
# full-member join). rdma-core's mckey against ours both ways, and ours
# against ours. Each run has its own group; guest b starts its sender
# once guest a says its receiver joined (a TCP connection to a port of
# the run, accepted by guest a after the receiver's "joined" line). A run
# passes on guest a when the receiver exits 0 with "data transfers
# complete" (mckey prints it only once -C completions arrived; ours only
# once -C datagrams of the right length did), on guest b when the sender
# exits 0 with that line.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u
: "${RVERBS_ROLE:?not in a two-guest run: use cargo xtask vm2 -- bash $0}"
: "${RVERBS_PEER_ADDR:?not in a two-guest run: use cargo xtask vm2 -- bash $0}"
TARGET=${RVERBS_TARGET_DIR:-$PWD/target}
RVERBS="${RVERBS_BIN:-$TARGET/debug/rverbs}"
COUNT=10
RUN_LIMIT=60
SYNC_LIMIT=40
ROWS=""
FAILED=0
RUN_NO=0
SELF=10.0.1.1
[ "$RVERBS_ROLE" = b ] && SELF=10.0.1.2

tool() {
    case "$1" in
    # mckey's stdout line-buffered, so that its "joined" line shows while
    # it runs; its sender held back by strace, each write() delayed
    # 100 ms (see tests/vm/mckey.sh: it destroys its QP right after
    # posting its sends unsignaled, before rxe sent them).
    rdma-core) [ "$2" = sender ] && echo "strace -f -qq -o /dev/null -e trace=write -e inject=write:delay_enter=100000 stdbuf -oL mckey" || echo "stdbuf -oL mckey" ;;
    rverbs) echo "$RVERBS mckey" ;;
    esac
}

# one RECEIVER_IMPL (guest a) SENDER_IMPL (guest b) SIZE
one() {
    rcv=$1 snd=$2 size=$3
    RUN_NO=$((RUN_NO + 1))
    group="239.1.4.$RUN_NO"
    sync_port=$((18800 + RUN_NO))
    log=$(mktemp)
    start=$(date +%s)
    rc=0
    if [ "$RVERBS_ROLE" = a ]; then
        # rdma-core's sender may lose some datagrams even slowed (see
        # tests/vm/mckey.sh): our receiver then waits for the first only.
        n=$COUNT
        [ "$rcv" = rverbs ] && [ "$snd" = rdma-core ] && n=1
        cmd="$(tool "$rcv" receiver) -m $group -b $SELF -C $n -S $size"
        echo "run $RUN_NO: receiver: $cmd"
        timeout -k 5 "$RUN_LIMIT" $cmd >"$log" 2>"$log.err" &
        pid=$!
        for _ in $(seq 300); do
            kill -0 "$pid" 2>/dev/null || break
            grep -q '^mckey: joined dgid: ' "$log" && break
            sleep 0.1
        done
        # Tell guest b (one accepted connection), bounded.
        timeout "$SYNC_LIMIT" /usr/bin/python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(1)
c, _ = s.accept()
c.close()
' "$sync_port" || echo "    (guest b never asked: sync port $sync_port)"
        wait "$pid" || rc=$?
    else
        cmd="$(tool "$snd" sender) -m $group -b $SELF -C $COUNT -S $size -s"
        # Wait until guest a's receiver joined.
        synced=0
        while [ $(($(date +%s) - start)) -lt "$SYNC_LIMIT" ]; do
            if (exec 3<>"/dev/tcp/$RVERBS_PEER_ADDR/$sync_port") 2>/dev/null; then
                synced=1
                break
            fi
            sleep 0.3
        done
        [ "$synced" = 1 ] || echo "    (guest a's receiver did not say it joined)"
        echo "run $RUN_NO: sender: $cmd"
        timeout -k 5 "$RUN_LIMIT" $cmd >"$log" 2>"$log.err" || rc=$?
    fi
    sed 's/^/    /' "$log" "$log.err"
    if [ "$rc" -ne 0 ]; then
        result="FAIL (exit $rc)"
    elif ! grep -qx "data transfers complete" "$log"; then
        result="FAIL (no 'data transfers complete')"
    else
        result="ok"
    fi
    echo "    ($(($(date +%s) - start)) s)"
    rm -f "$log" "$log.err"
    [ "$result" = ok ] || FAILED=1
    ROWS="$ROWS$(printf '%-30s %-16s %6s  %s' "a:$rcv(rcv) b:$snd(snd)" multicast "$size" "$result")
"
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "a:$rcv(rcv) b:$snd(snd)" "rdma_cm multicast (2 VMs)" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

one rdma-core rverbs 100
one rverbs rdma-core 100
one rverbs rverbs 1024

side=receiver
[ "$RVERBS_ROLE" = b ] && side=sender && sleep 1
echo "mckey results of guest $RVERBS_ROLE ($side side, $COUNT datagrams each):"
printf '%-30s %-16s %6s  %s\n' mix transport size result
printf '%s' "$ROWS"
[ "$FAILED" -eq 0 ]
