//! What every provider shares, below the providers and above the kernel ABI
//! (`rverbs-abi`, which holds only the C mirrors and the command framing):
//!
//! * [`wr`]: the typed work requests the post paths take, built by the
//!   per-opcode builders of [`wr::opcode`];
//! * [`batch`]: batch posting, many requests of one operation described
//!   once ([`batch::SendBatch`]) with plain entries ([`batch::BatchWr`]);
//! * [`check`]: the checks each provider runs on a request before a byte of
//!   it reaches its ring (one copy, not one per provider);
//! * [`PostError`]: why a request was refused, and [`PostFailed`]: that
//!   and where, the error of every post;
//! * [`contract`]: the operations every provider implements and the library
//!   calls ([`Provider`] and its queue traits);
//! * [`alloc`]: queue buffers from the program's allocator
//!   ([`QueueAllocator`], a parent domain's);
//! * [`map`]: rings and doorbells the kernel hands out through the command
//!   fd ([`map::DeviceMapping`]), the one place their bytes are touched;
//! * [`table`]: the QP table a CQ finds the queue of a completion in.

#![deny(missing_docs)]
// Clean, so denied (issue 44): nothing `pub` that no one outside can
// name, and one unsafe operation per block, each with its own SAFETY line.
#![deny(unreachable_pub)]
#![deny(clippy::multiple_unsafe_ops_per_block)]

pub mod alloc;
pub mod batch;
pub mod check;
pub mod contract;
mod error;
pub mod map;
pub mod table;
pub mod wr;

pub use alloc::{Allocation, BufferKind, QueueAllocator, SharedAllocator};
pub use contract::{
    AhCreated, AhNetwork, CmdError, CompletionQueue, ContextOpened, CqCreated, Ece, Feature,
    OpenError, Provider, QpCreated, QpState, RecvQueue, RingLost, SendQueue, SharedCq,
    SharedRecvQueue, SrqCreated, Unshared,
};
pub use error::{PostError, PostFailed};
pub use rverbs_abi::Errno;
