//! A QP moved to ERR and then RESET (no C twin): its flush CQEs vanish
//! from the CQ and its receive ring takes exactly its capacity again.

use std::time::Duration;

use rverbs::{Qp, QpAttr, QpState, QpType, RecvWr, SendWr, WcStatus};

use crate::datapath::{
    connect_rc, expect_bytes, expect_quiet, expect_wc, pattern, poll_one, Dp, AUX, DST, SRC,
};
use crate::report::{expect, fail, Ctx, Report, R};

/// How long the emulated HCA gets to write the flush CQEs of a QP moved to
/// ERR (its thread passes every few hundred microseconds at most).
const FLUSH_WAIT: Duration = Duration::from_millis(200);

/// reset_clean and reset_rq_capacity (no C twin: libmlx5 does this in
/// `__mlx5_cq_clean`): a QP moved to ERR with receives posted gets flush
/// CQEs; moved to RESET before they are polled, they must vanish from its
/// CQ, so that after reconnecting only the new work completes, and the
/// receive ring must take exactly its capacity again.
pub(crate) fn reset_clean(d: &mut Dp, rep: &mut Report) -> R {
    let s = "reset_clean";
    let mut cq1 = d.ctx.create_cq(256).at(s)?;
    let mut cq2 = d.ctx.create_cq(256).at(s)?;
    let mut p1 = d.make_qp(s, QpType::Rc, &cq1, None)?;
    let mut p2 = d.make_qp(s, QpType::Rc, &cq2, None)?;
    connect_rc(s, &mut p1, p2.qp_num(), d.lid, 7)?;
    connect_rc(s, &mut p2, p1.qp_num(), d.lid, 7)?;
    let to = |st| QpAttr {
        qp_state: Some(st),
        ..Default::default()
    };
    // Receives flushed by ERR, their CQEs left in cq2; then RESET and
    // reconnect both ends.
    let flush_and_reset = |s: &'static str, d: &Dp, p1: &mut Qp, p2: &mut Qp, n: u64| -> R {
        for i in 0..n {
            let r = [d.sge(AUX + 64 * i as usize, 64)];
            p2.post_recv(&[RecvWr::new(3000 + i, &r)]).at(s)?;
        }
        p2.modify(&to(QpState::Err)).at(s)?;
        std::thread::sleep(FLUSH_WAIT);
        p1.modify(&to(QpState::Reset)).at(s)?;
        p2.modify(&to(QpState::Reset)).at(s)?;
        connect_rc(s, p1, p2.qp_num(), d.lid, 7)?;
        connect_rc(s, p2, p1.qp_num(), d.lid, 7)
    };
    flush_and_reset(s, d, &mut p1, &mut p2, 3)?;
    d.put(s, SRC, &pattern(100, 50))?;
    d.mr.fill(DST..DST + 4096, 0).at(s)?;
    let r = [d.sge(DST, 4096)];
    p2.post_recv(&[RecvWr::new(3100, &r)]).at(s)?;
    let sg = [d.sge(SRC, 100)];
    p1.post_send(&[SendWr::send(3101, &sg).signaled()]).at(s)?;
    let wc = poll_one(s, &mut cq1)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 3101)?;
    let wc = poll_one(s, &mut cq2)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 3100)?;
    expect(s, wc.byte_len() == 100, "byte_len is not 100")?;
    expect(
        s,
        wc.qp_num() == p2.qp_num(),
        "qp_num is not the receiver's",
    )?;
    expect_bytes(s, &d.get(DST, 100), &pattern(100, 50))?;
    expect_quiet(s, &mut cq2)?;
    rep.pass(s);

    let s = "reset_rq_capacity";
    flush_and_reset(s, d, &mut p1, &mut p2, 5)?;
    // Nothing of the old connection may complete (and polling must not
    // retire receives that are not posted).
    expect_quiet(s, &mut cq2)?;
    let cap = p2.cap().max_recv_wr;
    let r = [d.sge(DST, 4096)];
    let mut accepted = 0u32;
    let err = loop {
        match p2.post_recv(&[RecvWr::new(4000 + u64::from(accepted), &r)]) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        if accepted > cap + 8 {
            return fail(s, format!("accepted {accepted} receives, capacity {cap}"));
        }
    };
    expect(
        s,
        accepted == cap,
        &format!("accepted {accepted} receives, capacity {cap}"),
    )?;
    expect(
        s,
        err.error() == rverbs::PostError::RecvQueueFull,
        &format!("the receive past the capacity failed with {err}, not RecvQueueFull"),
    )?;
    // The oldest of them takes the next message.
    d.put(s, SRC, &pattern(40, 51))?;
    let sg = [d.sge(SRC, 40)];
    p1.post_send(&[SendWr::send(4500, &sg).signaled()]).at(s)?;
    let wc = poll_one(s, &mut cq1)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 4500)?;
    let wc = poll_one(s, &mut cq2)?;
    expect_wc(s, &wc, WcStatus::SUCCESS, 4000)?;
    expect(s, wc.byte_len() == 40, "byte_len is not 40")?;
    expect_bytes(s, &d.get(DST, 40), &pattern(40, 51))?;
    expect_quiet(s, &mut cq2)?;
    rep.pass(s);
    drop((p1, p2));
    Ok(())
}
