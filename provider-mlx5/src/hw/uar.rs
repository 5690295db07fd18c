//! The device's doorbell registers in mapped UAR pages: the 8-byte
//! doorbell ([`Doorbell`], a CQ's arm register) and a QP's doorbell /
//! BlueFlame register ([`BlueFlame`]: the 8-byte doorbell or the copy of a
//! whole small WQE, alternating between the register's two halves).
//! libmlx5's `mmio_write64_be` and `mlx5_bf_copy`.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::barrier;
use super::dbrec::DbRec;
use super::map::Mapping;
use super::wqe::{wqe_bbs, OneBb, SendRing, SEND_WQE_BB};

/// 16-byte units in one basic block: a WQE of at most this many is one BB.
const BB_DS: u32 = SEND_WQE_BB / 16;

/// Writes `v` (already in the device's byte order) to the 8-byte UAR word
/// at `reg` as one 64-bit store.
///
/// Several threads may write the same register (CQs arm through the
/// context's one CQ doorbell from `&self`; QPs on a shared bfreg share its
/// doorbell): an atomic store can never be split into two 32-bit halves
/// that interleave with another thread's, which would hand the device a
/// doorbell made of two (a QP number from one, a counter from another).
/// Relaxed suffices: ordering against the doorbell record and the WQEs is
/// the job of the barriers around it.
///
/// # Safety
/// `reg` is 8-byte aligned and valid for writes for as long as the call
/// lasts (a mapped UAR page, or test memory), and every other access to it
/// while any thread writes it through here is atomic (the device's reads
/// are outside the program).
#[inline(always)]
unsafe fn write64(reg: *mut u64, v: u64) {
    // SAFETY: aligned and valid as the caller guarantees; all concurrent
    // accesses are atomic.
    unsafe { AtomicU64::from_ptr(reg) }.store(v, Ordering::Relaxed);
}

/// Copies the 64-byte BB at `src` to the BlueFlame half at `dst`: four
/// 16-byte stores on x86-64 (write-combined into one burst, as the eight
/// 64-bit stores elsewhere), eight 64-bit stores on other architectures.
///
/// # Safety
/// `dst` is 64-byte aligned, valid for 64 bytes of writes, and a
/// dedicated register's half: nothing but this QP (which holds `&mut` to
/// its send queue) accesses it, so the stores need not be atomic. `src`
/// is 64-byte aligned and valid for 64 bytes of reads of initialised
/// memory nobody writes meanwhile.
#[inline(always)]
unsafe fn copy_bb(dst: *mut u64, src: *const u64) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__m128i;
        let (d, s) = (dst.cast::<__m128i>(), src.cast::<__m128i>());
        for i in 0..4 {
            // SAFETY: inside both 64-byte blocks, 16-byte aligned (the
            // caller's contract); volatile, so each store is made, in
            // order, whole.
            unsafe { std::ptr::write_volatile(d.add(i), s.add(i).read()) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for i in 0..8 {
        // SAFETY: inside both 64-byte blocks, aligned (the caller's
        // contract).
        unsafe { write64(dst.add(i), src.add(i).read()) };
    }
}

/// An 8-byte doorbell register inside a mapped UAR page, which the handle
/// keeps mapped. Written only through [`Doorbell::ring`] (whole atomic
/// 64-bit stores).
#[derive(Debug, Clone)]
pub(crate) struct Doorbell {
    reg: NonNull<u64>,
    _page: Arc<Mapping>,
}

// SAFETY: the register lives in `_page`, kept mapped by the Arc; every
// write to it is an atomic 64-bit store, from any thread.
unsafe impl Send for Doorbell {}
// SAFETY: as above: `&Doorbell` only does atomic stores.
unsafe impl Sync for Doorbell {}

impl Doorbell {
    /// The register at byte `off` of `page`; `None` if it is not an
    /// aligned 8-byte word inside the page.
    pub(crate) fn new(page: &Arc<Mapping>, off: usize) -> Option<Doorbell> {
        if off % 8 != 0 || off.checked_add(8)? > page.len() {
            return None;
        }
        // SAFETY: `off + 8 <= len`: inside the mapping.
        let reg = unsafe { page.as_ptr().add(off) }.cast::<u64>();
        Some(Doorbell {
            reg: NonNull::new(reg)?,
            _page: Arc::clone(page),
        })
    }

    /// Rings it with `v` (in the device's byte order) after the doorbell
    /// record it follows: `mmio_wc_start`, one 64-bit store,
    /// `mmio_flush_writes`.
    #[inline(always)]
    pub(crate) fn ring(&self, v: u64) {
        // The doorbell record reaches memory before the UAR write.
        barrier::wc_start();
        // SAFETY: an aligned word inside the page `_page` keeps mapped
        // (checked in `new`); every write to it goes through `write64`.
        unsafe { write64(self.reg.as_ptr(), v) };
        barrier::flush_writes();
    }

    /// The register's address (tests).
    #[cfg(test)]
    pub(crate) fn addr(&self) -> usize {
        self.reg.as_ptr() as usize
    }

    /// The register's current value (tests: the page is plain memory).
    #[cfg(test)]
    pub(crate) fn load(&self) -> u64 {
        // SAFETY: as in `ring`; in tests the page is readable memory and
        // every access to the word is atomic.
        unsafe { AtomicU64::from_ptr(self.reg.as_ptr()) }.load(Ordering::Relaxed)
    }
}

/// A QP's doorbell register: where its send doorbells (8-byte or
/// BlueFlame copies) go, and which half of it the next one uses.
#[derive(Debug, Clone)]
pub(crate) struct BlueFlame {
    /// The register (UAR page base + 0x800 + k * bf_reg_size).
    reg: NonNull<u8>,
    /// Bytes of each BlueFlame half (a multiple of 64); 0 = never
    /// BlueFlame.
    #[cfg(test)]
    buf_size: u32,
    /// Whether only this QP uses the register (BlueFlame and the half
    /// toggle need it: shared registers take single 8-byte doorbells at
    /// offset 0).
    #[cfg(test)]
    dedicated: bool,
    /// The largest WQE (in 16-byte units) a BlueFlame copy may carry: a
    /// half's worth if the register is dedicated, else 0 (never).
    max_ds: u32,
    /// What flips `offset` to the other half after each doorbell:
    /// `buf_size` if the register is dedicated, else 0 (always offset 0).
    toggle: u32,
    /// Which half the next doorbell uses (0 or `buf_size`).
    offset: u32,
    _page: Arc<Mapping>,
}

// SAFETY: the register lives in `_page`, kept mapped by the Arc; writes
// to it are atomic 64-bit stores and take `&mut self`.
unsafe impl Send for BlueFlame {}
// SAFETY: `&BlueFlame` only reads its plain fields.
unsafe impl Sync for BlueFlame {}

impl BlueFlame {
    /// The register at byte `off` of `page` with halves of `buf_size`
    /// bytes (rounded down to whole 64-byte blocks; 0 for none); `None`
    /// if it is misaligned or both halves (at least one 8-byte word) do
    /// not fit in the page.
    pub(crate) fn new(
        page: &Arc<Mapping>,
        off: usize,
        buf_size: u32,
        dedicated: bool,
    ) -> Option<BlueFlame> {
        let buf_size = buf_size & !(SEND_WQE_BB - 1);
        let span = (2 * buf_size as usize).max(8);
        if off % 8 != 0 || off.checked_add(span)? > page.len() {
            return None;
        }
        // SAFETY: `off + span <= len`: inside the mapping.
        let reg = unsafe { page.as_ptr().add(off) };
        Some(BlueFlame {
            reg: NonNull::new(reg)?,
            #[cfg(test)]
            buf_size,
            #[cfg(test)]
            dedicated,
            // BlueFlame copies are whole 64-byte blocks (`copy_bb`): only
            // to a register aligned for them (the page is page-aligned;
            // mlx5's registers are at 0x800 + k * 512).
            max_ds: if dedicated && off % 64 == 0 {
                buf_size / 16
            } else {
                0
            },
            toggle: if dedicated { buf_size } else { 0 },
            offset: 0,
            _page: Arc::clone(page),
        })
    }

    /// The register's address (tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn addr(&self) -> usize {
        self.reg.as_ptr() as usize
    }

    /// Bytes of each BlueFlame half (0: never BlueFlame).
    #[cfg(test)]
    pub(crate) fn buf_size(&self) -> u32 {
        self.buf_size
    }

    /// Which half the next doorbell uses (tests).
    #[cfg(test)]
    pub(crate) fn offset(&self) -> u32 {
        self.offset
    }

    /// Whether only this QP uses the register (tests).
    #[cfg(test)]
    pub(crate) fn dedicated(&self) -> bool {
        self.dedicated
    }

    /// Publishes a send queue's new WQEs, the steps of libmlx5's
    /// `post_send` tail: `udma_to_device_barrier`, the doorbell record's
    /// send counter (`cur_post`), `mmio_wc_start`, then either a
    /// BlueFlame copy of the last WQE (the one `cur_post` ends after, of
    /// `ds` 16-byte units; when it is the only one, more than the control
    /// segment and at most a half) or the 8-byte doorbell (its first 8
    /// bytes), `mmio_flush_writes`, and the half toggle.
    #[inline(always)]
    pub(crate) fn ring(&mut self, sq: &SendRing, db: &DbRec, cur_post: u32, nreq: u32, ds: u32) {
        Self::publish(db, cur_post);
        let src = sq.last_wqe(cur_post, ds);
        // SAFETY: `reg + offset` is this QP's register (offset 0, or the
        // second half of a dedicated BlueFlame register, `buf_size` bytes
        // into it: `new` checked both halves fit in the page `_page` keeps
        // mapped), 8-byte aligned; the 8-byte doorbell goes through
        // `write64` (atomic 64-bit stores: QPs sharing a bfreg write its
        // doorbell from several threads). A copy (`copy_bb`) only happens
        // on a dedicated register (`max_ds` is 0 on the others), which
        // only this QP writes, 64-byte aligned (`new` allows copies only
        // then, and `offset` is 0 or `buf_size`, a multiple of 64); it is
        // the WQE's BBs, at most `buf_size` bytes (`ds <= max_ds =
        // buf_size / 16`). The source BBs are the last WQE, inside the
        // ring (`last_wqe` masks its index), 64-byte aligned, wrapping at
        // its end, initialised memory (the buffer starts zeroed), read
        // through raw pointers.
        unsafe {
            let mut dst = self.reg.as_ptr().add(self.offset as usize).cast::<u64>();
            // `ds <= max_ds` is `ds * 16 <= buf_size` on a dedicated
            // register (`max_ds` is 0 on the others, and when `buf_size`
            // is).
            if nreq == 1 && ds > 1 && ds <= self.max_ds && ds <= BB_DS {
                // One BB (the common small WQE): a straight copy, no wrap.
                copy_bb(dst, src.cast::<u64>());
            } else if nreq == 1 && ds > 1 && ds <= self.max_ds {
                let mut src = src.cast::<u64>();
                // The WQE's BBs.
                let mut left = wqe_bbs(ds);
                loop {
                    copy_bb(dst, src);
                    left -= 1;
                    dst = dst.add(8);
                    src = sq.next_bb(src.cast()).cast();
                    if left == 0 {
                        break;
                    }
                }
            } else {
                write64(dst, src.cast::<u64>().read());
            }
        }
        // Flush the write-combining buffer before another doorbell.
        barrier::flush_writes();
        self.offset ^= self.toggle;
    }

    /// [`BlueFlame::ring`] for one request whose WQE is the one BB `wqe`
    /// (`ds` 16-byte units, at most 4), which the producer counter
    /// `cur_post` now ends after: the same steps, without the index
    /// arithmetic and the wrap a longer WQE needs.
    #[inline(always)]
    pub(crate) fn ring_one_bb(&mut self, db: &DbRec, cur_post: u32, wqe: OneBb, ds: u32) {
        Self::publish(db, cur_post);
        let src = wqe.as_ptr().cast::<u64>();
        // SAFETY: the register as in `ring` (a copy only to a dedicated,
        // 64-byte aligned register); a copy is one BB, 64 bytes, at most
        // `buf_size` (`ds <= max_ds` and `buf_size` is a multiple of 64,
        // so it is at least 64 when `max_ds` is not 0). The source is a
        // whole BB of the ring (`OneBb`), initialised memory, 64-byte
        // aligned.
        unsafe {
            let dst = self.reg.as_ptr().add(self.offset as usize).cast::<u64>();
            if ds > 1 && ds <= self.max_ds {
                copy_bb(dst, src);
            } else {
                write64(dst, src.read());
            }
        }
        barrier::flush_writes();
        self.offset ^= self.toggle;
    }

    /// The first steps of every doorbell: `udma_to_device_barrier`, the
    /// doorbell record's send counter, `mmio_wc_start`.
    #[inline(always)]
    fn publish(db: &DbRec, cur_post: u32) {
        // The WQEs are written before the device can see the counter that
        // covers them.
        barrier::to_device();
        db.set_send(cur_post);
        // The doorbell record reaches memory before the UAR write.
        barrier::wc_start();
    }
}

#[cfg(test)]
impl BlueFlame {
    /// The 8 bytes at the register's start (tests: the page is plain
    /// memory, and every access to the word is atomic).
    pub(crate) fn load(&self) -> u64 {
        // SAFETY: an aligned word inside the page `_page` keeps mapped;
        // in tests the page is readable memory written only atomically.
        unsafe { AtomicU64::from_ptr(self.reg.as_ptr().cast()) }.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BlueFlame copies (whole 64-byte blocks) only to a dedicated
    /// register aligned for them; an 8-byte aligned one still takes
    /// 8-byte doorbells, alternating halves.
    #[test]
    fn blueflame_copies_need_an_aligned_register() {
        let page = Arc::new(Mapping::anon(4096).unwrap());
        let aligned = BlueFlame::new(&page, 0x800, 256, true).unwrap();
        assert_eq!((aligned.max_ds, aligned.toggle), (16, 256));
        let skewed = BlueFlame::new(&page, 0x808, 256, true).unwrap();
        assert_eq!((skewed.max_ds, skewed.toggle), (0, 256));
        let shared = BlueFlame::new(&page, 0x800, 256, false).unwrap();
        assert_eq!((shared.max_ds, shared.toggle), (0, 0));
        assert!(BlueFlame::new(&page, 0x804, 256, true).is_none());
    }
}
