//! mlx5 shared receive queues: the linked WQE list, CREATE_SRQ with mlx5's
//! driver data and posting receives to it.
//!
//! SKELETON (issue 5 part 2): signatures are fixed; bodies are filled in.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use uverbs_abi::srq::{CreateSrq, CreateSrqResp};
use uverbs_abi::wr::RecvWr;
use uverbs_abi::Errno;

use crate::uctx::Uctx;
use crate::PostError;

/// What CREATE_SRQ returned. The caller must destroy `resp.srq_handle` if
/// it cannot use the SRQ.
#[derive(Debug)]
pub struct Created {
    /// Core response, `max_wr`/`max_sge` rewritten to what the SRQ holds.
    pub resp: CreateSrqResp,
    /// The SRQ number.
    pub srqn: u32,
    /// The SRQ.
    pub srq: Srq,
}

/// Builds the SRQ's WQE list and doorbell record and issues CREATE_SRQ.
pub fn create(fd: BorrowedFd<'_>, uctx: &Arc<Uctx>, cmd: &CreateSrq) -> Result<Created, Errno> {
    let _ = (fd, uctx, cmd);
    Err(Errno::ENOSYS)
}

/// An mlx5 SRQ.
#[derive(Debug)]
pub struct Srq {
    _private: (),
}

impl Srq {
    /// Posts the chain `wrs`. On error the WRs before the failing index are
    /// posted.
    #[inline]
    pub fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), (usize, PostError)> {
        let _ = wrs;
        Err((0, PostError::InvalidState))
    }

    /// Work requests the SRQ holds.
    pub fn capacity(&self) -> u32 {
        0
    }

    /// Receives posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        0
    }
}
