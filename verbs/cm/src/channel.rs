//! The rdma_cm event channel: an open `/dev/infiniband/rdma_cm`, whose ids
//! report their events on it (`rdma_create_event_channel`,
//! `rdma_get_cm_event`).

use std::fs::OpenOptions;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use rverbs_abi::ucma::{self, EventResp, GetEvent};
use rverbs_abi::Errno;

use rverbs::error::CmEventKind;
use rverbs::error::{Error, Result};
use rverbs::qp::AhAttr;
use rverbs_abi::fd::{wait_readable, Ready};

/// The rdma_cm character device.
pub const RDMA_CM_PATH: &str = "/dev/infiniband/rdma_cm";
/// Where sysfs names its device number.
const RDMA_CM_SYSFS_DEV: &str = "/sys/class/misc/rdma_cm/dev";

/// The rdma_cm node to open: [`RDMA_CM_PATH`], or in this crate's unit
/// tests the thread's stand-in (a path that does not exist, to see the
/// error every host gives when the module is not loaded).
fn rdma_cm_path() -> &'static str {
    #[cfg(test)]
    if let Some(p) = test_path::get() {
        return p;
    }
    RDMA_CM_PATH
}

/// The thread's stand-in for [`RDMA_CM_PATH`] in unit tests.
#[cfg(test)]
pub(crate) mod test_path {
    use std::cell::Cell;

    thread_local! {
        static PATH: Cell<Option<&'static str>> = const { Cell::new(None) };
    }

    /// Opens `path` instead of the rdma_cm node on this thread.
    pub(crate) fn set(path: Option<&'static str>) {
        PATH.with(|p| p.set(path));
    }

    pub(super) fn get() -> Option<&'static str> {
        PATH.with(|p| p.get())
    }
}

/// Why the rdma_cm node did not open, as every API says it (the cm API's
/// [`Error::Io`], and through it the streams' `io::Error`, whose kind
/// is `NotFound` for a missing node or driver). A node that is not
/// there (ENOENT) or has no driver behind it (ENODEV, ENXIO) means the
/// rdma_ucm module is not loaded.
fn open_error(source: std::io::Error) -> Error {
    let path = rdma_cm_path();
    let what = match source.raw_os_error() {
        Some(libc::ENOENT | libc::ENODEV | libc::ENXIO) => {
            format!("open {path} (is the rdma_ucm module loaded?)")
        }
        _ => format!("open {path}"),
    };
    Error::Io { what, source }
}

/// An open rdma_cm file: the ids created on it report their events here.
/// Its fd is pollable (readable when an event is pending: [`EventChannel::wait`],
/// or register [`AsRawFd`] with an event loop); dropping it
/// destroys every id still on it (the kernel disconnects their
/// connections and rejects their pending requests).
#[derive(Debug)]
pub struct EventChannel {
    fd: OwnedFd,
}

impl EventChannel {
    /// Opens `/dev/infiniband/rdma_cm` (non-blocking, close-on-exec) and
    /// checks it is the character device sysfs names for rdma_cm.
    pub fn new() -> Result<EventChannel> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| Error::Io { what, source }
        };
        let path = rdma_cm_path();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(open_error)?;
        let meta = file.metadata().map_err(io(path))?;
        if let Ok(text) = std::fs::read_to_string(RDMA_CM_SYSFS_DEV) {
            let want = parse_dev(text.trim());
            let is_char = meta.mode() & libc::S_IFMT == libc::S_IFCHR;
            if !is_char || want != Some(meta.rdev()) {
                return Err(Error::Unusable(format!(
                    "{RDMA_CM_PATH} is not the rdma_cm character device ({RDMA_CM_SYSFS_DEV}: {})",
                    text.trim()
                )));
            }
        }
        Ok(EventChannel { fd: file.into() })
    }

    /// The next event, waiting up to `timeout` for one (`None`: forever);
    /// `Ok(None)` when the time ran out.
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        // A timeout past what an Instant can hold is no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            match ucma::exec(self.fd.as_fd(), &GetEvent::default()) {
                Ok(resp) => return Ok(Some(CmEvent::from_resp(&resp))),
                Err(Errno::EAGAIN) | Err(Errno::EINTR) => {}
                Err(errno) => {
                    return Err(Error::Kernel {
                        op: "rdma_get_cm_event",
                        errno,
                    })
                }
            }
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match wait_readable(self.fd.as_fd(), left).map_err(Error::kernel("poll rdma_cm"))? {
                Ready::Readable => {}
                Ready::TimedOut => return Ok(None),
                Ready::Failed => {
                    return Err(Error::Kernel {
                        op: "poll rdma_cm",
                        errno: Errno::EIO,
                    })
                }
            }
        }
    }
}

impl EventChannel {
    /// The command fd, for this crate's commands only: a `write` to it
    /// carries pointers the kernel writes responses to, so it is never
    /// handed out as an [`AsFd`] (see [`AsRawFd`] below).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Waits until an event is queued, without taking it: `Ok(true)`, or
    /// `Ok(false)` when `timeout` (`None`: no limit) passed first.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        match wait_readable(self.fd.as_fd(), timeout).map_err(Error::kernel("poll rdma_cm"))? {
            Ready::Readable => Ok(true),
            Ready::TimedOut => Ok(false),
            Ready::Failed => Err(Error::Kernel {
                op: "poll rdma_cm",
                errno: Errno::EIO,
            }),
        }
    }
}

/// The fd's number, for registering it with `poll`, `epoll` or an event
/// loop (readable when an event is queued). Only the number: the rdma_cm
/// fd takes commands whose pointers the kernel writes through, so it is
/// not offered as [`AsFd`] (a safe `write` could then corrupt memory);
/// turning the number into a usable fd takes `unsafe`, whose contract
/// (I/O safety) forbids writing to it.
impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `major:minor` as sysfs writes it, as a `dev_t`.
fn parse_dev(s: &str) -> Option<u64> {
    let (ma, mi) = s.split_once(':')?;
    Some(libc::makedev(ma.parse().ok()?, mi.parse().ok()?))
}

/// One rdma_cm event.
#[derive(Debug, Clone)]
pub struct CmEvent {
    kind: CmEventKind,
    status: i32,
    id: u32,
    uid: u64,
    private_data: Vec<u8>,
    conn: ConnInfo,
    ud: UdInfo,
}

/// What the datagram (UDP port space) events carry: the peer's QP, its
/// Q_Key and the address vector towards it (an established SIDR
/// exchange), and private data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdInfo {
    /// The peer's QP number.
    pub qp_num: u32,
    /// The Q_Key to send to it with.
    pub qkey: u32,
    /// The address vector towards the peer (create an
    /// [`Ah`](rverbs::Ah) from it).
    pub ah_attr: AhAttr,
    /// The peer's private data, padded with zeros by the CM to the SIDR
    /// message's size (see [`super::private`]).
    pub private_data: Vec<u8>,
}

/// The connection parameters a peer sent with its request or answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnInfo {
    /// The peer's QP number.
    pub qp_num: u32,
    /// RDMA READs/atomics the peer accepts as target.
    pub responder_resources: u8,
    /// RDMA READs/atomics the peer issues as initiator.
    pub initiator_depth: u8,
    /// Whether the peer's QP uses an SRQ.
    pub srq: bool,
    /// Transport retries the peer asked for.
    pub retry_count: u8,
    /// RNR retries the peer asked for.
    pub rnr_retry_count: u8,
}

impl CmEvent {
    fn from_resp(r: &EventResp) -> CmEvent {
        let kind = CmEventKind::from_raw(r.event);
        let conn = r.conn();
        // Private data comes with the connection events; the UD and
        // multicast ones carry another arm of the union.
        let with_conn = matches!(
            kind,
            CmEventKind::ConnectRequest
                | CmEventKind::ConnectResponse
                | CmEventKind::Rejected
                | CmEventKind::Established
        );
        // The same events of UDP-port-space ids carry the UD arm; which
        // arm is meant depends on the id's port space, which the channel
        // does not know: both are decoded (the owner of the id reads one).
        // (A SIDR answer other than success comes as Unreachable, with the
        // answer's private data.)
        let u = r.ud();
        let ud = UdInfo {
            qp_num: u.qp_num & 0x00ff_ffff,
            qkey: u.qkey,
            ah_attr: super::ah_attr_from_kernel(&u.ah_attr),
            private_data: u.private_data().to_vec(),
        };
        let (private_data, info) = if with_conn {
            (
                conn.private_data().to_vec(),
                ConnInfo {
                    qp_num: conn.qp_num & 0x00ff_ffff,
                    responder_resources: conn.responder_resources,
                    initiator_depth: conn.initiator_depth,
                    srq: conn.srq != 0,
                    retry_count: conn.retry_count,
                    rnr_retry_count: conn.rnr_retry_count,
                },
            )
        } else {
            (Vec::new(), ConnInfo::default())
        };
        CmEvent {
            kind,
            status: r.status as i32,
            id: r.id,
            uid: r.uid,
            private_data,
            conn: info,
            ud,
        }
    }

    /// What happened.
    pub fn kind(&self) -> CmEventKind {
        self.kind
    }
    /// The status: 0, a negative errno, or (for [`CmEventKind::Rejected`])
    /// the CM's reject reason.
    pub fn status(&self) -> i32 {
        self.status
    }
    /// The kernel's handle of the id the event is for (for a connection
    /// request: the new id).
    pub fn id(&self) -> u32 {
        self.id
    }
    /// The cookie of the id the event is for.
    pub fn uid(&self) -> u64 {
        self.uid
    }
    /// The peer's private data (connection events; empty otherwise), as
    /// the CM delivered it: padded with zeros to the message's fixed size
    /// on InfiniBand and RoCE (see [`super::private`]).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }
    /// The peer's connection parameters (connection events).
    pub fn conn(&self) -> ConnInfo {
        self.conn
    }
    /// The datagram parameters (connection events of ids in the UDP port
    /// space, and multicast joins); [`CmEvent::private_data`] and
    /// [`CmEvent::conn`] do not apply to those.
    pub fn ud(&self) -> &UdInfo {
        &self.ud
    }
}
