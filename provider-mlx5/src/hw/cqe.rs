//! CQE rings: a power of two of 64-byte CQEs the device writes
//! ([`CqRing`]), read one owned entry at a time ([`Cqe`]): the owner byte
//! first, atomically, then — after `udma_from_device_barrier` — the body.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use rverbs_abi::mlx5::prm::{cqe_opcode, Cqe64, ErrCqe};
use rverbs_abi::Errno;
use rverbs_provider::SharedAllocator;
use zerocopy::network_endian::{U16, U32};

use super::barrier;
use super::map::{Mapping, QueueKind};

/// Bytes per CQE.
pub(crate) const CQE_SIZE: usize = size_of::<Cqe64>();

/// A ring of `ncqe` CQEs in a mapping of its own.
#[derive(Debug)]
pub(crate) struct CqRing {
    buf: Mapping,
    ncqe: u32,
}

impl CqRing {
    /// A ring of `ncqe` (a power of two) invalid CQEs (opcode 15, owner 0).
    #[cfg(test)]
    pub(crate) fn new(ncqe: u32) -> Result<CqRing, Errno> {
        CqRing::new_in(ncqe, None)
    }

    /// [`CqRing::new`], its buffer from `alloc` where one is given
    /// ([`Mapping::queue_in`]).
    pub(crate) fn new_in(ncqe: u32, alloc: Option<&SharedAllocator>) -> Result<CqRing, Errno> {
        if !ncqe.is_power_of_two() {
            return Err(Errno::EINVAL);
        }
        let buf = Mapping::queue_in(ncqe as usize * CQE_SIZE, QueueKind::Cq, alloc)?;
        let ring = buf.as_ptr().cast::<Cqe64>();
        for i in 0..ncqe as usize {
            // SAFETY: entry i < ncqe lies inside the buffer (64-byte
            // entries from a page-aligned start), which nobody else sees
            // yet; only its `op_own` byte is written, through the raw
            // pointer.
            unsafe {
                std::ptr::addr_of_mut!((*ring.add(i)).op_own).write(cqe_opcode::INVALID << 4)
            };
        }
        Ok(CqRing { buf, ncqe })
    }

    /// User address of the first CQE (what the kernel is given).
    pub(crate) fn addr(&self) -> u64 {
        self.buf.addr()
    }

    /// Entries in the ring.
    pub(crate) fn ncqe(&self) -> u32 {
        self.ncqe
    }

    /// A reader of this ring (keeps it mapped).
    pub(crate) fn reader(self: &Arc<Self>) -> CqReader {
        CqReader {
            base: self.slot(0),
            ncqe: self.ncqe,
            ring: Arc::clone(self),
        }
    }

    /// Entry `i` (masked to the ring).
    #[inline(always)]
    fn slot(&self, i: u32) -> NonNull<Cqe64> {
        let off = (i & (self.ncqe - 1)) as usize * CQE_SIZE;
        // SAFETY: the entry lies inside the ring (`i & (ncqe - 1) < ncqe`).
        let p = unsafe { self.buf.as_ptr().add(off) }.cast::<Cqe64>();
        // SAFETY: derived from the mapping's non-null pointer.
        unsafe { NonNull::new_unchecked(p) }
    }

    /// The CQE for counter `i` if the device has written it (see
    /// [`sw_cqe`]).
    #[inline(always)]
    pub(crate) fn sw_cqe(&self, i: u32) -> Option<Cqe<'_>> {
        sw_cqe(self.slot(0), self.ncqe, i)
    }

    /// The entry of counter `i`, by value, whoever owns it (a CQE the
    /// caller saw written and not yet consumed).
    pub(crate) fn read(&self, i: u32) -> Cqe64 {
        // SAFETY: the entry lies inside the ring, aligned and initialised
        // (the ring starts as invalid CQEs); read through the raw pointer
        // (ring memory is never borrowed).
        unsafe { self.slot(i).as_ptr().read() }
    }

    /// Writes `c` whole into the entry of counter `i` (moving unpolled
    /// CQEs: cleaning out a QP's, or into a new ring on resize). Call it
    /// only for entries the device will not write before the consumer
    /// index passes them, with the poller locked out.
    pub(crate) fn write(&self, i: u32, c: Cqe64) {
        // SAFETY: the entry lies inside the ring, aligned (64-byte entries
        // in a page-aligned ring); written whole through the raw pointer
        // (ring memory is never borrowed). Whether the device could write
        // it too is the caller's care (it cannot break memory safety:
        // the device's writes are outside the program).
        unsafe { std::ptr::write_volatile(self.slot(i).as_ptr(), c) };
    }
}

/// The CQE for counter `i` in the ring of `ncqe` entries at `base`, if
/// the device has written it (opcode valid, owner bit matching the lap),
/// after the barrier that makes its body readable: its 64 bytes are then
/// software's to read until the consumer index passes it.
#[inline(always)]
fn sw_cqe<'a>(base: NonNull<Cqe64>, ncqe: u32, i: u32) -> Option<Cqe<'a>> {
    // The caller's borrow (`'a`) keeps the ring mapped.
    let p = entry(base, ncqe, i);
    // SAFETY: the entry's `op_own` byte (taken by raw pointer, no
    // reference to the entry); the device writes it concurrently, so read
    // it atomically (an `AtomicU8` has the alignment and size of a `u8`).
    let op_own = unsafe { &*std::ptr::addr_of!((*p.as_ptr()).op_own).cast::<AtomicU8>() }
        .load(Ordering::Relaxed);
    if !written(op_own, i & ncqe != 0) {
        return None;
    }
    // The body was written before the owner byte.
    barrier::from_device();
    Some(Cqe {
        p,
        _ring: PhantomData,
    })
}

/// The entry for counter `i` in the ring of `ncqe` entries (a power of
/// two) at `base`: masked, so always inside the ring.
#[inline(always)]
fn entry(base: NonNull<Cqe64>, ncqe: u32, i: u32) -> NonNull<Cqe64> {
    let slot = (i & (ncqe - 1)) as usize;
    // SAFETY: `slot < ncqe`, so the entry lies inside the ring `base`
    // starts.
    unsafe { base.add(slot) }
}

/// Whether a CQE's `op_own` byte says the device wrote it on the lap
/// whose owner bit is `lap`: its opcode is not INVALID (high nibble 0xF)
/// and its owner bit is `lap`. With `w = op_own ^ lap`, that is `w` even
/// and below 0xF0, which is `w` rotated right by one below 0x78 (an odd
/// `w` rotates its low bit into the top): one test instead of two.
#[inline(always)]
fn written(op_own: u8, lap: bool) -> bool {
    const _: () = assert!(cqe_opcode::INVALID == 0xF);
    (op_own ^ u8::from(lap)).rotate_right(1) < 0x78
}

/// A poller's view of a ring: its first CQE and size next to each other,
/// with the ring kept mapped.
#[derive(Debug)]
pub(crate) struct CqReader {
    base: NonNull<Cqe64>,
    ncqe: u32,
    /// Keeps the ring mapped.
    ring: Arc<CqRing>,
}

// SAFETY: `base` points into `ring`, owned through the Arc; the reader
// only reads CQEs (owner byte atomically, bodies once owned).
unsafe impl Send for CqReader {}
// SAFETY: as above.
unsafe impl Sync for CqReader {}

impl CqReader {
    /// The CQE for counter `i` if the device has written it (opcode
    /// valid, owner bit matching the lap), after the barrier that makes
    /// its body readable.
    #[inline(always)]
    pub(crate) fn sw_cqe(&self, i: u32) -> Option<Cqe<'_>> {
        sw_cqe(self.base, self.ncqe, i)
    }

    /// The CQE for counter `i`, which [`CqReader::sw_cqe`] found written
    /// and which is not consumed yet (its owner byte is not looked at
    /// again). A CQE the device rewrote since (a device breaking the
    /// protocol) reads as whatever it holds now: bytes, never memory
    /// outside the ring.
    #[inline(always)]
    pub(crate) fn seen_cqe(&self, i: u32) -> Cqe<'_> {
        Cqe {
            // The borrow of `self` (holding `ring`) keeps it mapped.
            p: entry(self.base, self.ncqe, i),
            _ring: PhantomData,
        }
    }

    /// Entries in the ring.
    #[inline(always)]
    pub(crate) fn ncqe(&self) -> u32 {
        self.ncqe
    }

    /// The ring.
    pub(crate) fn ring(&self) -> &Arc<CqRing> {
        &self.ring
    }
}

/// Where a CQE names its QP: `srqn_uidx` (the user index, CQE version 1)
/// or `sop_drop_qpn` (the QP number, version 0). One load per CQE, where
/// a choice between the two fields would cost a branch or a select.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyField(usize);

impl KeyField {
    /// `srqn_uidx` (CQE version 1).
    pub(crate) const UIDX: KeyField = KeyField(std::mem::offset_of!(Cqe64, srqn_uidx));
    /// `sop_drop_qpn` (CQE version 0).
    pub(crate) const QPN: KeyField = KeyField(std::mem::offset_of!(Cqe64, sop_drop_qpn));
}

/// A CQE software owns (handed out by [`CqReader::sw_cqe`], or a CQE
/// value): the device wrote it and will not write it again before the
/// consumer index passes it; aligned and initialised. Its fields are read
/// by value, in place (no reference into the ring, no copy of the rest).
#[derive(Clone, Copy)]
pub(crate) struct Cqe<'a> {
    p: NonNull<Cqe64>,
    _ring: PhantomData<&'a Cqe64>,
}

/// Field `f` of `c`'s CQE, read by value through the raw pointer.
macro_rules! field {
    ($c:expr, $T:ty, $f:ident) => {{
        let p = $c.p.as_ptr().cast::<$T>();
        // SAFETY: `p` points to an aligned, initialised CQE software owns
        // while `'a` lasts (see `Cqe`); the field is read in place, by
        // value (`ErrCqe` is the same 64 bytes seen another way).
        unsafe { ::std::ptr::addr_of!((*p).$f).read() }
    }};
}

impl<'a> Cqe<'a> {
    /// A CQE value as an owned CQE (tests, fuzzing).
    #[cfg(any(test, feature = "fuzz"))]
    pub(crate) fn of(c: &'a Cqe64) -> Cqe<'a> {
        Cqe {
            p: NonNull::from(c),
            _ring: PhantomData,
        }
    }

    /// The QP key field `k`, host order.
    #[inline(always)]
    pub(crate) fn key(self, k: KeyField) -> u32 {
        // SAFETY: `k` is the offset of one of the two `U32` fields, so
        // this reads that field of an owned CQE, in place (`U32` has
        // alignment 1).
        unsafe { self.p.as_ptr().cast::<u8>().add(k.0).cast::<U32>().read() }.get()
    }

    /// The CQE, by value (no reference into the ring is made).
    #[inline(always)]
    pub(crate) fn read(self) -> Cqe64 {
        // SAFETY: an aligned, initialised, owned CQE (see the type).
        unsafe { self.p.as_ptr().read() }
    }

    /// `op_own`: opcode (bits 7..4) and owner bit.
    #[inline(always)]
    pub(crate) fn op_own(self) -> u8 {
        field!(self, Cqe64, op_own)
    }

    /// `wqe_counter`.
    #[inline(always)]
    pub(crate) fn wqe_counter(self) -> U16 {
        field!(self, Cqe64, wqe_counter)
    }

    /// `sop_drop_qpn`.
    #[inline(always)]
    pub(crate) fn sop_drop_qpn(self) -> U32 {
        field!(self, Cqe64, sop_drop_qpn)
    }

    /// `byte_cnt`.
    #[inline(always)]
    pub(crate) fn byte_cnt(self) -> U32 {
        field!(self, Cqe64, byte_cnt)
    }

    /// `imm_inval_pkey`.
    #[inline(always)]
    pub(crate) fn imm_inval_pkey(self) -> U32 {
        field!(self, Cqe64, imm_inval_pkey)
    }

    /// `flags_rqpn`.
    #[inline(always)]
    pub(crate) fn flags_rqpn(self) -> U32 {
        field!(self, Cqe64, flags_rqpn)
    }

    /// `slid`.
    #[inline(always)]
    pub(crate) fn slid(self) -> U16 {
        field!(self, Cqe64, slid)
    }

    /// `ml_path`.
    #[inline(always)]
    pub(crate) fn ml_path(self) -> u8 {
        field!(self, Cqe64, ml_path)
    }

    /// An error CQE's `syndrome`.
    #[inline(always)]
    pub(crate) fn syndrome(self) -> u8 {
        field!(self, ErrCqe, syndrome)
    }

    /// An error CQE's `vendor_err_synd`.
    #[inline(always)]
    pub(crate) fn vendor_err_synd(self) -> u8 {
        field!(self, ErrCqe, vendor_err_synd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `written` is the two tests it replaces, for every byte and lap.
    #[test]
    fn written_is_valid_opcode_and_owner_bit() {
        for op_own in 0..=u8::MAX {
            for lap in [false, true] {
                let plain = op_own >> 4 != cqe_opcode::INVALID && (op_own & 1 != 0) == lap;
                assert_eq!(
                    written(op_own, lap),
                    plain,
                    "op_own {op_own:#04x} lap {lap}"
                );
            }
        }
    }
}
