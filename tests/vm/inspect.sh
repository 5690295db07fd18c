#!/bin/bash
# `rverbs inspect` on live ping-pong processes, rdma-core's and ours.
#
# For each of ibv_rc_pingpong and `rverbs rc-pingpong`: start a server and
# a client on rxe0 with a huge iteration count, wait until the client's QP
# is in RTS (as iproute2's `rdma res show qp` sees it), stop the client
# with SIGSTOP, and check:
# - `rverbs inspect --pid CLIENT --entries --json` finds the client's SQ
#   and RQ (tied to its QP number) and its CQ (tied to its CQ number), with
#   the depths the tools asked for (RQ and CQ >= 500 for the default
#   rx depth of 500, which rxe rounds up), one decoded entry per queued
#   element, receive WQEs of one 4096-byte SGE, send WQEs that are 4096-byte
#   SENDs and completions that are successful;
# - `--qp QPN` keeps exactly that QP's two rings, and a QP the process
#   does not own is an error;
# - `rverbs inspect --json` (no pid) lists both processes' QPs as RC in
#   RTS, with the client's queue depths read from its rings;
# then resume the client and stop both.
#
# Send WQEs stay queued only while the peer withholds acknowledgements, so a
# third scenario stops the *server* of perftest's ib_send_bw first: once its
# posted receives are used up it answers RNR NAKs and the client's sends
# stay outstanding (the client is stopped once the server's expected PSN
# holds still). `inspect --pid CLIENT --entries` must then show queued
# 4096-byte SEND WQEs, the oldest at exactly the PSN the server's QP expects
# next (as the kernel reports it); rxe marks every outstanding send posted
# again while it waits out an RNR NAK, so up to ten snapshots are taken
# until one shows the oldest started.
#
# SRQ: ibv_srq_pingpong's client (4 QPs on one SRQ) must show one SRQ ring
# tied to its SRQ and four send queues tied to its four QPs.
#
# Also: a pid that does not exist
# and a process we may not read fail with a clear message; a process
# without queues is reported (exit 0). The table outputs are printed.
# The VM suite runs scripts with /bin/sh: this one needs bash.
if [ -z "${BASH_VERSION:-}" ]; then
    exec bash "$0" "$@"
fi
set -u

ours="${RVERBS_BIN:-${RVERBS_TARGET_DIR:?RVERBS_TARGET_DIR is not set}/debug/rverbs}"
dev=rxe0
port=19700
work=$(mktemp -d /tmp/inspect.XXXXXX)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill -CONT "$p" 2>/dev/null
        kill "$p" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT

if [ ! -x "$ours" ]; then
    echo "inspect: $ours is missing (cargo build -p rverbs-cli --bin rverbs)" >&2
    exit 1
fi
failed=0
fail() {
    echo "FAIL: $*"
    failed=1
}

. "$(dirname "$0")/lib/net.sh"

# Checks the JSON of `inspect --pid $2 --entries --json` in file $1.
check_pid_json() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
pid = int(sys.argv[2])
errors = []
def need(cond, what):
    if not cond:
        errors.append(what)
need(doc["pid"] == pid, "pid %r" % doc["pid"])
qpns = [q["lqpn"] for q in doc["qps"]]
cqns = [c["cqn"] for c in doc["cqs"]]
need(len(qpns) == 1, "the kernel lists QPs %r for the client" % qpns)
need(len(cqns) >= 1, "the kernel lists no CQ for the client")
rings = doc["rings"]
by = {}
for r in rings:
    by.setdefault(r["kind"], []).append(r)
    # One decoded entry per queued element.
    if r["kind"] != "unknown":
        need(len(r["entries"]) == r["fill"],
             "%s: %d entries for fill %d" % (r["kind"], len(r["entries"]), r["fill"]))
for kind in ("SQ", "RQ", "CQ"):
    need(len(by.get(kind, [])) == 1, "%d %s rings: %r" % (len(by.get(kind, [])), kind,
         [(r["kind"], r.get("basis")) for r in rings]))
if not errors:
    sq, rq, cq = by["SQ"][0], by["RQ"][0], by["CQ"][0]
    qpn = qpns[0]
    need(sq["qpn"] == qpn, "SQ tied to QP %r, not %r" % (sq["qpn"], qpn))
    need(rq["qpn"] == qpn, "RQ tied to QP %r, not %r" % (rq["qpn"], qpn))
    need(cq["cqn"] in cqns, "CQ tied to %r, not one of %r" % (cq["cqn"], cqns))
    need(sq["depth"] >= 1 and sq["elem_size"] >= 256, "SQ depth %d elem %d" % (sq["depth"], sq["elem_size"]))
    need(rq["depth"] >= 500, "RQ depth %d < 500" % rq["depth"])
    need(cq["depth"] >= 500, "CQ depth %d < 500" % cq["depth"])
    need(rq["fill"] >= 1, "no posted receive")
    for e in rq["entries"]:
        ok = e["num_sge"] == 1 and e["length"] == 4096 and e["sges"][0]["length"] == 4096
        need(ok, "receive WQE %r" % e)
    for e in sq["entries"]:
        need(e["opcode"] == "SEND" and e["length"] == 4096, "send WQE %r" % e)
    for e in cq["entries"]:
        need(e["status"] == "SUCCESS" and e["qp_num"] == qpn, "completion %r" % e)
    print("client %d: QP %d SQ depth %d (%d queued), RQ depth %d (%d posted), "
          "CQ %d depth %d (%d unpolled)" % (pid, qpn, sq["depth"], sq["fill"], rq["depth"],
          rq["fill"], cq["cqn"], cq["depth"], cq["fill"]))
    print("QPN=%d" % qpn)
for e in errors:
    print("check: " + e)
sys.exit(1 if errors else 0)
EOF
}

# Checks the host-wide JSON in $1: both pids' QPs are RC in RTS, and the
# client's depths come from its rings.
check_host_json() {
    python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
server, client = int(sys.argv[2]), int(sys.argv[3])
errors = []
for pid in (server, client):
    qps = [q for q in doc["qps"] if q["pid"] == pid]
    if len(qps) != 1:
        errors.append("pid %d has QPs %r" % (pid, qps))
        continue
    q = qps[0]
    if q["type"] != "RC" or q["state"] != "RTS":
        errors.append("pid %d QP %d is %s in %s" % (pid, q["lqpn"], q["type"], q["state"]))
    if not q["comm"]:
        errors.append("pid %d QP without comm" % pid)
    if pid == client and not (q["rq_depth"] and q["rq_depth"] >= 500 and q["sq_depth"]):
        errors.append("client QP depths %r/%r" % (q["sq_depth"], q["rq_depth"]))
    if not any(c["pid"] == pid for c in doc["cqs"]):
        errors.append("pid %d has no CQ" % pid)
    if not any(p["pid"] == pid for p in doc["pds"]):
        errors.append("pid %d has no PD" % pid)
    if not any(m["pid"] == pid for m in doc["mrs"]):
        errors.append("pid %d has no MR" % pid)
for e in errors:
    print("check: " + e)
sys.exit(1 if errors else 0)
EOF
}

# One scenario: $1 = label, then the command prefix of one side (the
# server gets no host, the client 127.0.0.1).
scenario() {
    local label=$1
    shift
    port=$((port + 1))
    local -a cmd=("$@" -d "$dev" -g 1 -n 100000000 -p "$port")
    echo "=== $label: ${cmd[*]}"
    "${cmd[@]}" >"$work/$label.server" 2>&1 &
    local s=$!
    pids+=("$s")
    if ! wait_listen "$port" "$s"; then
        fail "$label: server not listening"
        cat "$work/$label.server"
        return
    fi
    "${cmd[@]}" 127.0.0.1 >"$work/$label.client" 2>&1 &
    local c=$!
    pids+=("$c")
    if ! wait_rts "$c"; then
        fail "$label: client QP never reached RTS"
        cat "$work/$label.server" "$work/$label.client"
        return
    fi
    # Let it run a little, then freeze the client mid-exchange.
    sleep 0.5
    kill -STOP "$c"
    sleep 0.2

    if ! "$ours" inspect --timeout 300 --pid "$c" --entries --json >"$work/$label.json" 2>"$work/$label.err"; then
        fail "$label: inspect --pid $c failed: $(cat "$work/$label.err")"
    else
        local out
        if out=$(check_pid_json "$work/$label.json" "$c"); then
            echo "ok   $label: inspect --pid: ${out%%$'\n'QPN=*}"
        else
            fail "$label: inspect --pid $c: $out"
            cat "$work/$label.json"
        fi
        local qpn
        qpn=$(echo "$out" | sed -n 's/^QPN=//p')
        if [ -n "$qpn" ]; then
            if "$ours" inspect --timeout 300 --pid "$c" --qp "$qpn" --json >"$work/$label.qp.json" &&
                python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
kinds = sorted(r["kind"] for r in d["rings"])
assert kinds == ["RQ", "SQ"] and all(r["qpn"] == int(sys.argv[2]) for r in d["rings"]), kinds
' "$work/$label.qp.json" "$qpn"; then
                echo "ok   $label: --qp $qpn keeps its SQ and RQ"
            else
                fail "$label: --qp $qpn"
            fi
            # Text shows QP numbers as rdma-core's tools do (0x%06x).
            if "$ours" inspect --timeout 300 --pid "$c" --qp $((qpn + 1000)) >"$work/$label.badqp" 2>&1 ||
                ! grep -q "owns no QP $(printf '0x%06x' $((qpn + 1000))) (the kernel lists its QPs as: $(printf '0x%06x' "$qpn");" "$work/$label.badqp"; then
                fail "$label: --qp $((qpn + 1000)) (not its QP): $(cat "$work/$label.badqp")"
            else
                echo "ok   $label: a QP it does not own is refused: $(cat "$work/$label.badqp")"
            fi
        fi
    fi
    if ! "$ours" inspect --timeout 300 --json >"$work/$label.host.json" 2>"$work/$label.err"; then
        fail "$label: inspect (host) failed: $(cat "$work/$label.err")"
    elif out=$(check_host_json "$work/$label.host.json" "$s" "$c"); then
        echo "ok   $label: inspect lists both QPs as RC in RTS"
    else
        fail "$label: inspect (host): $out"
        cat "$work/$label.host.json"
    fi
    echo "--- rverbs inspect --pid $c --entries (table, RQ entries cut to 3)"
    "$ours" inspect --timeout 300 --pid "$c" --entries >"$work/$label.table" 2>&1 ||
        fail "$label: inspect --pid $c --entries (table) failed"
    awk '
        /^RQ / { rq = 1; n = 0; print; next }
        /^$/ { rq = 0 }
        rq && /^  \[/ { if (++n > 3) { if (n == 4) print "  ..."; next } }
        { print }' "$work/$label.table"
    echo "--- rverbs inspect (table)"
    "$ours" inspect --timeout 300 || fail "$label: inspect (table) failed"
    kill -CONT "$c"
    kill "$c" "$s" 2>/dev/null
    wait "$c" "$s" 2>/dev/null
}

scenario ibv ibv_rc_pingpong
scenario ours "$ours" rc-pingpong

# SRQ: ibv_srq_pingpong's client (4 QPs on one SRQ) must show one SRQ ring
# tied to its SRQ, with posted 4096-byte receives, and four send queues
# tied to its four QPs, and no per-QP receive queue.
srq_scenario() {
    port=$((port + 1))
    local -a cmd=(ibv_srq_pingpong -d "$dev" -g 1 -q 4 -n 100000000 -p "$port")
    echo "=== srq: ${cmd[*]}"
    "${cmd[@]}" >"$work/srq.server" 2>&1 &
    local s=$!
    pids+=("$s")
    if ! wait_listen "$port" "$s"; then
        fail "srq: server not listening"
        cat "$work/srq.server"
        return
    fi
    "${cmd[@]}" 127.0.0.1 >"$work/srq.client" 2>&1 &
    local c=$!
    pids+=("$c")
    if ! wait_rts "$c"; then
        fail "srq: client QP never reached RTS"
        cat "$work/srq.server" "$work/srq.client"
        return
    fi
    sleep 0.5
    kill -STOP "$c"
    sleep 0.2
    local out
    if ! "$ours" inspect --timeout 300 --pid "$c" --entries --json >"$work/srq.json" 2>"$work/srq.err"; then
        fail "srq: inspect --pid $c failed: $(cat "$work/srq.err")"
    elif out=$(python3 - "$work/srq.json" 2>&1 <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
kinds = sorted(r["kind"] for r in doc["rings"])
assert kinds == ["CQ", "SQ", "SQ", "SQ", "SQ", "SRQ"], kinds
qpns = sorted(q["lqpn"] for q in doc["qps"])
sq_qpns = sorted(r["qpn"] for r in doc["rings"] if r["kind"] == "SQ")
assert sq_qpns == qpns and len(qpns) == 4, (sq_qpns, qpns)
srq = [r for r in doc["rings"] if r["kind"] == "SRQ"][0]
assert [s["srqn"] for s in doc["srqs"]] == [srq["srqn"]], (doc["srqs"], srq["srqn"])
assert srq["depth"] >= 500 and srq["fill"] >= 1 and len(srq["entries"]) == srq["fill"], srq
for e in srq["entries"]:
    assert e["num_sge"] == 1 and e["sges"][0]["length"] == 4096, e
print("SRQ %d depth %d (%d posted), SQs of QPs %s" % (srq["srqn"], srq["depth"], srq["fill"], qpns))
EOF
    ); then
        echo "ok   srq: $out"
    else
        fail "srq: $out"
        cat "$work/srq.json"
    fi
    kill -CONT "$c"
    kill "$c" "$s" 2>/dev/null
    wait "$c" "$s" 2>/dev/null
}
srq_scenario

# Outstanding sends: ib_send_bw with its server stopped.
check_rnr_json() {
    python3 - "$1" "$2" "$3" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
host = json.load(open(sys.argv[2]))
server = int(sys.argv[3])
sqs = [r for r in doc["rings"] if r["kind"] == "SQ"]
assert len(sqs) == 1, "SQ rings: %r" % [(r["kind"], r["basis"]) for r in doc["rings"]]
sq = sqs[0]
assert sq["qpn"] == doc["qps"][0]["lqpn"], "SQ tied to %r" % sq["qpn"]
es = sq["entries"]
assert sq["fill"] > 0 and len(es) == sq["fill"], "fill %d, %d entries" % (sq["fill"], len(es))
for e in es:
    assert e["opcode"] == "SEND" and e["length"] == 4096, e
    assert e["num_sge"] == 1 and e["sges"][0]["length"] == 4096, e
started = [e for e in es if e["state"] != "posted"]
if es[0]["state"] == "posted":
    # rxe puts every outstanding send back to "posted" when an RNR NAK
    # arrives and starts them again when its RNR timer fires: a snapshot
    # in between has no PSN to compare. Exit 2: take another.
    print("the oldest send is back to posted (RNR retry wait)")
    sys.exit(2)
peer = [q for q in host["qps"] if q["pid"] == server]
assert len(peer) == 1, peer
want = peer[0]["rq_psn"]
assert es[0]["first_psn"] == want, \
    "oldest send at PSN %r, the server expects %r" % (es[0]["first_psn"], want)
print("%d outstanding SENDs (%d started), oldest at PSN %d = server's expected PSN"
      % (len(es), len(started), want))
EOF
}

# rq_psn PID: the expected PSN of process PID's (one) QP, per iproute2.
rq_psn() {
    rdma res show qp 2>/dev/null | grep " pid $1 " | sed -n 's/.* rq-psn \([0-9]*\).*/\1/p'
}

rnr() {
    port=$((port + 1))
    if ! command -v ib_send_bw >/dev/null; then
        fail "ib_send_bw (perftest) is missing"
        return
    fi
    local -a cmd=(ib_send_bw -d "$dev" -x 1 -s 4096 -D 120 -p "$port")
    echo "=== rnr: ${cmd[*]}"
    "${cmd[@]}" >"$work/rnr.server" 2>&1 &
    local s=$!
    pids+=("$s")
    if ! wait_listen "$port" "$s"; then
        fail "rnr: server not listening"
        cat "$work/rnr.server"
        return
    fi
    "${cmd[@]}" 127.0.0.1 >"$work/rnr.client" 2>&1 &
    local c=$!
    pids+=("$c")
    if ! wait_rts "$c"; then
        fail "rnr: client QP never reached RTS"
        cat "$work/rnr.server" "$work/rnr.client"
        return
    fi
    sleep 1
    kill -STOP "$s"
    # Stop the client only once the server's receives are used up (its
    # expected PSN holds still): before that, the client's sends would
    # still complete after it stopped and leave its SQ empty.
    local prev="" cur="" tries
    for tries in $(seq 40); do
        sleep 0.5
        cur=$(rq_psn "$s")
        [ -n "$cur" ] && [ "$cur" = "$prev" ] && break
        prev=$cur
    done
    if [ -z "$cur" ] || [ "$cur" != "$prev" ]; then
        fail "rnr: the stopped server's expected PSN never held still ($prev, then $cur)"
    fi
    kill -STOP "$c"
    sleep 0.5
    local out rc=2
    for tries in $(seq 10); do
        if ! "$ours" inspect --timeout 300 --pid "$c" --entries --json >"$work/rnr.json" 2>"$work/rnr.err"; then
            out="inspect --pid $c failed: $(cat "$work/rnr.err")"
            rc=1
            break
        elif ! "$ours" inspect --timeout 300 --json >"$work/rnr.host.json" 2>"$work/rnr.err"; then
            out="inspect (host) failed: $(cat "$work/rnr.err")"
            rc=1
            break
        fi
        out=$(check_rnr_json "$work/rnr.json" "$work/rnr.host.json" "$s" 2>&1)
        rc=$?
        [ $rc -ne 2 ] && break
        sleep 0.1
    done
    if [ $rc -eq 0 ]; then
        echo "ok   rnr: $out (snapshot $tries)"
    elif [ $rc -eq 2 ]; then
        fail "rnr: in $tries snapshots the oldest send was never started: $out"
    else
        fail "rnr: $out"
        cat "$work/rnr.json"
    fi
    echo "--- rverbs inspect --pid $c --entries (table, SQ entries cut to 4)"
    "$ours" inspect --timeout 300 --pid "$c" --entries >"$work/rnr.table" 2>&1 ||
        fail "rnr: inspect --pid $c --entries (table) failed"
    awk '
        /^SQ / { sq = 1; n = 0; print; next }
        /^$/ { sq = 0 }
        sq && /^  \[/ { if (++n > 4) { if (n == 5) print "  ..."; next } }
        { print }' "$work/rnr.table"
    kill -CONT "$s" "$c"
    kill "$c" "$s" 2>/dev/null
    wait "$c" "$s" 2>/dev/null
}
rnr

# Error paths.
missing=$(($(cat /proc/sys/kernel/pid_max) + 1))
if "$ours" inspect --timeout 300 --pid "$missing" >"$work/missing" 2>&1; then
    fail "inspect --pid $missing (no such process) succeeded"
elif grep -q "no process with pid $missing" "$work/missing"; then
    echo "ok   no such process: $(cat "$work/missing")"
else
    fail "no such process: unexpected message: $(cat "$work/missing")"
fi
sleep 30 &
idle=$!
pids+=("$idle")
if "$ours" inspect --timeout 300 --pid "$idle" >"$work/idle" 2>&1 && grep -q "no RDMA queues" "$work/idle"; then
    echo "ok   no queues: $(cat "$work/idle")"
else
    fail "a process without queues: $(cat "$work/idle")"
fi
# A process we may not read: the idle one, inspected as nobody.
if command -v setpriv >/dev/null; then
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$ours" inspect --timeout 300 --pid "$idle" >"$work/denied" 2>&1
    rc=$?
    if [ $rc -ne 0 ] && grep -q "not allowed" "$work/denied"; then
        echo "ok   not allowed (exit $rc): $(cat "$work/denied")"
    else
        fail "inspect as nobody: exit $rc: $(cat "$work/denied")"
    fi
else
    fail "setpriv is missing: cannot test the permission check"
fi
kill "$idle" 2>/dev/null

exit $failed
