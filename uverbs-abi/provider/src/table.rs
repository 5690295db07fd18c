//! The QP table of an open context: how a CQ finds the queue a completion
//! belongs to, from the number the completion names (a user index, a QP
//! number). Rows are kept sorted by that number; [`Table::generation`]
//! changes on every insertion or removal, so a CQ polls with a snapshot
//! of its own ([`Table::snapshot_into`], no lock on the data path) and
//! refreshes it only when the generation says a refresh can help.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One row: the number completions name, and the queue's entry.
pub type Row<E> = (u32, Arc<E>);

/// A context's table of `E` (a provider's per-QP completion state).
#[derive(Debug)]
pub struct Table<E> {
    rows: Mutex<Vec<Row<E>>>,
    generation: AtomicU64,
}

impl<E> Default for Table<E> {
    fn default() -> Self {
        Table {
            rows: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
        }
    }
}

impl<E> Table<E> {
    /// Adds (or replaces) the entry of `key`.
    pub fn insert(&self, key: u32, e: Arc<E>) {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        match rows.binary_search_by_key(&key, |r| r.0) {
            Ok(i) => rows[i].1 = e,
            Err(i) => rows.insert(i, (key, e)),
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Removes the entry of `key`, if any.
    pub fn remove(&self, key: u32) {
        let mut rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        if let Ok(i) = rows.binary_search_by_key(&key, |r| r.0) {
            rows.remove(i);
        }
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The current generation (changes with every edit).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Copies the rows (sorted) into `out`, reusing its allocation;
    /// returns the generation they belong to.
    pub fn snapshot_into(&self, out: &mut Vec<Row<E>>) -> u64 {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        out.clear();
        out.extend(rows.iter().cloned());
        self.generation.load(Ordering::Acquire)
    }

    /// A fresh snapshot: (generation, rows sorted).
    pub fn snapshot(&self) -> (u64, Vec<Row<E>>) {
        let mut v = Vec::new();
        let g = self.snapshot_into(&mut v);
        (g, v)
    }

    /// Whether `key` has an entry.
    pub fn contains(&self, key: u32) -> bool {
        let rows = self.rows.lock().unwrap_or_else(|p| p.into_inner());
        rows.binary_search_by_key(&key, |r| r.0).is_ok()
    }
}

/// Looks `key` up in a sorted snapshot.
#[inline]
pub fn lookup<E>(rows: &[Row<E>], key: u32) -> Option<&Arc<E>> {
    rows.binary_search_by_key(&key, |r| r.0)
        .ok()
        .map(|i| &rows[i].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_and_lookup() {
        let t = Table::<u8>::default();
        let g0 = t.generation();
        t.insert(5, Arc::new(50));
        t.insert(2, Arc::new(20));
        assert_ne!(t.generation(), g0);
        let (g, rows) = t.snapshot();
        assert_eq!(g, t.generation());
        assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), vec![2, 5]);
        assert_eq!(lookup(&rows, 5).map(|e| **e), Some(50));
        assert!(lookup(&rows, 3).is_none());
        t.insert(5, Arc::new(51));
        assert_eq!(lookup(&t.snapshot().1, 5).map(|e| **e), Some(51));
        t.remove(5);
        assert!(!t.contains(5));
        assert!(t.contains(2));
    }
}
