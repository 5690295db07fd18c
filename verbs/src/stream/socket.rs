//! One rsockets connection: its verbs objects and the protocol's state
//! (credits, buffer grants, the ring of received messages), driven by
//! polling its CQ. The public types in `super` wrap it.
//!
//! The protocol, as rsockets speaks it: each side registers a receive
//! buffer (`rbuf`) the peer may write and a two-entry target list
//! (`target`) the peer writes buffer grants into. Data goes out as RDMA
//! WRITE WITH IMMEDIATE into the space granted (the immediate: `Data` and
//! the length), each consuming one of the peer's posted (empty) receives;
//! the receiver reads the bytes in order from its buffer. As it frees
//! space it grants the next half of its buffer (an RDMA WRITE of a
//! descriptor into the sender's target list, immediate `Sgl` and the
//! sequence number up to which the sender may send), or credits alone (a
//! zero-length write with the same immediate). `Ctrl` messages close one
//! or both directions.

use std::io::{self, IoSlice};
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use crate::cm::{CmEventKind, Connection};
use crate::mr::PageBuf;
use crate::opcode::Write;
use crate::qp::{QpCap, QpInitAttr, QpType};
use crate::{AccessFlags, CompChannel, Context, Cq, Mr, Qp, RecvWr, Sge, Wc, WcStatus};

use super::book::RecvBook;
use super::wire::{self, ConnData, Ctrl, Iomap, Msg, Op, RsSge, IOMAP_LEN, SGE_LEN, SGL_SIZE};
use super::StreamOptions;

/// The first data message's size of a write; it doubles per message up to
/// [`MAX_TRANSFER`] (rsockets' overlap start size).
const OLAP_START_SIZE: u32 = 2048;
/// The largest data message.
const MAX_TRANSFER: u32 = 65536;
/// Send-buffer space that must be free before data is sent.
pub(super) const SNDLOWAT: u32 = 2048;
/// Bounds of the queues' depths.
pub(super) const QP_MIN_SIZE: u32 = 16;
pub(super) const QP_MAX_SIZE: u32 = 0xfffe;
/// Control messages in flight at most.
const QP_CTRL_SIZE: u32 = 4;
/// A control message's largest payload (a descriptor).
const MAX_CTRL_MSG: u32 = SGE_LEN as u32;
/// Marks a receive's work request id.
const WR_ID_RECV: u64 = 1 << 63;
/// How often a non-blocking wait that finds nothing reads the rdma_cm fd
/// (a system call; the CQ is polled every time), on [`coarse_now`]'s
/// clock.
const CM_CHECK_EVERY: Duration = Duration::from_millis(5);
/// Completions taken per poll.
const WC_BATCH: usize = 16;

/// The coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`, accurate to a
/// tick), which the vDSO reads without a system call whatever the clock
/// source. `Instant::now` is `CLOCK_MONOTONIC`, a system call where the
/// clock source has no vDSO path (HPET, as under QEMU TCG): a caller
/// spinning on a non-blocking read would pay one per spin, which delays
/// its noticing the completion it spins for (rsockets reads no clock
/// there). `None` if the clock cannot be read.
fn coarse_now() -> Option<Duration> {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_MONOTONIC_COARSE)
        .ok()
        .map(Duration::from)
}

/// Sleeps until one of `fds` is readable (or has failed), or `left`
/// passes (`None`: no limit): which ones are. An interrupted sleep
/// reports none.
pub(super) fn sleep_on<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    left: Option<Duration>,
) -> io::Result<[bool; N]> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let ms = match left {
        None => PollTimeout::NONE,
        Some(d) => {
            // Round up so that a wait never spins on 0 ms.
            let ms = d.as_millis().saturating_add(1).min(i32::MAX as u128) as i32;
            PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
        }
    };
    let mut pfds = fds.map(|fd| PollFd::new(fd, PollFlags::POLLIN));
    match poll(&mut pfds, ms) {
        Ok(_) => {}
        Err(nix::errno::Errno::EINTR) => return Ok([false; N]),
        Err(e) => return Err(io::Error::from(e)),
    }
    Ok(pfds.map(|f| {
        f.revents().is_some_and(|r| {
            r.intersects(PollFlags::POLLIN | PollFlags::POLLERR | PollFlags::POLLHUP)
        })
    }))
}

/// The next message's size of a write with `left` bytes to go: `olen`,
/// which doubles each message up to [`MAX_TRANSFER`], or what is left
/// (rsockets' overlap of copying and sending).
fn next_xfer(olen: &mut u32, left: u32) -> u32 {
    if *olen < left {
        let x = *olen;
        if *olen < MAX_TRANSFER {
            *olen <<= 1;
        }
        x
    } else {
        left
    }
}

/// How the connection ended, if it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    /// The peer went away without closing (rdma_cm disconnect, or its
    /// QP's error), while a direction was still open.
    Reset,
    /// A work request failed.
    Failed(WcStatus),
    /// The peer broke the protocol.
    Protocol(String),
    /// A local verbs call failed.
    Local(String),
}

impl Fault {
    pub(super) fn to_io(&self) -> io::Error {
        match self {
            Fault::Reset => io::Error::new(
                io::ErrorKind::ConnectionReset,
                "the peer disconnected without closing the stream",
            ),
            Fault::Failed(s) => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("a work request failed: {}", s.as_str()),
            ),
            Fault::Protocol(m) => io::Error::new(
                io::ErrorKind::InvalidData,
                format!("rsockets protocol violation by the peer: {m}"),
            ),
            Fault::Local(m) => io::Error::other(m.clone()),
        }
    }
}

/// A library error as an I/O error: the `ErrorKind` a `TcpStream`
/// would give for the same cause, the library's message kept.
pub(super) fn io_err(e: crate::Error) -> io::Error {
    use crate::cm::CmError;
    use crate::Error;
    match e {
        Error::Timeout(_) | Error::Cm(CmError::Timeout { .. }) => {
            io::Error::new(io::ErrorKind::TimedOut, e.to_string())
        }
        Error::InvalidArgument(_) => io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
        // The peer's CM refused the connection: nobody listens on the port
        // (reason 8, invalid service ID, or 28 when rdma_cm finds no
        // listener for the address), or the server rejected it. librdmacm
        // reports every reject as ECONNREFUSED too.
        Error::Cm(CmError::Rejected { .. }) => {
            io::Error::new(io::ErrorKind::ConnectionRefused, e.to_string())
        }
        // A device node that is not there (ENOENT), or whose driver is not
        // (ENODEV, ENXIO): the message names it (and the module to load).
        Error::Io { ref source, .. } => {
            let kind = match source.raw_os_error() {
                Some(libc::ENODEV | libc::ENXIO) => io::ErrorKind::NotFound,
                _ => source.kind(),
            };
            io::Error::new(kind, e.to_string())
        }
        other => match other.errno() {
            Some(errno) => io::Error::new(
                io::Error::from_raw_os_error(errno.raw()).kind(),
                other.to_string(),
            ),
            None => io::Error::other(other.to_string()),
        },
    }
}

/// The kind a `TcpStream::connect` gives for `raw` (an errno): read off
/// std's own mapping, so `HostUnreachable` and `NetworkUnreachable`
/// come out as they do for TCP even where the toolchain cannot name them
/// (they are stable from Rust 1.83).
fn kind_of(raw: i32) -> io::ErrorKind {
    io::Error::from_raw_os_error(raw).kind()
}

/// A connect's failed address or route resolution to `dst` as the kinds
/// a TCP connect gives: no RDMA device on the way (ENODEV: the route
/// leaves by a netdev without one, loopback included) is
/// `NetworkUnreachable`; no answer to address resolution (the neighbour
/// did not answer ARP, ETIMEDOUT) is `HostUnreachable`, as TCP's "no
/// route to host"; the rest as [`io_err`].
pub(super) fn resolve_err(e: crate::Error, dst: SocketAddr) -> io::Error {
    use crate::cm::CmError;
    use rverbs_abi::Errno;
    match &e {
        _ if e.errno() == Some(Errno::ENODEV) => io::Error::new(
            kind_of(libc::ENETUNREACH),
            format!("no RDMA device reaches {dst} (its route leaves by a netdev without one): {e}"),
        ),
        crate::Error::Cm(CmError::AddrError {
            errno: Errno::ETIMEDOUT,
        }) => io::Error::new(
            kind_of(libc::EHOSTUNREACH),
            format!("{dst} did not answer address resolution (ARP): {e}"),
        ),
        _ => io_err(e),
    }
}

/// The passive side's handshake that failed after the request was
/// taken (the peer gave up, went away, or never confirmed) as
/// `ConnectionAborted`, as a TCP `accept` reports a connection reset
/// before it was accepted; a local failure as [`io_err`].
pub(super) fn accept_err(e: crate::Error) -> io::Error {
    match e {
        crate::Error::Cm(_) => io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("the connection was aborted before it was accepted: {e}"),
        ),
        e => io_err(e),
    }
}

/// The verbs objects of a connection being set up: created on the route's
/// device, the receives posted, before the CM connects the QP.
pub(super) struct Prepared {
    pub(super) qp: Qp,
    pub(super) parts: Parts,
}

/// A prepared connection's objects other than its QP (which the CM's
/// connect or accept takes).
pub(super) struct Parts {
    cq: Cq,
    chan: CompChannel,
    sbuf: Mr<PageBuf>,
    rbuf: Mr<PageBuf>,
    target: Mr<PageBuf>,
    sizes: Sizes,
}

/// The sizes a connection settled on.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    sq_size: u32,
    rq_size: u32,
    sq_inline: u32,
    sbuf_size: u32,
    rbuf_size: u32,
    /// Direct-placement descriptors the peer may write into our target
    /// list's tail.
    iomap_size: u32,
}

impl Prepared {
    /// PD, channel, CQ, RC QP and the three MRs on `ctx`, as rsockets
    /// creates them (one CQ for both queues, every send signaled, two
    /// gather entries for a wrapped send buffer).
    pub(super) fn new(ctx: &Context, o: &StreamOptions) -> crate::Result<Prepared> {
        let max = ctx
            .query_device()?
            .max_qp_wr
            .clamp(QP_MIN_SIZE, QP_MAX_SIZE);
        let sq_size = u32::from(o.sq_size).clamp(QP_MIN_SIZE, max);
        let rq_size = u32::from(o.rq_size).clamp(QP_MIN_SIZE, max);
        let pd = ctx.alloc_pd()?;
        let chan = ctx.create_comp_channel()?;
        let cq = ctx.create_cq_with(sq_size + rq_size, Some(&chan), 0)?;
        let qp = pd.create_qp(
            &QpInitAttr::new(QpType::Rc, &cq)
                .cap(QpCap {
                    max_send_wr: sq_size,
                    max_recv_wr: rq_size,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: u32::from(o.inline),
                })
                .sq_sig_all(true),
        )?;
        let sq_inline = qp.cap().max_inline_data;
        let sbuf_size = o.send_buf;
        let rbuf_size = o.recv_buf;
        // The send buffer, then a slot per control message in flight (for
        // a descriptor that cannot go inline).
        let sbuf = pd.alloc_mr(
            (sbuf_size + MAX_CTRL_MSG * QP_CTRL_SIZE) as usize,
            AccessFlags::LOCAL_WRITE,
        )?;
        let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let rbuf = pd.alloc_mr(rbuf_size as usize, remote)?;
        let iomap_size = o.iomap_size;
        let target = pd.alloc_mr(
            SGE_LEN * SGL_SIZE as usize + IOMAP_LEN * iomap_size as usize,
            remote,
        )?;
        Ok(Prepared {
            qp,
            parts: Parts {
                cq,
                chan,
                sbuf,
                rbuf,
                target,
                sizes: Sizes {
                    sq_size,
                    rq_size,
                    sq_inline,
                    sbuf_size,
                    rbuf_size,
                    iomap_size,
                },
            },
        })
    }

    /// Posts every receive (empty: data lands by RDMA WRITE, the
    /// receive only carries its immediate).
    pub(super) fn post_recvs(&mut self) -> crate::Result<()> {
        for _ in 0..self.parts.sizes.rq_size {
            self.qp.post_recv(&[RecvWr::new(WR_ID_RECV, &[])])?;
        }
        Ok(())
    }
}

impl Parts {
    /// This side's connection data: its receive queue's depth as the
    /// peer's credits, its target list, the first half of its buffer.
    pub(super) fn conn_data(&self) -> ConnData {
        ConnData {
            version: wire::VERSION,
            flags: wire::FLAG_IOMAP
                | if wire::host_is_net() {
                    wire::FLAG_NET
                } else {
                    0
                },
            credits: self.sizes.rq_size as u16,
            target_iomap_size: wire::value_to_scale(self.sizes.iomap_size),
            target_sgl: RsSge {
                addr: self.target.iova(),
                key: self.target.rkey(),
                length: SGL_SIZE,
            },
            data_buf: RsSge {
                addr: self.rbuf.iova(),
                key: self.rbuf.rkey(),
                length: self.sizes.rbuf_size / 2,
            },
        }
    }
}

/// A connected rsocket.
pub(super) struct Socket {
    /// Declared first: dropping it disconnects and destroys the QP before
    /// the CQ and the memory the device may still write go.
    pub(super) conn: Connection,
    cq: Cq,
    chan: CompChannel,
    sbuf: Mr<PageBuf>,
    rbuf: Mr<PageBuf>,
    target: Mr<PageBuf>,
    wc: [Wc; WC_BATCH],
    sizes: Sizes,

    // Sending.
    /// Data messages sent, and the peer's limit for them.
    sseq_no: u16,
    sseq_comp: u16,
    /// Send queue entries free for data.
    sqe_avail: u32,
    /// Send buffer bytes free, and where the next copy goes.
    sbuf_bytes_avail: u32,
    shead: u32,
    /// The target list entry data goes to next.
    target_sge: u32,
    /// Control messages posted, and the limit (completions raise it).
    ctrl_seqno: u32,
    ctrl_max_seqno: u32,
    /// The peer's target list, the entry the next grant goes to, and its
    /// byte order.
    remote_sgl: RsSge,
    remote_sge: u32,
    peer_net: bool,
    /// The peer's direct-placement entries (where our descriptors go,
    /// `length` of them), and the ones this side filled.
    remote_iomap: RsSge,
    iomaps: Vec<MapSlot>,
    /// Whether a descriptor in `iomaps` waits to be sent.
    iomap_pending: bool,

    /// The receive buffer's bookkeeping.
    rx: RecvBook,

    readable: bool,
    writable: bool,
    connected: bool,
    pub(super) fault: Option<Fault>,
    pub(super) nonblocking: bool,
    /// How long a blocking wait stays quiet before it probes the peer.
    pub(super) keepalive: Option<Duration>,
    /// When a non-blocking wait last read the rdma_cm fd ([`coarse_now`]).
    cm_checked: Duration,
}

/// One of the peer's direct-placement entries this side filled.
#[derive(Clone, Copy, Debug)]
struct MapSlot {
    index: u32,
    map: Iomap,
    sent: bool,
}

/// A direct-placement mapping made by
/// [`RdmaStream::iomap`](super::RdmaStream::iomap): the peer's entry
/// it occupies and the offset the peer writes it at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IoMap {
    index: u32,
    offset: u64,
    len: u32,
}

impl IoMap {
    /// The offset the peer addresses the region's first byte at (its
    /// `iowrite`'s offset; rsockets' return value of `riomap`).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The region's length in bytes.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the region is empty (it never is: empty regions are
    /// refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What [`Socket::room`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Room {
    /// A message can go now.
    Now,
    /// One can go after a wait for room.
    AfterWait,
    /// The write stops here.
    Stop,
}

/// What a wait waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Until {
    /// Data to read, or the read side closed.
    Readable,
    /// Room to send, or the write side closed.
    Writable,
    /// A control message slot, or the connection gone.
    CtrlSlot,
    /// Every send completed, or the connection gone.
    SendsDone,
}

impl Socket {
    /// The connected socket, from the prepared objects and the peer's
    /// connection data.
    pub(super) fn new(conn: Connection, p: Parts, peer: &ConnData) -> io::Result<Socket> {
        let Parts {
            cq,
            chan,
            sbuf,
            rbuf,
            mut target,
            sizes,
        } = p;
        // The peer's first grant goes into our first target entry, in our
        // byte order (as the peer writes later ones).
        target
            .write_at(0, &peer.data_buf.to_bytes(wire::host_is_net()))
            .map_err(io_err)?;
        Ok(Socket {
            conn,
            cq,
            chan,
            sbuf,
            rbuf,
            target,
            wc: [Wc::default(); WC_BATCH],
            sizes,
            sseq_no: 0,
            sseq_comp: peer.credits,
            sqe_avail: sizes.sq_size - QP_CTRL_SIZE,
            sbuf_bytes_avail: sizes.sbuf_size,
            shead: 0,
            target_sge: 0,
            ctrl_seqno: 0,
            ctrl_max_seqno: QP_CTRL_SIZE,
            remote_sgl: peer.target_sgl,
            // rsockets' second entry first (its first one went in the
            // connection data); 0 for a one-entry list.
            remote_sge: 1 % peer.target_sgl.length.max(1),
            peer_net: peer.is_net(),
            remote_iomap: if peer.flags & wire::FLAG_IOMAP != 0 {
                RsSge {
                    // The entries follow the peer's target list (whose
                    // length the decoder bounded to 1..=2).
                    addr: peer
                        .target_sgl
                        .addr
                        .wrapping_add(u64::from(peer.target_sgl.length) * SGE_LEN as u64),
                    key: peer.target_sgl.key,
                    length: wire::scale_to_value(peer.target_iomap_size),
                }
            } else {
                RsSge::default()
            },
            iomaps: Vec::new(),
            iomap_pending: false,
            rx: RecvBook::new(sizes.rbuf_size, sizes.rq_size),
            readable: true,
            writable: true,
            connected: true,
            fault: None,
            nonblocking: false,
            keepalive: None,
            cm_checked: coarse_now().unwrap_or_default(),
        })
    }

    fn qp(&mut self) -> &mut Qp {
        self.conn.qp_mut()
    }

    fn fail(&mut self, f: Fault) {
        if self.fault.is_none() {
            self.fault = Some(f);
        }
        self.readable = false;
        self.writable = false;
        self.connected = false;
    }

    /// A verbs call's failure: the connection is unusable after it.
    fn local(&mut self, what: &str, e: crate::Error) -> io::Error {
        self.fail(Fault::Local(format!("{what}: {e}")));
        io_err(e)
    }

    /// The target entry `i` as the peer last wrote it (or as sending
    /// consumed it).
    fn target_entry(&self, i: u32) -> RsSge {
        let mut b = [0u8; SGE_LEN];
        // In bounds: i < SGL_SIZE, the MR holds SGL_SIZE entries.
        let _ = self.target.read_at(i as usize * SGE_LEN, &mut b);
        RsSge::from_bytes(&b, wire::host_is_net())
    }

    fn set_target_entry(&mut self, i: u32, s: RsSge) {
        let _ = self
            .target
            .write_at(i as usize * SGE_LEN, &s.to_bytes(wire::host_is_net()));
    }

    // ---- completions ----

    /// Takes every completion there is and acts on it; reposts the
    /// receives consumed.
    fn poll_cq(&mut self) -> io::Result<()> {
        let mut consumed = 0u32;
        loop {
            let n = match self.cq.poll(&mut self.wc) {
                Ok(n) => n,
                Err(e) => return Err(self.local("poll the stream's CQ", e.into())),
            };
            for i in 0..n {
                let wc = self.wc[i];
                if wc.wr_id() & WR_ID_RECV != 0 {
                    if self.on_recv(&wc) {
                        consumed += 1;
                    }
                } else {
                    self.on_send(&wc);
                }
            }
            if n < WC_BATCH {
                break;
            }
        }
        if self.connected {
            for _ in 0..consumed {
                if let Err(e) = self.qp().post_recv(&[RecvWr::new(WR_ID_RECV, &[])]) {
                    return Err(self.local("repost a receive", e.into()));
                }
            }
        }
        Ok(())
    }

    /// A receive's completion: a message from the peer. Returns whether a
    /// receive was consumed.
    fn on_recv(&mut self, wc: &Wc) -> bool {
        if !wc.is_success() {
            if wc.status() != WcStatus::WR_FLUSH_ERR && self.connected {
                self.fail(Fault::Failed(wc.status()));
            }
            return false;
        }
        let Some(imm) = wc.imm_data() else {
            self.fail(Fault::Protocol(
                "a message without immediate data (message-send mode is not spoken)".into(),
            ));
            return true;
        };
        let msg = Msg::from_imm(imm);
        match msg.op {
            Op::Sgl => self.sseq_comp = msg.data as u16,
            Op::IomapSgl | Op::Write => {}
            Op::Ctrl => match msg.ctrl() {
                Some(Ctrl::Disconnect) => {
                    self.readable = false;
                    self.writable = false;
                    self.connected = false;
                }
                Some(Ctrl::Shutdown) => {
                    if self.writable {
                        self.readable = false;
                    } else {
                        self.connected = false;
                        self.readable = false;
                    }
                }
                Some(Ctrl::Keepalive) | None => {}
            },
            Op::Data | Op::DataMore | Op::DraMore | Op::Rsvd => {
                // rsockets takes the reserved ops as data too.
                if let Err(m) = self.rx.on_data(msg.data) {
                    self.fail(Fault::Protocol(m));
                }
                debug_assert!(self.rx.is_consistent());
            }
        }
        true
    }

    /// A send's completion (its work request id is the message's
    /// immediate).
    fn on_send(&mut self, wc: &Wc) {
        let msg = Msg::from_imm(wc.wr_id() as u32);
        match msg.op {
            Op::Sgl => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
            Op::Ctrl => {
                self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1);
                if msg.ctrl() == Some(Ctrl::Disconnect) {
                    self.connected = false;
                }
            }
            Op::IomapSgl => {
                self.sqe_avail += 1;
                self.sbuf_bytes_avail = self.sbuf_bytes_avail.saturating_add(IOMAP_LEN as u32);
            }
            _ => {
                self.sqe_avail += 1;
                self.sbuf_bytes_avail = self.sbuf_bytes_avail.saturating_add(msg.data);
            }
        }
        // A flush follows the error that moved the QP to ERR (reported
        // by its own completion) or a disconnect (reported by rdma_cm).
        if !wc.is_success() && wc.status() != WcStatus::WR_FLUSH_ERR && self.connected {
            self.fail(Fault::Failed(wc.status()));
        }
    }

    // ---- credits ----

    fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    fn give_credits(&self) -> bool {
        self.rx.credits_due() && self.ctrl_avail() && self.connected
    }

    fn update_credits(&mut self) -> io::Result<()> {
        if self.give_credits() {
            self.send_credits()?;
        }
        Ok(())
    }

    /// Grants the next half of the receive buffer if it is free (a
    /// descriptor written into the peer's target list), or credits alone.
    fn send_credits(&mut self) -> io::Result<()> {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        let g = self.rx.grant();
        let imm = Msg::new(Op::Sgl, g.credits).imm();
        let r = match g.buf {
            Some((at, len)) => {
                let sge = RsSge {
                    addr: self.rbuf.iova() + u64::from(at),
                    key: self.rbuf.rkey(),
                    length: len,
                };
                let r = self.post_grant(sge, imm);
                self.remote_sge += 1;
                if self.remote_sge >= self.remote_sgl.length {
                    self.remote_sge = 0;
                }
                r
            }
            None => self.post_msg(imm),
        };
        r.map_err(|e| self.local("post a credit grant", e))
    }

    /// Writes `sge` into the peer's target list (its next entry, in its
    /// byte order) with `imm`: inline, or from a control slot of the send
    /// buffer when the inline size is too small.
    fn post_grant(&mut self, sge: RsSge, imm: u32) -> crate::Result<()> {
        let bytes = sge.to_bytes(self.peer_net);
        let remote = self
            .remote_sgl
            .addr
            .wrapping_add(u64::from(self.remote_sge) * SGE_LEN as u64);
        let rkey = self.remote_sgl.key;
        if self.sizes.sq_inline >= MAX_CTRL_MSG {
            let bufs = [IoSlice::new(&bytes)];
            let wr = Write::inline(u64::from(imm), &bufs, remote, rkey)
                .imm(imm)
                .build();
            return Ok(self.conn.qp_mut().post_send(&[wr])?);
        }
        let at = self.sizes.sbuf_size + MAX_CTRL_MSG * (self.ctrl_seqno & (QP_CTRL_SIZE - 1));
        self.sbuf.write_at(at as usize, &bytes)?;
        let sges = [self.sbuf.sge(at as usize..(at + MAX_CTRL_MSG) as usize)?];
        let wr = Write::new(u64::from(imm), &sges, remote, rkey)
            .imm(imm)
            .build();
        Ok(self.conn.qp_mut().post_send(&[wr])?)
    }

    /// A message with no payload: a zero-length RDMA WRITE carrying `imm`.
    fn post_msg(&mut self, imm: u32) -> crate::Result<()> {
        let wr = Write::new(u64::from(imm), &[], 0, 0).imm(imm).build();
        Ok(self.conn.qp_mut().post_send(&[wr])?)
    }

    // ---- waiting ----

    fn test(&self, u: Until) -> bool {
        match u {
            Until::Readable => self.rx.has_data() || !self.readable,
            Until::Writable => self.can_send() || !self.writable,
            Until::CtrlSlot => self.ctrl_avail() || !self.connected,
            Until::SendsDone => {
                self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno) + self.sqe_avail
                    == self.sizes.sq_size
                    || !self.connected
            }
        }
    }

    /// Polls and grants credits until `u` holds: returns at once without
    /// waiting when non-blocking (`WouldBlock`), fails with `TimedOut`
    /// after `timeout`. Sleeps on the CQ's channel and the connection's
    /// rdma_cm fd together, so a peer that vanishes (its rdma_cm
    /// disconnects) wakes the wait.
    fn wait(&mut self, u: Until, timeout: Option<Duration>) -> io::Result<()> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut armed = false;
        loop {
            self.update_credits()?;
            self.poll_cq()?;
            self.update_credits()?;
            if self.test(u) {
                return Ok(());
            }
            if self.nonblocking {
                // A caller spinning on WouldBlock must still learn that
                // the peer vanished: look at the rdma_cm fd now and then
                // (every time if the clock cannot be read).
                let now = coarse_now();
                let due = now.is_none_or(|t| t.saturating_sub(self.cm_checked) >= CM_CHECK_EVERY);
                if due {
                    self.cm_checked = now.unwrap_or_default();
                    self.on_cm_event()?;
                    if self.test(u) {
                        return Ok(());
                    }
                }
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if !armed {
                // A completion after this raises an event; poll once more
                // for one that came before.
                self.arm()?;
                armed = true;
                continue;
            }
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "the stream's timeout passed",
                        ));
                    }
                    Some(left)
                }
                None => None,
            };
            // With keep-alive on, a quiet wait probes the peer every
            // interval: a probe that cannot be delivered fails (transport
            // retries exhausted), which ends the stream.
            let nap = match (self.keepalive, left) {
                (Some(k), Some(l)) => Some(k.min(l)),
                (Some(k), None) => Some(k),
                (None, l) => l,
            };
            let (cq_ready, cm_ready) = self.sleep(nap)?;
            if !cq_ready && !cm_ready && self.keepalive.is_some() {
                self.send_probe()?;
            }
            if cq_ready {
                // The next round re-arms.
                self.drain_cq_events()?;
                armed = false;
            }
            if cm_ready {
                self.on_cm_event()?;
            }
        }
    }

    /// Sends a keep-alive probe (rsockets' form: a zero-length RDMA WRITE
    /// without immediate, so the peer's receives are not touched) if a
    /// control slot is free and the connection is up.
    pub(super) fn send_probe(&mut self) -> io::Result<()> {
        if !self.connected || !self.ctrl_avail() {
            return Ok(());
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        let id = Msg::new(Op::Ctrl, Ctrl::Keepalive as u32).imm();
        let wr = Write::new(u64::from(id), &[], 0, 0).build();
        self.conn
            .qp_mut()
            .post_send(&[wr])
            .map_err(|e| self.local("post a keep-alive probe", e.into()))
    }

    /// Arms the CQ: its next completion raises an event on the channel.
    pub(super) fn arm(&mut self) -> io::Result<()> {
        self.cq
            .req_notify(false)
            .map_err(|e| self.local("arm the stream's CQ", e))
    }

    /// Reads every event queued on the CQ's channel.
    pub(super) fn drain_cq_events(&mut self) -> io::Result<()> {
        loop {
            match self.chan.try_get_event() {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.local("read the CQ's event", e)),
            }
        }
    }

    /// The CQ's channel (for a waiter that sleeps on it without the
    /// socket: an async runtime, another handle's thread).
    pub(super) fn chan(&self) -> &CompChannel {
        &self.chan
    }

    /// Sleeps until the channel or the rdma_cm fd is readable (or `left`
    /// passes).
    fn sleep(&self, left: Option<Duration>) -> io::Result<(bool, bool)> {
        let [cq, cm] = sleep_on([self.chan.as_fd(), self.conn.cm_fd()], left)?;
        Ok((cq, cm))
    }

    /// What a waiter of another thread may be waiting to see change (a
    /// direction closing, the connection ending): compared before and
    /// after a call to know whether to wake it.
    pub(super) fn status(&self) -> (bool, bool, bool, bool) {
        (
            self.readable,
            self.writable,
            self.connected,
            self.fault.is_some(),
        )
    }

    /// Takes the connection's pending rdma_cm events. A disconnect (or
    /// the device's removal) ends the stream: what already arrived stays
    /// readable; a direction the peer had not closed reports a reset.
    pub(super) fn on_cm_event(&mut self) -> io::Result<()> {
        loop {
            let ev = match self.conn.next_event(Some(Duration::ZERO)) {
                Ok(Some(ev)) => ev,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.local("read the stream's rdma_cm event", e)),
            };
            if matches!(
                ev.kind(),
                CmEventKind::Disconnected | CmEventKind::DeviceRemoval
            ) {
                // Messages that arrived before the disconnect count.
                self.poll_cq()?;
                if self.readable || self.writable {
                    // Data that arrived stays readable before the error.
                    self.fail(Fault::Reset);
                }
                self.connected = false;
            }
        }
    }

    // ---- sending ----

    fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target_entry(self.target_sge).length != 0
    }

    /// Whether a message can go: at once, after taking completions and
    /// granting credits, or (when nothing of this write went yet,
    /// `sent == 0`) after waiting for room; `Stop` when a write that
    /// already sent something would have to wait, or the write side
    /// closed meanwhile.
    fn room(&mut self, sent: usize, timeout: Option<Duration>) -> io::Result<Room> {
        if self.can_send() {
            return Ok(Room::Now);
        }
        self.poll_cq()?;
        self.update_credits()?;
        if self.can_send() {
            return Ok(Room::Now);
        }
        if sent > 0 {
            return Ok(Room::Stop);
        }
        self.wait(Until::Writable, timeout)?;
        Ok(if self.writable {
            Room::AfterWait
        } else {
            Room::Stop
        })
    }

    /// Sends what it can of `buf` (all of it, unless the peer's credits or
    /// buffer grants run out after part of it went): blocks (or fails
    /// with `WouldBlock`) only when nothing can go at once.
    pub(super) fn send(&mut self, buf: &[u8], timeout: Option<Duration>) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.iomap_pending {
            self.send_iomaps(timeout)?;
        }
        let mut sent = 0usize;
        let mut olen = OLAP_START_SIZE;
        while sent < buf.len() {
            if !self.writable {
                break;
            }
            match self.room(sent, timeout)? {
                Room::Now | Room::AfterWait => {}
                Room::Stop => break,
            }
            let left = u32::try_from(buf.len() - sent).unwrap_or(u32::MAX);
            let mut xfer = next_xfer(&mut olen, left);
            let t = self.target_entry(self.target_sge);
            xfer = xfer.min(self.sbuf_bytes_avail).min(t.length);
            let data = &buf[sent..sent + xfer as usize];
            self.write_data(data, t)?;
            sent += xfer as usize;
        }
        if sent == 0 {
            return Err(self.write_error());
        }
        Ok(sent)
    }

    /// Why nothing can be written.
    pub(super) fn write_error(&self) -> io::Error {
        match &self.fault {
            Some(f) => f.to_io(),
            None => io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the stream is closed for writing",
            ),
        }
    }

    /// One data message of `data` into the target entry `t` (the current
    /// one), inline or through the send buffer.
    fn write_data(&mut self, data: &[u8], t: RsSge) -> io::Result<()> {
        let len = data.len() as u32;
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        // Consume the grant before sending (the peer may rewrite the
        // entry once it sees the data).
        let i = self.target_sge;
        self.set_target_entry(
            i,
            RsSge {
                addr: t.addr.wrapping_add(u64::from(len)),
                key: t.key,
                length: t.length - len,
            },
        );
        if t.length == len {
            self.target_sge = (self.target_sge + 1) % SGL_SIZE;
        }
        let imm = Msg::new(Op::Data, len).imm();
        self.post_write(data, t.addr, t.key, Some(imm), u64::from(imm))
            .map_err(|e| self.local("post data", e))
    }

    /// An RDMA WRITE of `data` to `addr` under `key` (with `imm` if
    /// given): inline up to the inline size, else copied into the send
    /// buffer's ring, wrapping into a second gather entry at its end. The
    /// caller took the ring space (`sbuf_bytes_avail`).
    fn post_write(
        &mut self,
        data: &[u8],
        addr: u64,
        key: u32,
        imm: Option<u32>,
        wr_id: u64,
    ) -> crate::Result<()> {
        let len = data.len() as u32;
        if len <= self.sizes.sq_inline {
            let bufs = [IoSlice::new(data)];
            let mut w = Write::inline(wr_id, &bufs, addr, key);
            if let Some(imm) = imm {
                w = w.imm(imm);
            }
            return Ok(self.conn.qp_mut().post_send(&[w.build()])?);
        }
        let at = self.shead;
        let room = self.sizes.sbuf_size - at;
        let first = len.min(room);
        let (a, b) = data.split_at(first as usize);
        let _ = self.sbuf.write_at(at as usize, a);
        let _ = self.sbuf.write_at(0, b);
        self.shead = if first == room { len - first } else { at + len };
        let sges: [Sge; 2] = [
            self.sbuf.sge(at as usize..(at + first) as usize)?,
            self.sbuf.sge(0..(len - first) as usize)?,
        ];
        let n = if b.is_empty() { 1 } else { 2 };
        let mut w = Write::new(wr_id, &sges[..n], addr, key);
        if let Some(imm) = imm {
            w = w.imm(imm);
        }
        Ok(self.conn.qp_mut().post_send(&[w.build()])?)
    }

    // ---- direct placement (rsockets' iomap) ----

    /// The PD every MR of this stream is registered on.
    pub(super) fn pd(&self) -> &crate::Pd {
        self.rbuf.pd()
    }

    /// Offers the peer `len` bytes at `addr` under `rkey` (an MR of this
    /// stream's PD the caller checked), addressed from `offset`: the
    /// peer's first free entry gets the descriptor, sent at once if a
    /// message can go without waiting, else before the next data.
    pub(super) fn iomap(
        &mut self,
        addr: u64,
        rkey: u32,
        len: u32,
        offset: u64,
    ) -> io::Result<IoMap> {
        let Some(index) =
            (0..self.remote_iomap.length).find(|i| self.iomaps.iter().all(|m| m.index != *i))
        else {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "every direct-placement entry the peer offers is in use ({})",
                    self.remote_iomap.length
                ),
            ));
        };
        let map = Iomap {
            offset,
            sge: RsSge {
                addr,
                key: rkey,
                length: len,
            },
        };
        self.iomaps.push(MapSlot {
            index,
            map,
            sent: false,
        });
        self.iomap_pending = true;
        // Out now if that needs no wait; a failure to send stays for the
        // next write to report.
        let _ = self.poll_cq();
        let _ = self.try_send_iomaps();
        Ok(IoMap { index, offset, len })
    }

    /// Frees the peer's entry `m` held (a later mapping may take it).
    pub(super) fn iounmap(&mut self, m: IoMap) -> io::Result<()> {
        let Some(at) = self
            .iomaps
            .iter()
            .position(|s| s.index == m.index && s.map.offset == m.offset)
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a mapping of this stream",
            ));
        };
        self.iomaps.swap_remove(at);
        self.iomap_pending = self.iomaps.iter().any(|s| !s.sent);
        Ok(())
    }

    /// Sends the descriptors not sent yet that can go without waiting.
    fn try_send_iomaps(&mut self) -> io::Result<()> {
        while self.iomap_pending && self.writable && self.can_send() {
            self.send_one_iomap()?;
        }
        Ok(())
    }

    /// Sends every descriptor not sent yet, waiting for room as a write
    /// does.
    fn send_iomaps(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        while self.iomap_pending {
            if !self.writable {
                return Err(self.write_error());
            }
            if self.room(0, timeout)? == Room::Stop {
                return Err(self.write_error());
            }
            self.send_one_iomap()?;
        }
        Ok(())
    }

    /// The first unsent descriptor, written into the peer's entry with
    /// its index as the immediate (as rsockets' `riomap` does: a credit
    /// and 24 bytes of the send buffer).
    fn send_one_iomap(&mut self) -> io::Result<()> {
        let Some(slot) = self.iomaps.iter_mut().find(|s| !s.sent) else {
            self.iomap_pending = false;
            return Ok(());
        };
        slot.sent = true;
        let slot = *slot;
        self.iomap_pending = self.iomaps.iter().any(|s| !s.sent);
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= IOMAP_LEN as u32;
        let bytes = slot.map.to_bytes(self.peer_net);
        let addr = self
            .remote_iomap
            .addr
            .wrapping_add(u64::from(slot.index) * IOMAP_LEN as u64);
        let imm = Msg::new(Op::IomapSgl, slot.index).imm();
        let key = self.remote_iomap.key;
        self.post_write(&bytes, addr, key, Some(imm), u64::from(imm))
            .map_err(|e| self.local("post a direct-placement descriptor", e))
    }

    /// The direct-placement descriptor the peer last wrote into our entry
    /// `i` (zeros until it writes one).
    fn peer_iomap(&self, i: u32) -> Iomap {
        let mut b = [0u8; IOMAP_LEN];
        // In bounds: i < iomap_size, the MR holds that many entries after
        // the target list.
        let _ = self
            .target
            .read_at(SGE_LEN * SGL_SIZE as usize + i as usize * IOMAP_LEN, &mut b);
        Iomap::from_bytes(&b, wire::host_is_net())
    }

    /// The peer's region that holds `offset`: its address there and the
    /// bytes left in it.
    fn find_iomap(&self, offset: u64) -> Option<(u64, u32, u32)> {
        (0..self.sizes.iomap_size).find_map(|i| {
            let m = self.peer_iomap(i);
            m.locate(offset).map(|(addr, left)| (addr, m.sge.key, left))
        })
    }

    /// rsockets' `riowrite`: writes what it can of `buf` into the peer's
    /// direct-placement regions at `offset` (plain RDMA WRITEs through the
    /// send buffer: the peer's CPU sees nothing). Stops at the end of a
    /// region not followed by another; blocks (or fails with
    /// `WouldBlock`) only when nothing can go at once.
    pub(super) fn iowrite(
        &mut self,
        buf: &[u8],
        offset: u64,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        if self.iomap_pending {
            self.send_iomaps(timeout)?;
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let mut sent = 0usize;
        let mut olen = OLAP_START_SIZE;
        while sent < buf.len() {
            if !self.writable {
                break;
            }
            let Some(at) = offset.checked_add(sent as u64) else {
                break;
            };
            let Some((addr, key, room)) = self.find_iomap(at) else {
                if sent > 0 {
                    break;
                }
                let hint = if self.sizes.iomap_size == 0 {
                    " (this stream offers it no entries: StreamOptions::iomap_size)"
                } else {
                    ""
                };
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the peer has mapped no region at offset {at}{hint}"),
                ));
            };
            match self.room(sent, timeout)? {
                Room::Now => {}
                // The peer may have remapped meanwhile: look again.
                Room::AfterWait => continue,
                Room::Stop => break,
            }
            let left = u32::try_from(buf.len() - sent).unwrap_or(u32::MAX);
            let mut xfer = next_xfer(&mut olen, left);
            xfer = xfer.min(self.sbuf_bytes_avail).min(room);
            let data = &buf[sent..sent + xfer as usize];
            self.sqe_avail -= 1;
            self.sbuf_bytes_avail -= xfer;
            // The completion gives the send buffer space back (its id:
            // a `Write` message of the length).
            let id = u64::from(Msg::new(Op::Write, xfer).imm());
            self.post_write(data, addr, key, None, id)
                .map_err(|e| self.local("post a direct write", e))?;
            sent += xfer as usize;
        }
        if sent == 0 {
            return Err(self.write_error());
        }
        Ok(sent)
    }

    // ---- receiving ----

    /// Reads what has arrived into `buf` (at least one byte), waiting
    /// for data if none has; `Ok(0)` once the peer closed its side and
    /// everything before was read.
    pub(super) fn recv(&mut self, buf: &mut [u8], timeout: Option<Duration>) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.rx.has_data() {
                self.poll_cq()?;
                self.update_credits()?;
            }
            if !self.rx.has_data() && self.readable {
                self.wait(Until::Readable, timeout)?;
            }
            let n = self.copy_out(buf);
            if n > 0 {
                self.update_credits()?;
                return Ok(n);
            }
            if !self.rx.has_data() && !self.readable {
                return match &self.fault {
                    Some(f) => Err(f.to_io()),
                    None => Ok(0),
                };
            }
        }
    }

    /// Copies queued data out, in order, freeing the buffer space it held.
    fn copy_out(&mut self, buf: &mut [u8]) -> usize {
        let Socket { rx, rbuf, .. } = self;
        rx.consume(buf.len(), |at, to, n| {
            // In bounds: the book's spans lie in the buffer and in `buf`.
            let _ = rbuf.read_at(at as usize, &mut buf[to..to + n as usize]);
        })
    }

    /// Whether data is waiting to be read.
    pub(super) fn has_data(&self) -> bool {
        self.rx.has_data()
    }

    // ---- closing ----

    /// Closes one or both directions as rsockets' `rshutdown` does: a
    /// control message tells the peer, then the sends already posted are
    /// waited for (at most `timeout`).
    pub(super) fn shutdown(
        &mut self,
        how: std::net::Shutdown,
        timeout: Duration,
    ) -> io::Result<()> {
        use std::net::Shutdown;
        if !self.connected {
            self.readable &= how == Shutdown::Write;
            self.writable &= how == Shutdown::Read;
            return Ok(());
        }
        let ctrl = match how {
            Shutdown::Both => {
                self.readable = false;
                self.writable = false;
                Ctrl::Disconnect
            }
            Shutdown::Write => {
                self.writable = false;
                if self.readable {
                    Ctrl::Shutdown
                } else {
                    Ctrl::Disconnect
                }
            }
            Shutdown::Read => {
                self.readable = false;
                if self.writable {
                    return Ok(());
                }
                Ctrl::Disconnect
            }
        };
        let was = self.nonblocking;
        self.nonblocking = false;
        let r = self.close_with(ctrl, timeout);
        self.nonblocking = was;
        r
    }

    /// Closes the write side without waiting (for an async caller):
    /// `WouldBlock` while every control slot is in use.
    #[cfg(feature = "tokio")]
    pub(super) fn try_shutdown_write(&mut self) -> io::Result<()> {
        if !self.writable || !self.connected {
            self.writable = false;
            return Ok(());
        }
        self.poll_cq()?;
        if !self.ctrl_avail() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.writable = false;
        let ctrl = if self.readable {
            Ctrl::Shutdown
        } else {
            Ctrl::Disconnect
        };
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        let imm = Msg::new(Op::Ctrl, ctrl as u32).imm();
        self.post_msg(imm)
            .map_err(|e| self.local("post a shutdown message", e))
    }

    fn close_with(&mut self, ctrl: Ctrl, timeout: Duration) -> io::Result<()> {
        let start = Instant::now();
        if !self.ctrl_avail() {
            self.wait(Until::CtrlSlot, Some(timeout))?;
        }
        if self.connected && self.ctrl_avail() {
            self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
            let imm = Msg::new(Op::Ctrl, ctrl as u32).imm();
            if let Err(e) = self.post_msg(imm) {
                return Err(self.local("post a shutdown message", e));
            }
        }
        if self.connected {
            // One budget for both waits.
            let left = timeout.saturating_sub(start.elapsed());
            self.wait(Until::SendsDone, Some(left))?;
        }
        Ok(())
    }
}
