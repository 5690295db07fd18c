# Shell helpers shared by the VM scripts (sourced, not run as a test).

# wait_listen PORT PID [TRIES]: waits until something listens on TCP port
# PORT, without connecting to it (the servers accept exactly one
# connection). Fails after TRIES checks 0.1 s apart (default 100, ~10 s), or
# as soon as process PID (the server) is gone.
wait_listen() {
    local hex
    hex=$(printf '%04X' "$1")
    for _ in $(seq "${3:-100}"); do
        kill -0 "$2" 2>/dev/null || return 1
        if awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { f = 1 } END { exit !f }' \
            /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# wait_cm_listen PORT PID: waits until an rdma_cm id listens on PORT
# (`rdma res show cm_id`, any port space), without connecting to it. Fails
# after ~10 s, or as soon as process PID (the server) is gone.
wait_cm_listen() {
    for _ in $(seq 100); do
        kill -0 "$2" 2>/dev/null || return 1
        if rdma res show cm_id 2>/dev/null | grep "state LISTEN" | grep -q ":$1\b"; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# run_cm_pair PORT LIMIT SERVER_CMD SERVER_OUT CLIENT_CMD CLIENT_OUT: starts
# SERVER_CMD in the background (stdout to SERVER_OUT, stderr to
# SERVER_OUT.err), waits until it listens on rdma_cm PORT, runs CLIENT_CMD
# (to CLIENT_OUT and CLIENT_OUT.err, which exist afterwards whatever
# happened), then gives the server ~10 s to end by
# itself before stopping it. Each command is bounded by timeout LIMIT; the
# commands are eval'ed (quoted words stay words). Sets SERVER_RC and
# CLIENT_RC (CLIENT_RC 255: the server never listened, the client did not
# run).
run_cm_pair() {
    local port=$1 limit=$2 scmd=$3 so=$4 ccmd=$5 co=$6 spid
    SERVER_RC=0
    CLIENT_RC=0
    : >"$co"
    : >"$co.err"
    eval "timeout $limit $scmd" >"$so" 2>"$so.err" &
    spid=$!
    if wait_cm_listen "$port" "$spid"; then
        eval "timeout $limit $ccmd" >"$co" 2>"$co.err" || CLIENT_RC=$?
    else
        echo "server not listening on $port" >>"$co.err"
        CLIENT_RC=255
    fi
    for _ in $(seq 100); do
        kill -0 "$spid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$spid" 2>/dev/null
    wait "$spid" || SERVER_RC=$?
}

# Waits (up to ~10 s) until process $1 owns a QP in RTS, per iproute2.
wait_rts() {
    for _ in $(seq 100); do
        kill -0 "$1" 2>/dev/null || return 1
        if rdma res show qp 2>/dev/null | grep " pid $1 " | grep -q "state RTS"; then
            return 0
        fi
        sleep 0.1
    done
    return 1
}

# Two guests of `cargo xtask vm2` telling each other a server is up, over
# TCP (the guests share no pipe): ready_port PORT [SECS] accepts one TCP
# connection on PORT within SECS (default 30) on the server's guest;
# await_ready PORT [SECS] waits until RVERBS_PEER_ADDR:PORT accepts one,
# on the client's. Both fail when the time is up.
ready_port() {
    timeout "${2:-30}" /usr/bin/python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[1])))
s.listen(1)
c, _ = s.accept()
c.close()
' "$1"
}

await_ready() {
    local start
    start=$(date +%s)
    while [ $(($(date +%s) - start)) -lt "${2:-30}" ]; do
        if timeout 2 bash -c "exec 3<>/dev/tcp/$RVERBS_PEER_ADDR/$1" 2>/dev/null; then
            return 0
        fi
        sleep 0.3
    done
    return 1
}
