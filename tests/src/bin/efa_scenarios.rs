//! Test-only: the EFA scenarios of `tests/efa-emu/c/datapath.c` through
//! rverbs and its EFA provider, on the emulated EFA device (`cargo xtask
//! efa` runs it with `libefa_emu.so` preloaded). Prints `PASS <step>` per
//! step and `FAIL <step>: <why>` on the first failure (exit 1).

use std::process::ExitCode;

use std::time::{Duration, Instant};
use verbs_tests::step::{expect, fail, main_with, pass, At, R};

use std::io::IoSlice;

use rverbs::{
    opcode, AccessFlags, AhAttr, Context, Cq, Driver, GlobalRoute, Mr, Pd, Qp, QpAttr, QpCap,
    QpInitAttr, QpState, QpType, RecvWr, SendWr, Sge, UdSendWr, Wc, WcStatus,
};

const QKEY: u32 = 0x1111_1111;
const WAIT: Duration = Duration::from_secs(5);

struct Env {
    ctx: Context,
    pd: Pd,
    mr: Mr,
    cq: Cq,
    gid: rverbs::Gid,
}

impl Env {
    fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.mr.addr() + off as u64,
            length: len,
            lkey: self.mr.lkey(),
        }
    }

    fn qp(&self, step: &str, qp_type: QpType, rnr_retry: Option<u8>) -> R<Qp> {
        let mut qp = self
            .pd
            .create_qp(&QpInitAttr {
                send_cq: &self.cq,
                recv_cq: &self.cq,
                qp_type,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: 32,
                },
                sq_sig_all: false,
            })
            .at(step)?;
        qp.ready_ud(1, QKEY, 0).at(step)?;
        if let Some(r) = rnr_retry {
            qp.modify(&QpAttr {
                rnr_retry: Some(r),
                ..Default::default()
            })
            .at(step)?;
        }
        Ok(qp)
    }

    fn poll1(&mut self, step: &str) -> R<Wc> {
        poll1(&mut self.cq, step)
    }

    /// Two completions, the receive's first.
    fn poll_pair(&mut self, step: &str) -> R<(Wc, Wc)> {
        let a = self.poll1(step)?;
        let b = self.poll1(step)?;
        let is_recv = |w: &Wc| {
            matches!(
                w.opcode(),
                rverbs::WcOpcode::RECV | rverbs::WcOpcode::RECV_RDMA_WITH_IMM
            )
        };
        Ok(if is_recv(&a) { (a, b) } else { (b, a) })
    }

    fn quiet(&mut self, step: &str) -> R {
        let mut wc = [Wc::default(); 1];
        let end = Instant::now() + Duration::from_millis(200);
        while Instant::now() < end {
            if self.cq.poll(&mut wc).at(step)? != 0 {
                return fail(step, format!("unexpected completion {:?}", wc[0]));
            }
        }
        Ok(())
    }
}

/// The next completion of `cq`, waiting up to [`WAIT`] for it.
fn poll1(cq: &mut Cq, step: &str) -> R<Wc> {
    let mut wc = [Wc::default(); 1];
    let end = Instant::now() + WAIT;
    while Instant::now() < end {
        if cq.poll(&mut wc).at(step)? == 1 {
            return Ok(wc[0]);
        }
    }
    fail(step, "no completion within 5 s")
}

fn wc_is(step: &str, wc: &Wc, status: WcStatus, wr_id: u64) -> R {
    expect(
        step,
        wc.status() == status && wc.wr_id() == wr_id,
        &format!(
            "completion {} of wr {}, expected {} of {wr_id}",
            wc.status(),
            wc.wr_id(),
            status
        ),
    )
}

fn run() -> R {
    let devs = rverbs::devices().at("device")?;
    let dev = devs
        .iter()
        .find(|d| *d.driver() == Driver::Efa)
        .ok_or("no EFA device")
        .at("device")?;
    let ctx = dev.open().at("open")?;
    pass("open");
    let s = "efa_attr";
    let a = ctx.efa_attr().ok_or("none on an EFA device").at(s)?;
    expect(s, a.max_sq_sge == 2 && a.max_rq_sge == 1, "SGE limits")?;
    expect(s, a.inline_buf_size == 32, "inline_buf_size")?;
    expect(s, a.max_rdma_size == 1 << 30, "max_rdma_size")?;
    expect(
        s,
        a.rdma_read && a.rdma_write && a.rnr_retry,
        "capabilities",
    )?;
    expect(s, a.cq_with_sgid && !a.cq_notifications, "CQ capabilities")?;
    pass(s);
    let gid = ctx.query_gid(1, 0).at("query_gid")?;
    let pd = ctx.alloc_pd().at("alloc_pd")?;
    let mr = pd
        .alloc_mr(
            1 << 16,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
        )
        .at("alloc_mr")?;
    let cq = ctx.create_cq(8).at("create_cq")?;
    let mut e = Env {
        ctx,
        pd,
        mr,
        cq,
        gid,
    };
    let ah =
        e.pd.create_ah(&AhAttr {
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid: e.gid,
                hop_limit: 1,
                ..Default::default()
            }),
            ..Default::default()
        })
        .at("create_ah")?;
    pass("setup");

    // RC has no place on EFA: refused before any command.
    let rc = e.pd.create_qp(&QpInitAttr {
        send_cq: &e.cq,
        recv_cq: &e.cq,
        qp_type: QpType::Rc,
        cap: QpCap::default(),
        sq_sig_all: false,
    });
    expect("rc_refused", rc.is_err(), "an RC QP was created")?;
    pass("rc_refused");

    // UD: a datagram gathered from two buffers.
    let s = "ud_send";
    let ua = e.qp(s, QpType::Ud, None)?;
    let mut ub = e.qp(s, QpType::Ud, None)?;
    let mut ua = ua;
    e.mr.write_at(0, b"hello, ").at(s)?;
    e.mr.write_at(100, b"efa\0").at(s)?;
    ub.post_recv(&[RecvWr::new(77, &[e.sge(1000, 64)])]).at(s)?;
    let two = [e.sge(0, 7), e.sge(100, 4)];
    ua.post_send(&[SendWr::send(1, &two).signaled().to(&ah, ub.qp_num(), QKEY)])
        .at(s)?;
    let (rw, sw) = e.poll_pair(s)?;
    wc_is(s, &sw, WcStatus::SUCCESS, 1)?;
    wc_is(s, &rw, WcStatus::SUCCESS, 77)?;
    let mut got = [0u8; 11];
    e.mr.read_at(1000, &mut got).at(s)?;
    expect(
        s,
        &got == b"hello, efa\0",
        "the datagram did not arrive intact",
    )?;
    expect(s, rw.byte_len() == 11, "byte_len")?;
    expect(s, rw.src_qp() == ua.qp_num(), "src_qp")?;
    pass(s);

    // UD with the wrong Q_Key: dropped, the send still succeeds.
    let s = "ud_wrong_qkey";
    ub.post_recv(&[RecvWr::new(78, &[e.sge(1000, 64)])]).at(s)?;
    ua.post_send(&[SendWr::send(2, &two)
        .signaled()
        .to(&ah, ub.qp_num(), QKEY + 1)])
        .at(s)?;
    wc_is(s, &e.poll1(s)?, WcStatus::SUCCESS, 2)?;
    e.quiet(s)?;
    pass(s);

    // SRD: inline with immediate data.
    let s = "srd_inline_imm";
    let mut sa = e.qp(s, QpType::Srd, Some(7))?;
    let mut sb = e.qp(s, QpType::Srd, Some(0))?;
    sb.post_recv(&[RecvWr::new(90, &[e.sge(2000, 64)])]).at(s)?;
    let bufs = [IoSlice::new(b"inline!\0")];
    sa.post_send(&[opcode::Send::inline(3, &bufs)
        .imm(0xabcd_0123)
        .build()
        .signaled()
        .to(&ah, sb.qp_num(), QKEY)])
        .at(s)?;
    let (rw, sw) = e.poll_pair(s)?;
    wc_is(s, &sw, WcStatus::SUCCESS, 3)?;
    wc_is(s, &rw, WcStatus::SUCCESS, 90)?;
    expect(s, rw.imm_data() == Some(0xabcd_0123), "immediate data")?;
    let mut got = [0u8; 8];
    e.mr.read_at(2000, &mut got).at(s)?;
    expect(s, &got == b"inline!\0", "payload")?;
    pass(s);

    // 40 messages through a CQ of 8 entries: five passes of the phase.
    let s = "cq_phase";
    for i in 0..40u64 {
        sb.post_recv(&[RecvWr::new(1000 + i, &[e.sge(3000, 64)])])
            .at(s)?;
        e.mr.write_at(300, &[i as u8]).at(s)?;
        sa.post_send(&[SendWr::send(2000 + i, &[e.sge(300, 1)]).signaled().to(
            &ah,
            sb.qp_num(),
            QKEY,
        )])
        .at(s)?;
        let (rw, sw) = e.poll_pair(s)?;
        wc_is(s, &rw, WcStatus::SUCCESS, 1000 + i)?;
        wc_is(s, &sw, WcStatus::SUCCESS, 2000 + i)?;
        let mut b = [0u8; 1];
        e.mr.read_at(3000, &mut b).at(s)?;
        expect(s, b[0] == i as u8, "payload")?;
    }
    pass(s);

    // SRD without a receive: RNR with retry 0, a wait with retry 7.
    let s = "srd_rnr";
    sb.post_send(&[SendWr::send(5, &[e.sge(300, 1)])
        .signaled()
        .to(&ah, sa.qp_num(), QKEY)])
        .at(s)?;
    wc_is(s, &e.poll1(s)?, WcStatus::RNR_RETRY_EXC_ERR, 5)?;
    pass(s);
    let s = "srd_rnr_wait";
    sa.post_send(&[SendWr::send(6, &[e.sge(300, 1)])
        .signaled()
        .to(&ah, sb.qp_num(), QKEY)])
        .at(s)?;
    e.quiet(s)?;
    sb.post_recv(&[RecvWr::new(91, &[e.sge(3000, 64)])]).at(s)?;
    let (rw, sw) = e.poll_pair(s)?;
    wc_is(s, &rw, WcStatus::SUCCESS, 91)?;
    wc_is(s, &sw, WcStatus::SUCCESS, 6)?;
    pass(s);

    // An unknown lkey.
    let s = "bad_lkey";
    let bad = [Sge {
        lkey: e.mr.lkey() + 0x100,
        ..e.sge(0, 8)
    }];
    sa.post_send(&[SendWr::send(8, &bad).signaled().to(&ah, sb.qp_num(), QKEY)])
        .at(s)?;
    wc_is(s, &e.poll1(s)?, WcStatus::LOC_PROT_ERR, 8)?;
    pass(s);

    // RDMA READ on SRD.
    let s = "rdma_read";
    let pat: Vec<u8> = (0..256u32).map(|i| (i * 7) as u8).collect();
    e.mr.write_at(4096, &pat).at(s)?;
    e.mr.write_at(5000, &[0u8; 256]).at(s)?;
    let raddr = e.mr.addr() + 4096;
    sa.post_send(&[
        SendWr::rdma_read(9, &[e.sge(5000, 256)], raddr, e.mr.rkey())
            .signaled()
            .to(&ah, sa.qp_num(), QKEY),
    ])
    .at(s)?;
    wc_is(s, &e.poll1(s)?, WcStatus::SUCCESS, 9)?;
    let mut back = vec![0u8; 256];
    e.mr.read_at(5000, &mut back).at(s)?;
    expect(s, back == pat, "the data read differ")?;
    pass(s);

    // RDMA WRITE on SRD (the device has it; libefa 44 has no verb for
    // it), and with immediate data, which consumes a receive.
    let s = "rdma_write";
    let pat: Vec<u8> = (0..128u32).map(|i| (i * 13 + 5) as u8).collect();
    e.mr.write_at(6000, &pat).at(s)?;
    e.mr.write_at(7000, &[0u8; 128]).at(s)?;
    let raddr = e.mr.addr() + 7000;
    let rkey = e.mr.rkey();
    sa.post_send(&[SendWr::rdma_write(20, &[e.sge(6000, 128)], raddr, rkey)
        .signaled()
        .to(&ah, sb.qp_num(), QKEY)])
        .at(s)?;
    wc_is(s, &e.poll1(s)?, WcStatus::SUCCESS, 20)?;
    let mut back = vec![0u8; 128];
    e.mr.read_at(7000, &mut back).at(s)?;
    expect(s, back == pat, "the data written differ")?;
    pass(s);
    let s = "rdma_write_imm";
    sb.post_recv(&[RecvWr::new(95, &[e.sge(3000, 64)])]).at(s)?;
    sa.post_send(&[
        SendWr::rdma_write_with_imm(21, &[e.sge(6000, 64)], raddr, rkey, 0x77)
            .signaled()
            .to(&ah, sb.qp_num(), QKEY),
    ])
    .at(s)?;
    let (rw, sw) = e.poll_pair(s)?;
    wc_is(s, &sw, WcStatus::SUCCESS, 21)?;
    wc_is(s, &rw, WcStatus::SUCCESS, 95)?;
    expect(s, rw.imm_data() == Some(0x77), "immediate data")?;
    expect(
        s,
        rw.opcode() == rverbs::WcOpcode::RECV_RDMA_WITH_IMM,
        "the receive is not RECV_RDMA_WITH_IMM",
    )?;
    pass(s);

    // The sender's GID of a receive, on CQs created with source GIDs: none
    // when the receiving context has an AH for the sender (this one), the
    // sender's GID when it has none (a second context); never on a CQ
    // without them.
    let s = "source_gid";
    expect(s, !e.cq.has_source_gid(), "a plain CQ has source GIDs")?;
    let flagged = e.ctx.create_cq_with_source_gid(&rverbs::CqInitAttr {
        cqe: 8,
        channel: None,
        comp_vector: 0,
        flags: rverbs::CqFlags::IGNORE_OVERRUN,
    });
    expect(
        s,
        matches!(flagged, Err(rverbs::Error::NotOffered { .. })),
        "creation flags with source GIDs were accepted",
    )?;
    let with_gid = |ctx: &Context| {
        ctx.create_cq_with_source_gid(&rverbs::CqInitAttr {
            cqe: 8,
            channel: None,
            comp_vector: 0,
            flags: rverbs::CqFlags::empty(),
        })
    };
    let srd_on = |pd: &Pd, cq: &Cq| -> rverbs::Result<Qp> {
        let mut qp = pd.create_qp(&QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Srd,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })?;
        qp.ready_ud(1, QKEY, 0)?;
        Ok(qp)
    };
    let mut cq_here = with_gid(&e.ctx).at(s)?;
    expect(s, cq_here.has_source_gid(), "has_source_gid")?;
    let mut here = srd_on(&e.pd, &cq_here).at(s)?;
    let poll_on = |cq: &mut Cq| -> R<(Wc, Option<rverbs::Gid>)> {
        let w = poll1(cq, s)?;
        Ok((w, cq.last_source_gid()))
    };
    here.post_recv(&[RecvWr::new(96, &[e.sge(3000, 64)])])
        .at(s)?;
    sa.post_send(&[SendWr::send(22, &[e.sge(0, 7)])
        .signaled()
        .to(&ah, here.qp_num(), QKEY)])
        .at(s)?;
    let (rw, sgid) = poll_on(&mut cq_here)?;
    wc_is(s, &rw, WcStatus::SUCCESS, 96)?;
    expect(
        s,
        sgid.is_none(),
        "a source GID although the receiver has an AH for the sender",
    )?;
    wc_is(s, &e.poll1(s)?, WcStatus::SUCCESS, 22)?;
    let ctx2 = dev.open().at(s)?;
    let pd2 = ctx2.alloc_pd().at(s)?;
    let mr2 = pd2.alloc_mr(4096, AccessFlags::LOCAL_WRITE).at(s)?;
    let mut cq2 = with_gid(&ctx2).at(s)?;
    let mut there = srd_on(&pd2, &cq2).at(s)?;
    there
        .post_recv(&[RecvWr::new(
            97,
            &[Sge {
                addr: mr2.addr(),
                length: 64,
                lkey: mr2.lkey(),
            }],
        )])
        .at(s)?;
    e.mr.write_at(0, b"hello, efa\0").at(s)?;
    sa.post_send(&[SendWr::send(23, &[e.sge(0, 11)])
        .signaled()
        .to(&ah, there.qp_num(), QKEY)])
        .at(s)?;
    let (rw, sgid) = poll_on(&mut cq2)?;
    wc_is(s, &rw, WcStatus::SUCCESS, 97)?;
    expect(
        s,
        sgid == Some(e.gid),
        &format!("source GID {sgid:?}, the sender's is {:?}", e.gid),
    )?;
    let mut got = [0u8; 11];
    mr2.read_at(0, &mut got).at(s)?;
    expect(s, &got == b"hello, efa\0", "payload across contexts")?;
    wc_is(s, &e.poll1(s)?, WcStatus::SUCCESS, 23)?;
    expect(
        s,
        e.cq.last_source_gid().is_none(),
        "a plain CQ reported a source GID",
    )?;
    drop((here, there, cq_here, cq2, mr2, pd2, ctx2));
    pass(s);

    // What EFA refuses at post time: an unsignaled send, three SGEs.
    let s = "post_refused";
    let r = sa.post_send(&[SendWr::send(10, &[e.sge(0, 1)]).to(&ah, sb.qp_num(), QKEY)]);
    expect(s, r.is_err(), "an unsignaled send was posted")?;
    let three = [e.sge(0, 1), e.sge(1, 1), e.sge(2, 1)];
    let r = sa.post_send(&[SendWr::send(11, &three)
        .signaled()
        .to(&ah, sb.qp_num(), QKEY)]);
    expect(s, r.is_err(), "three SGEs were posted")?;
    e.quiet(s)?;
    pass(s);

    // ERR flushes what is posted: the receive the dropped datagram left
    // (78), then this one.
    let s = "flush";
    ub.post_recv(&[RecvWr::new(94, &[e.sge(1000, 64)])]).at(s)?;
    ub.modify(&QpAttr {
        qp_state: Some(QpState::Err),
        ..Default::default()
    })
    .at(s)?;
    wc_is(s, &e.poll1(s)?, WcStatus::WR_FLUSH_ERR, 78)?;
    wc_is(s, &e.poll1(s)?, WcStatus::WR_FLUSH_ERR, 94)?;
    e.quiet(s)?;
    pass(s);

    drop((ua, ub, sa, sb, ah));
    drop(e.ctx);
    pass("teardown");
    Ok(())
}

fn main() -> ExitCode {
    main_with(run)
}
