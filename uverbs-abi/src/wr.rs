//! Work requests and completions as the uverbs ABI encodes them: the SGE,
//! the send opcodes and flags, the 48-byte work completion, and its status
//! and opcode values. Providers whose rings carry these encodings (rxe) use
//! them as they are; the `verbs` crate re-exports them.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::Errno;

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

/// A send work request's operation (`enum ib_uverbs_wr_opcode`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    /// Write the local gather list to remote memory.
    RdmaWrite = wr_opcode::RDMA_WRITE,
    /// RDMA WRITE that also consumes a receive and delivers immediate data.
    RdmaWriteWithImm = wr_opcode::RDMA_WRITE_WITH_IMM,
    /// Send to the peer's next receive.
    Send = wr_opcode::SEND,
    /// Send with immediate data.
    SendWithImm = wr_opcode::SEND_WITH_IMM,
    /// Read remote memory into the local scatter list.
    RdmaRead = wr_opcode::RDMA_READ,
    /// 64-bit compare and swap on remote memory.
    AtomicCmpAndSwp = wr_opcode::ATOMIC_CMP_AND_SWP,
    /// 64-bit fetch and add on remote memory.
    AtomicFetchAndAdd = wr_opcode::ATOMIC_FETCH_AND_ADD,
    /// Invalidate a local rkey.
    LocalInv = wr_opcode::LOCAL_INV,
    /// Send, invalidating an rkey at the peer.
    SendWithInv = wr_opcode::SEND_WITH_INV,
}

impl WrOpcode {
    /// Whether the operation names remote memory (remote address and rkey).
    pub fn is_rdma(self) -> bool {
        matches!(
            self,
            Self::RdmaWrite | Self::RdmaWriteWithImm | Self::RdmaRead
        )
    }
    /// Whether the operation is an atomic.
    pub fn is_atomic(self) -> bool {
        matches!(self, Self::AtomicCmpAndSwp | Self::AtomicFetchAndAdd)
    }
    /// Whether the operation carries immediate data.
    pub fn has_imm(self) -> bool {
        matches!(self, Self::RdmaWriteWithImm | Self::SendWithImm)
    }
}

bitflags::bitflags! {
    /// Send flags (`IB_SEND_*`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA READs and atomics before starting.
        const FENCE = send_flags::FENCE;
        /// Generate a completion for this work request.
        const SIGNALED = send_flags::SIGNALED;
        /// Raise a solicited event at the receiver.
        const SOLICITED = send_flags::SOLICITED;
        /// Copy the payload into the WQE at post time (see [`Payload::Inline`]).
        const INLINE = send_flags::INLINE;
    }
}

/// Where a send work request's data comes from (or, for RDMA READ, goes to).
#[derive(Debug, Clone, Copy)]
pub enum Payload<'a> {
    /// A gather (scatter for READ) list of registered memory.
    Sge(&'a [Sge]),
    /// Bytes copied into the work queue entry at post time: the buffers need
    /// not be registered and may be reused as soon as the post returns.
    Inline(&'a [std::io::IoSlice<'a>]),
}

/// A send work request in provider-neutral form. Chains are slices of these.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Flags; [`SendFlags::INLINE`] is implied by [`Payload::Inline`].
    pub send_flags: SendFlags,
    /// Immediate data in host order (sent big-endian), for the `*_WITH_IMM`
    /// opcodes; the rkey to invalidate for `SEND_WITH_INV`/`LOCAL_INV`.
    pub imm_data: u32,
    /// The local data.
    pub payload: Payload<'a>,
    /// Remote virtual address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// Compare value (CMP_AND_SWP) or addend (FETCH_AND_ADD).
    pub compare_add: u64,
    /// Swap value (CMP_AND_SWP).
    pub swap: u64,
    /// Where a UD send goes: required on UD QPs, refused on connected ones.
    pub ud: Option<UdDest<'a>>,
}

/// The destination of a UD send: an address handle (by the number the
/// provider knows it by), the remote QP and the Q_Key to present to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct UdDest<'a> {
    /// The provider's number for the address handle (rxe: `ah_num`).
    pub ah_num: u32,
    /// The address vector the device reads from the WQE, for providers that
    /// put it there (mlx5: the 48-byte `mlx5_wqe_av`); `None` for rxe.
    pub av: Option<&'a [u8; 48]>,
    /// Remote QP number (24 bits).
    pub remote_qpn: u32,
    /// Q_Key the remote QP expects.
    pub remote_qkey: u32,
}

/// A receive work request.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Scatter list of registered memory.
    pub sg_list: &'a [Sge],
}

impl<'a> SendWr<'a> {
    /// A request with every field zero but these.
    pub const fn new(wr_id: u64, opcode: WrOpcode, payload: Payload<'a>) -> Self {
        SendWr {
            wr_id,
            opcode,
            send_flags: SendFlags::empty(),
            imm_data: 0,
            payload,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            ud: None,
        }
    }
    /// SEND of the gather list `sges`.
    pub const fn send(wr_id: u64, sges: &'a [Sge]) -> Self {
        Self::new(wr_id, WrOpcode::Send, Payload::Sge(sges))
    }
    /// SEND of `bufs`, copied inline into the WQE.
    pub const fn send_inline(wr_id: u64, bufs: &'a [std::io::IoSlice<'a>]) -> Self {
        Self::new(wr_id, WrOpcode::Send, Payload::Inline(bufs))
    }
    /// RDMA WRITE of `sges` to `remote_addr` under `rkey`.
    pub const fn rdma_write(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        Self::new(wr_id, WrOpcode::RdmaWrite, Payload::Sge(sges)).remote(remote_addr, rkey)
    }
    /// RDMA READ from `remote_addr` under `rkey` into `sges`.
    pub const fn rdma_read(wr_id: u64, sges: &'a [Sge], remote_addr: u64, rkey: u32) -> Self {
        Self::new(wr_id, WrOpcode::RdmaRead, Payload::Sge(sges)).remote(remote_addr, rkey)
    }
    /// 64-bit compare-and-swap at `remote_addr` (8-byte aligned) under
    /// `rkey`: if the remote value equals `compare` it becomes `swap`; the
    /// original value is written to `sge` (exactly 8 bytes). Values are in
    /// host order. RC only.
    pub const fn cmp_swap(
        wr_id: u64,
        sge: &'a Sge,
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    ) -> Self {
        let sges = core::slice::from_ref(sge);
        let mut wr = Self::new(wr_id, WrOpcode::AtomicCmpAndSwp, Payload::Sge(sges))
            .remote(remote_addr, rkey);
        wr.compare_add = compare;
        wr.swap = swap;
        wr
    }
    /// 64-bit fetch-and-add of `add` at `remote_addr` (8-byte aligned)
    /// under `rkey`; the original value is written to `sge` (exactly 8
    /// bytes). Values are in host order. RC only.
    pub const fn fetch_add(
        wr_id: u64,
        sge: &'a Sge,
        remote_addr: u64,
        rkey: u32,
        add: u64,
    ) -> Self {
        let sges = core::slice::from_ref(sge);
        let mut wr = Self::new(wr_id, WrOpcode::AtomicFetchAndAdd, Payload::Sge(sges))
            .remote(remote_addr, rkey);
        wr.compare_add = add;
        wr
    }
    /// Addresses a UD send to `dest` (in the `verbs` crate:
    /// `wr.dest(ah.dest(remote_qpn, remote_qkey))`, which carries what
    /// every provider needs, mlx5's address vector included).
    pub const fn dest(mut self, dest: UdDest<'a>) -> Self {
        self.ud = Some(dest);
        self
    }
    /// Addresses a UD send by the provider's raw address-handle number
    /// `ah_num` alone. Enough for rxe only: mlx5 needs the address vector
    /// too, and refuses such a request with [`PostError::MissingAddress`].
    /// Use [`SendWr::dest`] with `Ah::dest` instead.
    #[doc(hidden)]
    pub const fn ud(mut self, ah_num: u32, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.ud = Some(UdDest {
            ah_num,
            av: None,
            remote_qpn,
            remote_qkey,
        });
        self
    }
    /// Sets the remote address and key.
    pub const fn remote(mut self, remote_addr: u64, rkey: u32) -> Self {
        self.remote_addr = remote_addr;
        self.rkey = rkey;
        self
    }
    /// Adds immediate data (host order), turning SEND into SEND_WITH_IMM and
    /// RDMA_WRITE into RDMA_WRITE_WITH_IMM.
    pub const fn with_imm(mut self, imm: u32) -> Self {
        self.opcode = match self.opcode {
            WrOpcode::Send => WrOpcode::SendWithImm,
            WrOpcode::RdmaWrite => WrOpcode::RdmaWriteWithImm,
            o => o,
        };
        self.imm_data = imm;
        self
    }
    /// Requests a completion for this request.
    pub const fn signaled(mut self) -> Self {
        self.send_flags = self.send_flags.union(SendFlags::SIGNALED);
        self
    }
    /// Adds `flags`.
    pub const fn flags(mut self, flags: SendFlags) -> Self {
        self.send_flags = self.send_flags.union(flags);
        self
    }
}

impl<'a> RecvWr<'a> {
    /// A receive into the scatter list `sg_list`.
    pub const fn new(wr_id: u64, sg_list: &'a [Sge]) -> Self {
        RecvWr { wr_id, sg_list }
    }
}

/// Why a work request was refused before it reached the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The queue has no free slot: poll completions and post again. A send
    /// slot is freed only when the device has completed the request; on
    /// mlx5 (as with rdma-core) that is known only from a completion, so
    /// unsignaled sends stay counted until a later *signaled* send
    /// completes: a QP that never signals fills up for good. Signal at
    /// least one send in every `max_send_wr` (see `rverbs::SignalEvery`).
    QueueFull,
    /// More SGEs than the queue was created for.
    TooManySge {
        /// SGEs in the request.
        given: usize,
        /// The queue's maximum.
        max: u32,
    },
    /// Inline payload larger than the QP's `max_inline_data`.
    InlineTooLarge {
        /// Payload bytes.
        len: usize,
        /// The QP's maximum.
        max: u32,
    },
    /// Total length over 2^31 bytes (the largest IB message).
    MessageTooLong,
    /// The opcode does not fit this QP or payload (e.g. inline RDMA READ).
    InvalidOpcode,
    /// An atomic whose remote address is not 8-byte aligned or whose
    /// local buffer is not exactly 8 bytes.
    BadAtomic,
    /// The queue is not accepting work (e.g. receives while in RESET).
    InvalidState,
    /// A send on a UD QP without a destination (address handle, remote QPN
    /// and Q_Key).
    MissingAddress,
    /// A UD destination on a connected (RC/UC) QP, whose peer is fixed at
    /// connection time.
    UnexpectedAddress,
    /// A UD message longer than the port's active MTU (a UD message is one
    /// packet; rxe would drop it without an error).
    UdTooLong {
        /// Message bytes.
        len: u64,
        /// The port's active MTU in bytes.
        mtu: u32,
    },
    /// LOCAL_INV or SEND_WITH_INV: devices invalidate only memory windows
    /// and fast-registration MRs, neither of which this crate's users get
    /// from a plain registration; on a plain MR the device fails the
    /// request (or, for SEND_WITH_INV, the receiver) and moves the QP to
    /// the error state.
    InvalidateUnsupported,
    /// A receive posted to a QP that takes its receives from a shared
    /// receive queue: post them to the SRQ.
    UsesSrq,
    /// The kernel refused the doorbell.
    Doorbell(Errno),
}

impl std::fmt::Display for PostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PostError::QueueFull => write!(
                f,
                "work queue full: poll completions and post again (send slots are freed \
                 by completions; on mlx5 unsignaled sends are freed only when a later \
                 signaled send completes, so signal at least one in every max_send_wr)"
            ),
            PostError::TooManySge { given, max } => {
                write!(f, "{given} SGEs exceed the queue's max_sge {max}")
            }
            PostError::InlineTooLarge { len, max } => {
                write!(f, "{len} inline bytes exceed max_inline_data {max}")
            }
            PostError::MessageTooLong => write!(f, "message longer than 2^31 bytes"),
            PostError::InvalidOpcode => write!(f, "opcode not valid for this QP or payload"),
            PostError::BadAtomic => {
                write!(
                    f,
                    "atomic needs an 8-byte aligned remote address and an 8-byte local buffer"
                )
            }
            PostError::InvalidState => write!(f, "queue does not accept work in its current state"),
            PostError::MissingAddress => write!(
                f,
                "a UD send needs a destination (address handle, remote QPN and Q_Key)"
            ),
            PostError::UnexpectedAddress => write!(
                f,
                "a UD destination was given to a connected QP (RC/UC peers are set at connect time)"
            ),
            PostError::UdTooLong { len, mtu } => write!(
                f,
                "{len}-byte UD message exceeds the port's active MTU of {mtu} bytes"
            ),
            PostError::InvalidateUnsupported => write!(
                f,
                "LOCAL_INV/SEND_WITH_INV are not supported: only memory windows and \
                 fast-registration MRs can be invalidated, and plain registered MRs are neither"
            ),
            PostError::UsesSrq => write!(
                f,
                "this QP takes its receives from a shared receive queue: post them to the SRQ"
            ),
            PostError::Doorbell(e) => write!(f, "doorbell failed: {e}"),
        }
    }
}

impl std::error::Error for PostError {}

/// Opcodes (bit `1 << opcode`) that, on a QP of type `qp_type` and without
/// a UD destination, pass every check of [`check_send`] whatever the
/// payload: SEND, SEND_WITH_IMM, RDMA_WRITE(_WITH_IMM), and on RC also
/// RDMA_READ. Providers skip [`check_send`] for them on the data path.
pub fn simple_send_ops(qp_type: u8) -> u32 {
    let bit = |op: WrOpcode| 1u32 << (op as u32);
    let connected = bit(WrOpcode::Send)
        | bit(WrOpcode::SendWithImm)
        | bit(WrOpcode::RdmaWrite)
        | bit(WrOpcode::RdmaWriteWithImm);
    match qp_type {
        crate::qp::qp_type::RC => connected | bit(WrOpcode::RdmaRead),
        crate::qp::qp_type::UC => connected,
        _ => 0,
    }
}

/// The largest message IB allows: 2^31 bytes.
pub const MAX_MSG: u64 = 1 << 31;

/// Total bytes of the scatter/gather list `sges`, saturating at
/// `u64::MAX` (so an impossible total still compares as too long, never
/// wraps to a small one).
#[inline(always)]
pub fn sge_len(sges: &[Sge]) -> u64 {
    match sges {
        [one] => u64::from(one.length),
        _ => sges
            .iter()
            .fold(0u64, |acc, s| acc.saturating_add(u64::from(s.length))),
    }
}

/// The checks every provider applies to an inline payload `bufs` of a send
/// with `opcode` on a QP taking at most `max_inline` inline bytes: the
/// total fits `max_inline` ([`PostError::InlineTooLarge`]) and the opcode
/// carries local data to the peer (SEND and RDMA WRITE, with or without
/// immediate; else [`PostError::InvalidOpcode`]). Returns the total.
///
/// The caller's slice lengths are summed with saturating arithmetic: a
/// set of slices whose lengths add up past `usize::MAX` reports
/// `len: usize::MAX` rather than wrapping to a small total that would
/// pass the check while the slices themselves are copied in full.
#[inline(always)]
pub fn inline_len(
    opcode: WrOpcode,
    bufs: &[std::io::IoSlice<'_>],
    max_inline: u32,
) -> Result<u32, PostError> {
    let len = bufs
        .iter()
        .fold(0usize, |acc, b| acc.saturating_add(b.len()));
    let Ok(len32) = u32::try_from(len) else {
        return Err(PostError::InlineTooLarge {
            len,
            max: max_inline,
        });
    };
    if len32 > max_inline {
        return Err(PostError::InlineTooLarge {
            len,
            max: max_inline,
        });
    }
    if !matches!(
        opcode,
        WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm
    ) {
        return Err(PostError::InvalidOpcode);
    }
    Ok(len32)
}

/// The opcode, QP type and destination rules every provider applies to a
/// send request on a QP of type `qpt` whose payload checks passed
/// (`length` bytes): READ and atomics on RC only, no RDMA on UD, atomics
/// 8 bytes in one SGE to an 8-byte aligned address, no invalidation (no
/// fast-registration MRs or memory windows here), and a UD destination
/// exactly on UD QPs (`has_dest`: the provider found in `wr.ud` what its
/// WQE needs), UD messages at most `ud_mtu` bytes (one packet).
pub fn check_send(
    qpt: u8,
    ud_mtu: u32,
    wr: &SendWr<'_>,
    length: u64,
    has_dest: bool,
) -> Result<(), PostError> {
    use crate::qp::qp_type;
    if matches!(wr.opcode, WrOpcode::LocalInv | WrOpcode::SendWithInv) {
        return Err(PostError::InvalidateUnsupported);
    }
    if qpt != qp_type::RC && (wr.opcode == WrOpcode::RdmaRead || wr.opcode.is_atomic()) {
        return Err(PostError::InvalidOpcode);
    }
    if qpt == qp_type::UD && wr.opcode.is_rdma() {
        return Err(PostError::InvalidOpcode);
    }
    if wr.opcode.is_atomic() {
        let one_sge = matches!(wr.payload, Payload::Sge([_]));
        if length != 8 || wr.remote_addr % 8 != 0 || !one_sge {
            return Err(PostError::BadAtomic);
        }
    }
    if qpt == qp_type::UD {
        if !has_dest {
            return Err(PostError::MissingAddress);
        }
        if length > ud_mtu as u64 {
            return Err(PostError::UdTooLong {
                len: length,
                mtu: ud_mtu,
            });
        }
    } else if wr.ud.is_some() {
        return Err(PostError::UnexpectedAddress);
    }
    Ok(())
}

#[cfg(test)]
mod send_check_tests {
    use super::*;
    use crate::qp::qp_type;

    const OPCODES: [WrOpcode; 9] = [
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaWriteWithImm,
        WrOpcode::Send,
        WrOpcode::SendWithImm,
        WrOpcode::RdmaRead,
        WrOpcode::AtomicCmpAndSwp,
        WrOpcode::AtomicFetchAndAdd,
        WrOpcode::LocalInv,
        WrOpcode::SendWithInv,
    ];

    /// Providers skip `check_send` exactly for the opcodes in
    /// `simple_send_ops` without a UD destination: for every QP type,
    /// opcode, payload shape and destination, `check_send` must then
    /// accept.
    #[test]
    fn simple_ops_pass_every_check() {
        let one = [Sge {
            addr: 0x1000,
            length: 64,
            lkey: 1,
        }];
        let three = [one[0]; 3];
        let av = [0u8; 48];
        let dest = UdDest {
            ah_num: 1,
            av: Some(&av),
            remote_qpn: 2,
            remote_qkey: 3,
        };
        let mut skipped = 0;
        for qpt in [qp_type::RC, qp_type::UC, qp_type::UD] {
            for op in OPCODES {
                for ud in [None, Some(dest)] {
                    for (length, sges) in [
                        (64u64, &one[..]),
                        (8, &one[..]),
                        (0, &[][..]),
                        (5000, &three[..]),
                    ] {
                        let mut wr = SendWr::new(1, op, Payload::Sge(sges));
                        wr.ud = ud;
                        wr.remote_addr = 0x2001;
                        if simple_send_ops(qpt) & (1 << (op as u32)) != 0 && ud.is_none() {
                            skipped += 1;
                            for has_dest in [false, true] {
                                assert_eq!(
                                    check_send(qpt, 4096, &wr, length, has_dest),
                                    Ok(()),
                                    "qp type {qpt}, {op:?}, {length} bytes in {} SGEs",
                                    sges.len()
                                );
                            }
                        }
                    }
                }
            }
        }
        // RC: 5 opcodes, UC: 4, UD: none; 4 payload shapes each.
        assert_eq!(skipped, (5 + 4) * 4);
    }

    /// And the full checks refuse what the fast path must never let
    /// through: one example per refusal.
    #[test]
    fn check_send_refusals() {
        let sge = [Sge::default()];
        let wr = |op| SendWr::new(1, op, Payload::Sge(&sge));
        let ud = SendWr::send(1, &sge).ud(1, 2, 3);
        let cases = [
            (
                qp_type::UC,
                wr(WrOpcode::RdmaRead),
                PostError::InvalidOpcode,
            ),
            (
                qp_type::UD,
                wr(WrOpcode::RdmaWrite),
                PostError::InvalidOpcode,
            ),
            (
                qp_type::UD,
                wr(WrOpcode::AtomicCmpAndSwp),
                PostError::InvalidOpcode,
            ),
            (
                qp_type::RC,
                wr(WrOpcode::AtomicFetchAndAdd).remote(0x1001, 1),
                PostError::BadAtomic,
            ),
            (
                qp_type::RC,
                wr(WrOpcode::SendWithInv),
                PostError::InvalidateUnsupported,
            ),
            (qp_type::UD, wr(WrOpcode::Send), PostError::MissingAddress),
            (qp_type::RC, ud, PostError::UnexpectedAddress),
        ];
        for (qpt, wr, want) in cases {
            assert_eq!(check_send(qpt, 4096, &wr, 8, false), Err(want), "{wr:?}");
        }
        assert_eq!(
            check_send(qp_type::UD, 1024, &ud, 1025, true),
            Err(PostError::UdTooLong {
                len: 1025,
                mtu: 1024
            })
        );
    }

    /// The shared payload checks: inline totals up to the maximum pass,
    /// one byte more or a READ/atomic opcode does not; SGE totals add up.
    #[test]
    fn payload_lengths() {
        use std::io::IoSlice;
        let a = [1u8; 40];
        let b = [2u8; 20];
        let bufs = [IoSlice::new(&a), IoSlice::new(&b)];
        assert_eq!(inline_len(WrOpcode::Send, &bufs, 60), Ok(60));
        assert_eq!(
            inline_len(WrOpcode::RdmaWriteWithImm, &bufs[..1], 60),
            Ok(40)
        );
        assert_eq!(inline_len(WrOpcode::Send, &[], 0), Ok(0));
        assert_eq!(
            inline_len(WrOpcode::Send, &bufs, 59),
            Err(PostError::InlineTooLarge { len: 60, max: 59 })
        );
        for op in [
            WrOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp,
            WrOpcode::AtomicFetchAndAdd,
            WrOpcode::LocalInv,
            WrOpcode::SendWithInv,
        ] {
            assert_eq!(
                inline_len(op, &bufs, 60),
                Err(PostError::InvalidOpcode),
                "{op:?}"
            );
        }
        let sge = |length| Sge {
            addr: 0,
            length,
            lkey: 0,
        };
        assert_eq!(sge_len(&[]), 0);
        assert_eq!(sge_len(&[sge(7)]), 7);
        assert_eq!(
            sge_len(&[sge(u32::MAX), sge(u32::MAX), sge(2)]),
            2 * u64::from(u32::MAX) + 2
        );
    }
}
