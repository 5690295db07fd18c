//! Unit tests of the QP geometry and of the exact WQE, doorbell-record and
//! doorbell-register bytes, on plain memory standing in for the device's.

use std::io::IoSlice;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rverbs_abi::qp::qp_type;
use rverbs_abi::wr::Sge;
use rverbs_abi::Errno;
use rverbs_provider::wr::{
    opcode, FlushType, ForeignWr, Payload, RecvWr, SendFlags, SendWr, UdDest, WrOpcode,
};

use super::geom::{geometry, max_inline_data, Geometry, Request};
use super::{RecvQueue, SendQueue, SqInit};
use crate::hw::dbrec::{DbPool, DbRec};
use crate::hw::map::{Mapping, Reserved};
use crate::hw::uar::BlueFlame;
use crate::hw::wqe::{RecvRing, SendRing};
use crate::uctx::Limits;
use crate::wq::{RqShared, SqShared};
use crate::{PostError, PostFailed};
use rverbs_provider::QpState;

/// ConnectX-5's limits, as the emulator reports them (`..Default` in case
/// the context grows more).
#[allow(clippy::needless_update)]
fn limits() -> Limits {
    Limits {
        max_sq_desc_sz: 1024,
        max_rq_desc_sz: 512,
        max_send_wqebb: 1 << 15,
        max_recv_wr: 1 << 15,
        max_srq_recv_wr: 1 << 15,
        cqe_version: 1,
        bf_reg_size: 512,
        ..Default::default()
    }
}

fn req(qp_type: u8, send_wr: u32, send_sge: u32, inline: u32) -> Request {
    Request {
        qp_type,
        max_send_wr: send_wr,
        max_send_sge: send_sge,
        max_inline_data: inline,
        max_recv_wr: 0,
        max_recv_sge: 0,
        srq: false,
    }
}

/// The limit the library names is exactly what the geometry takes: one
/// byte more is refused, for every QP type and a few device WQE sizes.
#[test]
fn max_inline_data_is_the_geometrys_limit() {
    for desc in [256, 512, 1000, 1024] {
        let l = Limits {
            max_sq_desc_sz: desc,
            ..limits()
        };
        for t in [qp_type::RC, qp_type::UC, qp_type::UD] {
            let max = max_inline_data(&l, t).expect("a limit");
            let g = geometry(&l, &req(t, 16, 1, max)).expect("the limit itself");
            assert!(g.max_inline_data.unwrap() >= max, "{desc} {t}");
            assert_eq!(
                geometry(&l, &req(t, 16, 1, max + 1)),
                Err(Errno::EINVAL),
                "{desc} {t}: one more byte"
            );
        }
    }
    assert_eq!(
        max_inline_data(&limits(), qp_type::RC),
        Some(1024 - 192 - 4)
    );
    let tiny = Limits {
        max_sq_desc_sz: 64,
        ..limits()
    };
    assert_eq!(max_inline_data(&tiny, qp_type::RC), None);
}

fn rq_req(recv_wr: u32, recv_sge: u32) -> Request {
    Request {
        max_recv_wr: recv_wr,
        max_recv_sge: recv_sge,
        ..req(qp_type::RC, 0, 0, 0)
    }
}

const QPN: u32 = 0x000123;

/// A test QP: both queues on plain memory, the UAR register at the start
/// of `uar` (BlueFlame halves of `bf_size` bytes).
struct TestQp {
    sq: SendQueue,
    rq: Option<RecvQueue>,
    ring: Arc<Mapping>,
    db: DbRec,
    uar: Arc<Mapping>,
    g: Geometry,
}

impl TestQp {
    fn new(r: &Request, sig_all: bool, bf_size: u32, dedicated: bool) -> Self {
        let g = geometry(&limits(), r).expect("geometry");
        let ring = Arc::new(Mapping::anon(g.total()).unwrap());
        let db = DbPool::new().alloc().unwrap();
        let uar = Arc::new(Mapping::anon(4096).unwrap());
        let rq = (g.rq_wqe_cnt != 0).then(|| {
            let shared = Arc::new(RqShared::new(g.rq_wqe_cnt));
            let rring =
                RecvRing::new(&ring, g.rq_wqe_cnt, g.rq_wqe_shift, g.rq_max_gs, &shared).unwrap();
            RecvQueue::new(rring, db.clone(), g.rq_wqe_cnt, shared, None)
        });
        let shared = Arc::new(SqShared::new(g.sq_wqe_cnt));
        let sq = SendQueue::new(SqInit {
            listing: Default::default(),
            reg: None,
            cleaner: None,
            ring: SendRing::new(&ring, g.sq_offset(), g.sq_wqe_cnt, &shared).unwrap(),
            db: db.clone(),
            geometry: g,
            shared,
            qpn: QPN,
            qp_type: r.qp_type,
            sig_all,
            bf: BlueFlame::new(&uar, 0, bf_size, dedicated).unwrap(),
            ece_options: 0,
        });
        TestQp {
            sq,
            rq,
            ring,
            db,
            uar,
            g,
        }
    }

    /// Bytes `at..at + len` of the send ring.
    fn sq_bytes(&self, at: usize, len: usize) -> Vec<u8> {
        self.ring.read_bytes(self.g.sq_offset() + at, len)
    }

    /// Bytes `at..at + len` of the receive ring.
    fn rq_bytes(&self, at: usize, len: usize) -> Vec<u8> {
        self.ring.read_bytes(at, len)
    }

    fn uar(&self, at: usize, len: usize) -> Vec<u8> {
        self.uar.read_bytes(at, len)
    }

    /// The doorbell record word `i` as the device reads it (memory bytes).
    fn db(&self, i: usize) -> [u8; 4] {
        self.db.load(i).to_be_bytes()
    }
}

fn be32(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

fn data_seg(len: u32, lkey: u32, addr: u64) -> Vec<u8> {
    let mut v = len.to_be_bytes().to_vec();
    v.extend(lkey.to_be_bytes());
    v.extend(addr.to_be_bytes());
    v
}

fn ctrl(pi: u32, op: u8, ds: u32, fm_ce_se: u8, imm: u32) -> Vec<u8> {
    let mut v = ((pi & 0xffff) << 8 | op as u32).to_be_bytes().to_vec();
    v.extend((QPN << 8 | ds).to_be_bytes());
    v.extend([0, 0, 0, fm_ce_se]);
    v.extend(imm.to_be_bytes());
    v
}

// ---------------------------------------------------------------- geometry

#[test]
fn geometry_rc_examples() {
    // RC, 1 SGE, no inline, 10 WRs: 192 + 16 -> 256-byte WQEs, inline 60,
    // 10 * 256 -> 4096 bytes, 64 BBs, 16 WRs.
    let g = geometry(&limits(), &req(qp_type::RC, 10, 1, 0)).unwrap();
    assert_eq!(g.sq_wqe_size, 256);
    assert_eq!(g.max_inline_data, Some(60));
    assert_eq!(g.sq_bytes(), 4096);
    assert_eq!(g.sq_wqe_cnt, 64);
    assert_eq!(g.sq_max_post, 16);
    assert_eq!(g.sq_max_gs, 1);
    assert_eq!((g.rq_wqe_cnt, g.rq_bytes(), g.sq_offset()), (0, 0, 0));
    // UC is the same.
    assert_eq!(geometry(&limits(), &req(qp_type::UC, 10, 1, 0)).unwrap(), g);
    // Inline 100: 192 + align(104, 16) = 304 -> 320; inline 124.
    let g = geometry(&limits(), &req(qp_type::RC, 1, 1, 100)).unwrap();
    assert_eq!(g.sq_wqe_size, 320);
    assert_eq!(g.max_inline_data, Some(124));
    assert_eq!((g.sq_bytes(), g.sq_wqe_cnt, g.sq_max_post), (512, 8, 1));
    // Inline 60 fits the 1-SGE slot exactly: unchanged.
    let g = geometry(&limits(), &req(qp_type::RC, 3, 1, 60)).unwrap();
    assert_eq!((g.sq_wqe_size, g.max_inline_data), (256, Some(60)));
    assert_eq!((g.sq_bytes(), g.sq_max_post), (1024, 4));
    // 12 SGEs: 192 + 192 = 384, inline 188; 768 -> 1024 B.
    let g = geometry(&limits(), &req(qp_type::RC, 2, 12, 0)).unwrap();
    assert_eq!((g.sq_wqe_size, g.max_inline_data), (384, Some(188)));
    assert_eq!((g.sq_wqe_cnt, g.sq_max_post), (16, 2));
    // 0 SGEs: 192 -> 192, no inline room (libmlx5: -4); 5 * 192 = 960
    // -> 1024 B, 5 WRs.
    let g = geometry(&limits(), &req(qp_type::RC, 5, 0, 0)).unwrap();
    assert_eq!((g.sq_wqe_size, g.max_inline_data), (192, Some(0)));
    assert_eq!((g.sq_wqe_cnt, g.sq_max_post), (16, 5));
}

#[test]
fn geometry_ud_examples() {
    // UD, 1 SGE: 64 + 16 = 80 -> 128, inline 60; 1 WR -> 128 B, 2 BBs.
    let g = geometry(&limits(), &req(qp_type::UD, 1, 1, 0)).unwrap();
    assert_eq!((g.sq_wqe_size, g.max_inline_data), (128, Some(60)));
    assert_eq!((g.sq_bytes(), g.sq_wqe_cnt, g.sq_max_post), (128, 2, 1));
    // 100 WRs -> 12800 -> 16384 B, 256 BBs, 128 WRs.
    let g = geometry(&limits(), &req(qp_type::UD, 100, 1, 0)).unwrap();
    assert_eq!(
        (g.sq_bytes(), g.sq_wqe_cnt, g.sq_max_post),
        (16384, 256, 128)
    );
    // 4 SGEs: 64 + 64 = 128 -> 128.
    let g = geometry(&limits(), &req(qp_type::UD, 2, 4, 0)).unwrap();
    assert_eq!((g.sq_wqe_size, g.max_inline_data), (128, Some(60)));
}

#[test]
fn geometry_rq_examples() {
    // 1 SGE, 1 WR: 16-byte WQEs, at least 64 bytes -> 4 WQEs, shift 4.
    let g = geometry(&limits(), &rq_req(1, 1)).unwrap();
    assert_eq!((g.rq_wqe_cnt, g.rq_wqe_shift, g.rq_max_gs), (4, 4, 1));
    assert_eq!((g.rq_bytes(), g.sq_offset()), (64, 64));
    // 3 SGEs -> 64-byte WQEs holding 4.
    let g = geometry(&limits(), &rq_req(10, 3)).unwrap();
    assert_eq!((g.rq_wqe_cnt, g.rq_wqe_shift, g.rq_max_gs), (16, 6, 4));
    // 0 SGEs counts as 1.
    let g = geometry(&limits(), &rq_req(100, 0)).unwrap();
    assert_eq!((g.rq_wqe_cnt, g.rq_wqe_shift, g.rq_max_gs), (128, 4, 1));
    // No SQ, 5 receives: 8 WQEs of 16 bytes, 128 bytes.
    let mut r = rq_req(5, 1);
    r.max_send_sge = 1;
    let g = geometry(&limits(), &r).unwrap();
    assert_eq!((g.rq_wqe_cnt, g.rq_wqe_shift, g.sq_wqe_cnt), (8, 4, 0));
    assert_eq!((g.sq_offset(), g.total()), (128, 128));
    // With an SRQ: no RQ.
    let mut r = rq_req(100, 2);
    r.srq = true;
    let g = geometry(&limits(), &r).unwrap();
    assert_eq!((g.rq_wqe_cnt, g.rq_wqe_shift, g.rq_bytes()), (0, 0, 0));
    // Both rings: RQ first.
    let mut r = req(qp_type::RC, 10, 1, 0);
    r.max_recv_wr = 10;
    r.max_recv_sge = 2;
    let g = geometry(&limits(), &r).unwrap();
    assert_eq!((g.rq_bytes(), g.sq_offset(), g.total()), (512, 512, 4608));
}

#[test]
fn geometry_refusals() {
    let l = limits();
    let einval = |r: Request| assert_eq!(geometry(&l, &r), Err(Errno::EINVAL), "{r:?}");
    // Unknown QP type.
    einval(req(8, 1, 1, 0));
    // (1024 - 192) / 16 = 52 SGEs at most.
    assert!(geometry(&l, &req(qp_type::RC, 1, 52, 0)).is_ok());
    einval(req(qp_type::RC, 1, 53, 0));
    // Inline: 192 + align(4 + n, 16) <= 1024 -> n <= 828.
    let g = geometry(&l, &req(qp_type::RC, 1, 1, 828)).unwrap();
    assert_eq!((g.sq_wqe_size, g.max_inline_data), (1024, Some(828)));
    einval(req(qp_type::RC, 1, 1, 829));
    einval(req(qp_type::RC, 1, 1, u32::MAX));
    // Too many BBs.
    einval(req(qp_type::RC, (1 << 15) / 4 + 1, 1, 0));
    // Overflow guard: max_send_wr > 0x7fffffff / max_sq_desc_sz.
    einval(req(qp_type::RC, 0x7fff_ffff / 1024 + 1, 1, 0));
    // Receive side.
    einval(rq_req((1 << 15) + 1, 1));
    einval(rq_req(1, 33));
    let mut r = rq_req((1 << 15) + 1, 1);
    r.srq = true;
    einval(r);
    // No SQ: nothing checked or rewritten on the send side.
    let g = geometry(&l, &req(qp_type::RC, 0, 1000, 5000)).unwrap();
    assert_eq!(
        (g.sq_wqe_cnt, g.sq_max_post, g.max_inline_data),
        (0, 0, None)
    );
}

// ------------------------------------------------------------- send WQEs

fn rc(send_wr: u32, send_sge: u32, inline: u32) -> TestQp {
    let mut qp = TestQp::new(
        &req(qp_type::RC, send_wr, send_sge, inline),
        false,
        0,
        false,
    );
    qp.sq.set_state(QpState::Rts);
    qp
}

/// The worked example of the notes (§2.8).
#[test]
fn worked_example() {
    for bf in [false, true] {
        let mut qp = TestQp::new(&req(qp_type::RC, 10, 1, 0), false, 256, bf);
        qp.sq.set_state(QpState::Rts);
        qp.sq.cur_post = 5;
        let sge = [Sge {
            addr: 0x7f00_0000_1000,
            length: 64,
            lkey: 0x1234,
        }];
        qp.sq.post(&[SendWr::send(7, &sge).signaled()]).unwrap();
        let want: [u8; 32] = [
            0x00, 0x00, 0x05, 0x0a, 0x00, 0x01, 0x23, 0x02, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x7f, 0x00,
            0x00, 0x00, 0x10, 0x00,
        ];
        assert_eq!(qp.sq_bytes(5 * 64, 32), want);
        assert_eq!(qp.sq.cur_post, 6);
        assert_eq!(qp.db(1), [0, 0, 0, 6]);
        assert_eq!(qp.db(0), [0, 0, 0, 0]);
        assert_eq!(qp.sq.shared.wrid(5), 7);
        assert_eq!(qp.sq.shared.wqe_head(5), 0);
        assert_eq!((qp.sq.head, qp.sq.outstanding()), (1, 1));
        if bf {
            // BlueFlame: the whole BB, then the other half next time.
            assert_eq!(qp.uar(0, 64), qp.sq_bytes(5 * 64, 64));
            assert_eq!(qp.sq.bf.offset(), 256);
        } else {
            assert_eq!(qp.uar(0, 8), want[..8]);
            assert_eq!(qp.uar(8, 56), [0; 56]);
            assert_eq!(qp.sq.bf.offset(), 0);
        }
    }
}

#[test]
fn blueflame_halves_and_limits() {
    let mut qp = TestQp::new(&req(qp_type::RC, 10, 1, 0), false, 256, true);
    qp.sq.set_state(QpState::Rts);
    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 1,
    }];
    // First post to half 0, second to half 1 (at 256), third to half 0.
    qp.sq.post(&[SendWr::send(1, &sge)]).unwrap();
    qp.sq.post(&[SendWr::send(2, &sge)]).unwrap();
    assert_eq!(qp.uar(0, 64), qp.sq_bytes(0, 64));
    assert_eq!(qp.uar(256, 64), qp.sq_bytes(64, 64));
    assert_eq!(qp.sq.bf.offset(), 0);
    // A 1-segment WQE (ds 1: SEND with only zero-length SGEs) is never
    // BlueFlamed: an 8-byte doorbell at the current half.
    let empty = [Sge::default()];
    qp.sq.post(&[SendWr::send(3, &empty)]).unwrap();
    assert_eq!(qp.sq_bytes(128, 8), ctrl(2, 0x0a, 1, 0, 0)[..8]);
    assert_eq!(qp.uar(0, 8), ctrl(2, 0x0a, 1, 0, 0)[..8]);
    assert_eq!(qp.uar(8, 8), qp.sq_bytes(8, 8), "rest of half 0 untouched");
    assert_eq!(qp.sq.bf.offset(), 256);

    // Shared register: 8-byte doorbells, always at offset 0.
    let mut qp = TestQp::new(&req(qp_type::RC, 10, 1, 0), false, 256, false);
    qp.sq.set_state(QpState::Rts);
    for i in 0..3 {
        qp.sq.post(&[SendWr::send(i, &sge)]).unwrap();
        assert_eq!(qp.uar(0, 8), ctrl(i as u32, 0x0a, 2, 0, 0)[..8]);
        assert_eq!(qp.uar(8, 8), [0; 8]);
        assert_eq!(qp.uar(256, 8), [0; 8]);
        assert_eq!(qp.sq.bf.offset(), 0);
    }

    // buf_size 0 (bfreg 0): never BlueFlame, offset stays 0.
    let mut qp = TestQp::new(&req(qp_type::RC, 10, 1, 0), false, 0, true);
    qp.sq.set_state(QpState::Rts);
    qp.sq.post(&[SendWr::send(1, &sge)]).unwrap();
    qp.sq.post(&[SendWr::send(2, &sge)]).unwrap();
    assert_eq!(qp.uar(0, 8), ctrl(1, 0x0a, 2, 0, 0)[..8]);
    assert_eq!(qp.uar(8, 8), [0; 8]);
    assert_eq!(qp.sq.bf.offset(), 0);

    // A WQE larger than the half: 8-byte doorbell. 12 SGEs: ds 13 = 208
    // bytes > 128.
    let mut qp = TestQp::new(&req(qp_type::RC, 2, 12, 0), false, 128, true);
    qp.sq.set_state(QpState::Rts);
    let sges = [sge[0]; 12];
    qp.sq.post(&[SendWr::send(1, &sges)]).unwrap();
    assert_eq!(qp.uar(0, 8), ctrl(0, 0x0a, 13, 0, 0)[..8]);
    assert_eq!(qp.uar(8, 8), [0; 8]);
    assert_eq!(qp.sq.bf.offset(), 128);
}

#[test]
fn inline_wraps_byte_exactly() {
    // 320-byte slots (inline 124), 512-byte ring of 8 BBs, 1 WR.
    let payload: Vec<u8> = (0..100u8)
        .map(|i| i.wrapping_mul(7).wrapping_add(1))
        .collect();
    for split in [None, Some(30usize)] {
        let mut qp = TestQp::new(&req(qp_type::RC, 1, 1, 100), false, 256, true);
        qp.sq.set_state(QpState::Rts);
        qp.sq.cur_post = 7;
        let whole = [IoSlice::new(&payload)];
        let parts = split.map(|s| [IoSlice::new(&payload[..s]), IoSlice::new(&payload[s..])]);
        let bufs: &[IoSlice<'_>] = match &parts {
            Some(p) => p,
            None => &whole,
        };
        let wr = opcode::Send::inline(9, bufs).imm(0x1122_3344).build();
        qp.sq.post(&[wr]).unwrap();
        // ds = 1 + ceil(104 / 16) = 8: two BBs, 7 and 0.
        let mut want = ctrl(7, 0x0b, 8, 0, 0x1122_3344);
        want.extend(be32(100 | 0x8000_0000));
        want.extend(&payload[..44]);
        assert_eq!(qp.sq_bytes(7 * 64, 64), want);
        assert_eq!(qp.sq_bytes(0, 56), payload[44..]);
        assert_eq!(qp.sq_bytes(0x38, 8), [0; 8], "padding not written");
        assert_eq!(qp.sq.cur_post, 9);
        assert_eq!(qp.db(1), [0, 0, 0, 9]);
        // BlueFlame: BB 7 then BB 0 (the source wraps).
        assert_eq!(qp.uar(0, 64), qp.sq_bytes(7 * 64, 64));
        assert_eq!(qp.uar(64, 64), qp.sq_bytes(0, 64));
    }
}

#[test]
fn inline_sizes() {
    let mut qp = rc(10, 1, 0);
    // 60 bytes (the maximum): 4 + 60 = 64 -> 4 units, ds 5.
    let data = [0xabu8; 61];
    qp.sq
        .post(&[SendWr::send_inline(1, &[IoSlice::new(&data[..60])])])
        .unwrap();
    let mut want = ctrl(0, 0x0a, 5, 0, 0);
    want.extend(be32(60 | 0x8000_0000));
    want.extend([0xab; 60]);
    assert_eq!(qp.sq_bytes(0, 80), want);
    assert_eq!(qp.sq.cur_post, 2);
    // 12 bytes: 16 -> 1 unit.
    qp.sq
        .post(&[SendWr::send_inline(2, &[IoSlice::new(&data[..12])])])
        .unwrap();
    assert_eq!(qp.sq_bytes(128, 16), ctrl(2, 0x0a, 2, 0, 0));
    // Empty: no header, ds 1.
    qp.sq.post(&[SendWr::send_inline(3, &[])]).unwrap();
    assert_eq!(qp.sq_bytes(192, 16), ctrl(3, 0x0a, 1, 0, 0));
    assert_eq!(qp.sq_bytes(208, 4), [0; 4]);
    // One byte over: refused, nothing posted.
    assert_eq!(
        qp.sq
            .post(&[SendWr::send_inline(4, &[IoSlice::new(&data)])]),
        Err(PostFailed::new(
            0,
            PostError::InlineTooLarge { len: 61, max: 60 }
        ))
    );
    assert_eq!(qp.sq.cur_post, 4);
    // Inline RDMA WRITE: raddr, then inline.
    let five = [IoSlice::new(&data[..5])];
    let wr = opcode::Write::inline(5, &five, 0xdead_beef_0000, 7).build();
    qp.sq.post(&[wr]).unwrap();
    let mut want = ctrl(4, 0x08, 3, 0, 0);
    want.extend(0xdead_beef_0000u64.to_be_bytes());
    want.extend(be32(7));
    want.extend([0; 4]);
    want.extend(be32(5 | 0x8000_0000));
    want.extend([0xab; 5]);
    assert_eq!(qp.sq_bytes(256, 41), want);
}

#[test]
fn rdma_and_flags() {
    let mut qp = TestQp::new(&req(qp_type::RC, 10, 2, 0), true, 0, false);
    qp.sq.set_state(QpState::Rts);
    let sge = [Sge {
        addr: 0x1111_2222_3333_4444,
        length: 0x1000,
        lkey: 0xaabbccdd,
    }];
    let write = SendWr::rdma_write_with_imm(1, &sge, 0x5555_6666_7777_8888, 0x99, 0xcafe_f00d)
        .flags(SendFlags::SOLICITED | SendFlags::FENCE);
    let read = SendWr::rdma_read(2, &sge, 0x10, 0x20);
    qp.sq.post(&[write, read]).unwrap();
    let mut want = ctrl(0, 0x09, 3, 0x08 | 0x02 | 0x80, 0xcafe_f00d);
    want.extend(0x5555_6666_7777_8888u64.to_be_bytes());
    want.extend(be32(0x99));
    want.extend([0; 4]);
    want.extend(data_seg(0x1000, 0xaabbccdd, 0x1111_2222_3333_4444));
    assert_eq!(qp.sq_bytes(0, 48), want);
    let mut want = ctrl(1, 0x10, 3, 0x08, 0);
    want.extend(0x10u64.to_be_bytes());
    want.extend(be32(0x20));
    want.extend([0; 4]);
    want.extend(data_seg(0x1000, 0xaabbccdd, 0x1111_2222_3333_4444));
    assert_eq!(qp.sq_bytes(64, 48), want);
}

#[test]
fn atomics() {
    let mut qp = rc(10, 1, 0);
    // Stale bytes everywhere: every written byte is checked.
    qp.ring.fill(0xee);
    let sge = [Sge {
        addr: 0x7000,
        length: 8,
        lkey: 0x42,
    }];
    let cas = SendWr::cmp_swap(
        1,
        &sge[0],
        0x8000,
        0x77,
        0x0102_0304_0506_0708,
        0x1112_1314_1516_1718,
    )
    .signaled();
    let faa = SendWr::fetch_add(2, &sge[0], 0x8008, 0x77, 0x2122_2324_2526_2728);
    qp.sq.post(&[cas, faa]).unwrap();
    let mut want = ctrl(0, 0x11, 4, 0x08, 0);
    want.extend(0x8000u64.to_be_bytes());
    want.extend(be32(0x77));
    want.extend([0; 4]);
    want.extend(0x1112_1314_1516_1718u64.to_be_bytes());
    want.extend(0x0102_0304_0506_0708u64.to_be_bytes());
    want.extend(data_seg(8, 0x42, 0x7000));
    assert_eq!(qp.sq_bytes(0, 64), want);
    let mut want = ctrl(1, 0x12, 4, 0, 0);
    want.extend(0x8008u64.to_be_bytes());
    want.extend(be32(0x77));
    want.extend([0; 4]);
    want.extend(0x2122_2324_2526_2728u64.to_be_bytes());
    want.extend([0; 8]);
    want.extend(data_seg(8, 0x42, 0x7000));
    assert_eq!(qp.sq_bytes(64, 64), want);
    assert_eq!(qp.sq.cur_post, 2);
}

#[test]
fn zero_length_sges_skipped() {
    let mut qp = rc(10, 4, 0);
    let sges = [
        Sge {
            addr: 0xa000,
            length: 10,
            lkey: 1,
        },
        Sge {
            addr: 0xb000,
            length: 0,
            lkey: 2,
        },
        Sge {
            addr: 0xc000,
            length: 20,
            lkey: 3,
        },
        Sge {
            addr: 0xd000,
            length: 0,
            lkey: 4,
        },
    ];
    qp.sq.post(&[SendWr::send(1, &sges)]).unwrap();
    let mut want = ctrl(0, 0x0a, 3, 0, 0);
    want.extend(data_seg(10, 1, 0xa000));
    want.extend(data_seg(20, 3, 0xc000));
    assert_eq!(qp.sq_bytes(0, 48), want);
    assert_eq!(qp.sq_bytes(48, 16), [0; 16], "no terminator in send WQEs");
    assert_eq!(qp.sq.cur_post, 1);
}

#[test]
fn data_segments_wrap() {
    // 4 SGEs: 192 + 64 = 256-byte slots; 1 WR -> 256 bytes, 4 BBs.
    let mut qp = rc(1, 4, 0);
    qp.sq.cur_post = 3;
    let sges: Vec<Sge> = (0..4)
        .map(|i| Sge {
            addr: 0x1000 * (i + 1),
            length: 100 + i as u32,
            lkey: i as u32,
        })
        .collect();
    qp.sq.post(&[SendWr::send(1, &sges)]).unwrap();
    let mut want = ctrl(3, 0x0a, 5, 0, 0);
    for s in &sges[..3] {
        want.extend(data_seg(s.length, s.lkey, s.addr));
    }
    assert_eq!(qp.sq_bytes(192, 64), want);
    assert_eq!(qp.sq_bytes(0, 16), data_seg(103, 3, 0x4000));
    assert_eq!(qp.sq.cur_post, 5);
    assert_eq!(qp.db(1), [0, 0, 0, 5]);
}

fn av() -> [u8; 48] {
    let mut av = [0u8; 48];
    for (i, b) in av.iter_mut().enumerate() {
        *b = 0x40 + i as u8;
    }
    av
}

#[test]
fn ud_datagram() {
    // UD 1 SGE: 128-byte slots; 2 WRs -> 256 bytes, 4 BBs.
    let mut qp = TestQp::new(&req(qp_type::UD, 2, 1, 0), false, 256, true);
    qp.sq.set_state(QpState::Rts);
    let av = av();
    let dest = UdDest {
        ah_num: 1,
        av: Some(&av),
        remote_qpn: 0x00_0abc,
        remote_qkey: 0x1111_2222,
        hold: None,
    };
    let sge = [Sge {
        addr: 0x9000,
        length: 256,
        lkey: 0x55,
    }];
    let wr = SendWr::send(1, &sge).signaled().dest(dest);
    // Start at the last BB: the data segment wraps to BB 0.
    qp.sq.cur_post = 3;
    qp.sq.post(&[wr]).unwrap();
    let mut want = ctrl(3, 0x0a, 5, 0x08, 0);
    want.extend(be32(0x1111_2222));
    want.extend(&av[4..8]);
    want.extend(be32(0x8000_0abc));
    want.extend(&av[12..]);
    assert_eq!(qp.sq_bytes(192, 64), want);
    assert_eq!(qp.sq_bytes(0, 16), data_seg(256, 0x55, 0x9000));
    assert_eq!(qp.sq.cur_post, 5);
    // BlueFlame of BB 3 then BB 0.
    assert_eq!(qp.uar(0, 64), qp.sq_bytes(192, 64));
    assert_eq!(qp.uar(64, 64), qp.sq_bytes(0, 64));

    // UD inline: header right after the AV.
    let data = [0x5au8; 20];
    let bufs = [IoSlice::new(&data)];
    let wr = opcode::Send::inline(2, &bufs).imm(7).build().dest(dest);
    qp.sq.post(&[wr]).unwrap();
    let mut want = ctrl(5, 0x0b, 6, 0, 7);
    want.extend(be32(0x1111_2222));
    want.extend(&av[4..8]);
    want.extend(be32(0x8000_0abc));
    want.extend(&av[12..]);
    want.extend(be32(20 | 0x8000_0000));
    want.extend(data);
    assert_eq!(qp.sq_bytes(64, 88), want);
}

#[test]
fn chain_one_doorbell() {
    let mut qp = TestQp::new(&req(qp_type::RC, 10, 1, 0), false, 256, true);
    qp.sq.set_state(QpState::Rts);
    let sge = [Sge {
        addr: 0x2000,
        length: 16,
        lkey: 9,
    }];
    let wrs = [
        SendWr::send(10, &sge),
        SendWr::send(11, &sge).signaled(),
        SendWr::send(12, &sge),
    ];
    qp.sq.post(&wrs).unwrap();
    for i in 0..3 {
        let mut want = ctrl(i as u32, 0x0a, 2, if i == 1 { 0x08 } else { 0 }, 0);
        want.extend(data_seg(16, 9, 0x2000));
        assert_eq!(qp.sq_bytes(i * 64, 32), want);
        assert_eq!(qp.sq.shared.wrid(i), 10 + i as u64);
        assert_eq!(qp.sq.shared.wqe_head(i), i as u32);
    }
    assert_eq!(qp.db(1), [0, 0, 0, 3]);
    // One 8-byte doorbell (no BlueFlame for a chain): the last WQE's ctrl.
    assert_eq!(qp.uar(0, 8), ctrl(2, 0x0a, 2, 0, 0)[..8]);
    assert_eq!(qp.uar(8, 8), [0; 8]);
    assert_eq!(qp.sq.bf.offset(), 256);
    assert_eq!((qp.sq.head, qp.sq.outstanding()), (3, 3));
    // The next chain records the running WR counter.
    qp.sq.post(&wrs[..2]).unwrap();
    assert_eq!(qp.sq.shared.wqe_head(3), 3);
    assert_eq!(qp.sq.shared.wqe_head(4), 4);
    assert_eq!(qp.uar(256, 8), ctrl(4, 0x0a, 2, 0, 0)[..8]);
}

#[test]
fn send_overflow_and_retire() {
    let mut qp = rc(10, 1, 0);
    assert_eq!(qp.sq.capacity(), 16);
    let sge = [Sge {
        addr: 0x2000,
        length: 16,
        lkey: 9,
    }];
    let wrs: Vec<SendWr<'_>> = (0..20).map(|i| SendWr::send(i, &sge)).collect();
    assert_eq!(
        qp.sq.post(&wrs),
        Err(PostFailed::new(16, PostError::QueueFull))
    );
    assert_eq!(
        (qp.sq.head, qp.sq.cur_post, qp.sq.outstanding()),
        (16, 16, 16)
    );
    assert_eq!(qp.db(1), [0, 0, 0, 16]);
    assert_eq!(
        qp.sq.post(&wrs[..1]),
        Err(PostFailed::new(0, PostError::QueueFull))
    );
    // The CQ retires WRs up to wqe_head[4] + 1 = 5.
    qp.sq.shared.retire_to(5);
    assert_eq!(qp.sq.outstanding(), 11);
    assert_eq!(
        qp.sq.post(&wrs[..6]),
        Err(PostFailed::new(5, PostError::QueueFull))
    );
    assert_eq!(qp.sq.outstanding(), 16);
    // The ring wrapped: WR 20 is at BB 20 & 63 = 20; the 16-bit counter
    // keeps going.
    assert_eq!(qp.db(1), [0, 0, 0, 21]);
}

#[test]
fn send_error_indices() {
    let mut qp = rc(10, 1, 0);
    let sge = [Sge {
        addr: 0x2000,
        length: 16,
        lkey: 9,
    }];
    let two = [sge[0], sge[0]];
    // Refused first WR: nothing posted, no doorbell.
    assert_eq!(
        qp.sq.post(&[SendWr::send(1, &two)]),
        Err(PostFailed::new(
            0,
            PostError::TooManySge { given: 2, max: 1 }
        ))
    );
    assert_eq!((qp.sq.head, qp.sq.cur_post), (0, 0));
    assert_eq!(qp.db(1), [0; 4]);
    assert_eq!(qp.uar(0, 8), [0; 8]);
    // Refused third: two posted and rung.
    let wrs = [
        SendWr::send(1, &sge),
        SendWr::send(2, &sge),
        SendWr::send(3, &two),
    ];
    assert_eq!(
        qp.sq.post(&wrs),
        Err(PostFailed::new(
            2,
            PostError::TooManySge { given: 2, max: 1 }
        ))
    );
    assert_eq!((qp.sq.head, qp.sq.cur_post), (2, 2));
    assert_eq!(qp.db(1), [0, 0, 0, 2]);
    assert_eq!(qp.uar(0, 8), ctrl(1, 0x0a, 2, 0, 0)[..8]);
}

#[test]
fn send_refusals() {
    let sge = [Sge {
        addr: 0x2000,
        length: 8,
        lkey: 9,
    }];
    let big = [
        Sge {
            addr: 0,
            length: u32::MAX,
            lkey: 1,
        },
        Sge {
            addr: 0,
            length: 2,
            lkey: 1,
        },
    ];
    let av = av();
    let dest = UdDest {
        ah_num: 1,
        av: Some(&av),
        remote_qpn: 2,
        remote_qkey: 3,
        hold: None,
    };
    let no_av = UdDest { av: None, ..dest };
    let op = |op| SendWr::any(1, op, Payload::Sge(&sge));
    let ud_send = op(WrOpcode::Send).dest(dest);
    let ud_no_av = op(WrOpcode::Send).dest(no_av);
    let ud_write = op(WrOpcode::RdmaWrite).dest(dest);
    let long_sge = [Sge {
        addr: 0,
        length: 1025,
        lkey: 1,
    }];
    let ud_long = SendWr::send(1, &long_sge).dest(dest);
    let four = [Sge {
        addr: 0,
        length: 4,
        lkey: 1,
    }];
    let bytes = [0u8; 8];
    let inl = [IoSlice::new(&bytes)];
    let inline_read = SendWr::any(1, WrOpcode::RdmaRead, Payload::Inline(&inl));
    let cases: Vec<(u8, SendWr<'_>, PostError)> = vec![
        (
            qp_type::RC,
            op(WrOpcode::LocalInv),
            PostError::InvalidateUnsupported,
        ),
        (
            qp_type::RC,
            op(WrOpcode::SendWithInv),
            PostError::InvalidateUnsupported,
        ),
        (
            qp_type::RC,
            op(WrOpcode::BindMw),
            PostError::InvalidateUnsupported,
        ),
        (
            qp_type::UC,
            op(WrOpcode::RdmaRead),
            PostError::InvalidOpcode,
        ),
        (
            qp_type::UC,
            op(WrOpcode::AtomicFetchAndAdd),
            PostError::InvalidOpcode,
        ),
        (qp_type::UD, ud_write, PostError::InvalidOpcode),
        (qp_type::RC, inline_read, PostError::InvalidOpcode),
        (
            qp_type::RC,
            SendWr::fetch_add(1, &four[0], 0x1000, 1, 1),
            PostError::BadAtomic,
        ),
        (
            qp_type::RC,
            SendWr::cmp_swap(1, &sge[0], 0x1004, 1, 1, 2),
            PostError::BadAtomic,
        ),
        (qp_type::UD, op(WrOpcode::Send), PostError::MissingAddress),
        (qp_type::UD, ud_no_av, PostError::MissingAddress),
        (qp_type::RC, ud_send, PostError::UnexpectedAddress),
        (
            qp_type::UD,
            ud_long,
            PostError::UdTooLong {
                len: 1025,
                mtu: 1024,
            },
        ),
        (
            qp_type::RC,
            SendWr::send(1, &big),
            PostError::MessageTooLong,
        ),
        // Not built on mlx5 yet: refused even where the library would
        // allow them (this queue's `allow` answers no).
        (
            qp_type::RC,
            SendWr::atomic_write(1, 0x1000, 1, [0; 8]),
            PostError::OpcodeUnsupported(WrOpcode::AtomicWrite),
        ),
        (
            qp_type::RC,
            SendWr::rdma_flush(1, 0x1000, 1, 64, FlushType::GLOBAL),
            PostError::OpcodeUnsupported(WrOpcode::Flush),
        ),
    ];
    for (qpt, wr, want) in cases {
        let mut qp = TestQp::new(&req(qpt, 4, 2, 16), false, 0, false);
        qp.sq.set_state(QpState::Rts);
        qp.sq.set_ud_mtu(1024);
        assert!(!rverbs_provider::SendQueue::allow(
            &mut qp.sq,
            WrOpcode::AtomicWrite
        ));
        assert!(!rverbs_provider::SendQueue::allow(
            &mut qp.sq,
            WrOpcode::Flush
        ));
        assert_eq!(
            qp.sq.post(&[wr]),
            Err(PostFailed::new(0, want)),
            "{qpt} {wr:?}"
        );
        assert_eq!((qp.sq.cur_post, qp.db(1)), (0, [0; 4]));
    }
    // And the UD send itself is fine, as is a 1024-byte one.
    let mut qp = TestQp::new(&req(qp_type::UD, 4, 2, 16), false, 0, false);
    qp.sq.set_state(QpState::Rts);
    qp.sq.set_ud_mtu(1025);
    qp.sq.post(&[ud_send, ud_long]).unwrap();
}

#[test]
fn send_states() {
    let mut qp = TestQp::new(&req(qp_type::RC, 10, 1, 0), false, 0, false);
    let sge = [Sge {
        addr: 0x2000,
        length: 16,
        lkey: 9,
    }];
    let wr = [SendWr::send(1, &sge)];
    assert_eq!(
        qp.sq.post(&wr),
        Err(PostFailed::new(0, PostError::InvalidState))
    );
    qp.sq.set_state(QpState::Init);
    assert_eq!(
        qp.sq.post(&wr),
        Err(PostFailed::new(0, PostError::InvalidState))
    );
    qp.sq.set_state(QpState::Rts);
    qp.sq.post(&wr).unwrap();
    qp.sq.post(&wr).unwrap();
    assert_eq!(qp.db(1), [0, 0, 0, 2]);
    qp.sq.shared.retire_to(1);
    // RESET: counters and the doorbell record start over.
    qp.sq.set_state(QpState::Reset);
    assert_eq!(
        qp.sq.post(&wr),
        Err(PostFailed::new(0, PostError::InvalidState))
    );
    assert_eq!((qp.sq.cur_post, qp.sq.head, qp.sq.outstanding()), (0, 0, 0));
    assert_eq!(qp.db(1), [0; 4]);
    qp.sq.set_state(QpState::Init);
    qp.sq.set_state(QpState::Rts);
    qp.sq.post(&wr).unwrap();
    assert_eq!(qp.sq_bytes(0, 16), ctrl(0, 0x0a, 2, 0, 0));
    assert_eq!(qp.db(1), [0, 0, 0, 1]);
}

#[test]
fn no_send_queue() {
    let mut r = rq_req(4, 1);
    r.qp_type = qp_type::RC;
    let mut qp = TestQp::new(&r, false, 0, false);
    qp.sq.set_state(QpState::Rts);
    assert_eq!(qp.sq.capacity(), 0);
    let wr = [SendWr::send(1, &[])];
    assert_eq!(
        qp.sq.post(&wr),
        Err(PostFailed::new(0, PostError::QueueFull))
    );
    assert_eq!(qp.db(1), [0; 4]);
}

// ---------------------------------------------------------- receive WQEs

#[test]
fn recv_wqes() {
    // 3 SGEs -> 64-byte WQEs with 4 entries; 2 WRs -> 128 bytes, 2 WQEs.
    let mut qp = TestQp::new(&rq_req(2, 3), false, 0, false);
    let rq = qp.rq.as_mut().unwrap();
    assert_eq!(rq.capacity(), 2);
    let sges = [
        Sge {
            addr: 0xa000,
            length: 10,
            lkey: 1,
        },
        Sge {
            addr: 0xb000,
            length: 0,
            lkey: 2,
        },
        Sge {
            addr: 0xc000,
            length: 20,
            lkey: 3,
        },
    ];
    let wrs = [RecvWr::new(5, &sges), RecvWr::new(6, &sges[..1])];
    assert_eq!(
        rq.post(&wrs),
        Err(PostFailed::new(0, PostError::InvalidState))
    );
    rq.set_state(QpState::Init);
    rq.post(&wrs).unwrap();
    assert_eq!(rq.shared.wrid(0), 5);
    assert_eq!(rq.shared.wrid(1), 6);
    assert_eq!(rq.outstanding(), 2);
    let mut want = data_seg(10, 1, 0xa000);
    want.extend(data_seg(20, 3, 0xc000));
    want.extend(data_seg(0, 0x100, 0));
    want.extend([0; 16]);
    assert_eq!(qp.rq_bytes(0, 64), want);
    let mut want = data_seg(10, 1, 0xa000);
    want.extend(data_seg(0, 0x100, 0));
    assert_eq!(qp.rq_bytes(64, 32), want);
    assert_eq!(qp.db(0), [0, 0, 0, 2]);
    assert_eq!(qp.db(1), [0; 4]);
    // Full: the third waits for the CQ.
    let rq = qp.rq.as_mut().unwrap();
    assert_eq!(
        rq.post(&wrs[..1]),
        Err(PostFailed::new(0, PostError::RecvQueueFull))
    );
    rq.shared.retire_to(1);
    let more = [RecvWr::new(8, &sges[..1]), RecvWr::new(9, &sges[..1])];
    assert_eq!(
        rq.post(&more),
        Err(PostFailed::new(1, PostError::RecvQueueFull))
    );
    assert_eq!(rq.shared.wrid(0), 8);
    assert_eq!(qp.db(0), [0, 0, 0, 3]);
    // Too many SGEs.
    let five = [sges[0]; 5];
    let rq = qp.rq.as_mut().unwrap();
    rq.shared.retire_to(3);
    assert_eq!(
        rq.post(&[RecvWr::new(1, &sges), RecvWr::new(1, &five)]),
        Err(PostFailed::new(
            1,
            PostError::TooManySge { given: 5, max: 4 }
        ))
    );
    assert_eq!(qp.db(0), [0, 0, 0, 4]);
    // RESET starts over.
    let rq = qp.rq.as_mut().unwrap();
    rq.set_state(QpState::Reset);
    assert_eq!(rq.outstanding(), 0);
    assert_eq!(qp.db(0), [0; 4]);
    let rq = qp.rq.as_mut().unwrap();
    assert_eq!(
        rq.post(&wrs),
        Err(PostFailed::new(0, PostError::InvalidState))
    );
    rq.set_state(QpState::Init);
    rq.post(&wrs[1..]).unwrap();
    assert_eq!(qp.db(0), [0, 0, 0, 1]);
}

#[test]
fn recv_full_wqe_has_no_terminator() {
    // 1 SGE: 16-byte WQEs, 4 of them.
    let mut qp = TestQp::new(&rq_req(1, 1), false, 0, false);
    let rq = qp.rq.as_mut().unwrap();
    rq.set_state(QpState::Init);
    let sge = [Sge {
        addr: 0x1234_5678_9abc,
        length: 0x40,
        lkey: 0x77,
    }];
    let empty = [Sge::default()];
    rq.post(&[
        RecvWr::new(1, &sge),
        RecvWr::new(2, &empty),
        RecvWr::new(3, &[]),
    ])
    .unwrap();
    assert_eq!(qp.rq_bytes(0, 16), data_seg(0x40, 0x77, 0x1234_5678_9abc));
    assert_eq!(qp.rq_bytes(16, 16), data_seg(0, 0x100, 0));
    assert_eq!(qp.rq_bytes(32, 16), data_seg(0, 0x100, 0));
    assert_eq!(qp.rq_bytes(48, 16), [0; 16]);
    assert_eq!(qp.db(0), [0, 0, 0, 3]);
}

/// Parses a hex dump.
fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// A UD ring of 8 BBs (192-byte slots, 2 WRs, sq_sig_all) driven around
/// the end: inline payloads split across the end and a data segment that
/// wraps after an AV in the last BB. The expected bytes are what
/// Debian's libmlx5 44.0 wrote for the same requests on the emulator
/// (QPN normalised to 0x123; AV of an AH with dlid 1, SL 3).
#[test]
fn ud_wrap_matches_libmlx5() {
    let mut qp = TestQp::new(&req(qp_type::UD, 2, 1, 100), true, 0, false);
    assert_eq!(
        (qp.g.sq_wqe_size, qp.g.sq_wqe_cnt, qp.g.sq_max_post),
        (192, 8, 2)
    );
    assert_eq!(qp.g.max_inline_data, Some(124));
    qp.sq.set_state(QpState::Rts);
    let mut av = [0u8; 48];
    av[12] = 0x03;
    av[15] = 0x01;
    let dest = UdDest {
        ah_num: 1,
        av: Some(&av),
        remote_qpn: 0xabc,
        remote_qkey: 0x1111_2222,
        hold: None,
    };
    let payload: Vec<u8> = (0..100u8)
        .map(|i| i.wrapping_mul(7).wrapping_add(1))
        .collect();
    let bufs = [IoSlice::new(&payload)];
    // Five inline sends of 3 BBs each (ds 1 + 3 + 7 = 11), each retired
    // by the CQ before the next; the third starts at BB 6.
    for k in 0..5 {
        let wr = opcode::Send::inline(k, &bufs)
            .imm(0x1122_3344)
            .build()
            .dest(dest);
        qp.sq.post(&[wr]).unwrap();
        qp.sq.shared.retire_to(qp.sq.head);
        if k == 2 {
            assert_eq!(qp.db(1), [0, 0, 0, 9]);
            assert_eq!(
                qp.sq_bytes(6 * 64, 64),
                unhex(
                    "0000060b0001230b0000000811223344111122220000000080000abc03000001\
                     0000000000000000000000000000000000000000000000000000000000000000"
                )
            );
            assert_eq!(
                qp.sq_bytes(7 * 64, 64),
                unhex(
                    "8000006401080f161d242b323940474e555c636a71787f868d949ba2a9b0b7be\
                     c5ccd3dae1e8eff6fd040b121920272e353c434a51585f666d747b828990979e"
                )
            );
            assert_eq!(
                qp.sq_bytes(0, 64),
                unhex(
                    "a5acb3bac1c8cfd6dde4ebf2f900070e151c232a31383f464d545b626970777e\
                     858c939aa1a8afb6000000000000000000000000000000000000000000000000"
                )
            );
        }
    }
    // cur_post 15: ctrl + AV fill BB 7, the data segment wraps to BB 0.
    let sge = [Sge {
        addr: 0x9000,
        length: 256,
        lkey: 0x55,
    }];
    let wr = SendWr::send(9, &sge).dest(dest);
    qp.sq.post(&[wr]).unwrap();
    assert_eq!(
        qp.sq_bytes(7 * 64, 64),
        unhex(
            "00000f0a000123050000000800000000111122220000000080000abc03000001\
             0000000000000000000000000000000000000000000000000000000000000000"
        )
    );
    assert_eq!(
        qp.sq_bytes(0, 16),
        unhex("00000100000000550000000000009000")
    );
    assert_eq!(qp.db(1), [0, 0, 0, 0x11]);
}

/// Slices over `r` whose lengths add up to 2^64 + `extra.len()`: in
/// wrapping `usize` arithmetic, just `extra.len()`.
fn overflowing<'a>(r: &'a Reserved, extra: &'a [u8]) -> Vec<IoSlice<'a>> {
    let n = (1u128 << 64) / r.bytes().len() as u128;
    let mut v: Vec<IoSlice<'a>> = (0..n).map(|_| IoSlice::new(r.bytes())).collect();
    v.push(IoSlice::new(extra));
    v
}

/// Inline slices whose lengths sum past `usize::MAX` (wrapping to 16, which
/// fits `max_inline`) are refused as too large, before a byte is copied.
#[test]
fn inline_length_overflow_is_refused() {
    let mut qp = rc(10, 1, 0);
    let big = Reserved::new();
    let extra = [0x5au8; 16];
    let bufs = overflowing(&big, &extra);
    let wrapped = bufs.iter().fold(0usize, |a, b| a.wrapping_add(b.len()));
    assert_eq!(wrapped, 16, "the lengths wrap to 16 bytes");
    for op in [WrOpcode::Send, WrOpcode::RdmaWrite] {
        let wr = SendWr::any(1, op, Payload::Inline(&bufs));
        assert_eq!(
            qp.sq.post(&[wr]),
            Err(PostFailed::new(
                0,
                PostError::InlineTooLarge {
                    len: usize::MAX,
                    max: 60
                }
            ))
        );
    }
    assert_eq!(qp.sq.cur_post, 0);
    assert_eq!(qp.db(1), [0; 4]);
}

/// QPs on one shared (non-dedicated) bfreg ring its doorbell from several
/// threads: a reader watching the register only ever sees whole 8-byte
/// doorbells (QP k's number with one of QP k's counters, which start at
/// k << 12), never halves of two.
#[test]
fn shared_bfreg_doorbells_are_whole() {
    let page = Arc::new(Mapping::anon(4096).unwrap());
    let reg = BlueFlame::new(&page, 0, 0, false).unwrap();
    let mut qps: Vec<TestQp> = (1..=4u32)
        .map(|k| {
            let mut qp = rc(16, 1, 0);
            qp.sq.bf = reg.clone();
            qp.sq.qpn = k;
            qp.sq.qpn_be = (k << 8).to_be();
            qp.sq.cur_post = k << 12;
            qp
        })
        .collect();
    let valid = |raw: u64| {
        if raw == 0 {
            return true;
        }
        let b = raw.to_ne_bytes();
        let w0 = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let w1 = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let (pi, op, qpn, ds) = (w0 >> 8, w0 & 0xff, w1 >> 8, w1 & 0xff);
        op == 0x0a && ds == 2 && (1..=4).contains(&qpn) && pi >> 12 == qpn
    };
    let done = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|s| {
        for qp in qps.iter_mut() {
            let done = &done;
            s.spawn(move || {
                let sge = [Sge {
                    addr: 0x1000,
                    length: 8,
                    lkey: 1,
                }];
                for _ in 0..2000 {
                    qp.sq.post(&[SendWr::send(1, &sge)]).unwrap();
                    // Retire it, as a CQ would.
                    qp.sq.shared.retire_to(qp.sq.head);
                }
                done.fetch_add(1, Ordering::Release);
            });
        }
        // Watches until every poster is done (at least one look).
        loop {
            let finished = done.load(Ordering::Acquire) == 4;
            let v = reg.load();
            assert!(valid(v), "torn doorbell {v:#018x}");
            if finished {
                break;
            }
        }
    });
    let last = reg.load();
    assert!(last != 0 && valid(last), "{last:#018x}");
}

/// Everything the device and the CQ see of a send queue: ring bytes,
/// bookkeeping, doorbell record, register bytes, counters, half.
type SqState = (Vec<u8>, Vec<(u64, u32)>, [u8; 4], Vec<u8>, u32, u32, u32);

fn state(qp: &TestQp) -> SqState {
    let slots = (0..qp.g.sq_wqe_cnt as usize)
        .map(|i| (qp.sq.shared.wrid(i), qp.sq.shared.wqe_head(i)))
        .collect();
    (
        qp.sq_bytes(0, qp.g.sq_bytes()),
        slots,
        qp.db(1),
        qp.uar(0, 512),
        qp.sq.cur_post,
        qp.sq.head,
        qp.sq.bf.offset(),
    )
}

// ------------------------------------------------------------ send batches

mod batches {
    use super::*;
    use rverbs_provider::batch::{BatchSignal, BatchWr, SendBatch};

    fn entry(k: u64, length: u32) -> BatchWr {
        BatchWr::new(
            0x500 + k,
            Sge {
                addr: 0x7f00_0000_1000 + k * 64,
                length,
                lkey: 0x1234 + k as u32,
            },
            0x9000_0000 + k * 128,
        )
    }

    /// The same requests as a chain of `SendWr`s, signaled as the batch
    /// says (all of `wrs` are posted).
    fn as_chain<'a>(b: &SendBatch, wrs: &'a [BatchWr]) -> Vec<SendWr<'a>> {
        wrs.iter()
            .enumerate()
            .map(|(i, e)| {
                let sig = match b.signaling() {
                    BatchSignal::Each => true,
                    BatchSignal::Last => i + 1 == wrs.len(),
                    BatchSignal::Never => false,
                    BatchSignal::Every(n) => (i + 1) % n.max(1) as usize == 0 || i + 1 == wrs.len(),
                };
                b.to_wr(e, sig)
            })
            .collect()
    }

    fn pair(qpt: u8, sig_all: bool, start: u32) -> (TestQp, TestQp) {
        let mk = || {
            let mut qp = TestQp::new(&req(qpt, 10, 1, 0), sig_all, 256, true);
            qp.sq.set_state(QpState::Rts);
            qp.sq.cur_post = start;
            qp.sq.head = start.wrapping_mul(3);
            qp.sq.tail = qp.sq.head;
            qp.sq.shared.retire_to(qp.sq.head);
            qp
        };
        (mk(), mk())
    }

    /// A batch writes exactly the bytes the equivalent chain writes (WQEs,
    /// bookkeeping, doorbell record, doorbell register and BlueFlame
    /// half), for every operation, signaling, `sq_sig_all`, zero-length
    /// entries, a lone request (BlueFlame), the ring's end and the 16-bit
    /// WQE index's wrap.
    #[test]
    fn bytes_match_the_chain() {
        let ops = [
            SendBatch::rdma_write(0xabcd),
            SendBatch::rdma_write_with_imm(0xabcd, 0x1122_3344),
            SendBatch::send(),
            SendBatch::send_with_imm(0x5566_7788),
            SendBatch::rdma_read(0x4321),
        ];
        let lens: Vec<u32> = vec![64, 0, 1, 1 << 31, 4096, 0, 7, 64, 64, 0, 3, 9, 64, 64];
        let mut cases = 0;
        for b in ops {
            for sig in [
                BatchSignal::Last,
                BatchSignal::Each,
                BatchSignal::Never,
                BatchSignal::Every(3),
                BatchSignal::Every(1),
                BatchSignal::Every(0),
                BatchSignal::Every(100),
            ] {
                let b = b.signal(sig);
                for sig_all in [false, true] {
                    // 64 BBs: 60 and 0xfffc cross the ring's end, 0xfffc
                    // the WQE index's wrap too.
                    for start in [0, 5, 60, 0xfffc, u32::MAX - 2] {
                        for n in [1, 2, 14] {
                            let wrs: Vec<BatchWr> =
                                (0..n).map(|k| entry(k as u64, lens[k])).collect();
                            let (mut a, mut c) = pair(qp_type::RC, sig_all, start);
                            assert_eq!(a.sq.post_batch(&b, &wrs), Ok(()));
                            c.sq.post(&as_chain(&b, &wrs)).unwrap();
                            assert!(
                                state(&a) == state(&c),
                                "{b:?} sig_all {sig_all} start {start} n {n}"
                            );
                            // A second batch on top.
                            assert_eq!(a.sq.post_batch(&b, &wrs[..1]), Ok(()));
                            c.sq.post(&as_chain(&b, &wrs[..1])).unwrap();
                            assert!(state(&a) == state(&c), "second {b:?}");
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 5 * 7 * 2 * 5 * 3);
        // UC takes the same WQEs for what it allows.
        let wrs: Vec<BatchWr> = (0..5).map(|k| entry(k, lens[k as usize])).collect();
        let (mut a, mut c) = pair(qp_type::UC, false, 3);
        let b = SendBatch::rdma_write_with_imm(1, 2);
        a.sq.post_batch(&b, &wrs).unwrap();
        c.sq.post(&as_chain(&b, &wrs)).unwrap();
        assert!(state(&a) == state(&c));
    }

    /// A batch longer than the room: what fits is posted (the last of it
    /// signaled by default) and rung, `QueueFull` at the first that does
    /// not; once the CQ retires work, the rest goes in.
    #[test]
    fn queue_full_posts_what_fits() {
        let mut qp = rc(10, 1, 0);
        assert_eq!(qp.sq.capacity(), 16);
        let wrs: Vec<BatchWr> = (0..20).map(|k| entry(k, 16)).collect();
        let b = SendBatch::rdma_write(7);
        assert_eq!(
            qp.sq.post_batch(&b, &wrs),
            Err(PostFailed::new(16, PostError::QueueFull))
        );
        assert_eq!((qp.sq.head, qp.sq.cur_post), (16, 16));
        assert_eq!(qp.db(1), [0, 0, 0, 16]);
        let fm = |qp: &TestQp, i: usize| qp.sq_bytes(i * 64 + 11, 1)[0];
        assert_eq!(fm(&qp, 15), 0x08);
        assert!((0..15).all(|i| fm(&qp, i) == 0));
        assert_eq!(qp.sq.shared.wrid(15), 0x500 + 15);
        // The doorbell: the 15th WQE's first 8 bytes.
        assert_eq!(qp.uar(0, 8), qp.sq_bytes(15 * 64, 8));
        // Full: nothing posted, nothing rung.
        assert_eq!(
            qp.sq.post_batch(&b, &wrs[16..]),
            Err(PostFailed::new(0, PostError::QueueFull))
        );
        assert_eq!(qp.db(1), [0, 0, 0, 16]);
        // The CQ retires up to WR 5: five more fit.
        qp.sq.shared.retire_to(5);
        assert_eq!(
            qp.sq.post_batch(&b, &wrs[10..]),
            Err(PostFailed::new(5, PostError::QueueFull))
        );
        assert_eq!((qp.sq.head, qp.sq.outstanding()), (21, 16));
        assert_eq!(fm(&qp, 20), 0x08);
        qp.sq.shared.retire_to(21);
        assert_eq!(qp.sq.post_batch(&b, &wrs[15..]), Ok(()));
        assert_eq!(qp.sq.outstanding(), 5);
        // Empty batches post nothing and are fine, even when full.
        assert_eq!(qp.sq.post_batch(&b, &[]), Ok(()));
    }

    /// An entry longer than 2^31 bytes is refused before any byte of it
    /// is written; the entries before it are posted (the last signaled).
    #[test]
    fn too_long_is_refused_unwritten() {
        for b in [SendBatch::rdma_write(7), SendBatch::send()] {
            let mut qp = rc(10, 1, 0);
            let mut wrs: Vec<BatchWr> = (0..4).map(|k| entry(k, 64)).collect();
            wrs[2].sge.length = (1 << 31) + 1;
            assert_eq!(
                qp.sq.post_batch(&b, &wrs),
                Err(PostFailed::new(2, PostError::MessageTooLong))
            );
            assert_eq!((qp.sq.head, qp.sq.cur_post), (2, 2));
            assert_eq!(qp.db(1), [0, 0, 0, 2]);
            assert_eq!(qp.sq_bytes(2 * 64, 64), [0; 64]);
            assert_eq!(qp.sq_bytes(64 + 11, 1), [0x08]);
            // First: nothing at all.
            let mut qp = rc(10, 1, 0);
            wrs[0].sge.length = u32::MAX;
            assert_eq!(
                qp.sq.post_batch(&b, &wrs),
                Err(PostFailed::new(0, PostError::MessageTooLong))
            );
            assert_eq!((qp.sq.head, qp.sq.cur_post), (0, 0));
            assert_eq!(qp.db(1), [0; 4]);
            assert_eq!(qp.sq_bytes(0, 64), [0; 64]);
            assert_eq!(qp.uar(0, 8), [0; 8]);
        }
    }

    /// Zero-length entries have no data segment in their size (ds 1 for
    /// SEND, 2 for RDMA), as an empty gather list has; what lies past
    /// `ds` is not the device's to read.
    #[test]
    fn zero_length_has_no_data_segment() {
        let mut qp = rc(10, 1, 0);
        let wrs = [entry(0, 0), entry(1, 0)];
        qp.sq.post_batch(&SendBatch::send(), &wrs).unwrap();
        qp.sq.post_batch(&SendBatch::rdma_write(9), &wrs).unwrap();
        assert_eq!(qp.sq_bytes(0, 16), ctrl(0, 0x0a, 1, 0, 0));
        assert_eq!(qp.sq_bytes(64, 16), ctrl(1, 0x0a, 1, 0x08, 0));
        assert_eq!(qp.sq_bytes(3 * 64, 16), ctrl(3, 0x08, 2, 0x08, 0));
    }

    /// What the uniform checks refuse, at index 0 with nothing posted.
    #[test]
    fn refusals() {
        let wrs = [entry(0, 64)];
        let mut ud = TestQp::new(&req(qp_type::UD, 10, 1, 0), false, 0, false);
        ud.sq.set_state(QpState::Rts);
        assert_eq!(
            ud.sq.post_batch(&SendBatch::send(), &wrs),
            Err(PostFailed::new(0, PostError::MissingAddress))
        );
        let mut uc = TestQp::new(&req(qp_type::UC, 10, 1, 0), false, 0, false);
        uc.sq.set_state(QpState::Rts);
        assert_eq!(
            uc.sq.post_batch(&SendBatch::rdma_read(1), &wrs),
            Err(PostFailed::new(0, PostError::InvalidOpcode))
        );
        let mut none = rc(10, 0, 0);
        assert_eq!(
            none.sq.post_batch(&SendBatch::send(), &wrs),
            Err(PostFailed::new(
                0,
                PostError::TooManySge { given: 1, max: 0 }
            ))
        );
        let mut init = TestQp::new(&req(qp_type::RC, 10, 1, 0), false, 0, false);
        init.sq.set_state(QpState::Init);
        assert_eq!(
            init.sq.post_batch(&SendBatch::send(), &wrs),
            Err(PostFailed::new(0, PostError::InvalidState))
        );
        for qp in [&ud, &uc, &none, &init] {
            assert_eq!((qp.sq.head, qp.sq.cur_post), (0, 0));
            assert_eq!(qp.db(1), [0; 4]);
            assert_eq!(qp.uar(0, 8), [0; 8]);
        }
    }
}

/// The fast path (`try_fast`) and the general one (`post_checked`) read
/// one opcode table (`WQE_OPS`) and one flag table (`CTRL_FLAGS`): for
/// every simple opcode, flag combination and data length they write the
/// same 64 bytes, with and without signal-all.
#[test]
fn fast_and_general_paths_write_the_same_bytes() {
    let flag_sets = [
        SendFlags::empty(),
        SendFlags::FENCE,
        SendFlags::SIGNALED,
        SendFlags::SOLICITED,
        SendFlags::FENCE | SendFlags::SIGNALED,
        SendFlags::FENCE | SendFlags::SOLICITED,
        SendFlags::SIGNALED | SendFlags::SOLICITED,
        SendFlags::FENCE | SendFlags::SIGNALED | SendFlags::SOLICITED,
    ];
    let mut compared = 0;
    for sig_all in [false, true] {
        for length in [0, 0x40] {
            let sge = [Sge {
                addr: 0x1111_2222_3333_4444,
                length,
                lkey: 0xaabb_ccdd,
            }];
            let wrs = [
                SendWr::send(1, &sge),
                SendWr::send_with_imm(2, &sge, 0xcafe_f00d),
                SendWr::rdma_write(3, &sge, 0x5555_6666_7777_8888, 0x99),
                SendWr::rdma_write_with_imm(4, &sge, 0x10, 0x20, 0x0bad_beef),
                SendWr::rdma_read(5, &sge, 0x30, 0x40),
            ];
            for wr in wrs {
                for flags in flag_sets {
                    let wr = wr.flags(flags);
                    let fast = TestQp::new(&req(qp_type::RC, 8, 2, 0), sig_all, 0, false);
                    let general = TestQp::new(&req(qp_type::RC, 8, 2, 0), sig_all, 0, false);
                    let (ds, _bb) = fast.sq.try_fast(&wr, 3, 3).expect("a simple request");
                    let ds_general = general.sq.post_checked(&wr, 3, 3).unwrap();
                    assert_eq!(ds, ds_general, "{wr:?}");
                    assert_eq!(
                        fast.sq_bytes(3 * 64, 64),
                        general.sq_bytes(3 * 64, 64),
                        "{wr:?} sig_all {sig_all}"
                    );
                    compared += 1;
                }
            }
        }
    }
    assert_eq!(compared, 2 * 2 * 5 * 8);
}

/// Requests read in place, one at a time (`post_request`) or as a chain
/// (`post_iter`), make the very bytes `post` makes of the same requests:
/// ring, doorbell record and BlueFlame register.
#[test]
fn requests_read_in_place_make_the_same_bytes() {
    let sge = [Sge {
        addr: 0x1111_2222_3333_4444,
        length: 0x40,
        lkey: 0xaabbccdd,
    }];
    let eight = [Sge {
        addr: 0x7000,
        length: 8,
        lkey: 0x42,
    }];
    let data = [0x5au8; 12];
    let inline = [IoSlice::new(&data)];
    let wrs = [
        SendWr::rdma_write_with_imm(1, &sge, 0x5555_6666_7777_8888, 0x99, 0xcafe_f00d)
            .flags(SendFlags::SOLICITED | SendFlags::FENCE),
        SendWr::rdma_read(2, &sge, 0x10, 0x20).signaled(),
        SendWr::send(3, &sge),
        SendWr::send_inline(4, &inline).signaled(),
        SendWr::cmp_swap(5, &eight[0], 0x8008, 0x77, 1, 2),
        SendWr::fetch_add(6, &eight[0], 0x8010, 0x78, 3).signaled(),
    ];
    let state = |qp: &TestQp| {
        (
            qp.sq_bytes(0, 64 * wrs.len()),
            qp.db(1),
            qp.uar.read_bytes(0, 512),
        )
    };
    let mut by_slice = rc(16, 2, 64);
    let mut one_by_one = rc(16, 2, 64);
    let mut by_iter = rc(16, 2, 64);
    for wr in &wrs {
        by_slice.sq.post(std::slice::from_ref(wr)).unwrap();
        one_by_one.sq.post_request(&ForeignWr(*wr)).unwrap();
    }
    assert_eq!(state(&by_slice), state(&one_by_one));
    let mut chained = rc(16, 2, 64);
    chained.sq.post(&wrs).unwrap();
    by_iter
        .sq
        .post_iter(wrs.iter().map(|w| ForeignWr(*w)))
        .unwrap();
    assert_eq!(state(&chained), state(&by_iter));
    // A refused request stops the chain at its index, as `post` does.
    let three = [sge[0]; 3];
    let bad = SendWr::send(9, &three);
    let mut a = rc(16, 2, 64);
    let mut b = rc(16, 2, 64);
    let mixed = [wrs[0], bad, wrs[2]];
    let want = a.sq.post(&mixed);
    assert_eq!(
        want,
        Err(PostFailed::new(
            1,
            PostError::TooManySge { given: 3, max: 2 }
        ))
    );
    assert_eq!(b.sq.post_iter(mixed.iter().map(|w| ForeignWr(*w))), want);
    assert_eq!(state(&a), state(&b));
}

// ------------------------------------------------------------ chains

/// A chain posted from a slice (`post`: the common requests in the chain
/// loop, the others on the general path) and the same chain read in place
/// (`post_iter`: every request through `try_fast` or the general path, one
/// at a time) leave the same state (WQE bytes, bookkeeping, doorbell
/// record and register, counters) and return the same result, for
/// random chains of every kind of request (simple ones of each opcode,
/// flag set and length bound, zero-length, several SGEs, inline, atomics,
/// refused ones), at the ring's start, its end, the 16-bit WQE index's
/// wrap and the WR counter's, until the queue is full and after it is
/// retired.
#[test]
fn chains_from_a_slice_match_requests_read_in_place() {
    let sge = |length: u32| Sge {
        addr: 0x7f00_1234_5000 + u64::from(length),
        length,
        lkey: 0x00ab_cd00 | length.wrapping_mul(7),
    };
    let one = [sge(1)];
    let small = [sge(0x40)];
    let max = [sge(1 << 31)];
    let zero = [sge(0)];
    let over = [sge((1 << 31) + 1)];
    let two = [sge(0x10), sge(0x20)];
    let three = [sge(1), sge(2), sge(3)];
    let eight = [sge(8)];
    let data = [0xa5u8; 12];
    let inline = [IoSlice::new(&data)];
    let pool = [
        SendWr::rdma_write(1, &small, 0x1000_0000_0000, 0x11),
        SendWr::rdma_write(2, &one, 0x2000, 0x22).signaled(),
        SendWr::rdma_write(3, &max, 0x3000, 0x33).flags(SendFlags::FENCE),
        SendWr::rdma_write_with_imm(4, &small, 0x4000, 0x44, 0xdead_beef)
            .flags(SendFlags::SOLICITED | SendFlags::SIGNALED),
        SendWr::send(5, &small),
        SendWr::send(6, &one).flags(SendFlags::FENCE | SendFlags::SIGNALED | SendFlags::SOLICITED),
        SendWr::send_with_imm(7, &small, 0x0102_0304),
        SendWr::rdma_read(8, &small, 0x8000, 0x88).signaled(),
        SendWr::send(9, &zero),
        SendWr::rdma_write(10, &zero, 0xa000, 0xaa),
        SendWr::rdma_write(11, &two, 0xb000, 0xbb),
        SendWr::send_inline(12, &inline).signaled(),
        SendWr::cmp_swap(13, &eight[0], 0xd000, 0xdd, 1, 2),
        SendWr::fetch_add(14, &eight[0], 0xe000, 0xee, 3).signaled(),
        SendWr::send(16, &[]),
    ];
    // Refused on every QP (one in 32 requests drawn; the pool's RDMA
    // READs and atomics are refused on UC).
    let refused = [
        SendWr::send(17, &three),
        SendWr::rdma_write(18, &over, 0x1100, 0x17),
        SendWr::send_with_inv(15, &small, 0x1515),
    ];
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    let mut chains = 0;
    // Chains posted whole, ended by a full queue, ended by a refusal.
    let mut outcomes = [0; 3];
    for qpt in [qp_type::RC, qp_type::UC] {
        for sig_all in [false, true] {
            for (cur_post, head) in [(0, 0), (0, u32::MAX - 5), (0xfff9, 7), (0x2_fffd, 0)] {
                let mk = || {
                    let mut qp = TestQp::new(&req(qpt, 16, 2, 64), sig_all, 256, true);
                    qp.sq.set_state(QpState::Rts);
                    qp.sq.cur_post = cur_post;
                    qp.sq.head = head;
                    qp.sq.tail = head;
                    qp.sq.shared.retire_to(head);
                    qp
                };
                let (mut a, mut b) = (mk(), mk());
                for round in 0..40 {
                    // Odd rounds call the chain loop itself, for chains
                    // `post` gives the per-request loop (under
                    // `CHAIN_LOOP_MIN`) and the empty one.
                    let len = if round % 2 == 1 {
                        next(13)
                    } else {
                        1 + next(12)
                    };
                    let chain: Vec<SendWr<'_>> = (0..len)
                        .map(|_| match next(64) {
                            0 | 1 => refused[next(refused.len())],
                            _ => pool[next(pool.len())],
                        })
                        .map(|w| {
                            let mut w = w;
                            w.set_wr_id(w.wr_id() | (round as u64) << 8);
                            w
                        })
                        .collect();
                    let got = if round % 2 == 1 {
                        a.sq.post_slice(&chain)
                    } else {
                        a.sq.post(&chain)
                    };
                    let want = b.sq.post_iter(chain.iter().map(|w| ForeignWr(*w)));
                    match want {
                        Ok(()) => outcomes[0] += 1,
                        Err(f) if f.error() == PostError::QueueFull => outcomes[1] += 1,
                        Err(_) => outcomes[2] += 1,
                    }
                    assert_eq!(got, want, "{qpt} {cur_post:#x} round {round}: {chain:?}");
                    assert_eq!(state(&a), state(&b), "{qpt} {cur_post:#x} round {round}");
                    chains += 1;
                    if round % 6 == 5 {
                        for q in [&a, &b] {
                            q.sq.shared.retire_to(q.sq.head);
                        }
                    }
                }
            }
        }
    }
    assert_eq!(chains, 2 * 2 * 4 * 40);
    assert!(outcomes.iter().all(|&n| n >= 20), "{outcomes:?}");
}
