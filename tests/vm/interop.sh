#!/bin/bash
# Interoperability of `rverbs *-pingpong` with rdma-core's ibv_*_pingpong on
# rxe0: for each transport and size, three runs (ours<->ours, our server
# with their client, their server with our client), each with -g 1 and -c.
# Then the same unmodified ibv_*_pingpong on our libibverbs.so.1 ("ourlib":
# verbs/ibverbs, LD_LIBRARY_PATH) against it on rdma-core's, both ways.
# A run passes when both processes exit 0, both print the byte-count line
# ("<size*iters*2> bytes in") and neither reports invalid data. Prints a
# table (mix, transport, size, result) and exits 1 if any row failed.
# On the other kernels of a run: one size per transport (lib/kernel.sh).
# The VM suite runs scripts with /bin/sh: this one needs bash.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
dev=rxe0
iters=200
port=19300
limit=120
work=$(mktemp -d /tmp/interop.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "interop: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi

rows=()
failed=0

. "$(dirname "$0")/lib/net.sh"
. "$(dirname "$0")/lib/ourlib.sh"

# The command line of one side: $1 = ours|ibv, $2 = transport, $3 = size,
# $4 = port, $5 = extra flags, $6 = host ("" for the server).
side_cmd() {
    local who=$1 tr=$2 size=$3 p=$4 extra=$5 host=$6
    local -a cmd
    if [ "$who" = ours ]; then
        cmd=("$ours" "$tr-pingpong")
    elif [ "$who" = ourlib ]; then
        cmd=(env "LD_LIBRARY_PATH=$ourlib" "ibv_${tr}_pingpong")
    else
        cmd=("ibv_${tr}_pingpong")
    fi
    cmd+=(-d "$dev" -g 1 -n "$iters" -s "$size" -p "$p" -c)
    # shellcheck disable=SC2206
    [ -n "$extra" ] && cmd+=($extra)
    [ -n "$host" ] && cmd+=("$host")
    printf '%q ' "${cmd[@]}"
}

# Starts the server command $1 (output to $2) and, once it listens on
# $port, the client command $3 (output to $4). Sets src and crc to their
# exit statuses (255: never started). A server whose client failed is
# stopped after a grace period rather than left waiting out its timeout.
start_pair() {
    local scmd=$1 so=$2 ccmd=$3 co=$4
    src=0
    crc=0
    : >"$co"
    eval "timeout $limit $scmd" >"$so" 2>&1 &
    local spid=$!
    if wait_listen "$port" "$spid"; then
        eval "timeout $limit $ccmd" >"$co" 2>&1 || crc=$?
    else
        echo "server not listening on $port" >>"$co"
        crc=255
    fi
    if [ "$crc" -ne 0 ]; then
        for _ in $(seq 50); do
            kill -0 "$spid" 2>/dev/null || break
            sleep 0.1
        done
        kill "$spid" 2>/dev/null
    fi
    wait "$spid" || src=$?
}

record() {
    local mix=$1 label=$2 size=$3 why=$4 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    rows+=("$(printf '%-26s %-9s %-6s %s' "$mix" "$label" "$size" "$result")")
    # The harness prints every script's rows as one matrix at the end.
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "$label" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

# One run: $1 = server (ours|ibv), $2 = client, $3 = transport, $4 = size,
# $5 = extra flags for both sides, $6 = label for the transport column.
run_pair() {
    local srv=$1 cli=$2 tr=$3 size=$4 extra=$5 label=$6
    local mix="$srv(server)<->$cli(client)"
    [ "$srv" = "$cli" ] && mix="$srv<->$cli"
    port=$((port + 1))
    local so="$work/$port.server" co="$work/$port.client"
    local scmd ccmd
    scmd=$(side_cmd "$srv" "$tr" "$size" "$port" "$extra" "")
    ccmd=$(side_cmd "$cli" "$tr" "$size" "$port" "$extra" 127.0.0.1)
    echo "=== $mix $label size $size (port $port)"
    echo "server: $scmd"
    echo "client: $ccmd"
    start_pair "$scmd" "$so" "$ccmd" "$co"
    local want="$((size * iters * 2)) bytes in" why=""
    [ "$src" -ne 0 ] && why+="server exit $src; "
    [ "$crc" -ne 0 ] && why+="client exit $crc; "
    grep -q "^$want" "$so" || why+="server lacks '$want'; "
    grep -q "^$want" "$co" || why+="client lacks '$want'; "
    grep -q "invalid data" "$so" "$co" && why+="invalid data; "
    echo "--- server output:"
    cat "$so"
    echo "--- client output:"
    cat "$co"
    record "$mix" "$label" "$size" "$why"
}

# The -c check must be able to fail: their client without -c sends 0x7b
# where the page-start byte should be 0, so our -c server must print
# "invalid data in page 0" and exit 1 (after completing the exchange).
run_chk_negative() {
    local tr=$1 size=$2
    port=$((port + 1))
    local so="$work/$port.server" co="$work/$port.client"
    local scmd ccmd
    scmd=$(side_cmd ours "$tr" "$size" "$port" "" "")
    ccmd=$(side_cmd ibv "$tr" "$size" "$port" "" 127.0.0.1)
    ccmd=${ccmd/ -c / }
    echo "=== -c negative: $tr size $size (port $port)"
    echo "server: $scmd"
    echo "client: $ccmd"
    start_pair "$scmd" "$so" "$ccmd" "$co"
    local want="$((size * iters * 2)) bytes in" why=""
    [ "$src" -eq 1 ] || why+="server exit $src, want 1; "
    [ "$crc" -eq 0 ] || why+="client exit $crc; "
    grep -q "^$want" "$so" || why+="server lacks '$want'; "
    grep -q "^invalid data in page 0" "$so" || why+="server did not report page 0; "
    echo "--- server output:"
    cat "$so"
    echo "--- client output:"
    cat "$co"
    record "ibv(no -c)->ours(-c)" "$tr" "$size" "$why"
}

# $1 = transport, $2 = extra flags, $3 = label, then the sizes.
matrix() {
    local tr=$1 extra=$2 label=$3
    shift 3
    local size
    for size in "$@"; do
        run_pair ours ours "$tr" "$size" "$extra" "$label"
        run_pair ours ibv "$tr" "$size" "$extra" "$label"
        run_pair ibv ours "$tr" "$size" "$extra" "$label"
    done
}

# Debian's tool on our library: $1 = transport, $2 = extra flags, $3 =
# label, then the sizes.
matrix_lib() {
    local tr=$1 extra=$2 label=$3
    shift 3
    local size
    for size in "$@"; do
        run_pair ourlib ibv "$tr" "$size" "$extra" "$label"
        run_pair ibv ourlib "$tr" "$size" "$extra" "$label"
    done
}

# The "ourlib" runs must really run on our library, and on it alone.
if first_kernel; then
    ourlib_check ibv_rc_pingpong -h
fi

# shellcheck disable=SC2046
{
    matrix rc "" rc $(kernel_sizes 4096 64 65536 -- 65536)
    matrix rc "-e" "rc -e" 4096
    matrix uc "" uc $(kernel_sizes 4096 64 -- 4096)
    matrix ud "" ud $(kernel_sizes 1024 64 -- 1024)
    matrix srq "" srq $(kernel_sizes 4096 64 -- 4096)
}
# The -c check's own negative control judges our tool, not the kernel.
if first_kernel; then
    run_chk_negative rc 4096
    run_chk_negative ud 1024
fi
if ourlib_first_kernel interop; then
    matrix_lib rc "" rc 4096 65536
    matrix_lib rc "-e" "rc -e" 4096
    run_pair ourlib ourlib rc 4096 "-e" "rc -e"
    matrix_lib uc "" uc 4096
    matrix_lib ud "" ud 1024
    matrix_lib srq "" srq 4096
fi

echo
printf '%-26s %-9s %-6s %s\n' mix transport size result
for r in "${rows[@]}"; do
    echo "$r"
done
echo "interop: ${#rows[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
