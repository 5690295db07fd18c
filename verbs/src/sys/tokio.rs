//! tokio's fd registration, whose contract is I/O safety.

use std::os::fd::AsRawFd;

use ::tokio::io::unix::{AsyncFd, AsyncFdRegisterError};
use ::tokio::io::Interest;

/// An owner of an open file descriptor: what [`register_readable`] takes.
///
/// # Safety
///
/// `as_raw_fd` must return a valid, open fd, the same one on every call,
/// which stays open and names the same file description for as long as
/// the value lives. The implementations are this module's.
pub(crate) unsafe trait OwnsFd: AsRawFd {}

// SAFETY: a CompChannel is an Arc of the channel's state, which owns its
// OwnedFd and never replaces it; as_raw_fd returns that fd.
unsafe impl OwnsFd for crate::cq::CompChannel {}
// SAFETY: an EventFd holds a Context, whose async fd is an OwnedFd set at
// creation and closed only when the last clone drops; as_raw_fd returns it.
unsafe impl OwnsFd for crate::tokio::EventFd {}
// SAFETY: a ListenerFd holds the Listener, whose id holds its event
// channel, which owns its OwnedFd and never replaces it; as_raw_fd
// returns that fd.
unsafe impl OwnsFd for crate::tokio::ListenerFd {}
// SAFETY: as for ListenerFd: the Connection's id holds its event channel.
unsafe impl OwnsFd for crate::tokio::ConnectionFd {}
// SAFETY: as for ListenerFd: the Resolving's id holds its event channel.
unsafe impl OwnsFd for crate::tokio::ResolvingFd {}

/// Registers `inner`'s fd with the current tokio reactor for readability.
/// Panics outside a runtime (the caller checks first).
pub(crate) fn register_readable<T: OwnsFd>(
    inner: T,
) -> std::result::Result<AsyncFd<T>, AsyncFdRegisterError<T>> {
    // SAFETY: `T: OwnsFd`: the fd stays open and names the same file for
    // as long as the AsyncFd owns `inner`, and as_raw_fd always returns it.
    unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }
}
