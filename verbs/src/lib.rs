//! Safe RDMA verbs in pure Rust.
//!
//! This crate talks to `/dev/infiniband/uverbsN` through the kernel's uverbs
//! ABI itself; it never links or loads libibverbs. The flow is the classic
//! one:
//!
//! ```no_run
//! use rverbs::{AccessFlags, ConnectOpts, QpCap, QpInitAttr, QpType, RecvWr, SendWr};
//! # fn main() -> rverbs::Result<()> {
//! let ctx = rverbs::devices()?.first().expect("no RDMA device").open()?;
//! let pd = ctx.alloc_pd()?;
//! let mut cq = ctx.create_cq(16)?;
//! let mut mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let mut qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap::default()))?;
//! let opts = ConnectOpts { sgid_index: 1, ..Default::default() };
//! let me = qp.endpoint(&opts)?;          // send this to the peer...
//! let peer = me;                         // ...and receive theirs
//! qp.connect(&peer, AccessFlags::REMOTE_WRITE, &opts)?;
//! mr.write_at(0, b"hello")?;
//! let sge = [mr.sge(0..5)?];
//! qp.post_send(&[SendWr::send(1, &sge).signaled()])?;
//! let mut wc = [rverbs::Wc::default(); 4];
//! let n = cq.poll(&mut wc)?;
//! # let _ = (n, RecvWr::new(0, &sge)); Ok(()) }
//! ```
//!
//! Objects hold their parents ([`Qp`] holds its [`Pd`] and CQs, [`Pd`] its
//! [`Context`]), so teardown order is right by construction. The data path
//! (`post_send`, `post_recv`, `poll`) takes `&mut`, allocates nothing, and
//! dispatches on the provider with one `match`; it takes no lock (see
//! [Threading](#threading)).
//!
//! # Threading
//!
//! Every object is `Send` and `Sync`: [`Context`], [`Device`], [`Pd`],
//! [`Cq`], [`CompChannel`], [`Qp`], [`Srq`], [`Ah`], [`Mw`], [`RemoteMr`],
//! [`SendBatch`], `rverbs-cm`'s ids and channels, and [`Mr<B>`](Mr) when its
//! buffer `B` is (`Send` for `Send`, `Sync` for `Send + Sync`). Move them
//! to other threads, or share them by reference or in an `Arc`.
//!
//! What changes a queue takes `&mut`, so one thread at a time does it and
//! the borrow checker, not a lock, says so: posting ([`Qp::post_send`] and
//! its variants, [`Qp::post_recv`], [`Srq::post_srq_recv`]), polling
//! ([`Cq::poll`] and its variants), and [`Qp::modify`], [`Cq::resize`],
//! [`Srq::resize`]. To post to one QP from several threads, put it behind
//! a lock of your choice (or give each thread its own QP): you pay for
//! sharing only where you share. A QP and the CQs it completes on are
//! separate objects: one thread may post to the QP while another polls
//! its CQ. What takes `&self` may run on any number of threads at once:
//! creating objects from a [`Context`] or [`Pd`], registering memory,
//! queries, [`Cq::req_notify`], [`Srq::modify_limit`].
//!
//! Below `&mut`, one exclusion remains, on mlx5 only: a CQ's ring is
//! also written by its QPs (destroying or resetting a QP removes that QP's
//! unpolled completions from the ring, as libmlx5 does), which another
//! thread may do while the CQ is polled. The two are kept apart by a
//! handshake whose cost falls on the rare side: the poll stores a flag and
//! reads another (no atomic read-modify-write, no fence instruction); the
//! QP cleaning the ring issues `membarrier(2)`, which makes every thread of
//! the process execute a full barrier. On a kernel without
//! `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (before 4.14) both sides use a full
//! fence instead. (mlx5's poll makes atomic read-modify-writes only to hand
//! a completed receive back to an SRQ, which another thread may be posting
//! to.) rxe's poll needs none of it (only the kernel writes its
//! CQ's ring, and the poll alone consumes it). The C library
//! (`rverbs-ibverbs`) adds a spin lock per QP,
//! SRQ and CQ, because libibverbs promises C programs that several
//! threads may post to one QP and poll one CQ.
//!
//! Waiting without spinning: [`Cq::poll_blocking`] on a CQ with a
//! completion channel; on tokio (feature `tokio`), `rverbs::tokio::AsyncCq`
//! and `rverbs::tokio::AsyncEvents`.
//!
//! Providers: soft-RoCE (`rxe`, `provider-rxe`) and NVIDIA ConnectX-4 and
//! later (`mlx5`, `provider-mlx5`), both behind one contract
//! (`rverbs-provider`'s `Provider` and queue traits). Devices of other
//! drivers are listed by [`devices`] and refused by [`Device::open`] with a
//! clear error; what a provider does not implement is refused with
//! [`Error::Unsupported`] before any command is sent.

#![deny(missing_docs)]
// Clean, so denied (issue 44): nothing `pub` that no one outside can
// name, and one unsafe operation per block, each with its own SAFETY line.
#![deny(unreachable_pub)]
#![deny(clippy::multiple_unsafe_ops_per_block)]
// docs.rs (`--cfg docsrs`, see Cargo.toml) marks feature-gated items.
#![cfg_attr(docsrs, feature(doc_cfg))]
// `unsafe` lives in one module, `sys`, which alone may use it; elsewhere
// only the public API's own unsafe items (`Pd::register_raw`,
// `Mr::as_slice`, `Mr::as_mut_slice`, `MrBuf` and its implementations,
// `Mr`'s `Send`/`Sync`) are allowed, one by one, where they stand.
#![deny(unsafe_code)]

pub mod ah;
pub mod context;
pub mod cq;
pub mod device;
pub mod dmabuf;
pub mod error;
pub mod event;
pub mod fork;
pub mod gid;
pub mod mr;
pub mod mw;
pub mod pd;
mod provider;
pub mod qp;
pub mod srq;
#[allow(unsafe_code)]
mod sys;
#[cfg(test)]
mod test_util;

/// The README and the book (`docs/book/src`), compiled as doc tests so
/// their Rust code keeps building: `cargo test --doc -p rverbs`, the tokio
/// chapter with `--features tokio`. Every chapter is listed, so an
/// untagged code block fails as Rust; `cargo xtask book` checks the list.
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../../README.md")]
    struct Readme;
    #[doc = include_str!("../../docs/book/src/introduction.md")]
    struct Introduction;
    #[doc = include_str!("../../docs/book/src/getting-started.md")]
    struct GettingStarted;
    #[doc = include_str!("../../docs/book/src/api/index.md")]
    struct ApiTour;
    #[doc = include_str!("../../docs/book/src/api/devices.md")]
    struct ApiDevices;
    #[doc = include_str!("../../docs/book/src/api/pd-mr.md")]
    struct ApiPdMr;
    #[doc = include_str!("../../docs/book/src/api/cq.md")]
    struct ApiCq;
    #[doc = include_str!("../../docs/book/src/api/qp.md")]
    struct ApiQp;
    #[doc = include_str!("../../docs/book/src/api/post-poll.md")]
    struct ApiPostPoll;
    #[doc = include_str!("../../docs/book/src/api/batches.md")]
    struct ApiBatches;
    #[doc = include_str!("../../docs/book/src/safety.md")]
    struct Safety;
    #[doc = include_str!("../../docs/book/src/c-library.md")]
    struct CLibrary;
    #[doc = include_str!("../../docs/book/src/tools.md")]
    struct Tools;
    #[doc = include_str!("../../docs/book/src/testbed.md")]
    struct Testbed;
    #[doc = include_str!("../../docs/book/src/mlx5-emulator.md")]
    struct Mlx5Emulator;
    #[doc = include_str!("../../docs/book/src/efa-emulator.md")]
    struct EfaEmulator;
    #[doc = include_str!("../../docs/book/src/conform.md")]
    struct Conform;
    #[doc = include_str!("../../docs/book/src/workspace.md")]
    struct Workspace;
    #[doc = include_str!("../../docs/book/src/adding-a-provider.md")]
    struct AddingAProvider;
    #[doc = include_str!("../../docs/book/src/benchmarks.md")]
    struct Benchmarks;
    #[doc = include_str!("../../docs/book/src/rxe.md")]
    struct Rxe;
    #[doc = include_str!("../../docs/book/src/not-there-yet.md")]
    struct NotThereYet;
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio;

/// The kernel's structures behind the attribute and completion types:
/// [`DeviceAttr`] and [`PortAttr`] dereference to these, and [`Wc`] wraps
/// the raw completion.
pub mod abi {
    #[doc(inline)]
    pub use rverbs_abi::device::{ExQueryDeviceResp, QueryDeviceResp, QueryPortResp};
    #[doc(inline)]
    pub use rverbs_abi::wr::Wc as RawWc;
}

pub use ah::{Ah, Grh, NetworkHeader, UdSendWr};
pub use context::{Context, DeviceAttr, LinkLayer, PortAttr, PortState};
pub use cq::{CompChannel, Cq, CqFlags, CqInitAttr, Wc, WcOpcode, WcStatus};
pub use device::{device, device_by_guid, devices, Device, Driver, Guid};
pub use dmabuf::{DmabufMr, DMABUF_ACCESS};
pub use error::{
    CmError, CmEventKind, Errno, Error, Feature, Invalid, InvalidKind, PostError, PostFailed,
    Result,
};
pub use event::{AsyncEvent, AsyncEventKind, EventElement, EventId, ObjectKind};
pub use fork::{fork_safety, ForkSafety};
pub use gid::{Gid, GidEntry, GidType};
/// The `memmap2` whose `MmapMut` implements [`MrBuf`]: register a mapping
/// made with this re-export, or with `memmap2` 0.9 in your own
/// `Cargo.toml` (another major version is another type, which does not
/// implement `MrBuf`).
pub use memmap2;
pub use mr::{
    AccessFlags, DeregisterError, Mr, MrBuf, OdpAdvice, PageBuf, Raw, RegisterError, RemoteMr,
    Scoped,
};
pub use mw::{Mw, MwBind, MwType};
pub use pd::Pd;
pub use qp::{
    AhAttr, ConnectOpts, DestroyQpError, Endpoint, GlobalRoute, Mtu, Qp, QpAttr, QpCap,
    QpCreateFlags, QpInitAttr, QpState, QpType, SignalEvery,
};
pub use rverbs_abi::wr::Sge;
/// EFA's device attributes ([`Context::efa_attr`]).
pub use rverbs_efa::DeviceAttr as EfaAttr;
pub use rverbs_provider::batch::{BatchOp, BatchSignal, BatchWr, SendBatch};
pub use rverbs_provider::wr::{
    opcode, FlushLevel, FlushType, FlushWr, MwBindWr, Payload, RecvWr, SendFlags, SendRequest,
    SendWr, UdDest, WrOpcode,
};
pub use rverbs_provider::{Allocation, BufferKind, QueueAllocator, SharedAllocator};
pub use rverbs_provider::{Ece, RingLost};
pub use srq::{Srq, SrqAttr, SrqInitAttr};

/// The threading model the crate docs state ([Threading](crate#threading)),
/// checked at compile time.
#[cfg(test)]
mod threading {
    fn send_sync<T: Send + Sync + ?Sized>() {}

    #[test]
    fn every_object_is_send_and_sync() {
        send_sync::<crate::Context>();
        send_sync::<crate::Device>();
        send_sync::<crate::Pd>();
        send_sync::<crate::Cq>();
        send_sync::<crate::CompChannel>();
        send_sync::<crate::Qp>();
        send_sync::<crate::Srq>();
        send_sync::<crate::Ah>();
        send_sync::<crate::Mw>();
        send_sync::<crate::RemoteMr>();
        send_sync::<crate::SendBatch>();
        send_sync::<crate::Mr<crate::PageBuf>>();
        send_sync::<crate::Mr<Vec<u8>>>();
    }
}
