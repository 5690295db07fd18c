//! Async completions and device events on a tokio runtime (feature
//! `tokio`, off by default).
//!
//! [`AsyncCq`] awaits completions without busy-polling: its CQ signals a
//! completion channel of its own, whose fd is registered with tokio's
//! reactor through [`AsyncFd`]. [`AsyncEvents`] does the same for the
//! context's asynchronous event fd ([`Context::async_fd`]).
//!
//! ```no_run
//! # async fn f(ctx: rverbs::Context) -> rverbs::Result<()> {
//! let mut cq = rverbs::tokio::AsyncCq::new(&ctx, 64)?; // inside a runtime
//! // ... create QPs on cq.cq(), post ...
//! let mut wc = [rverbs::Wc::default(); 16];
//! let n = cq.wait(&mut wc).await?;                   // at least one
//! # let _ = n; Ok(()) }
//! ```
//!
//! The connection manager ([`crate::cm`]) too: [`AsyncListener`] awaits
//! connection requests, [`AsyncConnection`] a connection's events,
//! and every handshake step, [`resolve`] ([`resolve_from`],
//! [`resolve_ud`], [`resolve_ud_from`]), [`connect`], [`connect_ud`],
//! [`accept`] and [`accept_ud`], and multicast's [`resolve_mcast`]
//! ([`resolve_mcast_id`]) and [`join_mcast`], awaits its id's events on the runtime
//! (no thread of tokio's blocking pool), bounded as the blocking API's
//! steps are (a timerfd awaited beside the id, so the runtime's timer
//! driver is not needed).
//!
//! Both fds are non-blocking from creation (see [`crate::event`]); no
//! event needs acknowledging (see [`CompChannel`]).

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::task::Poll;
use std::time::Duration;

use ::tokio::io::unix::AsyncFd;

use crate::cq::{await_completions, CompChannel, Cq, Waiter};
use crate::error::{Error, InvalidKind, Result};
use crate::event::AsyncEvent;
use crate::sys::tokio::{register_readable, OwnsFd};
use crate::{Context, Wc};

fn register<T: OwnsFd>(what: &str, inner: T) -> Result<AsyncFd<T>> {
    if ::tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::invalid_as(
            InvalidKind::WrongUse,
            format!("registering the {what} needs a tokio runtime (call inside one)"),
        ));
    }
    register_readable(inner).map_err(|e| Error::Io {
        what: format!(
            "registering the {what} with tokio (the runtime needs I/O enabled; \
                 a channel can be registered once)"
        ),
        source: e.into(),
    })
}

/// A CQ whose completions can be awaited. Dereferences to nothing: use
/// [`AsyncCq::cq`] to create QPs on it and [`AsyncCq::cq_mut`] to poll it
/// without waiting.
pub struct AsyncCq {
    cq: Cq,
    chan: AsyncFd<CompChannel>,
}

impl std::fmt::Debug for AsyncCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCq").field("cq", &self.cq).finish()
    }
}

impl AsyncCq {
    /// Creates a CQ of at least `cqe` entries with a completion channel of
    /// its own, registered with the current tokio runtime (call it inside
    /// one, with I/O enabled).
    pub fn new(ctx: &Context, cqe: u32) -> Result<AsyncCq> {
        let chan = ctx.create_comp_channel()?;
        let cq = ctx.create_cq_with(cqe, Some(&chan), 0)?;
        AsyncCq::from_cq(cq)
    }

    /// Wraps a CQ created with a completion channel. The channel must serve
    /// this CQ alone: registering it a second time is refused by the
    /// reactor (EEXIST), and events of another CQ read here would be lost
    /// to it.
    pub fn from_cq(cq: Cq) -> Result<AsyncCq> {
        let chan = cq.channel().ok_or_else(|| {
            Error::invalid_as(
                InvalidKind::WrongUse,
                "AsyncCq needs a CQ with a completion channel (create_cq_with)",
            )
        })?;
        Ok(AsyncCq {
            chan: register("completion channel", chan)?,
            cq,
        })
    }

    /// The CQ, to create QPs on.
    pub fn cq(&self) -> &Cq {
        &self.cq
    }

    /// The CQ, to poll without waiting.
    pub fn cq_mut(&mut self) -> &mut Cq {
        &mut self.cq
    }

    /// Waits until the CQ holds a completion, then polls up to `wc.len()`
    /// of them into `wc` and returns how many (at least one).
    ///
    /// Same protocol as [`Cq::poll_blocking`]: poll; if empty, arm and poll
    /// again (a completion that landed before the arm raises no event);
    /// only then await the channel, drain its events and start over. No
    /// wake-up is lost: tokio's readiness is cleared only for the
    /// readiness observed, so an event arriving after the drain wakes the
    /// next await. Cancel-safe: dropping the future loses no completion
    /// (they stay in the CQ) and at worst leaves the CQ armed, which costs
    /// the next call one extra round.
    pub async fn wait(&mut self, wc: &mut [Wc]) -> Result<usize> {
        if wc.is_empty() {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "wait with no room for a completion",
            ));
        }
        loop {
            // The synchronous part of the protocol: poll, arm, poll.
            let mut w = Step {
                cq: &mut self.cq,
                wc,
            };
            if let Some(n) = await_completions(&mut w)? {
                return Ok(n);
            }
            // Armed and empty: sleep until the channel is readable.
            let mut guard = self.chan.readable().await.map_err(|source| Error::Io {
                what: "waiting for the completion channel".into(),
                source,
            })?;
            while self.chan.get_ref().try_get_event()?.is_some() {}
            guard.clear_ready();
        }
    }

    /// Gives the CQ back (deregistering the channel from the reactor).
    pub fn into_inner(self) -> Cq {
        self.cq
    }
}

/// One synchronous round of the protocol: `wait` reports "timed out" so
/// that [`await_completions`] returns to the async caller, who awaits.
struct Step<'a, 'w> {
    cq: &'a mut Cq,
    wc: &'w mut [Wc],
}

impl Waiter for Step<'_, '_> {
    fn poll(&mut self) -> Result<usize> {
        Ok(self.cq.poll(self.wc)?)
    }
    fn arm(&mut self) -> Result<()> {
        self.cq.req_notify(false)
    }
    fn wait(&mut self) -> Result<bool> {
        Ok(false)
    }
}

/// The context's async event fd, by value (the context stays open while
/// it is registered).
pub(crate) struct EventFd(Context);

// SAFETY: an EventFd holds a Context, whose async fd is an OwnedFd set at
// creation and closed only when the last clone drops; as_raw_fd returns it.
#[allow(unsafe_code)]
unsafe impl crate::sys::tokio::OwnsFd for EventFd {}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.async_fd().as_raw_fd()
    }
}

/// A context's asynchronous events (port changes, QP and CQ errors, SRQ
/// limits), awaited on a tokio runtime. One per context: its fd can be
/// registered with the reactor once.
pub struct AsyncEvents {
    fd: AsyncFd<EventFd>,
}

impl std::fmt::Debug for AsyncEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEvents").finish_non_exhaustive()
    }
}

impl AsyncEvents {
    /// Registers `ctx`'s event fd with the current tokio runtime.
    pub fn new(ctx: &Context) -> Result<AsyncEvents> {
        Ok(AsyncEvents {
            fd: register("async event fd", EventFd(ctx.clone()))?,
        })
    }

    /// Waits for the next event. Events need no acknowledgement. Fails
    /// (rather than waiting on) if the kernel reports an error on the fd.
    /// Cancel-safe: an event is read only when it is returned.
    pub async fn next_event(&mut self) -> Result<AsyncEvent> {
        loop {
            if let Some(ev) = self.fd.get_ref().0.try_get_async_event()? {
                return Ok(ev);
            }
            let mut guard = self.fd.readable().await.map_err(|source| Error::Io {
                what: "waiting for the async event fd".into(),
                source,
            })?;
            match self.fd.get_ref().0.try_get_async_event()? {
                Some(ev) => return Ok(ev),
                None => guard.clear_ready(),
            }
        }
    }
}

/// A [`Listener`](crate::cm::Listener) by value, its fd registered.
pub(crate) struct ListenerFd(pub(crate) crate::cm::Listener);

// SAFETY: a ListenerFd holds the Listener, whose id holds its event
// channel, which owns its OwnedFd and never replaces it; as_raw_fd
// returns that fd.
#[allow(unsafe_code)]
unsafe impl crate::sys::tokio::OwnsFd for ListenerFd {}

impl AsRawFd for ListenerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// An id borrowed for one wait, its fd registered.
pub(crate) struct IdFd<'a>(&'a crate::cm::Id);

// SAFETY: an IdFd borrows the id, which holds its event channel (an
// OwnedFd, never replaced) for at least as long as the borrow; as_raw_fd
// returns that fd.
#[allow(unsafe_code)]
unsafe impl crate::sys::tokio::OwnsFd for IdFd<'_> {}

impl AsRawFd for IdFd<'_> {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// A [`Connection`](crate::cm::Connection) by value, its fd registered.
pub(crate) struct ConnectionFd(crate::cm::Connection);

// SAFETY: as for ListenerFd: the Connection's id holds its event channel.
#[allow(unsafe_code)]
unsafe impl crate::sys::tokio::OwnsFd for ConnectionFd {}

impl AsRawFd for ConnectionFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

// Each keeps its id's event channel (an OwnedFd) open and unchanged for
// as long as it lives.

/// An rdma_cm [`Listener`](crate::cm::Listener) whose connection requests
/// are awaited.
///
/// One [`Context`] (and PD) per device serves every
/// connection, as the [`cm`](crate::cm) docs say: open the listener's
/// device once, and check that a request came in on it.
///
/// ```no_run
/// # async fn f() -> rverbs::Result<()> {
/// use rverbs::cm::{ConnParams, Listener};
/// use rverbs::tokio::{accept, AsyncListener};
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
    pub fn new(l: crate::cm::Listener) -> Result<AsyncListener> {
        Ok(AsyncListener {
            fd: register("rdma_cm listener", ListenerFd(l))?,
        })
    }

    /// The listener.
    pub fn get_ref(&self) -> &crate::cm::Listener {
        &self.fd.get_ref().0
    }

    /// Waits for the next connection request. Cancel-safe: a request is
    /// taken from the kernel only when it is returned.
    pub async fn get_request(&self) -> Result<crate::cm::ConnRequest> {
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

/// An rdma_cm [`Connection`](crate::cm::Connection) whose events
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
    pub fn new(c: crate::cm::Connection) -> Result<AsyncConnection> {
        Ok(AsyncConnection {
            fd: register("rdma_cm connection", ConnectionFd(c))?,
        })
    }

    /// The connection (its QP: [`Connection::qp`](crate::cm::Connection::qp)).
    pub fn get_ref(&self) -> &crate::cm::Connection {
        &self.fd.get_ref().0
    }

    /// The connection, to post to its QP.
    pub fn get_mut(&mut self) -> &mut crate::cm::Connection {
        &mut self.fd.get_mut().0
    }

    /// Waits for the connection's next event (see
    /// [`Connection::next_event`](crate::cm::Connection::next_event): on a
    /// disconnect the QP is moved to the error state). Cancel-safe.
    pub async fn next_event(&mut self) -> Result<crate::cm::CmEvent> {
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
    pub fn into_inner(self) -> crate::cm::Connection {
        self.fd.into_inner().0
    }
}

/// [`Resolved::resolve`](crate::cm::Resolved::resolve), awaited: address
/// and route resolution, the id's events awaited on the runtime (no
/// thread of tokio's blocking pool is taken), each step bounded as in the
/// blocking API (the kernel's timer after `timeout`, ours a second
/// later). Dropping the future destroys the id. Needs a runtime with I/O
/// enabled (not its timer).
pub async fn resolve(dst: SocketAddr, timeout: Duration) -> Result<crate::cm::Resolved> {
    resolve_from(None, dst, timeout).await
}

/// [`Resolved::resolve_from`](crate::cm::Resolved::resolve_from),
/// awaited as [`resolve`] is.
pub async fn resolve_from(
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<crate::cm::Resolved> {
    crate::cm::Resolved::resolve_with(&mut OnRuntime, crate::cm::Space::Tcp, src, dst, timeout)
        .await
}

/// [`CmId::resolve`](crate::cm::CmId::resolve), awaited as [`resolve`]
/// is: resolution of an id whose options
/// ([`CmId::set_tos`](crate::cm::CmId::set_tos), ...) were set, or which
/// was bound, first. The options themselves are set on the
/// [`CmId`](crate::cm::CmId) as in the blocking API (each is one command
/// that never waits).
pub async fn resolve_id(
    id: crate::cm::CmId,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<crate::cm::Resolved> {
    crate::cm::Resolved::resolve_cm_id_with(&mut OnRuntime, id, dst, timeout).await
}

/// [`Resolved::resolve_ud`](crate::cm::Resolved::resolve_ud), awaited as
/// [`resolve`] is.
pub async fn resolve_ud(dst: SocketAddr, timeout: Duration) -> Result<crate::cm::Resolved> {
    resolve_ud_from(None, dst, timeout).await
}

/// [`Resolved::resolve_ud_from`](crate::cm::Resolved::resolve_ud_from),
/// awaited as [`resolve`] is.
pub async fn resolve_ud_from(
    src: Option<SocketAddr>,
    dst: SocketAddr,
    timeout: Duration,
) -> Result<crate::cm::Resolved> {
    crate::cm::Resolved::resolve_with(&mut OnRuntime, crate::cm::Space::Udp, src, dst, timeout)
        .await
}

/// [`Resolved::connect`](crate::cm::Resolved::connect), awaited on the
/// runtime (bounded by `params.timeout`), giving an [`AsyncConnection`].
pub async fn connect(
    id: crate::cm::Resolved,
    qp: crate::Qp,
    params: &crate::cm::ConnParams,
) -> Result<AsyncConnection> {
    let c = id.connect_with(&mut OnRuntime, qp, params).await?;
    AsyncConnection::new(c)
}

/// [`Resolved::connect_ud`](crate::cm::Resolved::connect_ud), awaited on
/// the runtime (bounded by `timeout`).
pub async fn connect_ud(
    id: crate::cm::Resolved,
    qp: &mut crate::Qp,
    private_data: &[u8],
    timeout: Duration,
) -> Result<crate::cm::UdInfo> {
    id.connect_ud_with(&mut OnRuntime, qp, private_data, timeout)
        .await
}

/// [`ConnRequest::accept`](crate::cm::ConnRequest::accept), awaited on
/// the runtime (bounded by `params.timeout`), giving an
/// [`AsyncConnection`].
pub async fn accept(
    req: crate::cm::ConnRequest,
    qp: crate::Qp,
    params: &crate::cm::ConnParams,
) -> Result<AsyncConnection> {
    let c = req.accept_with(&mut OnRuntime, qp, params).await?;
    AsyncConnection::new(c)
}

/// [`ConnRequest::accept_ud`](crate::cm::ConnRequest::accept_ud), for the
/// async API's parity: it waits for nothing (the SIDR REP is sent and the
/// id released), so it is the blocking call, which never sleeps.
pub async fn accept_ud(
    req: crate::cm::ConnRequest,
    qp: &mut crate::Qp,
    private_data: &[u8],
) -> Result<()> {
    req.accept_ud(qp, private_data)
}

/// [`McastId::resolve_from`](crate::cm::McastId::resolve_from), awaited
/// as [`resolve`] is: the multicast address resolved (address only) on a
/// new datagram id.
pub async fn resolve_mcast(
    src: Option<SocketAddr>,
    group: SocketAddr,
    timeout: Duration,
) -> Result<crate::cm::McastId> {
    crate::cm::McastId::resolve_with(&mut OnRuntime, src, group, timeout).await
}

/// [`CmId::resolve_mcast`](crate::cm::CmId::resolve_mcast), awaited as
/// [`resolve`] is (a datagram id whose options were set, or which was
/// bound, first).
pub async fn resolve_mcast_id(
    id: crate::cm::CmId,
    group: SocketAddr,
    timeout: Duration,
) -> Result<crate::cm::McastId> {
    crate::cm::McastId::resolve_cm_id_with(&mut OnRuntime, id, group, timeout).await
}

/// [`McastId::join`](crate::cm::McastId::join), awaited on the runtime
/// (bounded by `timeout`): the join's event awaited, then the QP attached
/// as in the blocking API. Dropping the future before the join completes
/// leaves the group again (LEAVE_MCAST), so neither the membership nor its
/// event is left for a later join to take.
pub async fn join_mcast(
    id: &mut crate::cm::McastId,
    group: SocketAddr,
    mode: crate::cm::JoinMode,
    qp: Option<&mut crate::Qp>,
    timeout: Duration,
) -> Result<crate::cm::McastGroup> {
    id.join_with(&mut OnRuntime, group, mode, qp, timeout).await
}

/// [`crate::cm::Wait`] on the current tokio runtime: the id's fd and a
/// timerfd for the deadline, both awaited through the I/O driver.
struct OnRuntime;

impl crate::cm::Wait for OnRuntime {
    async fn event(
        &mut self,
        id: &crate::cm::Id,
        step: &'static str,
        timeout: Duration,
    ) -> Result<crate::cm::CmEvent> {
        let cm = register("rdma_cm id", IdFd(id))?;
        let timer = crate::sys::tokio::deadline_fd(timeout).map_err(|source| Error::Io {
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
        got.ok_or(Error::Cm(crate::cm::CmError::Timeout {
            step,
            after: timeout,
        }))
    }
}
