//! Resizing a CQ that holds unpolled completions past its first lap, to a
//! size below them (refused, as rxe's kernel does) and above them, and a
//! CQ overrun.

use std::time::Instant;

use rverbs::{AsyncEventKind, Cq, Errno, Qp, QpType, SendWr, WcOpcode, WcStatus};

use crate::datapath::{
    connect_rc, expect_quiet, expect_wc, fresh_pair, pattern, poll_one, Dp, DST, QUIET, SRC,
    TIMEOUT,
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

/// Posts `n` signaled RDMA WRITEs (wr_ids `base..`) on `z1`, each of 64
/// bytes of its own pattern to its own place, and waits until the last
/// one's data arrived: the emulated HCA has then written all `n` CQEs
/// (each in the same pass as its data).
fn unpolled_writes(d: &mut Dp, s: &'static str, z1: &mut Qp, base: u64, n: usize) -> R {
    for k in 0..n {
        let seed = (base as usize + k) as u32;
        d.put(s, SRC + 64 * k, &pattern(64, seed))?;
        let sg = [d.sge(SRC + 64 * k, 64)];
        let wr = SendWr::rdma_write(base + k as u64, &sg, d.remote(DST + 64 * k), d.mr.rkey())
            .signaled();
        z1.post_send(&[wr]).at(s)?;
    }
    let last = (base as usize + n - 1) as u32;
    let end = Instant::now() + TIMEOUT;
    while d.get(DST + 64 * (n - 1), 64) != pattern(64, last) {
        if Instant::now() > end {
            return fail(s, "the writes did not arrive");
        }
    }
    Ok(())
}

/// Polls `n` successful completions with wr_ids `base..`, in order.
fn poll_in_order(s: &'static str, cq: &mut Cq, base: u64, n: u64) -> R {
    for k in 0..n {
        let wc = poll_one(s, cq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, base + k)?;
    }
    Ok(())
}

/// Ours (issue 25): 40 unpolled completions. A resize to 8 cannot hold
/// them: refused with EINVAL (as rxe's kernel, and the emulated HCA,
/// refuse it) and all 40 are still there, in order, and the CQ works on
/// (24 more sends complete). Then a resize to 100 with 40 unpolled keeps
/// them all, in order, and later completions land after them.
pub(crate) fn cq_resize_unpolled(d: &mut Dp, rep: &mut Report) -> R {
    let s = "cq_resize_below_unpolled";
    let mut rcq = d.ctx.create_cq(63).at(s)?;
    expect(s, rcq.cqe() == 63, "a 63-entry CQ does not have 64 entries")?;
    let (mut z1, _z2) = fresh_pair(d, s, &rcq)?;
    unpolled_writes(d, s, &mut z1, 1200, 40)?;
    match rcq.resize(8) {
        Err(e) if e.errno() == Some(Errno::EINVAL) => {}
        Err(e) => fail(s, format!("resize(8) with 40 unpolled: {e}, not EINVAL"))?,
        Ok(()) => fail(
            s,
            format!(
                "resize(8) with 40 unpolled succeeded ({} entries)",
                rcq.cqe()
            ),
        )?,
    }
    expect(s, rcq.cqe() == 63, "a refused resize changed the depth")?;
    poll_in_order(s, &mut rcq, 1200, 40)?;
    expect_quiet(s, &mut rcq)?;
    unpolled_writes(d, s, &mut z1, 1300, 24)?;
    poll_in_order(s, &mut rcq, 1300, 24)?;
    expect_quiet(s, &mut rcq)?;
    rep.pass(s);

    let s = "cq_resize_grow_unpolled";
    unpolled_writes(d, s, &mut z1, 1400, 40)?;
    rcq.resize(100).at(s)?;
    expect(s, rcq.cqe() == 127, "resized CQ does not have 128 entries")?;
    poll_in_order(s, &mut rcq, 1400, 40)?;
    expect_quiet(s, &mut rcq)?;
    unpolled_writes(d, s, &mut z1, 1500, 24)?;
    poll_in_order(s, &mut rcq, 1500, 24)?;
    expect_quiet(s, &mut rcq)?;
    drop((z1, _z2, rcq));
    rep.pass(s);
    Ok(())
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
