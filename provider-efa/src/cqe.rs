//! EFA completion entries: a CQ is a ring of sub-CQs, each a ring of
//! entries of one size (16 bytes, or 32 with the sender's GID) that the
//! device writes with a phase bit; an entry is new when its phase is the
//! one its sub-CQ expects, which flips each time the consumer wraps.
//!
//! [`SubCq`] is that bookkeeping, [`decode`] reads one entry from its
//! bytes (any bytes: a decoded field is a number, never an index used
//! unchecked), and [`fill_wc`] fills a work completion as libefa
//! does, with [`wc_status`]'s mapping of EFA's status codes.

use rverbs_abi::efa::io::{
    cdesc_flags, comp_status as cs, queue_type, send_op, CdescCommon, RxCdesc, UNKNOWN_AH,
};
use rverbs_abi::wr::{wc_flags, wc_opcode, wc_status as ws, Wc};
use zerocopy::FromBytes;

/// Bytes of an entry without the sender's GID (a receive entry, and the
/// unit of every send entry).
pub const ENTRY_SIZE: usize = core::mem::size_of::<RxCdesc>();
/// Bytes of an entry with the sender's GID.
pub const ENTRY_SIZE_EX: usize = core::mem::size_of::<rverbs_abi::efa::io::RxCdescEx>();

/// Where a sub-CQ's consumer stands: how many entries it has taken and the
/// phase the next one must carry to be new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubCq {
    consumed: u32,
    mask: u32,
    shift: u32,
    entry_size: usize,
}

impl SubCq {
    /// A sub-CQ of `entries` entries (a power of two, as the kernel rounds
    /// the CQ to) of `entry_size` bytes ([`ENTRY_SIZE`] or
    /// [`ENTRY_SIZE_EX`]); `None` for any other shape, or one whose bytes
    /// overflow a `usize`.
    pub fn new(entries: u32, entry_size: usize) -> Option<SubCq> {
        if !entries.is_power_of_two() || !(entry_size == ENTRY_SIZE || entry_size == ENTRY_SIZE_EX)
        {
            return None;
        }
        usize::try_from(entries).ok()?.checked_mul(entry_size)?;
        Some(SubCq {
            consumed: 0,
            mask: entries - 1,
            shift: entries.trailing_zeros(),
            entry_size,
        })
    }

    /// Bytes of the sub-CQ in the CQ's ring.
    pub fn len_bytes(&self) -> usize {
        // Checked in `new`.
        (self.mask as usize + 1) * self.entry_size
    }

    /// Bytes of each entry.
    pub fn entry_size(&self) -> usize {
        self.entry_size
    }

    /// The offset in the sub-CQ of the entry to look at next (below
    /// [`SubCq::len_bytes`]).
    pub fn offset(&self) -> usize {
        (self.consumed & self.mask) as usize * self.entry_size
    }

    /// The phase the next entry carries when it is new: 1 on the first
    /// pass over the ring, 0 on the second, and so on.
    pub fn phase(&self) -> u8 {
        // The low bit of the number of whole passes, inverted.
        (1 ^ ((self.consumed >> self.shift) & 1)) as u8
    }

    /// Whether an entry whose flags byte is `flags` is new.
    pub fn is_new(&self, flags: u8) -> bool {
        flags & cdesc_flags::PHASE == self.phase()
    }

    /// Takes the entry at [`SubCq::offset`].
    pub fn advance(&mut self) {
        self.consumed = self.consumed.wrapping_add(1);
    }

    /// How many entries have been taken (modulo 2^32).
    pub fn consumed(&self) -> u32 {
        self.consumed
    }
}

/// Which queue of its QP a completion is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// The send queue.
    Send,
    /// The receive queue.
    Recv,
}

/// One completion entry, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The request id the descriptor carried.
    pub req_id: u16,
    /// EFA's status code ([`rverbs_abi::efa::io::comp_status`]).
    pub status: u8,
    /// The queue.
    pub queue: Queue,
    /// The operation, on devices that report it ([`send_op`]; 0 otherwise).
    pub op: u8,
    /// The local QP number.
    pub qp_num: u16,
    /// Bytes received (receives).
    pub byte_len: u16,
    /// Immediate data (host order), if the receive carried one.
    pub imm: Option<u32>,
    /// The sender's QP number (receives).
    pub src_qp: u16,
    /// The sender's address handle on this device (receives;
    /// [`UNKNOWN_AH`] if it has none).
    pub ah: u16,
    /// The sender's GID, in an entry of [`ENTRY_SIZE_EX`] bytes from a
    /// sender with no address handle here.
    pub sgid: Option<[u8; 16]>,
    /// A receive that matched no posted request (an unsolicited WRITE
    /// with immediate).
    pub unsolicited: bool,
}

/// Why an entry could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadEntry {
    /// The bytes given are neither [`ENTRY_SIZE`] nor [`ENTRY_SIZE_EX`] long.
    Size(usize),
    /// The queue type is neither send nor receive.
    QueueType(u8),
}

impl std::fmt::Display for BadEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadEntry::Size(n) => write!(
                f,
                "an EFA completion entry is {ENTRY_SIZE} or {ENTRY_SIZE_EX} bytes, not {n}"
            ),
            BadEntry::QueueType(q) => write!(
                f,
                "EFA completion entry of queue type {q} (1: send, 2: receive)"
            ),
        }
    }
}

impl std::error::Error for BadEntry {}

/// Reads the entry `entry` (the whole entry, [`ENTRY_SIZE`] or
/// [`ENTRY_SIZE_EX`] bytes), whose phase the caller has found new. A send
/// entry's receive fields read as zero.
#[inline]
pub fn decode(entry: &[u8]) -> Result<Completion, BadEntry> {
    if entry.len() != ENTRY_SIZE && entry.len() != ENTRY_SIZE_EX {
        return Err(BadEntry::Size(entry.len()));
    }
    let (rx, rest) = RxCdesc::read_from_prefix(entry).map_err(|_| BadEntry::Size(entry.len()))?;
    let CdescCommon {
        req_id,
        status,
        flags,
        qp_num,
        length,
    } = rx.common;
    let queue = queue_of(flags)?;
    let op = (flags & cdesc_flags::OP_TYPE) >> cdesc_flags::OP_TYPE_SHIFT;
    let mut c = Completion {
        req_id: req_id.get(),
        status,
        queue,
        op,
        qp_num: qp_num.get(),
        byte_len: 0,
        imm: None,
        src_qp: 0,
        ah: 0,
        sgid: None,
        unsolicited: false,
    };
    if queue == Queue::Recv {
        c.byte_len = length.get();
        c.imm = (flags & cdesc_flags::HAS_IMM != 0).then(|| rx.imm.get());
        c.src_qp = rx.src_qp_num.get();
        c.ah = rx.ah.get();
        c.unsolicited = flags & cdesc_flags::UNSOLICITED != 0;
        c.sgid = sgid_of(&rx, queue, rest);
    }
    Ok(c)
}

/// The verbs status (`IB_WC_*`) of EFA status code `status`, as libefa
/// maps them; an unknown code is a general error.
pub fn wc_status(status: u8) -> u32 {
    match status {
        cs::OK => ws::SUCCESS,
        cs::FLUSHED => ws::WR_FLUSH_ERR,
        cs::LOCAL_ERROR_QP_INTERNAL_ERROR
        | cs::LOCAL_ERROR_UNSUPPORTED_OP
        | cs::LOCAL_ERROR_INVALID_AH => ws::LOC_QP_OP_ERR,
        cs::LOCAL_ERROR_INVALID_LKEY => ws::LOC_PROT_ERR,
        cs::LOCAL_ERROR_BAD_LENGTH => ws::LOC_LEN_ERR,
        cs::REMOTE_ERROR_ABORT => ws::REM_ABORT_ERR,
        cs::REMOTE_ERROR_RNR => ws::RNR_RETRY_EXC_ERR,
        cs::REMOTE_ERROR_BAD_DEST_QPN => ws::REM_INV_RD_REQ_ERR,
        cs::REMOTE_ERROR_BAD_STATUS => ws::BAD_RESP_ERR,
        cs::REMOTE_ERROR_BAD_LENGTH => ws::REM_INV_REQ_ERR,
        cs::LOCAL_ERROR_UNRESP_REMOTE => ws::RESP_TIMEOUT_ERR,
        _ => ws::GENERAL_ERR,
    }
}

/// The sender's GID in `rest` (the bytes of entry `rx` past the first
/// [`ENTRY_SIZE`]: 16 in an entry of [`ENTRY_SIZE_EX`]) if the entry is a
/// receive from a sender with no address handle here.
#[inline(always)]
pub fn sgid_of(rx: &RxCdesc, queue: Queue, rest: &[u8]) -> Option<[u8; 16]> {
    if queue == Queue::Recv && rx.ah.get() == UNKNOWN_AH {
        <[u8; 16]>::read_from_bytes(rest).ok()
    } else {
        None
    }
}

/// Which queue an entry whose flags byte is `flags` completes.
#[inline(always)]
pub fn queue_of(flags: u8) -> Result<Queue, BadEntry> {
    match (flags & cdesc_flags::Q_TYPE) >> cdesc_flags::Q_TYPE_SHIFT {
        queue_type::SEND => Ok(Queue::Send),
        queue_type::RECV => Ok(Queue::Recv),
        q => Err(BadEntry::QueueType(q)),
    }
}

/// Writes to `wc` the work completion of entry `rx` (of `queue`, as
/// [`queue_of`] read it) for the request `wr_id` (the id the caller keeps
/// under the entry's request id), as libefa fills it: the EFA status also
/// in `vendor_err`; a send as SEND (RDMA READ and WRITE where the device
/// names the operation); a receive with its length, sender QP, the
/// sender's address handle in `slid`, and the immediate data big-endian
/// as sent. A send entry's receive fields are not read.
#[inline(always)]
pub fn fill_wc(rx: &RxCdesc, queue: Queue, wr_id: u64, wc: &mut Wc) {
    let c = &rx.common;
    let status = c.status;
    // The common case without the table's jump.
    let wc_status = if status == cs::OK {
        ws::SUCCESS
    } else {
        wc_status(status)
    };
    let op = (c.flags & cdesc_flags::OP_TYPE) >> cdesc_flags::OP_TYPE_SHIFT;
    let qp_num = u32::from(c.qp_num.get());
    // Written a word at a time (Wc::words_mut), each word made first.
    let words = match queue {
        Queue::Send => {
            let opcode = match op {
                send_op::RDMA_READ => wc_opcode::RDMA_READ,
                send_op::RDMA_WRITE => wc_opcode::RDMA_WRITE,
                _ => wc_opcode::SEND,
            };
            [
                wr_id,
                Wc::pair(wc_status, opcode),
                Wc::pair(u32::from(status), 0),
                Wc::pair(0, qp_num),
                0,
                0,
            ]
        }
        Queue::Recv => {
            let opcode = if op == send_op::RDMA_WRITE {
                wc_opcode::RECV_RDMA_WITH_IMM
            } else {
                wc_opcode::RECV
            };
            let has_imm = c.flags & cdesc_flags::HAS_IMM != 0;
            let (ex, flags) = if has_imm {
                (rx.imm.get().to_be(), wc_flags::WITH_IMM)
            } else {
                (0, 0)
            };
            // pkey_index 0, slid the sender's AH, sl .. reserved 0.
            let [s0, s1] = rx.ah.get().to_ne_bytes();
            [
                wr_id,
                Wc::pair(wc_status, opcode),
                Wc::pair(u32::from(status), u32::from(c.length.get())),
                Wc::pair(ex, qp_num),
                Wc::pair(u32::from(rx.src_qp_num.get()), flags),
                u64::from_ne_bytes([0, 0, s0, s1, 0, 0, 0, 0]),
            ]
        }
    };
    *wc.words_mut() = words;
}

/// The work completion of the whole entry `entry` (see [`decode`]) for
/// `wr_id`, through [`fill_wc`]: what a poll reports for it.
pub fn wc_of(entry: &[u8], wr_id: u64) -> Result<Wc, BadEntry> {
    let c = decode(entry)?;
    let (rx, _) = RxCdesc::read_from_prefix(entry).map_err(|_| BadEntry::Size(entry.len()))?;
    let mut wc = Wc::default();
    fill_wc(&rx, c.queue, wr_id, &mut wc);
    Ok(wc)
}

/// The fuzz target's body (tests/fuzz `efa_cqe`): `data` as a CQ's ring
/// of sub-CQs the device wrote, polled as a provider polls it (each sub-CQ
/// in turn, while its next entry's phase is new, each entry decoded and
/// turned into a work completion), and every entry decoded on its own.
/// Panics on nothing: that is what it checks.
pub fn fuzz_ring(data: &[u8]) {
    let Some((&shape, ring)) = data.split_first() else {
        return;
    };
    let entry_size = if shape & 1 == 0 {
        ENTRY_SIZE
    } else {
        ENTRY_SIZE_EX
    };
    let entries = 1u32 << ((shape >> 1) & 7);
    let sub_cqs = usize::from(shape >> 4).max(1);
    let mut subs: Vec<SubCq> = (0..sub_cqs)
        .filter_map(|_| SubCq::new(entries, entry_size))
        .collect();
    for chunk in ring.chunks(entry_size) {
        let _ = decode(chunk).and_then(|c| wc_of(chunk, u64::from(c.req_id)));
    }
    // Two passes over the ring's bytes' worth of entries at most.
    let mut budget = 2 * ring.len() / entry_size + 1;
    for (i, s) in subs.iter_mut().enumerate() {
        let base = i * s.len_bytes();
        while budget > 0 {
            budget -= 1;
            let at = base + s.offset();
            let Some(e) = ring.get(at..at + s.entry_size()) else {
                break;
            };
            // The flags byte is the entry's fourth.
            if !s.is_new(e[3]) {
                break;
            }
            if let Ok(wc) = wc_of(e, 0) {
                assert!(wc.status <= rverbs_abi::wr::wc_status::GENERAL_ERR);
            }
            s.advance();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One argument per field of the entry, in the entry's order.
    #[allow(clippy::too_many_arguments)]
    fn entry(
        req_id: u16,
        status: u8,
        flags: u8,
        qp: u16,
        len: u16,
        ah: u16,
        src: u16,
        imm: u32,
    ) -> [u8; 16] {
        let mut e = [0u8; 16];
        e[0..2].copy_from_slice(&req_id.to_le_bytes());
        e[2] = status;
        e[3] = flags;
        e[4..6].copy_from_slice(&qp.to_le_bytes());
        e[6..8].copy_from_slice(&len.to_le_bytes());
        e[8..10].copy_from_slice(&ah.to_le_bytes());
        e[10..12].copy_from_slice(&src.to_le_bytes());
        e[12..16].copy_from_slice(&imm.to_le_bytes());
        e
    }

    const SEND: u8 = queue_type::SEND << cdesc_flags::Q_TYPE_SHIFT;
    const RECV: u8 = queue_type::RECV << cdesc_flags::Q_TYPE_SHIFT;

    #[test]
    fn the_phase_flips_on_every_pass() {
        let mut s = SubCq::new(4, ENTRY_SIZE).unwrap();
        assert_eq!(s.len_bytes(), 64);
        let mut seen = Vec::new();
        for _ in 0..9 {
            seen.push((s.offset(), s.phase()));
            s.advance();
        }
        assert_eq!(
            seen,
            [
                (0, 1),
                (16, 1),
                (32, 1),
                (48, 1),
                (0, 0),
                (16, 0),
                (32, 0),
                (48, 0),
                (0, 1)
            ]
        );
        assert!(s.is_new(cdesc_flags::PHASE | RECV));
        assert!(!s.is_new(RECV));
    }

    #[test]
    fn the_phase_survives_the_counter_wrapping() {
        let mut s = SubCq::new(1 << 16, ENTRY_SIZE_EX).unwrap();
        s.consumed = u32::MAX;
        // 2^32 - 1 entries taken: 65535 whole passes, an odd number.
        assert_eq!(s.phase(), 0);
        s.advance();
        assert_eq!((s.offset(), s.phase()), (0, 1));
    }

    #[test]
    fn shapes_the_kernel_cannot_give_are_refused() {
        assert_eq!(SubCq::new(0, ENTRY_SIZE), None);
        assert_eq!(SubCq::new(3, ENTRY_SIZE), None);
        assert_eq!(SubCq::new(8, 24), None);
        assert!(SubCq::new(1, ENTRY_SIZE).is_some());
    }

    #[test]
    fn a_receive_with_immediate_reads_as_libefa_reports_it() {
        let flags = cdesc_flags::PHASE | RECV | cdesc_flags::HAS_IMM;
        let e = entry(7, cs::OK, flags, 3, 1500, 2, 11, 0x0102_0304);
        let c = decode(&e).unwrap();
        assert_eq!(c.queue, Queue::Recv);
        assert_eq!(c.imm, Some(0x0102_0304));
        let wc = wc_of(&e, 99).unwrap();
        assert_eq!(wc.wr_id, 99);
        assert_eq!(wc.status, ws::SUCCESS);
        assert_eq!(wc.opcode, wc_opcode::RECV);
        assert_eq!(wc.byte_len, 1500);
        assert_eq!((wc.qp_num, wc.src_qp, wc.slid), (3, 11, 2));
        assert_eq!(wc.wc_flags, wc_flags::WITH_IMM);
        assert_eq!(
            wc.ex.to_ne_bytes(),
            [1, 2, 3, 4],
            "immediate big-endian, as sent"
        );
    }

    #[test]
    fn a_send_entry_has_no_receive_fields() {
        let e = entry(1, cs::REMOTE_ERROR_RNR, SEND, 5, 77, 8, 9, 10);
        let c = decode(&e).unwrap();
        assert_eq!(c.queue, Queue::Send);
        assert_eq!((c.byte_len, c.src_qp, c.ah, c.imm), (0, 0, 0, None));
        let wc = wc_of(&e, 1).unwrap();
        assert_eq!((wc.byte_len, wc.src_qp, wc.slid, wc.wc_flags), (0, 0, 0, 0));
        assert_eq!(wc.status, ws::RNR_RETRY_EXC_ERR);
        assert_eq!(wc.vendor_err, u32::from(cs::REMOTE_ERROR_RNR));
        assert_eq!(wc.opcode, wc_opcode::SEND);
    }

    #[test]
    fn the_sender_gid_is_read_only_from_an_unknown_sender() {
        let mut e = [0u8; ENTRY_SIZE_EX];
        e[..16].copy_from_slice(&entry(0, cs::OK, RECV, 1, 8, UNKNOWN_AH, 4, 0));
        e[16..].copy_from_slice(&[0xfe; 16]);
        assert_eq!(decode(&e).unwrap().sgid, Some([0xfe; 16]));
        e[8..10].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(
            decode(&e).unwrap().sgid,
            None,
            "a known sender's GID is not read"
        );
        assert_eq!(decode(&e[..16]).unwrap().sgid, None);
    }

    #[test]
    fn malformed_entries_are_errors() {
        assert_eq!(decode(&[0; 15]), Err(BadEntry::Size(15)));
        assert_eq!(decode(&[0; 17]), Err(BadEntry::Size(17)));
        assert_eq!(decode(&[0; 16]), Err(BadEntry::QueueType(0)));
        assert_eq!(
            decode(&entry(0, 0, 3 << 1, 0, 0, 0, 0, 0)),
            Err(BadEntry::QueueType(3))
        );
        assert_eq!(wc_status(200), ws::GENERAL_ERR);
        assert_eq!(wc_status(cs::REMOTE_ERROR_BAD_ADDRESS), ws::GENERAL_ERR);
    }
}
