//! Memory a kernel driver hands out through the command fd: rings and
//! doorbell pages the kernel allocated (EFA's CQ and receive rings, its
//! low-latency send queue and doorbells), mapped by the key a create
//! command answered. [`DeviceMapping`] is that `mmap`, unmapped on drop,
//! and the only way to touch its bytes: the device reads and writes them
//! concurrently, so no Rust reference to them is ever made, and every
//! access is bounds-checked (an offset past the mapping does nothing and
//! says so) and done with the ordering its use needs.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};

use rverbs_abi::Errno;

/// The system page size (what mappings are multiples of).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// What a mapping is for: the protection it is mapped with, and so the
/// accesses [`DeviceMapping`] allows on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read only (a ring the device writes: completion entries).
    Read,
    /// Written by us, read by the device (descriptor rings, doorbells).
    Write,
}

/// `len` bytes of the command fd at the kernel's `key`, mapped shared.
#[derive(Debug)]
pub struct DeviceMapping {
    ptr: NonNull<u8>,
    len: usize,
    /// What it was mapped for: reads only on a read mapping, writes only
    /// on a write mapping (anything else would fault).
    access: Access,
}

// SAFETY: the mapping is owned exclusively; the pointer is only an
// address, and every access to the bytes goes through the methods below,
// which use raw pointers and atomics (the device is a concurrent party
// anyway).
unsafe impl Send for DeviceMapping {}
// SAFETY: as above; `&DeviceMapping` reads through raw pointers and
// atomics only, and the writers take `&self` knowing the device shares
// the bytes (the callers serialise their own writes).
unsafe impl Sync for DeviceMapping {}

impl DeviceMapping {
    /// Maps `len` bytes (nonzero) of `fd` at offset `key` for `access`.
    pub fn map(fd: BorrowedFd<'_>, key: u64, len: usize, access: Access) -> Result<Self, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let offset = libc::off_t::try_from(key).map_err(|_| Errno::EINVAL)?;
        let prot = match access {
            Access::Read => libc::PROT_READ,
            Access::Write => libc::PROT_WRITE,
        };
        // SAFETY: a new mapping at an address of the kernel's choosing (no
        // MAP_FIXED): no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let ptr = NonNull::new(p.cast()).ok_or(Errno::ENOMEM)?;
        Ok(DeviceMapping { ptr, len, access })
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: [`DeviceMapping::map`]
    /// refuses a zero length).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The user address of the first byte (what a tool inspecting the
    /// process, or a log, names it by).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// A pointer to `[off, off + n)`, if it lies in the mapping and the
    /// mapping is for `access`.
    fn at(&self, off: usize, n: usize, access: Access) -> Option<*mut u8> {
        if self.access != access {
            return None;
        }
        let end = off.checked_add(n)?;
        // `add` stays in the mapping: end <= len.
        (end <= self.len).then(|| self.ptr.as_ptr().wrapping_add(off))
    }

    /// The byte at `off`, loaded with acquire ordering (a phase or
    /// ownership byte the device writes last); `None` past the end or on
    /// a write mapping.
    #[inline]
    pub fn load_u8_acquire(&self, off: usize) -> Option<u8> {
        let p = self.at(off, 1, Access::Read)?;
        // SAFETY: in the mapping (checked); an AtomicU8 has no alignment
        // beyond 1; the device writes the byte concurrently, hence the
        // atomic load.
        Some(unsafe { (*p.cast::<AtomicU8>()).load(Ordering::Acquire) })
    }

    /// Copies `out.len()` bytes at `off` out (after a
    /// [`DeviceMapping::load_u8_acquire`] that found them complete);
    /// `false` (nothing read) past the end or on a write mapping.
    #[inline]
    pub fn read(&self, off: usize, out: &mut [u8]) -> bool {
        let Some(p) = self.at(off, out.len(), Access::Read) else {
            return false;
        };
        // SAFETY: `[off, off + len)` is in the mapping (checked) and `out`
        // is ours: distinct memory; a byte the device changes meanwhile is
        // merely a stale value (u8 has no invalid bit patterns).
        unsafe { std::ptr::copy_nonoverlapping(p.cast_const(), out.as_mut_ptr(), out.len()) };
        true
    }

    /// Copies `out.len()` bytes at `off` out if the byte `flag_at` bytes
    /// into them, loaded first with acquire ordering (the phase or
    /// ownership byte the device writes last), passes `ready`: one bounds
    /// check for both. `false` (nothing read) if it does not, past the
    /// end, with `flag_at` outside the bytes, or on a write mapping.
    #[inline]
    pub fn read_published(
        &self,
        off: usize,
        out: &mut [u8],
        flag_at: usize,
        ready: impl FnOnce(u8) -> bool,
    ) -> bool {
        let Some(p) = self.at(off, out.len(), Access::Read) else {
            return false;
        };
        if flag_at >= out.len() {
            return false;
        }
        // Inside the checked range.
        let flag = p.wrapping_add(flag_at).cast::<AtomicU8>();
        // SAFETY: in the mapping (checked above); an AtomicU8 has no
        // alignment beyond 1; the device writes the byte concurrently,
        // hence the atomic load.
        if !ready(unsafe { (*flag).load(Ordering::Acquire) }) {
            return false;
        }
        // SAFETY: `[off, off + len)` is in the mapping (checked) and `out`
        // is ours: distinct memory; a byte the device changes meanwhile is
        // merely a stale value (u8 has no invalid bit patterns).
        unsafe { std::ptr::copy_nonoverlapping(p.cast_const(), out.as_mut_ptr(), out.len()) };
        true
    }

    /// Copies `src` to `off` (a descriptor into a host ring); `false`
    /// (nothing written) past the end or on a read mapping. The caller
    /// orders it before the doorbell ([`DeviceMapping::doorbell`] does).
    #[inline]
    pub fn write(&self, off: usize, src: &[u8]) -> bool {
        let Some(p) = self.at(off, src.len(), Access::Write) else {
            return false;
        };
        // SAFETY: in the mapping (checked), distinct from `src`; no Rust
        // reference covers the mapping's bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        true
    }

    /// Writes a 64-byte descriptor to device memory mapped write-combined
    /// (EFA's low-latency queue) at `off` (64-byte aligned), as eight
    /// 8-byte volatile stores, so the compiler neither splits, merges nor
    /// drops them; `false` past the end or misaligned. Call
    /// [`DeviceMapping::doorbell`] after the batch: it flushes the
    /// write-combining buffers first. `false` on a read mapping too.
    #[inline]
    pub fn write_desc64(&self, off: usize, src: &[u8; 64]) -> bool {
        let Some(p) = self.at(off, 64, Access::Write) else {
            return false;
        };
        if (p as usize) % 64 != 0 {
            return false;
        }
        for (i, chunk) in src.chunks_exact(8).enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            // Inside the 64 checked bytes.
            let word = p.wrapping_add(i * 8).cast::<u64>();
            // SAFETY: `word` is an 8-byte aligned word inside the 64
            // checked bytes (p is 64-byte aligned).
            unsafe { std::ptr::write_volatile(word, u64::from_ne_bytes(w)) };
        }
        true
    }

    /// Rings a 32-bit doorbell at `off` (4-byte aligned) with `value`:
    /// everything written before (host rings, write-combined descriptors)
    /// reaches the device first. `false` past the end, misaligned or on a
    /// read mapping.
    #[inline]
    pub fn doorbell(&self, off: usize, value: u32) -> bool {
        let Some(p) = self.at(off, 4, Access::Write) else {
            return false;
        };
        if (p as usize) % 4 != 0 {
            return false;
        }
        flush_write_combining();
        fence(Ordering::Release);
        // SAFETY: an aligned 32-bit word in the mapping (checked); the
        // device reads it concurrently, hence the atomic store.
        unsafe { (*p.cast::<AtomicU32>()).store(value, Ordering::Release) };
        true
    }
}

/// Drains the CPU's write-combining buffers, so descriptors written to
/// write-combined device memory are out before the doorbell (x86's
/// `sfence`; a full fence elsewhere).
#[inline]
fn flush_write_combining() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` has no preconditions (SSE is baseline on x86-64).
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    fence(Ordering::SeqCst);
}

impl Drop for DeviceMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping `map` made, unmapped once; no reference into
        // it exists (accesses go through `&self` methods that end before
        // drop).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};

    fn memfd(len: usize) -> OwnedFd {
        // SAFETY: memfd_create with a valid name.
        let fd = unsafe { libc::memfd_create(c"map-test".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: `fd` is a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: ftruncate on our memfd.
        let r = unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) };
        assert_eq!(r, 0);
        fd
    }

    #[test]
    fn accesses_are_bounded() {
        let fd = memfd(8192);
        let w = DeviceMapping::map(fd.as_fd(), 4096, 4096, Access::Write).unwrap();
        let r = DeviceMapping::map(fd.as_fd(), 4096, 4096, Access::Read).unwrap();
        // Each mapping refuses what its protection would fault on.
        assert!(!r.write(0, b"x"));
        assert!(!r.doorbell(0, 1));
        assert!(!r.write_desc64(0, &[0; 64]));
        let mut one = [0u8; 1];
        assert!(!w.read(0, &mut one));
        assert_eq!(w.load_u8_acquire(0), None);
        assert!(w.write(10, b"abc"));
        assert!(!w.write(4095, b"ab"), "past the end");
        let mut out = [0u8; 3];
        assert!(r.read(10, &mut out));
        assert_eq!(&out, b"abc");
        assert_eq!(r.load_u8_acquire(11), Some(b'b'));
        assert_eq!(r.load_u8_acquire(4096), None);
        assert!(w.doorbell(64, 7));
        assert!(!w.doorbell(66, 7), "misaligned");
        assert!(!w.doorbell(4094, 7), "past the end");
        let mut d = [0u8; 64];
        d[0] = 1;
        d[63] = 9;
        assert!(w.write_desc64(128, &d));
        assert!(!w.write_desc64(130, &d), "misaligned");
        assert!(!w.write_desc64(4096 - 32, &d), "past the end");
        let mut back = [0u8; 64];
        assert!(r.read(128, &mut back));
        assert_eq!(back, d);
        let mut db = [0u8; 4];
        assert!(r.read(64, &mut db));
        assert_eq!(u32::from_ne_bytes(db), 7);
        assert!(DeviceMapping::map(fd.as_fd(), 0, 0, Access::Read).is_err());
    }

    #[test]
    fn a_published_read_copies_only_once_its_flag_says_so() {
        let fd = memfd(4096);
        let w = DeviceMapping::map(fd.as_fd(), 0, 4096, Access::Write).unwrap();
        let r = DeviceMapping::map(fd.as_fd(), 0, 4096, Access::Read).unwrap();
        assert!(w.write(32, &[1, 2, 3, 0x81]));
        let mut out = [0u8; 4];
        assert!(!r.read_published(32, &mut out, 3, |f| f & 1 == 0));
        assert_eq!(out, [0; 4], "nothing copied while the flag says no");
        let mut seen = 0;
        assert!(r.read_published(32, &mut out, 3, |f| {
            seen = f;
            f & 1 == 1
        }));
        assert_eq!((seen, out), (0x81, [1, 2, 3, 0x81]));
        assert!(!r.read_published(32, &mut out, 4, |_| true), "flag outside");
        assert!(
            !r.read_published(4094, &mut out, 0, |_| true),
            "past the end"
        );
        assert!(
            !w.read_published(32, &mut out, 0, |_| true),
            "write mapping"
        );
    }
}
