//! Protection domains. Every MR, QP and AH holds its PD, so a PD is freed in
//! the kernel only after the last of them: deallocating a PD that is still in
//! use cannot be expressed.
//!
//! A PD may carry a [`QueueAllocator`](crate::QueueAllocator) ([`Pd::with_allocator`]): the
//! counterpart of a parent domain's custom allocators
//! (`ibv_alloc_parent_domain(3)`), from which the provider takes the queue
//! buffers of the QPs, SRQs and CQs ([`Pd::create_cq_ex`]) made through
//! it. A parent domain's thread domain needs no counterpart: a Rust QP or
//! CQ is posted and polled through `&mut`, so it takes no lock already.

use std::fmt;
use std::sync::Arc;

use rverbs_abi::cmd::exec;
use rverbs_abi::pd::DeallocPd;
use rverbs_provider::SharedAllocator;

use crate::context::Context;
use crate::cq::{Cq, CqInitAttr};
use crate::error::Result;

pub(crate) struct PdInner {
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let cmd = DeallocPd {
            pd_handle: self.handle,
        };
        // Nothing can use the PD any more (all holders are gone); a failure
        // here (device removed) leaves the kernel to free it with the context.
        let _ = exec(self.ctx.fd(), &cmd, &mut []);
    }
}

/// A protection domain. Cheap to clone.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
    /// Where the queues made through this handle get their buffers.
    alloc: Option<SharedAllocator>,
}

impl fmt::Debug for Pd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pd")
            .field("handle", &self.inner.handle)
            .field("allocator", &self.alloc)
            .finish()
    }
}

impl Context {
    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        let handle = self.provider().alloc_pd()?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: self.clone(),
                handle,
            }),
            alloc: None,
        })
    }
}

impl Pd {
    /// The context the PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Whether `self` and `other` are handles of the same protection
    /// domain (a clone, or one with another allocator,
    /// [`Pd::with_allocator`], is the same PD).
    pub fn same(&self, other: &Pd) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The kernel's handle for the PD.
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// The same kernel PD, whose QPs and SRQs (and CQs made with
    /// [`Pd::create_cq_ex`]) take their queue buffers and doorbell records
    /// from `alloc`, and give them back to it when destroyed (the role of a
    /// parent domain's allocators). Called only while a queue is created or
    /// destroyed, never while posting or polling. Where it answers
    /// [`Allocation::UseDefault`](crate::Allocation::UseDefault) the
    /// provider uses its own memory; [`Allocation::Failed`](crate::Allocation::Failed)
    /// fails the creation with `ENOMEM`.
    ///
    /// mlx5 asks it for each QP's, SRQ's and CQ's buffer (whole pages,
    /// page-aligned) and doorbell record (8 bytes), with the
    /// [`BufferKind`](crate::BufferKind)s libmlx5 names (a resized CQ's new
    /// ring is the provider's own). rxe never calls it: its rings are the
    /// kernel's memory.
    #[must_use]
    pub fn with_allocator(&self, alloc: SharedAllocator) -> Pd {
        Pd {
            inner: Arc::clone(&self.inner),
            alloc: Some(alloc),
        }
    }

    /// The allocator [`Pd::with_allocator`] gave this handle, if any.
    pub fn allocator(&self) -> Option<&SharedAllocator> {
        self.alloc.as_ref()
    }

    /// [`Context::create_cq_ex`], the CQ's ring and doorbell record from
    /// this PD's allocator ([`Pd::with_allocator`]; without one, the same
    /// CQ as [`Context::create_cq_ex`]'s). The CQ does not hold the PD: in
    /// the kernel a CQ belongs to no PD (`ibv_create_cq_ex` with
    /// `IBV_CQ_INIT_ATTR_MASK_PD` names a parent domain for its
    /// allocators alone).
    pub fn create_cq_ex(&self, attr: &CqInitAttr<'_>) -> Result<Cq> {
        self.context().create_cq_ex_in(attr, self.alloc.as_ref())
    }
}
