# shellcheck shell=bash
# Our libibverbs.so.1 (verbs/ibverbs, built by `cargo xtask ibverbs
# --debug`) under rdma-core's unmodified programs: the "ourlib" side of the
# interop scripts is the same program with this folder first on
# LD_LIBRARY_PATH.
. "$(dirname "${BASH_SOURCE[0]}")/kernel.sh"

ourlib="${RVERBS_IBVERBS_DIR:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/ibverbs/debug}"

# The command prefix that runs a program on our library.
ourlib_env() {
    printf 'env LD_LIBRARY_PATH=%q ' "$ourlib"
}

# ourlib_check PROGRAM [ARGS...]: exits the script (status 1) unless
# PROGRAM, run on our library, loads our libibverbs.so.1 and no rdma-core
# verbs provider (lib*-rdmav*.so), as the dynamic loader's trace shows.
ourlib_check() {
    if [ ! -f "$ourlib/libibverbs.so.1" ]; then
        echo "$ourlib/libibverbs.so.1 is missing (cargo xtask ibverbs --debug)" >&2
        exit 1
    fi
    local loaded
    loaded=$(LD_DEBUG=libs env "LD_LIBRARY_PATH=$ourlib" timeout 10 "$@" 2>&1 >/dev/null |
        grep -E "calling init: .*(libibverbs\.so|-rdmav[0-9]+\.so)" |
        sed -e 's/.*calling init: //' | sort -u)
    if [ "$(readlink -f "$loaded")" != "$(readlink -f "$ourlib/libibverbs.so.1")" ]; then
        echo "with LD_LIBRARY_PATH=$ourlib, $1 loaded: $loaded" >&2
        exit 1
    fi
    echo "$1 with LD_LIBRARY_PATH=$ourlib loads our libibverbs alone: $loaded"
}

# ourlib_first_kernel NAME: whether this VM runs the first kernel of a
# `cargo xtask test` run (or the script was started by hand). The "ourlib"
# rows of the tool matrices run there only, to keep CI's time: they judge
# our library, which is the same on every kernel; rdma-core's own suite
# (pyverbs_suite.sh) and ibverbs_static.sh still run on every kernel.
ourlib_first_kernel() {
    if ! first_kernel; then
        echo "$1: the rows on our libibverbs.so.1 run on the first kernel of this run, not on this one"
        return 1
    fi
    return 0
}
