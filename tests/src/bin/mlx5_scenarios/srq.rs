//! Shared receive queues: two QPs receiving through one SRQ, its free
//! list reused many times, and (no C twin) the WQEs of unpolled CQEs given
//! back when their QP is destroyed, and a receive with a zero-length SGE
//! before the real one (SRQ and RQ).

use rverbs::{QpType, RecvWr, SendWr, SrqInitAttr, WcStatus};

use crate::datapath::{
    connect_rc, expect_bytes, expect_quiet, expect_wc, pattern, poll_one, Dp, AUX, SRC,
};
use crate::report::{expect, fail, Ctx, Fail, Report, R};

impl Dp {
    /// srq and srq_reuse.
    pub(crate) fn srq(&mut self, rep: &mut Report) -> R {
        let s = "srq";
        let mut srq = self
            .pd
            .create_srq(&SrqInitAttr {
                max_wr: 16,
                max_sge: 2,
                srq_limit: 0,
            })
            .at(s)?;
        let mut cqs = self.ctx.create_cq(64).at(s)?;
        let mut s1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut s2 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut r1 = self.make_qp(s, QpType::Rc, &cqs, Some(&srq))?;
        let mut r2 = self.make_qp(s, QpType::Rc, &cqs, Some(&srq))?;
        connect_rc(s, &mut s1, r1.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut r1, s1.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut s2, r2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut r2, s2.qp_num(), self.lid, 7)?;
        for i in 0..4 {
            let r = [self.sge(AUX + 256 * i, 256)];
            srq.post_srq_recv(&[RecvWr::new(200 + i as u64, &r)])
                .at(s)?;
        }
        let (mut seen1, mut seen2) = (0, 0);
        for i in 0..4usize {
            let n = 100 + i;
            self.put(s, SRC + 256 * i, &pattern(n, 10 + i as u32))?;
            let sg = [self.sge(SRC + 256 * i, n as u32)];
            let wr = SendWr::send(210 + i as u64, &sg).signaled();
            let sender = if i % 2 == 1 { &mut s2 } else { &mut s1 };
            sender.post_send(&[wr]).at(s)?;
            let wc = poll_one(s, &mut self.cqa)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 210 + i as u64)?;
            let wc = poll_one(s, &mut cqs)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 200 + i as u64)?;
            expect(s, wc.byte_len() == n as u32, "wrong byte_len")?;
            let want = if i % 2 == 1 { &r2 } else { &r1 }.qp_num();
            expect(s, wc.qp_num() == want, "qp_num is not the receiving QP")?;
            seen1 += (wc.qp_num() == r1.qp_num()) as u32;
            seen2 += (wc.qp_num() == r2.qp_num()) as u32;
            expect_bytes(s, &self.get(AUX + 256 * i, n), &self.get(SRC + 256 * i, n))?;
        }
        expect(s, seen1 == 2 && seen2 == 2, "not two receives per QP")?;
        rep.pass(s);

        // Many more receives through the SRQ's free list, two posted
        // ahead, alternating senders.
        let s = "srq_reuse";
        for i in 0..2 {
            let r = [self.sge(AUX + 256 * i, 256)];
            srq.post_srq_recv(&[RecvWr::new(1000 + i as u64, &r)])
                .at(s)?;
        }
        for i in 0..60usize {
            let r = [self.sge(AUX + 256 * ((i + 2) % 4), 256)];
            srq.post_srq_recv(&[RecvWr::new(1000 + i as u64 + 2, &r)])
                .at(s)?;
            self.put(s, SRC, &pattern(50, 100 + i as u32))?;
            let sg = [self.sge(SRC, 50)];
            let wr = SendWr::send(2000 + i as u64, &sg).signaled();
            let sender = if i % 2 == 1 { &mut s2 } else { &mut s1 };
            sender.post_send(&[wr]).at(s)?;
            let wc = poll_one(s, &mut self.cqa)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 2000 + i as u64)?;
            let wc = poll_one(s, &mut cqs)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 1000 + i as u64)?;
            expect_bytes(s, &self.get(AUX + 256 * (i % 4), 50), &self.get(SRC, 50))?;
        }
        drop((s1, s2, r1, r2, srq, cqs));
        rep.pass(s);
        Ok(())
    }
}

/// srq_destroy_unpolled (no C twin: libmlx5 frees the SRQ WQEs of the
/// CQEs it cleans when a QP is destroyed): rounds of a QP on an SRQ that
/// receives messages whose CQEs are never polled before it is destroyed.
/// The SRQ must get those WQEs back: after every round it takes as many
/// receives as were consumed, and in the end its full capacity, and data
/// still flows.
pub(crate) fn srq_destroy_unpolled(d: &mut Dp, _: &mut Report) -> R {
    let s = "srq_destroy_unpolled";
    let mut srq =
        d.pd.create_srq(&SrqInitAttr {
            max_wr: 7,
            max_sge: 1,
            srq_limit: 0,
        })
        .at(s)?;
    let cap = srq.max_wr();
    let mut scq = d.ctx.create_cq(64).at(s)?;
    let mut rcq = d.ctx.create_cq(64).at(s)?;
    let r = [d.sge(AUX, 256)];
    let mut next_id = 5000u64;
    for _ in 0..cap {
        srq.post_srq_recv(&[RecvWr::new(next_id, &r)]).at(s)?;
        next_id += 1;
    }
    const PER_ROUND: u64 = 3;
    for round in 0..4 {
        let mut tx = d.make_qp(s, QpType::Rc, &scq, None)?;
        let mut rx = d.make_qp(s, QpType::Rc, &rcq, Some(&srq))?;
        connect_rc(s, &mut tx, rx.qp_num(), d.lid, 7)?;
        connect_rc(s, &mut rx, tx.qp_num(), d.lid, 7)?;
        let sg = [d.sge(SRC, 32)];
        for k in 0..PER_ROUND {
            tx.post_send(&[SendWr::send(6000 + k, &sg).signaled()])
                .at(s)?;
            let wc = poll_one(s, &mut scq)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, 6000 + k)?;
        }
        // The receive CQEs stay in rcq while the QP is destroyed.
        drop((tx, rx));
        expect_quiet(s, &mut rcq)?;
        for _ in 0..PER_ROUND {
            srq.post_srq_recv(&[RecvWr::new(next_id, &r)])
                .map_err(|e| Fail {
                    step: s,
                    why: format!(
                        "round {round}: the SRQ refused a receive ({e}); {} of {cap} outstanding",
                        srq.outstanding()
                    ),
                })?;
            next_id += 1;
        }
    }
    expect(
        s,
        srq.outstanding() == cap,
        &format!("{} of {cap} receives outstanding", srq.outstanding()),
    )?;
    match srq.post_srq_recv(&[RecvWr::new(next_id, &r)]) {
        Err(e) if e.error() == rverbs::PostError::SrqFull => {}
        other => return fail(s, format!("a receive past the capacity gave {other:?}")),
    }
    // Data still flows through the SRQ.
    let mut tx = d.make_qp(s, QpType::Rc, &scq, None)?;
    let mut rx = d.make_qp(s, QpType::Rc, &rcq, Some(&srq))?;
    connect_rc(s, &mut tx, rx.qp_num(), d.lid, 7)?;
    connect_rc(s, &mut rx, tx.qp_num(), d.lid, 7)?;
    d.put(s, SRC, &pattern(77, 60))?;
    let sg = [d.sge(SRC, 77)];
    tx.post_send(&[SendWr::send(6100, &sg).signaled()]).at(s)?;
    let wc = poll_one(s, &mut scq)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 6100)?;
    let wc = poll_one(s, &mut rcq)?;
    expect(
        s,
        wc.status() == WcStatus::SUCCESS && (5000..next_id).contains(&wc.wr_id()),
        &format!("receive completion {wc:?}"),
    )?;
    expect(
        s,
        wc.qp_num() == rx.qp_num(),
        "qp_num is not the receiver's",
    )?;
    expect(s, wc.byte_len() == 77, "byte_len is not 77")?;
    expect_bytes(s, &d.get(AUX, 77), &pattern(77, 60))?;
    drop((tx, rx, srq));
    Ok(())
}

/// An SRQ asked for with `max_wr` 0 (no C twin): made as libmlx5 makes
/// it, the smallest ring, and reported with the capacity the kernel got;
/// it is queried and destroyed like any other.
pub(crate) fn srq_empty(d: &mut Dp, rep: &mut Report) -> R {
    let s = "srq_empty";
    let srq =
        d.pd.create_srq(&SrqInitAttr {
            max_wr: 0,
            max_sge: 1,
            srq_limit: 0,
        })
        .at(s)?;
    let q = srq.query().at(s)?;
    expect(
        s,
        q.max_wr == srq.max_wr(),
        "query disagrees with create's max_wr",
    )?;
    expect(s, srq.max_wr() <= 1, "more than the smallest ring")?;
    drop(srq);
    rep.pass(s);
    Ok(())
}

/// Ours (issue 25; no C twin: libmlx5's SRQ path writes the zero-length
/// entry, which the device reads as 2 GiB, so its receive would fail
/// here): a receive whose first SGE has length 0, then a real one, through
/// an SRQ (`srq_zero_length_sge`) and a QP's own receive queue
/// (`rq_zero_length_sge`). The message lands in the real buffer and
/// nothing beyond it, nor at the zero-length SGE's address, changes.
pub(crate) fn zero_length_sge(d: &mut Dp, rep: &mut Report) -> R {
    const LEN: usize = 100;
    // The zero-length SGE's address, the real buffer, a canary after it.
    let (zero, real) = (AUX + 0x4000, AUX + 0x5000);
    let canary = pattern(512, 77);
    for (i, s) in ["srq_zero_length_sge", "rq_zero_length_sge"]
        .into_iter()
        .enumerate()
    {
        let mut srq = if i == 0 {
            Some(
                d.pd.create_srq(&SrqInitAttr {
                    max_wr: 4,
                    max_sge: 2,
                    srq_limit: 0,
                })
                .at(s)?,
            )
        } else {
            None
        };
        let mut rcq = d.ctx.create_cq(16).at(s)?;
        let mut tx = d.make_qp(s, QpType::Rc, &d.cqa, None)?;
        let mut rx = d.make_qp(s, QpType::Rc, &rcq, srq.as_ref())?;
        connect_rc(s, &mut tx, rx.qp_num(), d.lid, 7)?;
        connect_rc(s, &mut rx, tx.qp_num(), d.lid, 7)?;
        d.put(s, zero, &canary)?;
        d.put(s, real, &canary)?;
        let r = [d.sge(zero, 0), d.sge(real, 256)];
        let wr = RecvWr::new(1700 + i as u64, &r);
        match &mut srq {
            Some(q) => q.post_srq_recv(&[wr]).at(s)?,
            None => rx.post_recv(&[wr]).at(s)?,
        }
        let msg = pattern(LEN, 90 + i as u32);
        d.put(s, SRC, &msg)?;
        let sg = [d.sge(SRC, LEN as u32)];
        tx.post_send(&[SendWr::send(1710 + i as u64, &sg).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut d.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 1710 + i as u64)?;
        let wc = poll_one(s, &mut rcq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 1700 + i as u64)?;
        expect(s, wc.byte_len() == LEN as u32, "wrong byte_len")?;
        expect_bytes(s, &d.get(real, LEN), &msg)?;
        expect(
            s,
            d.get(real + LEN, 512 - LEN) == canary[LEN..],
            "bytes past the message changed",
        )?;
        expect(
            s,
            d.get(zero, 512) == canary,
            "the zero-length SGE's memory changed",
        )?;
        expect_quiet(s, &mut rcq)?;
        drop((tx, rx, rcq, srq));
        rep.pass(s);
    }
    Ok(())
}
