//! The data-path cost probe: two RC QPs on one device connected to each
//! other, then ITERS rounds of one measured step. `cargo xtask bench` runs it
//! under `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='*measured_*'` next to rdma-core's twin
//! (tools/bench/postpoll.c), so only the functions named `*measured_*`
//! (the post and the poll, everything they call included) are counted.
//!
//! Modes:
//! - `send`: post_send of one signaled 64-byte SEND on A + the poll that
//!   returns its completion (B's receive is re-posted unmeasured);
//! - `recv`: post_recv of one 64-byte receive on B + the poll that returns
//!   its completion (A's SEND is posted and reaped unmeasured);
//! - `write32`: post_send of a chain of 32 64-byte RDMA WRITEs, only the
//!   last signaled, + the poll that returns the one completion;
//! - `batch32`: the same 32 RDMA WRITEs through post_send_batch (one
//!   `SendBatch`, 32 `BatchWr` entries, the last signaled) + the poll.
//!   rdma-core has no batch call: its twin posts the `write32` chain.
//!
//! Between the post and the poll the program blocks on a completion channel
//! (unmeasured), so every measured poll finds its completion and no empty
//! polls are counted. Warm-up rounds go through the same calls unmeasured.
//! At the end it checks that the bytes arrived. It runs without valgrind
//! too (a quick self-check).
//!
//! Usage: `postpoll send|recv|write32|batch32 ITERS [DEVICE [GID_INDEX]]`
//! (defaults: rxe0, GID index 1).

use std::process::ExitCode;
use std::time::Duration;

use rverbs::{
    AccessFlags, BatchWr, CompChannel, ConnectOpts, Cq, Mr, PostFailed, Qp, QpCap, QpInitAttr,
    QpType, RecvWr, RingLost, SendBatch, SendWr, Sge, Wc, WcOpcode,
};

const MSG: usize = 64;
const CHAIN: usize = 32;
const DEPTH: u32 = 64;
const WARMUP: u64 = 50;
const WAIT: Duration = Duration::from_secs(10);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Measured: one post_send call (a single WR or a chain).
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_post_send(qp: &mut Qp, wrs: &[SendWr<'_>]) -> Result<(), PostFailed> {
    qp.post_send(wrs)
}

/// Measured: one post_send_batch call.
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_post_batch(
    qp: &mut Qp,
    batch: &SendBatch,
    wrs: &[BatchWr],
) -> Result<(), PostFailed> {
    qp.post_send_batch(batch, wrs)
}

/// Measured: one post_recv call.
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_post_recv(qp: &mut Qp, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
    qp.post_recv(wrs)
}

/// Measured: one poll call.
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_poll(cq: &mut Cq, wc: &mut [Wc]) -> Result<usize, RingLost> {
    cq.poll(wc)
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Send,
    Recv,
    Write32,
    Batch32,
}

/// Blocks until the armed `cq` fires (bounded, unmeasured).
fn wait_event(ch: &CompChannel, cq: &Cq) -> Res<()> {
    match ch.get_event_timeout(WAIT)? {
        Some(id) if id == cq.event_id() => Ok(()),
        Some(_) => Err("event for the wrong CQ".into()),
        None => Err(format!("no completion event in {WAIT:?}").into()),
    }
}

fn check_wc(wc: &Wc, opcode: WcOpcode) -> Res<()> {
    if !wc.is_success() || wc.opcode() != opcode {
        return Err(format!(
            "completion {} / {:?}, expected success / {opcode:?}",
            wc.status(),
            wc.opcode()
        )
        .into());
    }
    Ok(())
}

/// Polls (unmeasured) until exactly one completion arrives.
fn reap(cq: &mut Cq, opcode: WcOpcode) -> Res<()> {
    let mut wc = [Wc::default(); 16];
    let n = cq.poll_until(&mut wc, 1, WAIT)?;
    if n != 1 {
        return Err(format!("{n} completions, expected 1").into());
    }
    check_wc(&wc[0], opcode)
}

fn got_one(n: usize) -> Res<()> {
    if n != 1 {
        return Err(format!("poll returned {n}, expected 1").into());
    }
    Ok(())
}

fn run() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: postpoll send|recv|write32|batch32 ITERS [DEVICE [GID_INDEX]]";
    let mode = match args.first().map(String::as_str) {
        Some("send") => Mode::Send,
        Some("recv") => Mode::Recv,
        Some("write32") => Mode::Write32,
        Some("batch32") => Mode::Batch32,
        _ => return Err(usage.into()),
    };
    let iters: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .filter(|&n| n > 0)
        .ok_or(usage)?;
    let dev_name = args.get(2).map_or("rxe0", String::as_str);
    let gid_index: u8 = match args.get(3) {
        Some(s) => s.parse().map_err(|_| usage)?,
        None => 1,
    };

    let devs = rverbs::devices()?;
    let dev = devs
        .iter()
        .find(|d| d.name() == dev_name)
        .ok_or_else(|| format!("no device {dev_name}"))?;
    let ctx = dev.open()?;
    let pd = ctx.alloc_pd()?;
    let ch = ctx.create_comp_channel()?;
    let mut cq_a = ctx.create_cq_with(DEPTH, Some(&ch), 0)?;
    let mut cq_b = ctx.create_cq_with(DEPTH, Some(&ch), 0)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mut mr_a = pd.alloc_mr(4096, access)?;
    let mr_b = pd.alloc_mr(4096, access)?;
    let cap = QpCap {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = |cq| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        cap,
        sq_sig_all: false,
    };
    let mut qp_a = pd.create_qp(&init(&cq_a))?;
    let mut qp_b = pd.create_qp(&init(&cq_b))?;
    let oa = ConnectOpts {
        sgid_index: gid_index,
        sq_psn: 100,
        ..Default::default()
    };
    let ob = ConnectOpts {
        sgid_index: gid_index,
        sq_psn: 200,
        ..Default::default()
    };
    let (ea, eb) = (qp_a.endpoint(&oa)?, qp_b.endpoint(&ob)?);
    qp_a.connect(&eb, access, &oa)?;
    qp_b.connect(&ea, access, &ob)?;

    let data: Vec<u8> = (0..4096).map(|k| (k * 7 + 3) as u8).collect();
    mr_a.write_at(0, &data)?;

    let send_sge = [mr_a.sge(..MSG)?];
    let send = [SendWr::send(1, &send_sge).signaled()];
    let recv_sge = [mr_b.sge(..MSG)?];
    let recv = [RecvWr::new(2, &recv_sge)];
    let rb = mr_b.remote();
    let wsge: Vec<[Sge; 1]> = (0..CHAIN)
        .map(|k| mr_a.sge(k * MSG..(k + 1) * MSG).map(|s| [s]))
        .collect::<rverbs::Result<_>>()?;
    let mut chain: Vec<SendWr<'_>> = wsge
        .iter()
        .enumerate()
        .map(|(k, s)| SendWr::rdma_write(100 + k as u64, s, rb.addr + (k * MSG) as u64, rb.rkey))
        .collect();
    chain[CHAIN - 1] = chain[CHAIN - 1].signaled();
    let batch = SendBatch::rdma_write(rb.rkey);
    let entries: Vec<BatchWr> = wsge
        .iter()
        .enumerate()
        .map(|(k, s)| BatchWr::new(100 + k as u64, s[0], rb.addr + (k * MSG) as u64))
        .collect();

    if mode == Mode::Send {
        qp_b.post_recv(&recv)?;
    }
    let mut wc = [Wc::default(); 16];
    for i in 0..WARMUP + iters {
        let measure = i >= WARMUP;
        match mode {
            Mode::Send => {
                cq_a.req_notify(false)?;
                if measure {
                    rverbs_measured_post_send(&mut qp_a, &send)?;
                } else {
                    qp_a.post_send(&send)?;
                }
                wait_event(&ch, &cq_a)?;
                got_one(if measure {
                    rverbs_measured_poll(&mut cq_a, &mut wc)?
                } else {
                    cq_a.poll(&mut wc)?
                })?;
                check_wc(&wc[0], WcOpcode::SEND)?;
                reap(&mut cq_b, WcOpcode::RECV)?;
                qp_b.post_recv(&recv)?;
            }
            Mode::Recv => {
                if measure {
                    rverbs_measured_post_recv(&mut qp_b, &recv)?;
                } else {
                    qp_b.post_recv(&recv)?;
                }
                cq_b.req_notify(false)?;
                qp_a.post_send(&send)?;
                wait_event(&ch, &cq_b)?;
                got_one(if measure {
                    rverbs_measured_poll(&mut cq_b, &mut wc)?
                } else {
                    cq_b.poll(&mut wc)?
                })?;
                check_wc(&wc[0], WcOpcode::RECV)?;
                if wc[0].byte_len() as usize != MSG {
                    return Err(format!("received {} bytes", wc[0].byte_len()).into());
                }
                reap(&mut cq_a, WcOpcode::SEND)?;
            }
            Mode::Write32 | Mode::Batch32 => {
                cq_a.req_notify(false)?;
                // The same 32 WRITEs, as a chain or as a batch.
                match (mode == Mode::Batch32, measure) {
                    (true, true) => rverbs_measured_post_batch(&mut qp_a, &batch, &entries)?,
                    (true, false) => qp_a.post_send_batch(&batch, &entries)?,
                    (false, true) => rverbs_measured_post_send(&mut qp_a, &chain)?,
                    (false, false) => qp_a.post_send(&chain)?,
                }
                wait_event(&ch, &cq_a)?;
                got_one(if measure {
                    rverbs_measured_poll(&mut cq_a, &mut wc)?
                } else {
                    cq_a.poll(&mut wc)?
                })?;
                check_wc(&wc[0], WcOpcode::RDMA_WRITE)?;
                if wc[0].wr_id() != 100 + CHAIN as u64 - 1 {
                    return Err(format!("wr_id {}", wc[0].wr_id()).into());
                }
            }
        }
    }

    // The bytes really moved.
    let chained = matches!(mode, Mode::Write32 | Mode::Batch32);
    let n = if chained { CHAIN * MSG } else { MSG };
    check_bytes(&mr_b, &data[..n])?;
    let name = match mode {
        Mode::Send => "send",
        Mode::Recv => "recv",
        Mode::Write32 => "write32",
        Mode::Batch32 => "batch32",
    };
    println!(
        "postpoll.rs: mode={name} iters={iters} wrs_per_iter={} verified={n} bytes",
        if chained { CHAIN } else { 1 }
    );
    Ok(())
}

fn check_bytes(mr: &Mr, expected: &[u8]) -> Res<()> {
    let mut got = vec![0u8; expected.len()];
    mr.read_at(0, &mut got)?;
    if got != expected {
        return Err("the peer's buffer does not match".into());
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("postpoll: {e}");
            ExitCode::FAILURE
        }
    }
}
