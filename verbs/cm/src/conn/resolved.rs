//! [`Resolved`]: an active id with its address and route resolved, ready
//! to connect.

use std::net::SocketAddr;
use std::time::Duration;

use rverbs_abi::ucma::{self, Accept, Connect, ResolveRoute};

use super::cm_id::{resolve_timeout_ms, CmId};
use super::connection::Connection;
use super::id::{addrs_of, check_qp, conn_param, device_of, failure};
use super::{block, Blocking, Id, Space, Wait};
use crate::channel::UdInfo;
use crate::CmEventKind;
use crate::{CmError, ConnParams, MAX_REQ_PRIVATE_DATA, MAX_SIDR_REQ_PRIVATE_DATA};
use rverbs::device::Device;
use rverbs::error::{Error, InvalidKind, Result};
use rverbs::qp::{Qp, QpState};

/// An active id whose destination resolved to a local device, port and
/// path (`rdma_resolve_addr` + `rdma_resolve_route`): create the QP on
/// [`Resolved::device`] and [`Resolved::connect`].
#[derive(Debug)]
pub struct Resolved {
    id: Id,
    device: Device,
    port_num: u8,
    local: Option<SocketAddr>,
    peer: SocketAddr,
}

impl Resolved {
    /// Resolves `dst` (address, then route), waiting up to `timeout` for
    /// each step. Errors: [`CmError::AddrError`] (e.g. no RDMA device
    /// behind the address's route), [`CmError::RouteError`],
    /// [`CmError::Timeout`].
    pub fn resolve(dst: SocketAddr, timeout: Duration) -> Result<Resolved> {
        Self::resolve_from(None, dst, timeout)
    }

    /// [`Resolved::resolve`] from the local address `src` (its port
    /// ignored).
    pub fn resolve_from(
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        Self::resolve_in(Space::Tcp, src, dst, timeout)
    }

    /// [`Resolved::resolve`] for a datagram (UD) peer, in the UDP port
    /// space: follow with [`Resolved::connect_ud`] (a SIDR exchange,
    /// interoperable with librdmacm's `RDMA_PS_UDP`, e.g. `udaddy`).
    pub fn resolve_ud(dst: SocketAddr, timeout: Duration) -> Result<Resolved> {
        Self::resolve_ud_from(None, dst, timeout)
    }

    /// [`Resolved::resolve_ud`] from the local address `src` (its port
    /// ignored), as [`Resolved::resolve_from`] is to
    /// [`Resolved::resolve`].
    pub fn resolve_ud_from(
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        Self::resolve_in(Space::Udp, src, dst, timeout)
    }

    fn resolve_in(
        space: Space,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        block(Self::resolve_with(&mut Blocking, space, src, dst, timeout))
    }

    /// [`Resolved::resolve_in`], waiting through `w`: RESOLVE_ADDR, its
    /// event, RESOLVE_ROUTE, its event, each bounded by `timeout` in the
    /// kernel and by `timeout` and one second more in `w` (a backstop).
    pub(crate) async fn resolve_with<W: Wait>(
        w: &mut W,
        space: Space,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        let ms = resolve_timeout_ms(timeout)?;
        let id = Id::create(space)?;
        Self::resolve_id(w, id, src, dst, ms, timeout).await
    }

    /// [`CmId::resolve`], waiting through `w`.
    pub(crate) async fn resolve_cm_id_with<W: Wait>(
        w: &mut W,
        id: CmId,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        let ms = resolve_timeout_ms(timeout)?;
        Self::resolve_id(w, id.id, None, dst, ms, timeout).await
    }

    /// RESOLVE_ADDR and RESOLVE_ROUTE of `id` (from `src`, unless `id` is
    /// bound: the kernel then uses its bound address) with the kernel's
    /// timer at `ms` (`timeout` in milliseconds).
    async fn resolve_id<W: Wait>(
        w: &mut W,
        id: Id,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        ms: u32,
        timeout: Duration,
    ) -> Result<Resolved> {
        id.resolve_addr(w, src, dst, ms, timeout).await?;
        let backstop = timeout + Duration::from_secs(1);
        ucma::exec(
            id.fd(),
            &ResolveRoute {
                id: id.handle,
                timeout_ms: ms,
            },
        )
        .map_err(Error::kernel("rdma_resolve_route"))?;
        id.expect(w, CmEventKind::RouteResolved, "route resolution", backstop)
            .await?;
        let q = id.query_addr()?;
        let device = device_of(&q)?;
        let (local, _) = addrs_of(&q);
        Ok(Resolved {
            id,
            device,
            port_num: q.port_num,
            local,
            peer: dst,
        })
    }

    /// The device the destination is reached through: create the QP (and
    /// its PD, CQs and MRs) on it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device's port.
    pub fn port_num(&self) -> u8 {
        self.port_num
    }

    /// The local address chosen.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// The destination.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Moves `qp` (created on [`Resolved::device`]) to INIT with the CM's
    /// port and P_Key, so that receives can be posted before
    /// [`Resolved::connect`]. A UD QP (of [`Resolved::resolve_ud`]) is
    /// brought up to RTS, with the CM's Q_Key ([`crate::UDP_QKEY`]).
    pub fn init_qp(&self, qp: &mut Qp) -> Result<()> {
        self.id.prepare_qp(qp, &self.device)
    }

    /// Sets the local ACK timeout the connected QP gets at RTS
    /// (`rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`, as
    /// [`CmId::set_ack_timeout`]): call it before [`Resolved::connect`].
    /// Set here, after route resolution, it changes the QP's timeout only,
    /// not the path's packet lifetime (see [`CmId::set_ack_timeout`]).
    /// Errors as [`CmId::set_ack_timeout`]'s.
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        self.id.set_ack_timeout(timeout)
    }

    /// Connects the RC QP `qp` (in RESET, or INIT by [`Resolved::init_qp`];
    /// created on [`Resolved::device`])
    /// to the listener: INIT, CM REQ with `params`, then on the peer's
    /// answer RTR, RTS and the CM RTU. Errors: [`CmError::Rejected`] (with
    /// the reason and the peer's private data), [`CmError::Unreachable`],
    /// [`CmError::Timeout`] after `params.timeout`.
    pub fn connect(self, qp: Qp, params: &ConnParams) -> Result<Connection> {
        block(self.connect_with(&mut Blocking, qp, params))
    }

    /// [`Resolved::connect`], waiting through `w`.
    pub(crate) async fn connect_with<W: Wait>(
        self,
        w: &mut W,
        mut qp: Qp,
        params: &ConnParams,
    ) -> Result<Connection> {
        if self.id.space != Space::Tcp {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "a datagram id (Resolved::resolve_ud) connects with connect_ud",
            ));
        }
        check_qp(&qp, &self.device, Space::Tcp)?;
        let cp = conn_param(qp.qp_num(), params, MAX_REQ_PRIVATE_DATA)?;
        let id = self.id;
        id.modify_qp(&mut qp, QpState::Init, None)?;
        ucma::exec(
            id.fd(),
            &Connect {
                conn_param: cp,
                id: id.handle,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_connect"))?;
        let ev = w.event(&id, "the peer's answer", params.timeout).await?;
        match ev.kind() {
            CmEventKind::ConnectResponse => {
                id.ready_qp(&mut qp, params)?;
                // ACCEPT on the active side sends the RTU.
                ucma::exec(
                    id.fd(),
                    &Accept {
                        id: id.handle,
                        ..Default::default()
                    },
                )
                .map_err(Error::kernel("rdma_accept (RTU)"))?;
            }
            CmEventKind::Established => {}
            _ => return Err(Error::Cm(failure(&ev, "the peer's answer"))),
        }
        Ok(Connection {
            id,
            qp,
            peer_private: ev.private_data().to_vec(),
            peer_conn: ev.conn(),
            local: self.local,
            peer: Some(self.peer),
            disconnected: false,
        })
    }
}

impl Resolved {
    /// Asks the listener for its UD QP (the CM's SIDR REQ with
    /// `private_data`, at most [`MAX_SIDR_REQ_PRIVATE_DATA`] bytes) and
    /// waits up to `timeout` for the answer: the peer's QP number, Q_Key
    /// and the address vector towards it. `qp` (a UD QP on
    /// [`Resolved::device`]) is brought up first if it is not in RTS.
    /// Errors: [`CmError::Rejected`] with the SIDR status as reason (1:
    /// nobody listens on the port, 2: the application rejected, with its
    /// private data), [`CmError::Unreachable`] (no answer),
    /// [`CmError::Timeout`].
    pub fn connect_ud(self, qp: &mut Qp, private_data: &[u8], timeout: Duration) -> Result<UdInfo> {
        block(self.connect_ud_with(&mut Blocking, qp, private_data, timeout))
    }

    /// [`Resolved::connect_ud`], waiting through `w`.
    pub(crate) async fn connect_ud_with<W: Wait>(
        self,
        w: &mut W,
        qp: &mut Qp,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<UdInfo> {
        if self.id.space != Space::Udp {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "connect_ud needs an id of Resolved::resolve_ud (the UDP port space)",
            ));
        }
        let p = ConnParams {
            private_data: private_data.to_vec(),
            ..ConnParams::default()
        };
        let cp = conn_param(qp.qp_num(), &p, MAX_SIDR_REQ_PRIVATE_DATA)?;
        self.id.prepare_qp(qp, &self.device)?;
        let id = self.id;
        ucma::exec(
            id.fd(),
            &Connect {
                conn_param: cp,
                id: id.handle,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_connect (SIDR)"))?;
        let ev = w.event(&id, "the peer's SIDR answer", timeout).await?;
        match ev.kind() {
            CmEventKind::Established => Ok(ev.ud().clone()),
            // A SIDR REP whose status is not success: the status is the
            // event's (positive), the private data in the UD arm.
            CmEventKind::Unreachable if ev.status() > 0 => Err(Error::Cm(CmError::Rejected {
                reason: ev.status(),
                private_data: ev.ud().private_data.clone(),
            })),
            _ => Err(Error::Cm(failure(&ev, "the peer's SIDR answer"))),
        }
    }
}
