//! Completion events: a CQ on a completion channel armed for any and for
//! solicited completions only, arm sequence numbers (arming twice, a
//! stale arm), and `Cq::poll_blocking` waiting on one.

use rverbs::{Error, QpType, RecvWr, SendFlags, SendWr, Wc, WcStatus};

use crate::datapath::{
    connect_rc, expect_wc, fresh_pair, poll_one, Dp, AUX, DST, QUIET, SRC, TIMEOUT,
};
use crate::report::{expect, fail, Ctx, Report, R};

impl Dp {
    /// comp_channel and comp_solicited. Our events name the CQ by its
    /// EventId (libibverbs: the CQ pointer and its cq_context) and need no
    /// acknowledgement.
    pub(crate) fn comp_channel(&mut self, rep: &mut Report) -> R {
        let s = "comp_channel";
        let chan = self.ctx.create_comp_channel().at(s)?;
        let mut cqe_ev = self.ctx.create_cq_with(16, Some(&chan), 0).at(s)?;
        let mut e1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut e2 = self.make_qp(s, QpType::Rc, &cqe_ev, None)?;
        connect_rc(s, &mut e1, e2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut e2, e1.qp_num(), self.lid, 7)?;
        cqe_ev.req_notify(false).at(s)?;
        let r = [self.sge(AUX, 64)];
        e2.post_recv(&[RecvWr::new(401, &r)]).at(s)?;
        let sg = [self.sge(SRC, 8)];
        e1.post_send(&[SendWr::send(400, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 400)?;
        match chan.get_event_timeout(TIMEOUT).at(s)? {
            None => fail(s, "no completion event within the timeout")?,
            Some(id) => expect(s, id == cqe_ev.event_id(), "event for the wrong CQ")?,
        }
        let wc = poll_one(s, &mut cqe_ev)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 401)?;
        // Not re-armed: no second event.
        e2.post_recv(&[RecvWr::new(402, &r)]).at(s)?;
        e1.post_send(&[SendWr::send(403, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 403)?;
        let wc = poll_one(s, &mut cqe_ev)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 402)?;
        expect(
            s,
            chan.get_event_timeout(QUIET).at(s)?.is_none(),
            "event without arming",
        )?;
        rep.pass(s);

        // Solicited-only: an unsolicited SEND raises nothing, a solicited
        // one does.
        let s = "comp_solicited";
        cqe_ev.req_notify(true).at(s)?;
        e2.post_recv(&[RecvWr::new(404, &r)]).at(s)?;
        e2.post_recv(&[RecvWr::new(405, &r)]).at(s)?;
        e1.post_send(&[SendWr::send(406, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 406)?;
        let wc = poll_one(s, &mut cqe_ev)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 404)?;
        expect(
            s,
            chan.get_event_timeout(QUIET).at(s)?.is_none(),
            "event for an unsolicited SEND",
        )?;
        let wr = SendWr::send(407, &sg).flags(SendFlags::SIGNALED | SendFlags::SOLICITED);
        e1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 407)?;
        match chan.get_event_timeout(TIMEOUT).at(s)? {
            None => fail(s, "no event for a solicited SEND")?,
            Some(id) => expect(s, id == cqe_ev.event_id(), "event for the wrong CQ")?,
        }
        let wc = poll_one(s, &mut cqe_ev)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 405)?;
        drop((e1, e2, cqe_ev, chan));
        rep.pass(s);
        Ok(())
    }
}

/// datapath.c's `comp_arm_twice` and `comp_arm_stale`: the arm sequence
/// number mlx5 carries in every arm, which the device checks, counts the
/// events read (issue 25).
///
/// `comp_arm_twice`: arming twice with no event in between still gets an
/// event for the next completion, and after each event read, arming again
/// gets the next one (six rounds: the 2-bit number wraps).
///
/// `comp_arm_stale`: an arm made while an event is raised but not yet read
/// carries the old number and is ignored (as the device does): the next
/// completion raises nothing; once the event is read, arming works again.
pub(crate) fn comp_arm_sequence(d: &mut Dp, rep: &mut Report) -> R {
    let s = "comp_arm_twice";
    let chan = d.ctx.create_comp_channel().at(s)?;
    let mut cq = d.ctx.create_cq_with(16, Some(&chan), 0).at(s)?;
    let (mut z1, _z2) = fresh_pair(d, s, &cq)?;
    let sg = [d.sge(SRC, 8)];
    let mut wr_id = 1600u64;
    let mut complete = |s: &'static str, cq: &mut rverbs::Cq| -> R {
        let wr = SendWr::rdma_write(wr_id, &sg, d.remote(DST), d.mr.rkey()).signaled();
        z1.post_send(&[wr]).at(s)?;
        let wc = poll_one(s, cq)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, wr_id)?;
        wr_id += 1;
        Ok(())
    };
    let event = |s: &'static str, cq: &rverbs::Cq, what: &str| -> R {
        match chan.get_event_timeout(TIMEOUT).at(s)? {
            None => fail(s, format!("no completion event {what}")),
            Some(id) => expect(s, id == cq.event_id(), "event for the wrong CQ"),
        }
    };
    let no_event = |s: &'static str, what: &str| -> R {
        expect(s, chan.get_event_timeout(QUIET).at(s)?.is_none(), what)
    };
    for round in 0..6 {
        cq.req_notify(false).at(s)?;
        if round % 2 == 0 {
            cq.req_notify(false).at(s)?;
        }
        complete(s, &mut cq)?;
        event(s, &cq, "after arming (twice on even rounds)")?;
        no_event(s, "two events for one arm")?;
    }
    rep.pass(s);

    let s = "comp_arm_stale";
    cq.req_notify(false).at(s)?;
    complete(s, &mut cq)?;
    // The event is raised; arming before reading it repeats the old
    // number: ignored.
    cq.req_notify(false).at(s)?;
    complete(s, &mut cq)?;
    event(s, &cq, "for the first arm")?;
    no_event(s, "an event for an arm made before the last event was read")?;
    // Read: the next arm carries the new number.
    cq.req_notify(false).at(s)?;
    complete(s, &mut cq)?;
    event(s, &cq, "after arming once the event was read")?;
    drop((z1, _z2, cq, chan));
    rep.pass(s);
    Ok(())
}

/// `Cq::poll_blocking` through the channel: times out when nothing comes,
/// wakes for a completion.
pub(crate) fn poll_blocking(d: &mut Dp, _: &mut Report) -> R {
    let s = "poll_blocking";
    let chan = d.ctx.create_comp_channel().at(s)?;
    let mut cq = d.ctx.create_cq_with(16, Some(&chan), 0).at(s)?;
    let (mut z1, _z2) = fresh_pair(d, s, &cq)?;
    let mut wc = [Wc::default(); 4];
    match cq.poll_blocking(&mut wc, QUIET) {
        Err(Error::Timeout(_)) => {}
        other => fail(s, format!("an empty CQ: {other:?}"))?,
    }
    let sg = [d.sge(SRC, 8)];
    for k in 0..50u64 {
        let wr = SendWr::rdma_write(1100 + k, &sg, d.remote(DST), d.mr.rkey()).signaled();
        z1.post_send(&[wr]).at(s)?;
        let n = cq.poll_blocking(&mut wc, TIMEOUT).at(s)?;
        expect(s, n == 1, "not one completion")?;
        expect_wc(s, &wc[0], WcStatus::SUCCESS, 1100 + k)?;
    }
    Ok(())
}
