//! Access to "user memory" (the application's buffers named in commands),
//! with the kernel's `EFAULT` for ranges that are not mapped.
//!
//! The kernel copies command buffers with `copy_from_user`/`copy_to_user`,
//! which fail with `EFAULT` instead of crashing. The emulator runs in the
//! same address space, so it checks a range with `msync(MS_ASYNC)` (which
//! only validates that every page of the range is mapped: `ENOMEM`
//! otherwise) before touching it. A range that is mapped but not readable
//! or writable would still fault, as a plain `memcpy` would.

use rverbs_abi::Errno;
use zerocopy::{FromBytes, Immutable, IntoBytes};

/// Lowest address past the x86-64 user address space (47-bit).
const USER_END: u64 = 1 << 47;
/// Page size used for the range check.
const PAGE: u64 = 4096;

/// Whether `[addr, addr + len)` lies in user space and is entirely mapped.
/// An empty range is fine anywhere except at address 0.
pub fn mapped(addr: u64, len: usize) -> bool {
    let Some(end) = addr.checked_add(len as u64) else {
        return false;
    };
    if addr == 0 || end > USER_END {
        return false;
    }
    if len == 0 {
        return true;
    }
    let start = addr & !(PAGE - 1);
    let span = end - start;
    // SAFETY: msync with MS_ASYNC neither reads nor writes memory; it only
    // validates that the (page-aligned) range is mapped.
    let r = unsafe { libc::msync(start as *mut libc::c_void, span as usize, libc::MS_ASYNC) };
    r == 0
}

/// `Ok` if the range is mapped, `EFAULT` otherwise.
pub fn check(addr: u64, len: usize) -> Result<(), Errno> {
    if mapped(addr, len) {
        Ok(())
    } else {
        Err(Errno::EFAULT)
    }
}

/// A `T` from the start of `bytes`, zero-extended when `bytes` is shorter
/// (the kernel's `min(inlen, sizeof)` copies of driver data).
pub fn read_padded<T: FromBytes + IntoBytes>(bytes: &[u8]) -> T {
    let mut v = T::new_zeroed();
    let n = bytes.len().min(size_of::<T>());
    v.as_mut_bytes()[..n].copy_from_slice(&bytes[..n]);
    v
}

/// Whether every byte of `bytes` is zero.
pub fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// A user buffer the dispatcher writes a response into: validated (mapped)
/// before the command runs, so writes cannot fail afterwards.
#[derive(Debug, Clone, Copy, Default)]
pub struct UserBuf {
    /// User address (0 with `len` 0: no buffer).
    pub addr: u64,
    /// Bytes the caller provided.
    pub len: usize,
}

impl UserBuf {
    /// Copies `min(len, size_of::<T>())` bytes of `v`; with `zero_fill`,
    /// clears the rest of the buffer (the kernel does so for core responses).
    pub fn put<T: IntoBytes + Immutable>(&self, v: &T, zero_fill: bool) {
        self.put_bytes(v.as_bytes(), zero_fill);
    }

    /// [`UserBuf::put`] for raw bytes.
    pub fn put_bytes(&self, src: &[u8], zero_fill: bool) {
        if self.len == 0 {
            return;
        }
        let n = self.len.min(src.len());
        // SAFETY: the range [addr, addr + len) was validated as mapped user
        // memory before the command ran (the application passed it as a
        // response buffer); `n <= len`, and the source is a distinct Rust
        // value, so the ranges do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.addr as *mut u8, n);
            if zero_fill && n < self.len {
                std::ptr::write_bytes((self.addr as *mut u8).add(n), 0, self.len - n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_ranges() {
        let v = [0u8; 100];
        assert!(mapped(v.as_ptr() as u64, v.len()));
        assert!(!mapped(0, 8));
        assert!(!mapped(8, 8), "the zero page is never mapped");
        assert!(!mapped(u64::MAX - 4, 8));
        assert!(!mapped(USER_END, 1));
    }

    #[test]
    fn padded_reads() {
        let v: u64 = read_padded(&[1, 2]);
        assert_eq!(v, u64::from_ne_bytes([1, 2, 0, 0, 0, 0, 0, 0]));
        let w: u32 = read_padded(&[1, 0, 0, 0, 9, 9]);
        assert_eq!(w, 1);
    }
}
