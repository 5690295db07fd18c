//! [`Listener`]: a passive id waiting for connection requests.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use super::cm_id::CmId;
use super::request::ConnRequest;
use super::{Id, Space};
use crate::CmError;
use crate::CmEventKind;
use rverbs::error::{Error, Result};

/// A listening id: yields the connection requests to an address and port
/// (`rdma_listen`). Its fd is readable when a request is pending.
/// Dropping it rejects the requests not yet taken.
#[derive(Debug)]
pub struct Listener {
    pub(super) id: Id,
    pub(super) local: SocketAddr,
}

impl Listener {
    /// Binds to `addr` (port 0: one is chosen, see
    /// [`Listener::local_addr`]) and listens with a backlog of `backlog`
    /// requests. Errors: EADDRINUSE when the port is taken, ENODEV (a
    /// [`Error::Kernel`] from `rdma_bind_addr`) when `addr` is a local
    /// address without an RDMA device.
    pub fn bind(addr: SocketAddr, backlog: u32) -> Result<Listener> {
        Self::bind_in(Space::Tcp, addr, backlog)
    }

    /// [`Listener::bind`] in the UDP port space: the requests are for a
    /// UD QP, answered with [`ConnRequest::accept_ud`] (librdmacm's
    /// `RDMA_PS_UDP`, e.g. `udaddy`).
    pub fn bind_ud(addr: SocketAddr, backlog: u32) -> Result<Listener> {
        Self::bind_in(Space::Udp, addr, backlog)
    }

    fn bind_in(space: Space, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        let mut id = CmId::create(space)?;
        id.bind(addr)?;
        id.listen(backlog)
    }

    /// The address and port listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next connection request, waiting up to `timeout` (`None`:
    /// forever); `Ok(None)` when the time ran out. The request is moved to
    /// an event channel of its own.
    pub fn get_request(&self, timeout: Option<Duration>) -> Result<Option<ConnRequest>> {
        // A timeout past what an Instant can hold is no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let Some(ev) = self.id.ch.get_event(left)? else {
                return Ok(None);
            };
            match ev.kind() {
                CmEventKind::ConnectRequest => {
                    return ConnRequest::take(ev, self.id.fd(), self.id.space).map(Some)
                }
                CmEventKind::DeviceRemoval if ev.id() == self.id.handle => {
                    return Err(Error::Cm(CmError::Gone(CmEventKind::DeviceRemoval)))
                }
                // Events of requests not yet taken (a request given up
                // by its peer) or of the listener itself: nothing to do.
                _ => continue,
            }
        }
    }
}

impl Listener {
    /// Waits until a connection request (or another event) is queued,
    /// without taking it: `Ok(true)`, or `Ok(false)` when `timeout`
    /// (`None`: no limit) passed first.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        self.id.ch.wait(timeout)
    }
}

/// The number of the fd its events arrive on, for `poll`, `epoll` or an
/// event loop. Not [`AsFd`](std::os::fd::AsFd): see
/// [`EventChannel`](crate::EventChannel)'s [`AsRawFd`].
impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        self.id.fd().as_raw_fd()
    }
}
