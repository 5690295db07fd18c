//! The exported libc symbols that shadow glibc's when an emulator is
//! preloaded, and [`init`], which its constructor calls with its
//! [`Driver`] table.
//!
//! Every interposer first checks, lock-free, whether the call concerns the
//! emulated device (an fd in [`crate::fdtable`], or the device path of the
//! installed driver); if not, or before a driver is installed, it calls
//! the real function at once ([`crate::real`]). The emulated
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

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};

use libc::{c_char, c_int, c_uint, c_ulong, c_void, off_t, size_t, ssize_t};
use rverbs_abi::Errno;

use crate::fdtable::{self, FdKind};
use crate::{log, real};

/// What one emulated device does with the calls routed to it: the
/// device-specific half of every interposer. Every function runs under
/// `catch_unwind` (a panic is `EIO`). A `None` from a routed call means
/// "not ours after all" (a stale fd number): the real call follows.
#[derive(Debug)]
pub struct Driver {
    /// The emulator's name, prefixing its log lines (`mlx5-emu`).
    pub name: &'static str,
    /// The variable switching its log on (`MLX5_EMU_LOG`).
    pub log_env: &'static str,
    /// The device node (`/dev/infiniband/uverbs0`).
    pub dev_path: &'static CStr,
    /// The constructor's set-up after the real functions are resolved and
    /// the log is read: writes the sysfs tree (an error is printed, and
    /// the device is then invisible).
    pub setup: fn() -> std::io::Result<std::path::PathBuf>,
    /// Opens the device (`open` flags): a new command fd.
    pub open: fn(c_int) -> Result<c_int, Errno>,
    /// Forgets `fd` of `kind` before the real `close`.
    pub close: fn(c_int, FdKind),
    /// A `write()` on a command fd: one uverbs command.
    ///
    /// # Safety
    /// The pointer and length are the application's `write()` arguments.
    pub write: unsafe fn(c_int, *const c_void, usize) -> Option<Result<usize, Errno>>,
    /// An `ioctl()` on a command fd.
    ///
    /// # Safety
    /// The argument is the application's `ioctl()` argument.
    pub ioctl: unsafe fn(c_int, c_ulong, *mut c_void) -> Option<Result<c_int, Errno>>,
    /// An `mmap()` of a command fd.
    ///
    /// # Safety
    /// As `mmap(2)`.
    #[allow(clippy::type_complexity)]
    pub mmap: unsafe fn(
        *mut c_void,
        size_t,
        c_int,
        c_int,
        c_int,
        off_t,
    ) -> Option<Result<*mut c_void, Errno>>,
    /// Notes an `munmap()` before the real one.
    pub munmap: fn(*mut c_void, size_t),
    /// The `struct stat` of the device node.
    pub device_stat: fn() -> libc::stat,
    /// `fstat` of a command fd (`None`: no longer ours).
    pub fstat: fn(c_int) -> Option<libc::stat>,
    /// An event record the application read from an event fd; `false`
    /// drops it (its object is gone) and the next one is read.
    pub event_read: fn(c_int, &[u8]) -> bool,
}

/// The installed driver (null until [`init`]).
static DRIVER: AtomicPtr<Driver> = AtomicPtr::new(std::ptr::null_mut());

/// The installed driver, if any.
fn driver() -> Option<&'static Driver> {
    let p = DRIVER.load(Ordering::Acquire);
    // SAFETY: DRIVER is null or was set by `init` from a `&'static Driver`.
    unsafe { p.cast_const().as_ref() }
}

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
    let Some(d) = driver() else {
        return false;
    };
    // SAFETY: non-null and, by the caller's contract, NUL-terminated.
    unsafe { CStr::from_ptr(path) == d.dev_path }
}

/// Opens the device on behalf of an `open` variant.
fn open_device(flags: c_int) -> c_int {
    let Some(d) = driver() else {
        set_errno(Errno::ENOENT);
        return -1;
    };
    match guarded(|| (d.open)(flags)) {
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
    if let (true, Some(d)) = (kind != FdKind::None, driver()) {
        let _ = guarded(|| {
            (d.close)(fd, kind);
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
    if let (FdKind::Cmd, Some(d)) = (fdtable::kind(fd), driver()) {
        // SAFETY: `buf`/`count` are the caller's write() arguments.
        let r = guarded(|| Ok(unsafe { (d.write)(fd, buf, count) }));
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
    let (FdKind::Event, Some(d)) = (fdtable::kind(fd), driver()) else {
        // SAFETY: pass-through with the caller's arguments.
        return unsafe { real::read(fd, buf, count) };
    };
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
        match guarded(|| Ok((d.event_read)(fd, bytes))) {
            Ok(false) => continue,
            Ok(true) | Err(_) => return n,
        }
    }
}

/// `ioctl(2)`; on a device fd, whatever the driver answers (a uverbs
/// method of `RDMA_VERBS_IOCTL`).
///
/// # Safety
/// As `ioctl(2)`. C-variadic in glibc; see the module docs for why the
/// fixed `arg` parameter is sound on x86-64.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if let (FdKind::Cmd, Some(d)) = (fdtable::kind(fd), driver()) {
        // SAFETY: `arg` is the caller's ioctl() argument.
        let r = guarded(|| Ok(unsafe { (d.ioctl)(fd, request, arg) }));
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
    let (FdKind::Cmd, Some(d)) = (fdtable::kind(fd), driver()) else {
        return None;
    };
    // SAFETY: the caller's mmap arguments, on our own memfd.
    match guarded(|| Ok(unsafe { (d.mmap)(addr, len, prot, flags, fd, off) })) {
        Ok(None) => None,
        Ok(Some(Ok(p))) => Some(p),
        Ok(Some(Err(e))) | Err(e) => {
            set_errno(e);
            Some(libc::MAP_FAILED)
        }
    }
}

/// `mmap(2)`; on a device fd, maps what the driver hands out (UAR pages,
/// queues, doorbells).
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

/// `munmap(2)`; the driver forgets what was unmapped.
///
/// # Safety
/// As `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    if let Some(d) = driver() {
        let _ = guarded(|| {
            (d.munmap)(addr, len);
            Ok(())
        });
    }
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
    if let (true, Some(d)) = (unsafe { is_device(path) } && !buf.is_null(), driver()) {
        // SAFETY: `buf` is the caller's writable `struct stat`.
        unsafe { buf.write((d.device_stat)()) };
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
    if let (true, Some(d)) = (unsafe { is_device(path) } && !buf.is_null(), driver()) {
        // SAFETY: `struct stat64` and `struct stat` are the same type on
        // x86-64; `buf` is the caller's writable struct.
        unsafe { buf.cast::<libc::stat>().write((d.device_stat)()) };
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
    if let (FdKind::Cmd, false, Some(d)) = (fdtable::kind(fd), buf.is_null(), driver()) {
        if let Ok(Some(st)) = guarded(|| Ok((d.fstat)(fd))) {
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
    if let (FdKind::Cmd, false, Some(d)) = (fdtable::kind(fd), buf.is_null(), driver()) {
        if let Ok(Some(st)) = guarded(|| Ok((d.fstat)(fd))) {
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

/// The emulator's constructor: resolves the real functions, reads the log
/// setting, installs `driver` (from here on its device is routed to it)
/// and runs its set-up (the sysfs tree, `SYSFS_PATH`). Failures are
/// reported on stderr (the device is then invisible); nothing unwinds
/// into the loader. A second call keeps the first driver.
pub fn init(driver: &'static Driver) {
    let _ = catch_unwind(|| {
        real::resolve_all();
        log::init(driver.name, driver.log_env);
        let installed = DRIVER.compare_exchange(
            std::ptr::null_mut(),
            std::ptr::from_ref(driver).cast_mut(),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if installed.is_err() {
            log::always(format_args!("a second emulator in one process is ignored"));
            return;
        }
        match (driver.setup)() {
            Ok(root) => log::line(format_args!("sysfs tree at {}", root.display())),
            Err(e) => log::always(format_args!(
                "cannot set up the fake sysfs tree: {e}; the device will not be visible"
            )),
        }
    });
}

/// Declares the `.init_array` entry that calls [`init`] with `$driver`
/// (a `static` [`Driver`]) when the emulator library is loaded. Not in
/// unit-test builds, which must not touch the environment.
#[macro_export]
macro_rules! emulator_init {
    ($driver:path) => {
        #[cfg(not(test))]
        #[used]
        #[link_section = ".init_array"]
        static EMU_INIT: extern "C" fn() = {
            extern "C" fn emu_init() {
                $crate::interpose::init(&$driver);
            }
            emu_init
        };
    };
}
