//! The kernel's RDMA userspace-verbs ABI (`/usr/include/rdma`) as Rust types.
//!
//! Every `#[repr(C)]` struct here mirrors one C struct of the kernel uapi
//! headers, field for field, under the C name without its `ib_uverbs_`
//! prefix (so `struct ib_uverbs_create_cq` is [`cq::CreateCq`]); the layout
//! tests in `tests/layout.rs` compile a C probe against the installed headers
//! and compare every size and offset. The modules follow the kernel objects:
//! [`device`], [`pd`], [`mr`], [`cq`], [`qp`], [`srq`], [`ah`], the work
//! request encodings in [`wr`], the soft-RoCE queue format in [`rxe`], and
//! the mlx5 driver data and hardware (PRM) layouts in [`mlx5`], the EFA
//! driver data and device descriptors in [`efa`]. [`cmd`] and
//! [`ioctl`] carry commands to the kernel, [`fd`] waits on the file
//! descriptors it hands out. [`ucma`] is the RDMA connection
//! manager's ABI (`/dev/infiniband/rdma_cm`), with its own framing.
//!
//! This crate holds the ABI and nothing else: the logic the providers share
//! (typed work requests, post-time checks, the provider contract) is in
//! `rverbs-provider`, and the RDMA netlink client in `rverbs-netlink`.

#![deny(missing_docs)]
// Clean, so denied (issue 44): nothing `pub` that no one outside can
// name, and one unsafe operation per block, each with its own SAFETY line.
#![deny(unreachable_pub)]
#![deny(clippy::multiple_unsafe_ops_per_block)]

pub mod ah;
pub mod cmd;
pub mod cq;
pub mod device;
pub mod efa;
pub mod fd;
pub mod ioctl;
pub mod mlx5;
pub mod mr;
pub mod mw;
pub mod pd;
pub mod qp;
pub mod rxe;
pub mod srq;
pub mod ucma;
pub mod wr;

mod errno;
pub use errno::Errno;

/// The uverbs ABI version this crate speaks (`IB_USER_VERBS_ABI_VERSION`);
/// a device whose sysfs `abi_version` differs is refused.
pub const IB_USER_VERBS_ABI_VERSION: u32 = 6;
