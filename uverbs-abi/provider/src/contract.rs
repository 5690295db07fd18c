//! The provider contract: the operations every provider implements and the
//! library calls, one table for all of them (the role of rdma-core's
//! `verbs_context_ops`), with static dispatch.
//!
//! A provider is a type implementing [`Provider`]: its open context, which
//! creates the provider's objects. The device half says which driver and
//! driver ABI versions it serves ([`Provider::NAME`],
//! [`Provider::DRIVER_ABI`], [`Provider::serves_pci`]) and opens a context
//! ([`Provider::open`]: GET_CONTEXT with the driver's data). Every command
//! that carries driver data is the provider's to send (GET_CONTEXT,
//! ALLOC_PD, the extended QUERY_DEVICE, CREATE_AH and the queue creates,
//! resizes and modifies); the library sends only plain core commands
//! ([`rverbs_abi::cmd::PlainCmd`]) and the ioctl methods no driver extends.
//! Each provider object keeps the command fd and kernel handle it acts on.
//! Creation returns a complete object or fails leaving nothing behind (a
//! kernel object created on the way is destroyed before the error
//! returns). Each queue holds what it needs to post (its ring, its
//! doorbell, the command fd where the doorbell is a system call). Both
//! queue kinds follow the QP's state through the same hook
//! ([`SendQueue::set_state`], [`RecvQueue::set_state`]) and decide from it
//! whether a post is allowed ([`QpState::may_post_send`],
//! [`QpState::may_post_recv`]). What a provider does not implement it says
//! through [`Provider::supports`], before any command is sent.

use std::fmt;
use std::ops::RangeInclusive;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rverbs_abi::ah::CreateAh;
use rverbs_abi::cq::{CreateCq, CreateCqResp};
use rverbs_abi::device::{ExQueryDeviceResp, GetContextResp};
use rverbs_abi::qp::{qp_state, CreateQp, CreateQpResp};
use rverbs_abi::srq::{CreateSrq, CreateSrqResp};
use rverbs_abi::wr::Wc;
use rverbs_abi::Errno;

use crate::alloc::SharedAllocator;
use crate::batch::{BatchWr, SendBatch};
use crate::wr::{RecvWr, SendRequest, SendWr, WrOpcode};
use crate::PostFailed;

/// QP state (`enum ib_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// Just created, or reset.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: outstanding work is flushed.
    Err,
}

impl QpState {
    /// The kernel's value (`IB_QPS_*`).
    pub fn raw(self) -> u8 {
        match self {
            QpState::Reset => qp_state::RESET,
            QpState::Init => qp_state::INIT,
            QpState::Rtr => qp_state::RTR,
            QpState::Rts => qp_state::RTS,
            QpState::Sqd => qp_state::SQD,
            QpState::Sqe => qp_state::SQE,
            QpState::Err => qp_state::ERR,
        }
    }
    /// Whether sends may be posted in this state: RTS, SQD, SQE and ERR
    /// (in SQE and ERR they complete flushed). The one rule every
    /// provider's send queue applies ([`SendQueue::set_state`]): the
    /// library does not check the state itself.
    #[inline]
    pub fn may_post_send(self) -> bool {
        matches!(
            self,
            QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err
        )
    }
    /// Whether receives may be posted in this state: any but RESET.
    #[inline]
    pub fn may_post_recv(self) -> bool {
        self != QpState::Reset
    }
    /// The state the kernel's value `v` names, `None` for an unknown value.
    pub fn from_raw(v: u8) -> Option<QpState> {
        Some(match v {
            qp_state::RESET => QpState::Reset,
            qp_state::INIT => QpState::Init,
            qp_state::RTR => QpState::Rtr,
            qp_state::RTS => QpState::Rts,
            qp_state::SQD => QpState::Sqd,
            qp_state::SQE => QpState::Sqe,
            qp_state::ERR => QpState::Err,
            _ => return None,
        })
    }
}

/// What a provider may leave out; [`Provider::supports`] answers for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Feature {
    /// CQ creation flags (the extended CREATE_CQ's `flags`).
    CqCreateFlags,
    /// QP creation flags (the extended CREATE_QP's `create_flags`).
    QpCreateFlags,
    /// Address handles on a RoCE (Ethernet) port.
    RoceAddressHandle,
    /// Resizing an SRQ (MODIFY_SRQ with `max_wr`).
    SrqResize,
    /// An SRQ asked for with `max_wr` 0, which the provider makes its
    /// smallest (libmlx5's rule: one entry); without it the library
    /// refuses `max_wr` 0 (rxe's kernel driver does).
    EmptySrq,
    /// Memory windows: ALLOC_MW and the BIND_MW, LOCAL_INV and
    /// SEND_WITH_INV work requests.
    MemoryWindows,
    /// The ATOMIC_WRITE work request (where the device offers it).
    AtomicWrite,
    /// The RDMA FLUSH work request (where the device offers it).
    Flush,
    /// Advice on an on-demand MR's pages (`UVERBS_METHOD_ADVISE_MR`).
    OdpAdvice,
    /// Registering a dmabuf (`UVERBS_METHOD_REG_DMABUF_MR`): memory another
    /// device's driver exports, GPU memory for one.
    DmabufMr,
    /// Enhanced connection establishment options of QPs
    /// ([`SendQueue::query_ece`]).
    Ece,
    /// SRD queue pairs (EFA's reliable datagrams, the driver QP type).
    SrdQp,
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Feature::CqCreateFlags => "CQ creation flags",
            Feature::QpCreateFlags => "QP creation flags",
            Feature::RoceAddressHandle => "address handles on a RoCE port",
            Feature::SrqResize => "resizing an SRQ",
            Feature::EmptySrq => "an SRQ of max_wr 0 (made the smallest the device has)",
            Feature::MemoryWindows => "memory windows",
            Feature::AtomicWrite => "ATOMIC_WRITE",
            Feature::Flush => "RDMA FLUSH",
            Feature::OdpAdvice => "advice on on-demand MRs (prefetch)",
            Feature::DmabufMr => "dmabuf memory registration (reg_dmabuf_mr)",
            Feature::Ece => "enhanced connection establishment (ECE)",
            Feature::SrdQp => "SRD queue pairs (EFA's reliable datagrams)",
        })
    }
}

/// The [`Provider::CqShared`] or [`Provider::SrqShared`] of a provider
/// whose rings need nothing kept beyond themselves (rxe: the kernel owns
/// the ring memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Unshared;

/// What a CQ's kernel object and its QPs keep of it
/// ([`Provider::CqShared`]), through which the library tells the provider
/// of the CQ's completion events.
pub trait SharedCq: Clone + Send + Sync + fmt::Debug {
    /// The library read a completion event of this CQ from its channel
    /// (what libibverbs' `ibv_get_cq_event` tells a provider through its
    /// `cq_event` operation). A provider whose device numbers arm requests
    /// by the events delivered (mlx5's arm sequence number, which the
    /// device checks) steps it here; the default does nothing.
    fn completion_event(&self) {}
}

impl SharedCq for Unshared {}

/// A completion ring whose loss (a resize the kernel made but whose new
/// ring could not be mapped) makes every later poll fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingLost;

impl fmt::Display for RingLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the CQ's ring is lost: the kernel resized it but the new ring could not be \
             mapped, so its completions cannot be read",
        )
    }
}

impl std::error::Error for RingLost {}

/// A CQ's user-space side: its ring and how it is armed and resized.
pub trait CompletionQueue: Send + fmt::Debug {
    /// Polls up to `wc.len()` completions into `wc`; returns how many.
    /// Never blocks, never allocates.
    fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost>;
    /// Arms the CQ: the next completion, or the next solicited one, raises
    /// an event.
    fn arm(&self, solicited_only: bool) -> Result<(), Errno>;
    /// Resizes the CQ to at least `cqe` entries, keeping unpolled ones;
    /// returns the granted size.
    fn resize(&mut self, cqe: u32) -> Result<u32, Errno>;
}

/// A QP's send queue. It owns "may post": in a state where
/// [`QpState::may_post_send`] is false every post fails with
/// [`PostError::InvalidState`](crate::PostError::InvalidState) at index 0 (a new queue is in RESET).
pub trait SendQueue: Send + fmt::Debug {
    /// Posts the chain `wrs` (one doorbell); on error the requests before
    /// the returned index were posted.
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostFailed>;
    /// Posts one request in any form ([`SendRequest`], read in place, no
    /// [`SendWr`] built) as [`SendQueue::post`] posts a chain of one: the
    /// same checks, the same entry, one doorbell. A doorbell that failed
    /// after the entry was written is reported at index 1.
    fn post_one<R: SendRequest + ?Sized>(&mut self, wr: &R) -> Result<(), PostFailed>;
    /// Posts the requests `reqs` yields, read in place, as
    /// [`SendQueue::post`] posts a slice of them (one doorbell; on error
    /// the requests before the returned index were posted and `reqs` is
    /// not advanced past the failing one).
    fn post_iter<R: SendRequest, I: Iterator<Item = R>>(
        &mut self,
        reqs: I,
    ) -> Result<(), PostFailed>;
    /// Posts the batch `wrs` of `batch`'s operation (one doorbell), the
    /// requests the entries make with `batch` ([`SendBatch::to_wr`]) as
    /// [`SendQueue::post`] would post them, signaled as the batch says:
    /// the uniform part is checked once ([`crate::check::SendChecks::check_batch`],
    /// its error at index 0 with nothing posted), each entry by
    /// [`crate::batch::check_batch_wr`]. Entries that do not fit end with
    /// [`PostError::QueueFull`](crate::PostError::QueueFull) at the first of them. On error the entries
    /// before the returned index were posted.
    fn post_batch(&mut self, batch: &SendBatch, wrs: &[BatchWr]) -> Result<(), PostFailed>;
    /// Follows the QP's state after a MODIFY_QP the kernel accepted.
    fn set_state(&mut self, state: QpState);
    /// Bounds UD messages by the port's active MTU (bytes).
    fn set_ud_mtu(&mut self, mtu: u32);
    /// Accepts `op`, an operation the device may lack
    /// ([`WrOpcode::needs_capability`]), which the library has seen the
    /// device offer; returns whether this queue now accepts it (a provider
    /// that does not build it answers `false` and keeps refusing it with
    /// [`PostError::OpcodeUnsupported`](crate::PostError::OpcodeUnsupported)).
    fn allow(&mut self, op: WrOpcode) -> bool;
    /// Requests that may be outstanding at once.
    fn capacity(&self) -> u32;
    /// Requests posted and not yet known complete.
    fn outstanding(&self) -> u32;
    /// The QP's enhanced connection establishment options, where the
    /// provider has them ([`Feature::Ece`]); `None` (the default) where it
    /// has none.
    fn query_ece(&self) -> Option<Ece> {
        None
    }
    /// Asks for `ece` on the QP's next connection: `EINVAL` for options
    /// this provider's vendor cannot mean, `EOPNOTSUPP` (the default)
    /// where the device or provider does not negotiate them.
    fn set_ece(&mut self, ece: &Ece) -> Result<(), Errno> {
        let _ = ece;
        Err(Errno::EOPNOTSUPP)
    }
}

/// Enhanced connection establishment options (`struct ibv_ece`): what a
/// QP offers its peer when connecting, in its vendor's numbering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ece {
    /// The PCI vendor whose numbering `options` uses (0: none).
    pub vendor_id: u32,
    /// The vendor's option bits.
    pub options: u32,
    /// Extensions: must be 0.
    pub comp_mask: u32,
}

/// A QP's own receive queue. It owns "may post" as [`SendQueue`] does, by
/// [`QpState::may_post_recv`].
pub trait RecvQueue: Send + fmt::Debug {
    /// Posts the chain `wrs`; on error the requests before the returned
    /// index were posted.
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed>;
    /// Follows the QP's state after a MODIFY_QP the kernel accepted.
    fn set_state(&mut self, state: QpState);
    /// Receives that may be outstanding at once.
    fn capacity(&self) -> u32;
    /// Receives posted and not yet consumed.
    fn outstanding(&self) -> u32;
}

/// A shared receive queue.
pub trait SharedRecvQueue: Send + fmt::Debug {
    /// Posts the chain `wrs`; on error the requests before the returned
    /// index were posted.
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed>;
    /// Receives that may be outstanding at once.
    fn capacity(&self) -> u32;
    /// Receives posted and not yet consumed.
    fn outstanding(&self) -> u32;
    /// Arms the SRQ's limit event at `limit` (0 disarms).
    fn set_limit(&self, limit: u32) -> Result<(), Errno>;
    /// Resizes the SRQ to `max_wr` receives (only where
    /// [`Feature::SrqResize`] is supported).
    fn resize(&mut self, max_wr: u32) -> Result<(), Errno>;
}

/// What [`Provider::create_cq`] made.
#[derive(Debug)]
pub struct CqCreated<P: Provider> {
    /// The kernel's answer (handle, granted size).
    pub resp: CreateCqResp,
    /// The ring, for its poller.
    pub cq: P::Cq,
    /// What must outlive the ring for as long as the kernel CQ exists.
    pub shared: P::CqShared,
}

/// What [`Provider::create_qp`] made.
#[derive(Debug)]
pub struct QpCreated<P: Provider> {
    /// The kernel's answer (handle, QPN, granted capacities).
    pub resp: CreateQpResp,
    /// The send queue.
    pub sq: P::SendQueue,
    /// The receive queue; `None` on an SRQ or without receives.
    pub rq: Option<P::RecvQueue>,
}

/// What [`Provider::create_srq`] made.
#[derive(Debug)]
pub struct SrqCreated<P: Provider> {
    /// The kernel's answer (handle, granted size).
    pub resp: CreateSrqResp,
    /// The SRQ number (the XRC target number; what async events name).
    pub srq_num: u32,
    /// The ring, for its poster.
    pub srq: P::Srq,
    /// What must outlive the ring for as long as the kernel SRQ exists.
    pub shared: P::SrqShared,
}

/// What [`Provider::open`] made.
#[derive(Debug)]
pub struct ContextOpened<P: Provider> {
    /// The provider's open context.
    pub provider: P,
    /// The kernel's answer to GET_CONTEXT: the number of the async event
    /// fd it opened for the caller (not yet owned by anyone: the caller
    /// adopts it, having checked that the command fd is a uverbs node), and
    /// the number of completion vectors.
    pub resp: GetContextResp,
}

/// Why [`Provider::open`] failed.
#[derive(Debug, Clone, Copy)]
pub struct OpenError {
    /// The command that failed, or what the provider refused in its
    /// answer.
    pub op: &'static str,
    /// Its errno.
    pub errno: Errno,
    /// GET_CONTEXT's answer when the command itself succeeded and what
    /// followed failed: its async event fd is the caller's to close.
    pub resp: Option<GetContextResp>,
}

/// A command the kernel refused, or whose answer the provider refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdError {
    /// The command, with what the provider knows of why where the errno
    /// alone would mislead.
    pub op: &'static str,
    /// Its errno.
    pub errno: Errno,
}

impl CmdError {
    /// `errno` of command `op`, as a closure for `map_err`.
    pub fn of(op: &'static str) -> impl Fn(Errno) -> CmdError {
        move |errno| CmdError { op, errno }
    }
}

/// The network header a UD datagram carries, which decides the format of
/// a provider's address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AhNetwork {
    /// An InfiniBand port (a GRH only if the address has one).
    Ib,
    /// RoCE v1: an IB GRH over Ethernet.
    RoceV1,
    /// RoCE v2: UDP/IP.
    RoceV2,
}

/// What [`Provider::create_ah`] made: how a UD send names the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhCreated {
    /// The kernel's address handle, if one was created (the library
    /// destroys it with DESTROY_AH, a plain command).
    pub handle: Option<u32>,
    /// The number the provider's WQEs name it by (rxe's `ah_num`); 0 where
    /// WQEs carry [`AhCreated::av`] instead.
    pub ah_num: u32,
    /// The address vector copied into each UD send WQE (mlx5), if any.
    pub av: Option<[u8; 48]>,
    /// Whether the kernel looks the AH up by number when a send goes out
    /// (rxe): then every queued send that names it must keep it alive
    /// ([`crate::wr::AhHold`]).
    pub held_by_sends: bool,
}

/// A provider: its open context and the objects it creates.
pub trait Provider: Send + Sync + Sized + fmt::Debug {
    /// The provider's name, as its driver is known (`rxe`, `mlx5`).
    const NAME: &'static str;
    /// The driver ABI versions (the device's sysfs `abi_version`) the
    /// provider speaks; a device outside them is not opened.
    const DRIVER_ABI: RangeInclusive<u32>;
    /// A CQ's ring.
    type Cq: CompletionQueue;
    /// What a CQ's QPs and its kernel object keep of it; the library
    /// reports the CQ's completion events through it.
    type CqShared: SharedCq;
    /// A QP's send queue.
    type SendQueue: SendQueue;
    /// A QP's receive queue.
    type RecvQueue: RecvQueue;
    /// An SRQ's ring.
    type Srq: SharedRecvQueue;
    /// What an SRQ's kernel object keeps of it.
    type SrqShared: Clone + Send + Sync + fmt::Debug;

    /// Whether the PCI function `vendor:device` is a device of this
    /// provider, for a device whose driver is not named in sysfs (as
    /// libibverbs matches modaliases). None by default.
    fn serves_pci(vendor: u16, device: u16) -> bool {
        let _ = (vendor, device);
        false
    }
    /// GET_CONTEXT on `fd`, a uverbs command fd of a device this provider
    /// serves, with the driver's data; the provider's context keeps `fd`.
    /// On error nothing of the provider's is left behind (an async event
    /// fd the kernel opened is in [`OpenError::resp`], for the caller).
    fn open(fd: Arc<OwnedFd>) -> Result<ContextOpened<Self>, OpenError>;
    /// ALLOC_PD with the driver's response; returns the PD's handle.
    fn alloc_pd(&self) -> Result<u32, Errno>;
    /// The extended QUERY_DEVICE with the driver's response (`EOPNOTSUPP`,
    /// `ENOSYS` or `EINVAL` where the kernel lacks it: the caller falls
    /// back to the plain QUERY_DEVICE).
    fn query_device_ex(&self) -> Result<ExQueryDeviceResp, Errno>;
    /// An address handle for `cmd`'s attributes, whose datagrams carry
    /// `network`'s header: a kernel AH, an address vector, or both.
    fn create_ah(&self, cmd: &CreateAh, network: AhNetwork) -> Result<AhCreated, CmdError>;
    /// Whether this provider implements `feature`; the library refuses a
    /// call needing one it does not, before any command is sent.
    fn supports(&self, feature: Feature) -> bool;
    /// The most inline bytes (`max_inline_data`) a QP of `qp_type` (the
    /// kernel's `IB_QPT_*`) with a send queue can be created with, where
    /// the provider knows it: the library then refuses more before the
    /// command, naming the limit, instead of passing on the kernel's bare
    /// `EINVAL`. `None` (the default): the kernel alone knows.
    fn max_inline_data(&self, qp_type: u8) -> Option<u32> {
        let _ = qp_type;
        None
    }
    /// CREATE_CQ for `cmd`, the extended command when `flags` is given.
    /// A provider whose ring is user memory takes it from `alloc` where
    /// one is given ([`crate::alloc`]; freed through it when the ring
    /// goes), and where `alloc` answers
    /// [`Allocation::UseDefault`](crate::Allocation::UseDefault), its own;
    /// [`Allocation::Failed`](crate::Allocation::Failed) is `ENOMEM`.
    fn create_cq(
        &self,
        cmd: &CreateCq,
        flags: Option<u32>,
        alloc: Option<&SharedAllocator>,
    ) -> Result<CqCreated<Self>, Errno>;
    /// CREATE_QP for `cmd` (the extended command when `flags` is given) on
    /// the CQs `send_cq` and `recv_cq` (the ones `cmd` names) and, when
    /// `cmd.is_srq`, on `srq`; its buffers from `alloc` as
    /// [`Provider::create_cq`] says.
    fn create_qp(
        &self,
        cmd: &CreateQp,
        flags: Option<u32>,
        send_cq: &Self::CqShared,
        recv_cq: &Self::CqShared,
        srq: Option<&Self::Srq>,
        alloc: Option<&SharedAllocator>,
    ) -> Result<QpCreated<Self>, Errno>;
    /// CREATE_SRQ for `cmd`; its buffers from `alloc` as
    /// [`Provider::create_cq`] says.
    fn create_srq(
        &self,
        cmd: &CreateSrq,
        alloc: Option<&SharedAllocator>,
    ) -> Result<SrqCreated<Self>, Errno>;
}
