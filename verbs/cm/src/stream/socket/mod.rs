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

mod close;
mod completions;
mod fault;
mod iomap;
mod recv;
mod send;
mod setup;
mod wait;

pub(in crate::stream) use fault::{accept_err, io_err, resolve_err, Fault};
use setup::Sizes;
pub(in crate::stream) use setup::{Parts, Prepared};

use std::io::{self};
use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::Connection;
use rverbs::mr::PageBuf;
use rverbs::{CompChannel, Cq, Mr, Wc};

use super::book::RecvBook;
use super::wire::{Iomap, RsSge, SGE_LEN};

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
