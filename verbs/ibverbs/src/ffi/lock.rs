//! The lock of a data-path record (a QP's, a CQ's, an SRQ's, a channel's
//! list of CQs): a spin lock, as libibverbs' providers take there, whose
//! waiters yield their time slice. Taking it is one compare-exchange in
//! line; releasing it is one release store.

use spin::mutex::{SpinMutex, SpinMutexGuard};
use spin::relax::Yield;

/// A value behind a spin lock (see the module).
#[derive(Debug)]
pub(crate) struct Lock<T>(SpinMutex<T, Yield>);

/// The access [`Lock::lock`] hands out; dropping it releases the lock.
pub(crate) type Guard<'a, T> = SpinMutexGuard<'a, T, Yield>;

impl<T> Lock<T> {
    /// `value`, unlocked.
    pub(crate) const fn new(value: T) -> Self {
        Self(SpinMutex::new(value))
    }

    /// Waits for the lock and takes it. The uncontended case is the
    /// compare-exchange in line; the wait is out of line and cold, so that
    /// the data path's frames stay small.
    #[inline(always)]
    pub(crate) fn lock(&self) -> Guard<'_, T> {
        match self.try_lock() {
            Some(g) => g,
            None => self.wait(),
        }
    }

    /// The lock if it is free (and, rarely, not even then: the
    /// compare-exchange may fail spuriously), without waiting.
    #[inline(always)]
    pub(crate) fn try_lock(&self) -> Option<Guard<'_, T>> {
        self.0.try_lock_weak()
    }

    /// The value, through the exclusive access `&mut` proves (no lock
    /// taken).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.0.get_mut()
    }

    /// [`Lock::lock`]'s wait: spins, yielding, until the holder releases.
    #[cold]
    #[inline(never)]
    fn wait(&self) -> Guard<'_, T> {
        self.0.lock()
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
}
