//! The mlx5 user context: GET_CONTEXT with mlx5's driver data, the UAR
//! pages mapped from the command fd (doorbell and BlueFlame registers),
//! the doorbell-record allocator and the QP table CQs resolve CQEs with.
//!
//! SKELETON (issue 5 part 2): signatures are fixed; bodies are filled in.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use uverbs_abi::device::GetContextResp;
use uverbs_abi::Errno;

/// What GET_CONTEXT returned: the core answer (async fd, completion
/// vectors) and the provider's context. On error after the command
/// succeeded, the async fd has been closed.
#[derive(Debug)]
pub struct Opened {
    /// Core response; `async_fd` is the caller's to own.
    pub resp: GetContextResp,
    /// The provider context, shared by every object of this device.
    pub uctx: Arc<Uctx>,
}

/// Issues GET_CONTEXT with `mlx5_ib_alloc_ucontext_req_v2` (static
/// bfregs, CQE version 1, 4K UARs, no dynamic UARs: those need ioctl
/// methods) and maps the static UAR pages.
pub fn open(fd: BorrowedFd<'_>) -> Result<Opened, Errno> {
    let _ = fd;
    Err(Errno::ENOSYS)
}

/// The provider context of an open mlx5 device. `Send + Sync`.
#[derive(Debug)]
pub struct Uctx {
    _private: (),
}

/// The limits GET_CONTEXT reported, which creation checks against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Largest send WQE in bytes.
    pub max_sq_desc_sz: u32,
    /// Largest receive WQE in bytes.
    pub max_rq_desc_sz: u32,
    /// Largest send queue in 64-byte basic blocks.
    pub max_send_wqebb: u32,
    /// Largest receive queue in WQEs.
    pub max_recv_wr: u32,
    /// Largest SRQ in WQEs.
    pub max_srq_recv_wr: u32,
    /// CQE format (0 or 1).
    pub cqe_version: u8,
    /// Bytes per BlueFlame register (0: no BlueFlame).
    pub bf_reg_size: u32,
}

impl Uctx {
    /// The limits the kernel reported.
    pub fn limits(&self) -> Limits {
        Limits::default()
    }
}
