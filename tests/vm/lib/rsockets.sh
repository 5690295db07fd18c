# The rsockets test programs' mixes, shared by rstream.sh and
# riostream.sh (which set `prog`, `ours`, `addr`, `limit` and `work`
# before sourcing this): `run_mix` runs one server/client pair, ours or
# rdma-core's `$prog`, and records a row; `print_rows` ends the script.
# shellcheck shell=bash

rows=()
failed=0
run_no=0

record() {
    local mix=$1 what=$2 size=$3 why=$4 result=ok
    if [ -n "$why" ]; then
        result="FAIL (${why%; })"
        failed=$((failed + 1))
    fi
    echo "--- result: $result"
    rows+=("$(printf '%-34s %-26s %-8s %s' "$mix" "$what" "$size" "$result")")
    if [ -n "${RVERBS_REPORT:-}" ]; then
        printf '%s\t%s\t%s\t%s\n' "$mix" "rsockets $prog ($what)" "$size" "$result" >>"$RVERBS_REPORT"
    fi
}

# tool WHO: the command of one side.
tool() {
    if [ "$1" = ours ]; then
        printf '%q %s --timeout 20' "$ours" "$prog"
    else
        printf 'stdbuf -oL %s' "$prog"
    fi
}

# check_out FILE WHO LINES: the side printed LINES result lines (after the
# header) and no verification failure.
check_out() {
    local f=$1 who=$2 lines=$3 n
    grep -q "data verification failed" "$f" && echo "$who: data verification failed; "
    grep -q "^name *bytes" "$f" || { echo "$who printed no header; "; return; }
    n=$(grep -cE '^(custom|[0-9.]+[kmg]?_(lat|bw)) ' "$f")
    [ "$n" -eq "$lines" ] || echo "$who: $n of $lines result lines; "
}

# run_mix SERVER CLIENT WHAT SIZE LINES OPTS...: one run; OPTS go to both.
run_mix() {
    local srv=$1 cli=$2 what=$3 size=$4 lines=$5
    shift 5
    run_no=$((run_no + 1))
    local port=$((7500 + run_no))
    local so="$work/$run_no.srv" co="$work/$run_no.cli" why="" spid src=0 crc=0
    local scmd ccmd
    scmd="$(tool "$srv") -b $addr -p $port $*"
    # rdma-core's client binds -b with the server's port (its getaddrinfo
    # takes -p for both), which one host's listener already holds: only
    # our client (which binds port 0) takes -b here.
    ccmd="$(tool "$cli") -s $addr -p $port $*"
    [ "$cli" = ours ] && ccmd="$(tool "$cli") -s $addr -b $addr -p $port $*"
    local mix="$srv(server)<->$cli(client)"
    [ "$srv" = "$cli" ] && mix="$srv<->$cli"
    echo "=== $mix, $what"
    echo "server: $scmd"
    echo "client: $ccmd"
    local start=$SECONDS
    eval "timeout -k 5 $limit $scmd" >"$so" 2>&1 &
    spid=$!
    # The server listens once it printed its header.
    for _ in $(seq 100); do
        grep -q "^name" "$so" && break
        sleep 0.1
    done
    eval "timeout -k 5 $limit $ccmd" >"$co" 2>&1 || crc=$?
    wait "$spid" || src=$?
    [ "$src" -ne 0 ] && why+="server exit $src; "
    [ "$crc" -ne 0 ] && why+="client exit $crc; "
    why+=$(check_out "$so" server "$lines")
    why+=$(check_out "$co" client "$lines")
    echo "--- server output:"
    cat "$so"
    echo "--- client output:"
    cat "$co"
    echo "--- $((SECONDS - start)) s"
    record "$mix" "$what" "$size" "$why"
}

# print_rows: the matrix and the verdict (the script's exit status).
print_rows() {
    echo
    printf '%-34s %-26s %-8s %s\n' mix test size result
    for r in "${rows[@]}"; do
        echo "$r"
    done
    echo "$prog: ${#rows[@]} runs, $failed failed"
    [ "$failed" -eq 0 ]
}
