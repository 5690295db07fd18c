//! `rverbs inspect --pid` on a process paused mid-run on our mlx5
//! provider (under the mlx5 emulator, run by `cargo xtask mlx5`).
//!
//! The program runs itself twice. The copy started with
//! `MLX5_INSPECT_TARGET=1` (the target) builds a known state and stops
//! there, blocked reading its standard input:
//! * RC QPs A and B connected; B has 4 receives posted; A posts a SEND
//!   (wr_id 1), an RDMA WRITE (2, to the MR's rkey) and a SEND_WITH_IMM
//!   (3, immediate 0xabcd), all signaled; B's receives complete and are
//!   polled; of A's three requester CQEs one is polled: A's SQ keeps WRs 2
//!   and 3 outstanding and its CQ two unpolled REQ CQEs;
//! * B posts a SEND (wr_id 0x50, solicited) to A, which has no receive
//!   posted: with `rnr_retry` 7 the emulated HCA retries it forever, so it
//!   stays in B's SQ (and B's CQ stays empty);
//! * an SRQ with 3 receives, a UD QP V on it and a UD QP U that sends one
//!   datagram to V (wr_id 0x300): V's receive is polled, U's send CQE is
//!   not: the SRQ holds 2 posted WQEs and 1 completed not yet reclaimed.
//!
//! Then it prints `READY` with the QP numbers, and the other copy (the
//! driver) runs `rverbs inspect --pid <target> --entries --json` (and the
//! text form, and `--qp`) with the emulator *not* preloaded (an outside
//! tool), checks every decoded field against what the target posted, and
//! closes the target's input, which makes it tear down and exit.
//!
//! The `rverbs` tool is `$RVERBS_CLI`, else the `rverbs` next to this
//! program. Prints `PASS <step>` / `FAIL <step>: <why>` lines.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rverbs::{
    opcode, AccessFlags, AhAttr, ConnectOpts, Cq, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr,
    SendFlags, Sge, Srq, SrqInitAttr, UdSendWr, Wc, WcStatus,
};
use serde_json::Value;

const TARGET_ENV: &str = "MLX5_INSPECT_TARGET";
const UD_QKEY: u32 = 0x1111_1111;
const TIMEOUT: Duration = Duration::from_secs(10);
/// Offsets in the registered buffer.
const SRC: u64 = 0x0;
const DST: u64 = 0x4000;
const RCV: u64 = 0x8000;
const IMM: u32 = 0xabcd;

fn main() -> ExitCode {
    let r = if std::env::var_os(TARGET_ENV).is_some() {
        target()
    } else {
        driver()
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err((step, why)) => {
            println!("FAIL {step}: {why}");
            ExitCode::FAILURE
        }
    }
}

type R<T = ()> = Result<T, (String, String)>;

fn at<T, E: std::fmt::Display>(step: &str, r: Result<T, E>) -> R<T> {
    r.map_err(|e| (step.to_string(), e.to_string()))
}

fn fail<T>(step: &str, why: impl Into<String>) -> R<T> {
    Err((step.to_string(), why.into()))
}

// ---- The target ----------------------------------------------------------

fn qp(pd: &Pd, scq: &Cq, rcq: &Cq, t: QpType, srq: Option<&Srq>) -> R<Qp> {
    let attr = QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        qp_type: t,
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: if srq.is_some() { 0 } else { 8 },
            max_send_sge: 2,
            max_recv_sge: if srq.is_some() { 0 } else { 2 },
            max_inline_data: 64,
        },
        sq_sig_all: false,
    };
    at(
        "create_qp",
        match srq {
            Some(s) => pd.create_qp_with_srq(&attr, s),
            None => pd.create_qp(&attr),
        },
    )
}

fn connect(a: &mut Qp, b: &Qp) -> R {
    let o = ConnectOpts {
        max_dest_rd_atomic: 4,
        max_rd_atomic: 4,
        min_rnr_timer: 1,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..ConnectOpts::default()
    };
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let remote = at("connect", b.endpoint(&o))?;
    at("connect", a.connect(&remote, access, &o))
}

/// Polls `cq` until `n` successful completions arrived; returns them.
fn poll_n(step: &str, cq: &mut Cq, n: usize) -> R<Vec<Wc>> {
    let mut got = Vec::new();
    let end = Instant::now() + TIMEOUT;
    let mut wc = [Wc::default(); 1];
    while got.len() < n {
        if at(step, cq.poll(&mut wc))? == 1 {
            if wc[0].status() != WcStatus::SUCCESS {
                return fail(
                    step,
                    format!("wr_id {:#x}: {}", wc[0].wr_id(), wc[0].status()),
                );
            }
            got.push(wc[0]);
        } else if Instant::now() > end {
            return fail(step, format!("{} of {n} completions", got.len()));
        }
    }
    Ok(got)
}

fn target() -> R {
    // Let the driver (our parent) and its children read us where the Yama
    // LSM restricts ptrace to descendants (an error elsewhere: ignored).
    // SAFETY: prctl(PR_SET_PTRACER) takes two integers and touches no
    // memory of ours.
    unsafe {
        libc::prctl(
            libc::PR_SET_PTRACER,
            libc::getppid() as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    let dev = at("open", verbs_tests::mlx5_device(None))?;
    let ctx = at("open", dev.open())?;
    let lid = at("open", ctx.query_port(1))?.lid;
    let pd = at("pd", ctx.alloc_pd())?;
    let mut mr = at(
        "mr",
        pd.alloc_mr(
            0x10000,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ),
    )?;
    at("mr", mr.write_at(0, &[0x5a; 256]))?;
    let sge = |off: u64, len: u32| Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    };
    let mut cq_a = at("cq", ctx.create_cq(16))?;
    let cq_b = at("cq", ctx.create_cq(16))?;
    let mut cq_r = at("cq", ctx.create_cq(16))?;
    let cq_u = at("cq", ctx.create_cq(16))?;
    let mut a = qp(&pd, &cq_a, &cq_a, QpType::Rc, None)?;
    let mut b = qp(&pd, &cq_b, &cq_r, QpType::Rc, None)?;
    connect(&mut a, &b)?;
    connect(&mut b, &a)?;
    let mut srq = at(
        "srq",
        pd.create_srq(&SrqInitAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        }),
    )?;
    let mut u = qp(&pd, &cq_u, &cq_u, QpType::Ud, None)?;
    let mut v = qp(&pd, &cq_u, &cq_r, QpType::Ud, Some(&srq))?;
    at("ud", u.ready_ud(1, UD_QKEY, 0))?;
    at("ud", v.ready_ud(1, UD_QKEY, 0))?;
    let ah = at(
        "ah",
        pd.create_ah(&AhAttr {
            dlid: lid,
            port_num: 1,
            ..AhAttr::default()
        }),
    )?;

    // B's receives, A's sends.
    let rs: Vec<[Sge; 1]> = (0..4).map(|i| [sge(RCV + i * 0x100, 256)]).collect();
    let rwrs: Vec<RecvWr<'_>> = rs
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(0x100 + i as u64, s))
        .collect();
    at("post_recv", b.post_recv(&rwrs))?;
    let s64 = [sge(SRC, 64)];
    let s32 = [sge(SRC, 32)];
    let sig = SendFlags::SIGNALED;
    let wrs = [
        opcode::Send::new(1, &s64).build().flags(sig),
        opcode::Write::new(2, &s64, mr.addr() + DST, mr.rkey())
            .build()
            .flags(sig),
        opcode::Send::new(3, &s32).imm(IMM).build().flags(sig),
    ];
    at("post_send", a.post_send(&wrs))?;
    poll_n("rc_recv", &mut cq_r, 2)?;
    // A control command: the emulated HCA finished the pass that wrote
    // the receive CQEs (and with them the requester CQEs).
    at("barrier", srq.query())?;
    let got = poll_n("rc_poll_one", &mut cq_a, 1)?;
    if got[0].wr_id() != 1 {
        return fail("rc_poll_one", format!("wr_id {}", got[0].wr_id()));
    }
    // B -> A: A has no receive; retried forever.
    let s16 = [sge(SRC, 16)];
    at(
        "rnr_send",
        b.post_send(&[opcode::Send::new(0x50, &s16)
            .build()
            .flags(sig | SendFlags::SOLICITED)]),
    )?;

    // The SRQ and the UD pair.
    let ss: Vec<[Sge; 1]> = (0..3)
        .map(|i| [sge(RCV + 0x1000 + i * 0x100, 256)])
        .collect();
    let swrs: Vec<RecvWr<'_>> = ss
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(0x200 + i as u64, s))
        .collect();
    at("post_srq_recv", srq.post_srq_recv(&swrs))?;
    let s40 = [sge(SRC, 40)];
    at(
        "ud_send",
        u.post_send(&[opcode::Send::new(0x300, &s40).build().flags(sig).to(
            &ah,
            v.qp_num(),
            UD_QKEY,
        )]),
    )?;
    poll_n("ud_recv", &mut cq_r, 1)?;
    at("barrier", srq.query())?;

    println!(
        "READY {{\"a\": {}, \"b\": {}, \"u\": {}, \"v\": {}, \"rkey\": {}, \"lkey\": {}, \"addr\": {}, \"srqn\": {}}}",
        a.qp_num(),
        b.qp_num(),
        u.qp_num(),
        v.qp_num(),
        mr.rkey(),
        mr.lkey(),
        mr.addr(),
        srq.srq_num()
    );
    let _ = std::io::stdout().flush();
    // Paused until the driver closes our input.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop((a, b, u, v, ah, srq, cq_a, cq_b, cq_r, cq_u, mr));
    println!("PASS target_teardown");
    Ok(())
}

// ---- The driver ----------------------------------------------------------

fn cli() -> R<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("RVERBS_CLI") {
        return Ok(p.into());
    }
    let me = at("cli", std::env::current_exe())?;
    Ok(me.with_file_name("rverbs"))
}

/// Runs the tool on `pid` with `args` (no emulator preloaded), bounded.
fn inspect(pid: u32, args: &[&str]) -> R<String> {
    let step = "run_inspect";
    let mut c = Command::new(cli()?);
    c.arg("inspect")
        .arg("--pid")
        .arg(pid.to_string())
        .args(args)
        .env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = at(step, c.spawn())?;
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        let mut e = String::new();
        let _ = err.read_to_string(&mut e);
        (s, e)
    });
    let status =
        wait_bounded(&mut child, TIMEOUT).ok_or_else(|| (step.into(), "timed out".into()))?;
    let (s, e) = reader.join().unwrap_or_default();
    if !status {
        return fail(step, format!("rverbs inspect {args:?} failed: {e}{s}"));
    }
    Ok(s)
}

/// Waits for `c` at most `limit` (killing it then); whether it exited 0.
fn wait_bounded(c: &mut Child, limit: Duration) -> Option<bool> {
    let end = Instant::now() + limit;
    loop {
        if let Ok(Some(s)) = c.try_wait() {
            return Some(s.success());
        }
        if Instant::now() > end {
            let _ = c.kill();
            let _ = c.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pass(step: &str) {
    println!("PASS {step}");
}

fn check(step: &str, ok: bool, why: impl FnOnce() -> String) -> R {
    if ok {
        pass(step);
        Ok(())
    } else {
        fail(step, why())
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(u64::MAX)
}

fn driver() -> R {
    let me = at("spawn", std::env::current_exe())?;
    let mut child = at(
        "spawn",
        Command::new(me)
            .env(TARGET_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn(),
    )?;
    let pid = child.id();
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let ready = loop {
        match rx.recv_timeout(TIMEOUT) {
            Ok(l) if l.starts_with("READY ") => break l[6..].to_string(),
            Ok(l) => {
                // The target's own PASS/FAIL lines count.
                println!("{l}");
                if l.starts_with("FAIL ") {
                    let _ = child.kill();
                    return fail("target", "the target failed before pausing");
                }
            }
            Err(_) => {
                let _ = child.kill();
                return fail("target", "no READY line");
            }
        }
    };
    pass("target_paused");
    let r = checks(pid, &ready);
    // Let the target go: it tears down and exits.
    drop(child.stdin.take());
    let ok = wait_bounded(&mut child, TIMEOUT);
    while let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
        println!("{l}");
    }
    r?;
    check("target_exit", ok == Some(true), || {
        format!("target ended: {ok:?}")
    })
}

/// The queue of `kind` and number `num` in the JSON.
fn queue<'a>(v: &'a Value, kind: &str, num: u64) -> Option<&'a Value> {
    v["mlx5"]["queues"]
        .as_array()?
        .iter()
        .find(|q| q["kind"] == kind && u(&q["num"]) == num)
}

fn checks(pid: u32, ready: &str) -> R {
    let ids: Value = at("ready", serde_json::from_str(ready))?;
    let (a, b, uq, vq) = (u(&ids["a"]), u(&ids["b"]), u(&ids["u"]), u(&ids["v"]));
    let (rkey, lkey, addr) = (u(&ids["rkey"]), u(&ids["lkey"]), u(&ids["addr"]));
    let srqn = u(&ids["srqn"]);
    let text = inspect(pid, &["--entries", "--json"])?;
    let v: Value = at("json", serde_json::from_str(&text))?;
    let dirs = v["mlx5"]["directories"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    check(
        "directory_found",
        dirs.len() == 1 && dirs[0]["error"].is_null(),
        || format!("{dirs:?}"),
    )?;
    let sym = dirs[0]["symbol"].as_str().unwrap_or("");
    check(
        "directory_symbol",
        sym.starts_with("RVERBS_MLX5_QUEUE_DIR_V1_"),
        || sym.into(),
    )?;
    // 4 SQs (A, B, U, V), 3 RQs (A, B, U; V receives from the SRQ), 1
    // SRQ, 4 CQs.
    let qs = v["mlx5"]["queues"].as_array().cloned().unwrap_or_default();
    let count = |k: &str| qs.iter().filter(|q| q["kind"] == k).count();
    check(
        "queue_counts",
        (count("SQ"), count("RQ"), count("SRQ"), count("CQ")) == (4, 3, 1, 4),
        || {
            format!(
                "SQ {} RQ {} SRQ {} CQ {}",
                count("SQ"),
                count("RQ"),
                count("SRQ"),
                count("CQ")
            )
        },
    )?;
    let need = |k: &str, n: u64| {
        queue(&v, k, n)
            .cloned()
            .ok_or_else(|| ("queues".to_string(), format!("no {k} {n:#x}")))
    };

    // A's SQ: WRs 2 and 3 outstanding (WQE indexes 1, 2), producer 3.
    let sq_a = need("SQ", a)?;
    let e = sq_a["entries_decoded"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    check(
        "sq_counters",
        u(&sq_a["producer"]) == 3
            && u(&sq_a["consumer"]) == 1
            && u(&sq_a["queued"]) == 2
            && u(&sq_a["retired_wrs"]) == 1,
        || format!("{sq_a}"),
    )?;
    check(
        "sq_rdma_write",
        e.len() == 2
            && e[0]["opcode"] == "RDMA_WRITE"
            && u(&e[0]["index"]) == 1
            && u(&e[0]["wqe_index"]) == 1
            && u(&e[0]["wr_id"]) == 2
            && u(&e[0]["ds"]) == 3
            && u(&e[0]["qpn"]) == a
            && e[0]["flags"] == serde_json::json!(["SIGNALED"])
            && u(&e[0]["remote_addr"]) == addr + DST
            && u(&e[0]["rkey"]) == rkey
            && u(&e[0]["sges"][0]["length"]) == 64
            && u(&e[0]["sges"][0]["lkey"]) == lkey
            && u(&e[0]["sges"][0]["addr"]) == addr + SRC,
        || format!("{:?}", e.first()),
    )?;
    check(
        "sq_send_imm",
        e.get(1).is_some_and(|w| {
            w["opcode"] == "SEND_IMM"
                && u(&w["index"]) == 2
                && u(&w["wr_id"]) == 3
                && u(&w["ds"]) == 2
                && u(&w["imm_data"]) == u64::from(IMM)
                && u(&w["sges"][0]["length"]) == 32
                && w.get("remote_addr").is_none()
        }),
        || format!("{:?}", e.get(1)),
    )?;
    // B's SQ: the SEND stuck in RNR, solicited.
    let sq_b = need("SQ", b)?;
    let e = sq_b["entries_decoded"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    check(
        "sq_rnr_send",
        u(&sq_b["queued"]) == 1
            && e.first().is_some_and(|w| {
                w["opcode"] == "SEND"
                    && u(&w["wr_id"]) == 0x50
                    && u(&w["index"]) == 0
                    && w["flags"] == serde_json::json!(["SIGNALED", "SOLICITED"])
            }),
        || format!("{sq_b}"),
    )?;
    // U's SQ: the UD send with its datagram segment.
    let sq_u = need("SQ", uq)?;
    let e = sq_u["entries_decoded"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    check(
        "sq_ud_send",
        e.first().is_some_and(|w| {
            w["opcode"] == "SEND"
                && u(&w["wr_id"]) == 0x300
                && u(&w["ds"]) == 5
                && u(&w["ud"]["remote_qpn"]) == vq
                && u(&w["ud"]["remote_qkey"]) == u64::from(UD_QKEY)
                && u(&w["sges"][0]["length"]) == 40
        }),
        || format!("{sq_u}"),
    )?;
    // B's RQ: 4 posted, 2 consumed: 0x102 and 0x103 at counters 2 and 3.
    let rq_b = need("RQ", b)?;
    let e = rq_b["entries_decoded"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    check(
        "rq_entries",
        u(&rq_b["producer"]) == 4
            && u(&rq_b["consumer"]) == 2
            && u(&rq_b["queued"]) == 2
            && e.len() == 2
            && u(&e[0]["wr_id"]) == 0x102
            && u(&e[1]["wr_id"]) == 0x103
            && u(&e[0]["sges"][0]["addr"]) == addr + RCV + 0x200
            && u(&e[0]["sges"][0]["length"]) == 256,
        || format!("{rq_b}"),
    )?;
    // A's RQ: nothing posted.
    let rq_a = need("RQ", a)?;
    check("rq_empty", u(&rq_a["queued"]) == 0, || format!("{rq_a}"))?;
    // The SRQ: 3 posted, 1 completed (not yet reclaimed), 2 queued.
    let srq = need("SRQ", srqn)?;
    let e = srq["entries_decoded"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut ids: Vec<u64> = e.iter().map(|w| u(&w["wr_id"])).collect();
    ids.sort();
    check(
        "srq_entries",
        u(&srq["producer"]) == 3
            && u(&srq["completed"]) == 1
            && u(&srq["queued"]) == 2
            && u(&srq["completed_not_reclaimed"]) == 1
            && ids == [0x201, 0x202]
            && u(&e[0]["sges"][0]["length"]) == 256,
        || format!("{srq}"),
    )?;
    // The CQs: A's holds the REQ CQEs of WRs 2 and 3 (WQE counters 1, 2)
    // past consumer index 1; U's the UD send's; B's and the receive CQ
    // none.
    let cqs: Vec<&Value> = qs.iter().filter(|q| q["kind"] == "CQ").collect();
    let with = |qpn: u64| {
        cqs.iter()
            .find(|c| {
                c["entries_decoded"]
                    .as_array()
                    .is_some_and(|e| e.iter().any(|x| u(&x["qpn"]) == qpn))
            })
            .copied()
    };
    let cq_a = with(a).ok_or_else(|| ("cq_req".to_string(), "no CQ holds A's CQEs".to_string()))?;
    let e = cq_a["entries_decoded"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    check(
        "cq_req",
        u(&cq_a["consumer"]) == 1
            && u(&cq_a["producer"]) == 3
            && e.len() == 2
            && e.iter()
                .all(|c| c["opcode"] == "REQ" && u(&c["owner"]) == 0)
            && u(&e[0]["wqe_counter"]) == 1
            && e[0]["wqe_opcode"] == "RDMA_WRITE"
            && u(&e[1]["wqe_counter"]) == 2
            && e[1]["wqe_opcode"] == "SEND_IMM",
        || format!("{cq_a}"),
    )?;
    let cq_u = with(uq).ok_or_else(|| ("cq_ud".to_string(), "no CQ holds U's CQE".to_string()))?;
    check(
        "cq_ud",
        u(&cq_u["queued"]) == 1 && cq_u["entries_decoded"][0]["wqe_opcode"] == "SEND",
        || format!("{cq_u}"),
    )?;
    let empty = cqs.iter().filter(|c| u(&c["queued"]) == 0).count();
    check("cq_empty", empty == 2, || format!("{empty} empty CQs"))?;

    // The text form and the --qp filter.
    let t = inspect(pid, &["--entries"])?;
    check(
        "text",
        t.contains("mlx5 queues")
            && t.contains(&format!(
                "RDMA_WRITE ds 3 flags SIGNALED remote {:#x} rkey {rkey:#x}",
                addr + DST
            ))
            && t.contains("owner 0 REQ qp"),
        || t.clone(),
    )?;
    let f = inspect(pid, &["--qp", &a.to_string(), "--json"])?;
    let fv: Value = at("qp_filter", serde_json::from_str(&f))?;
    let only = fv["mlx5"]["queues"].as_array().cloned().unwrap_or_default();
    check(
        "qp_filter",
        only.len() == 2
            && only.iter().all(|q| u(&q["num"]) == a)
            && only.iter().all(|q| q.get("entries_decoded").is_none()),
        || f.clone(),
    )?;
    // The watch view (no terminal: two refreshes, then it stops): a row
    // per mlx5 queue, QP a's SQ and RQ among them.
    let w = inspect(pid, &["--watch", "--interval", "0.2", "--iterations", "2"])?;
    let qp_rows = |kind: &str| {
        w.lines()
            .filter(|l| {
                l.starts_with(kind) && l.contains(" mlx5 ") && l.contains(&format!("qp {a:#08x} "))
            })
            .count()
    };
    check(
        "watch",
        w.contains(&format!("process {pid} ("))
            && w.contains("q quits")
            && w.lines().filter(|l| l.contains(" mlx5 ")).count() >= 4
            && qp_rows("SQ") >= 1
            && qp_rows("RQ") >= 1,
        || w.clone(),
    )?;
    Ok(())
}
