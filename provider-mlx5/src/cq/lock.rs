//! Who may consume or move a CQ's CQEs at a time: its owner (a poll or a
//! resize, through `&mut Cq`, so one thread) or a QP cleaning its CQEs
//! out on reset or destroy (from any thread, rarely).
//!
//! A Dekker-style handshake on two words, `busy` (the owner is in) and
//! `cleaning` (its [`CLEANER`] bit: a cleaner wants in or is in): each
//! side stores its flag, then reads the other's. The store-then-load order
//! comes from an asymmetric fence pair ([`membarrier`]): the owner's side,
//! on every poll, is a plain store, a compiler fence, a load and one test,
//! with no atomic read-modify-write and no fence instruction; the cleaner
//! pays a `membarrier(2)` system call. Where the kernel does not offer
//! that, `cleaning` carries [`FULL_FENCES`] for good: every owner entry
//! then takes the out-of-line path, and both sides use full fences.

use std::sync::atomic::{fence, Ordering};

use super::Mem;
use crate::hw::membarrier;

/// `cleaning`: a cleaner wants in or is in.
const CLEANER: u8 = 1;
/// `cleaning`: no asymmetric fences in this process; both sides fence.
pub(super) const FULL_FENCES: u8 = 2;

impl Mem {
    /// The owner's way in (poll, resize): afterwards no cleaner is in
    /// until [`Mem::owner_exit`].
    #[inline(always)]
    pub(super) fn owner_enter(&self) {
        self.busy.store(true, Ordering::Relaxed);
        membarrier::light();
        // Acquire: if a cleaner was in and left, its moves are seen.
        if self.cleaning.load(Ordering::Acquire) != 0 {
            self.owner_slow();
        }
    }

    /// [`Mem::owner_enter`] if no cleaner wants in and fences are
    /// asymmetric (`cleaning` clear): `true` with the owner in; `false`,
    /// out again, otherwise (then call [`Mem::owner_enter`]).
    #[inline(always)]
    pub(super) fn owner_try_enter(&self) -> bool {
        self.busy.store(true, Ordering::Relaxed);
        membarrier::light();
        if self.cleaning.load(Ordering::Acquire) != 0 {
            self.busy.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// [`Mem::owner_enter`] when `cleaning` is not clear: with full
    /// fences, fences and looks again; while a cleaner wants in or is in,
    /// steps back until it is done (cleaners do bounded work and never
    /// block).
    #[cold]
    #[inline(never)]
    fn owner_slow(&self) {
        loop {
            if self.cleaning.load(Ordering::Relaxed) & FULL_FENCES != 0 {
                fence(Ordering::SeqCst);
            }
            if self.cleaning.load(Ordering::Acquire) & CLEANER == 0 {
                return;
            }
            self.busy.store(false, Ordering::Release);
            while self.cleaning.load(Ordering::Relaxed) & CLEANER != 0 {
                std::thread::yield_now();
            }
            self.busy.store(true, Ordering::Relaxed);
            membarrier::light();
        }
    }

    /// The owner's way out.
    #[inline(always)]
    pub(super) fn owner_exit(&self) {
        self.busy.store(false, Ordering::Release);
    }

    /// A cleaner's way in: afterwards neither the owner nor another
    /// cleaner is in until [`Mem::cleaner_exit`].
    pub(super) fn cleaner_enter(&self) {
        // One cleaner at a time (among themselves an ordinary spin lock).
        let full = loop {
            let now = self.cleaning.load(Ordering::Relaxed);
            if now & CLEANER == 0
                && self
                    .cleaning
                    .compare_exchange(now, now | CLEANER, Ordering::SeqCst, Ordering::Relaxed)
                    .is_ok()
            {
                break now & FULL_FENCES != 0;
            }
            std::thread::yield_now();
        };
        if full {
            fence(Ordering::SeqCst);
        } else {
            membarrier::heavy();
        }
        // The owner either saw `cleaning` (and steps back) or is seen
        // here; Acquire: its consumer index and moves are seen.
        while self.busy.load(Ordering::Acquire) {
            std::thread::yield_now();
        }
    }

    /// A cleaner's way out.
    pub(super) fn cleaner_exit(&self) {
        self.cleaning.fetch_and(!CLEANER, Ordering::Release);
    }

    /// Tests: the handshake on asymmetric fences (if `true`) or on full
    /// fences, whatever the kernel offers. Call it before the CQ is used.
    #[cfg(test)]
    pub(super) fn set_asymmetric(&self, asymmetric: bool) {
        let full = !asymmetric || !membarrier::available();
        self.cleaning
            .store(if full { FULL_FENCES } else { 0 }, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

    use crate::uctx::{Limits, Uctx};

    use super::Mem;

    /// Mutual exclusion, both ways: the owner and two cleaners each add
    /// to a counter inside their critical section by a load and a later
    /// store (no read-modify-write), yielding in between to widen the
    /// window; no update may be lost. With asymmetric fences (where the
    /// kernel has them) and with full fences.
    #[test]
    fn owner_and_cleaners_exclude_each_other() {
        let uctx = Uctx::for_tests(Limits::default());
        for asymmetric in [crate::hw::membarrier::available(), false] {
            let mem = Mem::new(&uctx, 4).unwrap();
            mem.set_asymmetric(asymmetric);
            let count = AtomicU64::new(0);
            let add = |k: u32| {
                let v = count.load(Ordering::Relaxed);
                if k % 16 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                count.store(v + 1, Ordering::Relaxed);
            };
            const CLEANER: u32 = 2_000;
            let cleaners_done = AtomicU32::new(0);
            let mut owner = 0u32;
            std::thread::scope(|s| {
                let (mem, add, done) = (&mem, &add, &cleaners_done);
                for _ in 0..2 {
                    s.spawn(move || {
                        for k in 0..CLEANER {
                            mem.cleaner_enter();
                            add(k);
                            mem.cleaner_exit();
                        }
                        done.fetch_add(1, Ordering::Release);
                    });
                }
                // The owner goes on as long as the cleaners do.
                while owner < 1000 || done.load(Ordering::Acquire) < 2 {
                    mem.owner_enter();
                    add(owner | 1);
                    mem.owner_exit();
                    owner += 1;
                }
            });
            assert_eq!(
                count.into_inner(),
                u64::from(owner + 2 * CLEANER),
                "asymmetric: {asymmetric}"
            );
        }
    }
}
