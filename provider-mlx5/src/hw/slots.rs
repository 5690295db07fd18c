//! Per-WQE bookkeeping tables (`wr_id`s, WR counters) indexed by a ring
//! counter masked to the table, with the bound proven once at creation
//! instead of tested on every completion.

use std::ops::Deref;

/// A table of at least one entry; [`Slots::at`] masks a counter into it.
#[derive(Debug)]
pub(crate) struct Slots<A> {
    /// `mask + 1` entries.
    items: Box<[A]>,
    /// One less than the number of entries.
    mask: u32,
}

impl<A: Default> Slots<A> {
    /// `n` default entries, at least one (a queue without a ring still
    /// gets a slot, so that ring code may mask any index into it). `n`
    /// need not be a power of two for [`Slots::at`] to stay inside; for
    /// ring indexes it is one.
    pub(crate) fn new(n: u32) -> Self {
        let n = n.max(1);
        Slots {
            items: (0..n).map(|_| A::default()).collect(),
            mask: n - 1,
        }
    }
}

impl<A> Slots<A> {
    /// The entry of ring counter `counter`: `counter & (entries - 1)`.
    #[inline(always)]
    pub(crate) fn at(&self, counter: u32) -> &A {
        let i = (counter & self.mask) as usize;
        // SAFETY: `i <= mask` (a masked value is at most its mask) and
        // `items` has `mask + 1` entries (`new` made both, and neither
        // changes after), so `i` is in bounds.
        unsafe { self.items.get_unchecked(i) }
    }
}

impl<A> Deref for Slots<A> {
    type Target = [A];

    fn deref(&self) -> &[A] {
        &self.items
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    /// Every counter lands inside, on the entry its low bits name, for
    /// power-of-two sizes, other sizes and the empty queue's one slot.
    #[test]
    fn at_masks_into_the_table() {
        for n in [0u32, 1, 2, 3, 8, 100] {
            let s: Slots<AtomicU32> = Slots::new(n);
            assert_eq!(s.len() as u32, n.max(1));
            for c in [0u32, 1, 7, 8, 9, 255, u32::MAX] {
                let i = (c & (n.max(1) - 1)) as usize;
                s.at(c).store(c, Ordering::Relaxed);
                assert_eq!(s[i].load(Ordering::Relaxed), c, "n {n} counter {c}");
            }
        }
    }
}
