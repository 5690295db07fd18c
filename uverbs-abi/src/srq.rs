//! Shared receive queues: CREATE/MODIFY/QUERY/DESTROY_SRQ.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_create_srq`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct CreateSrq {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ib_uverbs_create_srq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct CreateSrqResp {
    pub srq_handle: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub srqn: u32,
}

/// `struct ib_uverbs_modify_srq`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ModifySrq {
    pub srq_handle: u32,
    /// `IB_SRQ_MAX_WR` (1) | `IB_SRQ_LIMIT` (2).
    pub attr_mask: u32,
    pub max_wr: u32,
    pub srq_limit: u32,
}

/// `struct ib_uverbs_query_srq`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct QuerySrq {
    pub response: u64,
    pub srq_handle: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_query_srq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct QuerySrqResp {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_destroy_srq`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct DestroySrq {
    pub response: u64,
    pub srq_handle: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_destroy_srq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DestroySrqResp {
    /// Async events the kernel reported for this SRQ.
    pub events_reported: u32,
}
