//! Values whose drop depends on the kernel, and `madvise`.

use std::mem::{ManuallyDrop, MaybeUninit};
use std::ops::{Deref, DerefMut};

use rverbs_abi::Errno;

/// A `T` (a ring, a doorbell record: memory the device may use) that its
/// owner drops with itself, unless it calls [`Leakable::leak`] first (the
/// kernel refused to destroy the object the memory serves). Dereferences
/// to `T` at no cost.
///
/// It drops where a plain field would: after its owner's `Drop::drop`
/// body, in declaration order.
pub(crate) struct Leakable<T> {
    value: ManuallyDrop<T>,
    leak: bool,
}

impl<T> Leakable<T> {
    /// Wraps `value`, to be dropped with its owner.
    pub(crate) fn new(value: T) -> Leakable<T> {
        Leakable {
            value: ManuallyDrop::new(value),
            leak: false,
        }
    }

    /// The value is never to be dropped: leaked with its owner.
    pub(crate) fn leak(&mut self) {
        self.leak = true;
    }
}

impl<T> Deref for Leakable<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for Leakable<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T> Drop for Leakable<T> {
    fn drop(&mut self) {
        if !self.leak {
            // SAFETY: this is the Leakable's drop: `value` is dropped here
            // once and never used again.
            unsafe { ManuallyDrop::drop(&mut self.value) };
        }
    }
}

/// An owner `B` held as a `MaybeUninit` (a union), so that moving the
/// holder never asserts uniqueness of the owner (a `Box`'s pointer, say)
/// over memory that a raw pointer and the device still reach. Taken out at
/// most once ([`TakeOnce::take`]); never dropped otherwise: a holder
/// dropped without taking it leaks it.
pub(crate) struct TakeOnce<B> {
    value: MaybeUninit<B>,
    taken: bool,
}

impl<B> TakeOnce<B> {
    /// Holds `value`.
    pub(crate) fn new(value: B) -> TakeOnce<B> {
        TakeOnce {
            value: MaybeUninit::new(value),
            taken: false,
        }
    }

    /// The value, the first time; `None` after.
    pub(crate) fn take(&mut self) -> Option<B> {
        if self.taken {
            return None;
        }
        self.taken = true;
        // SAFETY: `value` was initialised in `new` and is read out only
        // here, once: `taken` is now set.
        Some(unsafe { self.value.assume_init_read() })
    }
}

/// What [`madvise_fork`] asks of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForkAdvice {
    /// `MADV_DONTFORK`: a child does not inherit the range.
    DontFork,
    /// `MADV_DOFORK`: it does again.
    DoFork,
}

/// `madvise(start, end - start, advice)` for a fork advice. An unmapped
/// range is ENOMEM.
pub(crate) fn madvise_fork(
    start: usize,
    end: usize,
    advice: ForkAdvice,
) -> std::result::Result<(), Errno> {
    let advice = match advice {
        ForkAdvice::DontFork => libc::MADV_DONTFORK,
        ForkAdvice::DoFork => libc::MADV_DOFORK,
    };
    // SAFETY: MADV_DONTFORK/MADV_DOFORK only change whether the mapping is
    // inherited by a child; they never change this process's memory
    // contents, so no Rust reference can be invalidated. An unmapped range
    // is reported as ENOMEM.
    let rc = unsafe { libc::madvise(start as *mut libc::c_void, end - start, advice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(Errno::last())
    }
}
