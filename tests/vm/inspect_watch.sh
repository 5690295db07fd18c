#!/bin/bash
# `rverbs inspect --pid PID --watch` in a plain terminal: tmux runs it
# against a running ibv_rc_pingpong client; the captured pane must show
# the header, the client's SQ, RQ and CQ rows (the CQ consuming entries:
# a positive CONSUMED/s while the ping-pong runs) and the device's RNR and
# retry counters; `q` typed into the pane must end the program (the
# program exits 0).
# The terminal view does not depend on the kernel (inspect.sh reads the
# queues on every kernel):
# xtask: first kernel only
# The VM suite runs scripts with /bin/sh: this one needs bash.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
dev=rxe0
port=19760
work=$(mktemp -d /tmp/watch.XXXXXX)
export TMUX_TMPDIR=$work TERM=xterm
pids=()
cleanup() {
    tmux kill-server 2>/dev/null
    local p
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT

. "$(dirname "$0")/lib/net.sh"

command -v tmux >/dev/null || { echo "FAIL: tmux is not installed"; exit 1; }
failed=0
fail() {
    echo "FAIL: $*"
    failed=1
}

cmd=(ibv_rc_pingpong -d "$dev" -g 1 -n 100000000 -p "$port")
"${cmd[@]}" >"$work/server" 2>&1 &
pids+=($!)
wait_listen "$port" "${pids[0]}" || { echo "FAIL: server not listening"; cat "$work/server"; exit 1; }
"${cmd[@]}" 127.0.0.1 >"$work/client" 2>&1 &
client=$!
pids+=("$client")
wait_rts "$client" || { echo "FAIL: client QP never reached RTS"; cat "$work/client"; exit 1; }

tmux new-session -d -s watch -x 160 -y 40 \
    "$ours inspect --pid $client --watch --interval 1 --timeout 300 2>$work/err; echo \$? >$work/status; sleep 30"
# Several refreshes (under TCG one inspection takes a while).
pane=""
for _ in $(seq 60); do
    sleep 1
    pane=$(tmux capture-pane -p -t watch 2>/dev/null)
    # A rate needs two refreshes: wait for a numeric CONSUMED/s on the CQ.
    if echo "$pane" | awk '$1 == "CQ" && $NF ~ /^[0-9]+$/ && $NF > 0 { f = 1 } END { exit !f }'; then
        break
    fi
done
echo "--- the pane:"
echo "$pane"
echo "---"
echo "$pane" | grep -q "process $client (ibv_rc_pingpong), every 1.0 s; q quits" ||
    fail "no header naming process $client"
for kind in SQ RQ CQ; do
    echo "$pane" | grep -q "^$kind  *rxe0 " || fail "no $kind row for rxe0"
done
echo "$pane" | awk '$1 == "CQ" && $NF ~ /^[0-9]+$/ && $NF > 0 && $NF < 10000000 { f = 1 } END { exit !f }' ||
    fail "the CQ row shows no plausible completions consumed per second (0 < rate < 10^7) while the ping-pong runs"
echo "$pane" | grep -q "^rxe0 port 1:.*rnr" || fail "no RNR counters of rxe0"

# q quits: the program exits 0 (the session's shell then records it).
tmux send-keys -t watch q
for _ in $(seq 100); do
    [ -s "$work/status" ] && break
    sleep 0.1
done
if [ ! -s "$work/status" ]; then
    fail "q did not end the watch"
elif [ "$(cat "$work/status")" != 0 ]; then
    fail "the watch exited $(cat "$work/status"): $(cat "$work/err")"
else
    echo "ok   q quit the watch (exit 0)"
fi

if [ "$failed" = 0 ]; then
    echo "inspect --watch: OK"
fi
exit "$failed"
