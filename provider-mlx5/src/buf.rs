//! Memory the device reads and writes: page-aligned, zeroed queue buffers
//! and 64-byte doorbell records, allocated by us and handed to the kernel
//! (which pins them) by address.

use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use rverbs_abi::Errno;

/// The system page size (queue buffers and doorbell pages are multiples).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n <= 0 {
        4096
    } else {
        n as usize
    }
}

/// Page-aligned, zeroed anonymous memory, excluded from `fork()` children
/// (the kernel pins it for the device; a copy-on-write fault in the
/// parent would move the parent's pages away from the pinned ones).
/// Unmapped on drop.
#[derive(Debug)]
pub(crate) struct Buf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: `Buf` owns its mapping exclusively; the raw pointer is only an
// address. Concurrent access to the bytes is the users' business (they
// go through atomics or `&mut`).
unsafe impl Send for Buf {}
// SAFETY: as above; `&Buf` only hands out the address.
unsafe impl Sync for Buf {}

impl Buf {
    /// Maps `len` bytes (rounded up to whole pages; at least one page).
    pub(crate) fn new(len: usize) -> Result<Buf, Errno> {
        let page = page_size();
        let len = len.max(1).checked_add(page - 1).ok_or(Errno::ENOMEM)? & !(page - 1);
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choosing; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let buf = Buf {
            // SAFETY: mmap succeeded, so `p` is not null.
            ptr: unsafe { NonNull::new_unchecked(p.cast()) },
            len,
        };
        // SAFETY: the range is exactly our fresh mapping.
        if unsafe { libc::madvise(p, len, libc::MADV_DONTFORK) } != 0 {
            return Err(Errno::last());
        }
        Ok(buf)
    }

    /// User address of the first byte (what the kernel is given).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Pointer to the first byte.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Mapped length in bytes (whole pages).
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        // SAFETY: we own this mapping and nothing refers to it any more
        // (holders of pointers into it keep the `Buf` alive).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Bytes per doorbell record slot.
pub(crate) const DBREC_SIZE: usize = 64;

/// One page of doorbell slots and which of them are taken.
#[derive(Debug)]
struct DbPage {
    buf: Buf,
    /// Bit i set: slot i is in use.
    used: Vec<u64>,
    slots: usize,
}

/// Allocator of doorbell-record slots, packed into pages (control path
/// only: allocation and release take a lock).
#[derive(Debug, Default)]
pub(crate) struct DbPool {
    pages: Mutex<Vec<DbPage>>,
}

impl DbPool {
    /// An empty pool.
    pub(crate) fn new() -> Arc<DbPool> {
        Arc::new(DbPool::default())
    }

    /// Hands out a zeroed slot.
    pub(crate) fn alloc(self: &Arc<Self>) -> Result<DbRec, Errno> {
        let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        let found = pages.iter().enumerate().find_map(|(pi, p)| {
            (0..p.slots)
                .find(|&s| p.used[s / 64] & (1 << (s % 64)) == 0)
                .map(|s| (pi, s))
        });
        let (pi, slot) = match found {
            Some(x) => x,
            None => {
                let buf = Buf::new(page_size())?;
                let slots = buf.len() / DBREC_SIZE;
                pages.push(DbPage {
                    buf,
                    used: vec![0; slots.div_ceil(64)],
                    slots,
                });
                (pages.len() - 1, 0)
            }
        };
        let page = &mut pages[pi];
        page.used[slot / 64] |= 1 << (slot % 64);
        // SAFETY: slot < slots, so the slot lies inside the page's mapping.
        let ptr = unsafe { page.buf.as_ptr().add(slot * DBREC_SIZE) };
        // SAFETY: the slot is ours now (marked used) and nobody else
        // touches it; zero it (a released slot may hold old values).
        unsafe { std::ptr::write_bytes(ptr, 0, DBREC_SIZE) };
        Ok(DbRec {
            // SAFETY: derived from a non-null mapping pointer.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            page: pi,
            slot,
            pool: Arc::clone(self),
        })
    }

    fn release(&self, page: usize, slot: usize) {
        let mut pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pages.get_mut(page) {
            p.used[slot / 64] &= !(1 << (slot % 64));
        }
    }

    /// Slots in use (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn in_use(&self) -> usize {
        let pages = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        pages
            .iter()
            .map(|p| {
                p.used
                    .iter()
                    .map(|w| w.count_ones() as usize)
                    .sum::<usize>()
            })
            .sum()
    }
}

/// One 64-byte, 64-byte-aligned doorbell record: sixteen 32-bit words the
/// device reads (values stored big-endian: `w.store(v.to_be(), Release)`).
/// Dropping it returns the slot to its pool.
#[derive(Debug)]
pub(crate) struct DbRec {
    ptr: NonNull<u8>,
    page: usize,
    slot: usize,
    pool: Arc<DbPool>,
}

// SAFETY: the slot is exclusively ours and lives in a page the pool keeps
// mapped while we hold the Arc; access goes through atomics.
unsafe impl Send for DbRec {}
// SAFETY: as above: `&DbRec` only exposes atomics and the address.
unsafe impl Sync for DbRec {}

impl DbRec {
    /// User address of the record (what the kernel is given).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Word `i` (0..16) of the record.
    ///
    /// # Panics
    /// If `i >= 16` (a provider bug).
    pub(crate) fn word(&self, i: usize) -> &AtomicU32 {
        assert!(i < DBREC_SIZE / 4, "doorbell word {i} out of range");
        // SAFETY: the record is 64 bytes, 64-aligned, mapped while `self`
        // (and so the pool page) lives; word i is inside it and 4-aligned.
        unsafe { &*self.ptr.as_ptr().add(i * 4).cast::<AtomicU32>() }
    }
}

impl Drop for DbRec {
    fn drop(&mut self) {
        self.pool.release(self.page, self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn buf_is_page_aligned_and_zeroed() {
        let b = Buf::new(100).unwrap();
        assert_eq!(b.addr() as usize % page_size(), 0);
        assert_eq!(b.len(), page_size());
        // SAFETY: the buffer is `len` bytes long and initialised (zeroed).
        let s = unsafe { std::slice::from_raw_parts(b.as_ptr(), b.len()) };
        assert!(s.iter().all(|&x| x == 0));
        let b2 = Buf::new(page_size() + 1).unwrap();
        assert_eq!(b2.len(), 2 * page_size());
    }

    #[test]
    fn dbrec_pool_packs_and_reuses() {
        let pool = DbPool::new();
        let per_page = page_size() / DBREC_SIZE;
        let recs: Vec<DbRec> = (0..per_page + 1).map(|_| pool.alloc().unwrap()).collect();
        assert_eq!(pool.in_use(), per_page + 1);
        // Distinct, 64-byte aligned, the first page's slots contiguous.
        for (i, r) in recs.iter().enumerate().take(per_page) {
            assert_eq!(r.addr() % 64, 0);
            assert_eq!(r.addr(), recs[0].addr() + (i * DBREC_SIZE) as u64);
        }
        assert_ne!(
            recs[per_page].addr() & !(page_size() as u64 - 1),
            recs[0].addr()
        );
        recs[3].word(1).store(7u32.to_be(), Ordering::Release);
        let a3 = recs[3].addr();
        drop(recs);
        assert_eq!(pool.in_use(), 0);
        // A released slot comes back zeroed.
        let mut again = Vec::new();
        for _ in 0..4 {
            again.push(pool.alloc().unwrap());
        }
        assert_eq!(again[3].addr(), a3);
        assert_eq!(again[3].word(1).load(Ordering::Acquire), 0);
    }
}
