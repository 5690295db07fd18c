//! The mlx5 hardware formats user space reads and writes directly (the
//! PRM layouts that rdma-core's `mlx5dv.h` declares): the segments of send
//! and receive WQEs, and the 64-byte CQE, with the constants found in
//! them.
//!
//! Multi-byte fields are big-endian ([`U16`], [`U32`], [`U64`] from
//! `zerocopy::byteorder::network_endian`, alignment 1); every struct
//! carries the alignment of its C counterpart, so a pointer into a ring
//! (16-byte aligned segments, 64-byte CQEs) may be cast to it. Names drop
//! the C `mlx5_wqe_` prefix: `struct mlx5_wqe_ctrl_seg` is [`CtrlSeg`].
//! `tests/layout.rs` checks every size, alignment, field offset and
//! constant against the installed `mlx5dv.h`.
//!
//! These are pure layouts. The memory they describe is shared with the
//! device: write whole segments through raw pointers
//! (`ptr.cast::<CtrlSeg>().write(..)`) and read CQEs by value once they
//! are owned by software, rather than holding references into a ring.

use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct mlx5_wqe_ctrl_seg`: the 16 bytes that start every send WQE.
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct CtrlSeg {
    /// Bits 31..24 opcode modifier, 23..8 WQE index (the producer counter
    /// of basic blocks), 7..0 opcode (`MLX5_OPCODE_*`).
    pub opmod_idx_opcode: U32,
    /// Bits 31..8 QP number, 5..0 WQE size in 16-byte units (`ds`).
    pub qpn_ds: U32,
    /// WQE signature (0 when signatures are off).
    pub signature: u8,
    /// DCI stream channel (0 outside DC).
    pub dci_stream_channel_id: U16,
    /// Fence mode, completion and solicited-event bits ([`WQE_CTRL_FENCE`],
    /// [`WQE_CTRL_CQ_UPDATE`], [`WQE_CTRL_SOLICITED`]).
    pub fm_ce_se: u8,
    /// Immediate data (or the key to invalidate), as on the wire.
    pub imm: U32,
}

/// `struct mlx5_wqe_raddr_seg`: the remote address of an RDMA or atomic
/// operation.
#[repr(C, align(8))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct RaddrSeg {
    /// Remote virtual address.
    pub raddr: U64,
    /// Remote key.
    pub rkey: U32,
    /// Zero.
    pub reserved: U32,
}

/// `struct mlx5_wqe_atomic_seg`: the operands of an atomic operation.
#[repr(C, align(8))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct AtomicSeg {
    /// Swap value (compare and swap) or addend (fetch and add).
    pub swap_add: U64,
    /// Compare value (compare and swap only).
    pub compare: U64,
}

/// `struct mlx5_wqe_data_seg`: one gather (send) or scatter (receive)
/// entry.
#[repr(C, align(8))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DataSeg {
    /// Bytes (an atomic's data segment says 8).
    pub byte_count: U32,
    /// Local key ([`INVALID_LKEY`] ends a receive list early).
    pub lkey: U32,
    /// Local virtual address.
    pub addr: U64,
}

/// `struct mlx5_wqe_inl_data_seg`: the header of inline data, followed
/// directly by the payload bytes (padded to 16 bytes).
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct InlineSeg {
    /// Payload bytes with [`INLINE_SEG`] set. (rdma-core declares it a
    /// host-order `uint32_t` and stores it big-endian.)
    pub byte_count: U32,
}

/// `struct mlx5_wqe_av`: the address vector of a UD send (and what an
/// address handle holds). The C `key` union is flattened to its UD arm
/// (`key.qkey`).
#[repr(C, align(8))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Av {
    /// Q_Key of the destination (`key.qkey.qkey`).
    pub qkey: U32,
    /// Zero (`key.qkey.reserved`).
    pub qkey_reserved: U32,
    /// Destination QP number, with [`EXTENDED_UD_AV`].
    pub dqp_dct: U32,
    /// Bits 7..4 static rate; 3..0 service level (InfiniBand), or 3..1 SL
    /// (RoCE).
    pub stat_rate_sl: u8,
    /// Bit 7 force loopback; 6..0 source path bits (InfiniBand).
    pub fl_mlid: u8,
    /// Destination LID (InfiniBand) or the RoCE v2 UDP source port.
    pub rlid: U16,
    /// Zero.
    pub reserved0: [u8; 4],
    /// Destination MAC (RoCE).
    pub rmac: [u8; 6],
    /// GRH traffic class.
    pub tclass: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// Bit 30: GRH present (InfiniBand); 27..20 source GID index; 19..0
    /// flow label.
    pub grh_gid_fl: U32,
    /// Destination GID.
    pub rgid: [u8; 16],
}

/// `struct mlx5_wqe_datagram_seg`: the address vector as a send WQE
/// segment (UD).
#[repr(C, align(8))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct DatagramSeg {
    /// The address vector, with the per-request Q_Key and destination QP.
    pub av: Av,
}

/// `struct mlx5_wqe_srq_next_seg`: the header of an SRQ WQE, linking the
/// SRQ's WQE list.
#[repr(C, align(2))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct SrqNextSeg {
    /// Reserved.
    pub rsvd0: [u8; 2],
    /// Index of the next WQE in the list.
    pub next_wqe_index: U16,
    /// WQE signature (0 when signatures are off).
    pub signature: u8,
    /// Reserved.
    pub rsvd1: [u8; 11],
}

/// `struct mlx5_cqe64`: a 64-byte completion queue entry. The first 32
/// bytes are a C union; this is its (anonymous) completion arm.
#[repr(C, align(8))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Cqe64 {
    /// Reserved.
    pub rsvd0: [u8; 2],
    /// WQE id (striding receive queues).
    pub wqe_id: U16,
    /// Reserved.
    pub rsvd4: [u8; 13],
    /// Bits 6..0: the destination LID path bits of a receive.
    pub ml_path: u8,
    /// Reserved.
    pub rsvd20: [u8; 4],
    /// Source LID of a receive.
    pub slid: U16,
    /// Bits 31..28: receive flags (bits 29..28: GRH present), 27..24
    /// service level, 23..0 source QP number.
    pub flags_rqpn: U32,
    /// Header-data-split / IP extension bits.
    pub hds_ip_ext: u8,
    /// L4 header type and related bits.
    pub l4_hdr_type_etc: u8,
    /// VLAN tag.
    pub vlan_info: U16,
    /// Bits 23..0: the SRQ number (CQE version 0) or the QP's user index
    /// (CQE version 1).
    pub srqn_uidx: U32,
    /// Immediate data or invalidated key (as on the wire), or in bits
    /// 15..0 the P_Key index of a UD receive.
    pub imm_inval_pkey: U32,
    /// Application (tag matching) bits.
    pub app: u8,
    /// Application opcode.
    pub app_op: u8,
    /// Application info.
    pub app_info: U16,
    /// Bytes received, or read by an RDMA READ.
    pub byte_cnt: U32,
    /// Completion timestamp.
    pub timestamp: U64,
    /// Bits 31..24: the WQE opcode of a requester completion; 23..0 the
    /// local QP number.
    pub sop_drop_qpn: U32,
    /// The completed WQE's index (SQ: its control segment's WQE index;
    /// SRQ: the WQE number).
    pub wqe_counter: U16,
    /// CQE signature.
    pub signature: u8,
    /// Bits 7..4 CQE opcode (`MLX5_CQE_*`), 3..2 format, 1 solicited
    /// event, 0 owner bit. The device writes this byte last.
    pub op_own: u8,
}

/// `struct mlx5_err_cqe`: how an error CQE (opcode [`cqe_opcode::REQ_ERR`] or
/// [`cqe_opcode::RESP_ERR`]) reads.
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct ErrCqe {
    /// Reserved.
    pub rsvd0: [u8; 32],
    /// Bits 23..0: SRQ number or user index, as in [`Cqe64::srqn_uidx`].
    pub srqn: U32,
    /// Reserved.
    pub rsvd1: [u8; 18],
    /// Vendor-specific error syndrome.
    pub vendor_err_synd: u8,
    /// Error syndrome (`MLX5_CQE_SYNDROME_*`).
    pub syndrome: u8,
    /// WQE opcode and QP number, as in [`Cqe64::sop_drop_qpn`].
    pub s_wqe_opcode_qpn: U32,
    /// As [`Cqe64::wqe_counter`].
    pub wqe_counter: U16,
    /// CQE signature.
    pub signature: u8,
    /// As [`Cqe64::op_own`].
    pub op_own: u8,
}

impl Cqe64 {
    /// The CQE opcode (`op_own` bits 7..4).
    #[inline(always)]
    pub fn opcode(&self) -> u8 {
        self.op_own >> 4
    }

    /// The same 64 bytes read as an error CQE.
    #[inline(always)]
    pub fn as_err(&self) -> &ErrCqe {
        zerocopy::transmute_ref!(self)
    }
}

/// `MLX5_SEND_WQE_BB`: bytes per send-queue basic block.
pub const SEND_WQE_BB: usize = 64;
/// `MLX5_INLINE_SEG`: set in [`InlineSeg::byte_count`].
pub const INLINE_SEG: u32 = 0x8000_0000;
/// `MLX5_EXTENDED_UD_AV`: set in [`Av::dqp_dct`].
pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
/// `MLX5_INVALID_LKEY`: the lkey of the data segment that ends a receive
/// WQE's scatter list early.
pub const INVALID_LKEY: u32 = 0x100;

/// `MLX5_WQE_CTRL_FENCE` in [`CtrlSeg::fm_ce_se`]: fence mode 4 (wait for
/// earlier READs and atomics).
pub const WQE_CTRL_FENCE: u8 = 0x80;
/// `MLX5_WQE_CTRL_CQ_UPDATE` in [`CtrlSeg::fm_ce_se`]: generate a CQE.
pub const WQE_CTRL_CQ_UPDATE: u8 = 0x08;
/// `MLX5_WQE_CTRL_SOLICITED` in [`CtrlSeg::fm_ce_se`]: solicited event
/// at the receiver.
pub const WQE_CTRL_SOLICITED: u8 = 0x02;

/// Send WQE opcodes (`MLX5_OPCODE_*`): bits 7..0 of
/// [`CtrlSeg::opmod_idx_opcode`], and bits 31..24 of
/// [`Cqe64::sop_drop_qpn`] in a requester CQE.
pub mod opcode {
    /// `MLX5_OPCODE_SEND_INVAL`.
    pub const SEND_INVAL: u8 = 0x01;
    /// `MLX5_OPCODE_RDMA_WRITE`.
    pub const RDMA_WRITE: u8 = 0x08;
    /// `MLX5_OPCODE_RDMA_WRITE_IMM`.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// `MLX5_OPCODE_SEND`.
    pub const SEND: u8 = 0x0a;
    /// `MLX5_OPCODE_SEND_IMM`.
    pub const SEND_IMM: u8 = 0x0b;
    /// `MLX5_OPCODE_RDMA_READ`.
    pub const RDMA_READ: u8 = 0x10;
    /// `MLX5_OPCODE_ATOMIC_CS`.
    pub const ATOMIC_CS: u8 = 0x11;
    /// `MLX5_OPCODE_ATOMIC_FA`.
    pub const ATOMIC_FA: u8 = 0x12;
    /// `MLX5_OPCODE_UMR` (memory-window bind, LOCAL_INV).
    pub const UMR: u8 = 0x25;
}

/// CQE opcodes (`MLX5_CQE_*`): [`Cqe64::opcode`].
pub mod cqe_opcode {
    /// `MLX5_CQE_REQ`: a send completed.
    pub const REQ: u8 = 0;
    /// `MLX5_CQE_RESP_WR_IMM`: an RDMA WRITE with immediate arrived.
    pub const RESP_WR_IMM: u8 = 1;
    /// `MLX5_CQE_RESP_SEND`: a SEND arrived.
    pub const RESP_SEND: u8 = 2;
    /// `MLX5_CQE_RESP_SEND_IMM`: a SEND with immediate arrived.
    pub const RESP_SEND_IMM: u8 = 3;
    /// `MLX5_CQE_RESP_SEND_INV`: a SEND with invalidate arrived.
    pub const RESP_SEND_INV: u8 = 4;
    /// `MLX5_CQE_RESIZE_CQ`: the device moved on to a resized ring.
    pub const RESIZE_CQ: u8 = 5;
    /// `MLX5_CQE_REQ_ERR`: a send failed.
    pub const REQ_ERR: u8 = 13;
    /// `MLX5_CQE_RESP_ERR`: a receive failed (or was flushed).
    pub const RESP_ERR: u8 = 14;
    /// `MLX5_CQE_INVALID`: an entry the device has not written.
    pub const INVALID: u8 = 15;
}

/// Error CQE syndromes (`MLX5_CQE_SYNDROME_*`): [`ErrCqe::syndrome`].
pub mod syndrome {
    /// `MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR`.
    pub const LOCAL_LENGTH_ERR: u8 = 0x01;
    /// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`.
    pub const LOCAL_QP_OP_ERR: u8 = 0x02;
    /// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`.
    pub const LOCAL_PROT_ERR: u8 = 0x04;
    /// `MLX5_CQE_SYNDROME_WR_FLUSH_ERR`.
    pub const WR_FLUSH_ERR: u8 = 0x05;
    /// `MLX5_CQE_SYNDROME_MW_BIND_ERR`.
    pub const MW_BIND_ERR: u8 = 0x06;
    /// `MLX5_CQE_SYNDROME_BAD_RESP_ERR`.
    pub const BAD_RESP_ERR: u8 = 0x10;
    /// `MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR`.
    pub const LOCAL_ACCESS_ERR: u8 = 0x11;
    /// `MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR`.
    pub const REMOTE_INVAL_REQ_ERR: u8 = 0x12;
    /// `MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR`.
    pub const REMOTE_ACCESS_ERR: u8 = 0x13;
    /// `MLX5_CQE_SYNDROME_REMOTE_OP_ERR`.
    pub const REMOTE_OP_ERR: u8 = 0x14;
    /// `MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR`.
    pub const TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
    /// `MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR`.
    pub const RNR_RETRY_EXC_ERR: u8 = 0x16;
    /// `MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR`.
    pub const REMOTE_ABORTED_ERR: u8 = 0x22;
}

/// `MLX5_CQ_DB_REQ_NOT_SOL`: in a CQ arm doorbell, arm for solicited (and
/// error) CQEs only.
pub const CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;
/// `MLX5_CQ_DOORBELL`: offset of the CQ doorbell register in a UAR page.
pub const CQ_DOORBELL: usize = 0x20;
