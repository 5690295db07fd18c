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
# and its queries, a PD, a memory window; a verb not implemented (XRC
# domains) fails with EOPNOTSUPP as a Python exception,
# not a crash.
if LD_LIBRARY_PATH="$dir" /usr/bin/python3 - "$dev" >"$work/pyverbs.out" 2>&1 <<'PY'
import os, sys
import pyverbs.device as d
import pyverbs.enums as e
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
from pyverbs.mr import MW
from pyverbs.xrcd import XRCD, XRCDInitAttr
pd = PD(ctx)
print("PD allocated")
mw = MW(pd, e.IBV_MW_TYPE_1)
print("MW allocated, rkey", hex(mw.rkey))
mw.close()
try:
    XRCD(ctx, XRCDInitAttr(e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS, os.O_CREAT, -1))
    raise SystemExit("XRC domain opened: update this test")
except PyverbsRDMAError as ex:
    assert ex.error_code == 95, ex.error_code
    print("XRCD refused with EOPNOTSUPP")
pd.close()
ctx.close()
PY
then
    echo "ok   pyverbs on ours: $(tr '\n' ' ' <"$work/pyverbs.out")"
else
    echo "FAIL: pyverbs on ours:"
    cat "$work/pyverbs.out"
    failed=1
fi

# The C ABI's error paths, called directly (ctypes) on ours: a PD or CQ
# still in use is not freed (EBUSY), a QP of a type not offered or unknown
# is refused with the errno libibverbs gives, NULL objects with EINVAL.
if LD_LIBRARY_PATH="$dir" /usr/bin/python3 - "$dev" >"$work/ctypes.out" 2>&1 <<'PY'
import ctypes, sys
lib = ctypes.CDLL("libibverbs.so.1", use_errno=True)
P = ctypes.c_void_p
for name, res, args in [
    ("ibv_get_device_list", P, [P]), ("ibv_open_device", P, [P]),
    ("ibv_get_device_name", ctypes.c_char_p, [P]), ("ibv_close_device", ctypes.c_int, [P]),
    ("ibv_alloc_pd", P, [P]), ("ibv_dealloc_pd", ctypes.c_int, [P]),
    ("ibv_reg_mr", P, [P, P, ctypes.c_size_t, ctypes.c_int]), ("ibv_dereg_mr", ctypes.c_int, [P]),
    ("ibv_create_cq", P, [P, ctypes.c_int, P, P, ctypes.c_int]),
    ("ibv_destroy_cq", ctypes.c_int, [P]), ("ibv_create_qp", P, [P, P]),
    ("ibv_destroy_qp", ctypes.c_int, [P]), ("rverbs_ibverbs_version", ctypes.c_char_p, []),
]:
    f = getattr(lib, name)
    f.restype, f.argtypes = res, args
print("library", lib.rverbs_ibverbs_version().decode())
devs = ctypes.cast(lib.ibv_get_device_list(None), ctypes.POINTER(P))
i = 0
while devs[i] and lib.ibv_get_device_name(devs[i]).decode() != sys.argv[1]:
    i += 1
ctx = lib.ibv_open_device(devs[i])
assert ctx, ctypes.get_errno()
pd = lib.ibv_alloc_pd(ctx)
buf = ctypes.create_string_buffer(4096)
mr = lib.ibv_reg_mr(pd, ctypes.addressof(buf), 4096, 1)
assert pd and mr, ctypes.get_errno()
assert lib.ibv_dealloc_pd(pd) == 16, "a PD with an MR must be EBUSY"
assert lib.ibv_dereg_mr(mr) == 0
assert lib.ibv_dereg_mr(None) == 22
cq = lib.ibv_create_cq(ctx, 16, None, None, 0)
assert cq, ctypes.get_errno()
class Cap(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in
                ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data")]
class InitAttr(ctypes.Structure):
    _fields_ = [("qp_context", P), ("send_cq", P), ("recv_cq", P), ("srq", P),
                ("cap", Cap), ("qp_type", ctypes.c_int), ("sq_sig_all", ctypes.c_int)]
for qp_type, want in [(9, 95), (99, 22)]:
    a = InitAttr(None, cq, cq, None, Cap(4, 4, 1, 1, 0), qp_type, 0)
    assert not lib.ibv_create_qp(pd, ctypes.byref(a))
    assert ctypes.get_errno() == want, (qp_type, ctypes.get_errno())
a = InitAttr(None, cq, cq, None, Cap(4, 4, 1, 1, 0), 2, 0)
qp = lib.ibv_create_qp(pd, ctypes.byref(a))
assert qp, ctypes.get_errno()
assert a.cap.max_send_wr >= 4, a.cap.max_send_wr
assert lib.ibv_destroy_cq(cq) == 16, "a CQ with a QP must be EBUSY"
assert lib.ibv_dealloc_pd(pd) == 16, "a PD with a QP must be EBUSY"
assert lib.ibv_destroy_qp(qp) == 0
assert lib.ibv_destroy_cq(cq) == 0
assert lib.ibv_dealloc_pd(pd) == 0
assert lib.ibv_close_device(ctx) == 0
print("EBUSY for a PD with an MR or a QP and a CQ with a QP; XRC refused EOPNOTSUPP, "
      "an unknown QP type EINVAL; all freed in order")
PY
then
    echo "ok   C ABI error paths on ours: $(tr '\n' ' ' <"$work/ctypes.out")"
else
    echo "FAIL: C ABI error paths on ours:"
    cat "$work/ctypes.out"
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
