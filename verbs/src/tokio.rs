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
//! The connection manager's async API (listeners, connections, every
//! handshake step) is `rverbs_cm::tokio`, built on [`register`] and
//! [`OwnsFd`] as this module is.
//!
//! Both fds are non-blocking from creation (see [`crate::event`]); no
//! event needs acknowledging (see [`CompChannel`]).

use std::os::fd::{AsRawFd, RawFd};

use ::tokio::io::unix::AsyncFd;

use crate::cq::{await_completions, CompChannel, Cq, Waiter};
use crate::error::{Error, InvalidKind, Result};
use crate::event::AsyncEvent;
use crate::sys::tokio::register_readable;
use crate::{Context, Wc};

pub use crate::sys::tokio::OwnsFd;

/// Registers `inner`'s fd with the current tokio runtime's reactor for
/// readability, as every async type here does; `what` names the fd in the
/// error. Fails with [`InvalidKind::WrongUse`] outside a runtime (rather
/// than tokio's panic) and with [`Error::Io`] if the reactor refuses it
/// (I/O not enabled, or the fd registered already).
pub fn register<T: OwnsFd>(what: &str, inner: T) -> Result<AsyncFd<T>> {
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
unsafe impl OwnsFd for EventFd {}

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
