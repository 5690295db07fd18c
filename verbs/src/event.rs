//! Asynchronous events: the context's async event fd (what
//! `ibv_get_async_event` reads), the typed [`AsyncEvent`] it yields, and the
//! [`EventId`] every CQ, QP and SRQ carries so that an event (or a
//! completion channel notification) names the object it concerns.
//!
//! The kernel reports an object in an event by the 64-bit `user_handle`
//! given when the object was created. libibverbs passes a pointer there;
//! this crate passes an [`EventId`]: a process-wide unique number tagged
//! with the object's type. Compare it with [`crate::Cq::event_id`],
//! [`crate::Qp::event_id`] or [`crate::Srq::event_id`] (or use
//! [`AsyncEvent::is_for_qp`] and friends).
//!
//! Both event fds are put in non-blocking mode when they are created, so
//! they can be registered with `poll`, `epoll` or an async runtime as they
//! are; the `try_*` readers return `Ok(None)` when nothing is pending and
//! the blocking readers wait with `poll(2)` (so a device that goes away
//! wakes them with an error instead of leaving them asleep). The blocking
//! readers restart their wait after a signal; [`CompChannel::read_event`]
//! and [`Context::read_async_event`] read once, as libibverbs'
//! `ibv_get_cq_event` and `ibv_get_async_event` do, so that a signal ends
//! a wait in a fd someone made blocking (the C library does).
//!
//! The async fd's readers do not rely on its `O_NONBLOCK` flag: the C
//! library clears it (libibverbs' `async_fd` blocks), and they look with
//! `poll(2)` before they read.
//!
//! [`CompChannel::read_event`]: crate::CompChannel::read_event
//!
//! What soft-RoCE (rxe) raises, from its 6.1 source and checked on 6.1 and
//! 6.12 by the VM suites: CQ overflow ([`AsyncEventKind::CqErr`], once per
//! completion that did not fit; the completion is dropped),
//! [`AsyncEventKind::SrqLimitReached`], [`AsyncEventKind::SqDrained`]
//! (RTS -> SQD once the send queue is idle), and
//! [`AsyncEventKind::PortErr`] / [`AsyncEventKind::PortActive`] when the
//! underlying netdev goes down or up. 6.12 also raises
//! [`AsyncEventKind::QpLastWqeReached`] when a QP on an SRQ enters the
//! error state; 6.1 does not. Neither raises the QP error events (a QP
//! that fails moves to the error state and reports through its
//! completions) or `DEVICE_FATAL`: rxe has no `disassociate_ucontext`, so
//! removing the device (`rdma link delete`) waits until every process has
//! closed it instead of failing its calls ([`Context::removal_pending`]
//! tells that this is happening).

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rverbs_abi::cq::AsyncEventDesc;
use rverbs_abi::Errno;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::context::Context;
use crate::error::{Error, Result};
use rverbs_abi::fd::{wait_readable, Ready};

/// The object an [`EventId`] belongs to: the tag in its top byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A completion queue.
    Cq,
    /// A queue pair.
    Qp,
    /// A shared receive queue.
    Srq,
}

impl ObjectKind {
    fn tag(self) -> u64 {
        match self {
            ObjectKind::Cq => 1,
            ObjectKind::Qp => 2,
            ObjectKind::Srq => 3,
        }
    }
}

const TAG_SHIFT: u32 = 56;
const SERIAL_MASK: u64 = (1 << TAG_SHIFT) - 1;

/// What the kernel reports an object by in events: the `user_handle` this
/// crate gave at creation, unique in the process and tagged with the
/// object's type.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(u64);

impl EventId {
    /// A fresh id for a new object of kind `kind`.
    pub(crate) fn new(kind: ObjectKind) -> EventId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let serial = NEXT.fetch_add(1, Ordering::Relaxed) & SERIAL_MASK;
        EventId((kind.tag() << TAG_SHIFT) | serial)
    }

    /// Wraps a raw `user_handle` read from an event fd.
    pub fn from_raw(raw: u64) -> EventId {
        EventId(raw)
    }

    /// The raw `user_handle`.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The kind of object, if the tag is one this crate sets.
    pub fn kind(self) -> Option<ObjectKind> {
        match self.0 >> TAG_SHIFT {
            1 => Some(ObjectKind::Cq),
            2 => Some(ObjectKind::Qp),
            3 => Some(ObjectKind::Srq),
            _ => None,
        }
    }
}

impl fmt::Debug for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let serial = self.0 & SERIAL_MASK;
        match self.kind() {
            Some(ObjectKind::Cq) => write!(f, "cq#{serial}"),
            Some(ObjectKind::Qp) => write!(f, "qp#{serial}"),
            Some(ObjectKind::Srq) => write!(f, "srq#{serial}"),
            None => write!(f, "EventId({:#x})", self.0),
        }
    }
}

/// An asynchronous event type (`enum ib_event_type`, mirrored by
/// libibverbs' `enum ibv_event_type`); values this crate does not know are
/// kept in [`AsyncEventKind::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncEventKind {
    /// A CQ overran (a completion was lost) or failed. Element: the CQ.
    /// On rxe the completion that did not fit is dropped (poll cannot see
    /// the loss: this event is the only report); a receive completion that
    /// did not fit also moves its QP to the error state.
    CqErr,
    /// A QP hit an error that is not reported through a completion.
    QpFatal,
    /// A QP got a request it cannot execute (invalid request error).
    QpReqErr,
    /// A QP got a request that violates its access rights.
    QpAccessErr,
    /// The first packet arrived on a QP in RTR (communication established).
    CommEst,
    /// A QP moved to SQD has no more outstanding send work.
    SqDrained,
    /// Path migration completed.
    PathMig,
    /// Path migration failed.
    PathMigErr,
    /// The device failed (or went away): every object is unusable.
    DeviceFatal,
    /// A port became active. Element: the port.
    PortActive,
    /// A port left the active state. Element: the port.
    PortErr,
    /// A port's LID changed.
    LidChange,
    /// A port's P_Key table changed.
    PkeyChange,
    /// A port's subnet manager changed.
    SmChange,
    /// An SRQ failed. Element: the SRQ.
    SrqErr,
    /// Fewer receives than the SRQ's limit remain; the limit is disarmed.
    SrqLimitReached,
    /// A QP on an SRQ in the error state will consume no more receives.
    QpLastWqeReached,
    /// The SM asks clients to re-register.
    ClientReregister,
    /// A port's GID table changed.
    GidChange,
    /// A work queue (WQ) failed.
    WqFatal,
    /// A value this crate does not know.
    Other(u32),
}

impl AsyncEventKind {
    /// From the kernel's `event_type`.
    pub fn from_raw(v: u32) -> AsyncEventKind {
        use AsyncEventKind::*;
        match v {
            0 => CqErr,
            1 => QpFatal,
            2 => QpReqErr,
            3 => QpAccessErr,
            4 => CommEst,
            5 => SqDrained,
            6 => PathMig,
            7 => PathMigErr,
            8 => DeviceFatal,
            9 => PortActive,
            10 => PortErr,
            11 => LidChange,
            12 => PkeyChange,
            13 => SmChange,
            14 => SrqErr,
            15 => SrqLimitReached,
            16 => QpLastWqeReached,
            17 => ClientReregister,
            18 => GidChange,
            19 => WqFatal,
            v => Other(v),
        }
    }

    /// The kernel's `event_type` value.
    pub fn raw(self) -> u32 {
        use AsyncEventKind::*;
        match self {
            CqErr => 0,
            QpFatal => 1,
            QpReqErr => 2,
            QpAccessErr => 3,
            CommEst => 4,
            SqDrained => 5,
            PathMig => 6,
            PathMigErr => 7,
            DeviceFatal => 8,
            PortActive => 9,
            PortErr => 10,
            LidChange => 11,
            PkeyChange => 12,
            SmChange => 13,
            SrqErr => 14,
            SrqLimitReached => 15,
            QpLastWqeReached => 16,
            ClientReregister => 17,
            GidChange => 18,
            WqFatal => 19,
            Other(v) => v,
        }
    }

    /// The libibverbs-style name (`IBV_EVENT_*` without the prefix).
    pub fn as_str(self) -> &'static str {
        use AsyncEventKind::*;
        match self {
            CqErr => "CQ_ERR",
            QpFatal => "QP_FATAL",
            QpReqErr => "QP_REQ_ERR",
            QpAccessErr => "QP_ACCESS_ERR",
            CommEst => "COMM_EST",
            SqDrained => "SQ_DRAINED",
            PathMig => "PATH_MIG",
            PathMigErr => "PATH_MIG_ERR",
            DeviceFatal => "DEVICE_FATAL",
            PortActive => "PORT_ACTIVE",
            PortErr => "PORT_ERR",
            LidChange => "LID_CHANGE",
            PkeyChange => "PKEY_CHANGE",
            SmChange => "SM_CHANGE",
            SrqErr => "SRQ_ERR",
            SrqLimitReached => "SRQ_LIMIT_REACHED",
            QpLastWqeReached => "QP_LAST_WQE_REACHED",
            ClientReregister => "CLIENT_REREGISTER",
            GidChange => "GID_CHANGE",
            WqFatal => "WQ_FATAL",
            Other(_) => "unknown",
        }
    }
}

impl fmt::Display for AsyncEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsyncEventKind::Other(v) => write!(f, "event {v}"),
            k => f.write_str(k.as_str()),
        }
    }
}

/// What an [`AsyncEvent`] concerns, decoded from its kind and element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventElement {
    /// A CQ, by its [`EventId`].
    Cq(EventId),
    /// A QP, by its [`EventId`].
    Qp(EventId),
    /// An SRQ, by its [`EventId`].
    Srq(EventId),
    /// A work queue, by the raw `user_handle` (this crate creates no WQs).
    Wq(u64),
    /// A port, by number.
    Port(u32),
    /// The whole device.
    Device,
    /// An event type this crate does not know; the raw element.
    Unknown(u64),
}

/// One asynchronous event read from the context's async fd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AsyncEvent {
    /// The event type.
    pub kind: AsyncEventKind,
    /// What it concerns.
    pub element: EventElement,
}

impl AsyncEvent {
    /// Decodes the kernel's `ib_uverbs_async_event_desc`.
    pub fn from_desc(d: &AsyncEventDesc) -> AsyncEvent {
        use AsyncEventKind::*;
        let kind = AsyncEventKind::from_raw(d.event_type);
        let id = EventId::from_raw(d.element);
        let element = match kind {
            CqErr => EventElement::Cq(id),
            QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | PathMig | PathMigErr
            | QpLastWqeReached => EventElement::Qp(id),
            SrqErr | SrqLimitReached => EventElement::Srq(id),
            WqFatal => EventElement::Wq(d.element),
            PortActive | PortErr | LidChange | PkeyChange | SmChange | ClientReregister
            | GidChange => EventElement::Port(d.element as u32),
            DeviceFatal => EventElement::Device,
            Other(_) => EventElement::Unknown(d.element),
        };
        AsyncEvent { kind, element }
    }

    /// Whether the event concerns `qp`.
    pub fn is_for_qp(&self, qp: &crate::Qp) -> bool {
        self.element == EventElement::Qp(qp.event_id())
    }

    /// Whether the event concerns `cq`.
    pub fn is_for_cq(&self, cq: &crate::Cq) -> bool {
        self.element == EventElement::Cq(cq.event_id())
    }

    /// Whether the event concerns `srq`.
    pub fn is_for_srq(&self, srq: &crate::Srq) -> bool {
        self.element == EventElement::Srq(srq.event_id())
    }
}

impl fmt::Display for AsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {:?}", self.kind, self.element)
    }
}

/// Whether a DESTROY command's answer means the object is gone, so that
/// the memory its device side used (rings, doorbell records) may be
/// freed: it succeeded, or the device is gone (EIO, ENODEV: the kernel
/// tore the object down with the device). Any other refusal leaves the
/// object alive, its memory still the device's: the caller leaks it.
pub(crate) fn destroyed<T>(answer: std::result::Result<T, Errno>) -> bool {
    matches!(answer, Ok(_) | Err(Errno::EIO | Errno::ENODEV))
}

/// Reads one event record of type `T` from the non-blocking event fd `fd`:
/// `Ok(None)` if none is pending. The uverbs event files hand out exactly
/// one record per `read`. A signal restarts the read.
pub(crate) fn read_event<T>(fd: BorrowedFd<'_>, op: &'static str) -> Result<Option<T>>
where
    T: FromBytes + IntoBytes + KnownLayout + Immutable,
{
    loop {
        match read_once(fd, op) {
            Err(Error::Kernel {
                errno: Errno::EINTR,
                ..
            }) => continue,
            got => return got,
        }
    }
}

/// One `read(2)` of an event record of type `T` from `fd`, in whatever
/// mode the fd is: `Ok(None)` for `EAGAIN` (a non-blocking fd with nothing
/// pending); on a blocking fd the kernel waits, and a signal handler
/// installed without `SA_RESTART` ends the wait with `EINTR`, returned as
/// [`Error::Kernel`].
pub(crate) fn read_once<T>(fd: BorrowedFd<'_>, op: &'static str) -> Result<Option<T>>
where
    T: FromBytes + IntoBytes + KnownLayout + Immutable,
{
    let mut rec = T::new_zeroed();
    let buf = rec.as_mut_bytes();
    let n = match nix::unistd::read(fd.as_raw_fd(), buf).map_err(Errno::from) {
        Ok(n) => n,
        Err(Errno::EAGAIN) => return Ok(None),
        Err(e) => return Err(Error::Kernel { op, errno: e }),
    };
    if n != buf.len() {
        // End of file or a short record: the event file is unusable.
        return Err(Error::Kernel {
            op,
            errno: Errno::EIO,
        });
    }
    Ok(Some(rec))
}

/// Reads one event record of type `T` from `fd` if one is pending, whether
/// or not the fd is non-blocking: `poll(2)` looks first, so the read
/// waits only if another reader of the same fd took the event in between
/// (then until the next event arrives, on a blocking fd).
pub(crate) fn read_ready<T>(fd: BorrowedFd<'_>, op: &'static str) -> Result<Option<T>>
where
    T: FromBytes + IntoBytes + KnownLayout + Immutable,
{
    match wait_readable(fd, Some(Duration::ZERO)).map_err(|errno| Error::Kernel { op, errno })? {
        Ready::TimedOut => Ok(None),
        Ready::Readable | Ready::Failed => read_event(fd, op),
    }
}

/// How [`wait_event`] reads a record once the fd looks readable (and
/// once before it waits): [`read_event`] for a fd known non-blocking,
/// [`read_ready`] for one whose flag someone else may have cleared.
type ReadFn<T> = fn(BorrowedFd<'_>, &'static str) -> Result<Option<T>>;

/// Reads one event of type `T` with `read`, waiting up to `timeout`
/// (`None`: forever) for one to arrive. `Ok(None)` only when the timeout
/// passed.
pub(crate) fn wait_event<T>(
    fd: BorrowedFd<'_>,
    op: &'static str,
    timeout: Option<Duration>,
    read: ReadFn<T>,
) -> Result<Option<T>>
where
    T: FromBytes + IntoBytes + KnownLayout + Immutable,
{
    // A timeout past what an Instant can hold is no timeout.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        if let Some(ev) = read(fd, op)? {
            return Ok(Some(ev));
        }
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        match wait_readable(fd, left).map_err(|errno| Error::Kernel { op, errno })? {
            Ready::Readable => {}
            Ready::TimedOut => return Ok(None),
            Ready::Failed => {
                // An error or hang-up: the read reports it, or, should it
                // find nothing, the fd is dead and waiting again would spin.
                return match read(fd, op)? {
                    Some(ev) => Ok(Some(ev)),
                    None => Err(Error::Kernel {
                        op,
                        errno: Errno::EIO,
                    }),
                };
            }
        }
    }
}

impl Context {
    /// Reads one pending asynchronous event, or `Ok(None)` if there is none.
    /// Never blocks (even if the async fd's `O_NONBLOCK` was cleared):
    /// register [`Context::async_fd`] with `poll`/`epoll` to learn when one
    /// arrives. Events need no acknowledgement.
    pub fn try_get_async_event(&self) -> Result<Option<AsyncEvent>> {
        Ok(
            read_ready::<AsyncEventDesc>(self.async_fd(), "get_async_event")?
                .map(|d| AsyncEvent::from_desc(&d)),
        )
    }

    /// Waits for the next asynchronous event, restarting the wait after
    /// signals. Fails (EIO) instead of sleeping on if the kernel closes the
    /// event file.
    pub fn get_async_event(&self) -> Result<AsyncEvent> {
        loop {
            if let Some(d) =
                wait_event::<AsyncEventDesc>(self.async_fd(), "get_async_event", None, read_ready)?
            {
                return Ok(AsyncEvent::from_desc(&d));
            }
        }
    }

    /// Waits up to `timeout` for the next asynchronous event; `Ok(None)` if
    /// none arrived.
    pub fn get_async_event_timeout(&self, timeout: Duration) -> Result<Option<AsyncEvent>> {
        Ok(wait_event::<AsyncEventDesc>(
            self.async_fd(),
            "get_async_event",
            Some(timeout),
            read_ready,
        )?
        .map(|d| AsyncEvent::from_desc(&d)))
    }

    /// Reads one asynchronous event with a single `read(2)` on the async
    /// fd, in whatever mode the fd is, as libibverbs' `ibv_get_async_event`
    /// does: on a non-blocking fd (the default here) `Ok(None)` when none
    /// is pending; on a blocking one (the C library's, or after you cleared
    /// `O_NONBLOCK`) the kernel waits for one, and a signal handler
    /// installed without `SA_RESTART` ends the wait with
    /// [`Error::Kernel`] carrying `EINTR`. Prefer
    /// [`Context::try_get_async_event`] or
    /// [`Context::get_async_event`], which do not depend on the fd's mode.
    pub fn read_async_event(&self) -> Result<Option<AsyncEvent>> {
        Ok(
            read_once::<AsyncEventDesc>(self.async_fd(), "get_async_event")?
                .map(|d| AsyncEvent::from_desc(&d)),
        )
    }
}

impl Context {
    /// Whether the kernel has begun removing this context's device: its
    /// uverbs character device is gone (or now names another device).
    ///
    /// Drivers without `disassociate_ucontext` (rxe among them, through at
    /// least Linux 6.12) remove a device in use by waiting until every
    /// process has closed it: `rdma link delete` blocks, no event is
    /// raised, and every call here keeps working. Polling this is how a
    /// long-running process can notice that it is holding the removal up
    /// (and drop its objects). Not exact: should another device be added
    /// meanwhile and get the same device number, this reports `false`.
    pub fn removal_pending(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Ok(st) = nix::sys::stat::fstat(self.fd().as_raw_fd()) else {
            return true;
        };
        let ours = st.st_rdev;
        match std::fs::metadata(self.device().dev_path()) {
            Ok(m) => m.rdev() != ours,
            Err(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip() {
        for v in 0..25 {
            assert_eq!(AsyncEventKind::from_raw(v).raw(), v);
        }
        assert_eq!(
            AsyncEventKind::from_raw(15),
            AsyncEventKind::SrqLimitReached
        );
        assert_eq!(AsyncEventKind::from_raw(99), AsyncEventKind::Other(99));
    }

    #[test]
    fn ids_are_unique_and_tagged() {
        let a = EventId::new(ObjectKind::Qp);
        let b = EventId::new(ObjectKind::Qp);
        let c = EventId::new(ObjectKind::Cq);
        assert_ne!(a, b);
        assert_eq!(a.kind(), Some(ObjectKind::Qp));
        assert_eq!(c.kind(), Some(ObjectKind::Cq));
        assert_eq!(EventId::from_raw(0).kind(), None);
    }

    #[test]
    fn elements_follow_the_kind() {
        let id = EventId::new(ObjectKind::Srq);
        let d = AsyncEventDesc {
            element: id.raw(),
            event_type: 15,
            reserved: 0,
        };
        let e = AsyncEvent::from_desc(&d);
        assert_eq!(e.kind, AsyncEventKind::SrqLimitReached);
        assert_eq!(e.element, EventElement::Srq(id));
        let port = AsyncEvent::from_desc(&AsyncEventDesc {
            element: 1,
            event_type: 10,
            reserved: 0,
        });
        assert_eq!(port.element, EventElement::Port(1));
        let dev = AsyncEvent::from_desc(&AsyncEventDesc {
            element: 0,
            event_type: 8,
            reserved: 0,
        });
        assert_eq!(dev.element, EventElement::Device);
    }

    fn pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK).unwrap()
    }

    #[test]
    fn a_timeout_past_what_an_instant_holds_waits_instead_of_panicking() {
        use std::os::fd::AsFd;
        let (r, w) = pipe();
        assert_eq!(nix::unistd::write(&w, &[1u8]), Ok(1));
        let got = wait_readable(r.as_fd(), Some(Duration::MAX)).unwrap();
        assert!(matches!(got, Ready::Readable));
    }

    #[test]
    fn readers_time_out_return_records_and_fail_on_a_dead_fd() {
        use std::os::fd::AsFd;
        let (r, w) = pipe();
        let fd = r.as_fd();
        assert_eq!(
            read_event::<AsyncEventDesc>(fd, "t")
                .unwrap()
                .map(|d| d.element),
            None
        );
        let t = Instant::now();
        let got =
            wait_event::<AsyncEventDesc>(fd, "t", Some(Duration::from_millis(50)), read_event)
                .unwrap();
        assert!(got.is_none() && t.elapsed() >= Duration::from_millis(50));
        let rec = AsyncEventDesc {
            element: 7,
            event_type: 15,
            reserved: 0,
        };
        assert_eq!(nix::unistd::write(&w, rec.as_bytes()), Ok(16));
        let got = wait_event::<AsyncEventDesc>(fd, "t", None, read_event)
            .unwrap()
            .unwrap();
        assert_eq!((got.element, got.event_type), (7, 15));
        // The writer goes away: a blocking wait must fail, not sleep.
        drop(w);
        let e = wait_event::<AsyncEventDesc>(fd, "t", None, read_event).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EIO));
    }

    /// The async fd's readers on a fd whose `O_NONBLOCK` was cleared (the
    /// C library clears it): nothing pending is `None` at once, not a
    /// read that sleeps; a pending record is read; a one-read reader on a
    /// non-blocking fd answers `None`.
    #[test]
    fn readers_of_a_blocking_fd_look_before_they_read() {
        use std::os::fd::AsFd;
        let (r, w) = nix::unistd::pipe().unwrap();
        let fd = r.as_fd();
        let t = Instant::now();
        assert!(read_ready::<AsyncEventDesc>(fd, "t").unwrap().is_none());
        let got =
            wait_event::<AsyncEventDesc>(fd, "t", Some(Duration::from_millis(50)), read_ready)
                .unwrap();
        assert!(got.is_none());
        assert!(t.elapsed() < Duration::from_secs(5));
        let rec = AsyncEventDesc {
            element: 3,
            event_type: 5,
            reserved: 0,
        };
        assert_eq!(nix::unistd::write(&w, rec.as_bytes()), Ok(16));
        let got = read_ready::<AsyncEventDesc>(fd, "t").unwrap().unwrap();
        assert_eq!((got.element, got.event_type), (3, 5));
        let (nr, _nw) = pipe();
        assert!(read_once::<AsyncEventDesc>(nr.as_fd(), "t")
            .unwrap()
            .is_none());
    }
}
