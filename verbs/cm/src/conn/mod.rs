//! Connection-manager ids and what they become: a resolved active id, a
//! listener, a connection request, an established connection.

mod cm_id;
mod connection;
mod id;
mod listener;
mod request;
mod resolved;

pub(crate) use cm_id::resolve_timeout_ms;
pub use cm_id::CmId;
pub use connection::Connection;
pub(crate) use id::{addrs_of, check_qp, device_of};
// The ack-timeout checks are tested in `cm`.
#[cfg(test)]
pub(crate) use id::check_ack_timeout;
pub use listener::Listener;
pub use request::ConnRequest;
pub use resolved::Resolved;

use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use super::channel::{CmEvent, EventChannel};
use rverbs::error::{Error, InvalidKind, Result};
use rverbs::qp::QpType;

/// A fresh nonzero cookie for an id's events: the kernel drops the events
/// of an id whose cookie is 0 (a request not yet accepted), so every id
/// this crate creates or accepts gets one.
pub(super) fn next_uid() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Which kind of QP an id connects: RC through the CM's REQ/REP/RTU (the
/// TCP port space) or UD through its SIDR exchange (the UDP port space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Tcp,
    Udp,
}

impl Space {
    fn qp_type(self) -> QpType {
        match self {
            Space::Tcp => QpType::Rc,
            Space::Udp => QpType::Ud,
        }
    }
}

/// An id and the channel it lives on (alone). Dropping the channel
/// destroys the id in the kernel.
#[derive(Debug)]
pub(crate) struct Id {
    pub(super) ch: EventChannel,
    pub(super) handle: u32,
    pub(super) space: Space,
    /// The cookie the id was created with (its events carry it).
    pub(super) uid: u64,
}

/// The id's event channel fd (readable when an event is queued), for an
/// async runtime to wait on; only the number, as for [`EventChannel`].
impl AsRawFd for Id {
    fn as_raw_fd(&self) -> RawFd {
        self.ch.as_raw_fd()
    }
}

/// How a handshake waits for its id's next event: the blocking API's
/// [`Blocking`] sleeps in `poll`; `rverbs::tokio`'s waits on its runtime.
/// Every handshake below is written once, as an `async fn` generic over
/// this, and the blocking API runs it with [`Blocking`] through [`block`].
pub(crate) trait Wait {
    /// `id`'s next event within `timeout`, or [`CmError::Timeout`](crate::CmError::Timeout) naming
    /// `step`.
    fn event<'a>(
        &'a mut self,
        id: &'a Id,
        step: &'static str,
        timeout: Duration,
    ) -> impl Future<Output = Result<CmEvent>> + 'a;
}

/// [`Wait`] by blocking the thread (the future is ready when made).
pub(crate) struct Blocking;

impl Wait for Blocking {
    fn event<'a>(
        &'a mut self,
        id: &'a Id,
        step: &'static str,
        timeout: Duration,
    ) -> impl Future<Output = Result<CmEvent>> + 'a {
        std::future::ready(id.event_within(step, timeout))
    }
}

/// Runs a handshake that waits with [`Blocking`] only: its future never
/// returns `Pending` (every wait inside is already done when awaited), so
/// one poll ends it.
pub(super) fn block<T>(f: impl Future<Output = Result<T>>) -> Result<T> {
    /// A waker nothing waits on.
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => Err(Error::invalid_as(
            InvalidKind::Other,
            "a blocking rdma_cm step did not finish (a bug in rverbs)",
        )),
    }
}
