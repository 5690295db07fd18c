//! Reading and writing the application's memory: doorbell records, user
//! buffers and work queue rings.

use std::sync::atomic::{fence, AtomicU32, Ordering};

use crate::emu::WorkQueue;

/// Reads a big-endian doorbell word with an atomic load and orders later
/// reads (of the WQEs it announces) after it.
pub(super) fn read_dbrec(addr: u64) -> u32 {
    let v = if addr % 4 == 0 {
        // SAFETY: `addr` is an aligned doorbell record of a live object
        // (its range was checked at creation; the caller holds the EMU lock
        // and saw the object); the application writes it concurrently,
        // hence the atomic access.
        unsafe { (*(addr as *const AtomicU32)).load(Ordering::Acquire) }
    } else {
        // SAFETY: as above, for a record the application misaligned
        // (libmlx5 never does); a torn read only confuses that application.
        unsafe { std::ptr::read_unaligned(addr as *const u32) }
    };
    fence(Ordering::Acquire);
    u32::from_be(v)
}

/// Copies `len` user bytes at `addr`.
pub(super) fn read_user(addr: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    if len > 0 {
        // SAFETY: the caller checked the range lies in a live queue buffer
        // or registered memory region of this process.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), len) };
    }
    v
}

/// Writes `bytes` to user memory at `addr`.
pub(super) fn write_user(addr: u64, bytes: &[u8]) {
    if !bytes.is_empty() {
        // SAFETY: the caller checked the range lies in a live registered
        // memory region of this process with local write access.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
    }
}

/// Reads `len` bytes of a work queue from byte offset `off`, wrapping at
/// its end.
pub(super) fn read_ring(wq: &WorkQueue, off: u64, len: usize) -> Vec<u8> {
    let size = wq.bytes();
    let mut out = Vec::with_capacity(len);
    let mut pos = off % size;
    let mut left = len as u64;
    while left > 0 {
        let n = left.min(size - pos);
        out.extend_from_slice(&read_user(wq.buf + pos, n as usize));
        left -= n;
        pos = 0;
    }
    out
}
