//! Unit tests of `cq`.

use super::*;
use crate::uctx::Limits;
use crate::wq::{RqShared, SqShared, SrqShared};
use rverbs_abi::mlx5::prm::Cqe64;

const QPN: u32 = 0x12_3456;

/// [`parse`] of a CQE given as bytes.
fn parse_bytes(c: &[u8; 64], e: &QpEntry) -> Option<Wc> {
    let c: Cqe64 = zerocopy::transmute!(*c);
    let mut w = Wc::default();
    parse(Cqe::of(&c), e, &mut w).then_some(w)
}
const UIDX: u32 = 7;

struct Fixture {
    uctx: Arc<Uctx>,
    sq: Arc<SqShared>,
    rq: Arc<RqShared>,
    cq: Cq,
}

fn fixture(ncqe: u32) -> Fixture {
    fixture_fenced(ncqe, crate::hw::membarrier::available())
}

/// [`fixture`] with the owner/cleaner handshake on asymmetric fences
/// (`membarrier`) or on full fences on both sides.
fn fixture_fenced(ncqe: u32, asymmetric: bool) -> Fixture {
    let uctx = Uctx::for_tests(Limits {
        cqe_version: 1,
        ..Default::default()
    });
    let sq = Arc::new(SqShared::new(8));
    let rq = Arc::new(RqShared::new(4));
    uctx.register_qp(
        UIDX,
        Arc::new(QpEntry::new(QPN, Arc::clone(&sq), Arc::clone(&rq), None)),
    );
    let mem = Mem::new(&uctx, ncqe).unwrap();
    mem.set_asymmetric(asymmetric);
    let cq = Cq::new(&uctx, Arc::new(mem), 0x99);
    Fixture { uctx, sq, rq, cq }
}

/// A CQE with the fields the parser reads.
fn cqe(opcode: u8, wqe_op: u8, wqe_counter: u16, owner: bool) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[32..36].copy_from_slice(&UIDX.to_be_bytes());
    c[56..60].copy_from_slice(&((wqe_op as u32) << 24 | QPN).to_be_bytes());
    c[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
    c[63] = opcode << 4 | owner as u8;
    c
}

fn put(cq: &Cq, n: u32, c: &[u8; 64]) {
    cq.cqes.ring().write(n, zerocopy::transmute!(*c));
}

fn entry(sq: &Arc<SqShared>, rq: &Arc<RqShared>, srq: Option<Arc<SrqShared>>) -> QpEntry {
    QpEntry::new(QPN, Arc::clone(sq), Arc::clone(rq), srq)
}

#[test]
fn requester_opcodes() {
    let f = fixture(4);
    let e = entry(&f.sq, &f.rq, None);
    let cases = [
        (wqe_op::RDMA_WRITE, wc_opcode::RDMA_WRITE, 0, 0),
        (
            wqe_op::RDMA_WRITE_IMM,
            wc_opcode::RDMA_WRITE,
            wc_flags::WITH_IMM,
            0,
        ),
        (wqe_op::SEND, wc_opcode::SEND, 0, 0),
        (wqe_op::SEND_INVAL, wc_opcode::SEND, 0, 0),
        (wqe_op::SEND_IMM, wc_opcode::SEND, wc_flags::WITH_IMM, 0),
        (wqe_op::RDMA_READ, wc_opcode::RDMA_READ, 0, 4000),
        (wqe_op::ATOMIC_CS, wc_opcode::COMP_SWAP, 0, 8),
        (wqe_op::ATOMIC_FA, wc_opcode::FETCH_ADD, 0, 8),
    ];
    for (i, (wop, op, flags, len)) in cases.into_iter().enumerate() {
        let idx = (i % 8) as u16;
        f.sq.set(idx as usize, 1000 + i as u64, i as u32 * 3);
        let mut c = cqe(cqe_op::REQ, wop, idx + 8, false);
        c[44..48].copy_from_slice(&4000u32.to_be_bytes());
        let w = parse_bytes(&c, &e).unwrap();
        assert_eq!(
            (w.wr_id, w.status, w.opcode, w.wc_flags, w.byte_len, w.qp_num),
            (1000 + i as u64, wc_status::SUCCESS, op, flags, len, QPN),
            "wqe opcode {wop:#x}"
        );
        assert_eq!(f.sq.retired(), i as u32 * 3 + 1);
    }
}

#[test]
fn responder_opcodes_and_fields() {
    let f = fixture(4);
    let e = entry(&f.sq, &f.rq, None);
    for i in 0..4 {
        f.rq.set_wrid(i, 50 + i as u64);
    }
    let mut c = cqe(cqe_op::RESP_WR_IMM, 0, 0, false);
    c[17] = 0x85;
    c[22..24].copy_from_slice(&0x0102u16.to_be_bytes());
    c[24..28].copy_from_slice(&(0x1 << 28 | 0x5 << 24 | 0xABCDEF_u32).to_be_bytes());
    c[36..40].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    c[44..48].copy_from_slice(&77u32.to_be_bytes());
    let w = parse_bytes(&c, &e).unwrap();
    assert_eq!(w.wr_id, 50);
    assert_eq!(w.opcode, wc_opcode::RECV_RDMA_WITH_IMM);
    assert_eq!(w.wc_flags, wc_flags::WITH_IMM | wc_flags::GRH);
    assert_eq!(u32::from_be(w.ex), 0xdeadbeef);
    assert_eq!(w.byte_len, 77);
    assert_eq!(
        (w.src_qp, w.sl, w.slid, w.dlid_path_bits),
        (0xABCDEF, 5, 0x0102, 5)
    );
    assert_eq!(w.pkey_index, 0xbeef);
    assert_eq!(w.status, wc_status::SUCCESS);

    let w = parse_bytes(&cqe(cqe_op::RESP_SEND, 0, 0, false), &e).unwrap();
    assert_eq!((w.wr_id, w.opcode, w.wc_flags), (51, wc_opcode::RECV, 0));

    c[63] = cqe_op::RESP_SEND_IMM << 4;
    c[24..28].copy_from_slice(&0u32.to_be_bytes());
    let w = parse_bytes(&c, &e).unwrap();
    assert_eq!(
        (w.wr_id, w.opcode, w.wc_flags),
        (52, wc_opcode::RECV, wc_flags::WITH_IMM)
    );
    assert_eq!(u32::from_be(w.ex), 0xdeadbeef);

    c[63] = cqe_op::RESP_SEND_INV << 4;
    let w = parse_bytes(&c, &e).unwrap();
    assert_eq!(
        (w.wr_id, w.opcode, w.wc_flags),
        (53, wc_opcode::RECV, wc_flags::WITH_INVALIDATE)
    );
    assert_eq!(w.ex, 0xdeadbeef);
    assert_eq!(f.rq.retired(), 4);
}

#[test]
fn srq_receive_uses_wqe_counter() {
    let f = fixture(4);
    let srq = Arc::new(SrqShared::new(16));
    srq.post(9, 909);
    let e = entry(&f.sq, &f.rq, Some(Arc::clone(&srq)));
    let w = parse_bytes(&cqe(cqe_op::RESP_SEND, 0, 9, false), &e).unwrap();
    assert_eq!(w.wr_id, 909);
    assert_eq!(srq.freed(0), 1 << 9);
    let mut c = cqe(cqe_op::RESP_ERR, 0, 9, false);
    c[55] = 0x05;
    let w = parse_bytes(&c, &e).unwrap();
    assert_eq!((w.wr_id, w.status), (909, wc_status::WR_FLUSH_ERR));
    // RQ untouched.
    assert_eq!(f.rq.retired(), 0);
}

#[test]
fn error_syndromes() {
    let f = fixture(4);
    let e = entry(&f.sq, &f.rq, None);
    let table = [
        (0x01, wc_status::LOC_LEN_ERR),
        (0x02, wc_status::LOC_QP_OP_ERR),
        (0x04, wc_status::LOC_PROT_ERR),
        (0x05, wc_status::WR_FLUSH_ERR),
        (0x06, wc_status::MW_BIND_ERR),
        (0x10, wc_status::BAD_RESP_ERR),
        (0x11, wc_status::LOC_ACCESS_ERR),
        (0x12, wc_status::REM_INV_REQ_ERR),
        (0x13, wc_status::REM_ACCESS_ERR),
        (0x14, wc_status::REM_OP_ERR),
        (0x15, wc_status::RETRY_EXC_ERR),
        (0x16, wc_status::RNR_RETRY_EXC_ERR),
        (0x22, wc_status::REM_ABORT_ERR),
        (0x03, wc_status::GENERAL_ERR),
        (0xff, wc_status::GENERAL_ERR),
    ];
    f.sq.set(3, 33, 10);
    for i in 0..4 {
        f.rq.set_wrid(i, 44);
    }
    for (syn, status) in table {
        let mut c = cqe(cqe_op::REQ_ERR, wqe_op::SEND, 3, false);
        c[54] = 0x42;
        c[55] = syn;
        let w = parse_bytes(&c, &e).unwrap();
        assert_eq!(
            (w.wr_id, w.status, w.vendor_err, w.qp_num),
            (33, status, 0x42, QPN)
        );
        assert_eq!((w.opcode, w.byte_len, w.wc_flags), (0, 0, 0));
        assert_eq!(f.sq.retired(), 11);
        c[63] = cqe_op::RESP_ERR << 4;
        let w = parse_bytes(&c, &e).unwrap();
        assert_eq!((w.wr_id, w.status, w.vendor_err), (44, status, 0x42));
    }
    // Resize / unknown CQEs report nothing.
    assert!(parse_bytes(&cqe(5, 0, 0, false), &e).is_none());
}

#[test]
fn owner_bit_and_wrap() {
    let mut f = fixture(2);
    for i in 0..8 {
        f.sq.set_wrid(i, i as u64);
    }
    let mut wc = [Wc::default(); 4];
    // Fresh ring: nothing; SET_CI written anyway.
    assert_eq!(f.cq.poll(&mut wc), 0);
    // Lap 0: owner 0.
    put(&f.cq, 0, &cqe(cqe_op::REQ, wqe_op::SEND, 0, false));
    put(&f.cq, 1, &cqe(cqe_op::REQ, wqe_op::SEND, 1, false));
    assert_eq!(f.cq.poll(&mut wc[..1]), 1);
    assert_eq!(wc[0].wr_id, 0);
    assert_eq!(f.cq.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, 1);
    assert_eq!(f.cq.db.load(0), 2);
    // Entry 0 still holds the lap-0 CQE: with owner 0 it is stale now.
    assert_eq!(f.cq.poll(&mut wc), 0);
    // Lap 1: owner 1.
    put(&f.cq, 2, &cqe(cqe_op::REQ, wqe_op::SEND, 2, true));
    put(&f.cq, 3, &cqe(cqe_op::REQ, wqe_op::SEND, 3, false)); // wrong owner
    assert_eq!(f.cq.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, 2);
    assert_eq!(f.cq.cons_index(), 3);
    assert_eq!(f.cq.cqe(), 1);
}

#[test]
fn unknown_and_new_qps() {
    let mut f = fixture(8);
    let mut wc = [Wc::default(); 4];
    // A CQE of an index nobody registered: consumed, not reported.
    let mut c = cqe(cqe_op::REQ, wqe_op::SEND, 0, false);
    c[32..36].copy_from_slice(&99u32.to_be_bytes());
    put(&f.cq, 0, &c);
    assert_eq!(f.cq.poll(&mut wc), 0);
    assert_eq!(f.cq.cons_index(), 1);
    // A QP registered after the CQ's snapshot is found on refresh.
    let sq2 = Arc::new(SqShared::new(2));
    sq2.set_wrid(1, 4242);
    f.uctx.register_qp(
        99,
        Arc::new(QpEntry::with_queues(5, Some(Arc::clone(&sq2)), None, None)),
    );
    let mut c = cqe(cqe_op::REQ, wqe_op::SEND, 1, false);
    c[32..36].copy_from_slice(&99u32.to_be_bytes());
    put(&f.cq, 1, &c);
    assert_eq!(f.cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].qp_num), (4242, 5));
    // After unregistering, its CQEs vanish.
    f.uctx.unregister_qp(99);
    put(&f.cq, 2, &c);
    assert_eq!(f.cq.poll(&mut wc), 0);
    assert_eq!(f.cq.cons_index(), 3);
}

#[test]
fn cqes_of_queues_a_qp_lacks_are_consumed_unreported() {
    let mut f = fixture(8);
    let mut wc = [Wc::default(); 4];
    // QP 99 has neither a send nor a receive queue.
    f.uctx
        .register_qp(99, Arc::new(QpEntry::with_queues(5, None, None, None)));
    let of_99 = |op: u8, wqe_op: u8, counter: u16| {
        let mut c = cqe(op, wqe_op, counter, false);
        c[32..36].copy_from_slice(&99u32.to_be_bytes());
        c
    };
    // Each kind first alone (the straight path takes the first CQE),
    // then with the fixture QP's send completion behind it.
    put(&f.cq, 0, &of_99(cqe_op::REQ, wqe_op::SEND, 0));
    assert_eq!(f.cq.poll(&mut wc), 0);
    put(&f.cq, 1, &of_99(cqe_op::RESP_SEND, 0, 0));
    assert_eq!(f.cq.poll(&mut wc), 0);
    assert_eq!(f.cq.cons_index(), 2);
    f.sq.set_wrid(0, 77);
    put(&f.cq, 2, &of_99(cqe_op::REQ, wqe_op::SEND, 1));
    put(&f.cq, 3, &of_99(cqe_op::RESP_SEND, 0, 1));
    put(&f.cq, 4, &cqe(cqe_op::REQ, wqe_op::SEND, 0, false));
    assert_eq!(f.cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].qp_num), (77, QPN));
    assert_eq!(f.cq.cons_index(), 5);
    // A send completion of its own QP, then one of 99: the first
    // reported, the second consumed.
    put(&f.cq, 5, &cqe(cqe_op::REQ, wqe_op::SEND, 0, false));
    put(&f.cq, 6, &of_99(cqe_op::REQ, wqe_op::SEND, 2));
    assert_eq!(f.cq.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, 77);
    assert_eq!(f.cq.cons_index(), 7);
}

#[test]
fn arm_writes_doorbell_record() {
    let mut f = fixture(4);
    put(&f.cq, 0, &cqe(cqe_op::REQ, wqe_op::SEND, 0, false));
    let mut wc = [Wc::default(); 1];
    assert_eq!(f.cq.poll(&mut wc), 1);
    // Sequence number 0 until an event is read, however often armed.
    f.cq.arm(false);
    assert_eq!(f.cq.db.load(1), 1);
    f.cq.arm(true);
    assert_eq!(f.cq.db.load(1), ARM_SOLICITED | 1);
    f.cq.arm(false);
    assert_eq!(f.cq.db.load(1), 1);
    // Each event read steps it, modulo 4.
    let mem = f.cq.memory();
    mem.completion_event();
    f.cq.arm(false);
    assert_eq!(f.cq.db.load(1), 1 << 28 | 1);
    for _ in 0..3 {
        mem.completion_event();
    }
    f.cq.arm(true);
    assert_eq!(f.cq.db.load(1), ARM_SOLICITED | 1);
}

#[test]
fn resize_moves_unpolled_cqes() {
    let mut f = fixture(4);
    for i in 0..8 {
        f.sq.set_wrid(i, 100 + i as u64);
    }
    for n in 0..3u32 {
        put(&f.cq, n, &cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false));
    }
    put(&f.cq, 3, &cqe(cqe_op::RESIZE_CQ, 0, 0, false));
    let mut wc = [Wc::default(); 4];
    assert_eq!(f.cq.poll(&mut wc[..1]), 1);
    let old = f.cq.cqes.ring().addr();
    f.cq.switch_ring(Arc::new(CqRing::new(8).unwrap()), RESIZE_CQE_WAIT)
        .unwrap();
    assert_ne!(f.cq.cqes.ring().addr(), old);
    assert_eq!((f.cq.cons_index(), f.cq.cqe()), (2, 7));
    // The device continues at counter 4 of the new ring.
    put(&f.cq, 4, &cqe(cqe_op::REQ, wqe_op::SEND, 5, false));
    assert_eq!(f.cq.poll(&mut wc), 3);
    assert_eq!(
        wc[..3].iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [101, 102, 105]
    );
    assert_eq!(f.cq.poll(&mut wc), 0);
    assert_eq!(f.cq.mem.rings.lock().unwrap().len(), 2);

    // Shrinking across a lap: counters 8 (owner 1 in 8 entries) and
    // the RESIZE CQE at 9.
    for n in 5..8u32 {
        put(&f.cq, n, &cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false));
    }
    put(&f.cq, 8, &cqe(cqe_op::REQ, wqe_op::SEND, 0, true));
    put(&f.cq, 9, &cqe(cqe_op::RESIZE_CQ, 0, 0, true));
    assert_eq!(f.cq.poll(&mut wc[..3]), 3); // counters 5..7
    f.cq.switch_ring(Arc::new(CqRing::new(2).unwrap()), RESIZE_CQE_WAIT)
        .unwrap();
    assert_eq!(f.cq.cons_index(), 9);
    assert_eq!(f.cq.mem.rings.lock().unwrap().len(), 2);
    // Counter 8 moved to counter 9: slot 1, owner (9 & 2 != 0) = 0.
    assert_eq!(f.cq.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, 100);
    put(&f.cq, 10, &cqe(cqe_op::REQ, wqe_op::SEND, 1, true));
    assert_eq!(f.cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, f.cq.cons_index()), (101, 11));
}

/// The unpolled count `resize` checks a new size against, from the
/// owner bits; without a RESIZE CQE the rings are not switched.
#[test]
fn resize_counts_pending_and_waits_for_its_cqe() {
    let mut f = fixture(4);
    for i in 0..8 {
        f.sq.set_wrid(i, 100 + i as u64);
    }
    assert_eq!(f.cq.pending(), 0);
    for n in 0..3u32 {
        put(&f.cq, n, &cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false));
    }
    assert_eq!(f.cq.pending(), 3);
    let mut wc = [Wc::default(); 1];
    assert_eq!(f.cq.poll(&mut wc), 1);
    assert_eq!(f.cq.pending(), 2);
    // Counters 3 and 4 (second lap, owner 1): a full ring.
    put(&f.cq, 3, &cqe(cqe_op::REQ, wqe_op::SEND, 3, false));
    put(&f.cq, 4, &cqe(cqe_op::REQ, wqe_op::SEND, 4, true));
    assert_eq!(f.cq.pending(), 4);
    // No RESIZE CQE after them: EIO, the old ring still current and
    // its CQEs all there.
    let old = f.cq.cqes.ring().addr();
    let r = f.cq.switch_ring(
        Arc::new(CqRing::new(8).unwrap()),
        std::time::Duration::from_millis(20),
    );
    assert_eq!(r, Err(Errno::EIO));
    assert_eq!(f.cq.cqes.ring().addr(), old);
    let mut wc = [Wc::default(); 8];
    assert_eq!(f.cq.poll(&mut wc), 4);
    assert_eq!(
        wc[..4].iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [101, 102, 103, 104]
    );
}

#[test]
fn fresh_ring_is_invalid() {
    let f = fixture(4);
    for i in 0..4 {
        assert_eq!(f.cq.cqes.ring().read(i).op_own, 0xF0);
    }
}

/// Threads arming one CQ at once write its UAR doorbell whole: a
/// reader watching the (fake) register only ever sees one of the
/// 64-bit values an arm can write, never halves of two.
#[test]
fn concurrent_arms_write_whole_doorbells() {
    let mut f = fixture(4);
    let page = Arc::new(crate::hw::map::Mapping::anon(4096).unwrap());
    f.cq.uar = Doorbell::new(&page, 0);
    let reg = f.cq.uar.clone().unwrap();
    let cq = &f.cq;
    let valid = |raw: u64| {
        let v = u64::from_be(raw);
        let (hi, lo) = ((v >> 32) as u32, v as u32);
        v == 0 || (lo == 0x99 && hi & 0x0FFF_FFFF & !ARM_SOLICITED == 0)
    };
    let done = AtomicU32::new(0);
    std::thread::scope(|s| {
        for t in 0..4 {
            let done = &done;
            s.spawn(move || {
                for _ in 0..20_000 {
                    cq.arm(t % 2 == 1);
                }
                done.fetch_add(1, Ordering::Release);
            });
        }
        // Watches until every thread is done (at least one look).
        loop {
            let finished = done.load(Ordering::Acquire) == 4;
            let v = reg.load();
            assert!(valid(v), "torn doorbell {:#018x}", u64::from_be(v));
            if finished {
                break;
            }
        }
    });
    assert!(valid(reg.load()));
    assert_ne!(reg.load(), 0);
}

/// Cleaning one QP's CQEs out of the unpolled part of the ring (across
/// a lap boundary) removes exactly those, returns the SRQ WQEs of its
/// receive CQEs, keeps the other QP's CQEs in order with the owner
/// bits of their new entries, and advances the consumer index and its
/// doorbell word past the gap.
#[test]
fn clean_removes_one_qps_cqes() {
    let mut f = fixture(4);
    let sq2 = Arc::new(SqShared::new(4));
    for i in 0..4 {
        sq2.set_wrid(i, 800 + i as u64);
    }
    f.uctx.register_qp(
        8,
        Arc::new(QpEntry::with_queues(5, Some(Arc::clone(&sq2)), None, None)),
    );
    let other = |n: u16, owner| {
        let mut c = cqe(cqe_op::REQ, wqe_op::SEND, n, owner);
        c[32..36].copy_from_slice(&8u32.to_be_bytes());
        c[56..60].copy_from_slice(&((wqe_op::SEND as u32) << 24 | 5).to_be_bytes());
        c
    };
    let mut wc = [Wc::default(); 4];
    for n in 0..2u32 {
        put(&f.cq, n, &cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false));
    }
    assert_eq!(f.cq.poll(&mut wc), 2);
    put(&f.cq, 2, &other(0, false));
    put(&f.cq, 3, &cqe(cqe_op::RESP_SEND, 0, 5, false));
    put(&f.cq, 4, &other(1, true));
    put(&f.cq, 5, &cqe(cqe_op::REQ_ERR, wqe_op::SEND, 2, true));
    let srq = SrqShared::new(8);
    let mem = f.cq.memory();
    assert_eq!(mem.clean(UIDX, QPN, Some(&srq)), 2);
    assert_eq!(srq.freed(0), 1 << 5);
    assert_eq!(srq.completed(), 1);
    assert_eq!(f.cq.db.load(0), 4);
    // Nothing left of that QP; a second cleaning finds nothing.
    assert_eq!(mem.clean(UIDX, QPN, Some(&srq)), 0);
    // A CQE the device writes later is found after the moved ones.
    put(&f.cq, 6, &other(2, true));
    assert_eq!(f.cq.poll(&mut wc), 3);
    assert_eq!(
        wc[..3]
            .iter()
            .map(|w| (w.wr_id, w.qp_num))
            .collect::<Vec<_>>(),
        [(800, 5), (801, 5), (802, 5)]
    );
    assert_eq!(f.cq.cons_index(), 7);
    assert_eq!(f.cq.poll(&mut wc), 0);
    assert_eq!(f.cq.db.load(0), 7);
}

/// CQE version 0 names QPs by number: polling finds each QP by the
/// number in `sop_drop_qpn` (whatever the order of user indexes and
/// numbers), and cleaning removes one QP's CQEs by number.
#[test]
fn version0_looks_up_by_qpn() {
    let uctx = Uctx::for_tests(Limits {
        cqe_version: 0,
        ..Default::default()
    });
    let sqs: Vec<Arc<SqShared>> = (0..2).map(|_| Arc::new(SqShared::new(2))).collect();
    for (k, (uidx, qpn)) in [(1u32, 0x300u32), (2, 0x200)].into_iter().enumerate() {
        sqs[k].set_wrid(0, 10 + k as u64);
        uctx.register_qp(
            uidx,
            Arc::new(QpEntry::with_queues(
                qpn,
                Some(Arc::clone(&sqs[k])),
                None,
                None,
            )),
        );
    }
    let mem = Arc::new(Mem::new(&uctx, 4).unwrap());
    let mut cq = Cq::new(&uctx, mem, 1);
    let by = |qpn: u32| {
        let mut c = [0u8; 64];
        c[56..60].copy_from_slice(&((wqe_op::SEND as u32) << 24 | qpn).to_be_bytes());
        c[63] = cqe_op::REQ << 4;
        c
    };
    put(&cq, 0, &by(0x200));
    put(&cq, 1, &by(0x300));
    put(&cq, 2, &by(0x200));
    assert_eq!(cq.memory().clean(2, 0x300, None), 1);
    let mut wc = [Wc::default(); 4];
    assert_eq!(cq.poll(&mut wc), 2);
    assert_eq!(
        wc[..2]
            .iter()
            .map(|w| (w.wr_id, w.qp_num))
            .collect::<Vec<_>>(),
        [(11, 0x200), (11, 0x200)]
    );
    put(&cq, 3, &by(0x300));
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].qp_num), (10, 0x300));
}

/// A QP cleaning its CQEs while another thread polls the CQ: every CQE
/// of the other QP is reported exactly once and in order, and each of
/// the cleaned QP's CQEs is either reported (before the cleaning) or
/// removed, never both. With the handshake on asymmetric fences (where
/// the kernel has them) and on full fences.
#[test]
fn clean_races_with_poll() {
    let modes = [crate::hw::membarrier::available(), false];
    for (round, asymmetric) in (0..20usize).flat_map(|r| modes.map(|m| (r, m))) {
        let mut f = fixture_fenced(64, asymmetric);
        let sq2 = Arc::new(SqShared::new(64));
        for i in 0..64 {
            f.sq.set_wrid(i % 8, 0);
            sq2.set_wrid(i, 1000 + i as u64);
        }
        f.uctx.register_qp(
            8,
            Arc::new(QpEntry::with_queues(5, Some(Arc::clone(&sq2)), None, None)),
        );
        for n in 0..60u32 {
            let mut c = cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false);
            if n % 2 == 1 {
                c[32..36].copy_from_slice(&8u32.to_be_bytes());
                c[56..60].copy_from_slice(&((wqe_op::SEND as u32) << 24 | 5).to_be_bytes());
            }
            put(&f.cq, n, &c);
        }
        let mem = f.cq.memory();
        let cq = &mut f.cq;
        let progress = std::sync::atomic::AtomicUsize::new(0);
        let (seen, removed) = std::thread::scope(|s| {
            let progress = &progress;
            let poller = s.spawn(move || {
                let mut seen = Vec::new();
                let mut wc = [Wc::default(); 1];
                while seen.iter().filter(|&&(_, q)| q == 5).count() < 30 {
                    if cq.poll(&mut wc) == 1 {
                        seen.push((wc[0].wr_id, wc[0].qp_num));
                        progress.store(seen.len(), Ordering::Release);
                    }
                }
                seen
            });
            // Clean at a different point of the polling each round.
            while progress.load(Ordering::Acquire) < round * 2 {
                std::hint::spin_loop();
            }
            let removed = mem.clean(UIDX, QPN, None);
            (poller.join().unwrap(), removed)
        });
        let other: Vec<u64> = seen.iter().filter(|w| w.1 == 5).map(|w| w.0).collect();
        assert_eq!(other, (0..30).map(|k| 1001 + 2 * k).collect::<Vec<_>>());
        let mine = seen.iter().filter(|w| w.1 == QPN).count() as u32;
        assert_eq!(
            mine + removed,
            30,
            "reported {mine}, removed {removed}: {seen:?}"
        );
        let mut wc = [Wc::default(); 1];
        assert_eq!(f.cq.poll(&mut wc), 0);
        // Polled or removed, every entry is consumed.
        assert_eq!(f.cq.cons_index(), 60);
    }
}
