# Shared by tests/vm2/*_pingpong.sh (sourced, not a test item itself: only
# tests/vm2/*.sh are items). Runs rdma-core's ibv_*_pingpong and, when it is
# built, our `rverbs *-pingpong` across the two linked guests of
# `cargo xtask vm2`: the server always runs on guest a, the client on guest
# b (connecting to RVERBS_PEER_ADDR). Both guests run the same list of
# runs in the same order, each run on its own TCP port, so they stay in
# step without any other coordination: a client retries connecting (the
# server may start a moment later) for a bounded time; every process is
# bounded with timeout(1).

: "${RVERBS_ROLE:?not in a two-guest run: use cargo xtask vm2 -- sh $0}"
: "${RVERBS_PEER_ADDR:?not in a two-guest run: use cargo xtask vm2 -- sh $0}"
case "$RVERBS_ROLE" in
a | b) ;;
*)
    echo "RVERBS_ROLE must be a or b, got '$RVERBS_ROLE'" >&2
    exit 2
    ;;
esac
TARGET=${RVERBS_TARGET_DIR:-$PWD/target}
RVERBS="${RVERBS_BIN:-$TARGET/debug/rverbs}"
# Exchanges per run: each round trip takes tens of ms on the emulated link.
ITERS=${PP_ITERS:-20}
# Bound on one pingpong process and on a client's connection attempts.
RUN_LIMIT=${PP_RUN_LIMIT:-40}
CONNECT_LIMIT=${PP_CONNECT_LIMIT:-25}
ROWS=""
FAILED=0
RUN_NO=0

# have_rverbs SUBCOMMAND: whether our tool is built and has SUBCOMMAND.
have_rverbs() {
    [ -x "$RVERBS" ] && "$RVERBS" "$1" --help >/dev/null 2>&1
}

# tool IMPL TRANSPORT: the command of one implementation's pingpong.
tool() {
    case "$1" in
    rdma-core) echo "ibv_$2_pingpong" ;;
    rverbs) echo "$RVERBS $2-pingpong" ;;
    esac
}

# pp TRANSPORT SERVER_IMPL CLIENT_IMPL SIZE: one run. Guest a runs the
# server of SERVER_IMPL, guest b the client of CLIENT_IMPL; each side
# checks its own exit status and byte-count line and adds a table row.
pp() {
    transport=$1 server=$2 client=$3 size=$4
    RUN_NO=$((RUN_NO + 1))
    port=$((18600 + RUN_NO))
    bytes=$((size * ITERS * 2))
    if [ "$RVERBS_ROLE" = a ]; then
        me=$server
    else
        me=$client
    fi
    cmd="$(tool "$me" "$transport") -d rxe0 -g 1 -n $ITERS -s $size -p $port"
    log=$(mktemp)
    start=$(date +%s)
    if [ "$RVERBS_ROLE" = a ]; then
        echo "run $RUN_NO: server: $cmd"
        rc=0
        timeout -k 5 "$RUN_LIMIT" $cmd >"$log" 2>&1 || rc=$?
    else
        echo "run $RUN_NO: client: $cmd $RVERBS_PEER_ADDR"
        while :; do
            rc=0
            timeout -k 5 "$RUN_LIMIT" $cmd "$RVERBS_PEER_ADDR" >"$log" 2>&1 || rc=$?
            # Only a refused connection is retried (the server is not up yet).
            [ "$rc" -ne 0 ] && grep -qi "couldn't connect to $RVERBS_PEER_ADDR" "$log" || break
            [ $(($(date +%s) - start)) -lt "$CONNECT_LIMIT" ] || break
            sleep 0.3
        done
    fi
    sed 's/^/    /' "$log"
    if [ "$rc" -ne 0 ]; then
        result="FAIL (exit $rc)"
    elif ! grep -q "^$bytes bytes in " "$log"; then
        result="FAIL (no '$bytes bytes in' line)"
    elif ! grep -q "^$ITERS iters in " "$log"; then
        result="FAIL (no '$ITERS iters in' line)"
    else
        result="ok"
    fi
    rm -f "$log"
    [ "$result" = ok ] || FAILED=1
    ROWS="$ROWS$(printf '%-24s %-9s %6s  %s' "a:$server b:$client" "$transport" "$size" "$result")
"
    # The harness merges both guests' rows into the matrix at the end.
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "a:$server b:$client" "$transport (2 VMs)" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

# report: prints the table of this guest's side and exits 1 on a failure.
report() {
    side=server
    # b reports a moment later so that the two tables do not interleave
    # on the console.
    [ "$RVERBS_ROLE" = b ] && side=client && sleep 1
    echo "pingpong results of guest $RVERBS_ROLE ($side side, $ITERS exchanges each):"
    printf '%-24s %-9s %6s  %s\n' mix transport size result
    printf '%s' "$ROWS"
    [ "$FAILED" -eq 0 ]
}
