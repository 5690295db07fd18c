//! The EFA data-path cost probe: two SRD QPs of one context, each on its
//! own CQ, an AH to the port's own GID, then ITERS rounds of one measured
//! step, under `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='*measured_*'` next to its libefa twin
//! (tools/bench/efa_postpoll.c), on the emulated EFA device of
//! `tests/efa-emu`. Only the functions named `*measured_*` (the post and
//! the poll, everything they call included) are counted.
//!
//! Modes:
//! - `send`: post_send of one signaled 64-byte SEND on A + the poll that
//!   returns its completion (B's receive is posted and reaped unmeasured);
//! - `recv`: post_recv of one 64-byte receive on B + the poll that returns
//!   its completion (A's SEND is posted and reaped unmeasured).
//!
//! EFA has no completion events: between the post and the measured poll
//! the probe reaps the other side's completion (unmeasured; the device
//! writes the receive's entry before the send's) and sleeps a little. A
//! measured poll that finds nothing is counted and reported. Every
//! round sends a payload of its own and compares the received bytes with
//! it (unmeasured), reporting the rounds checked as `verified=N`, which
//! `cargo xtask bench` requires. It runs without valgrind too (a quick
//! self-check).
//!
//! Usage: `efa_postpoll send|recv ITERS [DEVICE]` (default: the first EFA
//! device).

use std::process::ExitCode;
use std::time::Duration;

use rverbs::{
    AccessFlags, AhAttr, Cq, Driver, GlobalRoute, PostFailed, Qp, QpAttr, QpCap, QpInitAttr,
    QpType, RecvWr, RingLost, SendWr, Sge, UdSendWr, Wc, WcStatus,
};

const MSG: u32 = 64;
const QKEY: u32 = 0x1111_1111;
const WARMUP: u64 = 50;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Measured: one post_send call.
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_efa_post_send(qp: &mut Qp, wrs: &[SendWr<'_>]) -> Result<(), PostFailed> {
    qp.post_send(wrs)
}

/// Measured: one post_recv call.
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_efa_post_recv(qp: &mut Qp, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
    qp.post_recv(wrs)
}

/// Measured: one poll call.
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_efa_poll(cq: &mut Cq, wc: &mut [Wc]) -> Result<usize, RingLost> {
    cq.poll(wc)
}

fn settle() {
    std::thread::sleep(Duration::from_millis(2));
}

/// One successful completion of `cq`, unmeasured.
fn reap(cq: &mut Cq) -> Res<()> {
    let mut wc = [Wc::default(); 1];
    for _ in 0..5000 {
        if cq.poll(&mut wc)? == 1 {
            if wc[0].status() != WcStatus::SUCCESS {
                return Err(format!("completion {}", wc[0].status()).into());
            }
            return Ok(());
        }
        settle();
    }
    Err("no completion".into())
}

fn run(send: bool, iters: u64, dev: Option<&str>) -> Res<(u64, u64)> {
    let devs = rverbs::devices()?;
    let dev = devs
        .iter()
        .find(|d| match dev {
            Some(n) => d.name() == n,
            None => *d.driver() == Driver::Efa,
        })
        .ok_or("no EFA device")?;
    let ctx = dev.open()?;
    let pd = ctx.alloc_pd()?;
    let mut mr = pd.alloc_mr(2 * MSG as usize, AccessFlags::LOCAL_WRITE)?;
    let mut cqa = ctx.create_cq(64)?;
    let mut cqb = ctx.create_cq(64)?;
    let srd = |cq: &Cq| -> Res<Qp> {
        let mut qp = pd.create_qp(&QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Srd,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })?;
        qp.ready_ud(1, QKEY, 0)?;
        qp.modify(&QpAttr {
            rnr_retry: Some(7),
            ..Default::default()
        })?;
        Ok(qp)
    };
    let mut a = srd(&cqa)?;
    let mut b = srd(&cqb)?;
    let gid = ctx.query_gid(1, 0)?;
    let ah = pd.create_ah(&AhAttr {
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid: gid,
            hop_limit: 1,
            ..Default::default()
        }),
        ..Default::default()
    })?;
    let ss = [Sge {
        addr: mr.addr(),
        length: MSG,
        lkey: mr.lkey(),
    }];
    let rs = [Sge {
        addr: mr.addr() + u64::from(MSG),
        length: MSG,
        lkey: mr.lkey(),
    }];
    let swr = [SendWr::send(1, &ss).signaled().to(&ah, b.qp_num(), QKEY)];
    let rwr = [RecvWr::new(2, &rs)];
    let mut wc = [Wc::default(); 1];
    let mut empty = 0u64;
    let mut verified = 0u64;
    for i in 0..WARMUP + iters {
        let measured = i >= WARMUP;
        // Each round's payload differs; the receive buffer starts cleared
        // (no receive is outstanding between rounds).
        let pat: [u8; MSG as usize] =
            std::array::from_fn(|j| (i as u8).wrapping_mul(31).wrapping_add(j as u8));
        mr.write_at(0, &pat)?;
        mr.fill(MSG as usize.., 0)?;
        if send {
            b.post_recv(&rwr)?;
            if measured {
                rverbs_measured_efa_post_send(&mut a, &swr)?;
            } else {
                a.post_send(&swr)?;
            }
            reap(&mut cqb)?;
            settle();
            if measured {
                while rverbs_measured_efa_poll(&mut cqa, &mut wc)? != 1 {
                    empty += 1;
                    settle();
                }
                if wc[0].status() != WcStatus::SUCCESS {
                    return Err("send completion".into());
                }
            } else {
                reap(&mut cqa)?;
            }
        } else {
            if measured {
                rverbs_measured_efa_post_recv(&mut b, &rwr)?;
            } else {
                b.post_recv(&rwr)?;
            }
            a.post_send(&swr)?;
            reap(&mut cqa)?;
            settle();
            if measured {
                while rverbs_measured_efa_poll(&mut cqb, &mut wc)? != 1 {
                    empty += 1;
                    settle();
                }
                if wc[0].status() != WcStatus::SUCCESS {
                    return Err("recv completion".into());
                }
            } else {
                reap(&mut cqb)?;
            }
        }
        // The receive has completed in both modes: its bytes are the send's.
        let mut got = [0u8; MSG as usize];
        mr.read_at(MSG as usize, &mut got)?;
        if got != pat {
            return Err(format!("round {i}: the received bytes differ from the sent").into());
        }
        verified += 1;
    }
    Ok((empty, verified))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(iters)) = (args.get(1), args.get(2).and_then(|s| s.parse().ok())) else {
        eprintln!("usage: efa_postpoll send|recv ITERS [DEVICE]");
        return ExitCode::from(2);
    };
    let send = match mode.as_str() {
        "send" => true,
        "recv" => false,
        _ => {
            eprintln!("efa_postpoll: mode {mode:?} is not send or recv");
            return ExitCode::from(2);
        }
    };
    match run(send, iters, args.get(3).map(String::as_str)) {
        Ok((empty, verified)) => {
            println!(
                "efa_postpoll.rs {mode} {iters} iterations, {empty} empty measured polls, \
                 verified={verified}"
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("efa_postpoll: {e}");
            ExitCode::FAILURE
        }
    }
}
