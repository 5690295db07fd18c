//! Queue pairs: creation, the RESET -> INIT -> RTR -> RTS state machine,
//! query, posting work requests, and [`Endpoint`], what two peers exchange
//! out of band to connect.

use std::fmt;
use std::sync::Arc;

use rverbs_abi::cmd::{nr, write_cmd, NoResp};
pub use rverbs_abi::qp::QpCreateFlags;
use rverbs_abi::qp::{
    attr_mask as m, qp_type, CreateQp, CreateQpResp, DestroyQp, DestroyQpResp, ModifyQp, QpDest,
    QueryQp, QueryQpResp,
};
use rverbs_provider::wr::{RecvWr, SendWr};

use crate::cq::{Cq, CqInner};
use crate::error::{Error, PostError, Result};
use crate::event::{EventId, ObjectKind};
use crate::gid::Gid;
use crate::mr::AccessFlags;
use crate::pd::Pd;

/// Transport service type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
}

impl QpType {
    fn raw(self) -> u8 {
        match self {
            QpType::Rc => qp_type::RC,
            QpType::Uc => qp_type::UC,
            QpType::Ud => qp_type::UD,
        }
    }
}

pub use rverbs_provider::QpState;
use rverbs_provider::{RecvQueue as _, SendQueue as _};

/// Path MTU (`enum ib_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    /// From the kernel's encoding (1..=5).
    pub fn from_raw(v: u8) -> Option<Mtu> {
        Some(match v {
            1 => Mtu::Mtu256,
            2 => Mtu::Mtu512,
            3 => Mtu::Mtu1024,
            4 => Mtu::Mtu2048,
            5 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// From a byte count (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(n: u32) -> Option<Mtu> {
        Some(match n {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
    /// In bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// Queue capacities, requested at creation and granted by the kernel.
///
/// [`QpCap::default`]: 64 send and 64 receive work requests, 1 SGE each
/// way, no inline data. What a QP was granted ([`Qp::cap`], also what
/// [`Qp::query`] reports) is what can actually be posted: requests
/// outstanding at once, SGEs per request, inline bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> Self {
        QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

/// What [`Pd::create_qp`] needs. Start from [`QpInitAttr::new`] (the
/// defaults: [`QpCap::default`], only signaled sends complete), or write
/// every field.
///
/// ```no_run
/// # fn f(pd: &rverbs::Pd, cq: &rverbs::Cq) -> rverbs::Result<()> {
/// use rverbs::{QpCap, QpInitAttr, QpType};
/// let qp = pd.create_qp(
///     &QpInitAttr::new(QpType::Rc, cq).cap(QpCap { max_send_wr: 256, ..QpCap::default() }),
/// )?;
/// # let _ = qp; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct QpInitAttr<'a> {
    /// Completions of send WRs.
    pub send_cq: &'a Cq,
    /// Completions of receive WRs.
    pub recv_cq: &'a Cq,
    /// Transport type.
    pub qp_type: QpType,
    /// Requested capacities.
    pub cap: QpCap,
    /// Generate a completion for every send WR, signaled or not.
    pub sq_sig_all: bool,
}

impl<'a> QpInitAttr<'a> {
    /// A QP of type `qp_type` whose sends and receives complete on `cq`,
    /// with [`QpCap::default`] capacities and `sq_sig_all` off.
    pub fn new(qp_type: QpType, cq: &'a Cq) -> Self {
        QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            qp_type,
            cap: QpCap::default(),
            sq_sig_all: false,
        }
    }

    /// Receive completions go to `cq` instead.
    pub fn recv_cq(mut self, cq: &'a Cq) -> Self {
        self.recv_cq = cq;
        self
    }

    /// Requested capacities.
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }

    /// Every send completes, signaled or not.
    pub fn sq_sig_all(mut self, on: bool) -> Self {
        self.sq_sig_all = on;
        self
    }
}

/// Global routing header fields of an address (RoCE needs them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Index of the local GID to send from.
    pub sgid_index: u8,
    /// Hop limit (TTL).
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// An address vector (`ibv_ah_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    /// Destination LID (InfiniBand; 0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// Local port.
    pub port_num: u8,
    /// The GRH, required on RoCE.
    pub grh: Option<GlobalRoute>,
}

impl AhAttr {
    fn to_dest(self) -> QpDest {
        let g = self.grh.unwrap_or_default();
        QpDest {
            dgid: g.dgid.0,
            flow_label: g.flow_label,
            dlid: self.dlid,
            reserved: 0,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            is_global: self.grh.is_some() as u8,
            port_num: self.port_num,
        }
    }
    fn from_dest(d: &QpDest) -> AhAttr {
        AhAttr {
            dlid: d.dlid,
            sl: d.sl,
            src_path_bits: d.src_path_bits,
            static_rate: d.static_rate,
            port_num: d.port_num,
            grh: (d.is_global != 0).then_some(GlobalRoute {
                dgid: Gid(d.dgid),
                flow_label: d.flow_label,
                sgid_index: d.sgid_index,
                hop_limit: d.hop_limit,
                traffic_class: d.traffic_class,
            }),
        }
    }
}

/// QP attributes for [`Qp::modify`]: every `Some` field is applied (and its
/// bit set in the kernel's attribute mask). [`Qp::query`] returns them all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: Option<QpState>,
    /// Assumed current state.
    pub cur_qp_state: Option<QpState>,
    /// Path MTU (RTR).
    pub path_mtu: Option<Mtu>,
    /// Q_Key (UD, INIT).
    pub qkey: Option<u32>,
    /// Receive PSN, 24 bits (RTR).
    pub rq_psn: Option<u32>,
    /// Send PSN, 24 bits (RTS).
    pub sq_psn: Option<u32>,
    /// Remote QP number (RTR).
    pub dest_qp_num: Option<u32>,
    /// Remote access allowed on this QP (INIT).
    pub qp_access_flags: Option<AccessFlags>,
    /// P_Key index (INIT).
    pub pkey_index: Option<u16>,
    /// Port (INIT).
    pub port_num: Option<u8>,
    /// Path to the peer (RTR).
    pub ah_attr: Option<AhAttr>,
    /// Outstanding RDMA READs/atomics as initiator (RTS).
    pub max_rd_atomic: Option<u8>,
    /// Outstanding RDMA READs/atomics as target (RTR).
    pub max_dest_rd_atomic: Option<u8>,
    /// RNR NAK timer code, 0..=31 (RTR).
    pub min_rnr_timer: Option<u8>,
    /// Local ACK timeout code, 0..=31: 4.096 us * 2^timeout (RTS).
    pub timeout: Option<u8>,
    /// Transport retries, 0..=7 (RTS).
    pub retry_cnt: Option<u8>,
    /// RNR retries, 0..=7, 7 = infinite (RTS).
    pub rnr_retry: Option<u8>,
}

fn limit(name: &str, v: Option<u32>, max: u32) -> Result<()> {
    match v {
        Some(x) if x > max => Err(Error::invalid(format!("{name} {x} exceeds {max}"))),
        _ => Ok(()),
    }
}

impl QpAttr {
    fn encode(&self, qp_handle: u32) -> Result<ModifyQp> {
        limit("rq_psn", self.rq_psn, PSN_MAX)?;
        limit("sq_psn", self.sq_psn, PSN_MAX)?;
        limit("dest_qp_num", self.dest_qp_num, QPN_MAX)?;
        limit("min_rnr_timer", self.min_rnr_timer.map(u32::from), 31)?;
        limit("timeout", self.timeout.map(u32::from), 31)?;
        limit("retry_cnt", self.retry_cnt.map(u32::from), 7)?;
        limit("rnr_retry", self.rnr_retry.map(u32::from), 7)?;
        let mut c = ModifyQp {
            qp_handle,
            ..Default::default()
        };
        let mut mask = 0;
        macro_rules! set {
            ($field:ident, $bit:expr, $dst:ident, $conv:expr) => {
                if let Some(v) = self.$field {
                    c.$dst = $conv(v);
                    mask |= $bit;
                }
            };
        }
        set!(qp_state, m::STATE, qp_state, QpState::raw);
        set!(cur_qp_state, m::CUR_STATE, cur_qp_state, QpState::raw);
        set!(path_mtu, m::PATH_MTU, path_mtu, |v: Mtu| v as u8);
        set!(qkey, m::QKEY, qkey, |v| v);
        set!(rq_psn, m::RQ_PSN, rq_psn, |v| v);
        set!(sq_psn, m::SQ_PSN, sq_psn, |v| v);
        set!(dest_qp_num, m::DEST_QPN, dest_qp_num, |v| v);
        set!(
            qp_access_flags,
            m::ACCESS_FLAGS,
            qp_access_flags,
            |v: AccessFlags| v.bits()
        );
        set!(pkey_index, m::PKEY_INDEX, pkey_index, |v| v);
        set!(port_num, m::PORT, port_num, |v| v);
        set!(ah_attr, m::AV, dest, AhAttr::to_dest);
        set!(max_rd_atomic, m::MAX_QP_RD_ATOMIC, max_rd_atomic, |v| v);
        set!(
            max_dest_rd_atomic,
            m::MAX_DEST_RD_ATOMIC,
            max_dest_rd_atomic,
            |v| v
        );
        set!(min_rnr_timer, m::MIN_RNR_TIMER, min_rnr_timer, |v| v);
        set!(timeout, m::TIMEOUT, timeout, |v| v);
        set!(retry_cnt, m::RETRY_CNT, retry_cnt, |v| v);
        set!(rnr_retry, m::RNR_RETRY, rnr_retry, |v| v);
        c.attr_mask = mask;
        Ok(c)
    }
}

/// Connection parameters for [`Qp::connect`] (and [`Qp::to_init`],
/// [`Qp::to_rtr`], [`Qp::to_rts`]): the knobs the INIT, RTR and RTS
/// transitions take.
///
/// [`ConnectOpts::default`] follows `ibv_rc_pingpong`: port 1, GID index 0 (set `sgid_index`, e.g. from
/// [`crate::Context::default_gid_index`], on RoCE), MTU 1024, send PSN 0,
/// SL 0, hop limit 1, 1 outstanding RDMA READ/atomic each way, RNR timer
/// code 12 (0.64 ms), ACK timeout code 14 (about 67 ms), 7 transport
/// retries, 7 RNR retries (infinite).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOpts {
    /// Local port.
    pub port_num: u8,
    /// Local GID index to send from (RoCE: the RoCE v2 IPv4 GID is typical).
    pub sgid_index: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Our send PSN (the peer's `rq_psn`), 24 bits.
    pub sq_psn: u32,
    /// Service level.
    pub sl: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Outstanding RDMA READs/atomics as target.
    pub max_dest_rd_atomic: u8,
    /// Outstanding RDMA READs/atomics as initiator.
    pub max_rd_atomic: u8,
    /// RNR NAK timer code, 0..=31.
    pub min_rnr_timer: u8,
    /// Local ACK timeout code, 0..=31.
    pub timeout: u8,
    /// Transport retries, 0..=7.
    pub retry_cnt: u8,
    /// RNR retries, 0..=7 (7 = infinite).
    pub rnr_retry: u8,
}

impl ConnectOpts {
    /// Checks every field against its range (what the kernel would refuse
    /// only midway through [`Qp::connect`]).
    pub fn validate(&self) -> Result<()> {
        if self.port_num == 0 {
            return Err(Error::invalid("port_num 0: ports are numbered from 1"));
        }
        limit("sq_psn", Some(self.sq_psn), PSN_MAX)?;
        limit("min_rnr_timer", Some(self.min_rnr_timer.into()), 31)?;
        limit("timeout", Some(self.timeout.into()), 31)?;
        limit("retry_cnt", Some(self.retry_cnt.into()), 7)?;
        limit("rnr_retry", Some(self.rnr_retry.into()), 7)?;
        Ok(())
    }
}

/// The largest PSN (24 bits).
const PSN_MAX: u32 = 0xff_ffff;
/// The largest QP number (24 bits).
const QPN_MAX: u32 = 0xff_ffff;

impl Default for ConnectOpts {
    fn default() -> Self {
        ConnectOpts {
            port_num: 1,
            sgid_index: 0,
            path_mtu: Mtu::Mtu1024,
            sq_psn: 0,
            sl: 0,
            hop_limit: 1,
            max_dest_rd_atomic: 1,
            max_rd_atomic: 1,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

/// What a peer needs to connect to a QP, exchanged out of band (TCP, a
/// file, a key-value store). [`Endpoint::to_bytes`] is a fixed 26-byte form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// The PSN the QP will send from (the peer's `rq_psn`).
    pub psn: u32,
    /// Port LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Port GID (RoCE).
    pub gid: Gid,
}

impl Endpoint {
    /// Size of [`Endpoint::to_bytes`]'s output.
    pub const WIRE_LEN: usize = 26;

    /// Encodes as qpn, psn (u32 BE), lid (u16 BE), gid (16 bytes).
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        b[..4].copy_from_slice(&self.qpn.to_be_bytes());
        b[4..8].copy_from_slice(&self.psn.to_be_bytes());
        b[8..10].copy_from_slice(&self.lid.to_be_bytes());
        b[10..].copy_from_slice(&self.gid.0);
        b
    }

    /// Checks the fields a peer controls: QPN and PSN are 24-bit.
    pub fn validate(&self) -> Result<()> {
        limit("peer QPN", Some(self.qpn), QPN_MAX)?;
        limit("peer PSN", Some(self.psn), PSN_MAX)
    }

    /// Decodes [`Endpoint::to_bytes`]'s form.
    pub fn from_bytes(b: &[u8; Self::WIRE_LEN]) -> Endpoint {
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[10..]);
        Endpoint {
            qpn: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            psn: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            lid: u16::from_be_bytes([b[8], b[9]]),
            gid: Gid(gid),
        }
    }
}

/// Marks every Nth send work request signaled, the "selective
/// signaling" pattern that keeps an mlx5 send queue from filling up with
/// unsignaled requests (see [`Qp::post_send`]). A counter: no allocation,
/// no system call.
///
/// ```no_run
/// # fn f(qp: &mut rverbs::Qp, sge: &[rverbs::Sge; 1]) -> rverbs::Result<()> {
/// let mut sig = rverbs::SignalEvery::for_qp(qp); // every max_send_wr / 2
/// for i in 0..1000 {
///     qp.post_send(&[sig.mark(rverbs::SendWr::send(i, sge))])?;
///     // ... poll the CQ now and then ...
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalEvery {
    every: u32,
    count: u32,
}

impl SignalEvery {
    /// Signals one request in every `n` (the `n`th, `2n`th, ...). `n` is
    /// at least 1 (0 is taken as 1: every request signaled).
    pub fn new(n: u32) -> SignalEvery {
        SignalEvery {
            every: n.max(1),
            count: 0,
        }
    }

    /// Signals one request in every half of `qp`'s send queue
    /// (`max_send_wr / 2`, at least 1), so that the slots of one half are
    /// freed while the other half fills.
    pub fn for_qp(qp: &Qp) -> SignalEvery {
        SignalEvery::new(qp.cap().max_send_wr / 2)
    }

    /// The period.
    pub fn every(&self) -> u32 {
        self.every
    }

    /// Counts one request: `true` if it must be signaled.
    #[inline]
    pub fn next_signaled(&mut self) -> bool {
        self.count += 1;
        if self.count >= self.every {
            self.count = 0;
            true
        } else {
            false
        }
    }

    /// Counts `wr` and returns it, signaled if its turn has come (a request
    /// already signaled stays so, and restarts the count).
    #[inline]
    pub fn mark<'a>(&mut self, wr: SendWr<'a>) -> SendWr<'a> {
        if wr
            .send_flags()
            .contains(rverbs_provider::wr::SendFlags::SIGNALED)
        {
            self.count = 0;
            return wr;
        }
        if self.next_signaled() {
            wr.signaled()
        } else {
            wr
        }
    }
}

/// A queue pair. Posting needs `&mut`: one poster per QP at a time, no lock
/// on the data path. Dropping it destroys the QP (outstanding work is
/// discarded by the kernel).
pub struct Qp {
    pd: Pd,
    handle: u32,
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    sq: crate::provider::SendQueue,
    rq: Option<crate::provider::RecvQueue>,
    state: QpState,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    /// The SRQ the QP receives from: its kernel object outlives the QP.
    srq: Option<Arc<crate::srq::SrqInner>>,
    /// The `user_handle` async events name this QP by.
    event_id: EventId,
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
                return Err(Error::invalid("the SRQ belongs to another device context"));
            }
        }
        for cq in [attr.send_cq, attr.recv_cq] {
            if !cq.inner().ctx.same(ctx) {
                return Err(Error::invalid("the CQ belongs to another device context"));
            }
        }
        if attr.cap.max_send_wr == 0 && attr.cap.max_recv_wr == 0 && srq.is_none() {
            return Err(Error::invalid("a QP needs a send or a receive queue"));
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
        )?;
        Ok(self.new_qp(attr, srq, event_id, r, sq, rq))
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
            sq,
            rq,
            state: QpState::Reset,
            _send_cq: attr.send_cq.inner().clone(),
            _recv_cq: attr.recv_cq.inner().clone(),
            srq: srq.map(|s| s.inner().clone()),
            event_id,
        }
    }
}

fn destroy_qp(ctx: &crate::Context, handle: u32) {
    let cmd = DestroyQp {
        response: 0,
        qp_handle: handle,
        reserved: 0,
    };
    // SAFETY: DESTROY_QP carries no user address but its response pointer,
    // which write_cmd supplies.
    let _ = unsafe { write_cmd::<_, DestroyQpResp>(ctx.fd(), nr::DESTROY_QP, &cmd, &[], &mut []) };
}

impl Qp {
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

    /// Applies `attr` (MODIFY_QP). An invalid transition or missing
    /// attribute is refused by the kernel with its errno (EINVAL).
    pub fn modify(&mut self, attr: &QpAttr) -> Result<()> {
        let cmd = attr.encode(self.handle)?;
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
        // SAFETY: MODIFY_QP carries attributes and handles, no user address.
        unsafe {
            write_cmd::<_, NoResp>(self.pd.context().fd(), nr::MODIFY_QP, &cmd, &[], &mut [])
        }
        .map_err(Error::kernel("modify_qp"))?;
        if let Some(s) = attr.qp_state {
            self.state = s;
            // The queues follow the state (mlx5's: RESET clears them).
            self.sq.set_state(s);
            if let Some(rq) = &mut self.rq {
                rq.set_state(s);
            }
        }
        if let Some(mtu) = ud_mtu {
            self.sq.set_ud_mtu(mtu.bytes());
        }
        Ok(())
    }

    /// Brings a UD QP from RESET (or wherever it is on the way) to RTS on
    /// `port_num` (P_Key index 0), receiving datagrams that present `qkey`
    /// and sending from PSN `sq_psn`. UD needs no remote end: each send
    /// names its destination (see [`crate::ah`]).
    pub fn ready_ud(&mut self, port_num: u8, qkey: u32, sq_psn: u32) -> Result<()> {
        if self.qp_type != QpType::Ud {
            return Err(Error::invalid(format!(
                "ready_ud on a {:?} QP; connected QPs use connect()",
                self.qp_type
            )));
        }
        if self.state == QpState::Reset {
            self.modify(&QpAttr {
                qp_state: Some(QpState::Init),
                pkey_index: Some(0),
                port_num: Some(port_num),
                qkey: Some(qkey),
                ..Default::default()
            })?;
        } else {
            self.set_qkey(qkey)?;
        }
        if self.state == QpState::Init {
            self.modify(&QpAttr {
                qp_state: Some(QpState::Rtr),
                ..Default::default()
            })?;
        }
        if self.state == QpState::Rtr {
            self.modify(&QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(sq_psn),
                ..Default::default()
            })?;
        }
        Ok(())
    }

    /// Sets a UD QP's Q_Key (the key incoming datagrams must present)
    /// without changing its state.
    pub fn set_qkey(&mut self, qkey: u32) -> Result<()> {
        self.modify(&QpAttr {
            qkey: Some(qkey),
            ..Default::default()
        })
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
        // SAFETY: QUERY_QP carries no user address but its response
        // pointer, which write_cmd supplies.
        let r: QueryQpResp =
            unsafe { write_cmd(self.pd.context().fd(), nr::QUERY_QP, &cmd, &[], &mut []) }
                .map_err(Error::kernel("query_qp"))?;
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

    /// RESET -> INIT on `o.port_num`, P_Key index 0, with remote access
    /// `access` (connected QPs; a UD QP gets Q_Key 0x11111111: use
    /// [`Qp::ready_ud`] for UD). Takes the same [`ConnectOpts`] as
    /// [`Qp::to_rtr`] and [`Qp::to_rts`].
    pub fn to_init(&mut self, access: AccessFlags, o: &ConnectOpts) -> Result<()> {
        self.to_init_at(o.port_num, 0, access)
    }

    /// RESET -> INIT with positional arguments, for another P_Key index
    /// (the earlier form of [`Qp::to_init`]).
    pub fn to_init_at(&mut self, port_num: u8, pkey_index: u16, access: AccessFlags) -> Result<()> {
        if port_num == 0 {
            return Err(Error::invalid("port_num 0: ports are numbered from 1"));
        }
        let mut a = QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(pkey_index),
            port_num: Some(port_num),
            ..Default::default()
        };
        match self.qp_type {
            QpType::Ud => a.qkey = Some(0x1111_1111),
            _ => a.qp_access_flags = Some(access),
        }
        self.modify(&a)
    }

    /// INIT -> RTR towards `remote`.
    pub fn to_rtr(&mut self, remote: &Endpoint, o: &ConnectOpts) -> Result<()> {
        remote.validate()?;
        o.validate()?;
        let mut a = QpAttr {
            qp_state: Some(QpState::Rtr),
            ..Default::default()
        };
        if self.qp_type != QpType::Ud {
            a.path_mtu = Some(o.path_mtu);
            a.dest_qp_num = Some(remote.qpn);
            a.rq_psn = Some(remote.psn);
            a.ah_attr = Some(AhAttr {
                dlid: remote.lid,
                sl: o.sl,
                port_num: o.port_num,
                grh: (!remote.gid.is_zero()).then_some(GlobalRoute {
                    dgid: remote.gid,
                    sgid_index: o.sgid_index,
                    hop_limit: o.hop_limit,
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if self.qp_type == QpType::Rc {
            a.max_dest_rd_atomic = Some(o.max_dest_rd_atomic);
            a.min_rnr_timer = Some(o.min_rnr_timer);
        }
        self.modify(&a)
    }

    /// RTR -> RTS, sending from `o.sq_psn`.
    pub fn to_rts(&mut self, o: &ConnectOpts) -> Result<()> {
        let mut a = QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(o.sq_psn),
            ..Default::default()
        };
        if self.qp_type == QpType::Rc {
            a.timeout = Some(o.timeout);
            a.retry_cnt = Some(o.retry_cnt);
            a.rnr_retry = Some(o.rnr_retry);
            a.max_rd_atomic = Some(o.max_rd_atomic);
        }
        self.modify(&a)
    }

    /// RESET -> INIT -> RTR -> RTS in one call, with remote access `access`
    /// (a QP already in INIT, e.g. to post receives first, starts there).
    ///
    /// Everything checkable is checked before the first transition, so a
    /// bad argument leaves the QP where it was: the options' ranges
    /// ([`ConnectOpts::validate`]: 24-bit PSN, timer codes, retry counts,
    /// port), the peer's 24-bit QPN and PSN, the QP's type (connected QPs
    /// only) and state (RESET or INIT), the port and the GID index (asked
    /// of the kernel). Only a refusal the kernel alone can make (e.g. a
    /// path MTU above the port's) can still stop it midway; the error then
    /// names the transition and [`Qp::state`] tells where the QP is.
    pub fn connect(
        &mut self,
        remote: &Endpoint,
        access: AccessFlags,
        o: &ConnectOpts,
    ) -> Result<()> {
        if self.qp_type == QpType::Ud {
            return Err(Error::invalid(
                "connect on a UD QP; UD QPs use ready_ud() and address each send",
            ));
        }
        if !matches!(self.state, QpState::Reset | QpState::Init) {
            return Err(Error::invalid(format!(
                "connect on a QP in {:?}: it must be in RESET or INIT",
                self.state
            )));
        }
        o.validate()?;
        remote.validate()?;
        // The port and GID exist (what RTR would refuse).
        self.pd.context().query_gid(o.port_num, o.sgid_index)?;
        if self.state == QpState::Reset {
            self.to_init_at(o.port_num, 0, access)?;
        }
        self.to_rtr(remote, o)?;
        self.to_rts(o)
    }

    /// This QP's [`Endpoint`] for port `o.port_num`, GID `o.sgid_index` and
    /// send PSN `o.sq_psn`. Refuses options [`Qp::connect`] would refuse
    /// ([`ConnectOpts::validate`]).
    pub fn endpoint(&self, o: &ConnectOpts) -> Result<Endpoint> {
        o.validate()?;
        let ctx = self.pd.context();
        let port = ctx.query_port(o.port_num)?;
        let gid = ctx.query_gid(o.port_num, o.sgid_index)?;
        Ok(Endpoint {
            qpn: self.qpn,
            psn: o.sq_psn,
            lid: port.lid,
            gid,
        })
    }

    /// Posts a chain of send work requests (one doorbell). On error the
    /// requests before [`Error::Post`]'s `index` were posted.
    ///
    /// **Signal regularly.** A send slot is freed only once the request is
    /// known complete. On mlx5 (as with rdma-core's libmlx5) that is known
    /// only from a polled completion, and an unsignaled request produces
    /// none: its slot is freed when a *later signaled* request's
    /// completion is polled. A QP that posts only unsignaled sends fails
    /// with [`PostError::QueueFull`] after [`QpCap::max_send_wr`] posts, for
    /// good. Mark at least one request in every `max_send_wr` signaled and
    /// poll its completion: [`SignalEvery`] counts for you. (rxe frees
    /// slots as its kernel consumes them, signaled or not; portable code
    /// follows the mlx5 rule.)
    #[inline]
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        if matches!(self.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return Err(Error::Post {
                index: 0,
                error: PostError::InvalidState,
            });
        }
        self.sq
            .post(wrs)
            .map_err(|(index, error)| Error::Post { index, error })
    }

    /// Posts a chain of receive work requests. Refused in RESET (the QP
    /// must be at least INIT) and on a QP that uses an SRQ.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        if self.state == QpState::Reset {
            return Err(Error::Post {
                index: 0,
                error: PostError::InvalidState,
            });
        }
        match &mut self.rq {
            Some(rq) => rq.post(wrs),
            None if self.srq.is_some() => Err((0, PostError::UsesSrq)),
            None => Err((0, PostError::InvalidState)),
        }
        .map_err(|(index, error)| Error::Post { index, error })
    }

    /// Send WRs posted and not yet consumed by the device.
    pub fn send_outstanding(&self) -> u32 {
        self.sq.outstanding()
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        // The rings are unmapped (rxe) or freed (mlx5) after: fields drop
        // after this body.
        destroy_qp(self.pd.context(), self.handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_every_marks_every_nth() {
        let sge = [rverbs_abi::wr::Sge::default()];
        let mut sig = SignalEvery::new(3);
        let got: Vec<bool> = (0..7)
            .map(|i| {
                sig.mark(SendWr::send(i, &sge))
                    .send_flags()
                    .contains(rverbs_provider::wr::SendFlags::SIGNALED)
            })
            .collect();
        assert_eq!(got, [false, false, true, false, false, true, false]);
        // A request signaled by the caller restarts the count.
        assert!(sig
            .mark(SendWr::send(9, &sge).signaled())
            .send_flags()
            .contains(rverbs_provider::wr::SendFlags::SIGNALED));
        assert!(!sig.next_signaled());
        assert!(!sig.next_signaled());
        assert!(sig.next_signaled());
        assert_eq!(SignalEvery::new(0).every(), 1);
    }

    #[test]
    fn connect_options_are_checked_before_any_transition() {
        let ok = ConnectOpts::default();
        assert!(ok.validate().is_ok());
        for bad in [
            ConnectOpts {
                sq_psn: 1 << 24,
                ..ok
            },
            ConnectOpts { port_num: 0, ..ok },
            ConnectOpts { timeout: 32, ..ok },
            ConnectOpts {
                min_rnr_timer: 32,
                ..ok
            },
            ConnectOpts { retry_cnt: 8, ..ok },
            ConnectOpts { rnr_retry: 8, ..ok },
        ] {
            assert!(
                matches!(bad.validate(), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
        let ep = Endpoint {
            qpn: 1 << 24,
            ..Default::default()
        };
        assert!(ep.validate().is_err());
        let ep = Endpoint {
            psn: 1 << 24,
            ..Default::default()
        };
        assert!(ep.validate().is_err());
        assert!(Endpoint {
            qpn: 0xff_ffff,
            psn: 0xff_ffff,
            ..Default::default()
        }
        .validate()
        .is_ok());
    }
}
