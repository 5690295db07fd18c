# shellcheck shell=bash
# Which kernel of a `cargo xtask test` run this VM boots. The first kernel
# runs every tool matrix in full; the others, whose rxe is what differs,
# run a cross-section of each (every mix and transport, one size), which
# keeps CI's time. Scripts whose outcome does not depend on the kernel at
# all carry the line "# xtask: first kernel only" instead, and the harness
# does not start them on the others.

# first_kernel: true on the first kernel of the run, or when the script
# was started by hand (RVERBS_PRIMARY_KERNEL unset).
first_kernel() {
    [ "${RVERBS_PRIMARY_KERNEL:-1}" != 0 ]
}

# kernel_sizes FIRST... -- OTHER...: prints the FIRST sizes on the first
# kernel, the OTHER ones elsewhere.
kernel_sizes() {
    local -a first=() other=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        first+=("$1")
        shift
    done
    [ $# -gt 0 ] && shift
    other=("$@")
    if first_kernel; then
        echo "${first[*]}"
    else
        echo "${other[*]}"
    fi
}
