//! Work requests and completions as the uverbs ABI encodes them: the SGE,
//! the send opcodes and flags, the 48-byte work completion, its status and
//! opcode values, and the POST_SEND header. Providers whose rings carry these
//! encodings (rxe) use them as they are. The typed work requests built from
//! them live in `rverbs-provider` (`rverbs_provider::wr`).

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_sge` (also `struct rxe_sge` and `struct ibv_sge`): one
/// gather/scatter element, a range of a registered memory region.
#[repr(C)]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Sge {
    /// Start address (in the MR's address space).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The MR's local key.
    pub lkey: u32,
}

/// `enum ib_uverbs_wr_opcode`.
#[allow(missing_docs)]
pub mod wr_opcode {
    pub const RDMA_WRITE: u32 = 0;
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    pub const SEND: u32 = 2;
    pub const SEND_WITH_IMM: u32 = 3;
    pub const RDMA_READ: u32 = 4;
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    pub const LOCAL_INV: u32 = 7;
    pub const BIND_MW: u32 = 8;
    pub const SEND_WITH_INV: u32 = 9;
    /// RDMA FLUSH (kernels from 6.2; not yet in every distribution's uapi
    /// headers).
    pub const FLUSH: u32 = 14;
    pub const ATOMIC_WRITE: u32 = 15;
}

/// The placement types of an RDMA FLUSH (`IB_FLUSH_*` types, a bit mask):
/// to the global visibility point, or to persistence.
#[allow(missing_docs)]
pub mod flush_type {
    pub const GLOBAL: u8 = 1 << 0;
    pub const PERSISTENT: u8 = 1 << 1;
}

/// The selectivity levels of an RDMA FLUSH (`IB_FLUSH_RANGE`,
/// `IB_FLUSH_MR`): the range the request names, or the whole MR its rkey
/// names.
#[allow(missing_docs)]
pub mod flush_level {
    pub const RANGE: u8 = 0;
    pub const MR: u8 = 1;
}

/// Send flags (`IB_SEND_*`), as the kernel and the rxe ring take them.
#[allow(missing_docs)]
pub mod send_flags {
    pub const FENCE: u32 = 1 << 0;
    pub const SIGNALED: u32 = 1 << 1;
    pub const SOLICITED: u32 = 1 << 2;
    pub const INLINE: u32 = 1 << 3;
}

/// `struct ib_uverbs_wc`: one work completion, 48 bytes. The rxe completion
/// ring holds exactly these.
#[repr(C)]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct Wc {
    /// The completed work request's id.
    pub wr_id: u64,
    /// `IB_WC_*` status.
    pub status: u32,
    /// `IB_UVERBS_WC_*` opcode.
    pub opcode: u32,
    /// Provider-specific error detail.
    pub vendor_err: u32,
    /// Bytes transferred (receives, RDMA READ).
    pub byte_len: u32,
    /// Immediate data (big-endian, as sent) or the invalidated rkey.
    pub ex: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP (UD).
    pub src_qp: u32,
    /// `IB_WC_*` flags.
    pub wc_flags: u32,
    /// P_Key index (GSI).
    pub pkey_index: u16,
    /// Source LID.
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// DLID path bits.
    pub dlid_path_bits: u8,
    /// Port number.
    pub port_num: u8,
    /// Zero.
    pub reserved: u8,
}

impl Wc {
    /// Two adjacent `u32` fields (`first` at the lower address: `status`
    /// and `opcode`, `vendor_err` and `byte_len`, `ex` and `qp_num`,
    /// `src_qp` and `wc_flags`) as the 8-byte word they share, in this
    /// machine's byte order: for a provider that writes a completion a
    /// word at a time ([`Wc::words_mut`]) from words it prepared.
    pub const fn pair(first: u32, second: u32) -> u64 {
        if cfg!(target_endian = "little") {
            first as u64 | (second as u64) << 32
        } else {
            (first as u64) << 32 | second as u64
        }
    }

    /// The completion as its six 8-byte words (word 0 `wr_id`, words 1
    /// to 4 the [`Wc::pair`]s in field order, word 5 the last eight
    /// one- and two-byte fields).
    #[inline(always)]
    pub fn words_mut(&mut self) -> &mut [u64; 6] {
        // Both are 48 plain bytes aligned to 8 (zerocopy checks it).
        zerocopy::transmute_mut!(self)
    }
}

/// Work completion opcodes (`enum ib_uverbs_wc_opcode`, plus the receive values).
#[allow(missing_docs)]
pub mod wc_opcode {
    pub const SEND: u32 = 0;
    pub const RDMA_WRITE: u32 = 1;
    pub const RDMA_READ: u32 = 2;
    pub const COMP_SWAP: u32 = 3;
    pub const FETCH_ADD: u32 = 4;
    pub const BIND_MW: u32 = 5;
    pub const LOCAL_INV: u32 = 6;
    pub const FLUSH: u32 = 8;
    pub const ATOMIC_WRITE: u32 = 9;
    pub const RECV: u32 = 1 << 7;
    pub const RECV_RDMA_WITH_IMM: u32 = (1 << 7) + 1;
}

/// Work completion flags (`enum ib_wc_flags`).
#[allow(missing_docs)]
pub mod wc_flags {
    pub const GRH: u32 = 1 << 0;
    pub const WITH_IMM: u32 = 1 << 1;
    pub const WITH_INVALIDATE: u32 = 1 << 2;
}

/// Completion status values (`enum ib_wc_status`).
#[allow(missing_docs)]
pub mod wc_status {
    pub const SUCCESS: u32 = 0;
    pub const LOC_LEN_ERR: u32 = 1;
    pub const LOC_QP_OP_ERR: u32 = 2;
    pub const LOC_EEC_OP_ERR: u32 = 3;
    pub const LOC_PROT_ERR: u32 = 4;
    pub const WR_FLUSH_ERR: u32 = 5;
    pub const MW_BIND_ERR: u32 = 6;
    pub const BAD_RESP_ERR: u32 = 7;
    pub const LOC_ACCESS_ERR: u32 = 8;
    pub const REM_INV_REQ_ERR: u32 = 9;
    pub const REM_ACCESS_ERR: u32 = 10;
    pub const REM_OP_ERR: u32 = 11;
    pub const RETRY_EXC_ERR: u32 = 12;
    pub const RNR_RETRY_EXC_ERR: u32 = 13;
    pub const LOC_RDD_VIOL_ERR: u32 = 14;
    pub const REM_INV_RD_REQ_ERR: u32 = 15;
    pub const REM_ABORT_ERR: u32 = 16;
    pub const INV_EECN_ERR: u32 = 17;
    pub const INV_EEC_STATE_ERR: u32 = 18;
    pub const FATAL_ERR: u32 = 19;
    pub const RESP_TIMEOUT_ERR: u32 = 20;
    pub const GENERAL_ERR: u32 = 21;
}

/// `struct ib_uverbs_post_send`: the command header of POST_SEND. rxe uses
/// it with no work requests as its send doorbell.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct PostSend {
    pub response: u64,
    pub qp_handle: u32,
    pub wr_count: u32,
    pub sge_count: u32,
    pub wqe_size: u32,
}

/// `struct ib_uverbs_post_send_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct PostSendResp {
    /// Index of the first failed work request.
    pub bad_wr: u32,
}

/// `sizeof(struct ib_uverbs_send_wr)`: the `wqe_size` POST_SEND announces.
pub const UVERBS_SEND_WR_SIZE: u32 = 56;

#[cfg(test)]
mod tests {
    use super::Wc;

    /// Each word written through [`Wc::words_mut`] lands on the fields
    /// [`Wc::pair`] names, in this machine's byte order.
    #[test]
    fn words_are_the_field_pairs() {
        let mut wc = Wc::default();
        let w = wc.words_mut();
        w[0] = 0x1122_3344_5566_7788;
        w[1] = Wc::pair(1, 2);
        w[2] = Wc::pair(3, 4);
        w[3] = Wc::pair(5, 6);
        w[4] = Wc::pair(7, 8);
        w[5] = 0;
        let want = Wc {
            wr_id: 0x1122_3344_5566_7788,
            status: 1,
            opcode: 2,
            vendor_err: 3,
            byte_len: 4,
            ex: 5,
            qp_num: 6,
            src_qp: 7,
            wc_flags: 8,
            ..Wc::default()
        };
        assert_eq!(wc, want);
    }
}
