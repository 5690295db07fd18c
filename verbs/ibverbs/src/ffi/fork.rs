//! Fork safety through the C ABI: `ibv_fork_init`,
//! `ibv_is_fork_initialized`, `ibv_dontfork_range` and `ibv_dofork_range`
//! (rverbs' fork marking, which Rust registrations share).

use super::*;

/// `ibv_fork_init`: 0 once registered memory is protected across
/// `fork()` (by the kernel, or by `MADV_DONTFORK`), else the errno.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    guard(libc::EIO, || match rverbs::fork_safety() {
        rverbs::ForkSafety::KernelCopiesOnFork => 0,
        _ => match rverbs::fork::enable_dontfork() {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        },
    })
}

/// `ibv_is_fork_initialized`: 2 (`IBV_FORK_UNNEEDED`) when the kernel
/// copies pinned pages on fork, 1 (`IBV_FORK_ENABLED`) when registrations
/// are marked `MADV_DONTFORK`, 0 (`IBV_FORK_DISABLED`) otherwise.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    guard(0, || match rverbs::fork_safety() {
        rverbs::ForkSafety::KernelCopiesOnFork => 2,
        rverbs::ForkSafety::MadviseDontfork => 1,
        _ => 0,
    })
}

/// `madvise(advice)` over the pages spanning `[base, base + size)`.
fn advise_range(base: *mut c_void, size: usize, advice: c_int) -> c_int {
    if rverbs::fork_safety() == rverbs::ForkSafety::KernelCopiesOnFork || size == 0 {
        return 0;
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    let start = (base as usize) & !(page - 1);
    let Some(end) = (base as usize)
        .checked_add(size)
        .and_then(|e| e.checked_add(page - 1))
        .map(|e| e & !(page - 1))
    else {
        return libc::EINVAL;
    };
    // SAFETY: MADV_DONTFORK / MADV_DOFORK change only what fork() copies
    // for a child, never this process's memory or mappings; the kernel
    // checks the range (ENOMEM for unmapped pages).
    let r = unsafe { libc::madvise(start as *mut c_void, end - start, advice) };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    }
}

/// `ibv_dontfork_range`: marks the pages of the range `MADV_DONTFORK`
/// (nothing to do where the kernel copies pinned pages on fork); 0, or
/// the errno.
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    guard(libc::EIO, || advise_range(base, size, libc::MADV_DONTFORK))
}

/// `ibv_dofork_range`: undoes [`ibv_dontfork_range`]; 0, or the errno.
#[no_mangle]
pub extern "C" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    guard(libc::EIO, || advise_range(base, size, libc::MADV_DOFORK))
}
