//! The EFA device's in-memory formats: the send descriptor a provider
//! writes into the low-latency queue (a 32-byte metadata part and 32 bytes
//! of buffers, inline data or an RDMA request), the receive descriptor of
//! the host receive ring, and the completion entries the device writes
//! into a CQ's ring, with the constants found in them.
//!
//! Multi-byte fields are little-endian ([`U16`], [`U32`] from
//! `zerocopy::byteorder::little_endian`, alignment 1, so a descriptor is
//! read the same on any host); every struct carries the alignment the
//! device's layout gives it. rdma-core does not install the header these
//! come from (`efa_io_defs.h`, private to libefa), so the sizes and
//! offsets are fixed by the assertions at the end of this file and by
//! the comparison of our descriptors with libefa's on the emulated device.
//! The layouts are those of the 64-byte descriptors every EFA device
//! takes; newer devices also take 128-byte ones
//! ([`device_caps::DATA_POLLING_128`](super::device_caps::DATA_POLLING_128)),
//! not written here.
//!
//! These are pure layouts. The memory they describe is shared with the
//! device: write whole descriptors through raw pointers and read
//! completion entries by value once their phase bit says they are new.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Buffers a send descriptor holds (its gather list).
pub const TX_DESC_NUM_BUFS: usize = 2;
/// Local buffers of an RDMA request in a send descriptor.
pub const TX_DESC_NUM_RDMA_BUFS: usize = 1;
/// Inline bytes a 64-byte send descriptor holds.
pub const TX_DESC_INLINE_MAX_SIZE: usize = 32;
/// Bytes of a send descriptor (the LLQ's unit, a write-combined store).
pub const TX_WQE_SIZE: usize = 64;

/// The queue a completion belongs to (`enum efa_io_queue_type`), in
/// [`cdesc_flags::Q_TYPE`].
pub mod queue_type {
    /// A QP's send queue.
    pub const SEND: u8 = 1;
    /// A QP's receive queue.
    pub const RECV: u8 = 2;
}

/// A send descriptor's operation (`enum efa_io_send_op_type`), in
/// [`tx_ctrl1::OP_TYPE`] and in [`cdesc_flags::OP_TYPE`].
pub mod send_op {
    /// SEND (with immediate when [`tx_ctrl1::HAS_IMM`](super::tx_ctrl1::HAS_IMM)).
    pub const SEND: u8 = 0;
    /// RDMA READ.
    pub const RDMA_READ: u8 = 1;
    /// RDMA WRITE (devices with
    /// [`device_caps::RDMA_WRITE`](crate::efa::device_caps::RDMA_WRITE)).
    pub const RDMA_WRITE: u8 = 2;
}

/// A completion's status (`enum efa_io_comp_status`).
pub mod comp_status {
    /// Success.
    pub const OK: u8 = 0;
    /// Flushed: the QP was destroyed or went to error first.
    pub const FLUSHED: u8 = 1;
    /// The QP failed inside the device.
    pub const LOCAL_ERROR_QP_INTERNAL_ERROR: u8 = 2;
    /// An operation the device does not do.
    pub const LOCAL_ERROR_UNSUPPORTED_OP: u8 = 3;
    /// The address handle is not valid.
    pub const LOCAL_ERROR_INVALID_AH: u8 = 4;
    /// An lkey not registered, or not covering the address.
    pub const LOCAL_ERROR_INVALID_LKEY: u8 = 5;
    /// The message is too long.
    pub const LOCAL_ERROR_BAD_LENGTH: u8 = 6;
    /// An rkey not registered, or not covering the remote address.
    pub const REMOTE_ERROR_BAD_ADDRESS: u8 = 7;
    /// The remote side reset the connection.
    pub const REMOTE_ERROR_ABORT: u8 = 8;
    /// No such destination QP, or one in error.
    pub const REMOTE_ERROR_BAD_DEST_QPN: u8 = 9;
    /// No receive was posted at the destination.
    pub const REMOTE_ERROR_RNR: u8 = 10;
    /// The receive buffers are too short for the message.
    pub const REMOTE_ERROR_BAD_LENGTH: u8 = 11;
    /// The responder answered with an unexpected status.
    pub const REMOTE_ERROR_BAD_STATUS: u8 = 12;
    /// A remote that answered before stopped answering.
    pub const LOCAL_ERROR_UNRESP_REMOTE: u8 = 13;
    /// The remote side has no address handle for us (RDMA needs one).
    pub const REMOTE_ERROR_UNKNOWN_PEER: u8 = 14;
    /// A remote that never answered.
    pub const LOCAL_ERROR_UNREACH_REMOTE: u8 = 15;
    /// The two sides' features do not match.
    pub const REMOTE_ERROR_FEATURE_MISMATCH: u8 = 18;
}

/// The bits of [`TxMetaDesc::ctrl1`].
pub mod tx_ctrl1 {
    /// Bits 3..0: the operation ([`send_op`](super::send_op)).
    pub const OP_TYPE: u8 = 0x0f;
    /// The immediate data field is sent (and reported at the receiver).
    pub const HAS_IMM: u8 = 1 << 4;
    /// The message is inline: its bytes follow the metadata, and
    /// [`TxMetaDesc::length`](super::TxMetaDesc::length) counts them (else it counts buffers).
    pub const INLINE_MSG: u8 = 1 << 5;
    /// Extended metadata: must be zero.
    pub const META_EXTENSION: u8 = 1 << 6;
    /// This is a metadata descriptor: must be set.
    pub const META_DESC: u8 = 1 << 7;
}

/// The bits of [`TxMetaDesc::ctrl2`].
pub mod tx_ctrl2 {
    /// The phase of the pass over the ring this descriptor was written in.
    pub const PHASE: u8 = 1 << 0;
    /// First descriptor of the request: must be set.
    pub const FIRST: u8 = 1 << 2;
    /// Last descriptor of the request: must be set.
    pub const LAST: u8 = 1 << 3;
    /// A completion is wanted once the request is done.
    pub const COMP_REQ: u8 = 1 << 4;
}

/// The lkey bits of [`TxBufDesc::lkey`] and [`RxDesc::lkey_ctrl`] (the
/// device's keys are 24 bits).
pub const LKEY_MASK: u32 = 0x00ff_ffff;

/// The control bits of [`RxDesc::lkey_ctrl`] above the lkey.
pub mod rx_ctrl {
    /// First descriptor of the receive request.
    pub const FIRST: u32 = 1 << 30;
    /// Last descriptor of the receive request.
    pub const LAST: u32 = 1 << 31;
}

/// The bits of [`CdescCommon::flags`].
pub mod cdesc_flags {
    /// The phase of the pass over the ring the device wrote this entry in:
    /// an entry is new when it matches the phase the consumer expects.
    pub const PHASE: u8 = 1 << 0;
    /// Bits 2..1: the queue ([`queue_type`](super::queue_type)).
    pub const Q_TYPE: u8 = 0b0000_0110;
    /// The shift of [`Q_TYPE`].
    pub const Q_TYPE_SHIFT: u32 = 1;
    /// A receive carried immediate data ([`RxCdesc::imm`](super::RxCdesc::imm)).
    pub const HAS_IMM: u8 = 1 << 3;
    /// Bits 6..4: the operation ([`send_op`](super::send_op)) on devices
    /// that report it.
    pub const OP_TYPE: u8 = 0b0111_0000;
    /// The shift of [`OP_TYPE`].
    pub const OP_TYPE_SHIFT: u32 = 4;
    /// A receive that matched no posted request (a WRITE with immediate
    /// on a QP created for unsolicited receives).
    pub const UNSOLICITED: u8 = 1 << 7;
}

/// The metadata half of a send descriptor (`struct efa_io_tx_meta_desc`).
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct TxMetaDesc {
    /// The provider's request id, handed back in the completion.
    pub req_id: U16,
    /// [`tx_ctrl1`] bits.
    pub ctrl1: u8,
    /// [`tx_ctrl2`] bits.
    pub ctrl2: u8,
    /// The destination QP number.
    pub dest_qp_num: U16,
    /// Inline bytes, or buffers of the gather list.
    pub length: U16,
    /// Immediate data, with [`tx_ctrl1::HAS_IMM`].
    pub immediate_data: U32,
    /// The device's address handle of the destination.
    pub ah: U16,
    /// Must be zero (newer devices: processing hints, then zero).
    pub reserved: U16,
    /// The destination's Q_Key.
    pub qkey: U32,
    /// Must be zero (newer devices: the high bits of a 64-bit request id
    /// in the last 6 bytes).
    pub reserved2: [u8; 12],
}

/// A local buffer of a send descriptor (`struct efa_io_tx_buf_desc`).
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct TxBufDesc {
    /// Bytes.
    pub length: U32,
    /// The lkey in bits 23..0 ([`LKEY_MASK`]), zero above.
    pub lkey: U32,
    /// Address bits 31..0.
    pub buf_addr_lo: U32,
    /// Address bits 63..32.
    pub buf_addr_hi: U32,
}

/// The remote side of an RDMA request (`struct efa_io_remote_mem_addr`).
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct RemoteMemAddr {
    /// Bytes.
    pub length: U32,
    /// The remote key.
    pub rkey: U32,
    /// Remote address bits 31..0.
    pub buf_addr_lo: U32,
    /// Remote address bits 63..32.
    pub buf_addr_hi: U32,
}

/// The data half of an RDMA request (`struct efa_io_rdma_req`).
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct RdmaReq {
    /// Where in the remote memory.
    pub remote_mem: RemoteMemAddr,
    /// The local buffer.
    pub local_mem: [TxBufDesc; TX_DESC_NUM_RDMA_BUFS],
}

/// A whole 64-byte send descriptor (`struct efa_io_tx_wqe`): the metadata
/// and 32 bytes that hold, as the metadata says, the gather list
/// ([`TX_DESC_NUM_BUFS`] [`TxBufDesc`]s), the inline bytes, or an
/// [`RdmaReq`]. Read or write `data` through those types
/// (`FromBytes`/`IntoBytes`).
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct TxWqe {
    /// The metadata.
    pub meta: TxMetaDesc,
    /// Buffers, inline bytes or an RDMA request.
    pub data: [u8; 32],
}

/// A receive descriptor of the host receive ring (`struct efa_io_rx_desc`).
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct RxDesc {
    /// Address bits 31..0.
    pub buf_addr_lo: U32,
    /// Address bits 63..32.
    pub buf_addr_hi: U32,
    /// The provider's request id, handed back in the completion.
    pub req_id: U16,
    /// Bytes.
    pub length: U16,
    /// The lkey in bits 23..0, [`rx_ctrl`] bits above.
    pub lkey_ctrl: U32,
}

/// What every completion entry starts with (`struct efa_io_cdesc_common`,
/// with the length that follows it in a receive entry).
#[repr(C, align(2))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct CdescCommon {
    /// The request id of the completed descriptor.
    pub req_id: U16,
    /// [`comp_status`] code.
    pub status: u8,
    /// [`cdesc_flags`] bits.
    pub flags: u8,
    /// The local QP number.
    pub qp_num: U16,
    /// Bytes received (receive entries; bits 15..0 of it).
    pub length: U16,
}

/// A receive completion (`struct efa_io_rx_cdesc`): 16 bytes, the entry
/// size of a CQ without the sender's GID.
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct RxCdesc {
    /// Request id, status, flags, QP number and length.
    pub common: CdescCommon,
    /// The sender's address handle on this device, `0xffff` if it has
    /// none ([`UNKNOWN_AH`]).
    pub ah: U16,
    /// The sender's QP number.
    pub src_qp_num: U16,
    /// Immediate data, with [`cdesc_flags::HAS_IMM`].
    pub imm: U32,
}

/// [`RxCdesc::ah`] of a sender this device holds no address handle for.
pub const UNKNOWN_AH: u16 = 0xffff;

/// A receive completion with the sender's GID (`struct
/// efa_io_rx_cdesc_ex`): 32 bytes, the entry size of a CQ created with
/// [`create_cq_flags::WITH_SGID`](super::create_cq_flags::WITH_SGID).
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct RxCdescEx {
    /// The 16-byte entry.
    pub base: RxCdesc,
    /// The sender's GID, valid when [`RxCdesc::ah`] is [`UNKNOWN_AH`].
    pub src_addr: [u8; 16],
}

// The layouts the device reads and writes; the emulated device and
// libefa's descriptors check the byte values.
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<TxMetaDesc>() == 32);
    assert!(offset_of!(TxMetaDesc, dest_qp_num) == 4);
    assert!(offset_of!(TxMetaDesc, immediate_data) == 8);
    assert!(offset_of!(TxMetaDesc, ah) == 12);
    assert!(offset_of!(TxMetaDesc, qkey) == 16);
    assert!(size_of::<TxBufDesc>() == 16);
    assert!(size_of::<RemoteMemAddr>() == 16);
    assert!(size_of::<RdmaReq>() == 32);
    assert!(size_of::<TxWqe>() == TX_WQE_SIZE);
    assert!(size_of::<[TxBufDesc; TX_DESC_NUM_BUFS]>() == TX_DESC_INLINE_MAX_SIZE);
    assert!(size_of::<RxDesc>() == 16);
    assert!(offset_of!(RxDesc, req_id) == 8);
    assert!(offset_of!(RxDesc, lkey_ctrl) == 12);
    assert!(size_of::<CdescCommon>() == 8);
    assert!(size_of::<RxCdesc>() == 16);
    assert!(offset_of!(RxCdesc, ah) == 8);
    assert!(offset_of!(RxCdesc, imm) == 12);
    assert!(size_of::<RxCdescEx>() == 32);
};

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromBytes;

    #[test]
    fn a_completion_entry_reads_from_any_16_bytes() {
        // req_id 0x0102, status 7, flags: phase, RECV, has_imm; qp 9;
        // length 300; ah 0xffff; src qp 5; imm 0xdeadbeef.
        let bytes = [
            0x02,
            0x01,
            7,
            0b0000_1101,
            9,
            0,
            0x2c,
            0x01,
            0xff,
            0xff,
            5,
            0,
            0xef,
            0xbe,
            0xad,
            0xde,
        ];
        let e = RxCdesc::read_from_bytes(&bytes).unwrap();
        assert_eq!(e.common.req_id.get(), 0x0102);
        assert_eq!(e.common.status, comp_status::REMOTE_ERROR_BAD_ADDRESS);
        let f = e.common.flags;
        assert_ne!(f & cdesc_flags::PHASE, 0);
        assert_eq!(
            (f & cdesc_flags::Q_TYPE) >> cdesc_flags::Q_TYPE_SHIFT,
            queue_type::RECV
        );
        assert_ne!(f & cdesc_flags::HAS_IMM, 0);
        assert_eq!(e.common.qp_num.get(), 9);
        assert_eq!(e.common.length.get(), 300);
        assert_eq!(e.ah.get(), UNKNOWN_AH);
        assert_eq!(e.src_qp_num.get(), 5);
        assert_eq!(e.imm.get(), 0xdead_beef);
    }

    #[test]
    fn a_send_descriptor_is_64_bytes_of_meta_then_data() {
        let mut w = TxWqe::default();
        w.meta.req_id.set(3);
        w.meta.ctrl1 = tx_ctrl1::META_DESC | send_op::SEND;
        w.meta.ctrl2 = tx_ctrl2::FIRST | tx_ctrl2::LAST | tx_ctrl2::COMP_REQ | tx_ctrl2::PHASE;
        w.meta.length.set(1);
        let sge = TxBufDesc {
            length: 64.into(),
            lkey: 0x12_3456.into(),
            buf_addr_lo: 0x9000.into(),
            buf_addr_hi: 0x7f.into(),
        };
        w.data[..16].copy_from_slice(sge.as_bytes());
        let b = w.as_bytes();
        assert_eq!(b.len(), TX_WQE_SIZE);
        assert_eq!(&b[..4], &[3, 0, 0x80, 0b0001_1101]);
        assert_eq!(&b[32..36], &64u32.to_le_bytes());
        assert_eq!(&b[44..48], &0x7fu32.to_le_bytes());
    }
}
