//! The one place the library names its providers. Everything else talks to
//! the provider contract ([`rverbs_provider::Provider`] and its queue
//! traits) through the enums here, which hold one provider's object each
//! and forward every call with a `match`: static dispatch, no `dyn`, one
//! branch per call on the data path.
//!
//! Adding a provider means adding a variant to each enum below (and to
//! [`Driver`]), nothing elsewhere.

use std::ops::RangeInclusive;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rverbs_abi::cq::CreateCq;
use rverbs_abi::mlx5::AllocUcontextResp;
use rverbs_abi::qp::CreateQp;
use rverbs_abi::srq::CreateSrq;
use rverbs_abi::wr::Wc;
use rverbs_abi::Errno;
use rverbs_mlx5::Mlx5;
use rverbs_provider::batch::{BatchWr, SendBatch};
use rverbs_provider::wr::{RecvWr, SendWr, WrOpcode};
use rverbs_provider::{
    CompletionQueue, Feature, PostError, Provider, QpCreated, QpState, RecvQueue as RecvQueueOps,
    RingLost, SendQueue as SendQueueOps, SharedCq, SharedRecvQueue,
};
use rverbs_rxe::Rxe;
use zerocopy::{FromZeros, IntoBytes};

use crate::device::{Device, Driver};
use crate::error::{Error, Result};

/// Declares an enum holding one provider's associated type `$assoc`.
macro_rules! per_provider {
    ($(#[$m:meta])* $name:ident => $assoc:ident) => {
        $(#[$m])*
        #[derive(Debug)]
        pub(crate) enum $name {
            Rxe(<Rxe as Provider>::$assoc),
            Mlx5(<Mlx5 as Provider>::$assoc),
        }
    };
}

/// `match`es a per-provider value, binding the inner object to `$x`.
macro_rules! dispatch {
    ($v:expr, $x:ident => $e:expr) => {
        match $v {
            Self::Rxe($x) => $e,
            Self::Mlx5($x) => $e,
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

impl Cq {
    /// [`CompletionQueue::poll`] with the library's error: one
    /// non-inlined function per provider (see [`SendQueue::post_wrs`]).
    #[inline(always)]
    pub(crate) fn poll_wcs(&mut self, wc: &mut [Wc]) -> Result<usize> {
        dispatch!(self, c => poll_on(c, wc))
    }
}

/// [`Cq::poll_wcs`] on one provider's CQ.
#[inline(never)]
fn poll_on<C: CompletionQueue>(c: &mut C, wc: &mut [Wc]) -> Result<usize> {
    match c.poll(wc) {
        Ok(n) => Ok(n),
        Err(e) => Err(poll_failed(e)),
    }
}

/// The error of a poll that found its ring lost. Out of line and cold.
#[cold]
#[inline(never)]
fn poll_failed(e: RingLost) -> Error {
    Error::Unusable(format!("poll_cq: {e}"))
}

impl CompletionQueue for Cq {
    #[inline]
    fn poll(&mut self, wc: &mut [Wc]) -> std::result::Result<usize, RingLost> {
        dispatch!(self, c => CompletionQueue::poll(c, wc))
    }
    fn arm(
        &self,
        fd: BorrowedFd<'_>,
        cq_handle: u32,
        solicited_only: bool,
    ) -> std::result::Result<(), Errno> {
        dispatch!(self, c => CompletionQueue::arm(c, fd, cq_handle, solicited_only))
    }
    fn resize(
        &mut self,
        fd: BorrowedFd<'_>,
        cq_handle: u32,
        cqe: u32,
    ) -> std::result::Result<u32, Errno> {
        dispatch!(self, c => CompletionQueue::resize(c, fd, cq_handle, cqe))
    }
}

impl SendQueue {
    /// [`SendQueueOps::post`] with the library's error, converted in each
    /// provider's arm (so a success returns straight from the provider's
    /// path, with no shared result to test again).
    ///
    /// Each provider's path is a function of its own: compiled together,
    /// one provider's code would change the other's register allocation.
    #[inline(always)]
    pub(crate) fn post_wrs(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        dispatch!(self, q => post_send_on(q, wrs))
    }
}

/// [`SendQueue::post_wrs`] on one provider's queue.
#[inline(never)]
fn post_send_on<Q: SendQueueOps>(q: &mut Q, wrs: &[SendWr<'_>]) -> Result<()> {
    match q.post(wrs) {
        Ok(()) => Ok(()),
        Err((index, error)) => Err(crate::qp::post::post_failed(index, error)),
    }
}

/// [`RecvQueue::post_wrs`] on one provider's queue.
#[inline(never)]
fn post_recv_on<Q: RecvQueueOps>(q: &mut Q, wrs: &[RecvWr<'_>]) -> Result<()> {
    match q.post(wrs) {
        Ok(()) => Ok(()),
        Err((index, error)) => Err(crate::qp::post::post_failed(index, error)),
    }
}

impl RecvQueue {
    /// [`RecvQueueOps::post`] with the library's error (see
    /// [`SendQueue::post_wrs`]).
    #[inline(always)]
    pub(crate) fn post_wrs(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        dispatch!(self, q => post_recv_on(q, wrs))
    }
}

impl SendQueueOps for SendQueue {
    #[inline]
    fn post(&mut self, wrs: &[SendWr<'_>]) -> std::result::Result<(), (usize, PostError)> {
        dispatch!(self, q => SendQueueOps::post(q, wrs))
    }
    #[inline]
    fn post_batch(
        &mut self,
        batch: &SendBatch,
        wrs: &[BatchWr],
    ) -> std::result::Result<(), (usize, PostError)> {
        dispatch!(self, q => SendQueueOps::post_batch(q, batch, wrs))
    }
    fn set_state(&mut self, state: QpState) {
        dispatch!(self, q => SendQueueOps::set_state(q, state))
    }
    fn set_ud_mtu(&mut self, mtu: u32) {
        dispatch!(self, q => SendQueueOps::set_ud_mtu(q, mtu))
    }
    fn allow(&mut self, op: WrOpcode) -> bool {
        dispatch!(self, q => SendQueueOps::allow(q, op))
    }
    fn capacity(&self) -> u32 {
        dispatch!(self, q => SendQueueOps::capacity(q))
    }
    fn outstanding(&self) -> u32 {
        dispatch!(self, q => SendQueueOps::outstanding(q))
    }
}

impl RecvQueueOps for RecvQueue {
    #[inline]
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), (usize, PostError)> {
        dispatch!(self, q => RecvQueueOps::post(q, wrs))
    }
    fn set_state(&mut self, state: QpState) {
        dispatch!(self, q => RecvQueueOps::set_state(q, state))
    }
    fn capacity(&self) -> u32 {
        dispatch!(self, q => RecvQueueOps::capacity(q))
    }
    fn outstanding(&self) -> u32 {
        dispatch!(self, q => RecvQueueOps::outstanding(q))
    }
}

impl SharedRecvQueue for Srq {
    #[inline]
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), (usize, PostError)> {
        dispatch!(self, s => SharedRecvQueue::post(s, wrs))
    }
    fn capacity(&self) -> u32 {
        dispatch!(self, s => SharedRecvQueue::capacity(s))
    }
    fn outstanding(&self) -> u32 {
        dispatch!(self, s => SharedRecvQueue::outstanding(s))
    }
    fn set_limit(
        &self,
        fd: BorrowedFd<'_>,
        srq_handle: u32,
        limit: u32,
    ) -> std::result::Result<(), Errno> {
        dispatch!(self, s => SharedRecvQueue::set_limit(s, fd, srq_handle, limit))
    }
    fn resize(
        &mut self,
        fd: BorrowedFd<'_>,
        srq_handle: u32,
        max_wr: u32,
    ) -> std::result::Result<(), Errno> {
        dispatch!(self, s => SharedRecvQueue::resize(s, fd, srq_handle, max_wr))
    }
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
}

/// The driver ABI versions (sysfs `abi_version`) the provider of `driver`
/// speaks; `None` for a driver no provider serves.
pub(crate) fn driver_abi(driver: &Driver) -> Option<RangeInclusive<u32>> {
    match driver {
        Driver::Rxe => Some(rverbs_rxe::DRIVER_ABI),
        Driver::Mlx5 => Some(rverbs_mlx5::DRIVER_ABI),
        Driver::Other(_) => None,
    }
}

/// The driver of a PCI function by its ids, for devices without a driver
/// link (as libibverbs matches modaliases).
pub(crate) fn pci_driver(vendor: u16, device: u16) -> Option<Driver> {
    (vendor == rverbs_mlx5::PCI_VENDOR_MELLANOX && rverbs_mlx5::is_mlx5_pci_device(device))
        .then_some(Driver::Mlx5)
}

impl Ctx {
    /// GET_CONTEXT on the checked uverbs node `fd` with the driver data of
    /// `device`'s provider; returns the provider's context, the async
    /// event fd and the number of completion vectors. On error nothing is
    /// left open.
    pub(crate) fn open(device: &Device, fd: &Arc<OwnedFd>) -> Result<(Ctx, OwnedFd, u32)> {
        match device.driver() {
            Driver::Mlx5 => {
                let req = rverbs_mlx5::uctx::alloc_ucontext_req();
                let mut drv = AllocUcontextResp::new_zeroed();
                // Owned first: it closes if the user context fails.
                let (async_fd, num_comp_vectors) =
                    crate::sys::cmd::get_context(fd.as_fd(), Some(&req), drv.as_mut_bytes())?;
                let uctx = rverbs_mlx5::uctx::Uctx::from_resp(fd.as_fd(), &drv)
                    .map_err(Error::kernel("get_context"))?;
                Ok((
                    Ctx::Mlx5(Mlx5::new(Arc::clone(fd), uctx)),
                    async_fd,
                    num_comp_vectors,
                ))
            }
            Driver::Rxe => {
                let (async_fd, num_comp_vectors) =
                    crate::sys::cmd::get_context(fd.as_fd(), None, &mut [])?;
                Ok((
                    Ctx::Rxe(Rxe::new(Arc::clone(fd))),
                    async_fd,
                    num_comp_vectors,
                ))
            }
            Driver::Other(d) => Err(Error::UnsupportedDriver {
                device: device.name().to_string(),
                driver: d.clone(),
            }),
        }
    }

    /// Room for the driver's part of ALLOC_PD's response (mlx5: the PD
    /// number), asked for as the provider's C library does so the kernel
    /// sees the same command. Not read.
    pub(crate) fn alloc_pd_resp_len(&self) -> usize {
        match self {
            Ctx::Mlx5(_) => size_of::<rverbs_abi::mlx5::AllocPdResp>(),
            Ctx::Rxe(_) => 0,
        }
    }

    /// Room for the driver's part of the extended QUERY_DEVICE response
    /// (mlx5: its offload capabilities), as for
    /// [`Ctx::alloc_pd_resp_len`]. rxe's kernel refuses driver data there.
    pub(crate) fn query_device_resp_len(&self) -> usize {
        match self {
            Ctx::Mlx5(_) => size_of::<rverbs_abi::mlx5::QueryDeviceResp>(),
            Ctx::Rxe(_) => 0,
        }
    }

    /// The provider's name.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Ctx::Rxe(_) => Rxe::NAME,
            Ctx::Mlx5(_) => Mlx5::NAME,
        }
    }

    /// Whether the provider implements `feature`.
    pub(crate) fn supports(&self, feature: Feature) -> bool {
        dispatch!(self, p => p.supports(feature))
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

    /// Creates a CQ (`flags`: the extended command's creation flags).
    pub(crate) fn create_cq(&self, cmd: &CreateCq, flags: Option<u32>) -> Result<CqParts> {
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
                let c = p.create_cq(cmd, flags).map_err(Error::kernel(op))?;
                (c.resp, Cq::Rxe(c.cq), CqShared::Rxe(c.shared))
            }
            Ctx::Mlx5(p) => {
                let c = p.create_cq(cmd, flags).map_err(Error::kernel(op))?;
                (c.resp, Cq::Mlx5(c.cq), CqShared::Mlx5(c.shared))
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
    ) -> Result<QpParts> {
        if flags.is_some_and(|f| f != 0) {
            self.require(Feature::QpCreateFlags)?;
        }
        let op = if flags.is_some() {
            "create_qp_ex"
        } else {
            "create_qp"
        };
        let foreign = || Error::invalid("the CQ or SRQ belongs to another provider");
        match (self, send_cq, recv_cq) {
            (Ctx::Rxe(p), CqShared::Rxe(s), CqShared::Rxe(r)) => {
                let srq = match srq {
                    None => None,
                    Some(Srq::Rxe(q)) => Some(q),
                    Some(_) => return Err(foreign()),
                };
                let c: QpCreated<Rxe> = p
                    .create_qp(cmd, flags, s, r, srq)
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
                    .create_qp(cmd, flags, s, r, srq)
                    .map_err(Error::kernel(op))?;
                Ok((c.resp, SendQueue::Mlx5(c.sq), c.rq.map(RecvQueue::Mlx5)))
            }
            _ => Err(foreign()),
        }
    }

    /// Creates an SRQ.
    pub(crate) fn create_srq(&self, cmd: &CreateSrq) -> Result<SrqParts> {
        let op = Error::kernel("create_srq");
        Ok(match self {
            Ctx::Rxe(p) => {
                let c = p.create_srq(cmd).map_err(op)?;
                (c.resp, c.srq_num, Srq::Rxe(c.srq), SrqShared::Rxe(c.shared))
            }
            Ctx::Mlx5(p) => {
                let c = p.create_srq(cmd).map_err(op)?;
                (
                    c.resp,
                    c.srq_num,
                    Srq::Mlx5(c.srq),
                    SrqShared::Mlx5(c.shared),
                )
            }
        })
    }

    /// The address vector a provider puts in each UD WQE for `attr`
    /// (mlx5), or `None` if its address handles are kernel objects (rxe).
    /// `roce`: the port is RoCE, and the source GID has this type.
    pub(crate) fn address_vector(
        &self,
        attr: &rverbs_abi::ah::AhAttr,
        roce: Option<crate::gid::GidType>,
    ) -> Option<[u8; 48]> {
        use rverbs_mlx5::ah::AvKind;
        let kind = match roce {
            None => AvKind::Ib,
            Some(crate::gid::GidType::RoceV2) => AvKind::RoceV2,
            Some(_) => AvKind::RoceV1,
        };
        match self {
            Ctx::Rxe(_) => None,
            Ctx::Mlx5(_) => Some(rverbs_mlx5::ah::av(attr, kind)),
        }
    }

    /// mlx5 on RoCE: the kernel's address handle for `cmd`, whose answer
    /// completes address vector `av` with the destination MAC. Returns the
    /// handle. Other providers: `None`.
    pub(crate) fn create_roce_ah(
        &self,
        cmd: &rverbs_abi::ah::CreateAh,
        av: &mut [u8; 48],
    ) -> Option<Result<u32>> {
        match self {
            Ctx::Rxe(_) => None,
            Ctx::Mlx5(p) => Some(
                p.create_roce_ah(cmd, av)
                    .map_err(Error::kernel("create_ah")),
            ),
        }
    }
}
