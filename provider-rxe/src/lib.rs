//! The soft-RoCE (rxe) userspace provider.
//!
//! rxe keeps its work and completion queues in kernel memory that user space
//! maps from the uverbs command fd ([`queue::Queue`]). Posting a send writes a
//! [`uverbs_abi::rxe::SendWqe`] into the send ring and rings the doorbell with
//! an empty POST_SEND command; posting a receive only writes the receive ring;
//! polling reads `ib_uverbs_wc` entries straight from the completion ring.
//! This crate owns those rings ([`cq::Cq`], [`qp::SendQueue`],
//! [`qp::RecvQueue`]) and the create commands whose responses describe them.
//! It knows nothing of the public `verbs` API above it.

#![deny(missing_docs)]

pub mod cq;
pub mod qp;
pub mod queue;
pub mod srq;

use uverbs_abi::Errno;

/// The driver ABI versions (the per-device sysfs `abi_version`) this
/// provider speaks: 2 is the ring layout of `rdma_user_rxe.h`; 1 differed
/// only on 32-bit hosts.
pub const DRIVER_ABI: std::ops::RangeInclusive<u32> = 1..=2;

/// Why a work request was refused before it reached the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The queue has no free slot: wait for completions and post again.
    QueueFull,
    /// More SGEs than the queue was created for.
    TooManySge {
        /// SGEs in the request.
        given: usize,
        /// The queue's maximum.
        max: u32,
    },
    /// Inline payload larger than the QP's `max_inline_data`.
    InlineTooLarge {
        /// Payload bytes.
        len: usize,
        /// The QP's maximum.
        max: u32,
    },
    /// Total length over 2^31 bytes (the largest IB message).
    MessageTooLong,
    /// The opcode does not fit this QP or payload (e.g. inline RDMA READ).
    InvalidOpcode,
    /// An atomic whose remote address is not 8-byte aligned or whose
    /// local buffer is not exactly 8 bytes.
    BadAtomic,
    /// The queue is not accepting work (e.g. receives while in RESET).
    InvalidState,
    /// A send on a UD QP without a destination (address handle, remote QPN
    /// and Q_Key).
    MissingAddress,
    /// A UD destination on a connected (RC/UC) QP, whose peer is fixed at
    /// connection time.
    UnexpectedAddress,
    /// A UD message longer than the port's active MTU (a UD message is one
    /// packet; rxe would drop it without an error).
    UdTooLong {
        /// Message bytes.
        len: u64,
        /// The port's active MTU in bytes.
        mtu: u32,
    },
    /// LOCAL_INV or SEND_WITH_INV: rxe can only invalidate memory windows
    /// and fast-registration MRs, neither of which user space gets from a
    /// plain registration; on a plain MR the kernel fails the request (or,
    /// for SEND_WITH_INV, the receiver) and moves the QP to the error state.
    InvalidateUnsupported,
    /// A receive posted to a QP that takes its receives from a shared
    /// receive queue: post them to the SRQ.
    UsesSrq,
    /// The kernel refused the doorbell.
    Doorbell(Errno),
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PostError::QueueFull => write!(f, "work queue full"),
            PostError::TooManySge { given, max } => {
                write!(f, "{given} SGEs exceed the queue's max_sge {max}")
            }
            PostError::InlineTooLarge { len, max } => {
                write!(f, "{len} inline bytes exceed max_inline_data {max}")
            }
            PostError::MessageTooLong => write!(f, "message longer than 2^31 bytes"),
            PostError::InvalidOpcode => write!(f, "opcode not valid for this QP or payload"),
            PostError::BadAtomic => {
                write!(
                    f,
                    "atomic needs an 8-byte aligned remote address and an 8-byte local buffer"
                )
            }
            PostError::InvalidState => write!(f, "queue does not accept work in its current state"),
            PostError::MissingAddress => write!(
                f,
                "a UD send needs a destination (address handle, remote QPN and Q_Key)"
            ),
            PostError::UnexpectedAddress => write!(
                f,
                "a UD destination was given to a connected QP (RC/UC peers are set at connect time)"
            ),
            PostError::UdTooLong { len, mtu } => write!(
                f,
                "{len}-byte UD message exceeds the port's active MTU of {mtu} bytes"
            ),
            PostError::InvalidateUnsupported => write!(
                f,
                "LOCAL_INV/SEND_WITH_INV are not supported: rxe invalidates only memory windows \
                 and fast-registration MRs, and plain registered MRs are neither"
            ),
            PostError::UsesSrq => write!(
                f,
                "this QP takes its receives from a shared receive queue: post them to the SRQ"
            ),
            PostError::Doorbell(e) => write!(f, "doorbell failed: {e}"),
        }
    }
}

impl std::error::Error for PostError {}
