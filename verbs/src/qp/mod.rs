//! Queue pairs: creation, the state machine, query, and posting.
//!
//! Split by role, as the io-uring crate splits its queues: [`attr`] holds
//! the attribute types and their kernel encoding, [`connect`] the
//! transitions to RTS and the out-of-band [`Endpoint`] (with its wire
//! format), [`post`] the data path. This module holds the [`Qp`] itself:
//! creation (through the provider contract), MODIFY_QP, QUERY_QP and
//! destruction.

use crate::sys::mem::Leakable;
use std::fmt;
use std::sync::Arc;

use rverbs_abi::cmd::exec;
use rverbs_abi::device::device_cap_ex;
pub use rverbs_abi::qp::QpCreateFlags;
use rverbs_abi::qp::{AttachMcast, CreateQp, CreateQpResp, DestroyQp, DetachMcast, QueryQp};
use rverbs_abi::Errno;
use rverbs_provider::wr::WrOpcode;
pub use rverbs_provider::QpState;
use rverbs_provider::{Ece, Feature};

use crate::cq::{Cq, CqInner};
use crate::error::{Error, InvalidKind, Result};
use crate::event::{EventId, ObjectKind};
use crate::mr::AccessFlags;
use crate::pd::Pd;

pub mod attr;
pub mod connect;
pub mod post;

pub use attr::{AhAttr, GlobalRoute, Mtu, QpAttr, QpCap, QpInitAttr, QpType};
pub use connect::{ConnectOpts, Endpoint};
pub use post::SignalEvery;

/// A queue pair. Posting needs `&mut`: one poster per QP at a time, no lock
/// on the data path. Dropping it destroys the QP (outstanding work is
/// discarded by the kernel).
pub struct Qp {
    /// The rings (mlx5: memory the device reads and writes), freed only
    /// once the kernel has destroyed the QP (see [`Drop`]): declared first,
    /// they drop first, right after `Drop::drop`'s body.
    sq: Leakable<crate::provider::SendQueue>,
    rq: Leakable<Option<crate::provider::RecvQueue>>,
    pd: Pd,
    handle: u32,
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    state: QpState,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    /// The SRQ the QP receives from: its kernel object outlives the QP.
    srq: Option<Arc<crate::srq::SrqInner>>,
    /// The `user_handle` async events name this QP by.
    event_id: EventId,
    /// Set by [`Qp::destroy`] once the kernel destroyed the QP, so that
    /// dropping it then frees what is left without a second DESTROY_QP.
    destroyed: bool,
}

impl fmt::Debug for Qp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Qp")
            .field("qpn", &self.qpn)
            .field("qp_type", &self.qp_type)
            .field("state", &self.state)
            .field("cap", &self.cap)
            .finish()
    }
}

impl Pd {
    /// Creates a QP in the RESET state.
    pub fn create_qp(&self, attr: &QpInitAttr<'_>) -> Result<Qp> {
        self.create_qp_inner(attr, None, None)
    }

    /// Creates a QP with the kernel's extended CREATE_QP command, which
    /// carries creation flags (what `ibv_create_qp_ex` uses), optionally on
    /// an SRQ. rxe accepts no creation flag: its driver refuses any with
    /// `EOPNOTSUPP` (and the core refuses flags it does not know with
    /// `EINVAL`); with empty flags the QP is the same as [`Pd::create_qp`]'s.
    /// The mlx5 provider implements no creation flag yet: any is refused
    /// with [`Error::Kernel`] `EOPNOTSUPP` before the kernel is asked.
    pub fn create_qp_ex(
        &self,
        attr: &QpInitAttr<'_>,
        flags: QpCreateFlags,
        srq: Option<&crate::Srq>,
    ) -> Result<Qp> {
        self.create_qp_inner(attr, srq, Some(flags))
    }

    /// Creates a QP in the RESET state that takes its receives from `srq`
    /// (`attr.cap.max_recv_wr` and `max_recv_sge` are ignored; the QP has no
    /// receive queue of its own and [`Qp::post_recv`] refuses). The QP keeps
    /// the SRQ's kernel object alive.
    pub fn create_qp_with_srq(&self, attr: &QpInitAttr<'_>, srq: &crate::Srq) -> Result<Qp> {
        self.create_qp_inner(attr, Some(srq), None)
    }

    fn create_qp_inner(
        &self,
        attr: &QpInitAttr<'_>,
        srq: Option<&crate::Srq>,
        ex_flags: Option<QpCreateFlags>,
    ) -> Result<Qp> {
        let ctx = self.context();
        if let Some(srq) = srq {
            if !srq.pd().context().same(ctx) {
                return Err(Error::invalid_as(
                    InvalidKind::Foreign,
                    "the SRQ belongs to another device context",
                ));
            }
        }
        for cq in [attr.send_cq, attr.recv_cq] {
            if !cq.inner().ctx.same(ctx) {
                return Err(Error::invalid_as(
                    InvalidKind::Foreign,
                    "the CQ belongs to another device context",
                ));
            }
        }
        if attr.qp_type == QpType::Srd {
            ctx.provider().require(Feature::SrdQp)?;
        }
        if attr.cap.max_send_wr == 0 && attr.cap.max_recv_wr == 0 && srq.is_none() {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "a QP needs a send or a receive queue",
            ));
        }
        if attr.cap.max_send_wr > 0 {
            let provider = ctx.provider();
            if let Some(max) = provider.max_inline_data(attr.qp_type.raw()) {
                if attr.cap.max_inline_data > max {
                    return Err(Error::invalid_as(
                        InvalidKind::TooLarge,
                        format!(
                            "max_inline_data {} is above the {} device's limit of {max} bytes \
                             for a {:?} QP",
                            attr.cap.max_inline_data,
                            provider.name(),
                            attr.qp_type
                        ),
                    ));
                }
            }
        }
        let event_id = EventId::new(ObjectKind::Qp);
        let (max_recv_wr, max_recv_sge) = match srq {
            Some(_) => (0, 0),
            None => (attr.cap.max_recv_wr, attr.cap.max_recv_sge),
        };
        let cmd = CreateQp {
            response: 0,
            user_handle: event_id.raw(),
            pd_handle: self.handle(),
            send_cq_handle: attr.send_cq.inner().handle,
            recv_cq_handle: attr.recv_cq.inner().handle,
            srq_handle: srq.map_or(0, |s| s.inner().handle),
            max_send_wr: attr.cap.max_send_wr,
            max_recv_wr,
            max_send_sge: attr.cap.max_send_sge,
            max_recv_sge,
            max_inline_data: attr.cap.max_inline_data,
            sq_sig_all: attr.sq_sig_all as u8,
            qp_type: attr.qp_type.raw(),
            is_srq: srq.is_some() as u8,
            reserved: 0,
        };
        let shared = |cq: &Cq| cq.inner().shared.clone();
        // Complete or nothing: the provider destroys the kernel QP itself
        // if it fails after creating it.
        let (r, sq, rq) = ctx.provider().create_qp(
            &cmd,
            ex_flags.map(|f| f.bits()),
            &shared(attr.send_cq),
            &shared(attr.recv_cq),
            srq.map(|s| s.ring()),
            self.allocator(),
        )?;
        let mut qp = self.new_qp(attr, srq, event_id, r, sq, rq);
        if attr.qp_type == QpType::Rc {
            qp.allow_capability_ops();
        }
        Ok(qp)
    }

    fn new_qp(
        &self,
        attr: &QpInitAttr<'_>,
        srq: Option<&crate::Srq>,
        event_id: EventId,
        r: CreateQpResp,
        sq: crate::provider::SendQueue,
        rq: Option<crate::provider::RecvQueue>,
    ) -> Qp {
        Qp {
            pd: self.clone(),
            handle: r.qp_handle,
            qpn: r.qpn,
            qp_type: attr.qp_type,
            cap: QpCap {
                max_send_wr: r.max_send_wr,
                max_recv_wr: r.max_recv_wr,
                max_send_sge: r.max_send_sge,
                max_recv_sge: r.max_recv_sge,
                max_inline_data: r.max_inline_data,
            },
            sq: Leakable::new(sq),
            rq: Leakable::new(rq),
            state: QpState::Reset,
            _send_cq: attr.send_cq.inner().clone(),
            _recv_cq: attr.recv_cq.inner().clone(),
            srq: srq.map(|s| s.inner().clone()),
            event_id,
            destroyed: false,
        }
    }
}

/// The operations a device may lack, each with the provider feature that
/// builds it and the `device_cap_flags_ex` bits that offer it (either).
const CAPABILITY_OPS: [(Feature, WrOpcode, u64); 2] = [
    (
        Feature::AtomicWrite,
        WrOpcode::AtomicWrite,
        device_cap_ex::ATOMIC_WRITE,
    ),
    (
        Feature::Flush,
        WrOpcode::Flush,
        device_cap_ex::FLUSH_GLOBAL | device_cap_ex::FLUSH_PERSISTENT,
    ),
];

impl crate::Context {
    /// Whether an RC QP of this context accepts send requests of `op`
    /// as far as the device and its provider go: ATOMIC_WRITE and FLUSH
    /// only where the provider builds them and the device offers them
    /// (its `device_cap_flags_ex`); LOCAL_INV, SEND_WITH_INV and BIND_MW
    /// only where the provider has memory windows (mlx5 not yet); every
    /// other opcode always (the QP's type still decides, at post).
    pub fn offers(&self, op: WrOpcode) -> bool {
        let provider = self.provider();
        match op {
            WrOpcode::LocalInv | WrOpcode::SendWithInv | WrOpcode::BindMw => {
                provider.supports(Feature::MemoryWindows)
            }
            _ => CAPABILITY_OPS.iter().find(|(_, o, _)| *o == op).is_none_or(
                |&(feature, _, bits)| {
                    provider.supports(feature) && self.caps().cap_flags_ex & bits != 0
                },
            ),
        }
    }
}

impl Qp {
    /// Lets the send queue accept ATOMIC_WRITE and FLUSH where the provider
    /// builds them and the device offers them (the capabilities are asked
    /// once per context, on the first RC QP of a provider that has them).
    fn allow_capability_ops(&mut self) {
        let ctx = self.pd.context();
        for (_, op, _) in CAPABILITY_OPS {
            if ctx.offers(op) {
                self.sq.allow(op);
            }
        }
    }
}

/// The name of a MODIFY_QP from `from` to `to` in its errors
/// (`"modify_qp INIT -> RTR"`; without a new state, `"modify_qp RTS"`).
pub(crate) fn modify_op(from: QpState, to: Option<QpState>) -> &'static str {
    macro_rules! towards {
        ($from:literal) => {
            match to {
                None => concat!("modify_qp ", $from),
                Some(QpState::Reset) => concat!("modify_qp ", $from, " -> RESET"),
                Some(QpState::Init) => concat!("modify_qp ", $from, " -> INIT"),
                Some(QpState::Rtr) => concat!("modify_qp ", $from, " -> RTR"),
                Some(QpState::Rts) => concat!("modify_qp ", $from, " -> RTS"),
                Some(QpState::Sqd) => concat!("modify_qp ", $from, " -> SQD"),
                Some(QpState::Sqe) => concat!("modify_qp ", $from, " -> SQE"),
                Some(QpState::Err) => concat!("modify_qp ", $from, " -> ERR"),
            }
        };
    }
    match from {
        QpState::Reset => towards!("RESET"),
        QpState::Init => towards!("INIT"),
        QpState::Rtr => towards!("RTR"),
        QpState::Rts => towards!("RTS"),
        QpState::Sqd => towards!("SQD"),
        QpState::Sqe => towards!("SQE"),
        QpState::Err => towards!("ERR"),
    }
}

/// DESTROY_QP; whether the QP is gone ([`crate::event::destroyed`]).
fn destroy_qp(ctx: &crate::Context, handle: u32) -> bool {
    crate::event::destroyed(destroy_qp_cmd(ctx, handle))
}

/// DESTROY_QP, the kernel's answer as it is.
fn destroy_qp_cmd(ctx: &crate::Context, handle: u32) -> std::result::Result<(), rverbs_abi::Errno> {
    let cmd = DestroyQp {
        response: 0,
        qp_handle: handle,
        reserved: 0,
    };
    exec(ctx.fd(), &cmd, &mut []).map(drop)
}

/// A destroy the kernel refused ([`Qp::destroy`]): the error, and the QP,
/// still alive and usable. Converts into [`Error`] (dropping the QP, which
/// tries to destroy it once more and leaks its rings if that fails too),
/// so `?` works in functions returning [`Result`].
pub struct DestroyQpError {
    /// Why the kernel refused.
    pub error: Error,
    /// The queue pair, not destroyed.
    pub qp: Qp,
}

impl fmt::Debug for DestroyQpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DestroyQpError")
            .field("error", &self.error)
            .field("qp", &self.qp)
            .finish()
    }
}

impl fmt::Display for DestroyQpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for DestroyQpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<DestroyQpError> for Error {
    fn from(e: DestroyQpError) -> Error {
        e.error
    }
}

impl Qp {
    /// The kernel's handle for the QP (`ibv_qp.handle`).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// What async events name this QP by.
    pub fn event_id(&self) -> EventId {
        self.event_id
    }

    /// Whether the QP takes its receives from an SRQ.
    pub fn uses_srq(&self) -> bool {
        self.srq.is_some()
    }

    /// Transport type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// What can be posted: send and receive requests outstanding at once
    /// (0 receives on a QP that uses an SRQ), SGEs per request, inline
    /// bytes. These are the limits [`Qp::post_send`] and [`Qp::post_recv`]
    /// enforce, and what [`Qp::query`] reports too.
    ///
    /// They are what the kernel granted, which may exceed what was asked
    /// for, and differs between kernels for the same request (64 sends
    /// asked: 64 on Linux 6.1 and on mlx5, 127 on rxe from 6.12): size
    /// signaling periods and batches from this, not from the request
    /// ([`SignalEvery::for_qp`](crate::SignalEvery::for_qp) and
    /// [`BatchSignal::Every`](crate::BatchSignal::Every) do).
    pub fn cap(&self) -> QpCap {
        QpCap {
            max_send_wr: self.sq.capacity(),
            max_recv_wr: self.rq.as_ref().map_or(0, |rq| rq.capacity()),
            ..self.cap
        }
    }

    /// The state this handle last moved the QP to, known without a system
    /// call. The device moves a QP to [`QpState::Err`] (or `Sqe`) on its
    /// own when a request fails: this does not see that. The first sign is
    /// a completion with an error status ([`crate::Wc::is_success`] false,
    /// the QP named by [`crate::Wc::qp_num`]); after it the other
    /// outstanding requests complete with [`crate::WcStatus::WR_FLUSH_ERR`].
    /// [`Qp::query`] asks the kernel for the real state (one system call:
    /// fine after an error completion, not per request).
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The PD.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// The QP's enhanced connection establishment options
    /// (`ibv_query_ece`): on mlx5 NVIDIA's vendor id and the options the
    /// device granted at creation; [`Error::Unsupported`] where the
    /// provider has no ECE (rxe).
    pub fn query_ece(&self) -> Result<Ece> {
        self.sq.query_ece().ok_or_else(|| self.no_ece())
    }

    /// Asks for `ece` on the QP's next connection (`ibv_set_ece`):
    /// [`Error::InvalidArgument`] for options of another vendor or with
    /// extensions, [`Error::Unsupported`] where the device or provider does
    /// not negotiate them (rxe; mlx5 here: options are not sent with
    /// MODIFY_QP yet, which is also libmlx5's answer on a device without
    /// ECE) and for a vendor id of 0, as libibverbs answers.
    pub fn set_ece(&mut self, ece: Ece) -> Result<()> {
        if ece.vendor_id == 0 {
            return Err(self.no_ece());
        }
        match self.sq.set_ece(&ece) {
            Ok(()) => Ok(()),
            Err(Errno::EINVAL) => Err(Error::invalid_as(
                InvalidKind::Foreign,
                format!(
                    "ECE options of vendor {:#06x} (comp_mask {:#x}) are not this device's",
                    ece.vendor_id, ece.comp_mask
                ),
            )),
            Err(_) => Err(self.no_ece()),
        }
    }

    fn no_ece(&self) -> Error {
        Error::Unsupported {
            provider: self.pd.context().provider().name(),
            feature: Feature::Ece,
        }
    }

    /// Applies `attr` (MODIFY_QP). An invalid transition or missing
    /// attribute is refused by the kernel with its errno (EINVAL); the
    /// error's `op` names the transition asked for, from the state this
    /// QP was last moved to (`"modify_qp INIT -> RTR"`; `"modify_qp RTS"`
    /// for attributes without a state change).
    pub fn modify(&mut self, attr: &QpAttr) -> Result<()> {
        let cmd = attr.encode(self.handle)?;
        if let Some(access) = attr.qp_access_flags {
            crate::mr::check_offered(access, || self.pd.context().caps())?;
        }
        // A UD message must fit the port's active MTU: learn it when the
        // port is set, so post_send can refuse longer ones.
        let ud_mtu = match (self.qp_type, attr.port_num) {
            (QpType::Ud, Some(port)) => self
                .pd
                .context()
                .query_port(port)
                .ok()
                .and_then(|p| p.active_mtu()),
            _ => None,
        };
        exec(self.pd.context().fd(), &cmd, &mut [])
            .map_err(Error::kernel(modify_op(self.state, attr.qp_state)))?;
        if let Some(s) = attr.qp_state {
            self.state = s;
            // The queues follow the state (mlx5's: RESET clears them).
            self.sq.set_state(s);
            if let Some(rq) = &mut *self.rq {
                rq.set_state(s);
            }
        }
        if let Some(mtu) = ud_mtu {
            self.sq.set_ud_mtu(mtu.bytes());
        }
        Ok(())
    }

    /// Queries the kernel's view of the QP: its attributes (every field
    /// `Some`; `qp_state` is the real state, error included), its
    /// capacities, and whether every send is signaled.
    ///
    /// The capacities are [`Qp::cap`]'s, what can be posted, not the
    /// kernel's raw numbers: rxe's kernel reports the depth of its ring
    /// (e.g. 127 for 64 granted), of which only the granted part is used,
    /// and with mlx5 the send queue lives in user space and the kernel
    /// reports none (libmlx5 fills them in the same way).
    pub fn query(&self) -> Result<(QpAttr, QpCap, bool)> {
        let cmd = QueryQp {
            response: 0,
            qp_handle: self.handle,
            attr_mask: 0x1f_ffff,
        };
        let r = exec(self.pd.context().fd(), &cmd, &mut []).map_err(Error::kernel("query_qp"))?;
        let attr = QpAttr {
            qp_state: QpState::from_raw(r.qp_state),
            cur_qp_state: QpState::from_raw(r.cur_qp_state),
            path_mtu: Mtu::from_raw(r.path_mtu),
            qkey: Some(r.qkey),
            rq_psn: Some(r.rq_psn),
            sq_psn: Some(r.sq_psn),
            dest_qp_num: Some(r.dest_qp_num),
            qp_access_flags: Some(AccessFlags::from_bits_retain(r.qp_access_flags)),
            pkey_index: Some(r.pkey_index),
            port_num: Some(r.port_num),
            ah_attr: Some(AhAttr::from_dest(&r.dest)),
            max_rd_atomic: Some(r.max_rd_atomic),
            max_dest_rd_atomic: Some(r.max_dest_rd_atomic),
            min_rnr_timer: Some(r.min_rnr_timer),
            timeout: Some(r.timeout),
            retry_cnt: Some(r.retry_cnt),
            rnr_retry: Some(r.rnr_retry),
        };
        Ok((attr, self.cap(), r.sq_sig_all != 0))
    }
}

impl Qp {
    /// Attaches this UD QP to the multicast group `gid` (ATTACH_MCAST,
    /// `ibv_attach_mcast`): datagrams sent to the group (destination QPN
    /// 0xFFFFFF, the group's GID in the GRH) are delivered to it, as to
    /// every QP attached. `lid` is the group's multicast LID on InfiniBand
    /// (the `dlid` of the join's address vector); on RoCE the kernel
    /// ignores it. Attaching twice to the same group is not an error.
    /// The kernel detaches the QP from every group when it is destroyed.
    ///
    /// On RoCE the device filters on the group's Ethernet address, but the
    /// host's IP stack takes the datagrams only if the netdev has joined
    /// the IP group too: a join through the rdma_cm
    /// (`rverbs_cm::McastId::join`) does both.
    ///
    /// Errors, before any command ([`Error::InvalidArgument`]): a QP that
    /// is not UD ([`InvalidKind::WrongUse`]), a GID that is not multicast
    /// ([`Gid::is_multicast`](crate::Gid::is_multicast)); from the kernel
    /// ([`Error::Kernel`]): EOPNOTSUPP where the device has no multicast,
    /// ENOMEM past its group or attachment limits.
    pub fn attach_mcast(&self, gid: &crate::Gid, lid: u16) -> Result<()> {
        self.check_mcast(gid, "attach")?;
        let cmd = AttachMcast {
            gid: gid.0,
            qp_handle: self.handle,
            mlid: lid,
            reserved: 0,
        };
        exec(self.pd.context().fd(), &cmd, &mut []).map_err(Error::kernel("attach_mcast"))?;
        Ok(())
    }

    /// Detaches this UD QP from the multicast group `gid` (DETACH_MCAST,
    /// `ibv_detach_mcast`), undoing [`Qp::attach_mcast`]. Errors as
    /// [`Qp::attach_mcast`]'s before the command; the kernel answers
    /// EINVAL for a group the QP is not attached to (with this `lid`).
    pub fn detach_mcast(&self, gid: &crate::Gid, lid: u16) -> Result<()> {
        self.check_mcast(gid, "detach")?;
        let cmd = DetachMcast {
            gid: gid.0,
            qp_handle: self.handle,
            mlid: lid,
            reserved: 0,
        };
        exec(self.pd.context().fd(), &cmd, &mut []).map_err(Error::kernel("detach_mcast"))?;
        Ok(())
    }

    /// What the kernel refuses with EINVAL for every attach and detach: a
    /// QP other than UD, a GID outside the multicast ranges.
    fn check_mcast(&self, gid: &crate::Gid, what: &str) -> Result<()> {
        if self.qp_type != QpType::Ud {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                format!(
                    "only UD QPs join multicast groups; cannot {what} a {:?} QP",
                    self.qp_type
                ),
            ));
        }
        if !gid.is_multicast() {
            return Err(Error::invalid_as(
                InvalidKind::Other,
                format!("cannot {what} {gid}: not a multicast GID"),
            ));
        }
        Ok(())
    }
}

impl Qp {
    /// Destroys the QP and reports the kernel's answer, where dropping it
    /// cannot: on a refusal the QP comes back in the error, alive and
    /// usable, its rings still the device's. The kernel refuses, with
    /// `EBUSY`, to destroy a QP still attached to a multicast group
    /// ([`Qp::attach_mcast`]): detach it, then destroy it again. A device
    /// that is gone (`EIO`, `ENODEV`) took the QP with it: that is `Ok`.
    /// Outstanding work is discarded, as when it is dropped.
    #[allow(clippy::result_large_err)]
    pub fn destroy(mut self) -> std::result::Result<(), DestroyQpError> {
        match destroy_qp_cmd(self.pd.context(), self.handle) {
            Err(errno) if !crate::event::destroyed::<()>(Err(errno)) => Err(DestroyQpError {
                error: Error::Kernel {
                    op: "destroy_qp",
                    errno,
                },
                qp: self,
            }),
            _ => {
                // Gone: dropping frees the rings, with no second command.
                self.destroyed = true;
                Ok(())
            }
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        if self.destroyed {
            return;
        }
        // The rings are unmapped (rxe) or freed (mlx5) only once the kernel
        // has destroyed the QP: until then the device may still read and
        // write them, so a refused destroy leaks them instead.
        if !destroy_qp(self.pd.context(), self.handle) {
            self.sq.leak();
            self.rq.leak();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modify_error_names_its_transition() {
        assert_eq!(
            modify_op(QpState::Init, Some(QpState::Rtr)),
            "modify_qp INIT -> RTR"
        );
        assert_eq!(
            modify_op(QpState::Rtr, Some(QpState::Rts)),
            "modify_qp RTR -> RTS"
        );
        assert_eq!(
            modify_op(QpState::Rts, Some(QpState::Err)),
            "modify_qp RTS -> ERR"
        );
        assert_eq!(modify_op(QpState::Rts, None), "modify_qp RTS");
        let e = Error::Kernel {
            op: modify_op(QpState::Init, Some(QpState::Rtr)),
            errno: rverbs_abi::Errno::ETIMEDOUT,
        };
        assert!(e.to_string().starts_with("modify_qp INIT -> RTR: "), "{e}");
    }
}
