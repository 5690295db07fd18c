//! The attribute types of a QP and their kernel encoding: transport type,
//! path MTU, capacities, creation attributes, address vectors, and the
//! MODIFY_QP attributes ([`QpAttr`]) with their attribute mask.

use rverbs_abi::qp::{attr_mask as m, qp_type, ModifyQp, QpDest};

use crate::cq::Cq;
use crate::error::{Error, InvalidKind, Result};
use crate::gid::Gid;
use crate::mr::AccessFlags;
use crate::qp::QpState;

/// The largest PSN (24 bits).
pub(crate) const PSN_MAX: u32 = 0xff_ffff;
/// The largest QP number (24 bits).
pub(crate) const QPN_MAX: u32 = 0xff_ffff;

/// Transport service type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// EFA's scalable reliable datagram (SRD), created as the driver QP
    /// type `IB_QPT_DRIVER`: datagrams (each send names its destination,
    /// as on UD) that the device delivers reliably, possibly out of order,
    /// with RDMA READ and WRITE where the device has them. EFA devices
    /// only; any other provider refuses it.
    Srd,
}

impl QpType {
    pub(crate) fn raw(self) -> u8 {
        match self {
            QpType::Rc => qp_type::RC,
            QpType::Uc => qp_type::UC,
            QpType::Ud => qp_type::UD,
            QpType::Srd => rverbs_efa::QPT_DRIVER,
        }
    }

    /// Whether the QP is a datagram QP (UD, SRD): no remote end, a Q_Key,
    /// each send addressed.
    pub fn is_datagram(self) -> bool {
        matches!(self, QpType::Ud | QpType::Srd)
    }
}

pub use crate::context::Mtu;

/// Queue capacities, requested at creation and granted by the kernel.
///
/// [`QpCap::default`]: 64 send and 64 receive work requests, 1 SGE each
/// way, no inline data. What a QP was granted ([`Qp::cap`](crate::Qp::cap), also what
/// [`Qp::query`](crate::Qp::query) reports) is what can actually be posted: requests
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

/// What [`Pd::create_qp`](crate::Pd::create_qp) needs. Start from [`QpInitAttr::new`] (the
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
    #[must_use]
    pub fn recv_cq(mut self, cq: &'a Cq) -> Self {
        self.recv_cq = cq;
        self
    }

    /// Requested capacities.
    #[must_use]
    pub fn cap(mut self, cap: QpCap) -> Self {
        self.cap = cap;
        self
    }

    /// Every send completes, signaled or not.
    #[must_use]
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
    pub(crate) fn from_dest(d: &QpDest) -> AhAttr {
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

/// QP attributes for [`Qp::modify`](crate::Qp::modify): every `Some` field is applied (and its
/// bit set in the kernel's attribute mask). [`Qp::query`](crate::Qp::query) returns them all.
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

#[inline(always)]
pub(crate) fn limit(name: &str, v: Option<u32>, max: u32) -> Result<()> {
    match v {
        Some(x) if x > max => Err(over_limit(name, x, max)),
        _ => Ok(()),
    }
}

/// [`limit`]'s error, built out of line (the checks stay a compare each).
#[cold]
#[inline(never)]
fn over_limit(name: &str, x: u32, max: u32) -> Error {
    // PSNs and QP numbers in hex, as the verbs tools print them.
    let msg = if name.ends_with("psn") || name.ends_with("qp_num") {
        format!("{name} {x:#x} exceeds {max:#x}")
    } else {
        format!("{name} {x} exceeds {max}")
    };
    Error::invalid_as(InvalidKind::TooLarge, msg)
}

impl QpAttr {
    pub(crate) fn encode(&self, qp_handle: u32) -> Result<ModifyQp> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// PSNs and QP numbers are named in hex, other limits in decimal.
    #[test]
    fn limits_name_psns_and_qpns_in_hex() {
        let psn = QpAttr {
            sq_psn: Some(0x123_4567),
            ..Default::default()
        };
        let e = psn.encode(1).unwrap_err();
        assert!(
            e.to_string().contains("sq_psn 0x1234567 exceeds 0xffffff"),
            "{e}"
        );
        assert_eq!(e.invalid_kind(), Some(InvalidKind::TooLarge));
        let qpn = QpAttr {
            dest_qp_num: Some(0x100_0000),
            ..Default::default()
        };
        let e = qpn.encode(1).unwrap_err();
        assert!(e.to_string().contains("dest_qp_num 0x1000000"), "{e}");
        let timer = QpAttr {
            timeout: Some(40),
            ..Default::default()
        };
        let e = timer.encode(1).unwrap_err();
        assert!(e.to_string().contains("timeout 40 exceeds 31"), "{e}");
    }
}
