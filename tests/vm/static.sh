#!/bin/bash
# The fully static rverbs (musl, no dynamic section, no interpreter: built
# and checked on the host by `cargo xtask test`) is the binary the book
# promises (docs/book/src/getting-started.md): this runs that very file on
# the real kernel. `rverbs devinfo` and `devices` must match rdma-core's
# tools line for line (devinfo_compare.sh with RVERBS_BIN), and rc-pingpong
# must interoperate with ibv_rc_pingpong in both directions.
# Static linking does not depend on the kernel (the same rverbs runs on
# every kernel through the other scripts):
# xtask: first kernel only
# The VM suite runs scripts with /bin/sh: this one needs bash.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

static="${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/x86_64-unknown-linux-musl/debug/rverbs"
here=$(dirname "$0")
port=19400
work=$(mktemp -d /tmp/static.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$static" ]; then
    echo "static: $static is missing (cargo build -p rverbs-cli --target x86_64-unknown-linux-musl)" >&2
    exit 1
fi
if [ -n "$(readelf -lW "$static" 2>/dev/null | grep -E 'INTERP|DYNAMIC')" ]; then
    echo "static: $static has an interpreter or a dynamic section" >&2
    exit 1
fi
# That very file, started ten times below: from a copy in the guest's
# tmpfs, since each start from the uncached 9p share reads all of it again.
cp "$static" "$work/rverbs" && static="$work/rverbs"

. "$here/lib/net.sh"

failed=0
RVERBS_BIN="$static" bash "$here/devinfo_compare.sh" || failed=1

# $1: server command, $2: client command (each without the peer's host).
pair() {
    local so="$work/server" co="$work/client" src=0 crc=0
    port=$((port + 1))
    timeout 60 $1 -p "$port" >"$so" 2>&1 &
    local spid=$!
    if wait_listen "$port" "$spid"; then
        timeout 60 $2 -p "$port" 127.0.0.1 >"$co" 2>&1 || crc=$?
    else
        crc=255
    fi
    wait "$spid" || src=$?
    if [ "$src" -ne 0 ] || [ "$crc" -ne 0 ] ||
        ! grep -q "^102400 bytes in" "$so" || ! grep -q "^102400 bytes in" "$co"; then
        echo "FAIL: $1 <-> $2 (exit $src/$crc)"
        cat "$so" "$co"
        failed=1
    else
        echo "ok: $1 <-> $2"
    fi
}
opts="-d rxe0 -g 1 -n 100 -s 512 -c"
pair "$static rc-pingpong $opts" "ibv_rc_pingpong $opts"
pair "ibv_rc_pingpong $opts" "$static rc-pingpong $opts"

[ "$failed" -eq 0 ] && echo "static: ok"
exit "$failed"
