//! Protection domains: ALLOC_PD and DEALLOC_PD.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_alloc_pd`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocPd {
    /// Response pointer.
    pub response: u64,
}

/// `struct ib_uverbs_alloc_pd_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocPdResp {
    /// Kernel handle of the new PD.
    pub pd_handle: u32,
}

/// `struct ib_uverbs_dealloc_pd`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DeallocPd {
    /// The PD to free.
    pub pd_handle: u32,
}
