//! Completion events: a CQ on a completion channel armed for any and for
//! solicited completions only, and `Cq::poll_blocking` waiting on one.

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
