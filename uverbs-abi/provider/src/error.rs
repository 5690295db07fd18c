//! [`PostError`]: why a provider refused a work request before it reached
//! the queue; [`PostFailed`]: that and where in the chain, the error of
//! every post path, two registers wide.

use std::num::NonZeroU64;

use rverbs_abi::Errno;

use crate::wr::WrOpcode;

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
    /// An unsignaled send on a device that completes every send (EFA):
    /// post it signaled, or create the QP with `sq_sig_all`.
    Unsignaled,
    /// An RDMA READ or WRITE longer than the device's `max_rdma_size`.
    RdmaTooLong {
        /// Bytes of the request.
        len: u32,
        /// The device's maximum.
        max: u32,
    },
    /// A UD destination whose QP number or address handle does not fit
    /// the device's fields (EFA's are 16 bits).
    DestOutOfRange,
    /// Send flags (`IB_SEND_*` bits) the device does not take (EFA takes
    /// SIGNALED and INLINE only).
    FlagsUnsupported(u32),
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
            PostError::Unsignaled => write!(
                f,
                "this device completes every send: post it signaled (or create the QP \
                 with sq_sig_all)"
            ),
            PostError::RdmaTooLong { len, max } => write!(
                f,
                "{len}-byte RDMA request exceeds the device's max_rdma_size of {max} bytes"
            ),
            PostError::DestOutOfRange => write!(
                f,
                "the destination's QP number or address handle does not fit the device's \
                 16-bit fields"
            ),
            PostError::FlagsUnsupported(bits) => {
                write!(f, "send flags {bits:#x} are not taken by this device")
            }
        }
    }
}

impl std::error::Error for PostError {}

/// A post that stopped: the [`PostError`] of the first refused request and
/// its index in what was posted (the requests before it were posted).
///
/// The error of every post path, sized to come back in two registers
/// (instead of through memory, as a larger error would): a post that
/// returns it can end by jumping to the provider's post, and the
/// provider's post can be compiled into its caller without making the
/// caller save registers for it. [`PostFailed::index`] and
/// [`PostFailed::error`] give what it holds.
///
/// Two limits of the packing, neither reachable by a real queue: an index
/// above `u32::MAX` reads as `u32::MAX` (no queue holds more requests
/// than that), and a queue limit carried by the error (`max` of
/// [`PostError::TooManySge`] and [`PostError::InlineTooLarge`], `mtu` of
/// [`PostError::UdTooLong`]) above [`PostFailed::LIMIT_MAX`] reads as
/// that (SGE counts, inline sizes and MTUs are all far below it). Counts
/// and lengths of the request itself are kept whole.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PostFailed {
    /// Bits 0..8: which [`PostError`] (never 0); bits 8..32: its queue
    /// limit, if it has one; bits 32..64: the index.
    head: NonZeroU64,
    /// The error's count, length, opcode or errno, if it has one.
    arg: u64,
}

impl PostFailed {
    /// The largest queue limit a [`PostFailed`] keeps whole (2^24 - 1).
    pub const LIMIT_MAX: u32 = (1 << 24) - 1;

    /// `error` at `index`. In line: an error known where it is built
    /// packs to constants (a `?` on an error not known there goes through
    /// the cold `From<PostError>` instead).
    #[inline]
    pub fn new(index: usize, error: PostError) -> PostFailed {
        let (tag, limit, arg): (u8, u32, u64) = match error {
            PostError::QueueFull => (1, 0, 0),
            PostError::RecvQueueFull => (2, 0, 0),
            PostError::SrqFull => (3, 0, 0),
            PostError::TooManySge { given, max } => (4, max, given as u64),
            PostError::InlineTooLarge { len, max } => (5, max, len as u64),
            PostError::MessageTooLong => (6, 0, 0),
            PostError::InvalidOpcode => (7, 0, 0),
            PostError::BadAtomic => (8, 0, 0),
            PostError::InvalidState => (9, 0, 0),
            PostError::MissingAddress => (10, 0, 0),
            PostError::UnexpectedAddress => (11, 0, 0),
            PostError::UdTooLong { len, mtu } => (12, mtu, len),
            PostError::InvalidateUnsupported => (13, 0, 0),
            PostError::OpcodeUnsupported(op) => (14, 0, u64::from(op as u32)),
            PostError::UsesSrq => (15, 0, 0),
            PostError::Doorbell(e) => (16, 0, u64::from(e.raw() as u32)),
            PostError::Unsignaled => (17, 0, 0),
            // Both may exceed LIMIT_MAX: both go in `arg`.
            PostError::RdmaTooLong { len, max } => (18, 0, u64::from(len) | u64::from(max) << 32),
            PostError::DestOutOfRange => (19, 0, 0),
            PostError::FlagsUnsupported(bits) => (20, 0, u64::from(bits)),
        };
        let index = u32::try_from(index).unwrap_or(u32::MAX);
        let head = u64::from(index) << 32 | u64::from(limit.min(Self::LIMIT_MAX)) << 8;
        PostFailed {
            // Every tag above is at least 1.
            head: NonZeroU64::new(head | u64::from(tag)).unwrap_or(NonZeroU64::MIN),
            arg,
        }
    }

    /// `error` at index 0: the first request, nothing posted.
    #[inline]
    pub fn first(error: PostError) -> PostFailed {
        PostFailed::new(0, error)
    }

    /// The index of the first refused request: the requests before it
    /// were posted.
    #[inline]
    pub fn index(&self) -> usize {
        (self.head.get() >> 32) as usize
    }

    /// Why it was refused.
    pub fn error(&self) -> PostError {
        let limit = (self.head.get() >> 8) as u32 & Self::LIMIT_MAX;
        let arg = self.arg;
        match self.head.get() as u8 {
            1 => PostError::QueueFull,
            2 => PostError::RecvQueueFull,
            3 => PostError::SrqFull,
            4 => PostError::TooManySge {
                given: arg as usize,
                max: limit,
            },
            5 => PostError::InlineTooLarge {
                len: arg as usize,
                max: limit,
            },
            6 => PostError::MessageTooLong,
            7 => PostError::InvalidOpcode,
            8 => PostError::BadAtomic,
            9 => PostError::InvalidState,
            10 => PostError::MissingAddress,
            11 => PostError::UnexpectedAddress,
            12 => PostError::UdTooLong {
                len: arg,
                mtu: limit,
            },
            13 => PostError::InvalidateUnsupported,
            14 => match WrOpcode::from_raw(arg as u32) {
                Some(op) => PostError::OpcodeUnsupported(op),
                // `new` stores only a WrOpcode's value here.
                None => PostError::InvalidOpcode,
            },
            15 => PostError::UsesSrq,
            17 => PostError::Unsignaled,
            18 => PostError::RdmaTooLong {
                len: arg as u32,
                max: (arg >> 32) as u32,
            },
            19 => PostError::DestOutOfRange,
            20 => PostError::FlagsUnsupported(arg as u32),
            // 16: `new` stores no other tag.
            _ => PostError::Doorbell(Errno::from_raw(arg as u32 as i32)),
        }
    }
}

impl From<PostError> for PostFailed {
    /// The error at index 0. Out of line and cold: what `?` calls on a
    /// refused request, whose packing would otherwise be compiled into
    /// every posting function.
    #[cold]
    #[inline(never)]
    fn from(error: PostError) -> PostFailed {
        PostFailed::first(error)
    }
}

impl From<(usize, PostError)> for PostFailed {
    /// The error at the index.
    #[inline]
    fn from((index, error): (usize, PostError)) -> PostFailed {
        PostFailed::new(index, error)
    }
}

impl std::fmt::Debug for PostFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostFailed")
            .field("index", &self.index())
            .field("error", &self.error())
            .finish()
    }
}

impl std::fmt::Display for PostFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "work request {} refused: {}", self.index(), self.error())
    }
}

impl std::error::Error for PostFailed {}

#[cfg(test)]
mod tests {
    use super::*;

    fn every_error() -> Vec<PostError> {
        vec![
            PostError::QueueFull,
            PostError::RecvQueueFull,
            PostError::SrqFull,
            PostError::TooManySge {
                given: usize::MAX,
                max: 30,
            },
            PostError::InlineTooLarge {
                len: 1 << 40,
                max: PostFailed::LIMIT_MAX,
            },
            PostError::MessageTooLong,
            PostError::InvalidOpcode,
            PostError::BadAtomic,
            PostError::InvalidState,
            PostError::MissingAddress,
            PostError::UnexpectedAddress,
            PostError::UdTooLong {
                len: u64::MAX,
                mtu: 4096,
            },
            PostError::InvalidateUnsupported,
            PostError::OpcodeUnsupported(WrOpcode::AtomicWrite),
            PostError::OpcodeUnsupported(WrOpcode::RdmaWrite),
            PostError::UsesSrq,
            PostError::Doorbell(Errno::EINVAL),
            PostError::Doorbell(Errno::from_raw(-7)),
            PostError::Unsignaled,
            PostError::RdmaTooLong {
                len: u32::MAX,
                max: 1 << 30,
            },
            PostError::DestOutOfRange,
            PostError::FlagsUnsupported(u32::MAX),
        ]
    }

    #[test]
    fn post_failed_keeps_every_error_and_index() {
        for e in every_error() {
            for index in [0, 1, 31, u32::MAX as usize] {
                let f = PostFailed::new(index, e);
                assert_eq!((f.index(), f.error()), (index, e), "{f:?}");
                assert!(f.to_string().contains(&e.to_string()));
            }
        }
        for op in WrOpcode::ALL {
            let f = PostFailed::first(PostError::OpcodeUnsupported(op));
            assert_eq!(f.error(), PostError::OpcodeUnsupported(op));
        }
    }

    #[test]
    fn post_failed_saturates_what_no_queue_reaches() {
        let f = PostFailed::new(
            usize::MAX,
            PostError::TooManySge {
                given: 3,
                max: u32::MAX,
            },
        );
        assert_eq!(f.index(), u32::MAX as usize);
        assert_eq!(
            f.error(),
            PostError::TooManySge {
                given: 3,
                max: PostFailed::LIMIT_MAX
            }
        );
    }

    #[test]
    fn post_result_fits_two_registers() {
        assert_eq!(std::mem::size_of::<Result<(), PostFailed>>(), 16);
    }
}
