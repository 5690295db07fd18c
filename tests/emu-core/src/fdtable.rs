//! The lock-free table of file descriptors the emulator owns: the check
//! every interposed call makes before anything else, so pass-through calls
//! cost one atomic load (no lock, no allocation).
//!
//! An entry is set before the descriptor is handed to the application and
//! cleared before the descriptor is really closed, so a number reused by a
//! concurrent `open` elsewhere is never mistaken for ours. Descriptors at
//! or above [`MAX_FDS`] are never ours (the emulator refuses to create
//! them). A descriptor closed behind our back (`close_range`, `dup2` onto
//! it) leaves a stale entry; the dispatcher detects that by comparing the
//! file identity and passes such calls through.

use std::sync::atomic::{AtomicU8, Ordering};

use libc::c_int;

/// Descriptors below this number can be tracked.
pub const MAX_FDS: usize = 1 << 16;

/// What a descriptor is to the emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdKind {
    /// Not ours: pass everything through.
    None,
    /// An open emulated `/dev/infiniband/uverbsN` (a memfd of ours).
    Cmd,
    /// The application's end of an event channel (async events or a
    /// completion channel); the emulator keeps the other end.
    Event,
}

static TABLE: [AtomicU8; MAX_FDS] = [const { AtomicU8::new(0) }; MAX_FDS];

/// The kind of `fd`.
#[inline]
pub fn kind(fd: c_int) -> FdKind {
    if fd < 0 || fd as usize >= MAX_FDS {
        return FdKind::None;
    }
    match TABLE[fd as usize].load(Ordering::Acquire) {
        1 => FdKind::Cmd,
        2 => FdKind::Event,
        _ => FdKind::None,
    }
}

/// Whether `fd` can be tracked.
pub fn trackable(fd: c_int) -> bool {
    fd >= 0 && (fd as usize) < MAX_FDS
}

/// Records `fd` as `kind` (ignored for untrackable numbers).
pub fn set(fd: c_int, kind: FdKind) {
    if !trackable(fd) {
        return;
    }
    let v = match kind {
        FdKind::None => 0,
        FdKind::Cmd => 1,
        FdKind::Event => 2,
    };
    TABLE[fd as usize].store(v, Ordering::Release);
}

/// Forgets `fd`.
pub fn clear(fd: c_int) {
    set(fd, FdKind::None);
}

/// A new event channel: `(application's end, emulator's end)`, a
/// `SOCK_SEQPACKET` pair (each record one read, as on the kernel's event
/// files), close-on-exec.
pub fn event_pair() -> Result<(c_int, c_int), rverbs_abi::Errno> {
    let mut fds = [-1 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(rverbs_abi::Errno::last());
    }
    Ok((fds[0], fds[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_clear() {
        let fd = (MAX_FDS - 3) as c_int;
        assert_eq!(kind(fd), FdKind::None);
        set(fd, FdKind::Event);
        assert_eq!(kind(fd), FdKind::Event);
        clear(fd);
        assert_eq!(kind(fd), FdKind::None);
        assert_eq!(kind(-1), FdKind::None);
        assert_eq!(kind(MAX_FDS as c_int), FdKind::None);
    }
}
