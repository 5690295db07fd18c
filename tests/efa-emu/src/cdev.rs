//! The emulated character device's file operations other than `write`:
//! open, close, fstat, and mmap of the regions commands handed out (by
//! key, at exactly their length, as `rdma_user_mmap_entry` requires).

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_void, off_t, size_t};
use rverbs_abi::Errno;

use crate::emu::{self, Emu, RegionKind};
use crate::fdtable::{self, FdKind};
use crate::{device, log, real};

/// Number of live region mappings: lets `munmap` skip the lock when zero.
static MAPPED: AtomicUsize = AtomicUsize::new(0);

/// The `struct stat` of the device node (and of an open device fd).
pub fn device_stat() -> libc::stat {
    emu_core::cdev::device_stat(device::CDEV_MAJOR, device::CDEV_MINOR)
}

/// Opens the device: a new memfd, registered as a command fd with a new
/// (ucontext-less) context.
pub fn open(flags: c_int) -> Result<c_int, Errno> {
    let (fd, id) = emu_core::cdev::open_memfd(flags)?;
    let mut emu = emu::lock();
    if let Some(stale) = emu.context_by_fd(fd) {
        emu.remove_context(stale);
    }
    let ctx = emu.add_context(fd, id);
    fdtable::set(fd, FdKind::Cmd);
    drop(emu);
    log::line(format_args!("open -> fd {fd} (context {ctx})"));
    Ok(fd)
}

/// The context of command fd `fd`, if it is still the memfd its context
/// was opened with; if not (closed behind our back, number reused),
/// forgets it.
pub fn context_of(emu: &mut Emu, fd: c_int) -> Option<u64> {
    let ctx = emu.context_by_fd(fd)?;
    let want = emu.contexts.get(&ctx)?.file_id;
    if real::file_id(fd) == Some(want) {
        return Some(ctx);
    }
    emu.remove_context(ctx);
    fdtable::clear(fd);
    None
}

/// `fstat` of a command fd: the device's stat, or `None` if the fd is not
/// (or no longer) ours.
pub fn fstat(fd: c_int) -> Option<libc::stat> {
    let mut emu = emu::lock();
    context_of(&mut emu, fd).map(|_| device_stat())
}

/// Forgets an fd the application is closing (before the real close).
pub fn close(fd: c_int, kind: FdKind) {
    let mut emu = emu::lock();
    if kind == FdKind::Cmd {
        if let Some(ctx) = emu.context_by_fd(fd) {
            emu.remove_context(ctx);
            log::line(format_args!("close fd {fd} (context {ctx})"));
        }
    }
    fdtable::clear(fd);
}

/// Event records read by the application: EFA's emulator sends none yet
/// that could be stale, so every record is delivered.
pub fn event_read(_fd: c_int, _bytes: &[u8]) -> bool {
    true
}

/// `mmap` of a command fd: the region whose key is `off`, mapped whole
/// (a length other than the region's is `EINVAL`, an unknown key
/// `EINVAL`); CQ rings only for reading, the others only for writing
/// (what the device allows). `None`: the fd is not (or no longer) ours.
///
/// # Safety
/// As `mmap(2)` (e.g. `MAP_FIXED` over memory in use is the caller's
/// business).
pub unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> Option<Result<*mut c_void, Errno>> {
    let mut emu = emu::lock();
    let ctx = context_of(&mut emu, fd)?;
    let result = (|| {
        let u = emu.ucontext_mut(ctx).ok_or(Errno::EINVAL)?;
        let key = u64::try_from(off).map_err(|_| Errno::EINVAL)?;
        let region = *u.regions.get(&key).ok_or(Errno::EINVAL)?;
        if len as u64 != region.len || flags & libc::MAP_SHARED == 0 {
            return Err(Errno::EINVAL);
        }
        let writable = prot & libc::PROT_WRITE != 0;
        if region.kind == RegionKind::CqRing && writable {
            return Err(Errno::EPERM);
        }
        // Mapped readable too, so the emulator's own checks and a debugger
        // can read what was written (device memory is readable).
        let prot = prot | libc::PROT_READ;
        // SAFETY: maps our own memfd, whose size covers the region (grown
        // when it was handed out); address/flags are the caller's request.
        let p = unsafe { real::mmap(addr, len, prot, flags, fd, off) };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        if emu.maps.insert(p as usize, (ctx, key)).is_none() {
            MAPPED.fetch_add(1, Ordering::Relaxed);
        }
        Ok((p, region.kind))
    })();
    drop(emu);
    match result {
        Ok((p, kind)) => {
            log::line(format_args!(
                "mmap fd {fd} key {off:#x} ({kind:?}) -> {p:p}"
            ));
            Some(Ok(p))
        }
        Err(e) => {
            log::line(format_args!(
                "mmap fd {fd} key {off:#x} len {len:#x} -> {e:?}"
            ));
            Some(Err(e))
        }
    }
}

/// Notes an `munmap` (before the real one): forgets mappings inside the
/// range. Lock-free when nothing is mapped.
pub fn munmap(addr: *mut c_void, len: size_t) {
    if MAPPED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let start = addr as usize;
    let end = start.saturating_add(len);
    let mut emu = emu::lock();
    let gone: Vec<usize> = emu.maps.range(start..end).map(|(a, _)| *a).collect();
    for a in gone {
        emu.maps.remove(&a);
        MAPPED.fetch_sub(1, Ordering::Relaxed);
    }
}
