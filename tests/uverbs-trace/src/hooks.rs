//! The interposed libc symbols: `open` (and its `open64` and fortified
//! variants) notes which file descriptors are uverbs command files,
//! `close` forgets them, and `write` and `ioctl` on them are recorded
//! ([`crate::record`]) around the real call. Nothing here may unwind into C:
//! recording runs under `catch_unwind`, and the caller's errno is what the
//! real call left.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicI32, Ordering};

use libc::{c_char, c_int, c_uint, c_ulong, c_void, size_t, ssize_t};
use preload_libc as real;
use rverbs_abi::ioctl::RDMA_VERBS_IOCTL;

use crate::record;

/// Most uverbs command files tracked at once (one a context).
const SLOTS: usize = 64;
/// An empty slot of [`FDS`].
const EMPTY: c_int = -1;

/// The uverbs command files the process holds open, one per slot. Lock-free,
/// so that `write` and `close`, which a signal handler may call, never wait
/// on a lock the interrupted code holds.
static FDS: [AtomicI32; SLOTS] = [const { AtomicI32::new(EMPTY) }; SLOTS];

/// The prefix of a uverbs command file's path.
const UVERBS: &[u8] = b"/dev/infiniband/uverbs";

/// Whether `fd` is a uverbs command file.
fn is_uverbs(fd: c_int) -> bool {
    fd >= 0 && FDS.iter().any(|s| s.load(Ordering::Acquire) == fd)
}

/// Notes the outcome `fd` of opening `path` (a command file beyond
/// [`SLOTS`] open at once is not recorded).
///
/// # Safety
/// `path` must be null or a valid C string.
unsafe fn opened(path: *const c_char, fd: c_int) -> c_int {
    if fd < 0 || path.is_null() {
        return fd;
    }
    // SAFETY: non-null and, by the caller's contract, NUL-terminated.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    if p.starts_with(UVERBS) && !is_uverbs(fd) {
        for s in &FDS {
            if s.compare_exchange(EMPTY, fd, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                break;
            }
        }
    }
    fd
}

/// The calling thread's errno slot.
fn errno() -> *mut c_int {
    // SAFETY: __errno_location returns the calling thread's errno slot.
    unsafe { libc::__errno_location() }
}

/// Runs `f` (recording) without letting a panic out, and with the
/// caller's errno as it was.
fn quietly(f: impl FnOnce()) {
    // SAFETY: the thread's own errno slot, read and written by this thread.
    let saved = unsafe { *errno() };
    let _ = catch_unwind(AssertUnwindSafe(f));
    // SAFETY: as above.
    unsafe { *errno() = saved };
}

/// `open(2)`.
///
/// # Safety
/// As `open(2)`. C-variadic in glibc: defined with the mode as a fixed
/// parameter, sound on x86-64 System V (tests/mlx5-emu/src/interpose.rs).
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: pass-through with the caller's arguments; `path` as theirs.
    unsafe { opened(path, real::open(path, flags, mode)) }
}

/// `open64(2)`; see [`open`].
///
/// # Safety
/// As [`open`].
#[no_mangle]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: as in `open`.
    unsafe { opened(path, real::open64(path, flags, mode)) }
}

/// glibc's fortified `open` (no mode).
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as in `open`.
    unsafe { opened(path, real::open_2(path, flags)) }
}

/// glibc's fortified `open64`.
///
/// # Safety
/// As `open(2)`.
#[no_mangle]
pub unsafe extern "C" fn __open64_2(path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: as in `open`.
    unsafe { opened(path, real::open64_2(path, flags)) }
}

/// `close(2)`: a command file closed is forgotten first (its number may
/// come back for another file).
///
/// # Safety
/// As `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    for s in &FDS {
        let _ = s.compare_exchange(fd, EMPTY, Ordering::AcqRel, Ordering::Acquire);
    }
    real::close(fd)
}

/// `write(2)`: on a command file, a uverbs command, recorded with its
/// outcome.
///
/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    // SAFETY: pass-through with the caller's arguments.
    let n = unsafe { real::write(fd, buf, count) };
    if is_uverbs(fd) {
        // SAFETY: the thread's own errno slot.
        let e = unsafe { *errno() };
        quietly(|| record::write(buf as u64, count, (n < 0).then_some(e)));
    }
    n
}

/// `ioctl(2)`: on a command file, an `RDMA_VERBS_IOCTL` method call,
/// recorded with its outcome.
///
/// # Safety
/// As `ioctl(2)`. C-variadic in glibc: one pointer-sized argument taken as
/// fixed (see [`open`]).
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if request != RDMA_VERBS_IOCTL || !is_uverbs(fd) {
        // SAFETY: pass-through with the caller's arguments.
        return unsafe { real::ioctl(fd, request, arg) };
    }
    let mut call = None;
    quietly(|| call = record::IoctlCall::before(arg as u64));
    // SAFETY: pass-through with the caller's arguments.
    let r = unsafe { real::ioctl(fd, request, arg) };
    // SAFETY: the thread's own errno slot.
    let e = unsafe { *errno() };
    quietly(|| record::ioctl(arg as u64, call, (r < 0).then_some(e)));
    r
}
