//! What a QP's queues share with the CQs that complete them: the `wr_id`
//! of every posted request, in a slot whose index the descriptor carries
//! as its request id, and how many have completed.
//!
//! SRD completes out of order, so slots are not a ring: the poster takes
//! any free one (searching from where it last took one, which finds the
//! next at once while completions come in order), stores the `wr_id` and
//! marks the slot busy before the doorbell; the CQ reads the `wr_id`,
//! frees the slot and counts the completion (release). The poster counts
//! what it posted and refuses a request once as many are outstanding as
//! the queue has slots, so a free slot always exists when it looks.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// One queue's request slots.
#[derive(Debug)]
pub(crate) struct Slots {
    wr_id: Box<[AtomicU64]>,
    busy: Box<[AtomicBool]>,
    /// Requests completed (wrapping).
    completed: AtomicU32,
}

impl Slots {
    /// `n` slots (at most 65536: request ids are 16-bit).
    pub(crate) fn new(n: u32) -> Slots {
        let n = n.min(1 << 16) as usize;
        Slots {
            wr_id: (0..n).map(|_| AtomicU64::new(0)).collect(),
            busy: (0..n).map(|_| AtomicBool::new(false)).collect(),
            completed: AtomicU32::new(0),
        }
    }

    /// Slots in all.
    pub(crate) fn len(&self) -> u32 {
        self.wr_id.len() as u32
    }

    /// Requests completed so far (wrapping; acquire: the slots they freed
    /// are seen free).
    pub(crate) fn completed(&self) -> u32 {
        self.completed.load(Ordering::Acquire)
    }

    /// Takes a free slot at or after `from` for `wr_id`; its index. `None`
    /// if every slot is busy (the poster's count prevents it).
    #[inline]
    pub(crate) fn take(&self, from: u32, wr_id: u64) -> Option<u16> {
        let n = self.wr_id.len();
        let first = if (from as usize) < n {
            from as usize
        } else {
            0
        };
        // The common case: completions in order leave the next slot free.
        let i = if self.busy.get(first)?.load(Ordering::Acquire) {
            (1..n)
                .map(|k| (first + k) % n)
                .find(|&i| !self.busy[i].load(Ordering::Acquire))?
        } else {
            first
        };
        self.wr_id[i].store(wr_id, Ordering::Relaxed);
        self.busy[i].store(true, Ordering::Relaxed);
        Some(i as u16)
    }

    /// Gives back a slot taken but not posted (its request was refused).
    pub(crate) fn untake(&self, i: u16) {
        if let Some(b) = self.busy.get(usize::from(i)) {
            b.store(false, Ordering::Relaxed);
        }
    }

    /// Completes the request in slot `i`: its `wr_id`, the slot freed.
    /// `None` for an index past the slots or a slot not in use (an entry
    /// the device should not have written).
    pub(crate) fn complete(&self, i: u16) -> Option<u64> {
        let i = usize::from(i);
        let busy = self.busy.get(i)?;
        if !busy.load(Ordering::Relaxed) {
            return None;
        }
        let wr_id = self.wr_id[i].load(Ordering::Relaxed);
        busy.store(false, Ordering::Release);
        self.completed.fetch_add(1, Ordering::Release);
        Some(wr_id)
    }

    /// Frees every slot (the QP was reset: the device forgot its work).
    pub(crate) fn reset(&self, posted: u32) {
        for b in self.busy.iter() {
            b.store(false, Ordering::Relaxed);
        }
        self.completed.store(posted, Ordering::Release);
    }
}

/// A QP's entry in the context's table.
#[derive(Debug)]
pub(crate) struct QpEntry {
    pub(crate) sq: Slots,
    pub(crate) rq: Slots,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_complete_out_of_order() {
        let s = Slots::new(4);
        assert_eq!(s.take(0, 10), Some(0));
        assert_eq!(s.take(1, 11), Some(1));
        assert_eq!(s.take(2, 12), Some(2));
        assert_eq!(s.complete(1), Some(11));
        assert_eq!(s.complete(1), None, "a slot completes once");
        assert_eq!(s.take(3, 13), Some(3));
        assert_eq!(s.take(0, 14), Some(1), "the freed slot is found");
        assert_eq!(s.take(0, 15), None, "all busy");
        assert_eq!(s.complete(9), None, "past the slots");
        assert_eq!(s.completed(), 1);
        s.untake(3);
        assert_eq!(s.take(3, 16), Some(3));
        s.reset(7);
        assert_eq!(s.completed(), 7);
        assert_eq!(s.take(0, 1), Some(0));
    }
}
