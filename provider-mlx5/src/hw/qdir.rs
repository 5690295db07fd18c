//! The queue directory (`rverbs_abi::mlx5::qdir`, layout version 1): a
//! process-global static, exported under a versioned symbol, listing
//! every queue this provider created, so that an outside read-only tool
//! (`rverbs inspect --pid`) can find and decode them.
//!
//! Only the control path touches it: [`list`] claims a slot when a queue
//! is created, [`Listing::update`] rewrites it (a CQ resize), dropping the
//! [`Listing`] frees it. Slots are claimed with a compare-and-swap on
//! their kind and written under their own sequence counter; no lock, and
//! nothing at all per work request. The directory is all zeros (in
//! `.bss`, costing no file space and no memory until used) until the
//! first queue is listed, which fills the header in.
//!
//! It lives in `hw` because exporting a symbol is an `unsafe` attribute in
//! the lint's eyes; the code itself is safe Rust over atomics.

use std::mem::offset_of;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use rverbs_abi::mlx5::qdir::{self, kind, DirHeader, DirSlot};

/// One slot, as [`DirSlot`] lays it out, in atomics.
#[repr(C)]
pub(crate) struct Slot {
    seq: AtomicU32,
    kind: AtomicU32,
    num: AtomicU32,
    entries: AtomicU32,
    stride_shift: AtomicU32,
    info: AtomicU32,
    info2: AtomicU32,
    reserved: AtomicU32,
    buf: AtomicU64,
    dbrec: AtomicU64,
    wrid: AtomicU64,
    retired: AtomicU64,
    extra: AtomicU64,
    extra2: AtomicU64,
}

/// The directory, as [`DirHeader`] and [`DirSlot`]s lay it out.
#[repr(C)]
pub(crate) struct Directory {
    magic: AtomicU64,
    version: AtomicU32,
    header_size: AtomicU32,
    slot_size: AtomicU32,
    slot_count: AtomicU32,
    dropped: AtomicU32,
    listed: AtomicU32,
    reserved: [AtomicU64; 4],
    slots: [Slot; qdir::SLOTS],
}

// The atomics have the size and alignment of the integers, so these
// layouts are the ABI's (checked field by field).
const _: () = {
    assert!(size_of::<Slot>() == size_of::<DirSlot>());
    assert!(offset_of!(Slot, kind) == offset_of!(DirSlot, kind));
    assert!(offset_of!(Slot, info2) == offset_of!(DirSlot, info2));
    assert!(offset_of!(Slot, buf) == offset_of!(DirSlot, buf));
    assert!(offset_of!(Slot, dbrec) == offset_of!(DirSlot, dbrec));
    assert!(offset_of!(Slot, wrid) == offset_of!(DirSlot, wrid));
    assert!(offset_of!(Slot, retired) == offset_of!(DirSlot, retired));
    assert!(offset_of!(Slot, extra) == offset_of!(DirSlot, extra));
    assert!(offset_of!(Slot, extra2) == offset_of!(DirSlot, extra2));
    assert!(offset_of!(Directory, slots) == size_of::<DirHeader>());
    assert!(offset_of!(Directory, dropped) == offset_of!(DirHeader, dropped));
    assert!(offset_of!(Directory, listed) == offset_of!(DirHeader, listed));
    assert!(offset_of!(Directory, slot_count) == offset_of!(DirHeader, slot_count));
};

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_SLOT: Slot = Slot {
    seq: AtomicU32::new(0),
    kind: AtomicU32::new(0),
    num: AtomicU32::new(0),
    entries: AtomicU32::new(0),
    stride_shift: AtomicU32::new(0),
    info: AtomicU32::new(0),
    info2: AtomicU32::new(0),
    reserved: AtomicU32::new(0),
    buf: AtomicU64::new(0),
    dbrec: AtomicU64::new(0),
    wrid: AtomicU64::new(0),
    retired: AtomicU64::new(0),
    extra: AtomicU64::new(0),
    extra2: AtomicU64::new(0),
};

/// The directory. Exported (and kept by the linker: `#[used]`, and the
/// create paths refer to it) under a name carrying the layout version and
/// this crate's version; `rverbs inspect` looks for the prefix
/// [`qdir::SYMBOL_PREFIX`]. The `1` must be [`qdir::LAYOUT_VERSION`]
/// (`concat!` takes literals only; a test checks the two agree).
#[used]
#[export_name = concat!(
    "RVERBS_MLX5_QUEUE_DIR_V1_",
    env!("CARGO_PKG_VERSION_MAJOR"),
    "_",
    env!("CARGO_PKG_VERSION_MINOR"),
    "_",
    env!("CARGO_PKG_VERSION_PATCH")
)]
static DIRECTORY: Directory = Directory {
    magic: AtomicU64::new(0),
    version: AtomicU32::new(0),
    header_size: AtomicU32::new(0),
    slot_size: AtomicU32::new(0),
    slot_count: AtomicU32::new(0),
    dropped: AtomicU32::new(0),
    listed: AtomicU32::new(0),
    reserved: [const { AtomicU64::new(0) }; 4],
    slots: [EMPTY_SLOT; qdir::SLOTS],
};

/// What a slot says about a queue (see the table in
/// `rverbs_abi::mlx5::qdir`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Entry {
    /// [`kind`]: SQ, RQ, SRQ or CQ.
    pub(crate) kind: u32,
    /// QPN, SRQN or CQN.
    pub(crate) num: u32,
    /// Entries in the ring.
    pub(crate) entries: u32,
    /// log2 of the stride.
    pub(crate) stride_shift: u32,
    /// Per kind.
    pub(crate) info: u32,
    /// Per kind.
    pub(crate) info2: u32,
    /// First entry.
    pub(crate) buf: u64,
    /// The doorbell record.
    pub(crate) dbrec: u64,
    /// The `wr_id` array.
    pub(crate) wrid: u64,
    /// The retired counter.
    pub(crate) retired: u64,
    /// Per kind.
    pub(crate) extra: u64,
    /// Per kind.
    pub(crate) extra2: u64,
}

/// A queue's slot in the directory (or none, if every slot was taken);
/// dropping it frees the slot.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    slot: Option<&'static Slot>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("kind", &self.kind.load(Ordering::Relaxed))
            .field("num", &self.num.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Slot {
    /// Writes `e` under the sequence counter. Only the slot's claimant
    /// calls this, so the counter has one writer.
    fn write(&self, e: &Entry) {
        let s = self.seq.load(Ordering::Relaxed);
        self.seq.store(s.wrapping_add(1) | 1, Ordering::Relaxed);
        // The odd counter is visible before any field changes.
        std::sync::atomic::fence(Ordering::Release);
        self.num.store(e.num, Ordering::Relaxed);
        self.entries.store(e.entries, Ordering::Relaxed);
        self.stride_shift.store(e.stride_shift, Ordering::Relaxed);
        self.info.store(e.info, Ordering::Relaxed);
        self.info2.store(e.info2, Ordering::Relaxed);
        self.buf.store(e.buf, Ordering::Relaxed);
        self.dbrec.store(e.dbrec, Ordering::Relaxed);
        self.wrid.store(e.wrid, Ordering::Relaxed);
        self.retired.store(e.retired, Ordering::Relaxed);
        self.extra.store(e.extra, Ordering::Relaxed);
        self.extra2.store(e.extra2, Ordering::Relaxed);
        self.kind.store(e.kind, Ordering::Relaxed);
        let s = self.seq.load(Ordering::Relaxed);
        // Every field is written before the counter is even again.
        self.seq.store(s.wrapping_add(1), Ordering::Release);
    }
}

/// Fills the header in (idempotent: every lister stores the same values;
/// the magic last).
fn init_header() {
    let d = &DIRECTORY;
    if d.magic.load(Ordering::Acquire) == qdir::MAGIC {
        return;
    }
    d.version.store(qdir::LAYOUT_VERSION, Ordering::Relaxed);
    d.header_size
        .store(size_of::<DirHeader>() as u32, Ordering::Relaxed);
    d.slot_size
        .store(size_of::<Slot>() as u32, Ordering::Relaxed);
    d.slot_count.store(qdir::SLOTS as u32, Ordering::Relaxed);
    d.magic.store(qdir::MAGIC, Ordering::Release);
}

/// Lists a queue: claims a free slot and writes `e` into it. When every
/// slot is taken the queue is not listed (counted in the header's
/// `dropped`) and the returned listing holds nothing.
pub(crate) fn list(e: &Entry) -> Listing {
    init_header();
    for slot in &DIRECTORY.slots {
        if slot.kind.load(Ordering::Relaxed) != kind::FREE {
            continue;
        }
        if slot
            .kind
            .compare_exchange(
                kind::FREE,
                kind::CLAIMED,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            slot.write(e);
            DIRECTORY.listed.fetch_add(1, Ordering::Relaxed);
            return Listing { slot: Some(slot) };
        }
    }
    DIRECTORY.dropped.fetch_add(1, Ordering::Relaxed);
    Listing { slot: None }
}

impl Listing {
    /// Rewrites the slot (a CQ's new ring after a resize).
    pub(crate) fn update(&self, e: &Entry) {
        if let Some(s) = self.slot {
            s.write(e);
        }
    }

    /// Whether the queue got a slot.
    #[cfg(test)]
    pub(crate) fn is_listed(&self) -> bool {
        self.slot.is_some()
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        let Some(s) = self.slot.take() else { return };
        // Cleared under the counter, then given back (Release: a later
        // claimant sees the cleared fields).
        s.write(&Entry {
            kind: kind::CLAIMED,
            ..Entry::default()
        });
        DIRECTORY.listed.fetch_sub(1, Ordering::Relaxed);
        s.kind.store(kind::FREE, Ordering::Release);
    }
}

/// The directory's address and a copy of it as the ABI types (tests).
#[cfg(test)]
pub(crate) fn snapshot() -> (u64, DirHeader, Vec<DirSlot>) {
    let d = &DIRECTORY;
    let h = DirHeader {
        magic: d.magic.load(Ordering::Acquire),
        version: d.version.load(Ordering::Relaxed),
        header_size: d.header_size.load(Ordering::Relaxed),
        slot_size: d.slot_size.load(Ordering::Relaxed),
        slot_count: d.slot_count.load(Ordering::Relaxed),
        dropped: d.dropped.load(Ordering::Relaxed),
        listed: d.listed.load(Ordering::Relaxed),
        reserved: [0; 4],
    };
    let slots = d
        .slots
        .iter()
        .map(|s| DirSlot {
            seq: s.seq.load(Ordering::Acquire),
            kind: s.kind.load(Ordering::Relaxed),
            num: s.num.load(Ordering::Relaxed),
            entries: s.entries.load(Ordering::Relaxed),
            stride_shift: s.stride_shift.load(Ordering::Relaxed),
            info: s.info.load(Ordering::Relaxed),
            info2: s.info2.load(Ordering::Relaxed),
            reserved: 0,
            buf: s.buf.load(Ordering::Relaxed),
            dbrec: s.dbrec.load(Ordering::Relaxed),
            wrid: s.wrid.load(Ordering::Relaxed),
            retired: s.retired.load(Ordering::Relaxed),
            extra: s.extra.load(Ordering::Relaxed),
            extra2: s.extra2.load(Ordering::Relaxed),
        })
        .collect();
    (std::ptr::addr_of!(DIRECTORY) as u64, h, slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(num: u32) -> Entry {
        Entry {
            kind: kind::CQ,
            num,
            entries: 64,
            stride_shift: 6,
            buf: 0x1000,
            dbrec: 0x2000,
            ..Entry::default()
        }
    }

    #[test]
    fn list_update_and_free() {
        // Numbers no other test uses (the directory is process-global).
        let a = list(&entry(0xabc001));
        let b = list(&entry(0xabc002));
        assert!(a.is_listed() && b.is_listed());
        let (_, h, slots) = snapshot();
        assert_eq!(
            (h.magic, h.version, h.slot_size, h.header_size),
            (qdir::MAGIC, 1, 80, 64)
        );
        assert_eq!(h.slot_count as usize, qdir::SLOTS);
        let find = |slots: &[DirSlot], n: u32| slots.iter().find(|s| s.num == n).copied();
        let s = find(&slots, 0xabc001).unwrap();
        assert_eq!(
            (s.kind, s.entries, s.buf, s.seq % 2),
            (kind::CQ, 64, 0x1000, 0)
        );
        a.update(&Entry {
            entries: 128,
            buf: 0x3000,
            ..entry(0xabc001)
        });
        let (_, _, slots) = snapshot();
        let s2 = find(&slots, 0xabc001).unwrap();
        assert_eq!((s2.entries, s2.buf), (128, 0x3000));
        assert!(s2.seq > s.seq && s2.seq % 2 == 0);
        drop(a);
        let (_, _, slots) = snapshot();
        assert!(find(&slots, 0xabc001).is_none());
        assert!(find(&slots, 0xabc002).is_some());
    }

    #[test]
    fn symbol_name_carries_the_layout_version() {
        // The literal in `export_name` and the ABI constant agree.
        let name = concat!("RVERBS_MLX5_QUEUE_DIR_V1_", env!("CARGO_PKG_VERSION_MAJOR"));
        assert!(name.starts_with(&format!("{}{}_", qdir::SYMBOL_PREFIX, qdir::LAYOUT_VERSION)));
    }
}
