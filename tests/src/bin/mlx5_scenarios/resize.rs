//! Resizing a CQ that holds unpolled completions past its first lap, and
//! a CQ overrun.

use std::time::Instant;

use rverbs::{AsyncEventKind, QpType, SendWr, WcOpcode, WcStatus};

use crate::datapath::{
    connect_rc, expect_quiet, expect_wc, pattern, poll_one, Dp, DST, QUIET, SRC, TIMEOUT,
};
use crate::report::{expect, fail, Ctx, Report, R};

/// datapath.c's `cq_resize`: growing a CQ that holds unpolled completions
/// (past its first lap) keeps them with their wr_ids, and later ones land
/// in the new ring after them.
pub(crate) fn cq_resize(d: &mut Dp, _: &mut Report) -> R {
    let s = "cq_resize";
    let mut rcq = d.ctx.create_cq(4).at(s)?;
    expect(s, rcq.cqe() == 7, "a 4-entry CQ does not have 8 entries")?;
    let mut z1 = d.make_qp(s, QpType::Rc, &rcq, None)?;
    let mut z2 = d.make_qp(s, QpType::Rc, &d.cqb, None)?;
    connect_rc(s, &mut z1, z2.qp_num(), d.lid, 7)?;
    connect_rc(s, &mut z2, z1.qp_num(), d.lid, 7)?;
    let sg = [d.sge(SRC, 64)];
    for k in 0..6u64 {
        let wr = SendWr::rdma_write(800 + k, &sg, d.remote(DST), d.mr.rkey()).signaled();
        z1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut rcq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 800 + k)?;
    }
    // Three completions left unpolled, the last in the second lap.
    for k in 0..3usize {
        d.put(s, SRC + 4096 * k, &pattern(64, 40 + k as u32))?;
        let sg = [d.sge(SRC + 4096 * k, 64)];
        let wr = SendWr::rdma_write(900 + k as u64, &sg, d.remote(DST + 4096 * k), d.mr.rkey())
            .signaled();
        z1.post_send(&[wr]).at(s)?;
    }
    // The emulated HCA writes a CQE under the lock RESIZE_CQ takes, in
    // the same pass as the data.
    let end = Instant::now() + TIMEOUT;
    while d.get(DST + 8192, 64) != pattern(64, 42) {
        if Instant::now() > end {
            return fail(s, "the writes did not arrive");
        }
    }
    rcq.resize(40).at(s)?;
    expect(s, rcq.cqe() == 63, "resized CQ does not have 64 entries")?;
    for k in 0..3u64 {
        let wc = poll_one(s, &mut rcq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 900 + k)?;
        expect(
            s,
            wc.opcode() == WcOpcode::RDMA_WRITE,
            "opcode is not RDMA_WRITE",
        )?;
    }
    expect_quiet(s, &mut rcq)?;
    for k in 0..12u64 {
        let wr = SendWr::rdma_write(1000 + k, &sg, d.remote(DST), d.mr.rkey()).signaled();
        z1.post_send(&[wr]).at(s)?;
    }
    for k in 0..12u64 {
        let wc = poll_one(s, &mut rcq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 1000 + k)?;
    }
    expect_quiet(s, &mut rcq)
}

/// datapath.c's `cq_overrun`: a 2-entry CQ gets a third completion while
/// nothing is polled. The CQ goes to error with a CQ_ERR async event
/// naming it; the two CQEs already in the ring stay, the third is lost,
/// and the CQ takes no completion after (it stays in error).
pub(crate) fn cq_overrun(d: &mut Dp, rep: &mut Report) -> R {
    let s = "cq_overrun";
    let mut ocq = d.ctx.create_cq(1).at(s)?;
    expect(s, ocq.cqe() == 1, "a 1-entry CQ does not have 2 entries")?;
    let mut z1 = d.make_qp(s, QpType::Rc, &ocq, None)?;
    let mut z2 = d.make_qp(s, QpType::Rc, &d.cqb, None)?;
    connect_rc(s, &mut z1, z2.qp_num(), d.lid, 7)?;
    connect_rc(s, &mut z2, z1.qp_num(), d.lid, 7)?;
    let no_event = |s| match d.ctx.get_async_event_timeout(QUIET).at(s)? {
        Some(ev) => fail(s, format!("unexpected async event {ev}")),
        None => Ok(()),
    };
    no_event(s)?;
    let sg = [d.sge(SRC, 8)];
    let wrs: Vec<SendWr> = (0..3u64)
        .map(|k| SendWr::rdma_write(1100 + k, &sg, d.remote(DST), d.mr.rkey()).signaled())
        .collect();
    z1.post_send(&wrs).at(s)?;
    match d.ctx.get_async_event_timeout(TIMEOUT).at(s)? {
        None => fail(s, "no async event within the timeout")?,
        Some(ev) => {
            expect(s, ev.kind == AsyncEventKind::CqErr, &format!("event {ev}"))?;
            expect(s, ev.is_for_cq(&ocq), "the event names another CQ")?;
        }
    }
    for k in 0..2u64 {
        let wc = poll_one(s, &mut ocq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 1100 + k)?;
    }
    expect_quiet(s, &mut ocq)?;
    rep.pass(s);

    // Room again, but the CQ stays in error: nothing more lands.
    let s = "cq_overrun_stops";
    let wr = SendWr::rdma_write(1103, &sg, d.remote(DST), d.mr.rkey()).signaled();
    z1.post_send(&[wr]).at(s)?;
    expect_quiet(s, &mut ocq)?;
    no_event(s)?;
    drop((z1, z2, ocq));
    rep.pass(s);
    Ok(())
}
