#!/bin/bash
# rdma_cm datagrams: `rverbs udaddy` with rdma-core's `udaddy` on rxe0
# (10.0.0.1), their UD QPs found through the connection manager's UDP
# port space (SIDR). Three mixes (ours<->ours with -V, our server with
# their client, their server with our client), for two sizes: a run
# passes when both processes exit 0 and both print "data transfers
# complete" and "return status 0" (each side has received all -C
# datagrams; ours also checked their size, and with -V their bytes).
# Then the client with -t and -f ip, both ways (ours must report the
# traffic class in its address handle). Rows go to the interop matrix;
# exits 1 if any failed.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
addr=10.0.0.1
count=10
# udaddy's port (it has no option for it).
port=7174
limit=60
work=$(mktemp -d /tmp/udaddy.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "udaddy: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
if ! command -v udaddy >/dev/null; then
    echo "udaddy: rdma-core's udaddy (rdmacm-utils) is missing" >&2
    exit 1
fi

rows=()
failed=0
run_no=0
# Options for the clients of the runs below (udaddy's -t and -f).
client_extra=""

. "$(dirname "$0")/lib/net.sh"
. "$(dirname "$0")/lib/ourlib.sh"

record() {
    local mix=$1 size=$2 why=$3 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    rows+=("$(printf '%-26s %-9s %-6s %s' "$mix" udaddy "$size" "$result")")
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "rdma_cm UD (udaddy)" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

cmd_of() {
    local who=$1 role=$2 size=$3 v=""
    if [ "$who" = ours ]; then
        printf '%q udaddy' "$ours"
        # -V only when both sides are ours (udaddy sends unset bytes).
        [ "$4" = ours ] && v=" -V"
    elif [ "$who" = ourlib ]; then
        printf '%sudaddy' "$(ourlib_env)"
    else
        printf 'udaddy'
    fi
    if [ "$role" = server ]; then
        printf ' -b %s -S %s -C %s%s' "$addr" "$size" "$count" "$v"
    else
        printf ' -s %s -S %s -C %s%s%s' "$addr" "$size" "$count" "$v" "$client_extra"
    fi
}

check_out() {
    local f=$1 who=$2
    grep -qx "data transfers complete" "$f" || { echo "$who did not complete; "; return; }
    grep -qx "return status 0" "$f" || echo "$who: no 'return status 0'; "
}

run_mix() {
    local srv=$1 cli=$2 size=$3
    local mix="$srv(server)<->$cli(client)"
    [ "$srv" = "$cli" ] && mix="$srv<->$cli"
    run_no=$((run_no + 1))
    local so="$work/$run_no.server" co="$work/$run_no.client" why=""
    local other=rdma-core
    [ "$srv" = ours ] && [ "$cli" = ours ] && other=ours
    local scmd ccmd
    scmd=$(cmd_of "$srv" server "$size" "$other")
    ccmd=$(cmd_of "$cli" client "$size" "$other")
    echo "=== $mix size $size"
    echo "server: $scmd"
    echo "client: $ccmd"
    run_cm_pair "$port" "$limit" "$scmd" "$so" "$ccmd" "$co"
    [ "$SERVER_RC" -ne 0 ] && why+="server exit $SERVER_RC; "
    [ "$CLIENT_RC" -ne 0 ] && why+="client exit $CLIENT_RC; "
    why+=$(check_out "$so" server)
    why+=$(check_out "$co" client)
    # With -t our client shows the traffic class its address handle got
    # from the route (udaddy's client does not print it).
    if [ "$cli" = ours ] && [ -n "$client_extra" ]; then
        grep -qx "udaddy: address handle traffic class $tos" "$co" ||
            why+="client: no 'address handle traffic class $tos'; "
    fi
    echo "--- server output:"
    cat "$so" "$so.err" 2>/dev/null
    echo "--- client output:"
    cat "$co" "$co.err" 2>/dev/null
    record "$mix" "$size$client_extra" "$why"
}

for size in $(kernel_sizes 100 1024 -- 1024); do
    run_mix ours ours "$size"
    run_mix ours rdma-core "$size"
    run_mix rdma-core ours "$size"
done
# A type of service (-t) and numeric addresses (-f ip) on the client,
# ours against udaddy's server and udaddy's against ours: the route, and
# so the address handle of our client, carries the traffic class.
tos=32
client_extra=" -t $tos -f ip"
run_mix rdma-core ours 100
run_mix ours rdma-core 100
client_extra=""
# rdma-core's udaddy on our libibverbs.so.1 against udaddy on
# rdma-core's, both ways (the server answers through
# ibv_create_ah_from_wc).
if ourlib_first_kernel udaddy; then
    ourlib_check udaddy -h
    for size in 100 1024; do
        run_mix ourlib rdma-core "$size"
        run_mix rdma-core ourlib "$size"
    done
fi

echo
printf '%-26s %-9s %-6s %s\n' mix transport size result
for r in "${rows[@]}"; do
    echo "$r"
done
echo "udaddy: ${#rows[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
