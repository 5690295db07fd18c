//! The one module of this crate allowed `unsafe` calls: the timerfd the
//! async waits (`tokio` feature) await beside an rdma_cm or CQ fd, so
//! that a deadline needs no runtime timer driver.

use std::os::fd::{AsFd, AsRawFd};

/// A timerfd (CLOCK_MONOTONIC, non-blocking) that becomes readable once
/// `after` has passed (at least a nanosecond), for a deadline awaited on
/// the runtime without its timer driver.
pub(crate) fn deadline_fd(after: std::time::Duration) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: timerfd_create takes no pointers.
    let raw = unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: timerfd_create just returned this fd; nothing else owns it.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
    set_deadline(fd.as_fd(), after)?;
    Ok(fd)
}

/// Re-arms the timerfd `fd` to become readable once `after` has passed
/// (at least a nanosecond); an expiry not yet read is dropped, so it is
/// not readable until then.
pub(crate) fn set_deadline(
    fd: std::os::fd::BorrowedFd<'_>,
    after: std::time::Duration,
) -> std::io::Result<()> {
    // A zero it_value disarms the timer: at least a nanosecond. Seconds
    // past what time_t holds are clamped (a deadline centuries away).
    let after = after.max(std::time::Duration::from_nanos(1));
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: libc::time_t::try_from(after.as_secs()).unwrap_or(libc::time_t::MAX),
            // Below 10^9: fits the c_long of every target, 32-bit too.
            tv_nsec: after.subsec_nanos() as libc::c_long,
        },
    };
    // SAFETY: `fd` is open for the borrow (a timerfd, else the call fails
    // with EINVAL); `spec` is a valid itimerspec for the call's duration;
    // the old value is not asked for.
    let rc = unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
