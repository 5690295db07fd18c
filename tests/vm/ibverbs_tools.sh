#!/bin/bash
# Our libibverbs.so.1 (verbs/ibverbs, built by `cargo xtask ibverbs`) under
# rdma-core's own unmodified tools: Debian's `ibv_devices` and `ibv_devinfo`
# run once on rdma-core's library and once with ours first on
# LD_LIBRARY_PATH, and must print the same, line for line. The dynamic
# loader's trace proves which library each run used (ours by path, and no
# rdma-core provider loaded with it).
# Nothing is allowed to differ.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

dir="${RVERBS_IBVERBS_DIR:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/ibverbs/debug}"
lib="$dir/libibverbs.so.1"
dev=rxe0
work=$(mktemp -d /tmp/ibverbs_tools.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -f "$lib" ]; then
    echo "ibverbs_tools: $lib is missing (cargo xtask ibverbs --debug)" >&2
    exit 1
fi
for tool in ibv_devinfo ibv_devices; do
    if ! command -v "$tool" >/dev/null; then
        echo "ibverbs_tools: $tool is not installed" >&2
        exit 1
    fi
done

failed=0

# Which libibverbs a run of `$@` loads, and whether any rdma-core provider
# (lib*-rdmav*.so) comes with it, from the dynamic loader's trace.
loaded() {
    LD_DEBUG=libs "$@" 2>&1 >/dev/null | grep -E "calling init: .*(libibverbs\.so|-rdmav[0-9]+\.so)" |
        sed -e 's/.*calling init: //' | sort -u
}

theirs_libs=$(loaded ibv_devices)
ours_libs=$(LD_LIBRARY_PATH="$dir" loaded ibv_devices)
if [ "$ours_libs" != "$lib" ] && [ "$(readlink -f "$ours_libs")" != "$(readlink -f "$lib")" ]; then
    echo "FAIL: with LD_LIBRARY_PATH=$dir, ibv_devices loaded: $ours_libs"
    failed=1
else
    echo "ok   with LD_LIBRARY_PATH=$dir, ibv_devices loads ours alone: $ours_libs"
fi
# Without it: rdma-core's library, which loads its rxe provider.
if echo "$theirs_libs" | grep -qF "$dir" ||
    ! echo "$theirs_libs" | grep -q "x86_64-linux-gnu/libibverbs\.so" ||
    ! echo "$theirs_libs" | grep -q "librxe-rdmav[0-9]*\.so"; then
    echo "FAIL: without it, ibv_devices loaded: $theirs_libs (rdma-core's and librxe expected)"
    failed=1
else
    echo "ok   without it, ibv_devices loads rdma-core's: $(echo $theirs_libs)"
fi

normalise() {
    sed -e 's/[[:space:]]\+/ /g' -e 's/^ //' -e 's/ $//' "$1" | grep -v '^$' >"$1.norm"
}

compare() {
    local name=$1
    shift
    "$@" >"$work/$name.theirs" 2>&1
    local trc=$?
    LD_LIBRARY_PATH="$dir" "$@" >"$work/$name.ours" 2>&1
    local orc=$?
    if [ $trc -ne 0 ] || [ $orc -ne 0 ]; then
        echo "FAIL $name: exit status rdma-core=$trc ours=$orc"
        cat "$work/$name.theirs" "$work/$name.ours"
        failed=1
        return
    fi
    normalise "$work/$name.theirs"
    normalise "$work/$name.ours"
    local n
    n=$(wc -l <"$work/$name.theirs.norm")
    if [ "$n" -lt 2 ]; then
        echo "FAIL $name: rdma-core printed only $n lines"
        failed=1
        return
    fi
    if diff -u "$work/$name.theirs.norm" "$work/$name.ours.norm" >"$work/$name.diff"; then
        echo "ok   $name: $n lines agree"
    else
        echo "FAIL $name: on rdma-core (-) vs on ours (+):"
        cat "$work/$name.diff"
        failed=1
    fi
}

compare devices ibv_devices
compare devinfo ibv_devinfo
compare devinfo-d ibv_devinfo -d "$dev"
compare devinfo-port ibv_devinfo -d "$dev" -i 1
compare devinfo-list ibv_devinfo -l
compare devinfo-v ibv_devinfo -v -d "$dev"

# What these comparisons exist for must be in them (so two empty or
# truncated outputs cannot pass by agreeing): the device, its GUID, the
# port's state, and in verbose mode the GID table with its types.
# sysfs prints the GUID as ibv_devinfo does (xxxx:xxxx:xxxx:xxxx).
guid=$(cat "/sys/class/infiniband/$dev/node_guid" 2>/dev/null)
if [ -z "$guid" ]; then
    echo "FAIL: no node_guid for $dev in sysfs"
    failed=1
fi
for want in "hca_id: $dev" "transport: InfiniBand (0)" "node_guid: $guid" \
    "state: PORT_ACTIVE (4)" "link_layer: Ethernet"; do
    if ! grep -qF -- "$want" "$work/devinfo-d.ours.norm"; then
        echo "FAIL: ibv_devinfo on ours lacks \"$want\""
        failed=1
    fi
done
for want in "GID[ 1]: ::ffff:10.0.0.1, RoCE v2" "max_qp_wr:" "phys_state: LINK_UP (5)" \
    "device_cap_flags_ex:" "port_cap_flags2:"; do
    if ! grep -qF -- "$want" "$work/devinfo-v.ours.norm"; then
        echo "FAIL: ibv_devinfo -v on ours lacks \"$want\""
        failed=1
    fi
done

# (That every program and library of rdma-core's packages binds on ours
# is checked once on the host, by `cargo xtask test`: it does not depend on
# the kernel.)

# pyverbs (rdma-core's Python binding) on ours: the device list, a context
# and its queries work; a verb not implemented yet fails with EOPNOTSUPP as
# a Python exception, not a crash.
if LD_LIBRARY_PATH="$dir" /usr/bin/python3 - "$dev" >"$work/pyverbs.out" 2>&1 <<'PY'
import sys
import pyverbs.device as d
from pyverbs.pyverbs_error import PyverbsRDMAError
dev = sys.argv[1]
names = [x.name.decode() for x in d.get_device_list()]
assert dev in names, names
ctx = d.Context(name=dev)
attr = ctx.query_device()
port = ctx.query_port(1)
gid = ctx.query_gid(1, 1)
print("device", dev, "ports", attr.phys_port_cnt, "state", port.state, "gid", gid)
assert attr.phys_port_cnt == 1 and port.state == 4, (attr.phys_port_cnt, port.state)
from pyverbs.pd import PD
try:
    PD(ctx)
    raise SystemExit("PD allocated: update this test")
except PyverbsRDMAError as e:
    assert e.error_code == 95, e.error_code
    print("PD refused with EOPNOTSUPP")
ctx.close()
PY
then
    echo "ok   pyverbs on ours: $(tr '\n' ' ' <"$work/pyverbs.out")"
else
    echo "FAIL: pyverbs on ours:"
    cat "$work/pyverbs.out"
    failed=1
fi

# Errors: an unknown device and an unknown port fail on both libraries.
for args in "-d nosuchdev0" "-d $dev -i 9"; do
    # shellcheck disable=SC2086
    ibv_devinfo $args >/dev/null 2>&1
    trc=$?
    # shellcheck disable=SC2086
    LD_LIBRARY_PATH="$dir" ibv_devinfo $args >"$work/err.out" 2>&1
    orc=$?
    if [ $trc -eq 0 ] || [ $orc -eq 0 ]; then
        echo "FAIL ibv_devinfo $args: exit status rdma-core=$trc ours=$orc (both must fail)"
        failed=1
    else
        echo "ok   ibv_devinfo $args fails on both: $(head -1 "$work/err.out")"
    fi
done

exit $failed
