//! A mapped rxe ring: the shared header (`struct rxe_queue_buf`) and its
//! element array, with the index protocol the kernel follows.
//!
//! Indices are stored already masked. A ring of `mask + 1` slots holds at most
//! `mask` elements: it is empty when producer == consumer and full when
//! `(producer + 1) & mask == consumer`. The producer side writes an element and
//! then publishes it with a release store of the producer index; the consumer
//! reads the producer index with acquire before reading elements and hands
//! slots back with a release store of the consumer index. The kernel is the
//! other side of every ring and uses the same protocol.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use rverbs_abi::rxe::{MmInfo, QueueBuf, QUEUE_DATA_OFFSET};
use rverbs_abi::Errno;

const PRODUCER_OFFSET: usize = std::mem::offset_of!(QueueBuf, producer_index);
const CONSUMER_OFFSET: usize = std::mem::offset_of!(QueueBuf, consumer_index);

/// One mapped ring. Unmapped on drop.
#[derive(Debug)]
pub struct Queue {
    base: NonNull<u8>,
    len: usize,
    mask: u32,
    log2_elem_size: u32,
}

// SAFETY: the mapping is plain shared memory; all index accesses are atomic,
// and element access is serialised by the `&mut` receivers of the queue types.
unsafe impl Send for Queue {}
// SAFETY: `&Queue` only permits atomic index loads.
unsafe impl Sync for Queue {}

impl Queue {
    /// Maps the ring the kernel described in `mi` on the command fd `fd`,
    /// and checks that its header describes a ring that fits the mapping.
    pub fn map(fd: BorrowedFd<'_>, mi: &MmInfo) -> Result<Self, Errno> {
        let len = mi.size as usize;
        if len < QUEUE_DATA_OFFSET {
            return Err(Errno::EINVAL);
        }
        let offset = libc::off_t::try_from(mi.offset).map_err(|_| Errno::EINVAL)?;
        // SAFETY: a fresh shared mapping of the kernel's queue object; no
        // existing Rust memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(Errno::EINVAL)?;
        // The header fields are written once by the kernel at creation time;
        // read them once and validate them against the mapping size.
        // SAFETY: the mapping is at least QUEUE_DATA_OFFSET bytes and page aligned.
        let (log2, mask) = unsafe {
            let hdr = base.as_ptr().cast::<QueueBuf>();
            (
                std::ptr::read_volatile(&raw const (*hdr).log2_elem_size),
                std::ptr::read_volatile(&raw const (*hdr).index_mask),
            )
        };
        let q = Queue {
            base,
            len,
            mask,
            log2_elem_size: log2,
        };
        let slots = (mask as u64) + 1;
        let fits = log2 < 16
            && slots.is_power_of_two()
            && (slots << log2) + QUEUE_DATA_OFFSET as u64 <= len as u64;
        if !fits {
            return Err(Errno::EPROTO); // q unmaps on drop
        }
        Ok(q)
    }

    fn index(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: offset is one of the two index offsets inside the header,
        // 4-byte aligned within a page-aligned mapping that outlives `&self`.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    /// The shared producer index.
    #[inline]
    pub fn producer(&self) -> &AtomicU32 {
        self.index(PRODUCER_OFFSET)
    }

    /// The shared consumer index.
    #[inline]
    pub fn consumer(&self) -> &AtomicU32 {
        self.index(CONSUMER_OFFSET)
    }

    /// `index_mask`: slots - 1, which is also the ring's capacity.
    #[inline]
    pub fn mask(&self) -> u32 {
        self.mask
    }

    /// Bytes per element.
    #[inline]
    pub fn elem_size(&self) -> usize {
        1 << self.log2_elem_size
    }

    /// Address of the element at `index` (masked here, so always inside the
    /// mapping).
    #[inline]
    pub fn slot(&self, index: u32) -> *mut u8 {
        let off = QUEUE_DATA_OFFSET + (((index & self.mask) as usize) << self.log2_elem_size);
        // SAFETY: `map` checked that every masked slot lies inside the mapping.
        unsafe { self.base.as_ptr().add(off) }
    }

    /// Number of elements between consumer and producer right now.
    pub fn fill(&self) -> u32 {
        let p = self.producer().load(Ordering::Acquire);
        let c = self.consumer().load(Ordering::Acquire);
        p.wrapping_sub(c) & self.mask
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `map`, and no
        // reference into it outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}
