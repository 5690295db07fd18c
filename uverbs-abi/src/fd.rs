//! The file descriptors the kernel hands out (a context's async events, a
//! completion channel, an rdma_cm event channel): non-blocking mode, and
//! waiting with `poll(2)` for one to become readable. Shared by `rverbs`
//! and `rverbs-cm`.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use crate::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

/// Puts `fd` in non-blocking mode.
pub fn set_nonblocking(fd: BorrowedFd<'_>) -> std::result::Result<(), Errno> {
    let flags = fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?;
    fcntl(
        fd.as_raw_fd(),
        FcntlArg::F_SETFL(OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK),
    )?;
    Ok(())
}

/// How a wait for a readable fd ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// Data to read.
    Readable,
    /// The fd reports an error or hang-up (read to learn which).
    Failed,
    /// The timeout passed.
    TimedOut,
}

/// Waits with `poll(2)` until `fd` is readable or failed, or `timeout`
/// passes (`None`: no limit). Restarts after signals.
pub fn wait_readable(
    fd: BorrowedFd<'_>,
    timeout: Option<Duration>,
) -> std::result::Result<Ready, Errno> {
    // A timeout past what an Instant can hold is no timeout.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // Round up so a short remaining time does not become a busy poll.
                let ms = left.as_nanos().div_ceil(1_000_000);
                PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut p = [PollFd::new(fd, PollFlags::POLLIN)];
        let n = match poll(&mut p, timeout).map_err(Errno::from) {
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(Ready::TimedOut);
            }
            continue;
        }
        // revents is None only for bits nix does not know, which poll never
        // reports for a POLLIN request (the kernel masks the answer to the
        // events asked plus POLLERR, POLLHUP and POLLNVAL).
        if p[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
        {
            return Ok(Ready::Readable);
        }
        return Ok(Ready::Failed);
    }
}
