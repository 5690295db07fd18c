//! [`PostError`]: why a provider refused a work request before it reached
//! the queue, the error of every post path.

use rverbs_abi::Errno;

/// Why a work request was refused before it reached the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostError {
    /// The send queue has no free slot: poll completions and post again. A send
    /// slot is freed only when the device has completed the request; on
    /// mlx5 (as with rdma-core) that is known only from a completion, so
    /// unsignaled sends stay counted until a later *signaled* send
    /// completes: a QP that never signals fills up for good. Signal at
    /// least one send in every `max_send_wr` (see `rverbs::SignalEvery`).
    QueueFull,
    /// The QP's receive queue has no free slot: a receive's slot is freed
    /// when a message arrives in it (its completion); post fewer receives
    /// ahead, or create the QP with a larger `max_recv_wr`.
    RecvQueueFull,
    /// The SRQ has no free slot: its receives are freed as messages
    /// arrive on any of its QPs; post fewer ahead, create it larger, or
    /// resize it (where the provider can).
    SrqFull,
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
    /// BIND_MW, LOCAL_INV or SEND_WITH_INV on a provider without memory
    /// windows (mlx5 here: its windows need UMR work requests, not built
    /// yet). rxe has them.
    InvalidateUnsupported,
    /// An operation the device does not offer (its capability bits, as the
    /// running kernel reports them, lack it) or that this provider does not
    /// build: ATOMIC_WRITE and FLUSH need Linux 6.2 or later on rxe and are
    /// not built by the mlx5 provider yet. The library maps it to
    /// `EOPNOTSUPP`.
    OpcodeUnsupported(crate::wr::WrOpcode),
    /// A receive posted to a QP that takes its receives from a shared
    /// receive queue: post them to the SRQ.
    UsesSrq,
    /// The kernel refused the doorbell.
    Doorbell(Errno),
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PostError::QueueFull => write!(
                f,
                "send queue full: poll completions and post again (send slots are freed \
                 by completions; on mlx5 unsignaled sends are freed only when a later \
                 signaled send completes, so signal at least one in every max_send_wr)"
            ),
            PostError::RecvQueueFull => write!(
                f,
                "receive queue full: every slot holds a receive no message has arrived \
                 in yet (post fewer ahead, or create the QP with a larger max_recv_wr)"
            ),
            PostError::SrqFull => write!(
                f,
                "SRQ full: every slot holds a receive no message has arrived in yet \
                 (post fewer ahead, or create the SRQ with a larger max_wr)"
            ),
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
                "memory windows (BIND_MW, LOCAL_INV, SEND_WITH_INV) are not supported by \
                 this provider"
            ),
            PostError::OpcodeUnsupported(op) => write!(
                f,
                "{op:?} is not offered on this QP: the device's capabilities (as the running \
                 kernel reports them) or the provider lack it"
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
