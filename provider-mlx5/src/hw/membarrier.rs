//! Asymmetric fences between threads of this process: a cheap one on a
//! hot path (no instruction, only the compiler stopped) paired with an
//! expensive one on a rare path (the `membarrier(2)` system call, which
//! makes every running thread of the process execute a full memory
//! barrier), as liburcu and folly use them.
//!
//! Together they give the store-then-load ordering a Dekker-style
//! handshake needs (each side stores its flag, then reads the other's):
//! either the hot side's load follows the barrier the kernel forced on it
//! (and sees the rare side's store), or its store preceded it (and the
//! rare side sees that). Rust's memory model has no such pair; the
//! guarantee is the kernel's, and the compiler fence keeps the compiler
//! from moving the hot side's load above its store.
//!
//! [`available`] says whether the process may use them (the kernel has
//! `MEMBARRIER_CMD_PRIVATE_EXPEDITED`, Linux 4.14 on, and this process is
//! registered for it); where it is not, both sides must use full fences.

use std::sync::atomic::{compiler_fence, Ordering};
use std::sync::OnceLock;

/// `membarrier(2)` commands (`include/uapi/linux/membarrier.h`).
mod cmd {
    /// Which commands the kernel has (a bit mask of them).
    pub const QUERY: libc::c_int = 0;
    /// Every thread of every process, through RCU (slow, no registration).
    pub const GLOBAL: libc::c_int = 1 << 0;
    /// Every running thread of this process, by inter-processor interrupt.
    pub const PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    /// Registers this process for [`PRIVATE_EXPEDITED`].
    pub const REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;
}

/// `membarrier(2)` with command `cmd`: the kernel's answer (a mask for
/// QUERY, 0 for the others), negative if it refused.
fn call(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes two integers and a CPU number (unused
    // without MEMBARRIER_CMD_FLAG_CPU) and touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_uint,
            0 as libc::c_int,
        )
    }
}

/// Issues one `membarrier(2)` command; `true` if the kernel did it.
fn membarrier(cmd: libc::c_int) -> bool {
    call(cmd) >= 0
}

/// Whether this process may pair [`light`] with [`heavy`]: asked of the
/// kernel (and the process registered) once.
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        // QUERY answers the commands the kernel has.
        let mask = call(cmd::QUERY);
        let wanted = libc::c_long::from(cmd::PRIVATE_EXPEDITED | cmd::REGISTER_PRIVATE_EXPEDITED);
        // Issued once too: a filter (seccomp) may allow the query and the
        // registration and still refuse the command itself.
        mask >= 0
            && mask & wanted == wanted
            && membarrier(cmd::REGISTER_PRIVATE_EXPEDITED)
            && membarrier(cmd::PRIVATE_EXPEDITED)
    })
}

/// The hot side's fence: no instruction; only keeps the compiler from
/// moving memory accesses across it. Pairs with [`heavy`]; use it only
/// where [`available`] said `true`.
#[inline(always)]
pub(crate) fn light() {
    compiler_fence(Ordering::SeqCst);
}

/// The rare side's fence: returns once every thread of this process has
/// executed a full memory barrier (or was not running, which implies
/// one). Use it only where [`available`] said `true`.
///
/// Once registered, the expedited command does not fail; should it (a
/// child process the registration did not follow), the process registers
/// again, then falls back to the global command, which needs no
/// registration. If the kernel refuses both, no barrier can be had and
/// going on could let two threads into the same ring at once: the
/// process aborts.
#[cold]
pub(crate) fn heavy() {
    if membarrier(cmd::PRIVATE_EXPEDITED)
        || (membarrier(cmd::REGISTER_PRIVATE_EXPEDITED) && membarrier(cmd::PRIVATE_EXPEDITED))
        || membarrier(cmd::GLOBAL)
    {
        return;
    }
    eprintln!("rverbs-mlx5: membarrier(2) failed after it was available; aborting");
    std::process::abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the kernel offers it (every kernel this project tests on),
    /// registering works and the heavy fence returns.
    #[test]
    fn heavy_fence_returns() {
        if available() {
            light();
            heavy();
        }
        let mask = call(cmd::QUERY);
        if mask >= 0 && mask & libc::c_long::from(cmd::PRIVATE_EXPEDITED) != 0 {
            assert!(
                available(),
                "the kernel has it (mask {mask:#x}) but registering failed"
            );
        }
    }
}
