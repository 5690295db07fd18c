//! Entry point of the mlx5 CQE fuzz target (feature `fuzz`, not part of
//! the API): [`super::parse`], the decode of a 64-byte CQE the device
//! wrote, on arbitrary bytes, against QPs of every shape.

use std::sync::Arc;

use rverbs_abi::wr::Wc;

use rverbs_abi::mlx5::prm::Cqe64;

use super::parse;
use crate::hw::cqe::{Cqe, CQE_SIZE};
use crate::wq::{QpEntry, RqShared, SqShared, SrqShared};

/// `data[0]` picks the QP's queues (bit 0: a send queue, bit 1: a receive
/// queue, bit 2: an SRQ; bits 3..7: their sizes, 0 or a power of two),
/// `data[1..4]` its number; the rest is a sequence of CQEs, each parsed
/// in turn (completions retire the QP's WQEs, so later CQEs see the
/// effect of earlier ones). Must never panic.
pub fn cqes(data: &[u8]) {
    let Some((head, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let shape = head[0];
    let size = |bits: u8| if bits == 0 { 0 } else { 1u32 << bits };
    // A queue the QP does not have is one of no ring (size 0).
    let sq_size = if shape & 1 != 0 {
        size((shape >> 3) & 7)
    } else {
        0
    };
    let rq_size = if shape & 2 != 0 {
        size((shape >> 5) & 7)
    } else {
        0
    };
    let sq = Arc::new(SqShared::new(sq_size));
    let rq = Arc::new(RqShared::new(rq_size));
    let srq = (shape & 4 != 0).then(|| Arc::new(SrqShared::new(u32::from(shape) * 3)));
    let e = QpEntry::new(
        u32::from_be_bytes([0, head[1], head[2], head[3]]),
        sq,
        rq,
        srq,
    );
    for c in rest.chunks(CQE_SIZE) {
        let mut a = [0; CQE_SIZE];
        a[..c.len()].copy_from_slice(c);
        let cqe: Cqe64 = zerocopy::transmute!(a);
        let mut w = Wc::default();
        if parse(Cqe::of(&cqe), &e, &mut w) {
            // A completion reports the QP it belongs to.
            assert_eq!(w.qp_num, e.qpn);
        }
    }
}
