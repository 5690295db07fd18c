//! The emulated character device's file operations other than `write`:
//! open, close, fstat, mmap of UAR pages, munmap bookkeeping.
//!
//! The device fd is a memfd of ours. It also backs the context's UAR
//! pages: page `i` is the memfd's page `i`, so every mapping of a UAR index
//! shows the same memory (as on hardware), and a future HCA thread can map
//! it too.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_int, c_void, off_t, size_t};
use rverbs_abi::mlx5::mmap_cmd;
use rverbs_abi::Errno;

use crate::emu::{self, UarMap};
use crate::fdtable::{self, FdKind};
use crate::{device, log, real};

/// Number of live UAR mappings: lets `munmap` skip the lock when zero.
static UAR_MAPPED: AtomicUsize = AtomicUsize::new(0);

/// The `struct stat` of the device node (and of an open device fd).
pub fn device_stat() -> libc::stat {
    emu_core::cdev::device_stat(device::CDEV_MAJOR, device::CDEV_MINOR)
}

/// Opens the device: a new memfd, registered as a command fd with a new
/// (ucontext-less) context.
pub fn open(flags: c_int) -> Result<c_int, Errno> {
    let (fd, id) = emu_core::cdev::open_memfd(flags)?;
    let mut emu = emu::lock();
    if let Some(stale) = emu.context_by_fd(fd).map(|c| c.id()) {
        emu.remove_context(stale);
    }
    let ctx = emu.add_context(fd, id);
    fdtable::set(fd, FdKind::Cmd);
    drop(emu);
    log::line(format_args!(
        "open {} -> fd {fd} (context {ctx})",
        device::DEV_PATH.to_string_lossy()
    ));
    Ok(fd)
}

/// Whether `fd` is still the memfd its context was opened with; if not
/// (the number was closed behind our back and reused), forgets it.
fn live(emu: &mut emu::Emu, fd: c_int) -> Option<u64> {
    let (ctx, want) = emu.context_by_fd(fd).map(|c| (c.id(), c.file_id))?;
    if real::file_id(fd) == Some(want) {
        return Some(ctx);
    }
    emu.remove_context(ctx);
    fdtable::clear(fd);
    None
}

/// The context of command fd `fd`, if it is (still) ours.
pub fn context_of(emu: &mut emu::Emu, fd: c_int) -> Option<u64> {
    live(emu, fd)
}

/// `fstat` of a command fd: the device's stat, or `None` if the fd is not
/// (or no longer) ours.
pub fn fstat(fd: c_int) -> Option<libc::stat> {
    let mut emu = emu::lock();
    live(&mut emu, fd).map(|_| device_stat())
}

/// Forgets an fd the application is closing (before the real close).
pub fn close(fd: c_int, kind: FdKind) {
    let mut emu = emu::lock();
    match kind {
        FdKind::Cmd => {
            if let Some(ctx) = emu.context_by_fd(fd).map(|c| c.id()) {
                emu.remove_context(ctx);
                log::line(format_args!("close fd {fd} (context {ctx})"));
            }
        }
        FdKind::Event => {
            if let Some(ch) = emu.channels.remove(&fd) {
                real::close(ch.peer_fd);
                log::line(format_args!("close event fd {fd} ({:?})", ch.kind));
            }
        }
        FdKind::None => {}
    }
    fdtable::clear(fd);
}

/// `mmap` of a command fd: static UAR pages (commands 0, 2 and 3, one
/// 4 KiB page each) map the memfd's page of that index; anything else is
/// `EINVAL`. `None`: the fd is not (or no longer) ours.
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
    let ctx = live(&mut emu, fd)?;
    let result = (|| {
        let uctx = emu
            .context(ctx)
            .and_then(|c| c.ucontext())
            .ok_or(Errno::EINVAL)?;
        if off < 0 || off as usize % device::UAR_SIZE != 0 {
            return Err(Errno::EINVAL);
        }
        let pgoff = off as u64 / device::UAR_SIZE as u64;
        let command = ((pgoff >> 8) & 0xff) as u32;
        let index = (pgoff & 0xff) as u32;
        if !matches!(
            command,
            mmap_cmd::REGULAR_PAGE | mmap_cmd::WC_PAGE | mmap_cmd::NC_PAGE
        ) || pgoff >> 16 != 0
        {
            return Err(Errno::EINVAL);
        }
        if len != device::UAR_SIZE || index >= uctx.uar_pages() {
            return Err(Errno::EINVAL);
        }
        // Always shared (the "HCA" must see the doorbells) and readable
        // where writable (as device memory mapped for writing is).
        let flags = (flags & !libc::MAP_PRIVATE) | libc::MAP_SHARED;
        let prot = if prot & libc::PROT_WRITE != 0 {
            prot | libc::PROT_READ
        } else {
            prot
        };
        let file_off = (index as usize * device::UAR_SIZE) as off_t;
        // SAFETY: maps our own memfd, whose size covers every UAR page
        // (set at GET_CONTEXT); address/flags are the caller's request.
        let p = unsafe { real::mmap(addr, len, prot, flags, fd, file_off) };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        emu.uar_maps.insert(p as usize, UarMap { ctx, index, len });
        UAR_MAPPED.fetch_add(1, Ordering::Relaxed);
        Ok((p, command, index))
    })();
    drop(emu);
    match result {
        Ok((p, command, index)) => {
            log::line(format_args!(
                "mmap fd {fd} offset {off:#x} (command {command}, UAR page {index}) -> {p:p}"
            ));
            Some(Ok(p))
        }
        Err(e) => {
            log::line(format_args!("mmap fd {fd} offset {off:#x} -> {e:?}"));
            Some(Err(e))
        }
    }
}

/// Notes an `munmap` (before the real one): forgets UAR mappings inside
/// the range. Lock-free when no UAR page is mapped.
pub fn munmap(addr: *mut c_void, len: size_t) {
    if UAR_MAPPED.load(Ordering::Relaxed) == 0 {
        return;
    }
    let start = addr as usize;
    let end = start.saturating_add(len);
    let mut emu = emu::lock();
    let gone: Vec<usize> = emu.uar_maps.range(start..end).map(|(a, _)| *a).collect();
    for a in gone {
        emu.uar_maps.remove(&a);
        UAR_MAPPED.fetch_sub(1, Ordering::Relaxed);
    }
}
