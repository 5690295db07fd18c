#!/bin/bash
# `rverbs devinfo` and `rverbs devices` against rdma-core's `ibv_devinfo`
# and `ibv_devices` on rxe0: the outputs must agree line for line (after
# collapsing runs of whitespace), in verbose, default, single-port and
# list modes. Lines that may legitimately differ are listed below with the
# reason; any other difference fails the test. Unknown devices and ports
# must fail in both tools.
# The VM suite runs scripts with /bin/sh: this one needs bash.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

# RVERBS_BIN: the rverbs binary to test (tests/vm/static.sh passes the
# static build; `cargo xtask test` the debug build's copy in the guest's
# tmpfs); by default the debug build of the workspace.
ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
dev=rxe0
work=$(mktemp -d /tmp/devinfo_compare.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "devinfo_compare: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
for tool in ibv_devinfo ibv_devices; do
    if ! command -v "$tool" >/dev/null; then
        echo "devinfo_compare: $tool is not installed" >&2
        exit 1
    fi
done

# Lines allowed to differ, as extended regular expressions matched against
# the normalised line, each with its reason. Both tools' lines matching one
# are dropped before the comparison.
#
# None today: every line ibv_devinfo prints for rxe0 is either queried by
# rverbs (query_device and its extended form, query_port, the ioctl
# QUERY_PORT for port_cap_flags2, the GID table, sysfs for the transport
# and board_id) or is provider-only data that no core uverbs response
# carries and that rdma-core's rxe provider reports as zero, which rverbs
# prints the same way:
#   "max_tso: 0"                         (tso_caps: mlx4/mlx5 driver data)
#   "rx_hash_function: 0x0"              (rss_caps: mlx5 driver data)
#   "rx_hash_fields_mask: 0x0"           (rss_caps: mlx5 driver data)
#   "qp_rate_limit_min: 0kbps" / "..max" (packet pacing: mlx5 driver data)
# Those lines are compared like all others, so a provider that reported
# them would show up here as a difference.
allowed=()

normalise() {
    # Collapse whitespace runs, trim, drop empty lines, then the allowed ones.
    sed -e 's/[[:space:]]\+/ /g' -e 's/^ //' -e 's/ $//' "$1" | grep -v '^$' >"$1.norm"
    local re
    for re in "${allowed[@]}"; do
        grep -Ev -- "$re" "$1.norm" >"$1.tmp"
        mv "$1.tmp" "$1.norm"
    done
}

failed=0
compare() {
    local name=$1
    shift
    local -a theirs_cmd=("$1")
    shift
    # The rest: "--" separates their arguments from ours.
    local -a targs=() oargs=()
    local side=t
    for a in "$@"; do
        if [ "$a" = "--" ]; then
            side=o
            continue
        fi
        if [ $side = t ]; then targs+=("$a"); else oargs+=("$a"); fi
    done
    "${theirs_cmd[@]}" "${targs[@]}" >"$work/$name.theirs" 2>&1
    local trc=$?
    "$ours" "${oargs[@]}" >"$work/$name.ours" 2>&1
    local orc=$?
    if [ $trc -ne 0 ] || [ $orc -ne 0 ]; then
        echo "FAIL $name: exit status theirs=$trc ours=$orc"
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
        cat "$work/$name.theirs"
        failed=1
        return
    fi
    if diff -u "$work/$name.theirs.norm" "$work/$name.ours.norm" >"$work/$name.diff"; then
        echo "ok   $name: $n lines agree"
    else
        echo "FAIL $name: rdma-core (-) vs rverbs (+):"
        cat "$work/$name.diff"
        failed=1
    fi
}

compare devinfo-v ibv_devinfo -v -d "$dev" -- devinfo -v -d "$dev"
compare devinfo ibv_devinfo -d "$dev" -- devinfo -d "$dev"
compare devinfo-all ibv_devinfo -- devinfo
compare devinfo-port ibv_devinfo -v -d "$dev" -i 1 -- devinfo -v -d "$dev" -i 1
compare devinfo-list ibv_devinfo -l -- devinfo -l
compare devices ibv_devices -- devices

# The verbose output must carry the lines this test exists for, so an
# empty or truncated pair cannot pass by agreeing.
for want in "hca_id: $dev" "transport: InfiniBand (0)" "max_qp_wr:" "port_cap_flags2:" \
    "phys_state: LINK_UP (5)" "GID[ 1]: ::ffff:10.0.0.1, RoCE v2" "num_comp_vectors:"; do
    if ! grep -qF -- "$want" "$work/devinfo-v.ours.norm"; then
        echo "FAIL: rverbs devinfo -v lacks \"$want\""
        failed=1
    fi
done

# Errors: an unknown device or port fails in both.
for args in "-d nosuchdev0" "-d $dev -i 9"; do
    # shellcheck disable=SC2086
    ibv_devinfo $args >/dev/null 2>&1
    trc=$?
    # shellcheck disable=SC2086
    "$ours" devinfo $args >"$work/err.out" 2>&1
    orc=$?
    if [ $trc -eq 0 ] || [ $orc -eq 0 ]; then
        echo "FAIL devinfo $args: exit status theirs=$trc ours=$orc (both must fail)"
        failed=1
    else
        echo "ok   devinfo $args fails in both: $(cat "$work/err.out")"
    fi
done

exit $failed
