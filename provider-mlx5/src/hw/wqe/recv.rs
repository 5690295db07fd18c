//! The receive side of the queue buffer: a QP's receive ring
//! ([`RecvRing`]) and an SRQ's linked WQEs ([`SrqRing`]), written as the
//! send ring is (raw pointers into the device's memory, indices masked).

use super::*;

/// A QP's receive ring: `wqe_cnt` WQEs of `1 << wqe_shift` bytes, each a
/// list of at most `max_gs` data segments, at the start of the queue
/// buffer (kept mapped by the ring), and the queue's `wr_id`s.
#[derive(Debug)]
pub(crate) struct RecvRing {
    /// First WQE.
    start: *mut u8,
    /// WQEs minus one.
    mask: u32,
    /// log2 of the WQE size.
    wqe_shift: u32,
    /// Data segments per WQE.
    max_gs: u32,
    /// `book`'s `wrid` (at least `mask + 1` entries).
    wrid: *const AtomicU64,
    _book: Arc<RqShared>,
    _mem: Arc<Mapping>,
}

// SAFETY: as for `SendRing`: the pointers point into `_mem` and `_book`;
// only the one poster writes through them.
unsafe impl Send for RecvRing {}
// SAFETY: as above.
unsafe impl Sync for RecvRing {}

impl RecvRing {
    /// The ring of `wqe_cnt` WQEs (a power of two) of `1 << wqe_shift`
    /// bytes holding `max_gs` segments each, at the start of `mem`. `None`
    /// if any of it does not fit.
    pub(crate) fn new(
        mem: &Arc<Mapping>,
        wqe_cnt: u32,
        wqe_shift: u32,
        max_gs: u32,
        book: &Arc<RqShared>,
    ) -> Option<RecvRing> {
        let bytes = (wqe_cnt as usize).checked_shl(wqe_shift)?;
        if !wqe_cnt.is_power_of_two()
            || !(4..=20).contains(&wqe_shift)
            || bytes > mem.len()
            || (max_gs as usize).checked_mul(SEG)? > 1 << wqe_shift
            || book.slots().len() < wqe_cnt as usize
        {
            return None;
        }
        Some(RecvRing {
            start: mem.as_ptr(),
            mask: wqe_cnt - 1,
            wqe_shift,
            max_gs,
            wrid: book.slots().as_ptr(),
            _book: Arc::clone(book),
            _mem: Arc::clone(mem),
        })
    }

    /// Data segments per WQE.
    #[inline(always)]
    pub(crate) fn max_gs(&self) -> u32 {
        self.max_gs
    }

    /// Writes the WQE for producer counter `head`: a data segment per
    /// nonzero SGE of `sges`, then an invalid-lkey terminator if fewer
    /// than `max_gs`, and records `wr_id`. Writes nothing if `sges` has
    /// more than `max_gs` entries (the poster refuses those first).
    #[inline(always)]
    pub(crate) fn write(&self, head: u32, sges: &[Sge], wr_id: u64) {
        if sges.len() > self.max_gs as usize {
            return;
        }
        let idx = (head & self.mask) as usize;
        // SAFETY: `idx <= mask`, so the WQE (1 << wqe_shift bytes, room
        // for `max_gs` 16-byte entries, checked in `new`) is inside the
        // ring, 16-byte aligned, and the poster's until the doorbell
        // record covers it. At most `sges.len() <= max_gs` entries are
        // written, the terminator only when fewer. The `wr_id` slot is
        // below the array's length, which `_book` keeps alive.
        unsafe {
            let mut seg = self.start.add(idx << self.wqe_shift);
            let mut n = 0;
            let put = |seg: *mut u8, s: &Sge| {
                put_seg!(
                    seg,
                    DataSeg {
                        byte_count: U32::new(s.length),
                        lkey: U32::new(s.lkey),
                        addr: U64::new(s.addr),
                    }
                )
            };
            let end = |seg: *mut u8| {
                put_seg!(
                    seg,
                    DataSeg {
                        byte_count: U32::ZERO,
                        lkey: U32::new(prm::INVALID_LKEY),
                        addr: U64::ZERO,
                    }
                )
            };
            if let [s] = sges {
                // The common receive: one entry, no loop, no count (here
                // `max_gs >= 1`: one SGE passed the length test above).
                if s.length != 0 {
                    put(seg, s);
                    if self.max_gs > 1 {
                        end(seg.add(SEG));
                    }
                } else {
                    end(seg);
                }
            } else {
                for s in sges.iter().filter(|s| s.length != 0) {
                    put(seg, s);
                    seg = seg.add(SEG);
                    n += 1;
                }
                if n < self.max_gs {
                    end(seg);
                }
            }
            (*self.wrid.add(idx)).store(wr_id, Ordering::Relaxed);
        }
    }
}

/// An SRQ's WQEs: `max` WQEs of `1 << wqe_shift` bytes in their own
/// buffer (kept mapped), each a next segment linking the list, then
/// `max_gs` data segments.
#[derive(Debug)]
pub(crate) struct SrqRing {
    /// First WQE.
    base: NonNull<u8>,
    /// WQEs minus one.
    mask: u32,
    wqe_shift: u32,
    max_gs: u32,
    mem: Arc<Mapping>,
}

// SAFETY: `base` points into `mem`, owned through the Arc; writes take
// `&mut self`.
unsafe impl Send for SrqRing {}
// SAFETY: `&self` methods only read the next-segment links, which only
// the `&mut self` owner writes.
unsafe impl Sync for SrqRing {}

impl SrqRing {
    /// `max` WQEs (a power of two) of `1 << wqe_shift` bytes with
    /// `max_gs` data segments each, in `mem`. `None` if they do not fit.
    pub(crate) fn new(mem: Arc<Mapping>, max: u32, wqe_shift: u32, max_gs: u32) -> Option<SrqRing> {
        let bytes = (max as usize).checked_shl(wqe_shift)?;
        let wqe = (max_gs as usize)
            .checked_mul(SEG)?
            .checked_add(size_of::<SrqNextSeg>())?;
        if !max.is_power_of_two()
            || !(4..=20).contains(&wqe_shift)
            || bytes > mem.len()
            || wqe > 1 << wqe_shift
        {
            return None;
        }
        Some(SrqRing {
            base: NonNull::new(mem.as_ptr())?,
            mask: max - 1,
            wqe_shift,
            max_gs,
            mem,
        })
    }

    /// The buffer (what the kernel is given; what keeps it mapped).
    pub(crate) fn mem(&self) -> &Arc<Mapping> {
        &self.mem
    }

    /// WQE `i` (masked to the buffer).
    #[inline(always)]
    fn wqe(&self, i: u32) -> *mut u8 {
        // SAFETY: `i & mask` is below `max`, and the buffer holds
        // `max << wqe_shift` bytes.
        unsafe {
            self.base
                .as_ptr()
                .add(((i & self.mask) as usize) << self.wqe_shift)
        }
    }

    /// Links WQE `i` to `next`.
    #[inline]
    pub(crate) fn set_next(&mut self, i: u32, next: u32) {
        let p = self.wqe(i).cast::<SrqNextSeg>();
        // SAFETY: the next segment starts WQE i, inside the buffer and
        // aligned (WQEs are at least 16 bytes, in a page-aligned buffer);
        // only its `next_wqe_index` is written, through the raw pointer.
        // We are the only writer (`&mut self`) and the device only reads
        // this field of WQEs it has been given.
        unsafe { std::ptr::addr_of_mut!((*p).next_wqe_index).write(U16::new(next as u16)) };
    }

    /// The WQE WQE `i` links to.
    #[inline]
    pub(crate) fn next(&self, i: u32) -> u32 {
        let p = self.wqe(i).cast::<SrqNextSeg>();
        // SAFETY: as in `set_next`: a field of WQE i's next segment, read
        // through the raw pointer; only we write it.
        let v = unsafe { std::ptr::addr_of!((*p).next_wqe_index).read() };
        u32::from(v.get()) & self.mask
    }

    /// Writes WQE `i`'s data segments: one per SGE of `sges` with a
    /// nonzero length, then an invalid-lkey terminator if fewer than
    /// `max_gs`. Writes nothing if `sges` has more than `max_gs` entries
    /// (the poster refuses those first).
    ///
    /// Zero-length SGEs are left out, as for a QP's receive queue
    /// ([`RecvRing::write`]): the device reads a byte count of 0 as 2 GiB,
    /// and would scatter the message there. (libmlx5's
    /// `mlx5_post_srq_recv` writes them as they are, unlike its
    /// `mlx5_post_recv`; only such WQEs differ from its bytes.)
    #[inline]
    pub(crate) fn write(&mut self, i: u32, sges: &[Sge]) {
        if sges.len() > self.max_gs as usize {
            return;
        }
        let p = self.wqe(i);
        let seg = |j: usize| {
            // SAFETY: segment j <= max_gs - 1 lies inside WQE i (its size
            // is 16 + 16 * max_gs or more, checked in `new`).
            unsafe { p.add(size_of::<SrqNextSeg>() + j * SEG) }
        };
        let mut n = 0;
        for s in sges.iter().filter(|s| s.length != 0) {
            let d = DataSeg {
                byte_count: U32::new(s.length),
                lkey: U32::new(s.lkey),
                addr: U64::new(s.addr),
            };
            // SAFETY: n < sges.len() <= max_gs, so the segment is inside
            // WQE i, at a 16-byte multiple of the page-aligned buffer;
            // only we write it, and the device reads it only after the
            // doorbell counter covers it.
            unsafe { seg(n).cast::<DataSeg>().write(d) };
            n += 1;
        }
        if n < self.max_gs as usize {
            let d = DataSeg {
                byte_count: U32::ZERO,
                lkey: U32::new(prm::INVALID_LKEY),
                addr: U64::ZERO,
            };
            // SAFETY: n < max_gs: as above.
            unsafe { seg(n).cast::<DataSeg>().write(d) };
        }
    }

    /// A copy of WQE `i`'s bytes (tests).
    #[cfg(test)]
    pub(crate) fn bytes(&self, i: u32) -> Vec<u8> {
        let off = ((i & self.mask) as usize) << self.wqe_shift;
        self.mem.read_bytes(off, 1 << self.wqe_shift)
    }
}
