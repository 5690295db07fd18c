#!/bin/bash
# A C program on our stack with no shared library at all: the ping-pong of
# tests/ibverbs-c, linked with -static against our libibverbs.a by `cargo
# xtask ibverbs`, runs against Debian's ibv_rc_pingpong (on rdma-core's
# library) in both directions, and against itself. A run passes when both
# exit 0 and both print "<size*iters*2> bytes in"; ours also checks the size
# and every byte of each message it receives. `readelf` and `ldd` must show
# no dynamic section.
#
# Also the efadv probe of tests/efa-emu/c linked with -static against our
# libefa.a and libibverbs.a (efadv_static): on rxe0, a device that is not
# EFA, every efadv_* call must answer EOPNOTSUPP as libefa's do (its EFA
# branch runs on the emulated EFA device, dynamically, in cargo xtask efa).
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

here=$(dirname "$0")
. "$here/lib/net.sh"
. "$here/lib/ourlib.sh"
prog="$ourlib/static_pingpong"
dev=rxe0
iters=200
port=19700
limit=60
failed=0
work=$(mktemp -d /tmp/ibverbs_static.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$prog" ]; then
    echo "ibverbs_static: $prog is missing (cargo xtask ibverbs --debug)" >&2
    exit 1
fi
if ! readelf -d "$prog" 2>&1 | grep -q "There is no dynamic section"; then
    echo "FAIL: readelf -d $prog shows a dynamic section"
    failed=1
fi
if ! ldd "$prog" 2>&1 | grep -q "not a dynamic executable"; then
    echo "FAIL: ldd $prog: $(ldd "$prog" 2>&1 | head -2)"
    failed=1
fi
cp "$prog" "$work/static_pingpong"
prog="$work/static_pingpong"

# run SERVER CLIENT SIZE: each "ours" (the static program) or "ibv".
run() {
    local srv=$1 cli=$2 size=$3 src=0 crc=0 why=""
    port=$((port + 1))
    local so="$work/$port.server" co="$work/$port.client"
    side() {
        if [ "$1" = ours ]; then
            echo "$prog"
        else
            echo ibv_rc_pingpong
        fi
    }
    echo "=== $srv(server) <-> $cli(client), size $size (port $port)"
    timeout "$limit" "$(side "$srv")" -d "$dev" -g 1 -p "$port" -s "$size" -n "$iters" >"$so" 2>&1 &
    local spid=$!
    if wait_listen "$port" "$spid"; then
        timeout "$limit" "$(side "$cli")" -d "$dev" -g 1 -p "$port" -s "$size" -n "$iters" 127.0.0.1 \
            >"$co" 2>&1 || crc=$?
    else
        echo "server not listening on $port" >>"$co"
        crc=255
        kill "$spid" 2>/dev/null
    fi
    wait "$spid" || src=$?
    local want="$((size * iters * 2)) bytes in"
    [ "$src" -eq 0 ] || why+="server exit $src; "
    [ "$crc" -eq 0 ] || why+="client exit $crc; "
    grep -q "^$want" "$so" || why+="server lacks '$want'; "
    grep -q "^$want" "$co" || why+="client lacks '$want'; "
    echo "--- server:"
    cat "$so"
    echo "--- client:"
    cat "$co"
    if [ -n "$why" ]; then
        echo "--- result: FAIL (${why%; })"
        failed=1
    else
        echo "--- result: ok"
    fi
}

efadv="$ourlib/efadv_static"
echo "=== $efadv $dev"
if [ ! -x "$efadv" ]; then
    echo "FAIL: $efadv is missing (cargo xtask ibverbs --debug)"
    failed=1
elif ! readelf -d "$efadv" 2>&1 | grep -q "There is no dynamic section"; then
    echo "FAIL: readelf -d $efadv shows a dynamic section"
    failed=1
elif out=$(timeout "$limit" "$efadv" "$dev" 2>&1); then
    echo "$out"
    want="PASS open PASS efadv_query_device PASS efadv_create_driver_qp PASS efadv_create_cq PASS teardown"
    if [ "$(echo $out)" = "$want" ]; then
        echo "--- result: ok"
    else
        echo "--- result: FAIL (steps differ from: $want)"
        failed=1
    fi
else
    rc=$?
    echo "$out"
    echo "--- result: FAIL (exit status $rc)"
    failed=1
fi

run ours ibv 4096
run ibv ours 4096
run ours ours 65536
run ibv ours 1
exit $failed
