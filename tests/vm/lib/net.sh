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
