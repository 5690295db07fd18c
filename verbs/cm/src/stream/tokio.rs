//! rsockets streams on a tokio runtime (the `tokio` feature):
//! [`AsyncRdmaListener`] and [`AsyncRdmaStream`], whose stream implements
//! `tokio::io::AsyncRead` and `AsyncWrite`, so `tokio::io::copy`, codecs,
//! `tokio::io::split` and the crates built on them (hyper, tonic) run over
//! RDMA unchanged.
//!
//! The stream never blocks the runtime: a read or write that cannot
//! proceed arms the CQ, polls once more (a completion that came before the
//! arm raises no event), then waits on two fds registered with the
//! reactor, the CQ's completion channel and the connection's rdma_cm fd
//! (so a peer that vanishes wakes it). Reads and writes wait on
//! registrations of their own, so the two halves of a split stream can
//! wait at once; whichever runs takes every completion, and an event
//! wakes both. The handshake steps are awaited
//! as `rverbs::tokio`'s are. Dropping a stream closes it as the blocking
//! one does: a disconnect message and a wait of at most 2 s for the sends
//! already posted (normally a few microseconds; shut the stream down with
//! `AsyncWriteExt::shutdown` first to avoid even that). With
//! [`StreamOptions::keepalive`] a wait also awaits a timerfd (not the
//! runtime's timer, which need not be enabled) and probes the peer each
//! time it fires.

use std::io;
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Duration;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::Listener;

use super::socket::{accept_err, io_err, resolve_err, Prepared, Socket};
use super::{StreamOptions, CLOSE_TIMEOUT};

/// `rverbs::tokio::register`, failing with an `io::Error` that carries
/// its message.
fn register<T: rverbs::tokio::OwnsFd>(what: &str, fd: T) -> io::Result<AsyncFd<T>> {
    rverbs::tokio::register(what, fd).map_err(io::Error::other)
}

impl StreamOptions {
    /// [`StreamOptions::connect`], awaited on the runtime.
    pub async fn connect_async(&self, addr: impl ToSocketAddrs) -> io::Result<AsyncRdmaStream> {
        self.check()?;
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match self.connect_one_async(a).await {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to")
        }))
    }

    async fn connect_one_async(&self, dst: SocketAddr) -> io::Result<AsyncRdmaStream> {
        let resolved = crate::tokio::resolve_id(self.new_id()?, dst, self.timeout)
            .await
            .map_err(|e| resolve_err(e, dst))?;
        let (Prepared { qp, parts }, params) = self.prepare_connect(&resolved)?;
        let conn = crate::tokio::connect(resolved, qp, &params)
            .await
            .map_err(io_err)?
            .into_inner();
        AsyncRdmaStream::new(self.established(conn, parts, dst)?)
    }

    /// [`StreamOptions::bind`] for a listener whose connections are
    /// awaited (call inside a runtime).
    pub fn bind_async(&self, addr: impl ToSocketAddrs) -> io::Result<AsyncRdmaListener> {
        let l = self.bind(addr)?;
        AsyncRdmaListener::new(l.listener, l.opts)
    }
}

/// A listening rsocket whose connections are awaited.
pub struct AsyncRdmaListener {
    fd: AsyncFd<crate::tokio::ListenerFd>,
    opts: StreamOptions,
}

impl std::fmt::Debug for AsyncRdmaListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRdmaListener")
            .field("local_addr", &self.local_addr())
            .finish()
    }
}

impl AsyncRdmaListener {
    /// Listens on `addr` with rsockets' default sizes (inside a runtime).
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<AsyncRdmaListener> {
        StreamOptions::default().bind_async(addr)
    }

    fn new(l: Listener, opts: StreamOptions) -> io::Result<AsyncRdmaListener> {
        Ok(AsyncRdmaListener {
            fd: register("rsocket listener", crate::tokio::ListenerFd(l))?,
            opts,
        })
    }

    /// The address it listens on (as tokio's `TcpListener::local_addr`;
    /// it does not fail).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.fd.get_ref().0.local_addr())
    }

    /// Awaits a connection and accepts it; a request without rsockets'
    /// connection data is rejected and the wait goes on.
    pub async fn accept(&self) -> io::Result<(AsyncRdmaStream, SocketAddr)> {
        loop {
            let req = {
                let mut g = self.fd.readable().await?;
                match g.get_inner().0.get_request(Some(Duration::ZERO)) {
                    Ok(Some(req)) => req,
                    Ok(None) => {
                        g.clear_ready();
                        continue;
                    }
                    Err(e) => return Err(io_err(e)),
                }
            };
            let Some(a) = self.opts.prepare_accept(req)? else {
                continue;
            };
            let Prepared { qp, parts } = a.prepared;
            let conn = crate::tokio::accept(a.req, qp, &a.params)
                .await
                .map_err(accept_err)?
                .into_inner();
            let sock = self.opts.socket(conn, parts, &a.peer)?;
            return Ok((AsyncRdmaStream::new(sock)?, a.peer_addr));
        }
    }
}

/// A connected rsocket on a tokio runtime: `AsyncRead` and `AsyncWrite`.
pub struct AsyncRdmaStream {
    /// The fds a read waits on, then those a write waits on: each side
    /// registers its own (duplicates of the CQ channel's and of the
    /// rdma_cm fd), because tokio wakes only the last task that polled a
    /// registration, and the halves of a split stream wait at once.
    /// Declared before the socket: deregistered before its fds close.
    read_fds: Fds,
    write_fds: Fds,
    sock: Socket,
    /// Whether the CQ is armed since its channel was last drained.
    armed: bool,
    /// The task of a read, then of a write, that returned `Pending`:
    /// woken by the other side when it consumes the CQ's or rdma_cm's
    /// events (which disarms the CQ and may make the waiting side's
    /// progress: it must look again, and arm again before it sleeps).
    waiting: [Option<Waker>; 2],
}

/// One side's registrations of the two fds, and its keep-alive timer.
struct Fds {
    cq: AsyncFd<OwnedFd>,
    cm: AsyncFd<OwnedFd>,
    /// A timerfd (made on the first wait with keep-alive on), and
    /// whether it is armed for the wait going on.
    ka: Option<AsyncFd<OwnedFd>>,
    ka_armed: bool,
}

impl Fds {
    /// With keep-alive every `every`: whether this wait has been quiet
    /// that long (the caller probes), else the timer armed for it (or
    /// still running) with `cx` woken when it fires.
    fn keepalive_due(&mut self, cx: &mut TaskContext<'_>, every: Duration) -> io::Result<bool> {
        if self.ka.is_none() {
            let fd = crate::sys::deadline_fd(every)?;
            self.ka = Some(register("stream's keep-alive timer", fd)?);
            self.ka_armed = true;
        }
        let Some(t) = &self.ka else {
            return Ok(false);
        };
        if !self.ka_armed {
            crate::sys::set_deadline(t.get_ref().as_fd(), every)?;
            self.ka_armed = true;
            // A readiness cached from an expiry of an earlier wait.
            if let Poll::Ready(g) = t.poll_read_ready(cx) {
                g?.clear_ready();
            }
        }
        match t.poll_read_ready(cx) {
            Poll::Ready(g) => {
                g?.clear_ready();
                self.ka_armed = false;
                Ok(true)
            }
            Poll::Pending => Ok(false),
        }
    }
}

impl std::fmt::Debug for AsyncRdmaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncRdmaStream")
            .field("local_addr", &self.sock.conn.local_addr())
            .field("peer_addr", &self.sock.conn.peer_addr())
            .finish()
    }
}

impl AsyncRdmaStream {
    /// Connects to `addr` with rsockets' default sizes.
    pub async fn connect(addr: impl ToSocketAddrs) -> io::Result<AsyncRdmaStream> {
        StreamOptions::default().connect_async(addr).await
    }

    fn new(mut sock: Socket) -> io::Result<AsyncRdmaStream> {
        sock.nonblocking = true;
        let fds = |sock: &Socket| -> io::Result<Fds> {
            Ok(Fds {
                cq: register(
                    "stream's completion channel",
                    sock.chan().as_fd().try_clone_to_owned()?,
                )?,
                cm: register(
                    "stream's rdma_cm fd",
                    sock.conn.cm_fd().try_clone_to_owned()?,
                )?,
                ka: None,
                ka_armed: false,
            })
        };
        Ok(AsyncRdmaStream {
            read_fds: fds(&sock)?,
            write_fds: fds(&sock)?,
            sock,
            armed: false,
            waiting: [None, None],
        })
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock
            .conn
            .peer_addr()
            .ok_or_else(|| super::no_addr("peer"))
    }

    /// This side's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock
            .conn
            .local_addr()
            .ok_or_else(|| super::no_addr("local side"))
    }

    /// The protection domain of this stream's verbs objects
    /// ([`RdmaStream::pd`](super::RdmaStream::pd)).
    pub fn pd(&self) -> &rverbs::Pd {
        self.sock.pd()
    }

    /// Offers the peer `mr` to write into
    /// ([`RdmaStream::iomap`](super::RdmaStream::iomap), whose contract
    /// this shares): the descriptor goes at once if it can, else before
    /// the next write.
    pub fn iomap<B>(
        &mut self,
        mr: &rverbs::Mr<B>,
        offset: Option<u64>,
    ) -> io::Result<super::IoMap> {
        super::iomap(&mut self.sock, mr, offset)
    }

    /// Frees the peer's entry `map` holds
    /// ([`RdmaStream::iounmap`](super::RdmaStream::iounmap)).
    pub fn iounmap(&mut self, map: super::IoMap) -> io::Result<()> {
        self.sock.iounmap(map)
    }

    /// Writes what it can of `buf` at `offset` into the peer's regions
    /// ([`RdmaStream::iowrite`](super::RdmaStream::iowrite)), awaiting
    /// room.
    pub async fn iowrite(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        std::future::poll_fn(|cx| self.poll_op(cx, true, |s| s.iowrite(buf, offset, None))).await
    }

    /// Runs `op` until it does not return `WouldBlock`, sleeping on the
    /// two fds between tries.
    fn poll_op<T>(
        &mut self,
        cx: &mut TaskContext<'_>,
        write: bool,
        mut op: impl FnMut(&mut Socket) -> io::Result<T>,
    ) -> Poll<io::Result<T>> {
        loop {
            match op(&mut self.sock) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => {
                    // The next wait starts its quiet time afresh.
                    if write {
                        self.write_fds.ka_armed = false;
                    } else {
                        self.read_fds.ka_armed = false;
                    }
                    return Poll::Ready(r);
                }
            }
            if !self.armed {
                // Poll once more after arming: a completion that came
                // before the arm raises no event.
                self.sock.arm()?;
                self.armed = true;
                continue;
            }
            let fds = if write {
                &mut self.write_fds
            } else {
                &mut self.read_fds
            };
            let cq = fds.cq.poll_read_ready(cx);
            let cm = fds.cm.poll_read_ready(cx);
            let mut woke = false;
            if let Poll::Ready(g) = cq {
                g?.clear_ready();
                self.sock.drain_cq_events()?;
                self.armed = false;
                woke = true;
            }
            if let Poll::Ready(g) = cm {
                g?.clear_ready();
                self.sock.on_cm_event()?;
                woke = true;
            }
            if woke {
                // The other side may be asleep on what this side just
                // consumed (its registration saw the same readiness, but
                // the CQ is disarmed now and the completions polled).
                if let Some(w) = self.waiting[usize::from(!write)].take() {
                    w.wake();
                }
            } else {
                // With keep-alive on, a wait quiet for an interval probes
                // the peer (as the blocking streams' waits do): a probe
                // that cannot be delivered fails, and that failure's
                // completion ends the wait with an error.
                if let Some(every) = self.sock.keepalive {
                    if fds.keepalive_due(cx, every)? {
                        self.sock.send_probe()?;
                        continue;
                    }
                }
                let slot = &mut self.waiting[usize::from(write)];
                if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *slot = Some(cx.waker().clone());
                }
                return Poll::Pending;
            }
        }
    }
}

impl AsyncRead for AsyncRdmaStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let out = buf.initialize_unfilled();
        match this.poll_op(cx, false, |s| s.recv(out, None)) {
            Poll::Ready(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for AsyncRdmaStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_op(cx, true, |s| s.send(buf, None))
    }

    /// Nothing is buffered: data is posted as it is written.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Closes the write side (rsockets' shutdown message): the peer reads
    /// end of file after what was written.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_op(cx, true, |s| s.try_shutdown_write())
    }
}

impl Drop for AsyncRdmaStream {
    fn drop(&mut self) {
        let _ = self.sock.shutdown(Shutdown::Both, CLOSE_TIMEOUT);
    }
}
