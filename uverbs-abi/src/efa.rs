//! The EFA driver ABI (`efa-abi.h`): the driver data an EFA provider
//! appends to the core uverbs commands and finds after the core responses
//! (ucontext set-up, PD, CQ, QP, AH, the extended device query), and the
//! flag values those structs carry.
//!
//! Names drop the C `efa_ibv_` prefix: `struct efa_ibv_create_qp` is
//! [`CreateQp`]. The structs follow the header Debian 12 installs
//! (`linux-libc-dev` of Linux 6.1), which `tests/layout.rs` checks them
//! against, and which is what Debian 12's libefa sends. Newer kernels grew
//! some of them at the end (CREATE_QP's `flags` and `sl`) or gave reserved
//! bytes a meaning (GET_CONTEXT's `inline_buf_size_ex`); a kernel takes
//! the shorter request as if the new fields were zero, so these are the
//! commands every supported kernel accepts. The newer capability bits are
//! here as constants, named as the newer header names them.
//!
//! [`cmd`] sends the commands with their driver data (safe: none names
//! user memory). [`io`] holds the layouts the provider and the device share in memory:
//! the send and receive descriptors and the completion entries.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub mod cmd;
pub mod io;

/// `EFA_UVERBS_ABI_VERSION`: the per-device `abi_version` an EFA provider
/// accepts.
pub const EFA_UVERBS_ABI_VERSION: u32 = 1;

/// `struct efa_ibv_alloc_ucontext_cmd`: driver data of GET_CONTEXT.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocUcontextCmd {
    /// [`alloc_ucontext_comp`] bits: which response fields the provider
    /// understands (`supported_caps` in newer headers).
    pub comp_mask: u32,
    /// Must be zero.
    pub reserved_20: [u8; 4],
}

/// The `comp_mask` bits of [`AllocUcontextCmd`].
pub mod alloc_ucontext_comp {
    /// The provider reads [`max_tx_batch`](super::AllocUcontextResp::max_tx_batch).
    pub const TX_BATCH: u32 = 1 << 0;
    /// The provider reads [`min_sq_wr`](super::AllocUcontextResp::min_sq_wr).
    pub const MIN_SQ_WR: u32 = 1 << 1;
}

/// The `cmds_supp_udata_mask` bits of [`AllocUcontextResp`]: the core
/// commands for which the kernel reads or writes EFA's driver data.
pub mod supp_udata {
    /// The extended QUERY_DEVICE answers [`ExQueryDeviceResp`](super::ExQueryDeviceResp).
    pub const QUERY_DEVICE: u32 = 1 << 0;
    /// CREATE_AH answers [`CreateAhResp`](super::CreateAhResp).
    pub const CREATE_AH: u32 = 1 << 1;
}

/// `struct efa_ibv_alloc_ucontext_resp`: driver response of GET_CONTEXT.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocUcontextResp {
    /// Which optional parts the kernel filled.
    pub comp_mask: u32,
    /// [`supp_udata`] bits.
    pub cmds_supp_udata_mask: u32,
    /// Sub-CQs each CQ is made of (the provider sizes and polls each).
    pub sub_cqs_per_cq: u16,
    /// Largest inline send in bytes.
    pub inline_buf_size: u16,
    /// Bytes of the low-latency queue (the send ring in device memory).
    pub max_llq_size: u32,
    /// Most send descriptors written before a doorbell, in 64-byte units
    /// (0: no limit given).
    pub max_tx_batch: u16,
    /// Fewest send WRs a QP is created with.
    pub min_sq_wr: u16,
    /// Reserved (newer kernels: `inline_buf_size_ex`, then reserved).
    pub reserved_a0: [u8; 4],
}

/// `struct efa_ibv_alloc_pd_resp`: driver response of ALLOC_PD.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct AllocPdResp {
    /// Which optional parts the kernel filled.
    pub comp_mask: u32,
    /// The device's PD number.
    pub pdn: u16,
    /// Reserved.
    pub reserved_30: [u8; 2],
}

/// The `flags` of [`CreateCq`].
pub mod create_cq_flags {
    /// The CQ has a completion channel (its events are wanted).
    pub const WITH_COMPLETION_CHANNEL: u8 = 1 << 0;
    /// Receive completions carry the sender's GID (entries of
    /// [`RxCdescEx`](super::io::RxCdescEx) size).
    pub const WITH_SGID: u8 = 1 << 1;
    /// Send completions carry 64-bit request ids (newer kernels).
    pub const WITH_SQ_COMP_64_BIT_REQ_ID: u8 = 1 << 2;
}

/// `struct efa_ibv_create_cq`: driver data of CREATE_CQ and EX_CREATE_CQ.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCq {
    /// Must be zero.
    pub comp_mask: u32,
    /// Bytes per completion entry (a power of two the device takes).
    pub cq_entry_size: u32,
    /// Sub-CQs, as [`AllocUcontextResp::sub_cqs_per_cq`] says.
    pub num_sub_cqs: u16,
    /// [`create_cq_flags`].
    pub flags: u8,
    /// Must be zero.
    pub reserved_58: [u8; 5],
}

/// The `comp_mask` bits of [`CreateCqResp`].
pub mod create_cq_resp_comp {
    /// [`db_off`](super::CreateCqResp::db_off) and
    /// [`db_mmap_key`](super::CreateCqResp::db_mmap_key) are valid: the CQ
    /// has a doorbell (to arm it for an event).
    pub const DB_OFF: u32 = 1 << 0;
}

/// `struct efa_ibv_create_cq_resp`: driver response of CREATE_CQ.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCqResp {
    /// [`create_cq_resp_comp`] bits.
    pub comp_mask: u32,
    /// Reserved.
    pub reserved_20: [u8; 4],
    /// mmap offset of the CQ's ring.
    pub q_mmap_key: u64,
    /// Bytes of the ring.
    pub q_mmap_size: u64,
    /// The device's CQ index.
    pub cq_idx: u16,
    /// Reserved.
    pub reserved_d0: [u8; 2],
    /// Offset of the CQ doorbell in its page.
    pub db_off: u32,
    /// mmap offset of the doorbell's page.
    pub db_mmap_key: u64,
}

/// The `driver_qp_type` of [`CreateQp`]: the one EFA QP type that is not a
/// core type, created as `IB_QPT_DRIVER`.
pub const EFA_QP_DRIVER_TYPE_SRD: u32 = 0;

/// `struct efa_ibv_create_qp`: driver data of CREATE_QP and EX_CREATE_QP.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateQp {
    /// Must be zero.
    pub comp_mask: u32,
    /// Bytes of the receive ring (host memory the kernel maps).
    pub rq_ring_size: u32,
    /// Bytes of the send ring (the low-latency queue).
    pub sq_ring_size: u32,
    /// [`EFA_QP_DRIVER_TYPE_SRD`] for an SRD QP (QP type `DRIVER`).
    pub driver_qp_type: u32,
}

/// `struct efa_ibv_create_qp_resp`: driver response of CREATE_QP.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateQpResp {
    /// Which optional parts the kernel filled.
    pub comp_mask: u32,
    /// Offset of the receive doorbell in its page.
    pub rq_db_offset: u32,
    /// Offset of the send doorbell in its page.
    pub sq_db_offset: u32,
    /// Offset of the send descriptors in the LLQ's page.
    pub llq_desc_offset: u32,
    /// mmap offset of the receive ring.
    pub rq_mmap_key: u64,
    /// Bytes of the receive ring.
    pub rq_mmap_size: u64,
    /// mmap offset of the receive doorbell's page.
    pub rq_db_mmap_key: u64,
    /// mmap offset of the send doorbell's page.
    pub sq_db_mmap_key: u64,
    /// mmap offset of the LLQ (write-combined device memory).
    pub llq_desc_mmap_key: u64,
    /// Sub-CQ of the send CQ this QP completes on.
    pub send_sub_cq_idx: u16,
    /// Sub-CQ of the receive CQ this QP completes on.
    pub recv_sub_cq_idx: u16,
    /// Reserved.
    pub reserved_1e0: [u8; 4],
}

/// `struct efa_ibv_create_ah_resp`: driver response of CREATE_AH.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateAhResp {
    /// Which optional parts the kernel filled.
    pub comp_mask: u32,
    /// The device's address handle, which send descriptors carry.
    pub efa_address_handle: u16,
    /// Reserved.
    pub reserved_30: [u8; 2],
}

/// The `device_caps` bits of [`ExQueryDeviceResp`].
pub mod device_caps {
    /// RDMA READ.
    pub const RDMA_READ: u32 = 1 << 0;
    /// The QP's RNR retry count is honoured.
    pub const RNR_RETRY: u32 = 1 << 1;
    /// CQs raise completion events.
    pub const CQ_NOTIFICATIONS: u32 = 1 << 2;
    /// Receive completions can carry the sender's GID.
    pub const CQ_WITH_SGID: u32 = 1 << 3;
    /// 128-byte send descriptors (newer kernels).
    pub const DATA_POLLING_128: u32 = 1 << 4;
    /// RDMA WRITE (newer kernels).
    pub const RDMA_WRITE: u32 = 1 << 5;
    /// A WRITE with immediate may arrive with no receive posted (newer
    /// kernels).
    pub const UNSOLICITED_WRITE_RECV: u32 = 1 << 6;
}

/// `struct efa_ibv_ex_query_device_resp`: driver response of the
/// extended QUERY_DEVICE (when [`supp_udata::QUERY_DEVICE`] is set).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ExQueryDeviceResp {
    /// Which optional parts the kernel filled.
    pub comp_mask: u32,
    /// Largest send queue, in WRs.
    pub max_sq_wr: u32,
    /// Largest receive queue, in WRs.
    pub max_rq_wr: u32,
    /// Most SGEs of a send WR.
    pub max_sq_sge: u16,
    /// Most SGEs of a receive WR.
    pub max_rq_sge: u16,
    /// Largest RDMA READ or WRITE, in bytes.
    pub max_rdma_size: u32,
    /// [`device_caps`] bits.
    pub device_caps: u32,
}
