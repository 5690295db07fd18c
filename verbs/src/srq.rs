//! Shared receive queues: one pool of receive buffers that any number of
//! QPs consume from ([`Pd::create_qp_with_srq`]), with a low-water limit
//! that raises [`crate::AsyncEventKind::SrqLimitReached`].
//!
//! As with CQs, the ring lives in [`Srq`] (posting takes `&mut`, never
//! locks) and the kernel object in an `Arc` that every QP created on the
//! SRQ also holds, so the kernel SRQ is destroyed only after its last QP,
//! whatever order the handles are dropped in.

use crate::sys::mem::Leakable;
use std::fmt;
use std::sync::Arc;

use rverbs_abi::cmd::exec;
use rverbs_abi::srq::{CreateSrq, DestroySrq, QuerySrq};
use rverbs_provider::wr::RecvWr;
use rverbs_provider::Feature;

use crate::error::{Error, InvalidKind, PostFailed, Result};
use crate::event::{EventId, ObjectKind};
use crate::pd::Pd;

pub(crate) struct SrqInner {
    /// What outlives the ring (mlx5: the WQE buffer and doorbell record):
    /// QPs on the SRQ keep the kernel object (after the [`Srq`] handle may
    /// be gone) and the device uses this memory until DESTROY_SRQ:
    /// declared first, it drops first, right after [`Drop::drop`]'s body
    /// (leaked if the kernel refused).
    shared: Leakable<crate::provider::SrqShared>,
    pub(crate) pd: Pd,
    pub(crate) handle: u32,
    pub(crate) event_id: EventId,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // Every QP of ours on the SRQ is gone (they hold this Arc). The
        // WQE buffer and doorbell record are freed only once the kernel
        // has destroyed the SRQ (or the device is gone): a refused destroy
        // leaves them the device's, so they are leaked.
        let cmd = DestroySrq {
            response: 0,
            srq_handle: self.handle,
            reserved: 0,
        };
        if !crate::event::destroyed(exec(self.pd.context().fd(), &cmd, &mut [])) {
            self.shared.leak();
        }
    }
}

/// What [`Pd::create_srq`] needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqInitAttr {
    /// Receive work requests the SRQ holds.
    pub max_wr: u32,
    /// SGEs per receive work request.
    pub max_sge: u32,
    /// Arm the limit event at creation: it fires once fewer than this many
    /// receives remain (0: not armed). rxe honours this at creation;
    /// [`Srq::modify_limit`] arms it later.
    pub srq_limit: u32,
}

impl Default for SrqInitAttr {
    fn default() -> Self {
        SrqInitAttr {
            max_wr: 64,
            max_sge: 1,
            srq_limit: 0,
        }
    }
}

/// An SRQ's attributes as the kernel reports them ([`Srq::query`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// Depth. rxe reports its ring's usable slots, which may exceed what
    /// was asked for (rings have a power-of-two number of slots).
    pub max_wr: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// The armed limit; 0 when disarmed (including after the limit event
    /// fired, which disarms it).
    pub srq_limit: u32,
}

/// A shared receive queue.
pub struct Srq {
    inner: Arc<SrqInner>,
    ring: crate::provider::Srq,
    srq_num: u32,
    max_wr: u32,
    max_sge: u32,
}

impl fmt::Debug for Srq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Srq")
            .field("srq_num", &self.srq_num)
            .field("max_wr", &self.max_wr)
            .field("max_sge", &self.max_sge)
            .finish()
    }
}

impl Pd {
    /// Creates a shared receive queue. `max_wr` 0 is refused, except on a
    /// provider that makes it its smallest SRQ, as libmlx5 does (mlx5: one
    /// entry; [`Srq::max_wr`] tells what was made).
    pub fn create_srq(&self, attr: &SrqInitAttr) -> Result<Srq> {
        if attr.max_wr == 0 && !self.context().provider().supports(Feature::EmptySrq) {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "an SRQ needs at least one entry on this device",
            ));
        }
        if attr.srq_limit > attr.max_wr {
            return Err(Error::invalid_as(
                InvalidKind::TooLarge,
                format!(
                    "srq_limit {} exceeds max_wr {}",
                    attr.srq_limit, attr.max_wr
                ),
            ));
        }
        let ctx = self.context();
        let event_id = EventId::new(ObjectKind::Srq);
        let cmd = CreateSrq {
            response: 0,
            user_handle: event_id.raw(),
            pd_handle: self.handle(),
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        };
        // Complete or nothing: the provider destroys the kernel SRQ itself
        // if it fails after creating it.
        let (resp, srq_num, ring, shared) = ctx.provider().create_srq(&cmd, self.allocator())?;
        Ok(Srq {
            inner: Arc::new(SrqInner {
                pd: self.clone(),
                handle: resp.srq_handle,
                event_id,
                shared: Leakable::new(shared),
            }),
            ring,
            srq_num,
            max_wr: resp.max_wr,
            max_sge: resp.max_sge,
        })
    }
}

impl Srq {
    pub(crate) fn inner(&self) -> &Arc<SrqInner> {
        &self.inner
    }

    /// The mlx5 ring, which QP creation registers with (`None` on rxe).
    /// The ring, which QPs created on the SRQ are told about.
    pub(crate) fn ring(&self) -> &crate::provider::Srq {
        &self.ring
    }

    /// The kernel's handle for the SRQ (`ibv_srq.handle`).
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The SRQ number (rxe's; what a remote XRC sender would address).
    pub fn srq_num(&self) -> u32 {
        self.srq_num
    }

    /// Depth granted at creation (or set by [`Srq::resize`]).
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// SGEs per work request.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.inner.pd
    }

    /// What async events name this SRQ by.
    pub fn event_id(&self) -> EventId {
        self.inner.event_id
    }

    /// Receives posted and not yet consumed by any QP.
    pub fn outstanding(&self) -> u32 {
        self.ring.outstanding()
    }

    /// Posts a chain of receive work requests to the shared pool. On error
    /// the requests before [`PostFailed::index`] were posted.
    #[inline]
    pub fn post_srq_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        self.ring.post_wrs(wrs)
    }

    /// [`Srq::post_srq_recv`] of one request, with the provider's post
    /// compiled into the caller instead of called: for an adapter's entry
    /// point that does little else (the C ABI's `ibv_post_srq_recv`). The
    /// same checks, entry and errors; prefer [`Srq::post_srq_recv`]
    /// elsewhere.
    #[inline(always)]
    pub fn post_srq_recv_inlined(&mut self, wr: &RecvWr<'_>) -> Result<(), PostFailed> {
        self.ring.post_one_inline(wr)
    }

    /// Arms the limit event: once fewer than `limit` receives remain the
    /// kernel raises [`crate::AsyncEventKind::SrqLimitReached`] once and
    /// disarms. 0 disarms. rxe refuses a limit above the ring's depth
    /// (EINVAL).
    pub fn modify_limit(&self, limit: u32) -> Result<()> {
        // rxe's MODIFY_SRQ carries its driver data, mlx5's none.
        self.ring.set_limit(limit)
    }

    /// Resizes the SRQ to hold at least `max_wr` receives; those already
    /// posted are kept. Refused if fewer than the receives now queued, or
    /// below an armed limit (rxe's rule, reported by the kernel as EINVAL).
    ///
    /// mlx5 SRQs cannot be resized (the kernel driver refuses it): refused
    /// with [`Error::Unsupported`] without asking it.
    pub fn resize(&mut self, max_wr: u32) -> Result<()> {
        self.inner
            .pd
            .context()
            .provider()
            .require(Feature::SrqResize)?;
        let queued = self.outstanding();
        if max_wr == 0 || max_wr < queued {
            return Err(Error::invalid_as(
                InvalidKind::TooLarge,
                format!("cannot resize the SRQ to {max_wr} entries with {queued} receives queued"),
            ));
        }
        self.ring.resize(max_wr)?;
        self.max_wr = max_wr;
        Ok(())
    }

    /// Queries the kernel's view of the SRQ.
    pub fn query(&self) -> Result<SrqAttr> {
        let cmd = QuerySrq {
            response: 0,
            srq_handle: self.inner.handle,
            reserved: 0,
        };
        let r = exec(self.inner.pd.context().fd(), &cmd, &mut [])
            .map_err(Error::kernel("query_srq"))?;
        Ok(SrqAttr {
            max_wr: r.max_wr,
            max_sge: r.max_sge,
            srq_limit: r.srq_limit,
        })
    }
}
