//! Posting work requests: [`Qp::post_send`](crate::Qp::post_send) and [`Qp::post_recv`](crate::Qp::post_recv) hand a
//! chain to the provider's queue (one `match` on the provider, no lock, no
//! allocation), [`Qp::post_send_batch`](crate::Qp::post_send_batch) posts
//! many requests of one operation checked once, and [`SignalEvery`] marks
//! every Nth send signaled.

use rverbs_provider::batch::{BatchWr, SendBatch};
use rverbs_provider::wr::{RecvWr, SendRequest, SendWr};

use crate::error::{PostError, PostFailed};
use crate::qp::Qp;

/// Marks every Nth send work request signaled, the "selective
/// signaling" pattern that keeps an mlx5 send queue from filling up with
/// unsignaled requests (see [`Qp::post_send`](crate::Qp::post_send)). A counter: no allocation,
/// no system call.
///
/// ```no_run
/// # fn f(qp: &mut rverbs::Qp, sge: &[rverbs::Sge; 1]) -> rverbs::Result<()> {
/// let mut sig = rverbs::SignalEvery::for_qp(qp); // every max_send_wr / 2
/// for i in 0..1000 {
///     qp.post_send(&[sig.mark(rverbs::SendWr::send(i, sge))])?;
///     // ... poll the CQ now and then ...
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalEvery {
    every: u32,
    count: u32,
}

impl SignalEvery {
    /// Signals one request in every `n` (the `n`th, `2n`th, ...). `n` is
    /// at least 1 (0 is taken as 1: every request signaled).
    pub fn new(n: u32) -> SignalEvery {
        SignalEvery {
            every: n.max(1),
            count: 0,
        }
    }

    /// Signals one request in every half of `qp`'s send queue
    /// (`max_send_wr / 2`, at least 1), so that the slots of one half are
    /// freed while the other half fills.
    pub fn for_qp(qp: &Qp) -> SignalEvery {
        SignalEvery::new(qp.cap().max_send_wr / 2)
    }

    /// The period.
    pub fn every(&self) -> u32 {
        self.every
    }

    /// Counts one request: `true` if it must be signaled.
    #[inline]
    pub fn next_signaled(&mut self) -> bool {
        self.count += 1;
        if self.count >= self.every {
            self.count = 0;
            true
        } else {
            false
        }
    }

    /// Counts `wr` and returns it, signaled if its turn has come (a request
    /// already signaled stays so, and restarts the count).
    #[inline]
    pub fn mark<'a>(&mut self, wr: SendWr<'a>) -> SendWr<'a> {
        if wr
            .send_flags()
            .contains(rverbs_provider::wr::SendFlags::SIGNALED)
        {
            self.count = 0;
            return wr;
        }
        if self.next_signaled() {
            wr.signaled()
        } else {
            wr
        }
    }
}

impl Qp {
    /// Posts a chain of send work requests (one doorbell). On error the
    /// requests before [`PostFailed::index`] were posted. The error comes
    /// back in two registers; `?` turns it into [`Error::Post`](crate::Error::Post)
    /// in a function returning [`crate::Result`].
    ///
    /// **Signal regularly.** A send slot is freed only once the request is
    /// known complete. On mlx5 (as with rdma-core's libmlx5) that is known
    /// only from a polled completion, and an unsignaled request produces
    /// none: its slot is freed when a *later signaled* request's
    /// completion is polled. A QP that posts only unsignaled sends fails
    /// with [`PostError::QueueFull`] after [`QpCap::max_send_wr`](crate::QpCap::max_send_wr) posts, for
    /// good. Mark at least one request in every `max_send_wr` signaled and
    /// poll its completion: [`SignalEvery`] counts for you. (rxe frees
    /// slots as its kernel consumes them, signaled or not; portable code
    /// follows the mlx5 rule.)
    ///
    /// Refused with [`PostError::InvalidState`] (nothing posted) before
    /// the QP is in RTS: the provider's send queue follows the QP's state
    /// and decides.
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostFailed> {
        self.sq.post_wrs(wrs)
    }

    /// Posts one send request given in any form that implements
    /// [`SendRequest`], read in place: what a library adapting another
    /// request format (our C ABI's `struct ibv_send_wr`) calls, so the
    /// provider writes its entry straight from that format instead of from
    /// a [`SendWr`] built first (rxe and mlx5 both read it in place). The
    /// same checks, entry and errors as
    /// [`Qp::post_send`] of a chain of one: a doorbell that failed after
    /// the entry was written is reported at [`PostFailed::index`] 1.
    #[inline]
    pub fn post_send_request<R: SendRequest + ?Sized>(&mut self, wr: &R) -> Result<(), PostFailed> {
        self.sq.post_one_wr(wr)
    }

    /// Posts the send requests `reqs` yields, in any form that implements
    /// [`SendRequest`], read in place, as one chain: [`Qp::post_send`]
    /// without a slice of [`SendWr`] built first (the C ABI walks its
    /// linked list of `struct ibv_send_wr` with it). The iterator is not
    /// advanced past a refused request; on error the requests before
    /// [`PostFailed::index`] were posted.
    #[inline]
    pub fn post_send_iter<R: SendRequest, I: IntoIterator<Item = R>>(
        &mut self,
        reqs: I,
    ) -> Result<(), PostFailed> {
        self.sq.post_iter_wrs(reqs.into_iter())
    }

    /// Posts a batch: many send requests of one operation (RDMA WRITE,
    /// SEND, with or without immediate, or RDMA READ) under one remote
    /// key, described once by `batch`, one [`BatchWr`] (`wr_id`, local
    /// SGE, remote address) per request. One doorbell. The requests are
    /// exactly the ones [`SendBatch::to_wr`] makes (the same WQEs as
    /// posting them as a chain with [`Qp::post_send`]), signaled as
    /// [`SendBatch::signal`] says: by default only the last one posted.
    ///
    /// The operation and the QP are checked once per call (a UD QP is
    /// refused with [`PostError::MissingAddress`], RDMA READ off RC with
    /// [`PostError::InvalidOpcode`]; `index` 0, nothing posted), each
    /// entry only for its length (at most 2^31 bytes: else
    /// [`PostError::MessageTooLong`]; zero moves no data). Entries that do
    /// not fit the queue end with [`PostError::QueueFull`] at the first of
    /// them. As with [`Qp::post_send`], on error the requests before
    /// [`PostFailed::index`] were posted; with the default signaling
    /// the last of them is signaled.
    ///
    /// On mlx5 the batch is written in one loop without decoding a
    /// request per entry (the cheapest way to post many small requests);
    /// rxe posts it as chains of up to 32 requests built on the stack.
    ///
    /// ```no_run
    /// # fn f(qp: &mut rverbs::Qp, mr: &rverbs::Mr, peer: rverbs::RemoteMr) -> rverbs::Result<()> {
    /// use rverbs::{BatchWr, SendBatch};
    /// // 32 RDMA WRITEs of 64 bytes each; only the last one is signaled.
    /// let mut wrs = [BatchWr::default(); 32];
    /// for (k, w) in wrs.iter_mut().enumerate() {
    ///     *w = BatchWr::new(k as u64, mr.sge(k * 64..(k + 1) * 64)?, peer.addr + (k * 64) as u64);
    /// }
    /// qp.post_send_batch(&SendBatch::rdma_write(peer.rkey), &wrs)?;
    /// // ... poll the one completion (wr_id 31) ...
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn post_send_batch(
        &mut self,
        batch: &SendBatch,
        wrs: &[BatchWr],
    ) -> Result<(), PostFailed> {
        self.sq.post_batch_wrs(batch, wrs)
    }

    /// Posts a chain of receive work requests. Refused in RESET (the QP
    /// must be at least INIT) and on a QP that uses an SRQ.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        match &mut *self.rq {
            Some(rq) => rq.post_wrs(wrs),
            None if self.srq.is_some() => Err(PostFailed::first(PostError::UsesSrq)),
            None => Err(PostFailed::first(PostError::InvalidState)),
        }
    }

    /// [`Qp::post_recv`] of one request, with the provider's post compiled
    /// into the caller instead of called: for an adapter's entry point
    /// that does little else (the C ABI's `ibv_post_recv`). The same
    /// checks, entry and errors; prefer [`Qp::post_recv`] elsewhere.
    #[inline(always)]
    pub fn post_recv_inlined(&mut self, wr: &RecvWr<'_>) -> Result<(), PostFailed> {
        match &mut *self.rq {
            Some(rq) => rq.post_one_inline(wr),
            None if self.srq.is_some() => Err(PostFailed::first(PostError::UsesSrq)),
            None => Err(PostFailed::first(PostError::InvalidState)),
        }
    }

    /// Send WRs posted and not yet consumed by the device.
    pub fn send_outstanding(&self) -> u32 {
        self.sq.outstanding()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_every_marks_every_nth() {
        let sge = [rverbs_abi::wr::Sge::default()];
        let mut sig = SignalEvery::new(3);
        let got: Vec<bool> = (0..7)
            .map(|i| {
                sig.mark(SendWr::send(i, &sge))
                    .send_flags()
                    .contains(rverbs_provider::wr::SendFlags::SIGNALED)
            })
            .collect();
        assert_eq!(got, [false, false, true, false, false, true, false]);
        // A request signaled by the caller restarts the count.
        assert!(sig
            .mark(SendWr::send(9, &sge).signaled())
            .send_flags()
            .contains(rverbs_provider::wr::SendFlags::SIGNALED));
        assert!(!sig.next_signaled());
        assert!(!sig.next_signaled());
        assert!(sig.next_signaled());
        assert_eq!(SignalEvery::new(0).every(), 1);
    }
}
