//! Connecting a QP: the RESET -> INIT -> RTR -> RTS transitions,
//! [`ConnectOpts`] (the parameters of both ends) and [`Endpoint`], what two
//! peers exchange out of band (its wire format included), and UD
//! readiness.

use crate::error::{Error, InvalidKind, Result};
use crate::gid::Gid;
use crate::mr::AccessFlags;
use crate::qp::attr::{limit, PSN_MAX, QPN_MAX};
use crate::qp::{AhAttr, GlobalRoute, Mtu, Qp, QpAttr, QpState, QpType};

/// Connection parameters for [`Qp::connect`](crate::Qp::connect) (and [`Qp::to_init`](crate::Qp::to_init),
/// [`Qp::to_rtr`](crate::Qp::to_rtr), [`Qp::to_rts`](crate::Qp::to_rts)): the knobs the INIT, RTR and RTS
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
    /// only midway through [`Qp::connect`](crate::Qp::connect)).
    pub fn validate(&self) -> Result<()> {
        if self.port_num == 0 {
            return Err(Error::invalid_as(
                InvalidKind::NotPresent,
                "port_num 0: ports are numbered from 1",
            ));
        }
        limit("sq_psn", Some(self.sq_psn), PSN_MAX)?;
        limit("min_rnr_timer", Some(self.min_rnr_timer.into()), 31)?;
        limit("timeout", Some(self.timeout.into()), 31)?;
        limit("retry_cnt", Some(self.retry_cnt.into()), 7)?;
        limit("rnr_retry", Some(self.rnr_retry.into()), 7)?;
        Ok(())
    }
}

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

impl Qp {
    /// Brings a UD (or SRD) QP from RESET (or wherever it is on the way)
    /// to RTS on `port_num` (P_Key index 0), receiving datagrams that
    /// present `qkey` and sending from PSN `sq_psn`. A datagram QP needs no
    /// remote end: each send names its destination (see [`crate::ah`]).
    pub fn ready_ud(&mut self, port_num: u8, qkey: u32, sq_psn: u32) -> Result<()> {
        if !self.qp_type.is_datagram() {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                format!(
                    "ready_ud on a {:?} QP; connected QPs use connect()",
                    self.qp_type
                ),
            ));
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

    /// RESET -> INIT on `o.port_num`, P_Key index 0, with remote access
    /// `access` (connected QPs; a UD QP gets Q_Key 0x11111111: use
    /// [`Qp::ready_ud`](crate::Qp::ready_ud) for UD). Takes the same [`ConnectOpts`] as
    /// [`Qp::to_rtr`](crate::Qp::to_rtr) and [`Qp::to_rts`](crate::Qp::to_rts).
    pub fn to_init(&mut self, access: AccessFlags, o: &ConnectOpts) -> Result<()> {
        self.to_init_at(o.port_num, 0, access)
    }

    /// RESET -> INIT with positional arguments, for another P_Key index
    /// (the earlier form of [`Qp::to_init`](crate::Qp::to_init)).
    pub fn to_init_at(&mut self, port_num: u8, pkey_index: u16, access: AccessFlags) -> Result<()> {
        if port_num == 0 {
            return Err(Error::invalid_as(
                InvalidKind::NotPresent,
                "port_num 0: ports are numbered from 1",
            ));
        }
        let mut a = QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(pkey_index),
            port_num: Some(port_num),
            ..Default::default()
        };
        if self.qp_type.is_datagram() {
            a.qkey = Some(0x1111_1111);
        } else {
            a.qp_access_flags = Some(access);
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
        if !self.qp_type.is_datagram() {
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
    /// names the transition and [`Qp::state`](crate::Qp::state) tells where the QP is.
    pub fn connect(
        &mut self,
        remote: &Endpoint,
        access: AccessFlags,
        o: &ConnectOpts,
    ) -> Result<()> {
        if self.qp_type.is_datagram() {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                format!(
                    "connect on a {:?} QP; datagram QPs use ready_ud() and address each send",
                    self.qp_type
                ),
            ));
        }
        if !matches!(self.state, QpState::Reset | QpState::Init) {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                format!(
                    "connect on a QP in {:?}: it must be in RESET or INIT",
                    self.state
                ),
            ));
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
    /// send PSN `o.sq_psn`. Refuses options [`Qp::connect`](crate::Qp::connect) would refuse
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
