//! The soft-RoCE (rxe) userspace provider.
//!
//! rxe keeps its work and completion queues in kernel memory that user space
//! maps from the uverbs command fd (the private `queue` module). Posting a send writes a
//! [`rverbs_abi::rxe::SendWqe`] into the send ring and rings the doorbell with
//! an empty POST_SEND command; posting a receive only writes the receive ring;
//! polling reads `ib_uverbs_wc` entries straight from the completion ring.
//! This crate owns those rings (its private `cq`, `qp` and `srq` modules)
//! and the create commands whose responses describe them, and fills in the
//! provider contract with them ([`contract::Rxe`]), its only public face.
//! It knows nothing of the public `verbs` API above it.

#![deny(missing_docs)]
// Clean, so denied (issue 44): nothing `pub` that no one outside can name.
#![deny(unreachable_pub)]
// The rings are kernel memory reached through raw pointers, and the
// commands go through `rverbs_abi`'s unsafe `write_cmd*`: both are fenced
// into one module each, which alone may use `unsafe`, but for `wqe`'s one
// cast of the WQE's union to the arm being built (allowed where it stands).
#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod cmd;
pub mod contract;
mod cq;
mod qp;
#[allow(unsafe_code)]
mod queue;
mod srq;
mod stale;
mod wqe;

/// The driver ABI versions (the per-device sysfs `abi_version`) this
/// provider speaks: 2 is the ring layout of `rdma_user_rxe.h`; 1 differed
/// only on 32-bit hosts.
pub const DRIVER_ABI: std::ops::RangeInclusive<u32> = 1..=2;

pub use contract::Rxe;
pub use rverbs_provider::{PostError, PostFailed};
