//! [`ConnRequest`]: a connection request a listener received, to accept
//! or reject.

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;

use rverbs_abi::ucma::{self, Accept};

use super::connection::Connection;
use super::id::{addrs_of, check_qp, conn_param, device_of};
use super::{block, next_uid, Blocking, Id, Space, Wait};
use crate::channel::{CmEvent, EventChannel};
use crate::CmEventKind;
use crate::{ConnParams, MAX_REJ_PRIVATE_DATA, MAX_REP_PRIVATE_DATA, MAX_SIDR_REP_PRIVATE_DATA};
use rverbs::device::Device;
use rverbs::error::{Error, InvalidKind, Result};
use rverbs::qp::Qp;

/// A peer's request to connect (`RDMA_CM_EVENT_CONNECT_REQUEST`): answer it
/// with [`ConnRequest::accept`] or [`ConnRequest::reject`]; dropping it
/// unanswered rejects it.
#[derive(Debug)]
pub struct ConnRequest {
    /// `None` once answered (accept moves it into the connection).
    id: Option<Id>,
    device: Device,
    port_num: u8,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    private_data: Vec<u8>,
    conn: crate::ConnInfo,
}

impl ConnRequest {
    /// Moves the new id of `ev` to a channel of its own and learns its
    /// device.
    pub(super) fn take(ev: CmEvent, listener: BorrowedFd<'_>, space: Space) -> Result<ConnRequest> {
        let id = Id {
            ch: EventChannel::new()?,
            handle: ev.id(),
            space,
            // A request's id carries its listener's cookie.
            uid: ev.uid(),
        };
        if let Err(e) = id.migrate_from(listener) {
            // Still the listener's: reject it there.
            let _ = Id::reject_on(listener, ev.id(), &[]);
            return Err(e);
        }
        let q = id.query_addr()?;
        let device = device_of(&q)?;
        let (local, peer) = addrs_of(&q);
        Ok(ConnRequest {
            id: Some(id),
            device,
            port_num: q.port_num,
            local,
            peer,
            private_data: match space {
                Space::Tcp => ev.private_data().to_vec(),
                Space::Udp => ev.ud().private_data.clone(),
            },
            conn: ev.conn(),
        })
    }

    /// The private data the peer sent (rdma_cm's header stripped; on
    /// InfiniBand and RoCE padded with zeros by the CM to
    /// [`crate::MAX_REQ_PRIVATE_DATA`] bytes: use
    /// [`crate::private::unframe`] to read back exactly what a peer sent
    /// with [`crate::private::frame`]).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The peer's connection parameters.
    pub fn conn(&self) -> crate::ConnInfo {
        self.conn
    }

    /// The device the request came in on: create the QP on it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device's port.
    pub fn port_num(&self) -> u8 {
        self.port_num
    }

    /// The local address the peer connected to.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Moves `qp` (created on [`ConnRequest::device`]) to INIT with the
    /// CM's attributes, so that receives can be posted before
    /// [`ConnRequest::accept`]. A UD QP (a request of
    /// [`Listener::bind_ud`](crate::Listener::bind_ud)) is brought up to RTS, with the CM's Q_Key
    /// ([`crate::UDP_QKEY`]).
    pub fn init_qp(&self, qp: &mut Qp) -> Result<()> {
        self.id()?.prepare_qp(qp, &self.device)
    }

    /// Sets the local ACK timeout this side's QP gets at RTS
    /// (`rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)` on the request's
    /// id): call it before [`ConnRequest::accept`]. Without it the QP
    /// takes the timeout the kernel's CM derives from the path. Errors as
    /// [`CmId::set_ack_timeout`](crate::CmId::set_ack_timeout)'s: above 31, or on a datagram request, an
    /// [`Error::InvalidArgument`] before any command.
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        self.id()?.set_ack_timeout(timeout)
    }

    /// Accepts with the RC QP `qp` (in RESET, or INIT by
    /// [`ConnRequest::init_qp`]; created on [`ConnRequest::device`]): INIT,
    /// RTR, RTS, the CM REP with `params`, then waits up to
    /// `params.timeout` for the peer's RTU.
    pub fn accept(self, qp: Qp, params: &ConnParams) -> Result<Connection> {
        block(self.accept_with(&mut Blocking, qp, params))
    }

    /// [`ConnRequest::accept`], waiting through `w`.
    pub(crate) async fn accept_with<W: Wait>(
        mut self,
        w: &mut W,
        mut qp: Qp,
        params: &ConnParams,
    ) -> Result<Connection> {
        if self.id()?.space != Space::Tcp {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "a datagram request (Listener::bind_ud) is answered with accept_ud",
            ));
        }
        check_qp(&qp, &self.device, Space::Tcp)?;
        let cp = conn_param(qp.qp_num(), params, MAX_REP_PRIVATE_DATA)?;
        let id = self.id()?;
        id.ready_qp(&mut qp, params)?;
        ucma::exec(
            id.fd(),
            &Accept {
                uid: next_uid(),
                conn_param: cp,
                id: id.handle,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_accept"))?;
        // Answered: from here on a failure destroys the id, no reject.
        let id = self.id.take().ok_or_else(answered)?;
        id.expect(
            w,
            CmEventKind::Established,
            "the peer's RTU",
            params.timeout,
        )
        .await?;
        Ok(Connection {
            id,
            qp,
            peer_private: std::mem::take(&mut self.private_data),
            peer_conn: self.conn,
            local: self.local,
            peer: self.peer,
            disconnected: false,
        })
    }

    /// Answers a datagram request (of [`Listener::bind_ud`](crate::Listener::bind_ud)) with the UD
    /// QP `qp` (on [`ConnRequest::device`]; brought up to RTS first if it
    /// is not) and `private_data` (at most [`MAX_SIDR_REP_PRIVATE_DATA`]
    /// bytes): the CM's SIDR REP gives the peer this QP's number and Q_Key
    /// and the address towards it. Nothing comes back: the peer's first
    /// datagram tells who it is ([`rverbs::Grh::reply_attr`] and the
    /// completion's source QP). The id is released here.
    pub fn accept_ud(mut self, qp: &mut Qp, private_data: &[u8]) -> Result<()> {
        let id = self.id()?;
        if id.space != Space::Udp {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "an RC request (Listener::bind) is answered with accept",
            ));
        }
        let p = ConnParams {
            private_data: private_data.to_vec(),
            ..ConnParams::default()
        };
        let mut cp = conn_param(qp.qp_num(), &p, MAX_SIDR_REP_PRIVATE_DATA)?;
        id.prepare_qp(qp, &self.device)?;
        cp.qkey = crate::UDP_QKEY;
        ucma::exec(
            id.fd(),
            &Accept {
                uid: next_uid(),
                conn_param: cp,
                id: id.handle,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_accept (SIDR)"))?;
        // Answered: dropping the id now rejects nothing.
        self.id = None;
        Ok(())
    }

    /// Rejects with `private_data` (at most [`MAX_REJ_PRIVATE_DATA`]
    /// bytes, [`MAX_SIDR_REP_PRIVATE_DATA`] for a datagram request); the
    /// peer's connect fails with [`CmError::Rejected`](crate::CmError::Rejected), reason 28
    /// (consumer defined; a datagram peer: 2, the SIDR status "rejected").
    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        let max = match self.id()?.space {
            Space::Tcp => MAX_REJ_PRIVATE_DATA,
            Space::Udp => MAX_SIDR_REP_PRIVATE_DATA,
        };
        if private_data.len() > max {
            return Err(Error::invalid_as(
                InvalidKind::TooLarge,
                format!(
                    "{} bytes of private data, at most {max} fit",
                    private_data.len()
                ),
            ));
        }
        let id = self.id.take().ok_or_else(answered)?;
        id.reject(private_data)
    }

    /// The id, while unanswered.
    fn id(&self) -> Result<&Id> {
        self.id.as_ref().ok_or_else(answered)
    }
}

/// The error of using a request already answered (not reachable through
/// the public API, which consumes the request).
pub(super) fn answered() -> Error {
    Error::invalid_as(
        InvalidKind::WrongUse,
        "the connection request was already answered",
    )
}

impl Drop for ConnRequest {
    fn drop(&mut self) {
        if let Some(id) = &self.id {
            let _ = id.reject(&[]);
        }
    }
}
