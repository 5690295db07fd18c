//! Error completions on RC: a bad rkey (and the flush behind it, the
//! responder's move to the error state, the flush of its receives and its
//! QP_ACCESS_ERR event), a bad lkey, a pair reset and reused, a receive too
//! small (and the flush behind it), and RNR with and without retries.

use rverbs::{AsyncEventKind, QpAttr, QpState, QpType, RecvWr, SendWr, WcStatus};

use crate::datapath::{
    connect_rc, expect_bytes, expect_quiet, expect_wc, pattern, poll_one, Dp, AUX, DST, QUIET, SRC,
    TIMEOUT,
};
use crate::report::{expect, fail, Ctx, Report, R};

impl Dp {
    /// bad_rkey, bad_rkey_flush, bad_rkey_requester_err,
    /// bad_rkey_responder_err, bad_rkey_responder_flush,
    /// bad_rkey_access_event, bad_lkey, reset_reuse, recv_too_small,
    /// recv_flush: one pair, reset and reconnected between cases.
    pub(crate) fn errors(&mut self, rep: &mut Report) -> R {
        let s = "bad_rkey";
        let mut b1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut b2 = self.make_qp(s, QpType::Rc, &self.cqb, None)?;
        connect_rc(s, &mut b1, b2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut b2, b1.qp_num(), self.lid, 7)?;
        let r = [self.sge(AUX, 64)];
        b2.post_recv(&[RecvWr::new(504, &r), RecvWr::new(505, &r)])
            .at(s)?;
        let sg = [self.sge(SRC, 8)];
        let (dst, rkey) = (self.remote(DST), self.mr.rkey());
        let chain = [
            SendWr::rdma_write(500, &sg, dst, rkey ^ 0x5500).signaled(),
            SendWr::rdma_write(501, &sg, dst, rkey).signaled(),
        ];
        b1.post_send(&chain).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::REM_ACCESS_ERR, 500)?;
        let wc = poll_one("bad_rkey_flush", &mut self.cqa)?;
        expect_wc("bad_rkey_flush", &wc, WcStatus::WR_FLUSH_ERR, 501)?;
        rep.pass("bad_rkey");
        rep.pass("bad_rkey_flush");

        // Both ends are in ERR: the responder NAKed a class C error.
        for (s, qp, who) in [
            ("bad_rkey_requester_err", &b1, "requester"),
            ("bad_rkey_responder_err", &b2, "responder"),
        ] {
            let state = qp.query().at(s)?.0.qp_state;
            expect(
                s,
                state == Some(QpState::Err),
                &format!("the {who} is in {state:?}, not ERR"),
            )?;
            rep.pass(s);
        }
        let s = "bad_rkey_responder_flush";
        for id in [504, 505] {
            let wc = poll_one(s, &mut self.cqb)?;
            expect_wc(s, &wc, WcStatus::WR_FLUSH_ERR, id)?;
        }
        expect_quiet(s, &mut self.cqb)?;
        rep.pass(s);
        let s = "bad_rkey_access_event";
        match self.ctx.get_async_event_timeout(TIMEOUT).at(s)? {
            None => fail(s, "no async event within the timeout")?,
            Some(ev) => {
                expect(
                    s,
                    ev.kind == AsyncEventKind::QpAccessErr,
                    &format!("event {ev}"),
                )?;
                expect(s, ev.is_for_qp(&b2), "the event names another QP")?;
            }
        }
        if let Some(ev) = self.ctx.get_async_event_timeout(QUIET).at(s)? {
            fail(s, format!("unexpected async event {ev}"))?;
        }
        rep.pass(s);

        // A bad lkey on a fresh connection: LOC_PROT_ERR.
        let s = "bad_lkey";
        let reset = QpAttr {
            qp_state: Some(QpState::Reset),
            ..Default::default()
        };
        b1.modify(&reset).at(s)?;
        b2.modify(&reset).at(s)?;
        connect_rc(s, &mut b1, b2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut b2, b1.qp_num(), self.lid, 7)?;
        let mut bad = self.sge(SRC, 8);
        bad.lkey ^= 0x5500;
        let bad = [bad];
        b1.post_send(&[SendWr::rdma_write(503, &bad, dst, rkey).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::LOC_PROT_ERR, 503)?;
        rep.pass(s);

        // Back to RESET and reconnected, the pair works again.
        let s = "reset_reuse";
        b1.modify(&reset).at(s)?;
        b2.modify(&reset).at(s)?;
        connect_rc(s, &mut b1, b2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut b2, b1.qp_num(), self.lid, 7)?;
        self.put(s, SRC, &[0x3c])?;
        b1.post_send(&[SendWr::rdma_write(502, &sg, dst, rkey).signaled()])
            .at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 502)?;
        expect(s, self.get(DST, 1)[0] == 0x3c, "the write did not land")?;
        rep.pass(s);

        // A receive too small: REM_INV_REQ / LOC_LEN, then the responder's
        // other receive is flushed.
        let s = "recv_too_small";
        let r = [self.sge(AUX, 4)];
        b2.post_recv(&[RecvWr::new(511, &r)]).at(s)?;
        b2.post_recv(&[RecvWr::new(512, &r)]).at(s)?;
        let sg64 = [self.sge(SRC, 64)];
        b1.post_send(&[SendWr::send(510, &sg64).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::REM_INV_REQ_ERR, 510)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::LOC_LEN_ERR, 511)?;
        rep.pass(s);
        let s = "recv_flush";
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::WR_FLUSH_ERR, 512)?;
        drop((b1, b2));
        rep.pass(s);
        Ok(())
    }

    /// RNR with retries: the send waits for the receive.
    pub(crate) fn rnr_retry(&mut self) -> R {
        let s = "rnr_retry";
        let mut n1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut n2 = self.make_qp(s, QpType::Rc, &self.cqb, None)?;
        connect_rc(s, &mut n1, n2.qp_num(), self.lid, 7)?;
        connect_rc(s, &mut n2, n1.qp_num(), self.lid, 7)?;
        self.put(s, SRC, &pattern(32, 30))?;
        let sg = [self.sge(SRC, 32)];
        n1.post_send(&[SendWr::send(700, &sg).signaled()]).at(s)?;
        expect_quiet(s, &mut self.cqa)?;
        let r = [self.sge(AUX, 64)];
        n2.post_recv(&[RecvWr::new(701, &r)]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 700)?;
        let wc = poll_one(s, &mut self.cqb)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 701)?;
        expect_bytes(s, &self.get(AUX, 32), &self.get(SRC, 32))
    }

    /// RNR with rnr_retry 0.
    pub(crate) fn rnr_retry_exceeded(&mut self) -> R {
        let s = "rnr_retry_exceeded";
        let mut n1 = self.make_qp(s, QpType::Rc, &self.cqa, None)?;
        let mut n2 = self.make_qp(s, QpType::Rc, &self.cqb, None)?;
        connect_rc(s, &mut n1, n2.qp_num(), self.lid, 0)?;
        connect_rc(s, &mut n2, n1.qp_num(), self.lid, 0)?;
        let sg = [self.sge(SRC, 8)];
        n1.post_send(&[SendWr::send(600, &sg).signaled()]).at(s)?;
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::RNR_RETRY_EXC_ERR, 600)
    }
}
