//! Completions a reset QP left in its CQs, which polls then drop.
//!
//! A QP moved to RESET may still have completions in its CQs: the flushed
//! work requests of its error state, written by the kernel before RESET
//! returned. Once the QP is used again they would complete the work of its
//! next life (a poll after RESET -> RTS reads a stale `WR_FLUSH_ERR` where
//! the program waits for its new send). libmlx5 removes them at RESET;
//! rxe's kernel and rdma-core's librxe do not. Here the reset marks them
//! instead: `CqShared::reset_qp` records the QP's number and the ring's
//! producer index at that moment, and every completion of that QP before
//! that index is dropped by `StaleFilter` when it is polled. The kernel
//! writes nothing more for a QP in RESET, so no completion the QP makes
//! after it is touched.
//!
//! The poll's cost while nothing is marked is one atomic load; the list
//! behind a mutex is taken only while a mark is pending.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rverbs_abi::wr::Wc;
use rverbs_provider::SharedCq;

use crate::queue::Queue;

/// What a CQ's QPs keep of it ([`rverbs_provider::Provider::CqShared`]):
/// its ring's producer index and the marks of reset QPs.
#[derive(Debug, Clone)]
pub struct CqShared(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    /// Whether `marks` holds any (read by every poll).
    pending: AtomicBool,
    marks: Mutex<Marks>,
}

/// The ring being produced into and the marks on it.
#[derive(Debug)]
struct Marks {
    /// `None` once a resize lost the ring.
    ring: Option<Arc<Queue>>,
    /// Each reset QP's number and the (masked) producer index before
    /// which its completions are stale.
    list: Vec<Mark>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mark {
    qpn: u32,
    until: u32,
}

impl SharedCq for CqShared {}

impl CqShared {
    /// For a CQ whose ring is `ring`.
    pub(crate) fn new(ring: Arc<Queue>) -> CqShared {
        CqShared(Arc::new(Shared {
            pending: AtomicBool::new(false),
            marks: Mutex::new(Marks {
                ring: Some(ring),
                list: Vec::new(),
            }),
        }))
    }

    /// Tests: how many marks are pending.
    #[cfg(test)]
    pub(crate) fn marked(&self) -> usize {
        self.marks().list.len()
    }

    /// Whether `self` and `other` are the same CQ's.
    pub(crate) fn same(&self, other: &CqShared) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    fn marks(&self) -> MutexGuard<'_, Marks> {
        // A panic while holding it leaves the list consistent (each
        // change is one push or retain).
        self.0.marks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// QP `qpn` was just reset (MODIFY_QP to RESET succeeded): its
    /// completions now in the ring are stale.
    pub(crate) fn reset_qp(&self, qpn: u32) {
        let mut m = self.marks();
        let Some(ring) = &m.ring else { return };
        let until = ring.producer_now() & ring.mask();
        if until == ring.consumer_now() & ring.mask() {
            return; // nothing of anyone's in the ring
        }
        // A second reset of the same QP before a poll moves its mark on.
        m.list.retain(|k| k.qpn != qpn);
        m.list.push(Mark { qpn, until });
        self.0.pending.store(true, Ordering::Release);
    }

    /// The CQ was resized into `ring` (or lost its ring, `None`); the
    /// kernel copied the completions from the old consumer index
    /// `old_cons` on to the new ring from index 0, so each mark moves by
    /// as much. Called with the CQ's owner in (`&mut`), no poll running.
    pub(crate) fn resized(&self, ring: Option<Arc<Queue>>, old_cons: u32, old_mask: u32) {
        let mut m = self.marks();
        let new_mask = ring.as_ref().map_or(0, |r| r.mask());
        m.list.retain_mut(|k| {
            let moved = k.until.wrapping_sub(old_cons) & old_mask;
            k.until = moved & new_mask;
            moved != 0 && moved <= new_mask
        });
        if ring.is_none() {
            m.list.clear();
        }
        m.ring = ring;
        self.0.pending.store(!m.list.is_empty(), Ordering::Release);
    }

    /// The filter for one poll, if any mark is pending (one load when
    /// none is).
    #[inline(always)]
    pub(crate) fn filter(&self) -> Option<StaleFilter<'_>> {
        if !self.0.pending.load(Ordering::Acquire) {
            return None;
        }
        Some(StaleFilter {
            shared: &self.0,
            marks: self.marks(),
        })
    }
}

/// The marks, held for one poll ([`CqShared::filter`]).
#[derive(Debug)]
pub(crate) struct StaleFilter<'a> {
    shared: &'a Shared,
    marks: MutexGuard<'a, Marks>,
}

impl StaleFilter<'_> {
    /// Before the completion at ring index `index` is read: the marks
    /// that end there are done.
    pub(crate) fn at(&mut self, index: u32) {
        self.marks.list.retain(|k| k.until != index);
    }

    /// Whether `wc`, just read, is a stale completion of a reset QP.
    pub(crate) fn drops(&self, wc: &Wc) -> bool {
        self.marks.list.iter().any(|k| k.qpn == wc.qp_num)
    }
}

impl Drop for StaleFilter<'_> {
    fn drop(&mut self) {
        self.shared
            .pending
            .store(!self.marks.list.is_empty(), Ordering::Release);
    }
}
