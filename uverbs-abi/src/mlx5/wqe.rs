//! Reading send WQEs back: which segments follow the control segment, and
//! where, as the PRM lays them out for a QP type and opcode, and the data
//! part that ends the WQE (inline payloads or data segments).
//!
//! The one reader of that layout for every program that decodes WQEs: the
//! emulated HCA that executes them, the byte comparison against libmlx5's
//! and `rverbs inspect`. Every offset is checked against the bytes given:
//! nothing here panics or reads out of bounds, whatever the bytes say.

use zerocopy::FromBytes;

use super::prm::{
    opcode, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg, INLINE_SEG,
};
use crate::qp::qp_type;

/// Where the segments of a send WQE start, in bytes from its control
/// segment, for a QP type and opcode ([`SendLayout::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendLayout {
    /// The datagram segment (UD: address vector, remote QPN and Q_Key).
    pub datagram: Option<usize>,
    /// The remote-address segment (RDMA WRITE and READ, atomics).
    pub raddr: Option<usize>,
    /// The atomic segment (compare and swap, fetch and add).
    pub atomic: Option<usize>,
    /// Where the data part starts: inline payloads or data segments.
    pub data: usize,
}

impl SendLayout {
    /// The layout of a send WQE of opcode `op` (bits 7..0 of
    /// [`CtrlSeg::opmod_idx_opcode`]) on a QP of type `qp_type`
    /// ([`qp_type`]): UD carries a datagram segment; an RDMA WRITE a
    /// remote address; READ and the atomics a remote address on RC only
    /// (UC has neither), the atomics an atomic segment after it.
    pub fn of(qp_type: u8, op: u8) -> SendLayout {
        let mut at = size_of::<CtrlSeg>();
        let mut l = SendLayout {
            datagram: None,
            raddr: None,
            atomic: None,
            data: at,
        };
        if qp_type == qp_type::UD {
            l.datagram = Some(at);
            at += size_of::<DatagramSeg>();
        } else {
            let rc = qp_type == qp_type::RC;
            let atomic = rc && matches!(op, opcode::ATOMIC_CS | opcode::ATOMIC_FA);
            let raddr = match op {
                opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => true,
                opcode::RDMA_READ => rc,
                _ => atomic,
            };
            if raddr {
                l.raddr = Some(at);
                at += size_of::<RaddrSeg>();
            }
            if atomic {
                l.atomic = Some(at);
                at += size_of::<AtomicSeg>();
            }
        }
        l.data = at;
        l
    }

    /// The datagram segment of `wqe`, if the layout has one and it fits.
    pub fn datagram_seg(&self, wqe: &[u8]) -> Option<DatagramSeg> {
        read_at(wqe, self.datagram?)
    }

    /// The remote-address segment of `wqe`, if the layout has one and it
    /// fits.
    pub fn raddr_seg(&self, wqe: &[u8]) -> Option<RaddrSeg> {
        read_at(wqe, self.raddr?)
    }

    /// The atomic segment of `wqe`, if the layout has one and it fits.
    pub fn atomic_seg(&self, wqe: &[u8]) -> Option<AtomicSeg> {
        read_at(wqe, self.atomic?)
    }
}

/// The segment `T` at byte `off` of `b`, if it fits.
pub fn read_at<T: FromBytes>(b: &[u8], off: usize) -> Option<T> {
    T::read_from_prefix(b.get(off..)?).ok().map(|(t, _)| t)
}

/// One element of a send WQE's data part ([`data_items`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataItem<'a> {
    /// An inline payload: its header at byte `at`, the payload length it
    /// declares (`len`), and the payload bytes present (`bytes`: cut at the
    /// end of the data part if the WQE is shorter than declared). The next
    /// element starts at the next multiple of 16 after the payload.
    Inline {
        /// Offset of the [`InlineSeg`] header.
        at: usize,
        /// The length the header declares.
        len: u32,
        /// The payload bytes present.
        bytes: &'a [u8],
    },
    /// A data segment (a scatter/gather entry) at byte `at`.
    Seg {
        /// Offset of the segment.
        at: usize,
        /// The segment.
        seg: DataSeg,
    },
    /// Fewer than 16 bytes left at byte `at`: not a whole segment.
    Trailing {
        /// Offset of the leftover bytes.
        at: usize,
        /// How many there are.
        len: usize,
    },
}

/// The elements of the data part of `wqe` from byte `from` to `end`
/// (bounded by `wqe.len()`): at each 16-byte position an inline header
/// (its byte count has [`INLINE_SEG`] set) or a data segment. Ends at
/// `end`, after a [`DataItem::Trailing`] if a partial segment is left.
pub fn data_items(wqe: &[u8], from: usize, end: usize) -> DataItems<'_> {
    let end = end.min(wqe.len());
    DataItems { wqe, at: from, end }
}

/// Iterator of [`data_items`].
#[derive(Debug, Clone)]
pub struct DataItems<'a> {
    wqe: &'a [u8],
    at: usize,
    end: usize,
}

impl<'a> Iterator for DataItems<'a> {
    type Item = DataItem<'a>;

    fn next(&mut self) -> Option<DataItem<'a>> {
        let at = self.at;
        if at >= self.end {
            return None;
        }
        let left = self.end - at;
        let part = self.wqe.get(at..self.end)?;
        let header = read_at::<InlineSeg>(part, 0).map(|h| h.byte_count.get());
        if let Some(n) = header.filter(|n| n & INLINE_SEG != 0) {
            let len = n & !INLINE_SEG;
            let start = size_of::<InlineSeg>();
            let stop = start.saturating_add(len as usize).min(left);
            self.at = at
                .saturating_add(start)
                .saturating_add(len as usize)
                .checked_next_multiple_of(16)
                .unwrap_or(usize::MAX);
            return Some(DataItem::Inline {
                at,
                len,
                bytes: part.get(start..stop).unwrap_or_default(),
            });
        }
        if left < size_of::<DataSeg>() {
            self.at = self.end;
            return Some(DataItem::Trailing { at, len: left });
        }
        self.at = at + size_of::<DataSeg>();
        read_at(part, 0).map(|seg| DataItem::Seg { at, seg })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_seg(len: u32, lkey: u32, addr: u64) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&len.to_be_bytes());
        b[4..8].copy_from_slice(&lkey.to_be_bytes());
        b[8..].copy_from_slice(&addr.to_be_bytes());
        b
    }

    #[test]
    fn layouts_follow_the_prm() {
        let rc = |op| SendLayout::of(qp_type::RC, op);
        let uc = |op| SendLayout::of(qp_type::UC, op);
        let ud = |op| SendLayout::of(qp_type::UD, op);
        assert_eq!(rc(opcode::SEND).data, 16);
        assert_eq!(
            (rc(opcode::RDMA_WRITE).raddr, rc(opcode::RDMA_WRITE).data),
            (Some(16), 32)
        );
        assert_eq!((uc(opcode::RDMA_WRITE_IMM).raddr), Some(16));
        assert_eq!(
            (uc(opcode::RDMA_READ).raddr, uc(opcode::RDMA_READ).data),
            (None, 16)
        );
        let cs = rc(opcode::ATOMIC_CS);
        assert_eq!((cs.raddr, cs.atomic, cs.data), (Some(16), Some(32), 48));
        assert_eq!(uc(opcode::ATOMIC_FA).atomic, None);
        let s = ud(opcode::SEND);
        assert_eq!((s.datagram, s.raddr, s.data), (Some(16), None, 64));
    }

    #[test]
    fn data_items_read_segments_inline_and_leftovers() {
        let mut w = vec![0u8; 16];
        w.extend_from_slice(&data_seg(64, 7, 0x1000));
        w.extend_from_slice(&data_seg(8, 9, 0x2000));
        w.extend_from_slice(&[1, 2, 3]);
        let items: Vec<_> = data_items(&w, 16, w.len()).collect();
        assert_eq!(items.len(), 3);
        assert!(matches!(items[0], DataItem::Seg { at: 16, seg } if seg.lkey.get() == 7));
        assert!(matches!(items[1], DataItem::Seg { at: 32, seg } if seg.byte_count.get() == 8));
        assert_eq!(items[2], DataItem::Trailing { at: 48, len: 3 });

        let mut w = vec![0u8; 16];
        w.extend_from_slice(&(INLINE_SEG | 5).to_be_bytes());
        w.extend_from_slice(b"hello");
        w.resize(48, 0);
        w[32..48].copy_from_slice(&data_seg(1, 2, 3));
        let items: Vec<_> = data_items(&w, 16, 48).collect();
        assert_eq!(
            items[0],
            DataItem::Inline {
                at: 16,
                len: 5,
                bytes: b"hello"
            }
        );
        assert!(matches!(items[1], DataItem::Seg { at: 32, .. }));
        assert_eq!(items.len(), 2);
    }

    #[test]
    fn lies_are_cut_not_followed() {
        // An inline header claiming more than the WQE holds, and an end
        // past the bytes: everything stays inside the slice.
        let mut w = vec![0u8; 32];
        w[16..20].copy_from_slice(&(INLINE_SEG | 0x7fff_ffff).to_be_bytes());
        let items: Vec<_> = data_items(&w, 16, 1 << 20).collect();
        assert!(
            matches!(items[..], [DataItem::Inline { len: 0x7fff_ffff, bytes, .. }] if bytes.len() == 12)
        );
        assert_eq!(data_items(&w, 100, 200).count(), 0);
        for n in 0..64 {
            let b: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            for from in 0..n + 2 {
                let _ = data_items(&b, from, n + 5).count();
            }
            let l = SendLayout::of(qp_type::UD, opcode::SEND);
            let _ = (l.datagram_seg(&b), l.raddr_seg(&b), l.atomic_seg(&b));
        }
    }
}
