//! tokio's fd registration, whose contract is I/O safety.

use std::os::fd::AsRawFd;

use ::tokio::io::unix::{AsyncFd, AsyncFdRegisterError};
use ::tokio::io::Interest;

/// An owner of an open file descriptor: what [`register`](crate::tokio::register)
/// takes, so that tokio's reactor can watch the fd for as long as it owns
/// the value (tokio's I/O-safety contract).
///
/// # Safety
///
/// `as_raw_fd` must return a valid, open fd, the same one on every call,
/// which stays open and names the same file description for as long as
/// the value lives. The implementations stand next to their types
/// (each allowed there, with its SAFETY line), so that this module names
/// no type above it.
pub unsafe trait OwnsFd: AsRawFd {}

// SAFETY: an OwnedFd is open until it drops, and as_raw_fd returns it.
unsafe impl OwnsFd for std::os::fd::OwnedFd {}

/// Registers `inner`'s fd with the current tokio reactor for readability.
/// Panics outside a runtime (the caller checks first).
pub(crate) fn register_readable<T: OwnsFd>(
    inner: T,
) -> std::result::Result<AsyncFd<T>, AsyncFdRegisterError<T>> {
    // SAFETY: `T: OwnsFd`: the fd stays open and names the same file for
    // as long as the AsyncFd owns `inner`, and as_raw_fd always returns it.
    unsafe { AsyncFd::register_with_interest(inner, Interest::READABLE) }
}
