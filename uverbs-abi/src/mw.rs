//! Memory windows: ALLOC_MW and DEALLOC_MW. A window is bound to a range of
//! a registered MR by a work request (rxe: `BIND_MW` in the send ring; see
//! [`crate::rxe::WrMw`]), not by a command.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `enum ib_mw_type` (`IB_MW_TYPE_*`).
#[allow(missing_docs)]
pub mod mw_type {
    /// Bound by the bind verb; stays valid until deallocated or rebound.
    pub const TYPE_1: u8 = 1;
    /// Bound by a BIND_MW work request on one QP, invalidated by LOCAL_INV
    /// or a peer's SEND_WITH_INV.
    pub const TYPE_2: u8 = 2;
}

/// `struct ib_uverbs_alloc_mw`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocMw {
    /// Response pointer.
    pub response: u64,
    /// The PD the window belongs to.
    pub pd_handle: u32,
    /// [`mw_type`].
    pub mw_type: u8,
    /// Zero.
    pub reserved: [u8; 3],
}

/// `struct ib_uverbs_alloc_mw_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocMwResp {
    /// Kernel handle of the window.
    pub mw_handle: u32,
    /// Its first rkey (unbound).
    pub rkey: u32,
}

/// `struct ib_uverbs_dealloc_mw`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DeallocMw {
    /// The window to free.
    pub mw_handle: u32,
}
