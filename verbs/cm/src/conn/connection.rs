//! [`Connection`]: an established connection and its disconnect.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use rverbs_abi::ucma::{self, Disconnect};

use super::Id;
use crate::channel::CmEvent;
use crate::CmEventKind;
use rverbs::error::{Error, Result};
use rverbs::qp::{Qp, QpState};

/// An established RC connection: the QP, the peer's private data, and the
/// id's events (pollable: [`Connection::wait`], or register its
/// [`AsRawFd`] with an event loop). Dropping it disconnects.
#[derive(Debug)]
pub struct Connection {
    pub(super) id: Id,
    pub(super) qp: Qp,
    pub(super) peer_private: Vec<u8>,
    pub(super) peer_conn: crate::ConnInfo,
    pub(super) local: Option<SocketAddr>,
    pub(super) peer: Option<SocketAddr>,
    pub(super) disconnected: bool,
}

impl Connection {
    /// The connected QP.
    pub fn qp(&self) -> &Qp {
        &self.qp
    }

    /// The connected QP, to post to.
    pub fn qp_mut(&mut self) -> &mut Qp {
        &mut self.qp
    }

    /// The private data the peer answered with (accept) or requested with
    /// (connect), padded with zeros by the CM on InfiniBand and RoCE (to
    /// [`crate::MAX_REP_PRIVATE_DATA`] bytes for an accept,
    /// [`crate::MAX_REQ_PRIVATE_DATA`] for a request): see
    /// [`crate::private`] for framing that survives the padding.
    pub fn private_data(&self) -> &[u8] {
        &self.peer_private
    }

    /// The peer's connection parameters.
    pub fn peer_conn(&self) -> crate::ConnInfo {
        self.peer_conn
    }

    /// The local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Whether the connection was torn down (by either side).
    pub fn is_disconnected(&self) -> bool {
        self.disconnected
    }

    /// The next event of the connection, waiting up to `timeout` (`None`:
    /// forever); `Ok(None)` when the time ran out. On
    /// [`CmEventKind::Disconnected`] (or a device removal) the QP is moved
    /// to the error state: its outstanding work completes flushed.
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        // A timeout past what an Instant can hold is no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let Some(ev) = self.id.ch.get_event(left)? else {
                return Ok(None);
            };
            if ev.id() != self.id.handle {
                continue;
            }
            if matches!(
                ev.kind(),
                CmEventKind::Disconnected | CmEventKind::DeviceRemoval
            ) {
                self.disconnected = true;
                self.flush_qp();
            }
            return Ok(Some(ev));
        }
    }

    /// Moves the QP to ERR so that posted work completes (flushed).
    fn flush_qp(&mut self) {
        if self.qp.state() != QpState::Err {
            let _ = self.qp.modify(&rverbs::qp::QpAttr {
                qp_state: Some(QpState::Err),
                ..Default::default()
            });
        }
    }

    /// Disconnects (CM DREQ; the peer sees [`CmEventKind::Disconnected`])
    /// and moves the QP to ERR. Does not wait for the peer's reply: its
    /// event follows on [`Connection::next_event`].
    pub fn disconnect(&mut self) -> Result<()> {
        if !self.disconnected {
            self.disconnected = true;
            ucma::exec(self.id.fd(), &Disconnect { id: self.id.handle })
                .map_err(Error::kernel("rdma_disconnect"))?;
        }
        self.flush_qp();
        Ok(())
    }
}

impl Connection {
    /// The fd its events arrive on, for a crate-internal `poll` beside
    /// other fds (the stream's CQ channel).
    pub(crate) fn cm_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.id.fd()
    }

    /// Waits until an event (a disconnect) is queued, without taking it:
    /// `Ok(true)`, or `Ok(false)` when `timeout` (`None`: no limit) passed
    /// first.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        self.id.ch.wait(timeout)
    }
}

/// The number of the fd its events arrive on, for `poll`, `epoll` or an
/// event loop. Not [`AsFd`](std::os::fd::AsFd): see
/// [`EventChannel`](crate::EventChannel)'s [`AsRawFd`].
impl AsRawFd for Connection {
    fn as_raw_fd(&self) -> RawFd {
        self.id.fd().as_raw_fd()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The channel closes after this, destroying the id (which
        // disconnects a connected id in the kernel anyway).
        let _ = self.disconnect();
    }
}
