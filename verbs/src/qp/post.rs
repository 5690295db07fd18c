//! Posting work requests: [`Qp::post_send`](crate::Qp::post_send) and [`Qp::post_recv`](crate::Qp::post_recv) hand a
//! chain to the provider's queue (one `match` on the provider, no lock, no
//! allocation), and [`SignalEvery`] marks every Nth send signaled.

use rverbs_provider::wr::{RecvWr, SendWr};
use rverbs_provider::SendQueue as _;

use crate::error::{Error, PostError, Result};
use crate::qp::{Qp, QpState};

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

/// The error of a post that failed at `index`. Out of line and cold: the
/// posting paths build no error value on success.
#[cold]
#[inline(never)]
pub(crate) fn post_failed(index: usize, error: PostError) -> Error {
    Error::Post { index, error }
}

impl Qp {
    /// Posts a chain of send work requests (one doorbell). On error the
    /// requests before [`Error::Post`]'s `index` were posted.
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
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        if matches!(self.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(Error::Post {
                index: 0,
                error: PostError::InvalidState,
            });
        }
        self.sq.post_wrs(wrs)
    }

    /// Posts a chain of receive work requests. Refused in RESET (the QP
    /// must be at least INIT) and on a QP that uses an SRQ.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if self.state == QpState::Reset {
            return Err(Error::Post {
                index: 0,
                error: PostError::InvalidState,
            });
        }
        match &mut self.rq {
            Some(rq) => rq.post_wrs(wrs),
            None if self.srq.is_some() => Err(post_failed(0, PostError::UsesSrq)),
            None => Err(post_failed(0, PostError::InvalidState)),
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
