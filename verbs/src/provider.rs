//! The one place the library names its providers. Everything else talks to
//! the provider contract ([`rverbs_provider::Provider`] and its queue
//! traits) through the enums here, which hold one provider's object each
//! and forward every call with a `match`: static dispatch, no `dyn`, one
//! branch per call on the data path.
//!
//! Adding a provider means adding a variant to each enum below (and to
//! [`Driver`]), nothing elsewhere.

use std::ops::RangeInclusive;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rverbs_abi::ah::CreateAh;
use rverbs_abi::cq::CreateCq;
use rverbs_abi::device::ExQueryDeviceResp;
use rverbs_abi::qp::CreateQp;
use rverbs_abi::srq::CreateSrq;
use rverbs_abi::wr::Wc;
use rverbs_abi::Errno;
use rverbs_efa::Efa;
use rverbs_mlx5::Mlx5;
use rverbs_provider::batch::{BatchWr, SendBatch};
use rverbs_provider::wr::{RecvWr, SendRequest, SendWr, WrOpcode};
use rverbs_provider::SharedAllocator;
use rverbs_provider::{
    AhCreated, AhNetwork, CmdError, CompletionQueue, ContextOpened, Feature, OpenError, PostFailed,
    Provider, QpCreated, QpState, RecvQueue as RecvQueueOps, RingLost, SendQueue as SendQueueOps,
    SharedCq, SharedRecvQueue,
};
use rverbs_rxe::Rxe;

use crate::error::{Error, InvalidKind, Result};

/// Declares an enum holding one provider's associated type `$assoc`.
macro_rules! per_provider {
    ($(#[$m:meta])* $name:ident => $assoc:ident) => {
        $(#[$m])*
        // An explicit tag, not a niche in a provider's fields: with three
        // providers a niche costs the data path a decode on every
        // dispatch (mlx5 SEND + poll 224 instructions with one, 216 with
        // a tag; 211 with two providers and a niche).
        #[repr(u8)]
        #[derive(Debug)]
        pub(crate) enum $name {
            Rxe(<Rxe as Provider>::$assoc),
            Mlx5(<Mlx5 as Provider>::$assoc),
            Efa(<Efa as Provider>::$assoc),
        }
    };
}

/// `match`es a per-provider value, binding the inner object to `$x`.
macro_rules! dispatch {
    ($v:expr, $x:ident => $e:expr) => {
        match $v {
            Self::Rxe($x) => $e,
            Self::Mlx5($x) => $e,
            Self::Efa($x) => $e,
        }
    };
}

per_provider!(
    /// A CQ's ring.
    Cq => Cq
);
per_provider!(
    /// What a CQ's kernel object and its QPs keep of it.
    #[derive(Clone)]
    CqShared => CqShared
);
per_provider!(
    /// A QP's send queue.
    #[allow(
        clippy::large_enum_variant,
        reason = "mlx5's queue keeps its opcode table (256 bytes) inline: a box would add a pointer chase to every post; one per QP"
    )]
    SendQueue => SendQueue
);
per_provider!(
    /// A QP's receive queue.
    RecvQueue => RecvQueue
);
per_provider!(
    /// An SRQ's ring.
    Srq => Srq
);
per_provider!(
    /// What an SRQ's kernel object keeps of it (held for its drop only).
    #[allow(dead_code)]
    SrqShared => SrqShared
);

impl CqShared {
    /// [`SharedCq::completion_event`]: a completion event of this CQ was
    /// read from its channel.
    pub(crate) fn completion_event(&self) {
        dispatch!(self, s => SharedCq::completion_event(s))
    }
}

// The library's one surface over the provider contract: inherent methods
// on the enums, each converting the provider's error to the library's
// where it is made. The data-path ones (post, poll) call one non-inlined
// function per provider, generic over the contract trait: compiled
// together, one provider's code would change the other's register
// allocation, and a success returns straight from the provider's path
// with no shared result to test again.

impl Cq {
    /// Polls up to `wc.len()` completions ([`CompletionQueue::poll`]).
    #[inline(always)]
    pub(crate) fn poll_wcs(&mut self, wc: &mut [Wc]) -> std::result::Result<usize, RingLost> {
        dispatch!(self, c => poll_on(c, wc))
    }
    /// [`Cq::poll_wcs`] with rxe's poll (a few loads and stores on the
    /// ring it shares with the kernel) compiled into the caller. mlx5's
    /// loop is called, as from [`Cq::poll_wcs`]: compiled into the same
    /// function, the registers it saves would be saved on rxe's path too.
    #[inline(always)]
    pub(crate) fn poll_wcs_inline(
        &mut self,
        wc: &mut [Wc],
    ) -> std::result::Result<usize, RingLost> {
        match self {
            Self::Rxe(c) => c.poll(wc),
            Self::Mlx5(c) => poll_on(c, wc),
            Self::Efa(c) => poll_on(c, wc),
        }
    }
    /// Arms the CQ ([`CompletionQueue::arm`]).
    pub(crate) fn arm(&self, solicited_only: bool) -> Result<()> {
        dispatch!(self, c => c.arm(solicited_only)).map_err(Error::kernel("req_notify_cq"))
    }
    /// Resizes the CQ ([`CompletionQueue::resize`]); the granted size.
    pub(crate) fn resize(&mut self, cqe: u32) -> Result<u32> {
        dispatch!(self, c => c.resize(cqe)).map_err(Error::kernel("resize_cq"))
    }
    /// The sender's GID of the last completion polled, on an EFA CQ
    /// created with source GIDs (None elsewhere).
    pub(crate) fn last_source_gid(&self) -> Option<[u8; 16]> {
        match self {
            Self::Efa(c) => c.last_source_gid(),
            _ => None,
        }
    }
    /// Whether the CQ was created with source GIDs.
    pub(crate) fn with_source_gid(&self) -> bool {
        matches!(self, Self::Efa(c) if c.with_source_gid())
    }
}

/// [`Cq::poll_wcs`] on one provider's CQ. Its result (a count or a
/// [`RingLost`]) comes back in two registers, so the caller's dispatch
/// jumps here instead of calling, and a provider's poll may itself end
/// by jumping to its general path (mlx5 does).
#[inline(never)]
fn poll_on<C: CompletionQueue>(c: &mut C, wc: &mut [Wc]) -> std::result::Result<usize, RingLost> {
    c.poll(wc)
}

/// A post's result: nothing, or where and why it stopped, in two
/// registers (a dispatch that ends in a post jumps to it).
pub(crate) type Posted = std::result::Result<(), PostFailed>;

impl SendQueue {
    /// Posts the chain `wrs` ([`SendQueueOps::post`]).
    #[inline(always)]
    pub(crate) fn post_wrs(&mut self, wrs: &[SendWr<'_>]) -> Posted {
        dispatch!(self, q => post_send_on(q, wrs))
    }
    /// Posts one request read in place ([`SendQueueOps::post_one`]).
    #[inline(always)]
    pub(crate) fn post_one_wr<R: SendRequest + ?Sized>(&mut self, wr: &R) -> Posted {
        dispatch!(self, q => q.post_one(wr))
    }
    /// Posts the requests `reqs` yields, read in place
    /// ([`SendQueueOps::post_iter`]).
    #[inline(always)]
    pub(crate) fn post_iter_wrs<R: SendRequest, I: Iterator<Item = R>>(
        &mut self,
        reqs: I,
    ) -> Posted {
        dispatch!(self, q => q.post_iter(reqs))
    }
    /// Posts the batch `wrs` of `batch` ([`SendQueueOps::post_batch`]).
    #[inline(always)]
    pub(crate) fn post_batch_wrs(&mut self, batch: &SendBatch, wrs: &[BatchWr]) -> Posted {
        dispatch!(self, q => post_batch_on(q, batch, wrs))
    }
    /// [`SendQueueOps::set_state`].
    pub(crate) fn set_state(&mut self, state: QpState) {
        dispatch!(self, q => q.set_state(state))
    }
    /// [`SendQueueOps::set_ud_mtu`].
    pub(crate) fn set_ud_mtu(&mut self, mtu: u32) {
        dispatch!(self, q => q.set_ud_mtu(mtu))
    }
    /// [`SendQueueOps::allow`].
    pub(crate) fn allow(&mut self, op: WrOpcode) -> bool {
        dispatch!(self, q => q.allow(op))
    }
    /// [`SendQueueOps::capacity`].
    pub(crate) fn capacity(&self) -> u32 {
        dispatch!(self, q => q.capacity())
    }
    /// [`SendQueueOps::outstanding`].
    pub(crate) fn outstanding(&self) -> u32 {
        dispatch!(self, q => q.outstanding())
    }
    /// [`SendQueueOps::query_ece`].
    pub(crate) fn query_ece(&self) -> Option<rverbs_provider::Ece> {
        dispatch!(self, q => q.query_ece())
    }
    /// [`SendQueueOps::set_ece`].
    pub(crate) fn set_ece(&mut self, ece: &rverbs_provider::Ece) -> std::result::Result<(), Errno> {
        dispatch!(self, q => q.set_ece(ece))
    }
}

/// [`SendQueue::post_wrs`] on one provider's queue.
#[inline(never)]
fn post_send_on<Q: SendQueueOps>(q: &mut Q, wrs: &[SendWr<'_>]) -> Posted {
    q.post(wrs)
}

/// [`SendQueue::post_batch_wrs`] on one provider's queue.
#[inline(never)]
fn post_batch_on<Q: SendQueueOps>(q: &mut Q, batch: &SendBatch, wrs: &[BatchWr]) -> Posted {
    q.post_batch(batch, wrs)
}

impl RecvQueue {
    /// Posts the chain `wrs` ([`RecvQueueOps::post`]).
    #[inline(always)]
    pub(crate) fn post_wrs(&mut self, wrs: &[RecvWr<'_>]) -> Posted {
        dispatch!(self, q => post_recv_on(q, wrs))
    }
    /// Posts one request ([`RecvQueueOps::post`]), the provider's path
    /// compiled into the caller.
    #[inline(always)]
    pub(crate) fn post_one_inline(&mut self, wr: &RecvWr<'_>) -> Posted {
        dispatch!(self, q => q.post(std::slice::from_ref(wr)))
    }
    /// [`RecvQueueOps::set_state`].
    pub(crate) fn set_state(&mut self, state: QpState) {
        dispatch!(self, q => q.set_state(state))
    }
    /// [`RecvQueueOps::capacity`].
    pub(crate) fn capacity(&self) -> u32 {
        dispatch!(self, q => q.capacity())
    }
}

/// [`RecvQueue::post_wrs`] (and [`Srq::post_wrs`]) on one provider's queue.
#[inline(never)]
fn post_recv_on<Q: RecvQueueOps>(q: &mut Q, wrs: &[RecvWr<'_>]) -> Posted {
    q.post(wrs)
}

impl Srq {
    /// Posts the chain `wrs` ([`SharedRecvQueue::post`]).
    #[inline(always)]
    pub(crate) fn post_wrs(&mut self, wrs: &[RecvWr<'_>]) -> Posted {
        dispatch!(self, s => post_srq_on(s, wrs))
    }
    /// Posts one request ([`SharedRecvQueue::post`]), the provider's path
    /// compiled into the caller.
    #[inline(always)]
    pub(crate) fn post_one_inline(&mut self, wr: &RecvWr<'_>) -> Posted {
        dispatch!(self, s => s.post(std::slice::from_ref(wr)))
    }
    /// [`SharedRecvQueue::outstanding`].
    pub(crate) fn outstanding(&self) -> u32 {
        dispatch!(self, s => s.outstanding())
    }
    /// Arms the limit event ([`SharedRecvQueue::set_limit`]).
    pub(crate) fn set_limit(&self, limit: u32) -> Result<()> {
        dispatch!(self, s => s.set_limit(limit)).map_err(Error::kernel("modify_srq"))
    }
    /// [`SharedRecvQueue::resize`].
    pub(crate) fn resize(&mut self, max_wr: u32) -> Result<()> {
        dispatch!(self, s => s.resize(max_wr)).map_err(Error::kernel("modify_srq"))
    }
}

/// [`Srq::post_wrs`] on one provider's SRQ.
#[inline(never)]
fn post_srq_on<S: SharedRecvQueue>(s: &mut S, wrs: &[RecvWr<'_>]) -> Posted {
    s.post(wrs)
}

/// A created CQ: the kernel's answer, the ring, what outlives the ring.
pub(crate) type CqParts = (rverbs_abi::cq::CreateCqResp, Cq, CqShared);
/// A created SRQ: the kernel's answer, the SRQ number, the ring, what
/// outlives the ring.
pub(crate) type SrqParts = (rverbs_abi::srq::CreateSrqResp, u32, Srq, SrqShared);
/// A created QP: the kernel's answer and the queues.
pub(crate) type QpParts = (rverbs_abi::qp::CreateQpResp, SendQueue, Option<RecvQueue>);

/// An open context's provider.
#[derive(Debug)]
pub(crate) enum Ctx {
    Rxe(Rxe),
    Mlx5(Mlx5),
    Efa(Efa),
}

/// The driver behind a device, which decides the provider (re-exported by
/// `rverbs::device`). This module is the only code that tells drivers
/// apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Driver {
    /// Soft-RoCE (`rdma_rxe`): served by `provider-rxe`.
    Rxe,
    /// NVIDIA ConnectX-4 and later (`mlx5_core` / `mlx5_ib`): served by
    /// `provider-mlx5`.
    Mlx5,
    /// AWS's Elastic Fabric Adapter (`efa`): served by `provider-efa`.
    Efa,
    /// A driver this crate has no provider for, by name.
    Other(String),
}

/// The driver ABI versions (sysfs `abi_version`) the provider of `driver`
/// speaks; `None` for a driver no provider serves.
pub(crate) fn driver_abi(driver: &Driver) -> Option<RangeInclusive<u32>> {
    match driver {
        Driver::Rxe => Some(Rxe::DRIVER_ABI),
        Driver::Mlx5 => Some(Mlx5::DRIVER_ABI),
        Driver::Efa => Some(Efa::DRIVER_ABI),
        Driver::Other(_) => None,
    }
}

impl Driver {
    /// The kernel's `enum rdma_driver_id` value, which `ioctl()` method
    /// calls must carry in their header.
    pub fn id(&self) -> Option<u32> {
        match self {
            Driver::Rxe => Some(rverbs_netlink::driver_id::RXE),
            Driver::Mlx5 => Some(rverbs_netlink::driver_id::MLX5),
            Driver::Efa => Some(rverbs_netlink::driver_id::EFA),
            Driver::Other(_) => None,
        }
    }

    /// The driver whose `enum rdma_driver_id` value is `id` (as netlink
    /// reports it).
    pub(crate) fn from_id(id: u32) -> Driver {
        match id {
            rverbs_netlink::driver_id::RXE => Driver::Rxe,
            rverbs_netlink::driver_id::MLX5 => Driver::Mlx5,
            rverbs_netlink::driver_id::EFA => Driver::Efa,
            _ => Driver::Other(format!("driver id {id}")),
        }
    }

    /// The driver of a hardware device whose `device/driver` link names
    /// the kernel module `module`.
    pub(crate) fn from_module(module: &str) -> Driver {
        match module {
            "mlx5_core" => Driver::Mlx5,
            "efa" => Driver::Efa,
            _ => Driver::Other(module.to_string()),
        }
    }

    /// The driver of a PCI function by its ids, for devices without a
    /// driver link (as libibverbs matches modaliases).
    pub(crate) fn from_pci(vendor: u16, device: u16) -> Driver {
        if Mlx5::serves_pci(vendor, device) {
            Driver::Mlx5
        } else if Efa::serves_pci(vendor, device) {
            Driver::Efa
        } else if Rxe::serves_pci(vendor, device) {
            Driver::Rxe
        } else {
            Driver::Other(format!("pci {vendor:04x}:{device:04x}"))
        }
    }

    /// The driver of a device with no parent device, by its name (soft-RoCE
    /// devices are named by whoever adds them; libibverbs matches `rxe`).
    pub(crate) fn from_name(name: &str) -> Driver {
        if name.starts_with(Rxe::NAME) {
            Driver::Rxe
        } else {
            Driver::Other("unknown".into())
        }
    }
}

impl std::fmt::Display for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Driver::Rxe => f.write_str(Rxe::NAME),
            Driver::Mlx5 => f.write_str(Mlx5::NAME),
            Driver::Efa => f.write_str(Efa::NAME),
            Driver::Other(s) => f.write_str(s),
        }
    }
}

/// [`Provider::open`] on `fd`, the async event fd of the answer owned
/// (closed again if the provider failed after the kernel answered).
fn open_provider<P: Provider>(fd: &Arc<OwnedFd>) -> Result<(P, OwnedFd, u32)> {
    match P::open(Arc::clone(fd)) {
        Ok(ContextOpened { provider, resp }) => {
            let async_fd = crate::sys::cmd::adopt("get_context", "async_fd", resp.async_fd)?;
            Ok((provider, async_fd, resp.num_comp_vectors))
        }
        Err(OpenError { op, errno, resp }) => {
            if let Some(resp) = resp {
                // Owned and closed at once: nothing else will close it. An
                // answer naming no fd means the node is no uverbs device,
                // the error to report before what the provider refused.
                drop(crate::sys::cmd::adopt(
                    "get_context",
                    "async_fd",
                    resp.async_fd,
                )?);
            }
            Err(Error::Kernel { op, errno })
        }
    }
}

/// A provider's [`CmdError`] as the library's error.
fn cmd_error(e: CmdError) -> Error {
    Error::Kernel {
        op: e.op,
        errno: e.errno,
    }
}

impl Ctx {
    /// GET_CONTEXT on the checked uverbs node `fd`, sent by `device`'s
    /// provider with its driver data; returns the provider's context, the
    /// async event fd and the number of completion vectors. On error
    /// nothing is left open.
    pub(crate) fn open(
        device: &str,
        driver: &Driver,
        fd: &Arc<OwnedFd>,
    ) -> Result<(Ctx, OwnedFd, u32)> {
        match driver {
            Driver::Mlx5 => {
                let (p, async_fd, n) = open_provider::<Mlx5>(fd)?;
                Ok((Ctx::Mlx5(p), async_fd, n))
            }
            Driver::Rxe => {
                let (p, async_fd, n) = open_provider::<Rxe>(fd)?;
                Ok((Ctx::Rxe(p), async_fd, n))
            }
            Driver::Efa => {
                let (p, async_fd, n) = open_provider::<Efa>(fd)?;
                Ok((Ctx::Efa(p), async_fd, n))
            }
            Driver::Other(d) => Err(Error::UnsupportedDriver {
                device: device.to_string(),
                driver: d.clone(),
            }),
        }
    }

    /// ALLOC_PD (the provider asks for its driver's answer); the handle.
    pub(crate) fn alloc_pd(&self) -> Result<u32> {
        dispatch!(self, p => p.alloc_pd()).map_err(Error::kernel("alloc_pd"))
    }

    /// The extended QUERY_DEVICE (the provider asks for its driver's
    /// answer); the kernel's errno as is, for the caller's fallback.
    pub(crate) fn query_device_ex(&self) -> std::result::Result<ExQueryDeviceResp, Errno> {
        dispatch!(self, p => p.query_device_ex())
    }

    /// An address handle for `cmd` whose datagrams carry `network`'s
    /// header (see [`Provider::create_ah`]).
    pub(crate) fn create_ah(&self, cmd: &CreateAh, network: AhNetwork) -> Result<AhCreated> {
        dispatch!(self, p => p.create_ah(cmd, network)).map_err(cmd_error)
    }

    /// The provider's name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Ctx::Rxe(_) => Rxe::NAME,
            Ctx::Mlx5(_) => Mlx5::NAME,
            Ctx::Efa(_) => Efa::NAME,
        }
    }

    /// The EFA attributes, on an EFA device.
    pub(crate) fn efa_attr(&self) -> Option<rverbs_efa::DeviceAttr> {
        match self {
            Ctx::Efa(p) => Some(p.device_attr()),
            _ => None,
        }
    }

    /// Whether the provider implements `feature`.
    pub(crate) fn supports(&self, feature: Feature) -> bool {
        dispatch!(self, p => p.supports(feature))
    }

    /// The most inline bytes a QP of `qp_type` can ask for, where the
    /// provider knows it.
    pub(crate) fn max_inline_data(&self, qp_type: u8) -> Option<u32> {
        dispatch!(self, p => p.max_inline_data(qp_type))
    }

    /// `Ok` if the provider implements `feature`, else
    /// [`Error::Unsupported`].
    pub(crate) fn require(&self, feature: Feature) -> Result<()> {
        if self.supports(feature) {
            Ok(())
        } else {
            Err(Error::Unsupported {
                provider: self.name(),
                feature,
            })
        }
    }

    /// Creates a CQ whose receive completions carry the sender's GID (EFA
    /// with `CQ_WITH_SGID` only; refused before any command elsewhere).
    pub(crate) fn create_cq_with_sgid(&self, cmd: &CreateCq) -> Result<CqParts> {
        match self {
            Ctx::Efa(p) if p.device_attr().cq_with_sgid => {
                let c = p
                    .create_cq_with_sgid(cmd)
                    .map_err(Error::kernel("create_cq"))?;
                Ok((c.resp, Cq::Efa(c.cq), CqShared::Efa(c.shared)))
            }
            _ => Err(Error::NotOffered {
                what: "completions with the sender's GID (EFA's CQ_WITH_SGID)",
            }),
        }
    }

    /// Creates a CQ (`flags`: the extended command's creation flags).
    pub(crate) fn create_cq(
        &self,
        cmd: &CreateCq,
        flags: Option<u32>,
        alloc: Option<&SharedAllocator>,
    ) -> Result<CqParts> {
        if flags.is_some_and(|f| f != 0) {
            self.require(Feature::CqCreateFlags)?;
        }
        let op = if flags.is_some() {
            "create_cq_ex"
        } else {
            "create_cq"
        };
        Ok(match self {
            Ctx::Rxe(p) => {
                let c = p.create_cq(cmd, flags, alloc).map_err(Error::kernel(op))?;
                (c.resp, Cq::Rxe(c.cq), CqShared::Rxe(c.shared))
            }
            Ctx::Mlx5(p) => {
                let c = p.create_cq(cmd, flags, alloc).map_err(Error::kernel(op))?;
                (c.resp, Cq::Mlx5(c.cq), CqShared::Mlx5(c.shared))
            }
            Ctx::Efa(p) => {
                let c = p.create_cq(cmd, flags, alloc).map_err(Error::kernel(op))?;
                (c.resp, Cq::Efa(c.cq), CqShared::Efa(c.shared))
            }
        })
    }

    /// Creates a QP on the CQs `send_cq` and `recv_cq` and, if given, on
    /// `srq` (all of this context: refused otherwise).
    pub(crate) fn create_qp(
        &self,
        cmd: &CreateQp,
        flags: Option<u32>,
        send_cq: &CqShared,
        recv_cq: &CqShared,
        srq: Option<&Srq>,
        alloc: Option<&SharedAllocator>,
    ) -> Result<QpParts> {
        if flags.is_some_and(|f| f != 0) {
            self.require(Feature::QpCreateFlags)?;
        }
        let op = if flags.is_some() {
            "create_qp_ex"
        } else {
            "create_qp"
        };
        let foreign = || {
            Error::invalid_as(
                InvalidKind::Foreign,
                "the CQ or SRQ belongs to another provider",
            )
        };
        match (self, send_cq, recv_cq) {
            (Ctx::Rxe(p), CqShared::Rxe(s), CqShared::Rxe(r)) => {
                let srq = match srq {
                    None => None,
                    Some(Srq::Rxe(q)) => Some(q),
                    Some(_) => return Err(foreign()),
                };
                let c: QpCreated<Rxe> = p
                    .create_qp(cmd, flags, s, r, srq, alloc)
                    .map_err(Error::kernel(op))?;
                Ok((c.resp, SendQueue::Rxe(c.sq), c.rq.map(RecvQueue::Rxe)))
            }
            (Ctx::Mlx5(p), CqShared::Mlx5(s), CqShared::Mlx5(r)) => {
                let srq = match srq {
                    None => None,
                    Some(Srq::Mlx5(q)) => Some(q),
                    Some(_) => return Err(foreign()),
                };
                let c: QpCreated<Mlx5> = p
                    .create_qp(cmd, flags, s, r, srq, alloc)
                    .map_err(Error::kernel(op))?;
                Ok((c.resp, SendQueue::Mlx5(c.sq), c.rq.map(RecvQueue::Mlx5)))
            }
            (Ctx::Efa(p), CqShared::Efa(s), CqShared::Efa(r)) => {
                let srq = match srq {
                    None => None,
                    Some(Srq::Efa(q)) => Some(q),
                    Some(_) => return Err(foreign()),
                };
                let c: QpCreated<Efa> = p
                    .create_qp(cmd, flags, s, r, srq, alloc)
                    .map_err(Error::kernel(op))?;
                Ok((c.resp, SendQueue::Efa(c.sq), c.rq.map(RecvQueue::Efa)))
            }
            _ => Err(foreign()),
        }
    }

    /// Creates an SRQ.
    pub(crate) fn create_srq(
        &self,
        cmd: &CreateSrq,
        alloc: Option<&SharedAllocator>,
    ) -> Result<SrqParts> {
        let op = Error::kernel("create_srq");
        Ok(match self {
            Ctx::Rxe(p) => {
                let c = p.create_srq(cmd, alloc).map_err(op)?;
                (c.resp, c.srq_num, Srq::Rxe(c.srq), SrqShared::Rxe(c.shared))
            }
            Ctx::Mlx5(p) => {
                let c = p.create_srq(cmd, alloc).map_err(op)?;
                (
                    c.resp,
                    c.srq_num,
                    Srq::Mlx5(c.srq),
                    SrqShared::Mlx5(c.shared),
                )
            }
            Ctx::Efa(p) => {
                let c = p.create_srq(cmd, alloc).map_err(op)?;
                (c.resp, c.srq_num, Srq::Efa(c.srq), SrqShared::Efa(c.shared))
            }
        })
    }
}
