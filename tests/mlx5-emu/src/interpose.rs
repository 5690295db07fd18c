//! The exported libc symbols that shadow glibc's when this library is
//! preloaded, and the constructor that sets the emulator up.
//!
//! Every interposer first checks, lock-free, whether the call concerns the
//! emulated device (an fd in [`crate::fdtable`], or the device path); if
//! not, it calls the real function at once ([`crate::real`]). The emulated
//! paths run under `catch_unwind`: a panic there becomes `-1`/`EIO`, never
//! an unwind into C.
//!
//! `open` and `ioctl` are variadic in C. Stable Rust cannot define variadic
//! functions, so they are defined with their first variadic argument as a
//! fixed parameter (`mode`, `arg`). This is sound on x86-64 System V only
//! (the reason this crate is x86-64 only): there, the first variadic
//! integer/pointer arguments travel in the same registers as fixed ones, so
//! a C caller of `open(path, flags)` or `open(path, flags, mode)` and of
//! `ioctl(fd, request, arg)` lands in these definitions with the arguments
//! it passed (an absent `mode` is an unspecified value that is only used
//! when the flags ask for one, exactly as in C).

use std::panic::{catch_unwind, AssertUnwindSafe};

use libc::{c_char, c_int, c_uint, c_ulong, c_void, off_t, size_t, ssize_t};
use rverbs_abi::Errno;

use crate::fdtable::{self, FdKind};
use crate::{cdev, device, dispatch, log, real, sysfs};

/// `NETLINK_RDMA`.
const NETLINK_RDMA: c_int = 20;

/// Sets the calling thread's errno.
fn set_errno(e: Errno) {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e.raw() as c_int };
}

/// Runs an emulated path, turning a panic into `EIO`.
fn guarded<T>(f: impl FnOnce() -> Result<T, Errno>) -> Result<T, Errno> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(Errno::EIO))
}

/// Whether `path` is the emulated device node.
///
/// # Safety
/// `path` must be null or a valid C string.
unsafe fn is_device(path: *const c_char) -> bool {
    if path.is_null() {
        return false;
    }
    // SAFETY: non-null and, by the caller's contract, NUL-terminated.
    unsafe { std::ffi::CStr::from_ptr(path) == device::DEV_PATH }
}

/// Opens the device on behalf of an `open` variant.
fn open_device(flags: c_int) -> c_int {
    match guarded(|| cdev::open(flags)) {
        Ok(fd) => fd,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

/// `open(2)`; opening `/dev/infiniband/uverbs0` yields an emulated device fd.
///
/// # Safety
/// As `open(2)`. C-variadic in glibc; see the module docs for why the
/// fixed `mode` parameter is sound on x86-64.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: `path` is the caller's C string (or null).
    if unsafe { is_device(path) } {
        return open_device(flags);
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::open(path, flags, mode) }
}

/// `open64(2)`; see [`open`].
///
/// # Safety
/// As [`open`].
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: as in `open`.
    if unsafe { is_device(path) } {
        return open_device(flags);
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::open64(path, flags, mode) }
}

/// glibc's fortified `open` (no mode); see [`open`].
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as in `open`.
    if unsafe { is_device(path) } {
        return open_device(flags);
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::open_2(path, flags) }
}

/// glibc's fortified `open64`; see [`open`].
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as in `open`.
    if unsafe { is_device(path) } {
        return open_device(flags);
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::open64_2(path, flags) }
}

/// `close(2)`; closing a device fd destroys its context and objects,
/// closing an event channel fd releases our end of it.
///
/// # Safety
/// As `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    let kind = fdtable::kind(fd);
    if kind != FdKind::None {
        let _ = guarded(|| {
            cdev::close(fd, kind);
            Ok(())
        });
    }
    real::close(fd)
}

/// `write(2)`; on a device fd, a uverbs command.
///
/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    if fdtable::kind(fd) == FdKind::Cmd {
        // SAFETY: `buf`/`count` are the caller's write() arguments.
        let r = guarded(|| Ok(unsafe { dispatch::write(fd, buf, count) }));
        match r {
            Ok(Some(Ok(n))) => return n as ssize_t,
            Ok(Some(Err(e))) | Err(e) => {
                set_errno(e);
                return -1;
            }
            // Not ours after all (stale fd number): pass through.
            Ok(None) => {}
        }
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::write(fd, buf, count) }
}

/// `read(2)`; on the application's end of an event channel, the event
/// read is counted as reported for its object (the kernel counts an event
/// when it is read, and a destroy answers that count, which libibverbs
/// waits to see acknowledged), and an event of an object destroyed since
/// it was queued is dropped and the next one read (the kernel removes
/// those at destroy).
///
/// # Safety
/// As `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    if fdtable::kind(fd) != FdKind::Event {
        // SAFETY: pass-through with the caller's arguments.
        return unsafe { real::read(fd, buf, count) };
    }
    loop {
        // SAFETY: pass-through with the caller's arguments.
        let n = unsafe { real::read(fd, buf, count) };
        let Ok(len) = usize::try_from(n) else {
            return n;
        };
        if len == 0 {
            return n;
        }
        // SAFETY: read() just wrote `len` bytes at `buf`.
        let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
        match guarded(|| Ok(crate::hca::event_read(fd, bytes))) {
            Ok(false) => continue,
            Ok(true) | Err(_) => return n,
        }
    }
}

/// `ioctl(2)`; on a device fd, a uverbs method (`RDMA_VERBS_IOCTL`,
/// module `ioctl`; any other request is `ENOTTY`).
///
/// # Safety
/// As `ioctl(2)`. C-variadic in glibc; see the module docs for why the
/// fixed `arg` parameter is sound on x86-64.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if fdtable::kind(fd) == FdKind::Cmd {
        // SAFETY: `arg` is the caller's ioctl() argument.
        let r = guarded(|| Ok(unsafe { crate::ioctl::ioctl(fd, request, arg) }));
        match r {
            Ok(Some(Ok(v))) => return v,
            Ok(Some(Err(e))) | Err(e) => {
                set_errno(e);
                return -1;
            }
            // Not ours after all (stale fd number): pass through.
            Ok(None) => {}
        }
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::ioctl(fd, request, arg) }
}

/// The emulated `mmap` path shared by [`mmap`] and [`mmap64`]; `None`:
/// pass through.
///
/// # Safety
/// As `mmap(2)`.
unsafe fn mmap_device(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> Option<*mut c_void> {
    if fdtable::kind(fd) != FdKind::Cmd {
        return None;
    }
    // SAFETY: the caller's mmap arguments, on our own memfd.
    match guarded(|| Ok(unsafe { cdev::mmap(addr, len, prot, flags, fd, off) })) {
        Ok(None) => None,
        Ok(Some(Ok(p))) => Some(p),
        Ok(Some(Err(e))) | Err(e) => {
            set_errno(e);
            Some(libc::MAP_FAILED)
        }
    }
}

/// `mmap(2)`; on a device fd, maps a UAR page.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the caller's arguments.
    if let Some(p) = unsafe { mmap_device(addr, len, prot, flags, fd, off) } {
        return p;
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::mmap(addr, len, prot, flags, fd, off) }
}

/// `mmap64(2)` (the same as [`mmap`] on x86-64).
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the caller's arguments.
    if let Some(p) = unsafe { mmap_device(addr, len, prot, flags, fd, off) } {
        return p;
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::mmap64(addr, len, prot, flags, fd, off) }
}

/// `munmap(2)`; forgets unmapped UAR pages.
///
/// # Safety
/// As `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let _ = guarded(|| {
        cdev::munmap(addr, len);
        Ok(())
    });
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::munmap(addr, len) }
}

/// `stat(2)`; the device node exists as a character device.
///
/// # Safety
/// As `stat(2)`.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: `path` is the caller's C string (or null).
    if unsafe { is_device(path) } && !buf.is_null() {
        // SAFETY: `buf` is the caller's writable `struct stat`.
        unsafe { buf.write(cdev::device_stat()) };
        return 0;
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::stat(path, buf) }
}

/// `stat64(2)`; see [`stat`].
///
/// # Safety
/// As `stat(2)`.
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    // SAFETY: `path` is the caller's C string (or null).
    if unsafe { is_device(path) } && !buf.is_null() {
        // SAFETY: `struct stat64` and `struct stat` are the same type on
        // x86-64; `buf` is the caller's writable struct.
        unsafe { buf.cast::<libc::stat>().write(cdev::device_stat()) };
        return 0;
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::stat64(path, buf) }
}

/// `fstat(2)`; a device fd is a character device with the sysfs `dev`
/// numbers.
///
/// # Safety
/// As `fstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    if fdtable::kind(fd) == FdKind::Cmd && !buf.is_null() {
        if let Ok(Some(st)) = guarded(|| Ok(cdev::fstat(fd))) {
            // SAFETY: `buf` is the caller's writable `struct stat`.
            unsafe { buf.write(st) };
            return 0;
        }
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::fstat(fd, buf) }
}

/// `fstat64(2)`; see [`fstat`].
///
/// # Safety
/// As `fstat(2)`.
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int {
    if fdtable::kind(fd) == FdKind::Cmd && !buf.is_null() {
        if let Ok(Some(st)) = guarded(|| Ok(cdev::fstat(fd))) {
            // SAFETY: same layout on x86-64; the caller's writable struct.
            unsafe { buf.cast::<libc::stat>().write(st) };
            return 0;
        }
    }
    // SAFETY: pass-through with the caller's arguments.
    unsafe { real::fstat64(fd, buf) }
}

/// `socket(2)`; RDMA netlink is refused (`EPROTONOSUPPORT`), so libibverbs
/// discovers devices through sysfs even on kernels with RDMA support.
///
/// # Safety
/// As `socket(2)` (no pointers involved).
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    if domain == libc::AF_NETLINK && protocol == NETLINK_RDMA {
        log::line(format_args!(
            "socket(AF_NETLINK, NETLINK_RDMA) -> EPROTONOSUPPORT"
        ));
        set_errno(Errno::EPROTONOSUPPORT);
        return -1;
    }
    real::socket(domain, ty, protocol)
}

/// The constructor: resolves the real functions, reads the log setting,
/// writes the sysfs tree and sets `SYSFS_PATH`. Failures are reported on
/// stderr (the device is then invisible); nothing unwinds into the loader.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn init() {
    let _ = catch_unwind(|| {
        real::resolve_all();
        log::init();
        match sysfs::setup() {
            Ok(root) => log::line(format_args!("sysfs tree at {}", root.display())),
            Err(e) => log::always(format_args!(
                "cannot set up the fake sysfs tree: {e}; mlx5_0 will not be visible"
            )),
        }
    });
}

/// Runs [`init`] when the library is loaded (an `.init_array` entry).
/// Not in unit-test builds, which must not touch the environment.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;
