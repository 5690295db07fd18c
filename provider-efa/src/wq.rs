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

/// One request slot: the `wr_id` it holds while busy.
#[derive(Debug, Default)]
struct Slot {
    wr_id: AtomicU64,
    busy: AtomicBool,
}

/// One queue's request slots.
#[derive(Debug)]
pub(crate) struct Slots {
    slots: Box<[Slot]>,
    /// Requests completed (wrapping).
    completed: AtomicU32,
}

impl Slots {
    /// `n` slots (at most 65536: request ids are 16-bit).
    pub(crate) fn new(n: u32) -> Slots {
        let n = n.min(1 << 16) as usize;
        Slots {
            slots: (0..n).map(|_| Slot::default()).collect(),
            completed: AtomicU32::new(0),
        }
    }

    /// Slots in all.
    #[inline(always)]
    pub(crate) fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Requests completed so far (wrapping; acquire: the slots they freed
    /// are seen free).
    #[inline(always)]
    pub(crate) fn completed(&self) -> u32 {
        self.completed.load(Ordering::Acquire)
    }

    /// Takes a free slot at or after `from` for `wr_id`; its index. `None`
    /// if every slot is busy (the poster's count prevents it).
    #[inline(always)]
    pub(crate) fn take(&self, from: u32, wr_id: u64) -> Option<u16> {
        let n = self.slots.len();
        let first = if (from as usize) < n {
            from as usize
        } else {
            0
        };
        // The common case: completions in order leave the next slot free.
        let (i, slot) = match self.slots.get(first) {
            Some(s) if !s.busy.load(Ordering::Acquire) => (first, s),
            Some(_) => self.find_free(first)?,
            None => return None,
        };
        slot.wr_id.store(wr_id, Ordering::Relaxed);
        slot.busy.store(true, Ordering::Relaxed);
        Some(i as u16)
    }

    /// The first free slot after `first`, wrapping (the slow path of
    /// [`Slots::take`]: completions out of order).
    #[cold]
    fn find_free(&self, first: usize) -> Option<(usize, &Slot)> {
        let n = self.slots.len();
        (1..n)
            .map(|k| (first + k) % n)
            .map(|i| (i, &self.slots[i]))
            .find(|(_, s)| !s.busy.load(Ordering::Acquire))
    }

    /// Gives back a slot taken but not posted (its request was refused).
    pub(crate) fn untake(&self, i: u16) {
        if let Some(s) = self.slots.get(usize::from(i)) {
            s.busy.store(false, Ordering::Relaxed);
        }
    }

    /// Completes the request in slot `i`: its `wr_id`, the slot freed.
    /// `None` for an index past the slots or a slot not in use (an entry
    /// the device should not have written).
    #[inline(always)]
    pub(crate) fn complete(&self, i: u16) -> Option<u64> {
        let slot = self.slots.get(usize::from(i))?;
        if !slot.busy.load(Ordering::Relaxed) {
            return None;
        }
        let wr_id = slot.wr_id.load(Ordering::Relaxed);
        slot.busy.store(false, Ordering::Release);
        self.completed.fetch_add(1, Ordering::Release);
        Some(wr_id)
    }

    /// Frees every slot (the QP was reset: the device forgot its work).
    pub(crate) fn reset(&self, posted: u32) {
        for s in self.slots.iter() {
            s.busy.store(false, Ordering::Relaxed);
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
