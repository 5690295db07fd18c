//! rxe shared receive queues: CREATE_SRQ with rxe's driver response, the
//! mapped receive ring (posted through [`RecvQueue`]), MODIFY_SRQ (limit,
//! and resize, for which rxe writes the new ring's [`MmInfo`](rxe::MmInfo) to a user
//! address given in the driver data), QUERY_SRQ and DESTROY_SRQ.

use std::os::fd::BorrowedFd;

use rverbs_abi::rxe;
use rverbs_abi::srq::{CreateSrq, CreateSrqResp, DestroySrq, ModifySrq};
use rverbs_abi::Errno;
use rverbs_provider::wr::RecvWr;
use zerocopy::FromZeros;

use crate::cmd;
use crate::qp::RecvQueue;
use crate::queue::Queue;
use crate::{PostError, PostFailed};

/// `IB_SRQ_MAX_WR`: MODIFY_SRQ resizes the ring.
pub(crate) const SRQ_MAX_WR: u32 = 1;
/// `IB_SRQ_LIMIT`: MODIFY_SRQ (re)arms the limit event.
pub(crate) const SRQ_LIMIT: u32 = 2;

/// What CREATE_SRQ returned: the kernel's answer, rxe's SRQ number and the
/// mapped ring. If mapping failed the caller must destroy `resp.srq_handle`.
#[derive(Debug)]
pub(crate) struct Created {
    /// Core response (handle, granted depth and SGEs).
    pub resp: CreateSrqResp,
    /// rxe's SRQ number (what the core response's `srqn` holds for XRC
    /// SRQs only).
    pub srq_num: u32,
    /// The ring, or why it could not be mapped.
    pub srq: Result<Srq, Errno>,
}

/// Issues CREATE_SRQ for `cmd` (its `response` is filled in) and maps the
/// receive ring.
pub(crate) fn create(fd: BorrowedFd<'_>, cmd: &CreateSrq) -> Result<Created, Errno> {
    let mut drv = rxe::CreateSrqResp::new_zeroed();
    let resp = cmd::create_srq(fd, cmd, &mut drv)?;
    let srq = Queue::map(fd, &drv.mi)
        .and_then(|ring| RecvQueue::new(ring, resp.max_wr, resp.max_sge))
        .map(|rq| Srq {
            rq: Some(rq),
            handle: resp.srq_handle,
            max_sge: resp.max_sge,
        });
    Ok(Created {
        resp,
        srq_num: drv.srq_num,
        srq,
    })
}

/// An SRQ's receive ring. Posting needs `&mut` (one producer); the kernel
/// consumes on behalf of every QP attached to the SRQ.
#[derive(Debug)]
pub(crate) struct Srq {
    /// `None` after a resize whose new ring could not be mapped.
    rq: Option<RecvQueue>,
    handle: u32,
    max_sge: u32,
}

impl Srq {
    /// Posts the chain `wrs` (no doorbell: rxe polls the ring). On error the
    /// requests before the failing index are posted.
    #[inline]
    pub(crate) fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        match &mut self.rq {
            // The ring is a receive queue's; its refusal is the SRQ's.
            Some(rq) => rq.post(wrs).map_err(|f| match f.error() {
                PostError::RecvQueueFull => PostFailed::new(f.index(), PostError::SrqFull),
                _ => f,
            }),
            None => Err(PostFailed::first(PostError::InvalidState)),
        }
    }

    /// Depth in work requests (0 if a resize left no usable ring).
    pub(crate) fn capacity(&self) -> u32 {
        self.rq.as_ref().map_or(0, RecvQueue::capacity)
    }

    /// Receives posted and not yet consumed.
    pub(crate) fn outstanding(&self) -> u32 {
        self.rq.as_ref().map_or(0, RecvQueue::outstanding)
    }

    /// Sets the limit: once fewer than `limit` receives remain, the kernel
    /// raises `IB_EVENT_SRQ_LIMIT_REACHED` once and disarms (0 disarms now).
    pub(crate) fn set_limit(&self, fd: BorrowedFd<'_>, limit: u32) -> Result<(), Errno> {
        cmd::modify_srq(fd, &modify(self.handle, SRQ_LIMIT, 0, limit))
    }

    /// Resizes the ring to at least `max_wr` entries. The kernel copies the
    /// receives still queued into a new ring and describes it; the new ring
    /// is mapped and the old one unmapped. `&mut self` guarantees nothing is
    /// posted meanwhile. The caller must not ask for fewer entries than are
    /// queued (rxe refuses with EINVAL, which is harmless, but this keeps
    /// the refusal out of the kernel log). If the kernel resized but the
    /// new ring cannot be mapped, the error is returned and every later
    /// post fails with [`PostError::InvalidState`]: the old ring is no
    /// longer consumed, so posting to it would lose receives silently.
    pub(crate) fn resize(&mut self, fd: BorrowedFd<'_>, max_wr: u32) -> Result<(), Errno> {
        let mi = cmd::modify_srq_resize(fd, &modify(self.handle, SRQ_MAX_WR, max_wr, 0))?;
        // The kernel has swapped rings: the old mapping still shows the old
        // buffer (its pages live until unmapped) but is no longer consumed.
        self.rq = None;
        let ring = Queue::map(fd, &mi)?;
        self.rq = Some(RecvQueue::new(ring, max_wr, self.max_sge)?);
        Ok(())
    }
}

/// A MODIFY_SRQ command. rxe requires its driver data on every call (see
/// [`cmd::modify_srq`]); with [`SRQ_MAX_WR`] the kernel writes the new
/// ring's description through it ([`cmd::modify_srq_resize`]).
fn modify(srq_handle: u32, attr_mask: u32, max_wr: u32, srq_limit: u32) -> ModifySrq {
    ModifySrq {
        srq_handle,
        attr_mask,
        max_wr,
        srq_limit,
    }
}

/// DESTROY_SRQ. Fails with EBUSY while a QP still uses the SRQ. Returns the
/// number of async events the kernel delivered for it.
pub(crate) fn destroy(fd: BorrowedFd<'_>, srq_handle: u32) -> Result<u32, Errno> {
    let cmd = DestroySrq {
        response: 0,
        srq_handle,
        reserved: 0,
    };
    Ok(cmd::destroy_srq(fd, &cmd)?.events_reported)
}
