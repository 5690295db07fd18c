//! The queue directory of the rverbs mlx5 provider (`rverbs-mlx5`): how an
//! outside, read-only tool (`rverbs inspect --pid`) finds the queues of a
//! process. Layout version 1; an ABI between the provider and the tool.
//!
//! mlx5 queues are memory the process allocated and handed to the device:
//! the kernel does not list them anywhere a tool could read. So the
//! provider keeps one process-global directory, a static exported under
//! the symbol `RVERBS_MLX5_QUEUE_DIR_V<layout>_<major>_<minor>_<patch>`
//! (the layout version, then the version of the provider crate, so that
//! two versions of the crate linked into one program keep two
//! directories instead of clashing). A reader finds it in the program's
//! ELF symbol table, adds the load bias from `/proc/PID/maps`, and reads
//! it with `process_vm_readv`.
//!
//! The directory is zero until the first queue is listed (it lives in
//! `.bss`), then starts with a [`DirHeader`] followed by
//! [`DirHeader::slot_count`] slots of [`DirHeader::slot_size`] bytes, each
//! a [`DirSlot`]. All fields are in the byte order of the process (the
//! reader runs on the same machine); the addresses are the process's.
//!
//! A slot is written only on the control path: listed when a queue is
//! created, updated when a CQ is resized, cleared when the queue goes.
//! Its writer makes [`DirSlot::seq`] odd before it changes anything and
//! even again after (a sequence lock): a reader that reads the same even
//! `seq` before and after the other fields read a consistent slot. The
//! data path writes nothing here; the counters a reader wants are where
//! the data path keeps them anyway (the doorbell records, the
//! bookkeeping the slot points to). A queue created while every slot is
//! taken is not listed: [`DirHeader::dropped`] counts those.
//!
//! What every slot address points to, by [`DirSlot::kind`]:
//!
//! | field | SQ | RQ | SRQ | CQ |
//! |---|---|---|---|---|
//! | `num` | QP number | QP number | SRQ number | CQ number |
//! | `entries` | basic blocks (64 B) | WQEs | WQEs in the buffer | CQEs |
//! | `stride_shift` | 6 | log2 WQE size | log2 WQE size | 6 (64-byte CQEs) |
//! | `info` | QP type (`IB_QPT_*`) | data segments per WQE | data segments per WQE | CQE version |
//! | `info2` | 0 | 0 | WQEs in the list (capacity + 1) | 0 |
//! | `buf` | first BB | first WQE | first WQE | first CQE (current ring) |
//! | `dbrec` | doorbell record; word 1 (big-endian) = send counter | word 0 = receive counter | word 0 = receive counter | word 0 = consumer index, word 1 = arm |
//! | `wrid` | `u64` `wr_id` per BB (where a WQE starts) | `u64` per WQE | `u64` per WQE | 0 |
//! | `retired` | `u32` WRs retired by polled completions | `u32` WQEs retired | `u32` receives completed | 0 |
//! | `extra` | `u32` per BB: the WR counter of the WQE starting there | 0 | `u64`: next WQE to post (low 32 bits), last WQE of the free list (high 32) | 0 |
//! | `extra2` | 0 | 0 | `u64` words, bit i: WQE i completed, not yet back in the free list | 0 |
//!
//! The counters the provider keeps in native byte order (`retired`,
//! `extra`) are 32-bit and wrap; the doorbell words are the low 16 bits
//! (24 for a CQ's consumer index) of the same counters, big-endian, as
//! the device reads them.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The exported symbol's name up to the layout version.
pub const SYMBOL_PREFIX: &str = "RVERBS_MLX5_QUEUE_DIR_V";

/// This layout's version (also in the symbol name and the header).
pub const LAYOUT_VERSION: u32 = 1;

/// [`DirHeader::magic`]: `"RVMLX5QD"` read as a little-endian `u64`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"RVMLX5QD");

/// Slots of the directory this provider version exports.
pub const SLOTS: usize = 1024;

/// Most slots a reader accepts (a bound on what it reads from another
/// process).
pub const MAX_SLOTS: u32 = 1 << 16;

/// [`DirSlot::kind`] values.
pub mod kind {
    /// Unused.
    pub const FREE: u32 = 0;
    /// A QP's send queue.
    pub const SQ: u32 = 1;
    /// A QP's receive queue.
    pub const RQ: u32 = 2;
    /// A shared receive queue.
    pub const SRQ: u32 = 3;
    /// A completion queue.
    pub const CQ: u32 = 4;
    /// Taken by a writer that has not filled it in yet.
    pub const CLAIMED: u32 = 0xff;
}

/// The directory's first 64 bytes.
#[repr(C)]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DirHeader {
    /// [`MAGIC`] once the first queue was listed (zero before).
    pub magic: u64,
    /// [`LAYOUT_VERSION`].
    pub version: u32,
    /// Bytes of this header (where the slots start).
    pub header_size: u32,
    /// Bytes per slot (at least `size_of::<DirSlot>()`).
    pub slot_size: u32,
    /// Slots.
    pub slot_count: u32,
    /// Queues not listed because every slot was taken (since start).
    pub dropped: u32,
    /// Slots in use now.
    pub listed: u32,
    /// Zero.
    pub reserved: [u64; 4],
}

/// One slot: a queue, or [`kind::FREE`]. See the module docs for what each
/// field holds for each kind.
#[repr(C)]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DirSlot {
    /// Sequence: odd while a writer changes the slot.
    pub seq: u32,
    /// What the slot lists ([`kind`]).
    pub kind: u32,
    /// The queue's number (QPN, SRQN, CQN).
    pub num: u32,
    /// Entries in the ring.
    pub entries: u32,
    /// log2 of the entry stride in bytes.
    pub stride_shift: u32,
    /// Per kind (see the module docs).
    pub info: u32,
    /// Per kind (see the module docs).
    pub info2: u32,
    /// Zero.
    pub reserved: u32,
    /// Address of the first entry.
    pub buf: u64,
    /// Address of the 64-byte doorbell record.
    pub dbrec: u64,
    /// Address of the `wr_id` array (0: none).
    pub wrid: u64,
    /// Address of the retired counter (0: none).
    pub retired: u64,
    /// Per kind (see the module docs).
    pub extra: u64,
    /// Per kind (see the module docs).
    pub extra2: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(size_of::<DirHeader>(), 64);
        assert_eq!(size_of::<DirSlot>(), 80);
        assert_eq!(&MAGIC.to_le_bytes(), b"RVMLX5QD");
    }
}
