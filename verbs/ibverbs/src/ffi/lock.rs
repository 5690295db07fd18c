//! The lock of a data-path record (a QP's, a CQ's, an SRQ's, a channel's
//! list of CQs): a spin lock, as libibverbs' providers take there, whose
//! waiters yield their time slice. Taking it is one compare-exchange in
//! line; releasing it is one release store (no poisoning to check on every
//! post and poll: std's Mutex cost a post + poll about 25 instructions
//! more, parking_lot's about 8).
//!
//! A record of an object the program declared single-threaded (a QP or CQ
//! created on a parent domain with a thread domain, or a CQ created with
//! `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`) is made with [`Lock::unlocked`]:
//! [`Lock::lock`] then takes nothing, as rdma-core's providers take no
//! lock for such objects. That is sound only under the promise libibverbs
//! documents for those objects (`ibv_alloc_td(3)`: objects of a thread
//! domain are not protected against concurrent access from several
//! threads), which this library takes in the widest form: no two calls
//! that name the object (its own verbs, and the creation or destruction
//! of a QP on the CQ) run at the same time. A program that breaks it
//! races, as it would on rdma-core.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

/// A value behind a spin lock, or, for a single-threaded object, behind
/// the program's promise (see the module).
pub(crate) struct Lock<T> {
    /// Taken (a compare-exchange from false, Acquire) and released (a
    /// store of false, Release) around every access, except that a
    /// single-threaded lock is never taken (its release stores the false
    /// it already holds: nobody else reads it).
    locked: AtomicBool,
    /// Made by [`Lock::unlocked`]: [`Lock::lock`] takes no lock.
    single: bool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, which the lock (or,
// for a single-threaded one, the program's promise: Lock::unlocked's
// contract) makes the only one at a time; so sharing the lock hands the
// value from thread to thread, which `T: Send` allows.
unsafe impl<T: Send> Sync for Lock<T> {}

impl<T> std::fmt::Debug for Lock<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("locked", &self.locked)
            .field("single", &self.single)
            .finish_non_exhaustive()
    }
}

/// The access [`Lock::lock`] hands out; dropping it releases the lock
/// (if one was taken).
pub(crate) struct Guard<'a, T> {
    lock: &'a Lock<T>,
    /// Not `Send`: the lock is released by the thread that took it.
    _not_send: PhantomData<*mut T>,
}

impl<T> Lock<T> {
    /// `value`, unlocked.
    pub(crate) const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            single: false,
            value: UnsafeCell::new(value),
        }
    }

    /// `value` for an object the program promised to use from one thread
    /// at a time (see the module): [`Lock::lock`] and [`Lock::try_lock`]
    /// take no lock.
    ///
    /// # Safety
    /// No two [`Guard`]s of this lock may live at once: the caller makes
    /// that the C program's promise (only calls naming the object take the
    /// guard, each for its own duration, and the program makes no two such
    /// calls at once), and says so where it makes the record.
    pub(crate) const unsafe fn unlocked(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            single: true,
            value: UnsafeCell::new(value),
        }
    }

    /// Whether this lock was made by [`Lock::unlocked`].
    #[cfg(test)]
    pub(crate) fn is_single(&self) -> bool {
        self.single
    }

    /// Waits for the lock and takes it. The uncontended case is the
    /// compare-exchange in line; the wait is out of line and cold, so that
    /// the data path's frames stay small. A single-threaded record's takes
    /// nothing.
    #[inline(always)]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        match self.try_lock() {
            Some(g) => g,
            None => self.wait(),
        }
    }

    /// The lock if it is free (and, rarely, not even then: the
    /// compare-exchange may fail spuriously), without waiting; always, for
    /// a single-threaded record.
    #[inline(always)]
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, T>> {
        if self.single
            || self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.guard())
        } else {
            None
        }
    }

    /// The value, through the exclusive access `&mut` proves (no lock
    /// taken).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    #[inline(always)]
    fn guard(&self) -> Guard<'_, T> {
        Guard {
            lock: self,
            _not_send: PhantomData,
        }
    }

    /// [`Lock::lock`]'s wait: spins, yielding its time slice, until the
    /// holder releases.
    #[cold]
    #[inline(never)]
    fn wait(&self) -> Guard<'_, T> {
        loop {
            if !self.locked.load(Ordering::Relaxed)
                && self
                    .locked
                    .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return self.guard();
            }
            std::thread::yield_now();
        }
    }
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, or the lock is single-threaded
        // and no other guard lives (Lock::unlocked's contract): nothing
        // else reaches the value while the guard lives.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this access the only one
        // through the guard.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    #[inline(always)]
    fn drop(&mut self) {
        // Releases what this guard took; a single-threaded lock's flag
        // was false and stays so (no branch on the data path).
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Threads that take the lock in turn lose no update: the lock
    /// excludes, and the waiters do get it.
    #[test]
    fn excludes_and_lets_waiters_in() {
        let l = Arc::new(Lock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = Arc::clone(&l);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        let mut g = l.lock();
                        // A non-atomic read-modify-write: lost updates if
                        // two threads were inside at once.
                        let v = *g;
                        std::hint::black_box(&v);
                        *g = v + 1;
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(*l.lock(), 40_000);
    }

    /// A locked record's guard excludes the next one until dropped; a
    /// single-threaded record's takes nothing (the mutex stays free).
    #[test]
    fn single_threaded_takes_nothing() {
        let l = Lock::new(1u32);
        let g = l.lock();
        assert!(l.try_lock().is_none());
        drop(g);
        assert!(l.try_lock().is_some());
        // SAFETY: one guard at a time below (each dropped at once).
        let s = unsafe { Lock::unlocked(1u32) };
        assert!(s.is_single());
        *s.lock() += 1;
        assert!(!s.locked.load(Ordering::Relaxed));
        assert_eq!(*s.lock(), 2);
    }
}
