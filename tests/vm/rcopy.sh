#!/bin/bash
# rcopy over rsockets: `rverbs rcopy` (rverbs_cm::stream) and rdma-core's
# `rcopy` on rxe0 (10.0.0.1), a 3 MB file of random bytes copied both ways and ours to ours; a row passes when the client
# exits 0 and the stored file is byte for byte the source (cmp); also a
# one-byte file and an empty one. Ours as
# server stores under its -d folder only the name's last component: a
# client naming ../escape.bin writes nothing outside it. rdma-core's
# server serves forever and is stopped after each copy.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
addr=10.0.0.1
limit=120
work=$(mktemp -d /tmp/rcopy.XXXXXX)
trap 'rm -rf "$work"' EXIT

if [ ! -x "$ours" ]; then
    echo "rcopy: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
command -v rcopy >/dev/null || {
    echo "rcopy: rdma-core's rcopy (rdmacm-utils) is missing" >&2
    exit 1
}

rows=()
failed=0
run_no=0
head -c 3000000 /dev/urandom >"$work/src.bin"
: >"$work/empty.bin"
printf x >"$work/one.bin"

. "$(dirname "$0")/lib/net.sh"

record() {
    local mix=$1 what=$2 why=$3 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    rows+=("$(printf '%-34s %-22s %s' "$mix" "$what" "$result")")
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "rsockets rcopy ($what)" "-" "$result" >>"$RVERBS_REPORT"
    fi
}

# copy SERVER CLIENT SRC DESTNAME EXPECTED_PATH
copy() {
    local srv=$1 cli=$2 src=$3 dest=$4 expect=$5
    run_no=$((run_no + 1))
    local port=$((7600 + run_no)) so="$work/$run_no.srv" co="$work/$run_no.cli" why="" spid crc=0
    local dir="$work/dir$run_no"
    mkdir -p "$dir"
    local mix="$srv(server)<->$cli(client)"
    [ "$srv" = "$cli" ] && mix="$srv<->$cli"
    echo "=== $mix: $(basename "$src") -> $dest"
    if [ "$srv" = ours ]; then
        (cd "$dir" && exec timeout -k 5 $limit "$ours" rcopy -p $port -d "$dir" --once) >"$so" 2>&1 &
    else
        (cd "$dir" && exec timeout -k 5 $limit rcopy -p $port) >"$so" 2>&1 &
    fi
    spid=$!
    wait_cm_listen "$port" "$spid" || why+="the server did not listen; "
    if [ "$cli" = ours ]; then
        timeout -k 5 $limit "$ours" rcopy "$src" "$addr:$dest" -p $port >"$co" 2>&1 || crc=$?
    else
        timeout -k 5 $limit rcopy "$src" "$addr:$dest" -p $port >"$co" 2>&1 || crc=$?
    fi
    if [ "$srv" = ours ]; then
        wait "$spid" || why+="server exit $?; "
    else
        # rcopy's server has stored the file once its client is done.
        sleep 0.5
        kill "$spid" 2>/dev/null
        wait "$spid" 2>/dev/null
    fi
    [ "$crc" -ne 0 ] && why+="client exit $crc; "
    if [ ! -f "$expect" ]; then
        why+="no file at $expect; "
    elif ! cmp -s "$src" "$expect"; then
        why+="the stored file differs from the source; "
    fi
    echo "--- server:"
    cat "$so"
    echo
    echo "--- client:"
    cat "$co"
    record "$mix" "$(basename "$src") $(stat -c %s "$src") B" "$why"
}

for pair in "ours ours" "ours rdma-core" "rdma-core ours"; do
    # shellcheck disable=SC2086
    set -- $pair
    n=$((run_no + 1))
    dir="$work/dir$n"
    # rdma-core's server opens the path as given: an absolute one.
    if [ "$1" = ours ]; then
        copy "$1" "$2" "$work/src.bin" copy.bin "$dir/copy.bin"
    else
        copy "$1" "$2" "$work/src.bin" "$dir/copy.bin" "$dir/copy.bin"
    fi
done
# One byte to ours from rdma-core's client; an empty file ours to ours
# (rdma-core's client cannot send one: it maps the file, and a
# zero-length mmap fails).
n=$((run_no + 1))
copy ours rdma-core "$work/one.bin" "$work/dir$n/one.bin" "$work/dir$n/one.bin"
n=$((run_no + 1))
copy ours ours "$work/empty.bin" empty.bin "$work/dir$n/empty.bin"
# A client naming a path outside the folder: stored inside it.
n=$((run_no + 1))
copy ours rdma-core "$work/src.bin" "../escape.bin" "$work/dir$n/escape.bin"
[ -e "$work/escape.bin" ] && {
    echo "FAIL: a file was stored outside the server's folder"
    failed=$((failed + 1))
}

echo
printf '%-34s %-22s %s\n' mix file result
for r in "${rows[@]}"; do
    echo "$r"
done
echo "rcopy: ${#rows[@]} runs, $failed failed"
[ "$failed" -eq 0 ]
