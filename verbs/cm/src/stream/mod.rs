//! Byte streams over RDMA that speak librdmacm's **rsockets** protocol:
//! [`RdmaListener`] and [`RdmaStream`], used like `TcpListener` and
//! `TcpStream` (`std::io::Read` and `Write`), interoperable with C
//! programs on rsockets (`rstream`, `riostream`, `rcopy`, anything
//! preloaded with `librspreload`), with no C.
//!
//! A connection is an RC QP set up through rdma_cm (the TCP port space,
//! so an rsocket's address and port are those it was bound to). Each side
//! registers a receive buffer the peer writes into directly; data is
//! copied into a registered send ring (or, up to the inline size, straight
//! into the work request) and goes out as RDMA WRITE WITH IMMEDIATE, so
//! the receiver's CPU only copies it out. Flow control is rsockets':
//! credits (one per message the receiver can take) and buffer grants (the
//! receiver hands out its buffer in halves as it is read). The connection
//! data exchanged in the CM's private data, the immediates, and the
//! grants' layout are rsockets' own, byte for byte (the module `wire`,
//! public only for the fuzz targets).
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use rverbs_cm::stream::{RdmaListener, RdmaStream};
//! # fn main() -> std::io::Result<()> {
//! let listener = RdmaListener::bind("10.0.0.1:7471")?;
//! std::thread::spawn(move || -> std::io::Result<()> {
//!     let (mut s, _peer) = listener.accept()?;
//!     let mut buf = [0u8; 5];
//!     s.read_exact(&mut buf)?;
//!     s.write_all(&buf)
//! });
//! let mut s = RdmaStream::connect("10.0.0.1:7471")?;
//! s.write_all(b"hello")?;
//! let mut back = [0u8; 5];
//! s.read_exact(&mut back)?;
//! assert_eq!(&back, b"hello");
//! # Ok(()) }
//! ```
//!
//! **Closing.** Dropping a stream closes both directions as rsockets'
//! `rclose` does: a disconnect message, a bounded wait for the sends
//! already posted, then the rdma_cm disconnect. The peer reads what was
//! sent before, then end of file. A peer that goes away without closing
//! (its process killed: its rdma_cm disconnects) is reported as
//! `ConnectionReset` once the data that did arrive has been read; a work
//! request that fails (a link gone for good) as `ConnectionAborted`; a
//! peer that breaks the protocol (writes past its grant, ignores its
//! credits) as `InvalidData`. Nothing a peer sends can make this side
//! read or write outside its own buffers.
//!
//! **Direct placement** (rsockets' `riomap` / `riowrite`): a side that
//! asked for entries ([`StreamOptions::iomap_size`]) lets its peer offer
//! it MRs ([`RdmaStream::iomap`]) which it then writes into by offset
//! ([`RdmaStream::iowrite`]): plain RDMA WRITEs the receiving process
//! never sees, so it learns of them by other means (a byte it polls, or a
//! message sent after them on the stream, which arrives after them).
//! The async streams have the same calls.
//!
//! **Threads.** [`RdmaStream::try_clone`] gives a second handle to the
//! same connection, as `TcpStream::try_clone` does, and `Read`/`Write`
//! are implemented for `&RdmaStream` too (share one in an `Arc`): a
//! reader thread blocked in `read` does not hold up a writer thread, nor
//! the other way round, because no thread holds the stream's lock while
//! it sleeps. Two threads reading at once each get whole chunks of the
//! stream in order, but which thread gets which chunk is not defined
//! (two writers likewise). The settings (timeouts, non-blocking mode)
//! belong to the stream, not the handle; a `shutdown` through one handle
//! holds for all; the stream closes when its last handle is dropped. The
//! async stream splits with `tokio::io::split`, whose owned
//! `ReadHalf`/`WriteHalf` move to tasks of their own and wait at once; it
//! has no `split`/`into_split` methods of its own (tokio's `TcpStream`
//! has them).
//!
//! **Not spoken (yet):** the iWARP message-send mode and AF_IB addresses.
//!
//! # Errors
//!
//! Every call fails with an `io::Error` of the kind a `TcpStream` (or
//! `TcpListener`) gives for the same cause, and a message that names it
//! (the library's own message, the CM's reject reason, the errno). The
//! kinds, for the blocking and the async types alike:
//!
//! - **connect** ([`RdmaStream::connect`], [`StreamOptions::connect`],
//!   `connect_async`):
//!   `ConnectionRefused`, the peer's CM rejected the request: nobody
//!   listens on the port (reject reason 8), or the listener refused it
//!   (reason 28: rdma_cm found no listener for that address, or the
//!   server turned it down), as librdmacm reports every reject
//!   (ECONNREFUSED);
//!   `TimedOut`, a step (address, route, the peer's answer) took longer
//!   than [`StreamOptions::timeout`], or the peer's CM never answered;
//!   `HostUnreachable`, nobody answered address resolution (ARP) for an
//!   address on a local subnet (TCP's "no route to host");
//!   `NetworkUnreachable`, no route to the address, or a route that
//!   leaves by a netdev without an RDMA device (loopback included);
//!   `AddrNotAvailable` / `AddrInUse`, the [`StreamOptions::source`]
//!   address is not this host's, or its port is taken;
//!   `InvalidData`, the server answered without rsockets' connection
//!   data; `InvalidInput`, options out of range, or no address to try;
//!   `NotFound`, `/dev/infiniband/rdma_cm` (or a uverbs node) is missing
//!   or has no driver ("is the rdma_ucm module loaded?");
//!   `PermissionDenied`, a device node this process may not open;
//!   `OutOfMemory`, the device or the kernel refused the stream's
//!   resources (ENOMEM; the locked-memory limit, for one).
//!   `HostUnreachable` and `NetworkUnreachable` are named in std from
//!   Rust 1.83; on older toolchains the same values come back (as they
//!   do from a `TcpStream`): compare with
//!   `io::Error::from_raw_os_error(libc::EHOSTUNREACH).kind()`.
//! - **bind** ([`RdmaListener::bind`], `bind_async`): `AddrInUse`,
//!   `AddrNotAvailable` (an address this host does not have),
//!   `InvalidInput`, `NotFound`, `PermissionDenied`, as for connect.
//! - **accept**: `TimedOut` ([`RdmaListener::accept_timeout`] with no
//!   request in time); `ConnectionAborted`, the peer gave up or went
//!   away between its request and the end of the handshake (the listener
//!   goes on: accept again); `OutOfMemory` and the other resource
//!   failures of connect.
//! - **read**: `Ok(0)` at end of file (the peer closed its side, or
//!   `shutdown(Read)` here); `WouldBlock` (non-blocking); `TimedOut` (the
//!   read timeout); `ConnectionReset`, the peer went away without closing,
//!   once what it sent was read; `ConnectionAborted`, a work request
//!   failed (a link gone for good, a keep-alive probe not delivered);
//!   `InvalidData`, the peer broke the protocol.
//! - **write** and **iowrite**: `BrokenPipe`, the write side is closed
//!   (`shutdown(Write)` here, or the peer closed the stream);
//!   `WouldBlock`; `TimedOut` (the write timeout); `ConnectionReset`,
//!   `ConnectionAborted`, `InvalidData` as for read; `iowrite` also
//!   `InvalidInput` (no region of the peer's at that offset).
//! - **iomap**: `InvalidInput` (an MR that cannot be offered),
//!   `OutOfMemory` (every entry the peer offers is taken); **iounmap**:
//!   `InvalidInput` (not a mapping of this stream).
//! - **shutdown** (and the async `poll_shutdown`): `TimedOut` when the
//!   sends already posted did not complete within 2 s (the direction is
//!   closed all the same); never the peer's faults, which the next read
//!   or write reports.
//! - **set_read_timeout**, **set_write_timeout**: `InvalidInput` for a
//!   zero duration, as std.
//! - **peer_addr**, **local_addr**: `Other` if the kernel reported an
//!   address that is not an IP address (not on an IP connection).
//! - **drop**: closes without reporting (as a `TcpStream` does).
//! - The async types, called outside a tokio runtime (or one without I/O
//!   enabled): `Other`.
//!
//! A verbs call of the stream's own that fails (the kernel refusing a
//! command, which does not happen on a healthy device) ends the stream:
//! that call fails with the errno's kind, later ones with `Other`.

mod blocking;
#[cfg(feature = "fuzz")]
pub mod book;
// Its items are `pub` for the fuzz build, which makes it public.
#[cfg(not(feature = "fuzz"))]
#[allow(unreachable_pub)]
mod book;
mod socket;
#[cfg(test)]
mod tests;
#[cfg(feature = "tokio")]
mod tokio;
#[cfg(feature = "fuzz")]
pub mod wire;
// Its items are `pub` for the fuzz build, which makes it public.
#[cfg(not(feature = "fuzz"))]
#[allow(unreachable_pub)]
mod wire;

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::{CmId, ConnParams, ConnRequest, Connection, Listener, Resolved};
use rverbs::{AccessFlags, Context, Mr, Pd};

use blocking::{Dir, Shared};
pub use socket::IoMap;
use socket::{accept_err, io_err, resolve_err, Parts, Prepared, Socket};
#[cfg(feature = "tokio")]
pub use tokio::{AsyncRdmaListener, AsyncRdmaStream};
use wire::ConnData;

/// The local ACK timeout of every stream's QP (4.096 us * 2^17, about
/// 0.5 s per transport retry), set on both sides: left to the kernel,
/// the passive side's QP may get none at all on RoCE, and then a probe or
/// a write facing a dead link would never fail.
const ACK_TIMEOUT: u8 = 17;

/// How long a drop waits for the close to go out.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Sizes and limits of the streams a listener accepts or a connect
/// makes: rsockets' socket options. Defaults are rsockets' own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOptions {
    send_buf: u32,
    recv_buf: u32,
    inline: u16,
    sq_size: u16,
    rq_size: u16,
    timeout: Duration,
    source: Option<SocketAddr>,
    keepalive: Option<Duration>,
    iomap_size: u32,
}

impl Default for StreamOptions {
    /// 128 KiB each way, 64 bytes inline, 384-deep queues (rsockets'
    /// defaults), 10 s per connection step.
    fn default() -> Self {
        StreamOptions {
            send_buf: 1 << 17,
            recv_buf: 1 << 17,
            inline: 64,
            sq_size: 384,
            rq_size: 384,
            timeout: Duration::from_secs(10),
            source: None,
            keepalive: None,
            iomap_size: 0,
        }
    }
}

impl StreamOptions {
    /// rsockets' defaults ([`StreamOptions::default`]).
    pub fn new() -> StreamOptions {
        StreamOptions::default()
    }

    /// The send buffer's size in bytes (the registered ring data is
    /// copied into). rsockets doubles what `SO_SNDBUF` is given, as Linux
    /// does: its `SO_SNDBUF` of `n` is `send_buffer(2 * n)` here. From
    /// 4 KiB to 1 GiB.
    pub fn send_buffer(mut self, bytes: u32) -> Self {
        self.send_buf = bytes;
        self
    }

    /// The receive buffer's size in bytes (registered for the peer's
    /// writes, granted to it in halves): even, from 4 KiB to 1 GiB.
    /// rsockets' `SO_RCVBUF` of `n` is `recv_buffer(2 * n)` here.
    pub fn recv_buffer(mut self, bytes: u32) -> Self {
        self.recv_buf = bytes;
        self
    }

    /// Data messages up to this size go inline in the work request
    /// (rsockets' `RDMA_INLINE`; the device may lower it, 0 turns it off).
    pub fn inline_size(mut self, bytes: u16) -> Self {
        self.inline = bytes;
        self
    }

    /// The send queue's depth (rsockets' `RDMA_SQSIZE`; kept within 16
    /// and what the device offers).
    pub fn sq_size(mut self, n: u16) -> Self {
        self.sq_size = n;
        self
    }

    /// The receive queue's depth, which is also the credits the peer gets
    /// (rsockets' `RDMA_RQSIZE`; kept within 16 and what the device
    /// offers).
    pub fn rq_size(mut self, n: u16) -> Self {
        self.rq_size = n;
        self
    }

    /// The longest wait of each connection step (address, route, the
    /// peer's answer).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Connects from this local address (its port 0 for any), as
    /// `bind` before `connect`.
    pub fn source(mut self, addr: SocketAddr) -> Self {
        self.source = Some(addr);
        self
    }

    /// Probes a quiet peer every `interval` while a blocking read or write
    /// waits (rsockets' `SO_KEEPALIVE` with `TCP_KEEPIDLE`; off by
    /// default): a zero-length RDMA WRITE, which the peer's device answers
    /// without its process. When the link or the peer's host is gone the
    /// probe's transport retries run out and the wait fails with
    /// `ConnectionAborted` instead of waiting on. The async streams
    /// probe the same way while a read or write is pending.
    pub fn keepalive(mut self, interval: Option<Duration>) -> Self {
        self.keepalive = interval;
        self
    }

    /// How many direct-placement regions the peer may offer this side to
    /// write into ([`RdmaStream::iowrite`]; rsockets' `RDMA_IOMAPSIZE`,
    /// 0 by default): kept as rsockets keeps it (up to 128 exactly,
    /// larger counts rounded down to a multiple of 256, at most 32512).
    pub fn iomap_size(mut self, n: u32) -> Self {
        self.iomap_size = wire::scale_to_value(wire::value_to_scale(n));
        self
    }

    fn check(&self) -> io::Result<()> {
        let range = 2 * socket::SNDLOWAT..=1 << 30;
        let bad = |m: String| Err(io::Error::new(io::ErrorKind::InvalidInput, m));
        if !range.contains(&self.send_buf) {
            return bad(format!(
                "send buffer of {} bytes: 4096 to 1 GiB supported",
                self.send_buf
            ));
        }
        if !range.contains(&self.recv_buf) || self.recv_buf % 2 != 0 {
            return bad(format!(
                "receive buffer of {} bytes: an even size from 4096 to 1 GiB supported",
                self.recv_buf
            ));
        }
        Ok(())
    }

    /// Connects to `addr` (each address it resolves to in turn, as
    /// `TcpStream::connect`) with these options.
    pub fn connect(&self, addr: impl ToSocketAddrs) -> io::Result<RdmaStream> {
        self.check()?;
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match self.connect_one(a) {
                Ok(s) => return Ok(s),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to")
        }))
    }

    fn connect_one(&self, dst: SocketAddr) -> io::Result<RdmaStream> {
        let resolved = self
            .new_id()?
            .resolve(dst, self.timeout)
            .map_err(|e| resolve_err(e, dst))?;
        let (Prepared { qp, parts }, params) = self.prepare_connect(&resolved)?;
        let conn = resolved.connect(qp, &params).map_err(io_err)?;
        RdmaStream::new(self.established(conn, parts, dst)?)
    }

    /// A new id, bound to the source address if there is one.
    fn new_id(&self) -> io::Result<CmId> {
        let mut id = CmId::new().map_err(io_err)?;
        if let Some(src) = self.source {
            id.bind(src).map_err(io_err)?;
        }
        Ok(id)
    }

    /// The active side before its connect: the ACK timeout on the resolved
    /// id, the verbs objects on its device, the QP in INIT with its
    /// receives posted, and the connection parameters.
    fn prepare_connect(&self, resolved: &Resolved) -> io::Result<(Prepared, ConnParams)> {
        resolved.set_ack_timeout(ACK_TIMEOUT).map_err(io_err)?;
        let ctx = context_for(resolved.device())?;
        let mut p = Prepared::new(&ctx, self).map_err(io_err)?;
        resolved.init_qp(&mut p.qp).map_err(io_err)?;
        p.post_recvs().map_err(io_err)?;
        let params = conn_params(&p, self.timeout);
        Ok((p, params))
    }

    /// The active side once connected: the server's answer must carry
    /// rsockets' connection data.
    fn established(&self, conn: Connection, parts: Parts, dst: SocketAddr) -> io::Result<Socket> {
        let peer = ConnData::decode(conn.private_data()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{dst} answered without rsockets' connection data: {e}"),
            )
        })?;
        self.socket(conn, parts, &peer)
    }

    /// The socket of an established connection, with these options.
    fn socket(&self, conn: Connection, parts: Parts, peer: &ConnData) -> io::Result<Socket> {
        let mut sock = Socket::new(conn, parts, peer)?;
        sock.keepalive = self.keepalive;
        Ok(sock)
    }

    /// The passive side's answer to `req`, prepared: `Ok(None)` if `req`
    /// carries no rsockets connection data (it is rejected).
    fn prepare_accept(&self, req: ConnRequest) -> io::Result<Option<Accepting>> {
        let peer = match ConnData::decode(req.private_data()) {
            Ok(p) => p,
            Err(_) => {
                let _ = req.reject(&[]);
                return Ok(None);
            }
        };
        let peer_addr = req
            .peer_addr()
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        let ctx = context_for(req.device())?;
        let mut p = match Prepared::new(&ctx, self) {
            Ok(p) => p,
            Err(e) => {
                let _ = req.reject(&[]);
                return Err(io_err(e));
            }
        };
        req.set_ack_timeout(ACK_TIMEOUT).map_err(io_err)?;
        req.init_qp(&mut p.qp).map_err(io_err)?;
        p.post_recvs().map_err(io_err)?;
        let params = conn_params(&p, self.timeout);
        Ok(Some(Accepting {
            req,
            peer,
            peer_addr,
            prepared: p,
            params,
        }))
    }

    /// Listens on `addr` with these options for the streams it accepts.
    pub fn bind(&self, addr: impl ToSocketAddrs) -> io::Result<RdmaListener> {
        self.check()?;
        let mut last = None;
        for a in addr.to_socket_addrs()? {
            match Listener::bind(a, 128) {
                Ok(listener) => {
                    return Ok(RdmaListener {
                        listener,
                        opts: self.clone(),
                    })
                }
                Err(e) => last = Some(io_err(e)),
            }
        }
        Err(last
            .unwrap_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no address to bind")))
    }
}

/// A connection request answered but not yet accepted.
struct Accepting {
    req: ConnRequest,
    peer: ConnData,
    peer_addr: SocketAddr,
    prepared: Prepared,
    params: ConnParams,
}

/// rsockets' connection parameters (this side's connection data as
/// private data, no RDMA READ either way, RNR retries forever), but 6
/// transport retries where rsockets asks for 7: rxe takes 7 as "retry
/// forever", which would leave a writer facing a cut link waiting for
/// good. Retry counts are each side's own: the wire does not change.
fn conn_params(p: &Prepared, timeout: Duration) -> ConnParams {
    ConnParams {
        private_data: p.parts.conn_data().encode().to_vec(),
        responder_resources: 0,
        initiator_depth: 0,
        retry_count: 6,
        rnr_retry_count: 7,
        timeout,
    }
}

/// The device contexts opened so far, one per device, shared by every
/// stream (as librdmacm keeps one per device).
static CONTEXTS: Mutex<Vec<Context>> = Mutex::new(Vec::new());

fn context_for(device: &rverbs::Device) -> io::Result<Context> {
    let mut all = CONTEXTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(c) = all.iter().find(|c| c.device().name() == device.name()) {
        return Ok(c.clone());
    }
    let c = device.open().map_err(io_err)?;
    all.push(c.clone());
    Ok(c)
}

/// A listening rsocket: accepts [`RdmaStream`]s.
#[derive(Debug)]
pub struct RdmaListener {
    listener: Listener,
    opts: StreamOptions,
}

impl RdmaListener {
    /// Listens on `addr` with rsockets' default sizes.
    pub fn bind(addr: impl ToSocketAddrs) -> io::Result<RdmaListener> {
        StreamOptions::default().bind(addr)
    }

    /// The options of the streams accepted from now on (the source
    /// address is not used).
    pub fn set_options(&mut self, opts: StreamOptions) {
        self.opts = opts;
    }

    /// The address it listens on (as `TcpListener::local_addr`; it
    /// does not fail).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.listener.local_addr())
    }

    /// Waits for a connection and accepts it. A request that does not
    /// carry rsockets' connection data is rejected and the wait goes on.
    pub fn accept(&self) -> io::Result<(RdmaStream, SocketAddr)> {
        self.accept_inner(None)
    }

    /// [`RdmaListener::accept`], waiting at most `timeout` for the
    /// request (then `TimedOut`).
    pub fn accept_timeout(&self, timeout: Duration) -> io::Result<(RdmaStream, SocketAddr)> {
        self.accept_inner(Some(timeout))
    }

    fn accept_inner(&self, timeout: Option<Duration>) -> io::Result<(RdmaStream, SocketAddr)> {
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            let Some(req) = self.listener.get_request(left).map_err(io_err)? else {
                if left.is_some() {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no connection request within the timeout",
                    ));
                }
                continue;
            };
            let Some(a) = self.opts.prepare_accept(req)? else {
                continue;
            };
            let Prepared { qp, parts } = a.prepared;
            let conn = a.req.accept(qp, &a.params).map_err(accept_err)?;
            let sock = self.opts.socket(conn, parts, &a.peer)?;
            return Ok((RdmaStream::new(sock)?, a.peer_addr));
        }
    }
}

/// A connected rsocket: a byte stream over an RC QP.
///
/// Its handles ([`RdmaStream::try_clone`]) share the connection, as
/// `TcpStream`'s do: the settings (timeouts, non-blocking mode) are the
/// stream's, not a handle's, and the stream closes when its last handle
/// is dropped. `Read` and `Write` are implemented for `&RdmaStream` too.
pub struct RdmaStream {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RdmaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (local, peer) = self.shared.addrs();
        f.debug_struct("RdmaStream")
            .field("local_addr", &local)
            .field("peer_addr", &peer)
            .finish()
    }
}

/// An address the connection has none of: the kernel reported one that
/// is not an IP address.
fn no_addr(which: &str) -> io::Error {
    io::Error::other(format!(
        "the kernel reported no IP address for the connection's {which}"
    ))
}

/// std's rule for a timeout: `Some(Duration::ZERO)` is refused.
fn check_timeout(t: Option<Duration>) -> io::Result<()> {
    if t == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        ));
    }
    Ok(())
}

impl RdmaStream {
    /// Connects to `addr` with rsockets' default sizes.
    pub fn connect(addr: impl ToSocketAddrs) -> io::Result<RdmaStream> {
        StreamOptions::default().connect(addr)
    }

    fn new(sock: Socket) -> io::Result<RdmaStream> {
        Ok(RdmaStream {
            shared: Arc::new(Shared::new(sock)?),
        })
    }

    /// A second handle to the same connection (as
    /// `TcpStream::try_clone`), for a reader thread and a writer thread:
    /// a read blocked waiting for data does not hold up a write, nor the
    /// other way round. Two threads reading at once each get whole
    /// chunks of the stream, in order, but which thread gets which chunk
    /// is not defined (as with a `TcpStream`); the same holds for two
    /// writers. The settings and the connection are shared: a
    /// [`shutdown`](RdmaStream::shutdown) through one handle closes for
    /// all (a reader blocked on another handle then reads end of file),
    /// and the stream closes when the last handle is dropped.
    pub fn try_clone(&self) -> io::Result<RdmaStream> {
        Ok(RdmaStream {
            shared: Arc::clone(&self.shared),
        })
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.shared.addrs().1.ok_or_else(|| no_addr("peer"))
    }

    /// This side's address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.shared.addrs().0.ok_or_else(|| no_addr("local side"))
    }

    /// Closes the read side, the write side, or both (as rsockets'
    /// `rshutdown`): the peer reads end of file once it read what was
    /// sent; a read on this side (blocked in another thread included)
    /// returns end of file once the read side is closed. Waits up to 2 s
    /// for the sends already posted (then `TimedOut`, the direction
    /// closed all the same).
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.shared.shutdown(how)
    }

    /// A read waits at most this long (`None`: no limit), then fails with
    /// `TimedOut`. As `TcpStream::set_read_timeout`: a zero duration is
    /// refused with `InvalidInput`.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        self.shared.with(|s| s.read_timeout = t);
        Ok(())
    }

    /// A write (or [`iowrite`](RdmaStream::iowrite)) waits at most this
    /// long for room (`None`: no limit), then fails with `TimedOut`. A
    /// zero duration is refused with `InvalidInput`.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        self.shared.with(|s| s.write_timeout = t);
        Ok(())
    }

    /// The read timeout ([`RdmaStream::set_read_timeout`]).
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.shared.with(|s| s.read_timeout))
    }

    /// The write timeout ([`RdmaStream::set_write_timeout`]).
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.shared.with(|s| s.write_timeout))
    }

    /// Reads and writes that would wait fail with `WouldBlock` instead.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.shared.with(|s| s.nonblocking = on);
        Ok(())
    }

    /// Whether received data is waiting to be read.
    pub fn has_data(&self) -> bool {
        self.shared.with(|s| s.sock.has_data())
    }

    /// The protection domain of this stream's verbs objects: register
    /// here the MRs to offer with [`RdmaStream::iomap`].
    pub fn pd(&self) -> &Pd {
        self.shared.pd()
    }

    /// Offers the peer all of `mr` to write into with its `iowrite`
    /// (rsockets' `riomap` with `PROT_WRITE`), addressed from `offset`
    /// (`None`: the MR's address, as rsockets' offset of -1). Returns
    /// the mapping; its offset is the peer's address of the MR's first
    /// byte.
    ///
    /// `mr` must be registered on [`RdmaStream::pd`] with
    /// [`AccessFlags::REMOTE_WRITE`], be at most 4 GiB - 1 long, and not
    /// be empty (else `InvalidInput`). The peer may write it from the
    /// moment its descriptor arrives (it goes at once if a message can,
    /// else before the next write on this stream) as long as the MR
    /// stays registered: [`RdmaStream::iounmap`] frees the peer's entry
    /// for another mapping but cannot take back what the peer has;
    /// dropping (or deregistering) the MR does, and the peer's later
    /// writes then fail, which breaks its stream. Read what arrived with
    /// [`Mr::read_at`] (which tolerates the device writing meanwhile).
    ///
    /// Fails with `OutOfMemory` when every entry the peer offers (its
    /// [`StreamOptions::iomap_size`]) is taken.
    pub fn iomap<B>(&self, mr: &Mr<B>, offset: Option<u64>) -> io::Result<IoMap> {
        self.shared.with(|s| iomap(&mut s.sock, mr, offset))
    }

    /// Frees the peer's entry `map` holds (rsockets' `riounmap`, but the
    /// MR stays registered: drop it to revoke the peer's access).
    /// `InvalidInput` if `map` is not one of this stream's mappings.
    pub fn iounmap(&self, map: IoMap) -> io::Result<()> {
        self.shared.with(|s| s.sock.iounmap(map))
    }

    /// Writes what it can of `buf` at `offset` into the regions the peer
    /// offered with its `iomap` (rsockets' `riowrite`): copied through the
    /// send buffer and posted as plain RDMA WRITEs, which take no credit
    /// and which the peer's process does not see. Returns the bytes
    /// written: fewer than `buf` where a region ends and none follows, or
    /// when room ran out after part of it went. Fails with `InvalidInput`
    /// if no region holds `offset`; waits for room (or fails with
    /// `WouldBlock`, `TimedOut`) as a write does.
    ///
    /// A message written on the stream after this arrives after these
    /// bytes have landed: use one to tell the peer.
    pub fn iowrite(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.shared
            .run(Dir::Write, |s| s.iowrite(buf, offset, None))
    }
}

/// Offers `mr` on `sock` (see [`RdmaStream::iomap`]) once it is checked
/// to be one the peer may be given.
fn iomap<B>(sock: &mut Socket, mr: &Mr<B>, offset: Option<u64>) -> io::Result<IoMap> {
    let bad = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, m.to_string()));
    if !mr.pd().same(sock.pd()) {
        return bad("the MR is not registered on the stream's protection domain");
    }
    if !mr.access().contains(AccessFlags::REMOTE_WRITE) {
        return bad("the MR does not allow remote writes");
    }
    let Ok(len) = u32::try_from(mr.len()) else {
        return bad("the MR is 4 GiB or longer: rsockets' descriptors hold 32-bit lengths");
    };
    if len == 0 {
        return bad("the MR is empty");
    }
    sock.iomap(mr.iova(), mr.rkey(), len, offset.unwrap_or(mr.iova()))
}

impl Read for &RdmaStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.shared.run(Dir::Read, |s| s.recv(buf, None))
    }
}

impl Write for &RdmaStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.shared.run(Dir::Write, |s| s.send(buf, None))
    }

    /// Nothing is buffered: data is posted as it is written.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for RdmaStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for RdmaStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    /// Nothing is buffered: data is posted as it is written.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
