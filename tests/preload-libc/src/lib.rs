//! `preload-libc`: the real libc functions behind the symbols a test-only
//! `LD_PRELOAD` library interposes (the mlx5 emulator, `uverbs-trace`),
//! found once with `dlsym(RTLD_NEXT, ...)` and used for every pass-through.
//!
//! Calling `libc::open` and friends from this library would bind to our own
//! exported definitions (infinite recursion), so every pass-through goes
//! through the pointers here. Resolution is lock-free (one atomic per
//! symbol, idempotent if two threads race) and happens in the constructor
//! and lazily on first use, in case another library's constructor calls an
//! interposed function first. Should `dlsym` not find a symbol (a libc
//! without it), the call falls back to the raw system call.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_uint, c_ulong, c_void, off_t, size_t, ssize_t};

/// One lazily resolved symbol: 0 = not looked up yet, 1 = absent, else the
/// address.
struct Sym {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Sym {
    const fn new(name: &'static CStr) -> Self {
        Sym {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The symbol's address in the next object after this library, if any.
    fn get(&self) -> Option<usize> {
        let mut a = self.addr.load(Ordering::Acquire);
        if a == 0 {
            // SAFETY: `name` is a NUL-terminated string; RTLD_NEXT is a valid
            // pseudo-handle for dlsym called from a shared object.
            let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
            a = if p.is_null() { 1 } else { p as usize };
            self.addr.store(a, Ordering::Release);
        }
        (a > 1).then_some(a)
    }
}

static OPEN: Sym = Sym::new(c"open");
static OPEN64: Sym = Sym::new(c"open64");
static OPEN_2: Sym = Sym::new(c"__open_2");
static OPEN64_2: Sym = Sym::new(c"__open64_2");
static CLOSE: Sym = Sym::new(c"close");
static WRITE: Sym = Sym::new(c"write");
static IOCTL: Sym = Sym::new(c"ioctl");
static MMAP: Sym = Sym::new(c"mmap");
static MMAP64: Sym = Sym::new(c"mmap64");
static MUNMAP: Sym = Sym::new(c"munmap");
static STAT: Sym = Sym::new(c"stat");
static STAT64: Sym = Sym::new(c"stat64");
static FSTAT: Sym = Sym::new(c"fstat");
static FSTAT64: Sym = Sym::new(c"fstat64");
static SOCKET: Sym = Sym::new(c"socket");
static READ: Sym = Sym::new(c"read");

/// Looks every symbol up now (called from the constructor).
pub fn resolve_all() {
    for s in [
        &OPEN, &OPEN64, &OPEN_2, &OPEN64_2, &CLOSE, &WRITE, &IOCTL, &MMAP, &MMAP64, &MUNMAP, &STAT,
        &STAT64, &FSTAT, &FSTAT64, &SOCKET, &READ,
    ] {
        s.get();
    }
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, ...) -> c_int;
type Open2Fn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t;
type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
type IoctlFn = unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;
type MmapFn = unsafe extern "C" fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
type MunmapFn = unsafe extern "C" fn(*mut c_void, size_t) -> c_int;
type StatFn = unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int;
type Stat64Fn = unsafe extern "C" fn(*const c_char, *mut libc::stat64) -> c_int;
type FstatFn = unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int;
type Fstat64Fn = unsafe extern "C" fn(c_int, *mut libc::stat64) -> c_int;
type SocketFn = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;

/// Reinterprets a resolved address as the function pointer type `F`.
///
/// # Safety
/// `addr` must be the address of a function with exactly the ABI of `F`.
unsafe fn as_fn<F: Copy>(addr: usize) -> F {
    debug_assert_eq!(size_of::<F>(), size_of::<usize>());
    // SAFETY: `F` is a function pointer type (pointer-sized, checked above)
    // and, by the caller's contract, `addr` points to such a function.
    unsafe { std::mem::transmute_copy::<usize, F>(&addr) }
}

/// Converts a raw `syscall` result to the libc convention (already done by
/// `libc::syscall`: -1 and errno on failure).
fn sys_int(r: libc::c_long) -> c_int {
    r as c_int
}

/// The real `open` (variadic in C; the mode is always passed, which is what
/// a C caller of `open(path, flags, mode)` does).
///
/// # Safety
/// As `open(2)`: `path` must be a valid C string.
pub unsafe fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    match OPEN.get() {
        // SAFETY: the symbol is glibc's `int open(const char *, int, ...)`;
        // the pointer type is variadic, so the call follows the variadic ABI.
        Some(a) => unsafe { as_fn::<OpenFn>(a)(path, flags, mode) },
        None => {
            // SAFETY: openat(AT_FDCWD, ...) is open; arguments as the caller's.
            sys_int(unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode) })
        }
    }
}

/// The real `open64`.
///
/// # Safety
/// As `open(2)`.
pub unsafe fn open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    match OPEN64.get() {
        // SAFETY: glibc's `int open64(const char *, int, ...)`, variadic call.
        Some(a) => unsafe { as_fn::<OpenFn>(a)(path, flags, mode) },
        // SAFETY: as in `open`.
        None => unsafe { open(path, flags | libc::O_LARGEFILE, mode) },
    }
}

/// The real `__open_2` (the fortified `open` without a mode).
///
/// # Safety
/// As `open(2)`.
pub unsafe fn open_2(path: *const c_char, flags: c_int) -> c_int {
    match OPEN_2.get() {
        // SAFETY: glibc's `int __open_2(const char *, int)`.
        Some(a) => unsafe { as_fn::<Open2Fn>(a)(path, flags) },
        // SAFETY: as in `open`.
        None => unsafe { open(path, flags, 0) },
    }
}

/// The real `__open64_2`.
///
/// # Safety
/// As `open(2)`.
pub unsafe fn open64_2(path: *const c_char, flags: c_int) -> c_int {
    match OPEN64_2.get() {
        // SAFETY: glibc's `int __open64_2(const char *, int)`.
        Some(a) => unsafe { as_fn::<Open2Fn>(a)(path, flags) },
        // SAFETY: as in `open64`.
        None => unsafe { open64(path, flags, 0) },
    }
}

/// The real `close`.
pub fn close(fd: c_int) -> c_int {
    match CLOSE.get() {
        // SAFETY: glibc's `int close(int)`; closing any number is memory-safe.
        Some(a) => unsafe { as_fn::<CloseFn>(a)(fd) },
        // SAFETY: the close system call takes one integer.
        None => sys_int(unsafe { libc::syscall(libc::SYS_close, fd) }),
    }
}

/// The real `write`.
///
/// # Safety
/// As `write(2)`: `buf` must be readable for `count` bytes.
pub unsafe fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    match WRITE.get() {
        // SAFETY: glibc's `ssize_t write(int, const void *, size_t)`; the
        // buffer contract is the caller's.
        Some(a) => unsafe { as_fn::<WriteFn>(a)(fd, buf, count) },
        // SAFETY: as above, through the system call.
        None => unsafe { libc::syscall(libc::SYS_write, fd, buf, count) as ssize_t },
    }
}

/// The real `read`.
///
/// # Safety
/// As `read(2)`: `buf` must be writable for `count` bytes.
pub unsafe fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    match READ.get() {
        // SAFETY: glibc's `ssize_t read(int, void *, size_t)`; the buffer
        // contract is the caller's.
        Some(a) => unsafe { as_fn::<ReadFn>(a)(fd, buf, count) },
        // SAFETY: as above, through the system call.
        None => unsafe { libc::syscall(libc::SYS_read, fd, buf, count) as ssize_t },
    }
}

/// The real `ioctl` (variadic in C; one pointer-sized argument passed on).
///
/// # Safety
/// As `ioctl(2)` for the given request.
pub unsafe fn ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    match IOCTL.get() {
        // SAFETY: glibc's `int ioctl(int, unsigned long, ...)`, variadic call;
        // the argument contract is the caller's.
        Some(a) => unsafe { as_fn::<IoctlFn>(a)(fd, request, arg) },
        // SAFETY: as above, through the system call.
        None => sys_int(unsafe { libc::syscall(libc::SYS_ioctl, fd, request, arg) }),
    }
}

/// The real `mmap`.
///
/// # Safety
/// As `mmap(2)`.
pub unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    match MMAP.get() {
        // SAFETY: glibc's `mmap`; the mapping contract is the caller's.
        Some(a) => unsafe { as_fn::<MmapFn>(a)(addr, len, prot, flags, fd, off) },
        // SAFETY: as above, through the system call (x86-64: one mmap call).
        None => unsafe {
            libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void
        },
    }
}

/// The real `mmap64` (the same function on x86-64).
///
/// # Safety
/// As `mmap(2)`.
pub unsafe fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    match MMAP64.get() {
        // SAFETY: glibc's `mmap64` (same signature as mmap on LP64).
        Some(a) => unsafe { as_fn::<MmapFn>(a)(addr, len, prot, flags, fd, off) },
        // SAFETY: as in `mmap`.
        None => unsafe { mmap(addr, len, prot, flags, fd, off) },
    }
}

/// The real `munmap`.
///
/// # Safety
/// As `munmap(2)`.
pub unsafe fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    match MUNMAP.get() {
        // SAFETY: glibc's `int munmap(void *, size_t)`.
        Some(a) => unsafe { as_fn::<MunmapFn>(a)(addr, len) },
        // SAFETY: as above, through the system call.
        None => sys_int(unsafe { libc::syscall(libc::SYS_munmap, addr, len) }),
    }
}

/// The real `stat`.
///
/// # Safety
/// As `stat(2)`: `path` a C string, `buf` writable.
pub unsafe fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    match STAT.get() {
        // SAFETY: glibc's `int stat(const char *, struct stat *)`.
        Some(a) => unsafe { as_fn::<StatFn>(a)(path, buf) },
        None => {
            // SAFETY: newfstatat fills the kernel `struct stat`, which is
            // glibc's on x86-64; arguments as the caller's.
            sys_int(unsafe { libc::syscall(libc::SYS_newfstatat, libc::AT_FDCWD, path, buf, 0) })
        }
    }
}

/// The real `stat64`.
///
/// # Safety
/// As `stat(2)`.
pub unsafe fn stat64(path: *const c_char, buf: *mut libc::stat64) -> c_int {
    match STAT64.get() {
        // SAFETY: glibc's `int stat64(const char *, struct stat64 *)`.
        Some(a) => unsafe { as_fn::<Stat64Fn>(a)(path, buf) },
        // SAFETY: `struct stat64` and `struct stat` are the same on x86-64.
        None => unsafe { stat(path, buf.cast()) },
    }
}

/// The real `fstat`.
///
/// # Safety
/// As `fstat(2)`: `buf` writable.
pub unsafe fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    match FSTAT.get() {
        // SAFETY: glibc's `int fstat(int, struct stat *)`.
        Some(a) => unsafe { as_fn::<FstatFn>(a)(fd, buf) },
        // SAFETY: the fstat system call fills the same struct on x86-64.
        None => sys_int(unsafe { libc::syscall(libc::SYS_fstat, fd, buf) }),
    }
}

/// The real `fstat64`.
///
/// # Safety
/// As `fstat(2)`.
pub unsafe fn fstat64(fd: c_int, buf: *mut libc::stat64) -> c_int {
    match FSTAT64.get() {
        // SAFETY: glibc's `int fstat64(int, struct stat64 *)`.
        Some(a) => unsafe { as_fn::<Fstat64Fn>(a)(fd, buf) },
        // SAFETY: `struct stat64` and `struct stat` are the same on x86-64.
        None => unsafe { fstat(fd, buf.cast()) },
    }
}

/// The real `socket`.
pub fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    match SOCKET.get() {
        // SAFETY: glibc's `int socket(int, int, int)`; integers only.
        Some(a) => unsafe { as_fn::<SocketFn>(a)(domain, ty, protocol) },
        // SAFETY: the socket system call takes three integers.
        None => sys_int(unsafe { libc::syscall(libc::SYS_socket, domain, ty, protocol) }),
    }
}

/// `(st_dev, st_ino)` of an open file, through the real `fstat`.
pub fn file_id(fd: c_int) -> Option<(u64, u64)> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` is a writable, properly sized `struct stat`.
    let r = unsafe { fstat(fd, st.as_mut_ptr()) };
    if r != 0 {
        return None;
    }
    // SAFETY: fstat succeeded, so it filled the struct (and it started zeroed).
    let st = unsafe { st.assume_init() };
    Some((st.st_dev, st.st_ino))
}

/// Writes all of `bytes` to `fd` with the real `write` (log lines, event
/// records); false if a write failed (the rest is dropped).
pub fn write_all(fd: c_int, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is a live slice of that many bytes.
        let n = unsafe { write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}
