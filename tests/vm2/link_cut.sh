#!/bin/sh
# Link cut under RC traffic (two-guest item; run it alone with
# `cargo xtask vm2 -- sh tests/vm2/link_cut.sh`). Guest b runs our
# `rverbs perf write bw` server, guest a the client, which keeps RDMA
# WRITEs in flight (in a pingpong the side waiting for a message would
# wait forever). Once b has received a good amount of RoCE traffic it cuts
# its link (`ip link set eth0 down`). a's QP must then give up by itself:
# the client must exit non-zero within a bound after the cut, reporting the
# transport retry error (completion status 12, IBV_WC_RETRY_EXC_ERR), not
# hang.
#
# The client's QP gets a transport retry count of 2 (--retry_count): rxe
# treats a QP retry_cnt of 7, which ibv_*_pingpong and perftest's default
# connection use, as "retry forever" (drivers/infiniband/sw/rxe/rxe_comp.c
# only decrements retry_cnt when it is not 7), so with 7 the sender would
# never fail. With -u 14 a retry waits 4.096 us * 2^14 = 67 ms.
#
# The guests coordinate through their run folders in the shared workspace
# (the link is down by then). Every wait is bounded by the clock.
# xtask: last in the pair
set -u
: "${RVERBS_ROLE:?not in a two-guest run: use cargo xtask vm2 -- sh $0}"
: "${RVERBS_PEER_ADDR:?not in a two-guest run}"
: "${RVERBS_RUN_DIR:?not in a two-guest run}"
: "${RVERBS_PEER_RUN_DIR:?not in a two-guest run}"
PORT=18700
TARGET=${RVERBS_TARGET_DIR:-$PWD/target}
RVERBS="${RVERBS_BIN:-$TARGET/debug/rverbs}"
# One 1 KiB RDMA WRITE per packet, far more than fit in the run, over the
# IPv4 RoCE v2 GID (index 1). Our stdout is line-buffered, so the
# connection shows in the log at once.
BW="$RVERBS perf write bw -d rxe0 -x 1 -p $PORT -s 1024 -n 1000000 -u 14"
RETRY_COUNT=2
# RoCE packets b must have received before it cuts the link.
MIN_PKTS=1000
# Seconds a's client may take to fail once it sees the cut.
FAIL_BOUND=30
COUNTER=/sys/class/infiniband/rxe0/ports/1/hw_counters/rcvd_pkts
LOG="$RVERBS_RUN_DIR/bw.log"

now() { date +%s; }

# wait_file PATH SECS: waits (bounded) for a file of the other guest.
wait_file() {
    until_t=$(($(now) + $2))
    while [ ! -e "$1" ]; do
        [ "$(now)" -lt "$until_t" ] || return 1
        sleep 0.1
    done
}

[ -x "$RVERBS" ] || {
    echo "FAIL: $RVERBS is not built (cargo build -p rverbs-cli)"
    exit 1
}

if [ "$RVERBS_ROLE" = b ]; then
    [ -r "$COUNTER" ] || {
        echo "FAIL: no $COUNTER"
        exit 1
    }
    base=$(cat "$COUNTER")
    echo "server: $BW"
    $BW >"$LOG" 2>&1 &
    server=$!
    until_t=$(($(now) + 60))
    got=0
    while [ "$got" -lt "$MIN_PKTS" ]; do
        if [ "$(now)" -ge "$until_t" ] || ! kill -0 "$server" 2>/dev/null; then
            echo "FAIL: only $got RoCE packets arrived before the server ended or 60 s passed:"
            sed 's/^/    /' "$LOG"
            kill "$server" 2>/dev/null
            : >"$RVERBS_RUN_DIR/cut"
            exit 1
        fi
        sleep 0.1
        got=$(($(cat "$COUNTER") - base))
    done
    echo "received $got RoCE packets: cutting the link (ip link set eth0 down)"
    ip link set eth0 down || {
        echo "FAIL: ip link set eth0 down failed"
        exit 1
    }
    : >"$RVERBS_RUN_DIR/cut"
    # Stay up, link down, until a's client has ended.
    wait_file "$RVERBS_PEER_RUN_DIR/done" 90 || echo "note: guest a did not report back within 90 s"
    # The link back up before the server's QP is destroyed: with it down,
    # rxe holds the QP (and its process) for about 50 s, then warns.
    ip link set eth0 up || echo "note: ip link set eth0 up failed"
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null
    exit 0
fi

# Guest a: the client, retried while the server is not up yet.
cmd="$BW --retry_count $RETRY_COUNT $RVERBS_PEER_ADDR"
echo "client: $cmd"
until_t=$(($(now) + 30))
while :; do
    $cmd >"$LOG" 2>&1 &
    client=$!
    while kill -0 "$client" 2>/dev/null && ! grep -q "remote address" "$LOG"; do
        sleep 0.1
    done
    grep -q "remote address" "$LOG" && break
    wait "$client"
    if [ "$(now)" -ge "$until_t" ]; then
        echo "FAIL: the client did not connect within 30 s:"
        sed 's/^/    /' "$LOG"
        : >"$RVERBS_RUN_DIR/done"
        exit 1
    fi
    sleep 0.5
done
echo "connected; waiting for guest b to cut the link"
if ! wait_file "$RVERBS_PEER_RUN_DIR/cut" 90; then
    echo "FAIL: guest b did not cut the link within 90 s"
    kill -9 "$client" 2>/dev/null
    : >"$RVERBS_RUN_DIR/done"
    exit 1
fi
cut=$(now)
echo "guest b cut the link; the client must fail within $FAIL_BOUND s"
while kill -0 "$client" 2>/dev/null && [ "$(now)" -lt $((cut + FAIL_BOUND)) ]; do
    sleep 0.1
done
hung=no
if kill -0 "$client" 2>/dev/null; then
    hung=yes
    kill -9 "$client"
fi
rc=0
wait "$client" || rc=$?
took=$(($(now) - cut))
: >"$RVERBS_RUN_DIR/done"
echo "client log:"
sed 's/^/    /' "$LOG"
echo "client exit status $rc, $took s after the cut was seen"
if [ "$hung" = yes ]; then
    echo "FAIL: the client still ran $FAIL_BOUND s after the link was cut (hang)"
    exit 1
fi
if [ "$rc" -eq 0 ]; then
    echo "FAIL: the client exited 0 although the link was cut"
    exit 1
fi
if ! grep -q "status transport retry counter exceeded (12)" "$LOG"; then
    echo "FAIL: no 'status transport retry counter exceeded (12)' (IBV_WC_RETRY_EXC_ERR) in the client's log"
    exit 1
fi
echo "ok: the client failed with a transport retry error (status 12) $took s after the cut"
