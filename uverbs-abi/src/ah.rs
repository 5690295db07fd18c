//! Address handles: CREATE_AH and DESTROY_AH, and the address vector shared
//! with QP modification.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_global_route`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct GlobalRoute {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct AhAttr {
    pub grh: GlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_uverbs_create_ah`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct CreateAh {
    pub response: u64,
    pub user_handle: u64,
    pub pd_handle: u32,
    pub reserved: u32,
    pub attr: AhAttr,
}

/// `struct ib_uverbs_create_ah_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateAhResp {
    /// Kernel handle.
    pub ah_handle: u32,
}

/// `struct ib_uverbs_destroy_ah`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DestroyAh {
    /// The AH to destroy.
    pub ah_handle: u32,
}
