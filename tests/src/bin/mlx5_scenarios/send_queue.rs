//! The send queue: a chain of unsignaled writes, the ring wrapping many
//! times, and (no C twin) only unsignaled sends filling it for good,
//! `SignalEvery` keeping it from filling, and its capacities as `query`
//! reports them (the numbers libmlx5's `ibv_query_qp` reports for the same
//! QPs) and as one chain fills them.

use std::time::Instant;

use rverbs::{QpCap, QpType, RecvWr, SendFlags, SendWr, Sge, Wc, WcStatus};

use crate::datapath::{
    expect_bytes, expect_quiet, expect_wc, fresh_pair, pattern, poll_one, Dp, AUX, DST, SRC,
    TIMEOUT,
};
use crate::report::{expect, fail, Ctx, Fail, Report, R};

impl Dp {
    pub(crate) fn unsignaled_chain(&mut self) -> R {
        let s = "unsignaled_chain";
        let bytes: Vec<u8> = (0..32u8).map(|i| 0xa0 + i).collect();
        self.put(s, SRC, &bytes)?;
        let sges: Vec<[Sge; 1]> = (0..32).map(|i| [self.sge(SRC + i, 1)]).collect();
        let rkey = self.mr.rkey();
        let chain: Vec<SendWr<'_>> = (0..32)
            .map(|i| {
                let wr =
                    SendWr::rdma_write(100 + i as u64, &sges[i], self.remote(DST + 8 * i), rkey);
                if i == 31 {
                    wr.signaled()
                } else {
                    wr
                }
            })
            .collect();
        self.qa.post_send(&chain).at(s)?;
        drop(chain);
        let wc = poll_one(s, &mut self.cqa)?;
        expect_wc(s, &wc, WcStatus::SUCCESS, 131)?;
        for i in 0..32 {
            expect(
                s,
                self.get(DST + 8 * i, 1)[0] == 0xa0 + i as u8,
                &format!("write {i} did not land"),
            )?;
        }
        expect_quiet(s, &mut self.cqa)
    }

    pub(crate) fn sq_wrap(&mut self) -> R {
        let s = "sq_wrap";
        let rkey = self.mr.rkey();
        for i in 0..1200usize {
            let v: u64 = 0x1000 + i as u64;
            let off = SRC + 8 * (i % 16);
            self.put(s, off, &v.to_ne_bytes())?;
            let wr_id = 1000 + i as u64;
            if i % 3 == 0 {
                let sg = [
                    self.sge(off, 4),
                    self.sge(off + 4, 4),
                    self.sge(off, 0),
                    self.sge(off, 8),
                ];
                let r = [self.sge(AUX, 64)];
                self.qb
                    .post_recv(&[RecvWr::new(5000 + i as u64, &r)])
                    .at(s)?;
                self.qa
                    .post_send(&[SendWr::send(wr_id, &sg).signaled()])
                    .at(s)?;
            } else {
                let sg = [self.sge(off, 8)];
                let dst = self.remote(DST + 8 * (i % 16));
                self.qa
                    .post_send(&[SendWr::rdma_write(wr_id, &sg, dst, rkey).signaled()])
                    .at(s)?;
            }
            let wc = poll_one(s, &mut self.cqa)?;
            expect_wc(s, &wc, WcStatus::SUCCESS, wr_id).map_err(|f| Fail {
                why: format!("iteration {i}: {}", f.why),
                ..f
            })?;
            let want = self.get(off, 8);
            if i % 3 == 0 {
                let wc = poll_one(s, &mut self.cqb)?;
                expect_wc(s, &wc, WcStatus::SUCCESS, 5000 + i as u64)?;
                expect(s, wc.byte_len() == 16, "byte_len is not 16")?;
                expect_bytes(s, &self.get(AUX, 8), &want)?;
                expect_bytes(s, &self.get(AUX + 8, 8), &want)?;
            } else {
                expect_bytes(s, &self.get(DST + 8 * (i % 16), 8), &want)?;
            }
        }
        Ok(())
    }
}

/// Only unsignaled sends: after `max_send_wr` of them the queue is full for
/// good (a slot is freed only by a polled completion, as with libmlx5),
/// and the error says why.
pub(crate) fn unsignaled_queue_full(d: &mut Dp, _: &mut Report) -> R {
    let s = "unsignaled_queue_full";
    let mut cq = d.ctx.create_cq(16).at(s)?;
    let (mut z1, _z2) = fresh_pair(d, s, &cq)?;
    let max = z1.cap().max_send_wr;
    expect(s, max >= 64, "max_send_wr below the 64 requested")?;
    d.put(s, SRC, &pattern(64, 77))?;
    let sg = [d.sge(SRC, 64)];
    for k in 0..u64::from(max) {
        let wr = SendWr::rdma_write(k, &sg, d.remote(DST + 8192), d.mr.rkey());
        z1.post_send(&[wr]).at(s)?;
    }
    // Every write executed (the data is there) ...
    let end = Instant::now() + TIMEOUT;
    while d.get(DST + 8192, 64) != pattern(64, 77) {
        if Instant::now() > end {
            return fail(s, "the unsignaled writes did not arrive");
        }
    }
    expect_quiet(s, &mut cq)?;
    // ... yet the queue stays full: nothing signaled, nothing to poll.
    let wr = SendWr::rdma_write(999, &sg, d.remote(DST + 8192), d.mr.rkey());
    match z1.post_send(&[wr]) {
        Err(e) if e.index() == 0 && e.error() == rverbs::PostError::QueueFull => expect(
            s,
            e.to_string().contains("signaled"),
            "QueueFull does not say that unsignaled sends need a signaled one",
        ),
        other => fail(s, format!("post after {max} unsignaled sends: {other:?}")),
    }
}

/// The same stream with `SignalEvery`: 4 x max_send_wr writes, one in
/// every max_send_wr / 2 signaled and polled, never full.
pub(crate) fn signal_every(d: &mut Dp, _: &mut Report) -> R {
    let s = "signal_every";
    let mut cq = d.ctx.create_cq(64).at(s)?;
    let (mut z1, _z2) = fresh_pair(d, s, &cq)?;
    let mut sig = rverbs::SignalEvery::for_qp(&z1);
    let total = 4 * u64::from(z1.cap().max_send_wr);
    let mut wc = [Wc::default(); 8];
    let (mut signaled, mut done) = (0usize, 0usize);
    for k in 0..total {
        d.put(s, SRC, &pattern(64, k as u32))?;
        let sg = [d.sge(SRC, 64)];
        let wr = sig.mark(SendWr::rdma_write(
            k,
            &sg,
            d.remote(DST + 12288),
            d.mr.rkey(),
        ));
        signaled += usize::from(wr.send_flags().contains(SendFlags::SIGNALED));
        // The emulated HCA runs in another thread: wait for room rather
        // than racing it, as an application polls when the queue is full.
        let end = Instant::now() + TIMEOUT;
        loop {
            match z1.post_send(&[wr]) {
                Ok(()) => break,
                Err(e) if e.error() == rverbs::PostError::QueueFull && Instant::now() < end => {}
                Err(e) => return fail(s, format!("post {k}: {e}")),
            }
            let n = cq.poll(&mut wc).at(s)?;
            for w in &wc[..n] {
                expect_wc(s, w, WcStatus::SUCCESS, w.wr_id())?;
            }
            done += n;
        }
        let n = cq.poll(&mut wc).at(s)?;
        for w in &wc[..n] {
            expect_wc(s, w, WcStatus::SUCCESS, w.wr_id())?;
        }
        done += n;
    }
    while done < signaled {
        done += poll_one(s, &mut cq).map(|_| 1)?;
    }
    expect(
        s,
        signaled as u64 == total / u64::from(sig.every()),
        "not one in every max_send_wr / 2 signaled",
    )?;
    expect_bytes(s, &d.get(DST + 12288, 64), &pattern(64, (total - 1) as u32))
}

/// `Qp::query` reports what `Qp::cap` does (the kernel reports no send
/// capacities on mlx5), and exactly that many sends fit in one chain.
pub(crate) fn query_caps(d: &mut Dp, _: &mut Report) -> R {
    let s = "query_caps";
    let mut cq = d.ctx.create_cq(16).at(s)?;
    let (mut z1, _z2) = fresh_pair(d, s, &cq)?;
    let cap = z1.cap();
    let (_, qcap, _) = z1.query().at(s)?;
    expect(s, qcap == cap, &format!("query {qcap:?} != cap {cap:?}"))?;
    expect(
        s,
        cap.max_send_wr >= 64 && cap.max_send_sge >= 4,
        "caps below the request",
    )?;
    let sg = [d.sge(SRC, 8)];
    let wrs: Vec<SendWr> = (0..=u64::from(cap.max_send_wr))
        .map(|k| SendWr::rdma_write(k, &sg, d.remote(DST), d.mr.rkey()))
        .collect();
    match z1.post_send(&wrs) {
        Err(e) if e.error() == rverbs::PostError::QueueFull => expect(
            s,
            e.index() == cap.max_send_wr as usize,
            &format!(
                "QueueFull at {}, max_send_wr is {}",
                e.index(),
                cap.max_send_wr
            ),
        )?,
        other => fail(s, format!("posting max_send_wr + 1: {other:?}"))?,
    }
    expect_quiet(s, &mut cq)
}

/// datapath.c's `query_qp_caps`: `query` reports, for `make_qp`'s request
/// (64 WRs, 4 SGEs each way, 64 inline bytes), what libmlx5's
/// `ibv_query_qp` reports for it (`mlx5_query_qp`: the send capacities
/// from its own queue, the receive ones from the kernel): RC WQEs of 320
/// bytes (192 of overhead, room for 124 inline bytes), 102 of them in a
/// 32 KiB ring; UD WQEs of 192 bytes (64 of overhead), 85 in 16 KiB;
/// receive WQEs of 64 bytes, 64 of them, 4 SGEs.
pub(crate) fn query_qp_caps(d: &mut Dp, _: &mut Report) -> R {
    let s = "query_qp_caps";
    let want = |max_send_wr| QpCap {
        max_send_wr,
        max_recv_wr: 64,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 124,
    };
    let ud = d.make_qp(s, QpType::Ud, &d.cqa, None)?;
    for (name, qp, want) in [("RC", &d.qa, want(102)), ("UD", &ud, want(85))] {
        let (_, cap, _) = qp.query().at(s)?;
        expect(
            s,
            cap == want,
            &format!("{name}: query says {cap:?}, libmlx5 {want:?}"),
        )?;
    }
    Ok(())
}
