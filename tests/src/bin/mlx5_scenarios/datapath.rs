//! datapath.c ported: the fixture ([`Dp`]: the C program's globals and
//! its connected main RC pair), the helpers every scenario uses
//! ([`poll_one`], [`expect_quiet`], [`expect_wc`], [`expect_bytes`],
//! [`pattern`], [`connect_rc`], [`fresh_pair`]), and [`datapath`], which
//! sets the fixture up, runs the scenarios of the sibling modules in the
//! C program's order and checks the teardown.

use std::time::{Duration, Instant};

use rverbs::{
    AccessFlags, AhAttr, Context, Cq, Device, Error, Mr, Mtu, Pd, Qp, QpAttr, QpCap, QpInitAttr,
    QpState, QpType, Sge, Srq, Wc, WcStatus,
};

use crate::events::{comp_arm_sequence, poll_blocking};
use crate::open_fds;
use crate::report::{fail, Ctx, Fail, Report, BUDGET, R};
use crate::reset::reset_clean;
use crate::resize::{cq_overrun, cq_resize, cq_resize_unpolled};
use crate::send_queue::{query_caps, query_qp_caps, signal_every, unsignaled_queue_full};
use crate::srq::{srq_destroy_unpolled, srq_empty, zero_length_sge};

/// How long one completion may take (the C programs' `TIMEOUT_MS`).
pub(crate) const TIMEOUT: Duration = Duration::from_millis(2000);
/// How long "no completion" must hold (the C programs' `expect_quiet`).
pub(crate) const QUIET: Duration = Duration::from_millis(50);

pub(crate) const DATAPATH_STEPS: &[&str] = &[
    "setup",
    "query_qp_caps",
    "send_recv",
    "send_imm",
    "send_inline",
    "send_3_sges_to_2",
    "rdma_write",
    "rdma_write_imm",
    "rdma_read",
    "cmp_swap",
    "cmp_swap_no_swap",
    "fetch_add",
    "unsignaled_chain",
    "sq_wrap",
    "srq",
    "srq_reuse",
    "ud",
    "ud_grh",
    "uc",
    "comp_channel",
    "comp_solicited",
    "comp_arm_twice",
    "comp_arm_stale",
    "bad_rkey",
    "bad_rkey_flush",
    "bad_rkey_requester_err",
    "bad_rkey_responder_err",
    "bad_rkey_responder_flush",
    "bad_rkey_access_event",
    "bad_lkey",
    "reset_reuse",
    "recv_too_small",
    "recv_flush",
    "rnr_retry",
    "rnr_retry_exceeded",
    "cq_resize",
    "cq_resize_below_unpolled",
    "cq_resize_grow_unpolled",
    "cq_overrun",
    "cq_overrun_stops",
    "reset_clean",
    "reset_rq_capacity",
    "srq_destroy_unpolled",
    "srq_empty",
    "srq_zero_length_sge",
    "rq_zero_length_sge",
    "unsignaled_queue_full",
    "signal_every",
    "query_caps",
    "poll_blocking",
    "teardown",
];

const DP_BUF: usize = 1 << 20;
pub(crate) const SRC: usize = 0x00000;
pub(crate) const DST: usize = 0x40000;
pub(crate) const AUX: usize = 0x80000;
pub(crate) const ATOM: usize = 0xF0000;

/// datapath.c's `fill`.
pub(crate) fn pattern(n: usize, seed: u32) -> Vec<u8> {
    (0..n)
        .map(|i| (seed as usize * 31 + i * 7 + (i >> 8)) as u8)
        .collect()
}

pub(crate) fn poll_one(step: &'static str, cq: &mut Cq) -> R<Wc> {
    let mut wc = [Wc::default(); 1];
    match cq.poll_until(&mut wc, 1, TIMEOUT) {
        Ok(_) => Ok(wc[0]),
        Err(Error::Timeout(_)) => fail(step, "timed out waiting for a completion"),
        Err(e) => fail(step, format!("poll failed: {e}")),
    }
}

pub(crate) fn expect_quiet(step: &'static str, cq: &mut Cq) -> R {
    let mut wc = [Wc::default(); 1];
    let end = Instant::now() + QUIET;
    while Instant::now() < end {
        if cq.poll(&mut wc).at(step)? != 0 {
            return fail(step, format!("unexpected extra completion {:?}", wc[0]));
        }
    }
    Ok(())
}

pub(crate) fn expect_wc(step: &'static str, wc: &Wc, status: WcStatus, wr_id: u64) -> R {
    if wc.status() != status {
        return fail(step, format!("status {}, expected {}", wc.status(), status));
    }
    if wc.wr_id() != wr_id {
        return fail(step, format!("wr_id {}, expected {wr_id}", wc.wr_id()));
    }
    Ok(())
}

fn read(mr: &Mr, off: usize, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    // In bounds: every offset here is inside the 1 MiB buffer.
    let _ = mr.read_at(off, &mut v);
    v
}

pub(crate) fn expect_bytes(step: &'static str, got: &[u8], want: &[u8]) -> R {
    if let Some(i) = (0..want.len()).find(|&i| got.get(i) != Some(&want[i])) {
        return fail(
            step,
            format!(
                "byte {i} is 0x{:02x}, expected 0x{:02x}",
                got.get(i).copied().unwrap_or(0),
                want[i]
            ),
        );
    }
    Ok(())
}

/// The C program's globals, plus its main pair.
pub(crate) struct Dp {
    pub(crate) ctx: Context,
    pub(crate) pd: Pd,
    pub(crate) mr: Mr,
    pub(crate) lid: u16,
    pub(crate) cqa: Cq,
    pub(crate) cqb: Cq,
    pub(crate) qa: Qp,
    pub(crate) qb: Qp,
}

impl Dp {
    pub(crate) fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + off as u64,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    pub(crate) fn put(&mut self, step: &'static str, off: usize, data: &[u8]) -> R {
        self.mr.write_at(off, data).at(step)
    }

    pub(crate) fn get(&self, off: usize, n: usize) -> Vec<u8> {
        read(&self.mr, off, n)
    }

    pub(crate) fn remote(&self, off: usize) -> u64 {
        self.mr.addr() + off as u64
    }

    pub(crate) fn make_qp(
        &self,
        step: &'static str,
        qp_type: QpType,
        cq: &Cq,
        srq: Option<&Srq>,
    ) -> R<Qp> {
        let attr = QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            qp_type,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: if srq.is_some() { 0 } else { 64 },
                max_send_sge: 4,
                max_recv_sge: if srq.is_some() { 0 } else { 4 },
                max_inline_data: 64,
            },
            sq_sig_all: false,
        };
        match srq {
            Some(s) => self.pd.create_qp_with_srq(&attr, s),
            None => self.pd.create_qp(&attr),
        }
        .at(step)
    }

    /// The main pair's setup and every scenario that follows, in order.
    fn setup(ctx: Context, step: &'static str) -> R<Dp> {
        let lid = ctx.query_port(1).at(step)?.lid;
        let pd = ctx.alloc_pd().at(step)?;
        let mr = pd
            .alloc_mr(
                DP_BUF,
                AccessFlags::LOCAL_WRITE
                    | AccessFlags::REMOTE_WRITE
                    | AccessFlags::REMOTE_READ
                    | AccessFlags::REMOTE_ATOMIC,
            )
            .at(step)?;
        let cqa = ctx.create_cq(256).at(step)?;
        let cqb = ctx.create_cq(256).at(step)?;
        let mk = |cq: &Cq| {
            pd.create_qp(&QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                qp_type: QpType::Rc,
                cap: QpCap {
                    max_send_wr: 64,
                    max_recv_wr: 64,
                    max_send_sge: 4,
                    max_recv_sge: 4,
                    max_inline_data: 64,
                },
                sq_sig_all: false,
            })
            .at(step)
        };
        let mut qa = mk(&cqa)?;
        let mut qb = mk(&cqb)?;
        connect_rc(step, &mut qa, qb.qp_num(), lid, 7)?;
        connect_rc(step, &mut qb, qa.qp_num(), lid, 7)?;
        Ok(Dp {
            ctx,
            pd,
            mr,
            lid,
            cqa,
            cqb,
            qa,
            qb,
        })
    }

    /// After a failed scenario: drops completions it left behind.
    fn drain(&mut self) {
        let mut wc = [Wc::default(); 16];
        for cq in [&mut self.cqa, &mut self.cqb] {
            while cq.poll(&mut wc).unwrap_or(0) > 0 {}
        }
    }
}

/// A fresh connected RC pair on `cq` (requester) and the main pair's `cqb`.
pub(crate) fn fresh_pair(d: &Dp, s: &'static str, cq: &Cq) -> R<(Qp, Qp)> {
    let mut z1 = d.make_qp(s, QpType::Rc, cq, None)?;
    let mut z2 = d.make_qp(s, QpType::Rc, &d.cqb, None)?;
    connect_rc(s, &mut z1, z2.qp_num(), d.lid, 7)?;
    connect_rc(s, &mut z2, z1.qp_num(), d.lid, 7)?;
    Ok((z1, z2))
}

/// datapath.c's `connect_rc`: RESET -> INIT -> RTR -> RTS for RC or UC.
pub(crate) fn connect_rc(step: &'static str, qp: &mut Qp, dest: u32, lid: u16, rnr_retry: u8) -> R {
    let rc = qp.qp_type() == QpType::Rc;
    let mut access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    if rc {
        access |= AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    }
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(access),
        ..Default::default()
    })
    .at(step)?;
    let mut a = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: Some(dest),
        rq_psn: Some(0),
        ah_attr: Some(AhAttr {
            dlid: lid,
            port_num: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    if rc {
        a.max_dest_rd_atomic = Some(4);
        a.min_rnr_timer = Some(1);
    }
    qp.modify(&a).at(step)?;
    let mut a = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        ..Default::default()
    };
    if rc {
        a.timeout = Some(14);
        a.retry_cnt = Some(7);
        a.rnr_retry = Some(rnr_retry);
        a.max_rd_atomic = Some(4);
    }
    qp.modify(&a).at(step)
}

/// A datapath scenario: reports its own extra PASS lines through the
/// `Report`; the returned error is its first failure.
type Scenario = fn(&mut Dp, &mut Report) -> R;

pub(crate) fn datapath(rep: &mut Report, dev: &Result<Device, String>) {
    let fds_before = open_fds();
    let setup = dev
        .as_ref()
        .map_err(|e| Fail {
            step: "setup",
            why: e.clone(),
        })
        .and_then(|d| d.open().at("setup"))
        .and_then(|ctx| Dp::setup(ctx, "setup"));
    let mut dp = match setup {
        Ok(dp) => dp,
        Err(f) => {
            rep.fail(&f);
            return;
        }
    };
    rep.pass("setup");

    let scenarios: &[(&[&'static str], Scenario)] = &[
        (&["query_qp_caps"], query_qp_caps),
        (&["send_recv"], |d, _| d.send_recv()),
        (&["send_imm"], |d, _| d.send_imm()),
        (&["send_inline"], |d, _| d.send_inline()),
        (&["send_3_sges_to_2"], |d, _| d.send_3_sges_to_2()),
        (&["rdma_write"], |d, _| d.rdma_write()),
        (&["rdma_write_imm"], |d, _| d.rdma_write_imm()),
        (&["rdma_read"], |d, _| d.rdma_read()),
        (&["cmp_swap", "cmp_swap_no_swap", "fetch_add"], Dp::atomics),
        (&["unsignaled_chain"], |d, _| d.unsignaled_chain()),
        (&["sq_wrap"], |d, _| d.sq_wrap()),
        (&["srq", "srq_reuse"], Dp::srq),
        (&["ud", "ud_grh"], Dp::ud),
        (&["uc"], |d, _| d.uc()),
        (&["comp_channel", "comp_solicited"], Dp::comp_channel),
        (&["comp_arm_twice", "comp_arm_stale"], comp_arm_sequence),
        (
            &[
                "bad_rkey",
                "bad_rkey_flush",
                "bad_rkey_requester_err",
                "bad_rkey_responder_err",
                "bad_rkey_responder_flush",
                "bad_rkey_access_event",
                "bad_lkey",
                "reset_reuse",
                "recv_too_small",
                "recv_flush",
            ],
            Dp::errors,
        ),
        (&["rnr_retry"], |d, _| d.rnr_retry()),
        (&["rnr_retry_exceeded"], |d, _| d.rnr_retry_exceeded()),
        (&["cq_resize"], cq_resize),
        (
            &["cq_resize_below_unpolled", "cq_resize_grow_unpolled"],
            cq_resize_unpolled,
        ),
        (&["cq_overrun", "cq_overrun_stops"], cq_overrun),
        (&["reset_clean", "reset_rq_capacity"], reset_clean),
        (&["srq_destroy_unpolled"], srq_destroy_unpolled),
        (&["srq_empty"], srq_empty),
        (
            &["srq_zero_length_sge", "rq_zero_length_sge"],
            zero_length_sge,
        ),
        (&["unsignaled_queue_full"], unsignaled_queue_full),
        (&["signal_every"], signal_every),
        (&["query_caps"], query_caps),
        (&["poll_blocking"], poll_blocking),
    ];
    for (names, run) in scenarios {
        if rep.over_budget() {
            rep.not_run(
                names,
                &format!("the {} s budget is spent", BUDGET.as_secs()),
            );
            continue;
        }
        let r = run(&mut dp, rep);
        let single = names.len() == 1;
        let failed = r.is_err();
        rep.outcome(r);
        if failed {
            rep.not_run(names, "an earlier step of its scenario failed");
            dp.drain();
        } else if single {
            rep.pass(names[0]);
        }
    }

    // Teardown: Drop reports no error; every fd of the device must close.
    drop(dp);
    let fds = open_fds();
    if fds == fds_before {
        rep.pass_note("teardown", "every fd of the device is closed");
    } else {
        rep.fail(&Fail {
            step: "teardown",
            why: format!("{fds_before} fds before opening, {fds} after dropping everything"),
        });
    }
}
