//! UC on a real rxe device: the RC code paths that UC shares (SEND,
//! SEND_WITH_IMM, RDMA WRITE, WRITE_WITH_IMM, inline, multi-packet), its
//! unreliable semantics (no receive or no access: the message is dropped,
//! the sender still succeeds), the opcodes it lacks; and, for every QP
//! type, the granted `max_inline_data` against QUERY_QP.

#![forbid(unsafe_code)]

use std::io::IoSlice;
use std::time::Duration;

use rverbs::{
    AccessFlags, Error, PostError, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, WcOpcode,
};
use verbs_tests::{assert_quiet, pattern, wait, wait_ok, Pair, PairOpts};

fn uc() -> Pair {
    uc_with(verbs_tests::all_access())
}

fn uc_with(access: AccessFlags) -> Pair {
    Pair::with(PairOpts {
        qp_type: QpType::Uc,
        access,
        ..Default::default()
    })
}

/// Proves that everything `a` sent before was processed by `b`'s responder.
/// On UC a send completion says nothing about the responder (there is no
/// ACK): a WRITE may complete at the requester before its data is placed.
/// The responder handles packets in order, so once a zero-length SEND that
/// follows has been received, every earlier packet was placed or dropped.
fn responder_caught_up(p: &mut Pair, id: u64) {
    p.b.post_recv(&[RecvWr::new(id, &[])]).unwrap();
    p.a.post_send(&[SendWr::send(id, &[]).signaled()]).unwrap();
    assert_eq!(wait_ok(&mut p.cq_a).wr_id(), id);
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!((wc.wr_id(), wc.byte_len()), (id, 0));
}

#[test]
fn uc_pair_reaches_rts() {
    let p = uc();
    for qp in [&p.a, &p.b] {
        let (attr, _, _) = qp.query().unwrap();
        assert_eq!(qp.qp_type(), QpType::Uc);
        assert_eq!(attr.qp_state, Some(QpState::Rts));
    }
    let (a, _, _) = p.a.query().unwrap();
    assert_eq!(a.dest_qp_num, Some(p.b.qp_num()));
    assert_eq!(a.sq_psn, Some(100));
    assert_eq!(a.rq_psn, Some(200));
}

#[test]
fn uc_multi_packet_send_and_send_with_imm() {
    let mut p = uc();
    let mut src = p.pd.alloc_mr(8192, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(8192, verbs_tests::all_access()).unwrap();
    let data = pattern(8192, 21);
    src.write_at(0, &data).unwrap();
    // 3000 bytes at the 1024-byte path MTU: FIRST, MIDDLE, LAST packets.
    let r1 = [dst.sge(..4096).unwrap()];
    let r2 = [dst.sge(4096..).unwrap()];
    p.b.post_recv(&[RecvWr::new(1, &r1), RecvWr::new(2, &r2)])
        .unwrap();
    let s1 = [src.sge(..3000).unwrap()];
    let s2 = [src.sge(5000..5100).unwrap(), src.sge(100..200).unwrap()];
    p.a.post_send(&[
        SendWr::send(10, &s1).signaled(),
        SendWr::send_with_imm(11, &s2, 0x0102_0304).signaled(),
    ])
    .unwrap();
    let wcs = wait(&mut p.cq_a, 2);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id(), w.status(), w.opcode()))
            .collect::<Vec<_>>(),
        [
            (10, rverbs::WcStatus::SUCCESS, WcOpcode::SEND),
            (11, rverbs::WcStatus::SUCCESS, WcOpcode::SEND)
        ]
    );
    let wcs = wait(&mut p.cq_b, 2);
    assert!(wcs.iter().all(|w| w.is_success()), "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id(), wcs[0].byte_len(), wcs[0].imm_data()),
        (1, 3000, None)
    );
    assert_eq!(
        (wcs[1].wr_id(), wcs[1].byte_len(), wcs[1].imm_data()),
        (2, 200, Some(0x0102_0304))
    );
    assert_eq!(wcs[1].opcode(), WcOpcode::RECV);
    let got = dst.to_vec();
    assert_eq!(&got[..3000], &data[..3000]);
    assert_eq!(
        &got[4096..4296],
        &[&data[5000..5100], &data[100..200]].concat()[..]
    );
}

#[test]
fn uc_rdma_write_and_write_with_imm() {
    let mut p = uc();
    let mut src = p.pd.alloc_mr(16384, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(16384, verbs_tests::all_access()).unwrap();
    let data = pattern(16384, 22);
    src.write_at(0, &data).unwrap();
    let rm = dst.remote();
    let s = [src.sge(..5000).unwrap()];
    p.a.post_send(&[SendWr::rdma_write(1, &s, rm.at(100, 5000).unwrap(), rm.rkey).signaled()])
        .unwrap();
    assert_eq!(wait_ok(&mut p.cq_a).opcode(), WcOpcode::RDMA_WRITE);
    // A WRITE without immediate completes nothing at the responder.
    assert_quiet(&mut p.cq_b, Duration::from_millis(50));
    responder_caught_up(&mut p, 50);
    assert_eq!(&dst.to_vec()[100..5100], &data[..5000]);

    p.b.post_recv(&[RecvWr::new(9, &[])]).unwrap();
    let s = [src.sge(8000..16384).unwrap()];
    p.a.post_send(&[
        SendWr::rdma_write_with_imm(2, &s, rm.at(8000, 8384).unwrap(), rm.rkey, 77).signaled(),
    ])
    .unwrap();
    wait_ok(&mut p.cq_a);
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!(
        (wc.wr_id(), wc.opcode(), wc.imm_data()),
        (9, WcOpcode::RECV_RDMA_WITH_IMM, Some(77))
    );
    assert_eq!(&dst.to_vec()[8000..], &data[8000..]);
}

#[test]
fn uc_inline_send_and_write() {
    let mut p = uc();
    let max = p.a.cap().max_inline_data as usize;
    assert!(max >= 64, "granted inline {max}");
    let dst = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let r = [dst.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    let x = pattern(max, 23);
    let bufs = [IoSlice::new(&x)];
    p.a.post_send(&[SendWr::send_inline(1, &bufs).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    assert_eq!(wait_ok(&mut p.cq_b).byte_len() as usize, max);
    assert_eq!(&dst.to_vec()[..max], &x[..]);
    let rm = dst.remote();
    let y = pattern(max, 24);
    let bufs = [IoSlice::new(&y)];
    let wr = rverbs::opcode::Write::inline(2, &bufs, rm.at(2000, max as u64).unwrap(), rm.rkey)
        .build()
        .signaled();
    p.a.post_send(&[wr]).unwrap();
    wait_ok(&mut p.cq_a);
    responder_caught_up(&mut p, 51);
    assert_eq!(&dst.to_vec()[2000..2000 + max], &y[..]);
}

#[test]
fn uc_send_without_a_receive_is_dropped_not_retried() {
    let mut p = uc();
    let mut src = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    src.write_at(0, b"first...second..").unwrap();
    let s1 = [src.sge(0..8).unwrap()];
    p.a.post_send(&[SendWr::send(1, &s1).signaled()]).unwrap();
    // No RNR on UC: the sender is done, the message is gone.
    assert_eq!(wait_ok(&mut p.cq_a).wr_id(), 1);
    assert_quiet(&mut p.cq_b, Duration::from_millis(200));
    let r = [dst.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(2, &r)]).unwrap();
    let s2 = [src.sge(8..16).unwrap()];
    p.a.post_send(&[SendWr::send(3, &s2).signaled()]).unwrap();
    wait_ok(&mut p.cq_a);
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!((wc.wr_id(), wc.byte_len()), (2, 8));
    assert_eq!(&dst.to_vec()[..8], b"second..");
    for qp in [&p.a, &p.b] {
        assert_eq!(qp.query().unwrap().0.qp_state, Some(QpState::Rts));
    }
}

#[test]
fn uc_write_without_remote_write_access_is_dropped() {
    // B's QP does not allow remote writes: UC drops them silently.
    let mut p = uc_with(AccessFlags::LOCAL_WRITE);
    let mut src = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let mut dst = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    dst.fill(.., 0x5a).unwrap();
    src.write_at(0, &[1u8; 64]).unwrap();
    let rm = dst.remote();
    let s = [src.sge(..).unwrap()];
    p.a.post_send(&[SendWr::rdma_write(1, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    assert!(wait_ok(&mut p.cq_a).is_success());
    assert_quiet(&mut p.cq_b, Duration::from_millis(50));
    // Dropped, not merely late: the responder has handled it.
    responder_caught_up(&mut p, 52);
    assert_eq!(dst.to_vec(), vec![0x5a; 64]);
    // Sends still work (they need no remote access).
    let r = [dst.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(4, &r)]).unwrap();
    p.a.post_send(&[SendWr::send(2, &s).signaled()]).unwrap();
    wait_ok(&mut p.cq_a);
    assert_eq!(wait_ok(&mut p.cq_b).byte_len(), 64);
    assert_eq!(dst.to_vec(), vec![1u8; 64]);
}

#[test]
fn uc_refuses_read_and_atomics_at_post_time() {
    let mut p = uc();
    let local = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let rm =
        p.pd.alloc_mr(64, verbs_tests::all_access())
            .unwrap()
            .remote();
    let s = [local.sge(..8).unwrap()];
    for wr in [
        SendWr::rdma_read(1, &s, rm.addr, rm.rkey),
        SendWr::fetch_add(2, &s[0], rm.addr, rm.rkey, 1),
        SendWr::cmp_swap(3, &s[0], rm.addr, rm.rkey, 0, 1),
    ] {
        let e =
            p.a.post_send(&[wr.signaled()])
                .map_err(Error::from)
                .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Post {
                    index: 0,
                    error: PostError::InvalidOpcode
                }
            ),
            "{:?}: {e}",
            wr.opcode()
        );
    }
    assert_eq!(p.a.send_outstanding(), 0);
    assert_quiet(&mut p.cq_a, Duration::from_millis(50));
    assert_eq!(p.a.query().unwrap().0.qp_state, Some(QpState::Rts));
}

#[test]
fn granted_max_inline_data_is_what_query_qp_reports() {
    let ctx = verbs_tests::open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    for qp_type in [QpType::Rc, QpType::Uc, QpType::Ud] {
        for want in [0u32, 1, 64, 100, 200] {
            let qp = pd
                .create_qp(&QpInitAttr {
                    send_cq: &cq,
                    recv_cq: &cq,
                    qp_type,
                    cap: QpCap {
                        max_send_wr: 8,
                        max_recv_wr: 8,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: want,
                    },
                    sq_sig_all: false,
                })
                .unwrap_or_else(|e| panic!("{qp_type:?} inline {want}: {e}"));
            let granted = qp.cap();
            let (_, queried, _) = qp.query().unwrap();
            assert!(
                granted.max_inline_data >= want,
                "{qp_type:?}: asked {want}, granted {granted:?}"
            );
            assert_eq!(
                granted.max_inline_data, queried.max_inline_data,
                "{qp_type:?} inline {want}: CREATE_QP granted {granted:?}, QUERY_QP says {queried:?}"
            );
            assert_eq!(granted.max_send_sge, queried.max_send_sge);
        }
    }
}
