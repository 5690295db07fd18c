//! Decoding send and receive WQEs into what the HCA executes.

use rverbs_abi::mlx5::prm::{self, Av, CtrlSeg, DataSeg};
use rverbs_abi::mlx5::wqe::{self, DataItem, SendLayout};
use zerocopy::FromBytes;

pub(super) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// The `T` at byte `off` of `b` (copied out; `None` if `b` is too short).
pub(super) fn seg<T: FromBytes>(b: &[u8], off: usize) -> Option<T> {
    T::read_from_prefix(b.get(off..)?).ok().map(|(t, _)| t)
}

/// One scatter/gather entry of a WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    /// Byte count.
    pub len: u32,
    /// Memory key.
    pub lkey: u32,
    /// HCA address.
    pub addr: u64,
}

/// What a data segment's byte count of 0 means to the HCA: 2 GiB (0
/// stands for 2^31, the largest segment; libmlx5's
/// `mlx5_wr_memcpy` relies on it: "2 Gbyte is represented as 0 in data
/// segment byte count"). libmlx5 therefore leaves zero-length SGEs out of
/// send and RQ WQEs (its SRQ path writes them, see notes 3.2).
pub const ZERO_BYTE_COUNT: u32 = 1 << 31;

impl Seg {
    /// The bytes the HCA may gather or scatter through this entry: its
    /// byte count, [`ZERO_BYTE_COUNT`] for 0.
    pub fn bytes(&self) -> u32 {
        if self.len == 0 {
            ZERO_BYTE_COUNT
        } else {
            self.len
        }
    }
}

/// The data part of a send WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// Gather entries.
    Segs(Vec<Seg>),
    /// Inline payload.
    Inline(Vec<u8>),
}

/// A decoded send WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWqe {
    /// Opcode (see [`op`](super::op)).
    pub opcode: u8,
    /// The WQE index (ctrl pi).
    pub pi: u16,
    /// QPN in the ctrl segment.
    pub qpn: u32,
    /// Size in 16-byte units.
    pub ds: u8,
    /// fm_ce_se byte.
    pub fm_ce_se: u8,
    /// Immediate bytes as posted.
    pub imm: [u8; 4],
    /// Remote address and rkey.
    pub raddr: Option<(u64, u32)>,
    /// Swap/add and compare operands.
    pub atomic: Option<(u64, u64)>,
    /// UD destination: QPN and qkey.
    pub ud: Option<(u32, u32)>,
    /// UD: the address vector.
    pub av: Option<Av>,
    /// Data.
    pub data: Data,
}

/// Decodes a send WQE of `ds * 16` bytes for a QP of type `ty`. `None` if
/// it is malformed.
pub fn decode_send(bytes: &[u8], ty: u8) -> Option<SendWqe> {
    let ctrl: CtrlSeg = seg(bytes, 0)?;
    let w0 = ctrl.opmod_idx_opcode.get();
    let ds = (ctrl.qpn_ds.get() & 0x3f) as u8;
    let end = usize::from(ds) * 16;
    if ds == 0 || end > bytes.len() {
        return None;
    }
    let bytes = &bytes[..end];
    let opcode = (w0 & 0xff) as u8;
    let mut w = SendWqe {
        opcode,
        pi: ((w0 >> 8) & 0xffff) as u16,
        qpn: ctrl.qpn_ds.get() >> 8,
        ds,
        fm_ce_se: ctrl.fm_ce_se,
        imm: ctrl.imm.to_bytes(),
        raddr: None,
        atomic: None,
        ud: None,
        av: None,
        data: Data::Segs(Vec::new()),
    };
    // Where each segment is: the PRM's layout, read by rverbs-abi's one
    // reader of it (also used by the WQE comparison and `rverbs inspect`).
    let layout = SendLayout::of(ty, opcode);
    if layout.datagram.is_some() {
        let dg = layout.datagram_seg(bytes)?;
        w.ud = Some((dg.av.dqp_dct.get() & 0xff_ffff, dg.av.qkey.get()));
        w.av = Some(dg.av);
    }
    if layout.raddr.is_some() {
        let r = layout.raddr_seg(bytes)?;
        w.raddr = Some((r.raddr.get(), r.rkey.get()));
    }
    if layout.atomic.is_some() {
        let a = layout.atomic_seg(bytes)?;
        w.atomic = Some((a.swap_add.get(), a.compare.get()));
    }
    let mut items = wqe::data_items(bytes, layout.data, bytes.len()).peekable();
    if let Some(DataItem::Inline { len, bytes: b, .. }) = items.peek() {
        // One inline payload, whole.
        if b.len() != *len as usize {
            return None;
        }
        w.data = Data::Inline(b.to_vec());
    } else {
        let mut segs = Vec::new();
        for item in items {
            match item {
                DataItem::Seg { seg, .. } => segs.push(Seg::from(seg)),
                // Inline data after gather entries: not a WQE anyone builds.
                DataItem::Inline { .. } => return None,
                // A partial segment at the end is not read.
                DataItem::Trailing { .. } => break,
            }
        }
        w.data = Data::Segs(segs);
    }
    Some(w)
}

impl From<DataSeg> for Seg {
    fn from(d: DataSeg) -> Seg {
        Seg {
            len: d.byte_count.get(),
            lkey: d.lkey.get(),
            addr: d.addr.get(),
        }
    }
}

/// Decodes the scatter list of a receive WQE: at most `max` data
/// segments, ending at the first with lkey `MLX5_INVALID_LKEY`.
pub fn decode_recv(bytes: &[u8], max: usize) -> Vec<Seg> {
    bytes
        .chunks_exact(size_of::<DataSeg>())
        .take(max)
        .filter_map(|c| DataSeg::read_from_bytes(c).ok())
        .map(Seg::from)
        .take_while(|s| s.lkey != prm::INVALID_LKEY)
        .collect()
}
