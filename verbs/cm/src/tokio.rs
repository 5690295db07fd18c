//! The connection manager on a tokio runtime (feature `tokio`, off by
//! default): [`AsyncListener`] awaits connection requests,
//! [`AsyncConnection`] a connection's events, and every handshake step,
//! [`resolve`] ([`resolve_from`], [`resolve_ud`], [`resolve_ud_from`]),
//! [`connect`], [`connect_ud`], [`accept`] and [`accept_ud`], and
//! multicast's [`resolve_mcast`] ([`resolve_mcast_id`]) and
//! [`join_mcast`], awaits its id's events on the runtime (no thread of
//! tokio's blocking pool), bounded as the blocking API's steps are (a
//! timerfd awaited beside the id, so the runtime's timer driver is not
//! needed). The async streams are [`crate::stream::AsyncRdmaStream`] and
//! [`crate::stream::AsyncRdmaListener`]; async completions are
//! `rverbs::tokio`'s.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::task::Poll;
use std::time::Duration;

use ::tokio::io::unix::AsyncFd;
use rverbs::tokio::{register, OwnsFd};
use rverbs::{Error, Result};

/// A [`Listener`](crate::Listener) by value, its fd registered.
pub(crate) struct ListenerFd(pub(crate) crate::Listener);

// SAFETY: a ListenerFd holds the Listener, whose id holds its event
// channel, which owns its OwnedFd and never replaces it; as_raw_fd
// returns that fd.
#[allow(unsafe_code)]
unsafe impl OwnsFd for ListenerFd {}

impl AsRawFd for ListenerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// An id borrowed for one wait, its fd registered.
pub(crate) struct IdFd<'a>(&'a crate::Id);

// SAFETY: an IdFd borrows the id, which holds its event channel (an
// OwnedFd, never replaced) for at least as long as the borrow; as_raw_fd
// returns that fd.
#[allow(unsafe_code)]
unsafe impl OwnsFd for IdFd<'_> {}

impl AsRawFd for IdFd<'_> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A [`Connection`](crate::Connection) by value, its fd registered.
pub(crate) struct ConnectionFd(crate::Connection);

// SAFETY: as for ListenerFd: the Connection's id holds its event channel.
#[allow(unsafe_code)]
unsafe impl OwnsFd for ConnectionFd {}

impl AsRawFd for ConnectionFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

// Each keeps its id's event channel (an OwnedFd) open and unchanged for
// as long as it lives.

/// An rdma_cm [`Listener`](crate::Listener) whose connection requests
/// are awaited.
///
/// One [`Context`](rverbs::Context) (and PD) per device serves every
/// connection, as the [`cm`](crate) docs say: open the listener's
/// device once, and check that a request came in on it.
///
/// ```no_run
/// # async fn f() -> rverbs::Result<()> {
/// use rverbs_cm::{ConnParams, Listener};
/// use rverbs_cm::tokio::{accept, AsyncListener};
/// use rverbs::{QpInitAttr, QpType};
/// let l = AsyncListener::new(Listener::bind("10.0.0.1:7471".parse().unwrap(), 16)?)?;
/// let ctx = rverbs::device("rxe0")?.open()?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(256)?;
/// loop {
///     let req = l.get_request().await?;
///     if req.device().node_guid() != ctx.device().node_guid() {
///         req.reject(b"")?; // came in on another device
///         continue;
///     }
///     let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
///     let conn = accept(req, qp, &ConnParams::default()).await?;
///     # let _ = conn;
///     // ... hand conn to a task ...
/// }
/// # }
/// ```
pub struct AsyncListener {
    fd: AsyncFd<ListenerFd>,
}

impl std::fmt::Debug for AsyncListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncListener")
            .field("listener", &self.fd.get_ref().0)
            .finish()
    }
}

impl AsyncListener {
    /// Registers `l`'s fd with the current tokio runtime.
    pub fn new(l: crate::Listener) -> Result<AsyncListener> {
        Ok(AsyncListener {
            fd: register("rdma_cm listener", ListenerFd(l))?,
        })
    }

    /// The listener.
    pub fn get_ref(&self) -> &crate::Listener {
        &self.fd.get_ref().0
    }

    /// Waits for the next connection request. Cancel-safe: a request is
    /// taken from the kernel only when it is returned.
    pub async fn get_request(&self) -> Result<crate::ConnRequest> {
        loop {
            let mut guard = self.fd.readable().await.map_err(|source| Error::Io {
                what: "waiting for the rdma_cm listener".into(),
                source,
            })?;
            match self.fd.get_ref().0.get_request(Some(Duration::ZERO))? {
                Some(req) => return Ok(req),
                None => guard.clear_ready(),
            }
        }
    }
}

/// An rdma_cm [`Connection`](crate::Connection) whose events
/// (disconnect, device removal, ...) are awaited.
pub struct AsyncConnection {
    fd: AsyncFd<ConnectionFd>,
}

impl std::fmt::Debug for AsyncConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncConnection")
            .field("connection", &self.fd.get_ref().0)
            .finish()
    }
}

impl AsyncConnection {
    /// Registers `c`'s fd with the current tokio runtime.
    pub fn new(c: crate::Connection) -> Result<AsyncConnection> {
        Ok(AsyncConnection {
            fd: register("rdma_cm connection", ConnectionFd(c))?,
        })
    }

    /// The connection (its QP: [`Connection::qp`](crate::Connection::qp)).
    pub fn get_ref(&self) -> &crate::Connection {
        &self.fd.get_ref().0
    }

    /// The connection, to post to its QP.
    pub fn get_mut(&mut self) -> &mut crate::Connection {
        &mut self.fd.get_mut().0
    }

    /// Waits for the connection's next event (see
    /// [`Connection::next_event`](crate::Connection::next_event): on a
    /// disconnect the QP is moved to the error state). Cancel-safe.
    pub async fn next_event(&mut self) -> Result<crate::CmEvent> {
        loop {
            let mut guard = self.fd.readable_mut().await.map_err(|source| Error::Io {
                what: "waiting for the rdma_cm connection".into(),
                source,
            })?;
            match guard.get_inner_mut().0.next_event(Some(Duration::ZERO))? {
                Some(ev) => return Ok(ev),
                None => guard.clear_ready(),
            }
        }
    }

    /// The connection, deregistered.
    pub fn into_inner(self) -> crate::Connection {
        self.fd.into_inner().0
    }
}

/// [`Resolved::resolve`](crate::Resolved::resolve), awaited: address
/// and route resolution, the id's events awaited on the runtime (no
/// thread of tokio's blocking pool is taken), each step bounded as in the
/// blocking API (the kernel's timer after `timeout`, ours a second
/// later). Dropping the future destroys the id. Needs a runtime with I/O
/// enabled (not its timer).
pub async fn resolve(dst: SocketAddr, timeout: Duration) -> Result<crate::Resolved> {
    resolve_from(None, dst, timeout).await
}

/// [`Resolved::resolve_from`](crate::Resolved::resolve_from),
/// awaited as [`resolve`] is.
pub async fn resolve_from(
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<crate::Resolved> {
    crate::Resolved::resolve_with(&mut OnRuntime, crate::Space::Tcp, src, dst, timeout).await
}

/// [`CmId::resolve`](crate::CmId::resolve), awaited as [`resolve`]
/// is: resolution of an id whose options
/// ([`CmId::set_tos`](crate::CmId::set_tos), ...) were set, or which
/// was bound, first. The options themselves are set on the
/// [`CmId`](crate::CmId) as in the blocking API (each is one command
/// that never waits).
pub async fn resolve_id(
    id: crate::CmId,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<crate::Resolved> {
    crate::Resolved::resolve_cm_id_with(&mut OnRuntime, id, dst, timeout).await
}

/// [`Resolved::resolve_ud`](crate::Resolved::resolve_ud), awaited as
/// [`resolve`] is.
pub async fn resolve_ud(dst: SocketAddr, timeout: Duration) -> Result<crate::Resolved> {
    resolve_ud_from(None, dst, timeout).await
}

/// [`Resolved::resolve_ud_from`](crate::Resolved::resolve_ud_from),
/// awaited as [`resolve`] is.
pub async fn resolve_ud_from(
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<crate::Resolved> {
    crate::Resolved::resolve_with(&mut OnRuntime, crate::Space::Udp, src, dst, timeout).await
}

/// [`Resolved::connect`](crate::Resolved::connect), awaited on the
/// runtime (bounded by `params.timeout`), giving an [`AsyncConnection`].
pub async fn connect(
    id: crate::Resolved,
    qp: rverbs::Qp,
    params: &crate::ConnParams,
) -> Result<AsyncConnection> {
    let c = id.connect_with(&mut OnRuntime, qp, params).await?;
    AsyncConnection::new(c)
}

/// [`Resolved::connect_ud`](crate::Resolved::connect_ud), awaited on
/// the runtime (bounded by `timeout`).
pub async fn connect_ud(
    id: crate::Resolved,
    qp: &mut rverbs::Qp,
    private_data: &[u8],
    timeout: Duration,
) -> Result<crate::UdInfo> {
    id.connect_ud_with(&mut OnRuntime, qp, private_data, timeout)
        .await
}

/// [`ConnRequest::accept`](crate::ConnRequest::accept), awaited on
/// the runtime (bounded by `params.timeout`), giving an
/// [`AsyncConnection`].
pub async fn accept(
    req: crate::ConnRequest,
    qp: rverbs::Qp,
    params: &crate::ConnParams,
) -> Result<AsyncConnection> {
    let c = req.accept_with(&mut OnRuntime, qp, params).await?;
    AsyncConnection::new(c)
}

/// [`ConnRequest::accept_ud`](crate::ConnRequest::accept_ud), for the
/// async API's parity: it waits for nothing (the SIDR REP is sent and the
/// id released), so it is the blocking call, which never sleeps.
pub async fn accept_ud(
    req: crate::ConnRequest,
    qp: &mut rverbs::Qp,
    private_data: &[u8],
) -> Result<()> {
    req.accept_ud(qp, private_data)
}

/// [`McastId::resolve_from`](crate::McastId::resolve_from), awaited
/// as [`resolve`] is: the multicast address resolved (address only) on a
/// new datagram id.
pub async fn resolve_mcast(
    src: Option<SocketAddr>,
    group: SocketAddr,
    timeout: Duration,
) -> Result<crate::McastId> {
    crate::McastId::resolve_with(&mut OnRuntime, src, group, timeout).await
}

/// [`CmId::resolve_mcast`](crate::CmId::resolve_mcast), awaited as
/// [`resolve`] is (a datagram id whose options were set, or which was
/// bound, first).
pub async fn resolve_mcast_id(
    id: crate::CmId,
    group: SocketAddr,
    timeout: Duration,
) -> Result<crate::McastId> {
    crate::McastId::resolve_cm_id_with(&mut OnRuntime, id, group, timeout).await
}

/// [`McastId::join`](crate::McastId::join), awaited on the runtime
/// (bounded by `timeout`): the join's event awaited, then the QP attached
/// as in the blocking API. Dropping the future before the join completes
/// leaves the group again (LEAVE_MCAST), so neither the membership nor its
/// event is left for a later join to take.
pub async fn join_mcast(
    id: &mut crate::McastId,
    group: SocketAddr,
    mode: crate::JoinMode,
    qp: Option<&mut rverbs::Qp>,
    timeout: Duration,
) -> Result<crate::McastGroup> {
    id.join_with(&mut OnRuntime, group, mode, qp, timeout).await
}

/// [`crate::Wait`] on the current tokio runtime: the id's fd and a
/// timerfd for the deadline, both awaited through the I/O driver.
struct OnRuntime;

impl crate::Wait for OnRuntime {
    async fn event(
        &mut self,
        id: &crate::Id,
        step: &'static str,
        timeout: Duration,
    ) -> Result<crate::CmEvent> {
        let cm = register("rdma_cm id", IdFd(id))?;
        let timer = crate::sys::deadline_fd(timeout).map_err(|source| Error::Io {
            what: "creating the rdma_cm step's timer".into(),
            source,
        })?;
        let timer = register("rdma_cm step's timer", timer)?;
        let io = |source| Error::Io {
            what: format!("waiting for the rdma_cm {step}"),
            source,
        };
        let got = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = timer.poll_read_ready(cx) {
                return Poll::Ready(r.map_err(io).map(|_| None));
            }
            loop {
                match cm.poll_read_ready(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(io(e))),
                    Poll::Ready(Ok(mut guard)) => match id.try_event() {
                        Ok(Some(ev)) => return Poll::Ready(Ok(Some(ev))),
                        // Taken before the readiness is cleared: an event
                        // queued since sets it again.
                        Ok(None) => guard.clear_ready(),
                        Err(e) => return Poll::Ready(Err(e)),
                    },
                }
            }
        })
        .await?;
        got.ok_or(Error::Cm(crate::CmError::Timeout {
            step,
            after: timeout,
        }))
    }
}
