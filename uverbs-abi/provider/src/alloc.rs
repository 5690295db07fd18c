//! Queue buffers from the program's allocator: [`QueueAllocator`], what a
//! parent domain's `alloc` and `free` become (`ibv_alloc_parent_domain(3)`),
//! passed to a provider's queue creation ([`crate::Provider::create_cq`],
//! [`crate::Provider::create_qp`], [`crate::Provider::create_srq`]) and
//! called only there and when the queue is destroyed: never on the data
//! path. A provider whose rings are the kernel's memory (rxe) never calls
//! it.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

/// What a buffer asked of a [`QueueAllocator`] is for: libmlx5's resource
/// types (`MLX5DV_RES_TYPE_*` of `mlx5dv.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BufferKind {
    /// A QP's work queues (`MLX5DV_RES_TYPE_QP`).
    Qp,
    /// A receive work queue's (`MLX5DV_RES_TYPE_RWQ`).
    Rwq,
    /// A doorbell record (`MLX5DV_RES_TYPE_DBR`).
    DoorbellRecord,
    /// An SRQ's WQE list (`MLX5DV_RES_TYPE_SRQ`).
    Srq,
    /// A CQ's CQE ring (`MLX5DV_RES_TYPE_CQ`).
    Cq,
}

impl BufferKind {
    /// Its `MLX5DV_RES_TYPE_*` value: the mlx5 driver's id
    /// (`RDMA_DRIVER_MLX5`, 1) in the upper 32 bits, the resource code in
    /// the lower.
    pub fn mlx5dv_res_type(self) -> u64 {
        let code = match self {
            BufferKind::Qp => 1,
            BufferKind::Rwq => 2,
            BufferKind::DoorbellRecord => 3,
            BufferKind::Srq => 4,
            BufferKind::Cq => 5,
        };
        (1 << 32) | code
    }
}

/// What [`QueueAllocator::alloc`] answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocation {
    /// The buffer: `size` bytes aligned to `align`.
    Memory(NonNull<u8>),
    /// Use the provider's own memory (`IBV_ALLOCATOR_USE_DEFAULT`).
    UseDefault,
    /// No memory: the creation fails with `ENOMEM`.
    Failed,
}

/// An allocator of queue buffers (a parent domain's custom allocator).
///
/// # Safety
/// An implementation promises that [`Allocation::Memory`] is `size`
/// readable and writable bytes aligned to `align`, which nothing else
/// uses until they are passed to [`QueueAllocator::free`] (the device
/// reads and writes them meanwhile), and which a `fork()`ed child does not
/// share copy-on-write (`MADV_DONTFORK` or shared memory: what
/// `ibv_alloc_parent_domain(3)` makes the allocator's duty). The provider
/// zeroes the bytes itself.
pub unsafe trait QueueAllocator: Send + Sync + fmt::Debug {
    /// A buffer of `size` bytes aligned to `align` (a power of two) for
    /// `kind`.
    fn alloc(&self, size: usize, align: usize, kind: BufferKind) -> Allocation;
    /// Frees `ptr`, of `size` bytes, which [`QueueAllocator::alloc`]
    /// returned for `kind`.
    ///
    /// # Safety
    /// `ptr` came from this allocator's `alloc` with `size` and `kind`, is
    /// freed once, and nothing uses it after.
    unsafe fn free(&self, ptr: NonNull<u8>, size: usize, kind: BufferKind);
}

/// A [`QueueAllocator`] as queue creation is given it.
pub type SharedAllocator = Arc<dyn QueueAllocator>;
