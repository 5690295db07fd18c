//! State shared between the posting side of a work queue (a QP's SQ or RQ,
//! an SRQ) and the CQ that completes its WQEs: the `wr_id` of every posted
//! WQE, and how far completions have retired the queue. A CQE names its
//! queue by the QP's user index; the context's table maps it here.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::hw::slots::Slots;
use rverbs_abi::wr::Wc;

/// A send queue's completion bookkeeping, indexed by the first basic
/// block of a WQE (`cur_post & (wqe_cnt - 1)`).
///
/// The poster stores `wrid` and `wqe_head` (its WR counter at that WR)
/// with Relaxed before ringing the doorbell; the CQ, on a requester CQE
/// with `wqe_counter` c, reads `wrid[c & (wqe_cnt-1)]` and publishes
/// `tail = wqe_head[idx] + 1` with Release; the poster checks overflow
/// with `head - tail.load(Acquire) + n > max_post`.
#[derive(Debug)]
pub(crate) struct SqShared {
    /// `wr_id` per basic block where a WQE starts.
    wrid: Slots<AtomicU64>,
    /// The poster's WR counter at the WQE starting there.
    wqe_head: Slots<AtomicU32>,
    /// WR counter retired by completions.
    tail: AtomicU32,
    /// Basic blocks in the ring (a power of two, or 0 for no SQ).
    wqe_cnt: u32,
}

impl SqShared {
    /// Bookkeeping for a ring of `wqe_cnt` basic blocks.
    pub(crate) fn new(wqe_cnt: u32) -> Self {
        SqShared {
            wrid: Slots::new(wqe_cnt),
            wqe_head: Slots::new(wqe_cnt),
            tail: AtomicU32::new(0),
            wqe_cnt,
        }
    }

    /// Retires the WQE whose control segment had index `wqe_counter`
    /// (and every unsignaled WQE before it); returns its `wr_id`. `None`
    /// if the queue has no ring (a CQE the device should not produce).
    #[inline]
    pub(crate) fn complete(&self, wqe_counter: u16) -> Option<u64> {
        if self.wqe_cnt == 0 {
            return None;
        }
        // Both tables have `wqe_cnt` entries: one index for both.
        let wr_id = self.wrid.at(u32::from(wqe_counter)).load(Ordering::Relaxed);
        let head = self
            .wqe_head
            .at(u32::from(wqe_counter))
            .load(Ordering::Relaxed);
        self.tail.store(head.wrapping_add(1), Ordering::Release);
        Some(wr_id)
    }

    /// The WR counter completions have retired to (Acquire: the CQ
    /// consumed the WQEs before publishing it).
    #[inline(always)]
    pub(crate) fn retired(&self) -> u32 {
        self.tail.load(Ordering::Acquire)
    }

    /// Starts over (RESET): nothing retired.
    pub(crate) fn reset(&self) {
        self.tail.store(0, Ordering::Release);
    }

    /// Addresses for the queue directory: the `wr_id` array, the retired
    /// WR counter, the WR-counter array.
    pub(crate) fn addrs(&self) -> (u64, u64, u64) {
        (
            self.wrid.as_ptr() as u64,
            std::ptr::addr_of!(self.tail) as u64,
            self.wqe_head.as_ptr() as u64,
        )
    }

    /// The `wr_id` and WR-counter arrays (at least one entry each), which
    /// the send ring stores into (Relaxed, before its doorbell).
    pub(crate) fn slots(&self) -> (&[AtomicU64], &[AtomicU32]) {
        (&self.wrid, &self.wqe_head)
    }

    /// Sets the `wr_id` and WR counter of slot `i` (tests).
    #[cfg(test)]
    pub(crate) fn set(&self, i: usize, wr_id: u64, head: u32) {
        self.wrid[i].store(wr_id, Ordering::Relaxed);
        self.wqe_head[i].store(head, Ordering::Relaxed);
    }

    /// Sets the `wr_id` of slot `i` (tests).
    #[cfg(test)]
    pub(crate) fn set_wrid(&self, i: usize, wr_id: u64) {
        self.wrid[i].store(wr_id, Ordering::Relaxed);
    }

    /// Retires up to WR counter `tail`, as a CQ would (tests).
    #[cfg(test)]
    pub(crate) fn retire_to(&self, tail: u32) {
        self.tail.store(tail, Ordering::Release);
    }

    /// The `wr_id` of slot `i` (tests).
    #[cfg(test)]
    pub(crate) fn wrid(&self, i: usize) -> u64 {
        self.wrid[i].load(Ordering::Relaxed)
    }

    /// The WR counter of slot `i` (tests).
    #[cfg(test)]
    pub(crate) fn wqe_head(&self, i: usize) -> u32 {
        self.wqe_head[i].load(Ordering::Relaxed)
    }
}

/// A receive queue's bookkeeping: completions arrive in posting order,
/// so the CQ takes `wrid[tail & (wqe_cnt-1)]` and stores `tail + 1`
/// (Release); the poster stores `wrid` (Relaxed) before its doorbell.
#[derive(Debug)]
pub(crate) struct RqShared {
    /// `wr_id` per WQE slot.
    wrid: Slots<AtomicU64>,
    /// WQEs completed.
    tail: AtomicU32,
    /// WQEs in the ring (a power of two, or 0 for no RQ).
    wqe_cnt: u32,
}

impl RqShared {
    /// Bookkeeping for a ring of `wqe_cnt` WQEs.
    pub(crate) fn new(wqe_cnt: u32) -> Self {
        RqShared {
            wrid: Slots::new(wqe_cnt),
            tail: AtomicU32::new(0),
            wqe_cnt,
        }
    }

    /// Retires the oldest outstanding WQE; returns its `wr_id`. `None`
    /// if the queue has no ring. Only the CQ (one consumer) calls this.
    #[inline]
    pub(crate) fn complete(&self) -> Option<u64> {
        if self.wqe_cnt == 0 {
            return None;
        }
        let tail = self.tail.load(Ordering::Relaxed);
        let wr_id = self.wrid.at(tail).load(Ordering::Relaxed);
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        Some(wr_id)
    }

    /// The WQE counter completions have retired to (Acquire: the CQ
    /// consumed the WQEs before publishing it).
    #[inline(always)]
    pub(crate) fn retired(&self) -> u32 {
        self.tail.load(Ordering::Acquire)
    }

    /// Starts over (RESET): nothing retired.
    pub(crate) fn reset(&self) {
        self.tail.store(0, Ordering::Release);
    }

    /// Addresses for the queue directory: the `wr_id` array and the
    /// retired WQE counter.
    pub(crate) fn addrs(&self) -> (u64, u64) {
        (
            self.wrid.as_ptr() as u64,
            std::ptr::addr_of!(self.tail) as u64,
        )
    }

    /// The `wr_id` array (at least one entry), which the receive ring
    /// stores into (Relaxed, before its doorbell record).
    pub(crate) fn slots(&self) -> &[AtomicU64] {
        &self.wrid
    }

    /// Sets the `wr_id` of slot `i` (tests).
    #[cfg(test)]
    pub(crate) fn set_wrid(&self, i: usize, wr_id: u64) {
        self.wrid[i].store(wr_id, Ordering::Relaxed);
    }

    /// The `wr_id` of slot `i` (tests).
    #[cfg(test)]
    pub(crate) fn wrid(&self, i: usize) -> u64 {
        self.wrid[i].load(Ordering::Relaxed)
    }

    /// Retires up to WQE counter `tail`, as a CQ would (tests).
    #[cfg(test)]
    pub(crate) fn retire_to(&self, tail: u32) {
        self.tail.store(tail, Ordering::Release);
    }
}

/// An SRQ's bookkeeping: `wr_id` per WQE index and a bitmap of WQEs the
/// CQ has completed and the poster has not yet linked back into its free
/// list (only the poster edits the WQE list).
#[derive(Debug)]
pub(crate) struct SrqShared {
    /// `wr_id` per WQE index.
    wrid: Box<[AtomicU64]>,
    /// Bit i set: WQE i completed, waiting to be reclaimed.
    freed: Box<[AtomicU64]>,
    /// Receives completed (a counter the poster compares with its own).
    completed: AtomicU32,
    /// The poster's list ends for an outside reader (the queue
    /// directory): next WQE to post in the low 32 bits, the list's last
    /// WQE in the high 32. Stored once per post call, never read here.
    list: AtomicU64,
}

impl SrqShared {
    /// Bookkeeping for `max` WQEs.
    pub(crate) fn new(max: u32) -> Self {
        SrqShared {
            wrid: (0..max).map(|_| AtomicU64::new(0)).collect(),
            freed: (0..(max as usize).div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            completed: AtomicU32::new(0),
            list: AtomicU64::new(0),
        }
    }

    /// Publishes the poster's free-list ends (for the queue directory's
    /// reader only: one Relaxed store per post call).
    #[inline(always)]
    pub(crate) fn publish_list(&self, head: u32, tail: u32) {
        self.list
            .store(u64::from(head) | u64::from(tail) << 32, Ordering::Relaxed);
    }

    /// Addresses for the queue directory: the `wr_id` array, the
    /// completed counter, the published list ends, the completed bitmap.
    pub(crate) fn addrs(&self) -> (u64, u64, u64, u64) {
        (
            self.wrid.as_ptr() as u64,
            std::ptr::addr_of!(self.completed) as u64,
            std::ptr::addr_of!(self.list) as u64,
            self.freed.as_ptr() as u64,
        )
    }

    /// Retires WQE `wqe_counter`; returns its `wr_id`, or `None` if the
    /// index is outside the SRQ (a CQE the device should not produce).
    #[inline]
    pub(crate) fn complete(&self, wqe_counter: u16) -> Option<u64> {
        let i = wqe_counter as usize;
        let wr_id = self.wrid.get(i)?.load(Ordering::Relaxed);
        self.freed[i / 64].fetch_or(1 << (i % 64), Ordering::Release);
        self.completed.fetch_add(1, Ordering::Release);
        Some(wr_id)
    }

    /// Records the `wr_id` of WQE `i` (the poster, before its doorbell).
    /// Out of range: nothing (the SRQ never posts such an index).
    #[inline(always)]
    pub(crate) fn post(&self, i: u32, wr_id: u64) {
        if let Some(w) = self.wrid.get(i as usize) {
            w.store(wr_id, Ordering::Relaxed);
        }
    }

    /// Words of the completed-WQE bitmap.
    pub(crate) fn freed_words(&self) -> usize {
        self.freed.len()
    }

    /// Takes word `w` of the completed-WQE bitmap (bit i: WQE
    /// `64 * w + i` completed), clearing it (Acquire: pairs with the
    /// CQ's marking).
    pub(crate) fn take_freed(&self, w: usize) -> u64 {
        self.freed[w].swap(0, Ordering::Acquire)
    }

    /// Receives completed so far.
    pub(crate) fn completed(&self) -> u32 {
        self.completed.load(Ordering::Acquire)
    }

    /// The `wr_id` of WQE `i` (tests).
    #[cfg(test)]
    pub(crate) fn wrid(&self, i: usize) -> u64 {
        self.wrid[i].load(Ordering::Relaxed)
    }

    /// Word `w` of the completed bitmap, left as it is (tests).
    #[cfg(test)]
    pub(crate) fn freed(&self, w: usize) -> u64 {
        self.freed[w].load(Ordering::Acquire)
    }
}

/// What a CQ needs to know about one QP: its number and the bookkeeping
/// of its queues.
#[derive(Debug)]
pub(crate) struct QpEntry {
    /// The QP number (reported as `qp_num`).
    pub(crate) qpn: u32,
    /// `qp_num` and a zero `ex`, the work completion's word that holds
    /// them ([`Wc::pair`]).
    pub(crate) qpn_word: u64,
    /// Send queue bookkeeping (a QP without send queue has one of no
    /// ring, whose completions report nothing).
    pub(crate) sq: Arc<SqShared>,
    /// Receive queue bookkeeping (unused when `srq` is set; without a
    /// receive queue, one of no ring).
    pub(crate) rq: Arc<RqShared>,
    /// The SRQ the QP receives from.
    pub(crate) srq: Option<Arc<SrqShared>>,
}

impl QpEntry {
    /// An entry for QP `qpn`.
    pub(crate) fn new(
        qpn: u32,
        sq: Arc<SqShared>,
        rq: Arc<RqShared>,
        srq: Option<Arc<SrqShared>>,
    ) -> Self {
        QpEntry {
            qpn,
            qpn_word: Wc::pair(0, qpn),
            sq,
            rq,
            srq,
        }
    }

    /// An entry with only some queues (e.g. a send-only QP).
    #[cfg(test)]
    pub(crate) fn with_queues(
        qpn: u32,
        sq: Option<Arc<SqShared>>,
        rq: Option<Arc<RqShared>>,
        srq: Option<Arc<SrqShared>>,
    ) -> Self {
        QpEntry::new(
            qpn,
            sq.unwrap_or_else(|| Arc::new(SqShared::new(0))),
            rq.unwrap_or_else(|| Arc::new(RqShared::new(0))),
            srq,
        )
    }
}

/// One table row: user index (or, in a CQ of CQE version 0, QP number)
/// and entry.
pub(crate) type Row = rverbs_provider::table::Row<QpEntry>;

/// The context's user-index table (`rverbs_provider::table`).
pub(crate) type Table = rverbs_provider::table::Table<QpEntry>;

/// Looks `uidx` up in a sorted snapshot.
#[cfg(test)]
pub(crate) use rverbs_provider::table::lookup;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sq_complete_retires_up_to_head() {
        let sq = SqShared::new(8);
        sq.set(5, 55, 41);
        assert_eq!(sq.complete(13), Some(55)); // 13 & 7 == 5
        assert_eq!(sq.retired(), 42);
        assert_eq!(SqShared::new(0).complete(0), None);
    }

    #[test]
    fn rq_complete_is_positional() {
        let rq = RqShared::new(2);
        rq.set_wrid(0, 10);
        rq.set_wrid(1, 11);
        assert_eq!(rq.complete(), Some(10));
        assert_eq!(rq.complete(), Some(11));
        assert_eq!(rq.complete(), Some(10));
        assert_eq!(rq.retired(), 3);
    }

    #[test]
    fn srq_complete_sets_freed_bit() {
        let s = SrqShared::new(128);
        s.post(70, 7);
        assert_eq!(s.complete(70), Some(7));
        assert_eq!(s.freed(1), 1 << 6);
        assert_eq!(s.complete(128), None);
    }

    #[test]
    fn table_generation_and_lookup() {
        let t = Table::default();
        let g0 = t.generation();
        let e = Arc::new(QpEntry::with_queues(9, None, None, None));
        t.insert(5, Arc::clone(&e));
        t.insert(2, Arc::clone(&e));
        assert_ne!(t.generation(), g0);
        let (g, rows) = t.snapshot();
        assert_eq!(g, t.generation());
        assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), vec![2, 5]);
        assert_eq!(lookup(&rows, 5).map(|e| e.qpn), Some(9));
        assert!(lookup(&rows, 3).is_none());
        t.remove(5);
        assert!(!t.contains(5));
        assert!(t.contains(2));
    }
}
