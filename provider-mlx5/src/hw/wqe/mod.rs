//! Work queue rings in the queue buffer: the send ring and its WQE
//! cursors ([`SendRing`], [`Bb`], [`Wqe`]), the receive ring
//! ([`RecvRing`]) and the SRQ's linked WQEs ([`SrqRing`]). Each writes
//! the typed PRM segments of `rverbs_abi::mlx5::prm` through raw pointers
//! (no reference to memory the device reads is ever made) and records
//! the `wr_id` of every WQE in the queue's bookkeeping (`wq`), without
//! bounds checks: every index is masked to its ring.

use std::io::IoSlice;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use rverbs_abi::mlx5::prm::{
    self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg, SrqNextSeg,
};
use rverbs_abi::wr::Sge;
use rverbs_provider::batch::{check_batch_wr, BatchWr};
use rverbs_provider::wr::{SendRequest, WrOpcode};
use rverbs_provider::PostError;
use zerocopy::network_endian::{U16, U32, U64};

use super::map::Mapping;
use crate::wq::{RqShared, SqShared};

pub(crate) use recv::{RecvRing, SrqRing};

/// Bytes per send basic block (BB).
pub(crate) const SEND_WQE_BB: u32 = 64;
/// The unit of WQE sizes (`ds`): 16 bytes.
const SEG: usize = size_of::<DataSeg>();

/// The BBs a send WQE of `ds` 16-byte units takes: `ds` rounded up to
/// whole BBs (`ds` is at most a WQE's size in 16-byte units, far from
/// overflowing).
#[inline(always)]
#[allow(
    clippy::manual_div_ceil,
    reason = "div_ceil's quotient + remainder test costs the doorbell path instructions"
)]
pub(crate) fn wqe_bbs(ds: u32) -> u32 {
    (ds + (SEND_WQE_BB / SEG as u32 - 1)) / (SEND_WQE_BB / SEG as u32)
}

/// Writes a PRM segment (a `rverbs_abi::mlx5::prm` struct) at the raw
/// pointer `p`, field by field in the order given, each value computed
/// right before its store: `put_seg!(p, DataSeg { byte_count: .., .. })`.
/// No reference to the ring is made, and the stores keep the shape of
/// hand-written ones (a whole-struct write makes the compiler load every
/// value first, which costs register moves on the posting path). Every
/// field must be named: a never-run struct literal makes the compiler
/// check that the list is exhaustive.
///
/// Expands to unsafe operations: use it inside an `unsafe` block whose
/// SAFETY comment shows `p` valid for writes of the segment and aligned
/// for it, and the bytes not read by the device until a doorbell covers
/// them.
macro_rules! put_seg {
    ($p:expr, $T:ident { $($f:ident: $v:expr),* $(,)? }) => {{
        let p: *mut $T = $p.cast::<$T>();
        $( ::std::ptr::addr_of_mut!((*p).$f).write($v); )*
        if false {
            // Never runs: fails to compile if a field is not listed.
            let _ = $T { $($f: ::zerocopy::FromZeros::new_zeroed()),* };
        }
    }};
}

// After put_seg!, which it uses (macros are in scope from their definition on).
mod recv;

/// A send ring: `wqe_cnt` 64-byte basic blocks in the queue buffer (kept
/// mapped by the ring), and the queue's `wr_id` bookkeeping (kept alive
/// by the ring). Segments wrap at the ring's end at 16-byte granularity.
#[derive(Debug)]
pub(crate) struct SendRing {
    /// First BB.
    start: *mut u8,
    /// One past the last BB: segments starting here wrap to `start`.
    qend: *mut u8,
    /// BBs minus one (a power of two minus one).
    mask: u32,
    /// `book`'s `wrid` (at least `mask + 1` entries).
    wrid: *const AtomicU64,
    /// `book`'s `wqe_head` (at least `mask + 1` entries).
    wqe_head: *const AtomicU32,
    _book: Arc<SqShared>,
    _mem: Arc<Mapping>,
}

// SAFETY: the pointers point into `_mem` and `_book`, owned through the
// Arcs. Writes through them take `&SendRing` but only from the one poster
// (`SendQueue` is the only owner and writes through `&mut self`); the
// bookkeeping is atomics.
unsafe impl Send for SendRing {}
// SAFETY: as above; a shared `SendRing` is only read by the queue's
// `&self` methods, which do not touch ring memory.
unsafe impl Sync for SendRing {}

impl SendRing {
    /// The ring of `wqe_cnt` BBs (a power of two, or 0 for none: then one
    /// BB at the buffer's start stands in, never posted to) at `offset`
    /// bytes into `mem`. `None` if it does not fit, or `book` is smaller.
    pub(crate) fn new(
        mem: &Arc<Mapping>,
        offset: usize,
        wqe_cnt: u32,
        book: &Arc<SqShared>,
    ) -> Option<SendRing> {
        let (offset, bbs) = if wqe_cnt == 0 {
            (0, 1)
        } else {
            (offset, wqe_cnt)
        };
        let bytes = bbs as usize * SEND_WQE_BB as usize;
        let (wrid, wqe_head) = book.slots();
        if !bbs.is_power_of_two()
            || offset % SEND_WQE_BB as usize != 0
            || offset.checked_add(bytes)? > mem.len()
            || wrid.len() < bbs as usize
            || wqe_head.len() < bbs as usize
        {
            return None;
        }
        // SAFETY: `offset + bytes <= len`: both inside (or one past) the
        // mapping.
        let (start, qend) = unsafe { (mem.as_ptr().add(offset), mem.as_ptr().add(offset + bytes)) };
        Some(SendRing {
            start,
            qend,
            mask: bbs - 1,
            wrid: wrid.as_ptr(),
            wqe_head: wqe_head.as_ptr(),
            _book: Arc::clone(book),
            _mem: Arc::clone(mem),
        })
    }

    /// BB `idx` (masked to the ring).
    #[inline(always)]
    fn bb_ptr(&self, idx: u32) -> *mut u8 {
        // SAFETY: `idx & mask` is below the ring's BB count, so the BB is
        // inside the ring.
        unsafe {
            self.start
                .add((idx & self.mask) as usize * SEND_WQE_BB as usize)
        }
    }

    /// The first BB of the last WQE built, given the producer counter
    /// `cur_post` after it and its size `ds` in 16-byte units (it took
    /// `ds` rounded up to whole BBs). Masked: always a BB of the ring.
    #[inline(always)]
    pub(super) fn last_wqe(&self, cur_post: u32, ds: u32) -> *const u8 {
        self.bb_ptr(cur_post.wrapping_sub(wqe_bbs(ds)))
    }

    /// The BB after the one at `p` (a BB of this ring), wrapping.
    #[inline(always)]
    pub(super) fn next_bb(&self, p: *const u8) -> *const u8 {
        // SAFETY: `p` is a BB of the ring, so one BB on is inside it or
        // its end, which wraps to the start.
        let n = unsafe { p.add(SEND_WQE_BB as usize) };
        if n == self.qend.cast_const() {
            self.start
        } else {
            n
        }
    }

    /// `seg`, or the ring's start if `seg` is its end.
    #[inline(always)]
    fn wrap(&self, seg: *mut u8) -> *mut u8 {
        if seg == self.qend {
            self.start
        } else {
            seg
        }
    }

    /// Records `wr_id` and the poster's WR counter `head` for the WQE at
    /// BB `idx` (what the CQ returns and retires to on its completion).
    #[inline(always)]
    fn record(&self, idx: u32, wr_id: u64, head: u32) {
        let slot = (idx & self.mask) as usize;
        // SAFETY: `slot <= mask`, below the length of both arrays, which
        // `_book` keeps alive.
        let (w, h) = unsafe { (&*self.wrid.add(slot), &*self.wqe_head.add(slot)) };
        w.store(wr_id, Ordering::Relaxed);
        h.store(head, Ordering::Relaxed);
    }

    /// A one-BB WQE at producer counter `cur_post` (no segment wraps:
    /// control, at most a remote address and a data segment).
    #[inline(always)]
    pub(crate) fn bb(&self, cur_post: u32) -> Bb<'_> {
        let ctrl = self.bb_ptr(cur_post);
        Bb {
            ring: self,
            ctrl,
            // SAFETY: 16 bytes into a BB of the ring.
            seg: unsafe { ctrl.add(SEG) },
            idx: cur_post & self.mask,
        }
    }

    /// A WQE of any size at producer counter `cur_post`, its segments
    /// written in order after the control segment, wrapping at the end.
    #[inline(always)]
    pub(crate) fn wqe(&self, cur_post: u32) -> Wqe<'_> {
        let ctrl = self.bb_ptr(cur_post);
        Wqe {
            ring: self,
            ctrl,
            // SAFETY: 16 bytes into a BB of the ring.
            seg: unsafe { ctrl.add(size_of::<CtrlSeg>()) },
            idx: cur_post & self.mask,
        }
    }

    /// The cursor a batch writes its WQEs with from producer counters
    /// `cur_post` (BBs) and `head` (work requests) on (see
    /// [`BatchCursor`]): the ring's pointers copied out, and `c`'s words
    /// precomputed.
    #[inline(always)]
    pub(crate) fn batch_cursor(&self, c: &BatchWqe, cur_post: u32, head: u32) -> BatchCursor<'_> {
        let imm = c.imm.to_bytes();
        let rkey = c.rkey.to_bytes();
        BatchCursor {
            at: self.chain_cursor(cur_post, head),
            ctrl_lo: u64::from(c.opcode) << 32 | u64::from(c.qpn << 8 | (c.ds + 1)),
            ctrl_hi: u64::from_ne_bytes([0, 0, 0, c.fm_ce_se, imm[0], imm[1], imm[2], imm[3]]),
            rkey_hi: u64::from_ne_bytes([rkey[0], rkey[1], rkey[2], rkey[3], 0, 0, 0, 0]),
        }
    }

    /// Adds the `fm_ce_se` bits `flags` to the control segment of the WQE
    /// at producer counter `cur_post` (a batch's last, signaled after the
    /// fact: same bytes as if written so).
    #[inline(always)]
    pub(crate) fn add_fm_ce_se(&self, cur_post: u32, flags: u8) {
        let ctrl = self.bb_ptr(cur_post).cast::<CtrlSeg>();
        // SAFETY: a BB of the ring (masked, aligned), written by this
        // poster and not yet covered by a doorbell; one byte of its
        // control segment.
        unsafe {
            let f = std::ptr::addr_of_mut!((*ctrl).fm_ce_se);
            f.write(f.read() | flags);
        }
    }
}

/// What the WQEs of a batch share, computed once per batch (see
/// [`SendRing::batch_cursor`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchWqe {
    /// WQE opcode.
    pub(crate) opcode: u8,
    /// QP number.
    pub(crate) qpn: u32,
    /// Size in 16-byte units without the data segment: 1, or 2 with a
    /// remote address.
    pub(crate) ds: u32,
    /// `fm_ce_se` flags of every WQE.
    pub(crate) fm_ce_se: u8,
    /// Immediate data, as on the wire.
    pub(crate) imm: U32,
    /// Remote key, as on the wire.
    pub(crate) rkey: U32,
}

// The byte offsets `BatchCursor` stores its words at.
const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<CtrlSeg>() == SEG && size_of::<RaddrSeg>() == SEG);
    assert!(offset_of!(CtrlSeg, opmod_idx_opcode) == 0);
    assert!(offset_of!(CtrlSeg, qpn_ds) == 4);
    assert!(offset_of!(CtrlSeg, signature) == 8);
    assert!(offset_of!(CtrlSeg, dci_stream_channel_id) == 9);
    assert!(offset_of!(CtrlSeg, fm_ce_se) == 11);
    assert!(offset_of!(CtrlSeg, imm) == 12);
    assert!(offset_of!(RaddrSeg, raddr) == 0);
    assert!(offset_of!(RaddrSeg, rkey) == 8);
    assert!(offset_of!(RaddrSeg, reserved) == 12);
    assert!(offset_of!(DataSeg, byte_count) == 0);
    assert!(offset_of!(DataSeg, lkey) == 4);
    assert!(offset_of!(DataSeg, addr) == 8);
};

/// The 8 bytes `len`, `lkey` as a data segment's first half holds them
/// (each big-endian), from the word that holds them in an [`Sge`]
/// (`length`, then `lkey`, native order).
#[inline(always)]
fn data_lo(v: u64) -> u64 {
    if cfg!(target_endian = "little") {
        // Memory order is reversed by the swap, halves put back by the
        // rotation.
        v.swap_bytes().rotate_left(32)
    } else {
        // Already in memory order; each word swapped.
        let (len, lkey) = ((v >> 32) as u32, v as u32);
        u64::from(len.swap_bytes()) << 32 | u64::from(lkey.swap_bytes())
    }
}

/// `sge`'s `addr`, and its `length` and `lkey` as the one word they
/// make in memory, with the `length` taken from that word. The word is
/// one 8-byte load (a volatile read: else the compiler splits it into
/// the two fields, two loads and the shift and OR that join them again).
#[inline(always)]
fn sge_words(sge: &Sge) -> (u64, u64, u32) {
    const _: () = assert!(
        size_of::<Sge>() == 16
            && std::mem::offset_of!(Sge, length) == 8
            && std::mem::offset_of!(Sge, lkey) == 12
    );
    // SAFETY: bytes 8..16 of the `Sge` behind the reference (its
    // `length` and `lkey`: plain integers, initialised, every bit
    // pattern a u64), 8-byte aligned (an `Sge` is: it starts with a
    // u64), read through a pointer derived from the whole reference.
    let word = unsafe { std::ptr::read_volatile(std::ptr::from_ref(sge).cast::<u64>().add(1)) };
    let len = if cfg!(target_endian = "little") {
        word as u32
    } else {
        (word >> 32) as u32
    };
    (sge.addr, word, len)
}

/// Writes the one-BB WQEs of a batch: a [`Bb`]'s bytes for the same
/// request, with what the batch shares precomputed as whole words (each
/// segment is two 8-byte stores), the ring's pointers in locals and the
/// producer counters advanced as it writes. Borrowed from the ring, which
/// keeps the memory mapped.
pub(crate) struct BatchCursor<'r> {
    /// The ring's pointers and the producer counters.
    at: ChainCursor<'r>,
    /// The control segment's first 8 bytes before the byte swap, with
    /// WQE index 0 and a data segment: opcode in bits 32..40, the index
    /// goes in 40..56 (opcode modifier 0 in 56..64), `qpn << 8 | ds` in
    /// 0..32.
    ctrl_lo: u64,
    /// Bytes 8..16 of the control segment: signature 0, DCI stream 0,
    /// `fm_ce_se`, immediate.
    ctrl_hi: u64,
    /// Bytes 8..16 of the remote-address segment: rkey, reserved 0.
    rkey_hi: u64,
}

impl BatchCursor<'_> {
    /// Writes a WQE for each of `wrs` (with `RADDR` a remote-address
    /// segment), in runs of consecutive BBs up to the ring's end: control
    /// segment, remote address, a data segment unless the SGE is empty;
    /// records each `wr_id` and WR counter. An entry that fails
    /// [`check_batch_wr`] is not written and stops the loop. Returns how
    /// many were written and that error.
    ///
    /// The caller owns the BBs of all of `wrs` (the ring has room for
    /// them: `max_post` allowed, and the doorbell record does not cover
    /// them yet); the writes stay inside the ring whatever `wrs` holds.
    #[inline(always)]
    pub(crate) fn write<const RADDR: bool>(
        &mut self,
        wrs: &[BatchWr],
    ) -> (usize, Option<PostError>) {
        let mut rest = wrs;
        let mut done = 0usize;
        while !rest.is_empty() {
            let (slot, room) = run_room(self.at.cur_post, self.at.mask);
            let (run, after) = rest.split_at(rest.len().min(room));
            let (n, err) = self.write_run::<RADDR>(slot, run);
            done += n;
            if err.is_some() {
                return (done, err);
            }
            rest = after;
        }
        (done, None)
    }

    /// [`BatchCursor::write`]'s run: `run` (at most the BBs from `slot`
    /// to the ring's end, and before the WQE index wraps) at BB `slot`
    /// on, without wrapping.
    #[inline(always)]
    fn write_run<const RADDR: bool>(
        &mut self,
        slot: usize,
        run: &[BatchWr],
    ) -> (usize, Option<PostError>) {
        let mut err = None;
        // The WQE index in bits 40..56, counted up there: it does not
        // wrap inside a run.
        let mut ctrl_lo = self.ctrl_lo | u64::from(self.at.cur_post as u16) << 40;
        // SAFETY: `slot <= mask` (`run_room`'s).
        let RunPos {
            mut bb,
            wrid,
            wqe_head,
            head: first,
            ..
        } = unsafe { self.at.run_pos(slot) };
        let mut head = first;
        // SAFETY: `run` has at most `mask + 1 - slot` entries, so every
        // BB below, advanced once per entry written from `slot`'s, and
        // every bookkeeping entry `head - first` past `slot`'s stay inside
        // the ring and the arrays (see `run_pos`). The BBs are the
        // caller's to write (see `write`); each store is an aligned word
        // of one (BBs are 64-byte aligned; the offsets are asserted
        // above).
        unsafe {
            for e in run {
                let (addr, word, len) = sge_words(&e.sge);
                // One test for the two rare lengths: 0 (no data segment)
                // and more than 2^31 (refused before a byte of the WQE is
                // written). `len` is in 1..=2^31 exactly when its
                // negation is negative.
                let data = (len.wrapping_neg() as i32) < 0;
                if !data {
                    if let Err(x) = check_batch_wr(e) {
                        err = Some(x);
                        break;
                    }
                }
                let mut seg = bb.add(SEG);
                if RADDR {
                    seg.cast::<u64>().write(e.remote_addr.to_be());
                    seg.add(8).cast::<u64>().write(self.rkey_hi);
                    seg = seg.add(SEG);
                }
                let mut lo = ctrl_lo;
                if data {
                    seg.cast::<u64>().write(data_lo(word));
                    seg.add(8).cast::<u64>().write(addr.to_be());
                } else {
                    // No data segment: one unit less.
                    lo -= 1;
                }
                bb.cast::<u64>().write(lo.to_be());
                bb.add(8).cast::<u64>().write(self.ctrl_hi);
                (*wrid.wrapping_add(head)).store(e.wr_id, Ordering::Relaxed);
                (*wqe_head.wrapping_add(head)).store(head as u32, Ordering::Relaxed);
                bb = bb.add(SEND_WQE_BB as usize);
                head = head.wrapping_add(1);
                ctrl_lo = ctrl_lo.wrapping_add(1 << 40);
            }
        }
        let n = head.wrapping_sub(first);
        self.at.head = head as u32;
        self.at.cur_post = self.at.cur_post.wrapping_add(n as u32);
        (n, err)
    }
}

/// Where a run of one-BB WQEs written without wrapping starts, from
/// producer counter `cur_post` of a ring of `mask + 1` BBs: its slot, and
/// how many BBs it may take: up to the ring's end (at least 1), and no
/// further than the 16-bit WQE index's wrap (which a ring of at most 2^16
/// BBs never reaches inside a run).
#[inline(always)]
fn run_room(cur_post: u32, mask: u32) -> (usize, usize) {
    let slot = cur_post & mask;
    let room = ((mask - slot) as usize + 1).min(0x1_0000 - (cur_post & 0xffff) as usize);
    (slot as usize, room)
}

/// Two 4-byte words as the 8 bytes they make in memory, `first` at the
/// lower address.
#[inline(always)]
fn word_pair(first: u32, second: u32) -> u64 {
    if cfg!(target_endian = "little") {
        u64::from(first) | u64::from(second) << 32
    } else {
        u64::from(first) << 32 | u64::from(second)
    }
}

/// What the chain loop ([`ChainCursor`]) needs of a work-request opcode
/// on one queue: a table of 16 of them (see `SendQueue`'s `chain_ops`),
/// built once when the queue is made.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ChainOp {
    /// The control segment's first 8 bytes as a big-endian word, with WQE
    /// index 0 and a data segment (as [`BatchCursor`]'s `ctrl_lo`): WQE
    /// opcode in bits 32..40, `qpn << 8 | ds` in 0..32, `ds` 2, or 3 with
    /// a remote-address segment (bit 0 says which). 0 if the opcode does
    /// not take the fast path on the queue.
    ctrl_lo: u64,
    /// All ones if the opcode carries immediate data, else 0.
    imm_mask: u32,
}

impl ChainOp {
    /// The entry of a WQE opcode `opcode` (with a remote address if
    /// `raddr`) on QP `qpn`.
    pub(crate) fn new(opcode: u8, raddr: bool, imm_mask: u32, qpn: u32) -> ChainOp {
        let ds = 2 + u32::from(raddr);
        ChainOp {
            ctrl_lo: u64::from(opcode) << 32 | u64::from(qpn << 8 | ds),
            imm_mask,
        }
    }

    /// Whether the opcode takes the fast path on the queue.
    #[inline(always)]
    fn is_fast(self) -> bool {
        self.ctrl_lo != 0
    }

    /// Whether a remote-address segment follows the control segment.
    #[inline(always)]
    fn raddr(self) -> bool {
        self.ctrl_lo & 1 != 0
    }

    /// The WQE's size in 16-byte units, with its data segment.
    #[inline(always)]
    fn ds(self) -> u32 {
        (self.ctrl_lo & 0x3f) as u32
    }
}

/// The ring's pointers copied out (into locals, where the compiler keeps
/// them in registers: raw stores to the ring could alias the ring's own
/// fields) and the producer counters, advanced as WQEs are written: the
/// base of [`BatchCursor`], and on its own the chain loop's writer, which
/// writes the one-BB WQEs of a chain's common requests (a simple opcode,
/// one SGE of 1 to 2^31 bytes, no UD destination: what
/// `SendQueue::try_fast` takes, minus the empty SGE): the same bytes as
/// [`Bb`] writes for each, with the ring's pointers in locals, the
/// opcode's control words from a per-queue table ([`ChainOp`]), and the
/// producer counters advanced as it writes. Borrowed from the ring, which
/// keeps the memory mapped.
pub(crate) struct ChainCursor<'r> {
    start: *mut u8,
    mask: u32,
    wrid: *const AtomicU64,
    wqe_head: *const AtomicU32,
    /// Producer counter of BBs: where the next WQE goes.
    pub(crate) cur_post: u32,
    /// Producer counter of work requests (recorded with each WQE).
    pub(crate) head: u32,
    _ring: std::marker::PhantomData<&'r SendRing>,
}

impl SendRing {
    /// The cursor a chain writes its common requests with, from producer
    /// counters `cur_post` (BBs) and `head` (work requests) on (see
    /// [`ChainCursor`]).
    #[inline(always)]
    pub(crate) fn chain_cursor(&self, cur_post: u32, head: u32) -> ChainCursor<'_> {
        ChainCursor {
            start: self.start,
            mask: self.mask,
            wrid: self.wrid,
            wqe_head: self.wqe_head,
            cur_post,
            head,
            _ring: std::marker::PhantomData,
        }
    }
}

impl ChainCursor<'_> {
    /// Writes a WQE for each of the leading requests of `wrs` that the
    /// chain loop takes (see [`ChainCursor`]; `ops` by work-request
    /// opcode, `flags` the control segment's third word by the low three
    /// send flags), in runs of consecutive BBs up to the ring's end, and
    /// records each `wr_id` and WR counter. Stops at the first request it
    /// does not take, writing nothing of it. Returns how many it wrote
    /// and the last one's size in 16-byte units (0 if none).
    ///
    /// The caller owns the BBs of all of `wrs` (the ring has room for
    /// them, one BB each at least: `max_post` allowed, and the doorbell
    /// record does not cover them yet); the writes stay inside the ring
    /// whatever `wrs` holds.
    #[inline(always)]
    pub(crate) fn write<R: SendRequest>(
        &mut self,
        wrs: &[R],
        ops: &[ChainOp; 16],
        flags: &[u32; 8],
    ) -> (usize, u32) {
        let mut rest = wrs;
        let mut done = 0usize;
        let mut last_ds = 0;
        while !rest.is_empty() {
            let (slot, room) = run_room(self.cur_post, self.mask);
            let (run, after) = rest.split_at(rest.len().min(room));
            let n = self.write_run(slot, run, ops, flags, &mut last_ds);
            done += n;
            if n < run.len() {
                break;
            }
            rest = after;
        }
        (done, last_ds)
    }

    /// [`ChainCursor::write`]'s run: the leading requests of `run` (at
    /// most the BBs from `slot` to the ring's end, and before the WQE
    /// index wraps) that it takes, at BB `slot` on, without wrapping, in
    /// stretches of one opcode (its table entry read once for each).
    /// Returns how many it wrote; `last_ds` is the last one's size in
    /// 16-byte units if it wrote any.
    #[inline(always)]
    fn write_run<R: SendRequest>(
        &mut self,
        slot: usize,
        run: &[R],
        ops: &[ChainOp; 16],
        flags: &[u32; 8],
        last_ds: &mut u32,
    ) -> usize {
        // SAFETY: `slot <= mask` (`run_room`'s).
        let mut at = unsafe { self.run_pos(slot) };
        let first = at.head;
        let mut rest = run;
        while let [wr, ..] = rest {
            let opcode = wr.opcode();
            let op = ops[opcode as usize];
            if !op.is_fast() {
                break;
            }
            // SAFETY: `rest` is the end of `run`, its first `head -
            // first` entries written, one BB each from `slot` on: `at`
            // is at the BB after them, and the BBs of `rest` follow it
            // inside the ring (see `write`'s contract for their owner).
            let n = unsafe {
                match (op.raddr(), op.imm_mask != 0) {
                    (true, false) => at.write::<R, true, false>(rest, opcode, op, flags),
                    (true, true) => at.write::<R, true, true>(rest, opcode, op, flags),
                    (false, false) => at.write::<R, false, false>(rest, opcode, op, flags),
                    (false, true) => at.write::<R, false, true>(rest, opcode, op, flags),
                }
            };
            if n == 0 {
                break;
            }
            // A request taken has a data segment: the entry's size.
            *last_ds = op.ds();
            rest = &rest[n..];
        }
        let n = at.head.wrapping_sub(first);
        self.head = at.head as u32;
        self.cur_post = self.cur_post.wrapping_add(n as u32);
        n
    }

    /// Where a run of one-BB WQEs from BB `slot` on starts ([`RunPos`]):
    /// that BB, the bookkeeping arrays offset by the WR counter (so that
    /// it indexes them), the counter and the WQE index.
    ///
    /// # Safety
    /// `slot <= mask`. Then `start + slot` BBs and `wrid`, `wqe_head` +
    /// `slot` entries are inside the ring (kept mapped by the borrowed
    /// ring) and the bookkeeping arrays (at least `mask + 1` entries);
    /// the offset by `-head` is wrapping arithmetic, so only the entries
    /// the counter then indexes are in bounds, and only those may be
    /// dereferenced.
    #[inline(always)]
    unsafe fn run_pos(&self, slot: usize) -> RunPos {
        let first = self.head as usize;
        // SAFETY: as the caller guarantees (see above).
        unsafe {
            RunPos {
                bb: self.start.add(slot * SEND_WQE_BB as usize),
                wrid: self.wrid.add(slot).wrapping_sub(first),
                wqe_head: self.wqe_head.add(slot).wrapping_sub(first),
                head: first,
                idx: u64::from(self.cur_post as u16) << 40,
            }
        }
    }

    /// Moves the producer counters past a WQE of `bbs` BBs written
    /// elsewhere (the general path's).
    #[inline(always)]
    pub(crate) fn skip(&mut self, bbs: u32) {
        self.cur_post = self.cur_post.wrapping_add(bbs);
        self.head = self.head.wrapping_add(1);
    }
}

/// Where a run of a [`ChainCursor`] or a [`BatchCursor`] stands: the
/// next BB, the bookkeeping arrays (offset so that the WR counter indexes
/// them), the WR counter and the next WQE index (bits 40..56 of a control
/// segment's first word).
struct RunPos {
    bb: *mut u8,
    wrid: *const AtomicU64,
    wqe_head: *const AtomicU32,
    head: usize,
    idx: u64,
}

impl RunPos {
    /// Writes the leading requests of `reqs` that have `opcode` (whose
    /// entry is `op`: with a remote-address segment if `RADDR`, with
    /// immediate data if `IMM`) and the chain loop takes, one BB each
    /// from `self.bb` on; returns how many.
    ///
    /// # Safety
    /// `self.bb` and the `reqs.len() - 1` BBs after it are inside the
    /// ring, the caller's to write; the bookkeeping entries the WR
    /// counter indexes for as many requests are inside their arrays.
    #[inline(always)]
    unsafe fn write<R: SendRequest, const RADDR: bool, const IMM: bool>(
        &mut self,
        reqs: &[R],
        opcode: WrOpcode,
        op: ChainOp,
        flags: &[u32; 8],
    ) -> usize {
        let start = self.head;
        // The control segment's first word, its index counted up.
        let mut lo = op.ctrl_lo | self.idx;
        for wr in reqs {
            let Some(sge) = wr.lone_sge() else { break };
            if wr.opcode() != opcode {
                break;
            }
            let (addr, word, len) = sge_words(sge);
            // `len` in 1..=2^31 exactly when its negation is negative:
            // 0 (no data segment) and more than `MAX_MSG` (refused) are
            // the general path's.
            if (len.wrapping_neg() as i32) >= 0 {
                break;
            }
            let bb = self.bb;
            let hi = if IMM {
                word_pair(
                    flags[(wr.send_flags().bits() & 7) as usize],
                    wr.imm_data().to_be(),
                )
            } else {
                word_pair(flags[(wr.send_flags().bits() & 7) as usize], 0)
            };
            // SAFETY: `bb` is a BB the caller lets us write (see above),
            // 64-byte aligned; each store is an aligned word of it, at
            // most 48 bytes in (control, remote address, data segment;
            // the offsets are asserted with `BatchCursor`'s). The
            // bookkeeping entries are the caller's too.
            unsafe {
                let mut seg = bb.add(SEG);
                if RADDR {
                    seg.cast::<u64>().write(wr.remote_addr().to_be());
                    seg.add(8)
                        .cast::<u64>()
                        .write(word_pair(wr.rkey().to_be(), 0));
                    seg = seg.add(SEG);
                }
                seg.cast::<u64>().write(data_lo(word));
                seg.add(8).cast::<u64>().write(addr.to_be());
                bb.cast::<u64>().write(lo.to_be());
                bb.add(8).cast::<u64>().write(hi);
                (*self.wrid.wrapping_add(self.head)).store(wr.wr_id(), Ordering::Relaxed);
                (*self.wqe_head.wrapping_add(self.head)).store(self.head as u32, Ordering::Relaxed);
                self.bb = bb.add(SEND_WQE_BB as usize);
            }
            self.head = self.head.wrapping_add(1);
            lo = lo.wrapping_add(1 << 40);
        }
        let n = self.head.wrapping_sub(start);
        self.idx = self.idx.wrapping_add((n as u64) << 40);
        n
    }
}

/// Writes the control segment at `p` (see [`ctrl_words`]).
///
/// # Safety
/// `p` is a BB of a ring, free for the poster to write.
#[inline(always)]
unsafe fn put_ctrl(
    p: *mut u8,
    cur_post: u32,
    opcode: u8,
    qpn: u32,
    ds: u32,
    fm_ce_se: u8,
    imm: u32,
) {
    // SAFETY: as the caller guarantees; the 16-byte segment is inside the
    // BB and aligned (BBs are 64-byte multiples of a page-aligned ring).
    // Written as whole words (a field-by-field write of `CtrlSeg` takes
    // five stores); `ctrl_words` is `CtrlSeg`'s bytes.
    unsafe {
        let w = ctrl_words(cur_post, opcode, qpn, ds, fm_ce_se, imm);
        p.cast::<[u32; 4]>().write(w);
    }
}

/// The bytes of the control segment [`put_ctrl`] writes, as four native
/// 4-byte words: `CtrlSeg { opmod_idx_opcode: (cur_post & 0xffff) << 8 |
/// opcode, qpn_ds: qpn << 8 | ds, signature: 0, dci_stream_channel_id:
/// 0, fm_ce_se, imm }` (a unit test holds the two equal).
#[inline(always)]
fn ctrl_words(cur_post: u32, opcode: u8, qpn: u32, ds: u32, fm_ce_se: u8, imm: u32) -> [u32; 4] {
    [
        ((cur_post & 0xffff) << 8 | opcode as u32).to_be(),
        (qpn << 8 | ds).to_be(),
        u32::from_ne_bytes([0, 0, 0, fm_ce_se]),
        imm.to_be(),
    ]
}

/// A one-BB WQE being written (see [`SendRing::bb`]).
pub(crate) struct Bb<'r> {
    ring: &'r SendRing,
    /// The BB (the control segment).
    ctrl: *mut u8,
    /// Where a data segment goes: 16 or 32 bytes into the BB.
    seg: *mut u8,
    /// Its index.
    idx: u32,
}

impl Bb<'_> {
    /// The remote-address segment, right after the control segment (a
    /// data segment then goes after it).
    #[inline(always)]
    pub(crate) fn raddr(&mut self, raddr: u64, rkey: u32) {
        // SAFETY: bytes 16..32 of a BB of the ring (aligned), which the
        // poster owns until its doorbell.
        unsafe {
            put_seg!(
                self.ctrl.add(SEG),
                RaddrSeg {
                    raddr: U64::new(raddr),
                    rkey: U32::new(rkey),
                    reserved: U32::ZERO,
                }
            )
        }
        // SAFETY: 32 bytes into the BB.
        self.seg = unsafe { self.ctrl.add(2 * SEG) };
    }

    /// The data segment, after the control segment and the remote
    /// address if any.
    #[inline(always)]
    pub(crate) fn data(&self, byte_count: u32, lkey: u32, addr: u64) {
        // SAFETY: `seg` is 16 or 32 bytes into the 64-byte BB (aligned),
        // which the poster owns until its doorbell.
        unsafe {
            put_seg!(
                self.seg,
                DataSeg {
                    byte_count: U32::new(byte_count),
                    lkey: U32::new(lkey),
                    addr: U64::new(addr),
                }
            )
        }
    }

    /// The control segment from its four words in memory order (what
    /// [`ctrl_words`] computes; a caller may build them from parts it
    /// keeps precomputed).
    #[inline(always)]
    pub(crate) fn ctrl_words(&self, words: [u32; 4]) {
        // SAFETY: a BB of the ring (aligned), which the poster owns until
        // its doorbell.
        unsafe { self.ctrl.cast::<[u32; 4]>().write(words) }
    }

    /// Records the WQE's `wr_id` and WR counter; returns the BB, for a
    /// BlueFlame copy ([`super::uar::BlueFlame::ring_one_bb`]).
    #[inline(always)]
    pub(crate) fn finish(self, wr_id: u64, head: u32) -> OneBb {
        self.ring.record(self.idx, wr_id, head);
        OneBb(self.ctrl)
    }
}

/// A finished one-BB WQE of a ring: 64 readable bytes inside the ring
/// (made only by [`Bb::finish`]).
#[derive(Clone, Copy)]
pub(crate) struct OneBb(*const u8);

impl OneBb {
    /// The BB's first byte.
    #[inline(always)]
    pub(crate) fn as_ptr(self) -> *const u8 {
        self.0
    }
}

/// A WQE of any size being written (see [`SendRing::wqe`]): a cursor that
/// hands out the next 16-byte slot after the control segment, wrapping at
/// the ring's end.
pub(crate) struct Wqe<'r> {
    ring: &'r SendRing,
    /// The first BB (the control segment).
    ctrl: *mut u8,
    /// Where the next segment goes: inside the ring or at its end, at a
    /// 16-byte multiple.
    seg: *mut u8,
    /// The first BB's index.
    idx: u32,
}

impl Wqe<'_> {
    /// The next 16-byte slot (inside the ring: wrapped), and moves past.
    #[inline(always)]
    fn slot(&mut self) -> *mut u8 {
        let p = self.ring.wrap(self.seg);
        // SAFETY: `p` is a 16-byte slot inside the ring; one on is inside
        // or at its end.
        self.seg = unsafe { p.add(SEG) };
        p
    }

    /// The datagram segment (UD): the 48 bytes after the control segment.
    #[inline(always)]
    pub(crate) fn datagram(&mut self, av: prm::Av) {
        // SAFETY: bytes 16..64 of the first BB (aligned), which the poster
        // owns until its doorbell.
        unsafe {
            self.ctrl
                .add(SEG)
                .cast::<DatagramSeg>()
                .write(DatagramSeg { av })
        };
        // SAFETY: the end of the first BB: inside the ring or its end.
        self.seg = unsafe { self.ctrl.add(SEND_WQE_BB as usize) };
    }

    /// A remote-address segment in the next slot.
    #[inline(always)]
    pub(crate) fn raddr(&mut self, raddr: u64, rkey: u32) {
        let p = self.slot();
        // SAFETY: a 16-byte slot inside the ring (aligned), which the
        // poster owns until its doorbell.
        unsafe {
            put_seg!(
                p,
                RaddrSeg {
                    raddr: U64::new(raddr),
                    rkey: U32::new(rkey),
                    reserved: U32::ZERO,
                }
            )
        }
    }

    /// An atomic segment in the next slot.
    #[inline(always)]
    pub(crate) fn atomic(&mut self, swap_add: u64, compare: u64) {
        let p = self.slot();
        // SAFETY: as in `raddr`.
        unsafe {
            p.cast::<AtomicSeg>().write(AtomicSeg {
                swap_add: U64::new(swap_add),
                compare: U64::new(compare),
            })
        }
    }

    /// A data segment in the next slot.
    #[inline(always)]
    pub(crate) fn data(&mut self, byte_count: u32, lkey: u32, addr: u64) {
        let p = self.slot();
        // SAFETY: as in `raddr`.
        unsafe {
            put_seg!(
                p,
                DataSeg {
                    byte_count: U32::new(byte_count),
                    lkey: U32::new(lkey),
                    addr: U64::new(addr),
                }
            )
        }
    }

    /// An inline segment in the next slot: its 4-byte header (`len` bytes
    /// follow) and the payload `bufs` after it, split byte-exactly where
    /// it reaches the ring's end. Leaves the cursor where it was (inline
    /// data ends a WQE).
    #[inline(always)]
    pub(crate) fn inline(&mut self, bufs: &[IoSlice<'_>], len: u32) {
        let p = self.ring.wrap(self.seg);
        // SAFETY: a 16-byte slot inside the ring (aligned), which the
        // poster owns until its doorbell; the header is its first 4 bytes.
        unsafe {
            p.cast::<InlineSeg>().write(InlineSeg {
                byte_count: U32::new(len | prm::INLINE_SEG),
            })
        };
        // SAFETY: inside the slot.
        let mut dst = unsafe { p.add(size_of::<InlineSeg>()) };
        let (start, qend) = (self.ring.start, self.ring.qend);
        for b in bufs {
            let mut src = b.as_ptr();
            let mut left = b.len();
            while left != 0 {
                // SAFETY: `start <= dst < qend` (wrapped below), both in
                // the ring.
                let room = unsafe { qend.offset_from(dst) } as usize;
                let n = left.min(room);
                // SAFETY: `n` bytes fit before `qend`; `src` is a live
                // borrowed slice with `left >= n` bytes that cannot
                // overlap the ring (ring memory is never borrowed).
                unsafe {
                    std::ptr::copy_nonoverlapping(src, dst, n);
                    src = src.add(n);
                    dst = dst.add(n);
                }
                left -= n;
                if dst == qend {
                    dst = start;
                }
            }
        }
    }

    /// The control segment (see [`ctrl_words`]).
    #[inline(always)]
    pub(crate) fn ctrl(
        &self,
        cur_post: u32,
        opcode: u8,
        qpn: u32,
        ds: u32,
        fm_ce_se: u8,
        imm: u32,
    ) {
        // SAFETY: the WQE's first BB, which the poster owns until its
        // doorbell.
        unsafe { put_ctrl(self.ctrl, cur_post, opcode, qpn, ds, fm_ce_se, imm) }
    }

    /// Records the WQE's `wr_id` and WR counter.
    #[inline(always)]
    pub(crate) fn finish(self, wr_id: u64, head: u32) {
        self.ring.record(self.idx, wr_id, head);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::IntoBytes;

    /// `ctrl_words` is the byte image of the `CtrlSeg` it stands for.
    #[test]
    fn ctrl_words_are_the_control_segment() {
        for (cur_post, opcode, qpn, ds, fm_ce_se, imm) in [
            (0u32, 0x0au8, 0x12_3456u32, 2u32, 8u8, 0u32),
            (0x1_fffe, 0x08, 0xff_ffff, 3, 0x0a, 0xdead_beef),
            (7, 0x10, 1, 63, 0x80, 1),
        ] {
            let seg = CtrlSeg {
                opmod_idx_opcode: U32::new((cur_post & 0xffff) << 8 | opcode as u32),
                qpn_ds: U32::new(qpn << 8 | ds),
                signature: 0,
                dci_stream_channel_id: U16::ZERO,
                fm_ce_se,
                imm: U32::new(imm),
            };
            let w = ctrl_words(cur_post, opcode, qpn, ds, fm_ce_se, imm);
            assert_eq!(w.as_bytes(), seg.as_bytes());
        }
    }
}
