//! Doorbell records: 64-byte, 64-byte-aligned slots of sixteen big-endian
//! 32-bit words the device reads, packed into pages by [`DbPool`]. A
//! [`DbRec`] names each word by what it holds and stores it one way only
//! (the roles of libmlx5's `qp->db[MLX5_RCV_DBR]`, `[MLX5_SND_DBR]`,
//! `cq->dbrec[MLX5_CQ_SET_CI]`, `[MLX5_CQ_ARM_DB]`).

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use rverbs_abi::Errno;
use rverbs_provider::{BufferKind, SharedAllocator};

use super::map::{page_size, Mapping};

/// Bytes per doorbell record slot.
pub(crate) const DBREC_SIZE: usize = 64;

/// One page of doorbell slots and which of them are taken.
#[derive(Debug)]
struct DbPage {
    buf: Mapping,
    /// Bit i set: slot i is in use.
    used: Vec<u64>,
    slots: usize,
}

/// Allocator of doorbell-record slots, packed into pages (control path
/// only: allocation and release take a lock). Pages stay mapped as long
/// as the pool lives; every [`DbRec`] holds the pool.
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
                let buf = Mapping::anon(page_size())?;
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
        // SAFETY: derived from a non-null mapping pointer.
        let words = unsafe { NonNull::new_unchecked(ptr.cast::<AtomicU32>()) };
        Ok(DbRec {
            words,
            slot: Arc::new(Slot {
                addr: ptr as u64,
                owner: Owner::Pool {
                    page: pi,
                    slot,
                    pool: Arc::clone(self),
                },
            }),
        })
    }

    /// A zeroed record from `alloc` (the two words a record holds, 8
    /// bytes 8-aligned, as libmlx5 asks a parent domain's allocator), or,
    /// where it answers "use the default" or none is given, a slot of
    /// this pool.
    pub(crate) fn alloc_in(
        self: &Arc<Self>,
        alloc: Option<&SharedAllocator>,
    ) -> Result<DbRec, Errno> {
        let Some(a) = alloc else {
            return self.alloc();
        };
        match Mapping::allocated(a, USED_WORDS * 4, 8, BufferKind::DoorbellRecord)? {
            None => self.alloc(),
            Some(m) => {
                let ptr = m.as_ptr();
                // SAFETY: derived from a non-null allocation.
                let words = unsafe { NonNull::new_unchecked(ptr.cast::<AtomicU32>()) };
                Ok(DbRec {
                    words,
                    slot: Arc::new(Slot {
                        addr: ptr as u64,
                        owner: Owner::Allocated(m),
                    }),
                })
            }
        }
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

/// A slot taken from a pool; dropping the last [`DbRec`] handle returns
/// it (the pool, and so the page, lives as long as this).
#[derive(Debug)]
struct Slot {
    addr: u64,
    owner: Owner,
}

/// Where a record's bytes are.
#[derive(Debug)]
enum Owner {
    /// Slot `slot` of the pool's page `page`.
    Pool {
        page: usize,
        slot: usize,
        pool: Arc<DbPool>,
    },
    /// The program's allocator's (freed when this drops).
    Allocated(#[allow(dead_code)] Mapping),
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Owner::Pool { page, slot, pool } = &self.owner {
            pool.release(*page, *slot);
        }
    }
}

/// The words of a record that are used: the two counters of a QP, a CQ's
/// consumer index and arm word.
const USED_WORDS: usize = 2;

/// Index of the receive counter in a QP's record (`MLX5_RCV_DBR`); an
/// SRQ's counter sits there too.
const RCV: usize = 0;
/// Index of the send counter in a QP's record (`MLX5_SND_DBR`).
const SND: usize = 1;
/// Index of a CQ's consumer index (`MLX5_CQ_SET_CI`).
const SET_CI: usize = 0;
/// Index of a CQ's arm command (`MLX5_CQ_ARM_DB`).
const ARM: usize = 1;

/// A handle on one doorbell record: cheap to clone (each queue keeps its
/// own, so a store is one load of the handle and the store); the slot
/// goes back to its pool when the last handle drops.
///
/// Every store writes a whole big-endian word atomically. The ordering of
/// the stores against the WQEs or CQEs they cover is the job of the
/// barriers the callers in `hw` place before them.
#[derive(Debug, Clone)]
pub(crate) struct DbRec {
    /// The record's first word (16 words, 64-byte aligned).
    words: NonNull<AtomicU32>,
    slot: Arc<Slot>,
}

// SAFETY: the slot is exclusively ours and lives in a page the pool keeps
// mapped while `slot` holds it; access goes through atomics only.
unsafe impl Send for DbRec {}
// SAFETY: as above: `&DbRec` only exposes atomic stores and loads.
unsafe impl Sync for DbRec {}

impl DbRec {
    /// User address of the record (what the kernel is given).
    pub(crate) fn addr(&self) -> u64 {
        self.slot.addr
    }

    /// Word `I` of the record.
    #[inline(always)]
    fn word<const I: usize>(&self) -> &AtomicU32 {
        const { assert!(I < USED_WORDS) };
        // SAFETY: the record is a 64-byte pool slot, 64-aligned, or 8
        // bytes 8-aligned from an allocator, kept while `slot` (and so the
        // pool page or the allocation) lives; word I (of the first two) is
        // inside it and 4-aligned, and every access to it is atomic.
        unsafe { self.words.add(I).as_ref() }
    }

    /// Stores a QP's (or SRQ's) receive counter: its low 16 bits, Relaxed
    /// (the caller ordered the WQEs before it: `barrier::to_device`).
    #[inline(always)]
    pub(crate) fn set_recv(&self, counter: u32) {
        self.word::<RCV>()
            .store((counter & 0xffff).to_be(), Ordering::Relaxed);
    }

    /// Stores a QP's send counter (in basic blocks): its low 16 bits,
    /// Relaxed (the caller ordered the WQEs before it).
    #[inline(always)]
    pub(crate) fn set_send(&self, counter: u32) {
        self.word::<SND>()
            .store((counter & 0xffff).to_be(), Ordering::Relaxed);
    }

    /// Zeroes a QP's counters (RESET: the ring starts over), Release.
    pub(crate) fn reset_recv(&self) {
        self.word::<RCV>().store(0, Ordering::Release);
    }

    /// Zeroes a QP's send counter (RESET), Release.
    pub(crate) fn reset_send(&self) {
        self.word::<SND>().store(0, Ordering::Release);
    }

    /// Stores a CQ's consumer index (24 bits), Release.
    #[inline(always)]
    pub(crate) fn set_ci(&self, ci: u32) {
        self.word::<SET_CI>()
            .store((ci & 0xFF_FFFF).to_be(), Ordering::Release);
    }

    /// The consumer index last stored by [`DbRec::set_ci`].
    pub(crate) fn ci(&self) -> u32 {
        u32::from_be(self.word::<SET_CI>().load(Ordering::Relaxed)) & 0xFF_FFFF
    }

    /// Stores a CQ's arm command word, Release.
    pub(crate) fn set_arm(&self, v: u32) {
        self.word::<ARM>().store(v.to_be(), Ordering::Release);
    }

    /// Word `i` (0 or 1) as the device reads it, in host order (tests).
    #[cfg(test)]
    pub(crate) fn load(&self, i: usize) -> u32 {
        match i {
            0 => u32::from_be(self.word::<0>().load(Ordering::Acquire)),
            _ => u32::from_be(self.word::<1>().load(Ordering::Acquire)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        recs[3].set_send(7);
        assert_eq!(recs[3].load(1), 7);
        let a3 = recs[3].addr();
        drop(recs);
        assert_eq!(pool.in_use(), 0);
        // A released slot comes back zeroed.
        let mut again = Vec::new();
        for _ in 0..4 {
            again.push(pool.alloc().unwrap());
        }
        assert_eq!(again[3].addr(), a3);
        assert_eq!(again[3].load(1), 0);
        // A clone keeps the slot.
        let c = again[0].clone();
        drop(again);
        assert_eq!(pool.in_use(), 1);
        drop(c);
        assert_eq!(pool.in_use(), 0);
    }

    #[test]
    fn named_stores() {
        let pool = DbPool::new();
        let r = pool.alloc().unwrap();
        r.set_recv(0x1_2345);
        r.set_send(0x6_789a);
        assert_eq!((r.load(0), r.load(1)), (0x2345, 0x789a));
        r.reset_recv();
        r.reset_send();
        assert_eq!((r.load(0), r.load(1)), (0, 0));
        r.set_ci(0x1ab_cdef);
        assert_eq!(r.ci(), 0xab_cdef);
        r.set_arm(0x1234_5678);
        assert_eq!(r.load(1), 0x1234_5678);
    }
}
