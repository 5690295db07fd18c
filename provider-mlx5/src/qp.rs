//! mlx5 queue pairs: queue geometry, CREATE_QP with mlx5's driver data,
//! send WQE building and doorbells (BlueFlame for small single WQEs), and
//! receive WQEs.
//!
//! SKELETON (issue 5 part 2): signatures are fixed; bodies are filled in.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use uverbs_abi::qp::{CreateQp, CreateQpResp};
use uverbs_abi::wr::{RecvWr, SendWr};
use uverbs_abi::Errno;

use crate::cq::Cq;
use crate::srq::Srq;
use crate::uctx::Uctx;
use crate::PostError;

/// What CREATE_QP returned and the queues built for it. The caller must
/// destroy `resp.qp_handle` if it cannot use them.
#[derive(Debug)]
pub struct Created {
    /// Core response, with the capacities rewritten to what the queues
    /// really hold (as libmlx5 reports them): `max_send_wr`,
    /// `max_inline_data`, `max_recv_wr`, `max_recv_sge`.
    pub resp: CreateQpResp,
    /// The send queue.
    pub sq: SendQueue,
    /// The receive queue; `None` with an SRQ or `max_recv_wr == 0`.
    pub rq: Option<RecvQueue>,
}

/// Computes the queue geometry for `cmd` (rewriting its capacities the
/// way the device needs them), allocates the buffer and doorbell record,
/// issues CREATE_QP with the driver data and registers the QP with the
/// context's table so `send_cq` and `recv_cq` can resolve its CQEs.
pub fn create(
    fd: BorrowedFd<'_>,
    uctx: &Arc<Uctx>,
    cmd: &CreateQp,
    send_cq: &Cq,
    recv_cq: &Cq,
    srq: Option<&Srq>,
) -> Result<Created, Errno> {
    let _ = (fd, uctx, cmd, send_cq, recv_cq, srq);
    Err(Errno::ENOSYS)
}

/// A QP's send queue.
#[derive(Debug)]
pub struct SendQueue {
    _private: (),
}

/// The QP states the queues care about (the caller tells them after each
/// successful MODIFY_QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// RESET: nothing may be posted; counters start over.
    Reset,
    /// INIT or RTR: receives may be posted.
    Init,
    /// RTS, SQD, SQE or ERR: sends may be posted too (in ERR they flush).
    Rts,
}

impl SendQueue {
    /// Posts the chain `wrs`: WQEs built in the ring, one doorbell for the
    /// chain. On error the WRs before the failing index are posted.
    #[inline]
    pub fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, PostError)> {
        let _ = wrs;
        Err((0, PostError::InvalidState))
    }

    /// Follows the QP's state (after MODIFY_QP succeeded).
    pub fn set_state(&mut self, state: State) {
        let _ = state;
    }

    /// Sets the largest UD message (the port's active MTU).
    pub fn set_ud_mtu(&mut self, mtu: u32) {
        let _ = mtu;
    }

    /// Work requests the queue holds.
    pub fn capacity(&self) -> u32 {
        0
    }

    /// Work requests posted and not yet retired by a polled completion.
    pub fn outstanding(&self) -> u32 {
        0
    }
}

/// A QP's receive queue.
#[derive(Debug)]
pub struct RecvQueue {
    _private: (),
}

impl RecvQueue {
    /// Posts the chain `wrs` (WQEs, then the doorbell record; no UAR
    /// write). On error the WRs before the failing index are posted.
    #[inline]
    pub fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), (usize, PostError)> {
        let _ = wrs;
        Err((0, PostError::InvalidState))
    }

    /// Follows the QP's state (after MODIFY_QP succeeded).
    pub fn set_state(&mut self, state: State) {
        let _ = state;
    }

    /// Work requests the queue holds.
    pub fn capacity(&self) -> u32 {
        0
    }

    /// Receives posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        0
    }
}
