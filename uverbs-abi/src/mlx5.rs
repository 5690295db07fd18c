//! The mlx5 driver ABI (`mlx5-abi.h`): the driver data an mlx5 provider
//! appends to the core uverbs commands and finds after the core responses
//! (ucontext set-up, PD, CQ, QP, SRQ and AH), and the flag and mmap-command
//! values those structs carry.
//!
//! Names drop the C `mlx5_ib_` prefix: `struct mlx5_ib_create_qp` is
//! [`CreateQp`]. Pointers travel as `u64` user addresses.
//!
//! [`prm`] holds the hardware layouts the provider and the device share
//! in memory (WQE segments, CQEs); [`wqe`] reads send WQEs back by those
//! layouts; [`qdir`] the directory through which an outside tool finds
//! the queues of a process on our mlx5 provider.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub mod prm;
pub mod qdir;
pub mod wqe;

/// `MLX5_IB_UVERBS_ABI_VERSION`: the per-device `abi_version` an mlx5
/// provider accepts.
pub const MLX5_IB_UVERBS_ABI_VERSION: u32 = 1;

/// `struct mlx5_ib_alloc_ucontext_req_v2`: driver data of GET_CONTEXT.
/// Providers may send it truncated (at `lib_caps` or at `max_cqe_version`);
/// missing fields count as zero.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocUcontextReqV2 {
    /// Blue-flame registers (doorbell slots) wanted in the static UAR pages.
    pub total_num_bfregs: u32,
    /// How many of them are dedicated ("low latency", used without a lock).
    pub num_low_latency_bfregs: u32,
    /// [`MLX5_IB_ALLOC_UCTX_DEVX`] or zero.
    pub flags: u32,
    /// Must be zero.
    pub comp_mask: u32,
    /// Highest CQE format the provider understands (0 or 1).
    pub max_cqe_version: u8,
    /// Must be zero.
    pub reserved0: u8,
    /// Must be zero.
    pub reserved1: u16,
    /// Must be zero.
    pub reserved2: u32,
    /// `MLX5_LIB_CAP_*` bits.
    pub lib_caps: u64,
}

/// `struct mlx5_ib_alloc_ucontext_resp`: driver response of GET_CONTEXT.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocUcontextResp {
    /// Size of the QP number space.
    pub qp_tab_size: u32,
    /// Stride of the blue-flame registers in a UAR page (0: no blue flame).
    pub bf_reg_size: u32,
    /// Static bfregs granted; 0 means the provider must allocate UARs
    /// dynamically (an ioctl-only path).
    pub tot_bfregs: u32,
    /// Cache line size; the doorbell-record allocator divides by it.
    pub cache_line_size: u32,
    /// Largest send WQE in bytes.
    pub max_sq_desc_sz: u16,
    /// Largest receive WQE in bytes.
    pub max_rq_desc_sz: u16,
    /// Largest send queue in 64-byte basic blocks.
    pub max_send_wqebb: u32,
    /// Largest receive queue in WQEs.
    pub max_recv_wr: u32,
    /// Largest SRQ in WQEs.
    pub max_srq_recv_wr: u32,
    /// Number of ports.
    pub num_ports: u16,
    /// `MLX5_USER_ALLOC_UCONTEXT_FLOW_ACTION_FLAGS_*`.
    pub flow_action_flags: u16,
    /// `MLX5_IB_ALLOC_UCONTEXT_RESP_MASK_*`: which optional fields are valid.
    pub comp_mask: u32,
    /// Bytes of this struct the kernel filled.
    pub response_length: u32,
    /// CQE format in use (0 or 1; 1 carries the user index in CQEs).
    pub cqe_version: u8,
    /// `MLX5_USER_CMDS_SUPP_UHW_*`.
    pub cmds_supp_uhw: u8,
    /// `enum mlx5_user_inline_mode` + 1 (0: not reported).
    pub eth_min_inline: u8,
    /// Bitmap of supported clock-info page versions.
    pub clock_info_versions: u8,
    /// Offset of the free-running clock in the core-clock page.
    pub hca_core_clock_offset: u64,
    /// log2 of the UAR size.
    pub log_uar_size: u32,
    /// UARs per system page.
    pub num_uars_per_page: u32,
    /// Dynamic bfregs available through the legacy mmap path.
    pub num_dyn_bfregs: u32,
    /// Key of the "dump fill" memory key (with its comp_mask bit).
    pub dump_fill_mkey: u32,
}

/// `struct mlx5_ib_query_device_resp`: driver response of the extended
/// QUERY_DEVICE (mlx5's offload capabilities). The nested capability
/// structs are kept as bytes: the library only asks for the response so
/// its command is the one libmlx5 sends.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryDeviceResp {
    /// Which optional parts the kernel filled.
    pub comp_mask: u32,
    /// Bytes the kernel filled.
    pub response_length: u32,
    /// `struct mlx5_ib_tso_caps`.
    pub tso_caps: [u8; 8],
    /// `struct mlx5_ib_rss_caps`.
    pub rss_caps: [u8; 16],
    /// `struct mlx5_ib_cqe_comp_caps`.
    pub cqe_comp_caps: [u8; 8],
    /// `struct mlx5_packet_pacing_caps`.
    pub packet_pacing_caps: [u8; 16],
    /// Multi-packet send WQE support.
    pub mlx5_ib_support_multi_pkt_send_wqes: u32,
    /// `enum mlx5_ib_query_dev_resp_flags`.
    pub flags: u32,
    /// `struct mlx5_ib_sw_parsing_caps`.
    pub sw_parsing_caps: [u8; 8],
    /// `struct mlx5_ib_striding_rq_caps`.
    pub striding_rq_caps: [u8; 24],
    /// `enum mlx5_ib_tunnel_offloads`.
    pub tunnel_offloads_caps: u32,
    /// `struct mlx5_ib_dci_streams_caps`.
    pub dci_streams_caps: [u8; 2],
    /// Reserved.
    pub reserved: u16,
}

/// `struct mlx5_ib_alloc_pd_resp`: driver response of ALLOC_PD.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocPdResp {
    /// The hardware PD number.
    pub pdn: u32,
}

/// `struct mlx5_ib_create_cq`: driver data of CREATE_CQ.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCq {
    /// User address of the CQE ring.
    pub buf_addr: u64,
    /// User address of the 8-byte doorbell record (consumer index, arm).
    pub db_addr: u64,
    /// CQE size: 64 or 128.
    pub cqe_size: u32,
    /// CQE compression (direct-verbs only).
    pub cqe_comp_en: u8,
    /// Compressed CQE format.
    pub cqe_comp_res_format: u8,
    /// `MLX5_IB_CREATE_CQ_FLAGS_*`.
    pub flags: u16,
    /// UAR page of the arm doorbell (with [`MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX`]).
    pub uar_page_index: u16,
    /// Must be zero.
    pub reserved0: u16,
    /// Must be zero.
    pub reserved1: u32,
}

/// `struct mlx5_ib_create_cq_resp`: driver response of CREATE_CQ.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCqResp {
    /// The CQ number (used in arm doorbells).
    pub cqn: u32,
    /// Zero.
    pub reserved: u32,
}

/// `struct mlx5_ib_resize_cq`: driver data of RESIZE_CQ.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ResizeCq {
    /// User address of the new CQE ring.
    pub buf_addr: u64,
    /// CQE size of the new ring: 64 or 128.
    pub cqe_size: u16,
    /// Must be zero.
    pub reserved0: u16,
    /// Must be zero.
    pub reserved1: u32,
}

/// `struct mlx5_ib_create_srq`: driver data of CREATE_SRQ.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateSrq {
    /// User address of the WQE buffer.
    pub buf_addr: u64,
    /// User address of the 4-byte doorbell record (WQE counter).
    pub db_addr: u64,
    /// [`MLX5_SRQ_FLAG_SIGNATURE`] or zero.
    pub flags: u32,
    /// Must be zero.
    pub reserved0: u32,
    /// User index reported in CQEs (CQE version 1).
    pub uidx: u32,
    /// Must be zero.
    pub reserved1: u32,
}

/// `struct mlx5_ib_create_srq_resp`: driver response of CREATE_SRQ.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateSrqResp {
    /// The SRQ number.
    pub srqn: u32,
    /// Zero.
    pub reserved: u32,
}

/// `struct mlx5_ib_create_qp`: driver data of CREATE_QP. The receive queue
/// sits at offset 0 of `buf_addr`, the send queue right after it.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateQp {
    /// User address of the WQE buffer.
    pub buf_addr: u64,
    /// User address of the 8-byte doorbell record (word 0 RQ, word 1 SQ).
    pub db_addr: u64,
    /// Send queue size in 64-byte basic blocks (a power of two, or 0).
    pub sq_wqe_count: u32,
    /// Receive queue size in WQEs (a power of two, or 0).
    pub rq_wqe_count: u32,
    /// log2 of the receive WQE size.
    pub rq_wqe_shift: u32,
    /// `MLX5_QP_FLAG_*`.
    pub flags: u32,
    /// User index reported in CQEs (CQE version 1).
    pub uidx: u32,
    /// bfreg (or UAR page, with [`MLX5_QP_FLAG_UAR_PAGE_INDEX`]) asked for.
    pub bfreg_index: u32,
    /// Separate send-queue buffer (raw packet QPs); the C union's
    /// `access_key` arm (DCT) shares these bytes.
    pub sq_buf_addr: u64,
    /// Enhanced connection establishment options.
    pub ece_options: u32,
    /// `dci_streams.log_num_concurent` (DCI QPs only).
    pub dci_log_num_concurent: u8,
    /// `dci_streams.log_num_errored` (DCI QPs only).
    pub dci_log_num_errored: u8,
    /// Must be zero.
    pub reserved: u16,
}

/// `struct mlx5_ib_create_qp_resp`: driver response of CREATE_QP.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateQpResp {
    /// The doorbell register to use, as an index into the provider's table
    /// of four registers per static UAR.
    pub bfreg_index: u32,
    /// Enhanced connection establishment options granted.
    pub ece_options: u32,
    /// `MLX5_IB_CREATE_QP_RESP_MASK_*`: which of the fields below are valid.
    pub comp_mask: u32,
    /// TIR number (raw packet QPs).
    pub tirn: u32,
    /// TIS number (raw packet QPs).
    pub tisn: u32,
    /// RQ number (raw packet QPs).
    pub rqn: u32,
    /// SQ number (raw packet QPs).
    pub sqn: u32,
    /// Zero.
    pub reserved1: u32,
    /// TIR ICM address (raw packet QPs).
    pub tir_icm_addr: u64,
}

/// `struct mlx5_ib_create_ah_resp`: driver response of CREATE_AH.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateAhResp {
    /// Bytes of this struct the kernel filled.
    pub response_length: u32,
    /// Destination MAC resolved by the kernel (Ethernet link layer).
    pub dmac: [u8; 6],
    /// Zero.
    pub reserved: [u8; 6],
}

/// `MLX5_IB_ALLOC_UCTX_DEVX` in [`AllocUcontextReqV2::flags`].
pub const MLX5_IB_ALLOC_UCTX_DEVX: u32 = 1 << 0;
/// `MLX5_LIB_CAP_4K_UAR` in [`AllocUcontextReqV2::lib_caps`].
pub const MLX5_LIB_CAP_4K_UAR: u64 = 1 << 0;
/// `MLX5_LIB_CAP_DYN_UAR` in [`AllocUcontextReqV2::lib_caps`].
pub const MLX5_LIB_CAP_DYN_UAR: u64 = 1 << 1;

/// `MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE` in
/// [`AllocUcontextResp::cmds_supp_uhw`]: EX QUERY_DEVICE carries driver data.
pub const MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE: u8 = 1 << 0;
/// `MLX5_USER_CMDS_SUPP_UHW_CREATE_AH` in [`AllocUcontextResp::cmds_supp_uhw`]:
/// CREATE_AH returns the destination MAC.
pub const MLX5_USER_CMDS_SUPP_UHW_CREATE_AH: u8 = 1 << 1;

/// `MLX5_QP_FLAG_SIGNATURE`: WQE signatures.
pub const MLX5_QP_FLAG_SIGNATURE: u32 = 1 << 0;
/// `MLX5_QP_FLAG_SCATTER_CQE`: small responses may be scattered into the CQE.
pub const MLX5_QP_FLAG_SCATTER_CQE: u32 = 1 << 1;
/// `MLX5_QP_FLAG_BFREG_INDEX`: [`CreateQp::bfreg_index`] names the bfreg.
pub const MLX5_QP_FLAG_BFREG_INDEX: u32 = 1 << 3;
/// `MLX5_QP_FLAG_UAR_PAGE_INDEX`: [`CreateQp::bfreg_index`] names a dynamic UAR page.
pub const MLX5_QP_FLAG_UAR_PAGE_INDEX: u32 = 1 << 10;
/// `MLX5_SRQ_FLAG_SIGNATURE`: SRQ WQE signatures.
pub const MLX5_SRQ_FLAG_SIGNATURE: u32 = 1 << 0;

/// `MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD`.
pub const MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD: u16 = 1 << 0;
/// `MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX`: [`CreateCq::uar_page_index`] is valid.
pub const MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX: u16 = 1 << 1;
/// `MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS`.
pub const MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS: u16 = 1 << 2;

/// `enum mlx5_ib_mmap_cmd`: bits 15..8 of an mmap page offset on the
/// command fd (bits 7..0 carry the page index).
#[allow(missing_docs)]
pub mod mmap_cmd {
    pub const REGULAR_PAGE: u32 = 0;
    pub const GET_CONTIGUOUS_PAGES: u32 = 1;
    pub const WC_PAGE: u32 = 2;
    pub const NC_PAGE: u32 = 3;
    pub const CORE_CLOCK: u32 = 5;
    pub const ALLOC_WC: u32 = 6;
    pub const CLOCK_INFO: u32 = 7;
    pub const DEVICE_MEM: u32 = 8;
}
