//! The hand-made spin lock on a CQ's consumer state ([`Mem`]'s `busy`
//! flag): taken by whoever consumes or moves CQEs (a poll, a resize, a QP
//! cleaning its CQEs out), uncontended one atomic swap.

use std::sync::atomic::Ordering;

use super::Mem;

impl Mem {
    /// Takes `busy` (a spin lock: its holders do bounded work and never
    /// block while holding it). Uncontended, one atomic swap.
    #[inline(always)]
    pub(super) fn lock(&self) {
        if self.busy.swap(true, Ordering::Acquire) {
            self.lock_contended();
        }
    }

    /// [`Mem::lock`] when another holder has it.
    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        loop {
            while self.busy.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
            if !self.busy.swap(true, Ordering::Acquire) {
                return;
            }
        }
    }

    /// Releases `busy`.
    #[inline(always)]
    pub(super) fn unlock(&self) {
        self.busy.store(false, Ordering::Release);
    }
}
