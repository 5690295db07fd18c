//! Device-level commands: GET_CONTEXT, QUERY_DEVICE(_EX), QUERY_PORT, and the
//! GID table entry of `UVERBS_METHOD_QUERY_GID_TABLE`.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_get_context`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetContext {
    /// Response pointer (filled by the command plumbing).
    pub response: u64,
}

/// `struct ib_uverbs_get_context_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetContextResp {
    /// The async event file descriptor the kernel opened for this context.
    pub async_fd: u32,
    /// Number of completion vectors.
    pub num_comp_vectors: u32,
}

/// `struct ib_uverbs_query_device`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryDevice {
    /// Response pointer.
    pub response: u64,
}

/// `struct ib_uverbs_query_device_resp`: the device attributes.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct QueryDeviceResp {
    pub fw_ver: u64,
    /// Big-endian on the wire; stored as the kernel wrote it.
    pub node_guid: u64,
    /// Big-endian, as the kernel wrote it.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: u32,
    pub max_qp_wr: u32,
    pub device_cap_flags: u32,
    pub max_sge: u32,
    pub max_sge_rd: u32,
    pub max_cq: u32,
    pub max_cqe: u32,
    pub max_mr: u32,
    pub max_pd: u32,
    pub max_qp_rd_atom: u32,
    pub max_ee_rd_atom: u32,
    pub max_res_rd_atom: u32,
    pub max_qp_init_rd_atom: u32,
    pub max_ee_init_rd_atom: u32,
    pub atomic_cap: u32,
    pub max_ee: u32,
    pub max_rdd: u32,
    pub max_mw: u32,
    pub max_raw_ipv6_qp: u32,
    pub max_raw_ethy_qp: u32,
    pub max_mcast_grp: u32,
    pub max_mcast_qp_attach: u32,
    pub max_total_mcast_qp_attach: u32,
    pub max_ah: u32,
    pub max_fmr: u32,
    pub max_map_per_fmr: u32,
    pub max_srq: u32,
    pub max_srq_wr: u32,
    pub max_srq_sge: u32,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
    pub reserved: [u8; 4],
}

/// `struct ib_uverbs_ex_query_device`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ExQueryDevice {
    /// Must be zero.
    pub comp_mask: u32,
    /// Must be zero.
    pub reserved: u32,
}

/// Bits of `device_cap_flags_ex` (`enum ib_uverbs_device_cap_flags`) this
/// crate acts on. Newer than Debian 12's uapi headers (Linux 6.2).
pub mod device_cap_ex {
    /// RDMA FLUSH to global visibility (`IB_UVERBS_DEVICE_FLUSH_GLOBAL`).
    pub const FLUSH_GLOBAL: u64 = 1 << 38;
    /// RDMA FLUSH to persistence (`IB_UVERBS_DEVICE_FLUSH_PERSISTENT`).
    pub const FLUSH_PERSISTENT: u64 = 1 << 39;
    /// ATOMIC_WRITE (`IB_UVERBS_DEVICE_ATOMIC_WRITE`).
    pub const ATOMIC_WRITE: u64 = 1 << 40;
}

/// Bits of [`OdpCaps::general_caps`] (`IB_ODP_SUPPORT*`).
pub mod odp_general {
    /// On-demand paging is supported (`IB_ODP_SUPPORT`).
    pub const SUPPORT: u64 = 1 << 0;
    /// Implicit ODP: one registration of the whole address space
    /// (`IB_ODP_SUPPORT_IMPLICIT`).
    pub const IMPLICIT: u64 = 1 << 1;
}

/// Bits of the per-transport ODP capabilities (`IB_ODP_SUPPORT_*`): what
/// a QP of that transport may do on on-demand memory.
pub mod odp_transport {
    /// SEND from ODP memory.
    pub const SEND: u32 = 1 << 0;
    /// Receive into ODP memory.
    pub const RECV: u32 = 1 << 1;
    /// RDMA WRITE to ODP memory.
    pub const WRITE: u32 = 1 << 2;
    /// RDMA READ of ODP memory.
    pub const READ: u32 = 1 << 3;
    /// Atomics on ODP memory.
    pub const ATOMIC: u32 = 1 << 4;
    /// SRQ receives into ODP memory.
    pub const SRQ_RECV: u32 = 1 << 5;
    /// RDMA FLUSH of ODP memory.
    pub const FLUSH: u32 = 1 << 6;
    /// ATOMIC_WRITE to ODP memory.
    pub const ATOMIC_WRITE: u32 = 1 << 7;
}

/// `struct ib_uverbs_odp_caps`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct OdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_rss_caps`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct RssCaps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_tm_caps`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct TmCaps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_cq_moderation_caps`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct CqModerationCaps {
    pub max_cq_moderation_count: u16,
    pub max_cq_moderation_period: u16,
    pub reserved: u32,
}

/// `struct ib_uverbs_ex_query_device_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ExQueryDeviceResp {
    pub base: QueryDeviceResp,
    pub comp_mask: u32,
    /// How many bytes of this struct the kernel filled.
    pub response_length: u32,
    pub odp_caps: OdpCaps,
    pub timestamp_mask: u64,
    /// In kHz.
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub rss_caps: RssCaps,
    pub max_wq_type_rq: u32,
    pub raw_packet_caps: u32,
    pub tm_caps: TmCaps,
    pub cq_moderation_caps: CqModerationCaps,
    pub max_dm_size: u64,
    pub xrc_odp_caps: u32,
    pub reserved: u32,
}

/// `struct ib_uverbs_query_port`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryPort {
    /// Response pointer.
    pub response: u64,
    /// Port number, from 1.
    pub port_num: u8,
    /// Must be zero.
    pub reserved: [u8; 7],
}

/// `struct ib_uverbs_query_port_resp`: the port attributes.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct QueryPortResp {
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub gid_tbl_len: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub state: u8,
    pub max_mtu: u8,
    pub active_mtu: u8,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub reserved: u8,
}

/// `IB_LINK_LAYER_INFINIBAND` in [`QueryPortResp::link_layer`].
pub const IB_LINK_LAYER_INFINIBAND: u8 = 1;
/// `IB_LINK_LAYER_ETHERNET` in [`QueryPortResp::link_layer`].
pub const IB_LINK_LAYER_ETHERNET: u8 = 2;

/// `struct ib_uverbs_gid_entry`: one row of the GID table.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GidEntry {
    /// The GID's 16 bytes, in network order.
    pub gid: [u64; 2],
    /// Index in the port's table.
    pub gid_index: u32,
    /// Port number.
    pub port_num: u32,
    /// `IB_UVERBS_GID_TYPE_*`.
    pub gid_type: u32,
    /// Associated netdev, 0 if none.
    pub netdev_ifindex: u32,
}

/// `IB_UVERBS_GID_TYPE_IB`.
pub const IB_UVERBS_GID_TYPE_IB: u32 = 0;
/// `IB_UVERBS_GID_TYPE_ROCE_V1`.
pub const IB_UVERBS_GID_TYPE_ROCE_V1: u32 = 1;
/// `IB_UVERBS_GID_TYPE_ROCE_V2`.
pub const IB_UVERBS_GID_TYPE_ROCE_V2: u32 = 2;
