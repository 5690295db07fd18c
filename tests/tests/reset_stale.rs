//! A QP reset after an error leaves its flushed receives' completions in
//! its CQ (rxe's kernel does not remove them); once the QP is connected
//! again they must not complete its new work. rdma-core's pyverbs suite
//! tests this (`test_mr_rereg_pd`: ERR -> RESET -> RTS, then traffic), as
//! libmlx5 removes them at RESET; our rxe provider drops them when polled.
//! Another QP's completions in the same CQ are kept.

use std::time::Duration;

use rverbs::{
    AccessFlags, ConnectOpts, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, WcStatus,
};
use verbs_tests::{all_access, open_rxe, pattern, wait};

#[test]
fn completions_left_by_a_reset_do_not_complete_the_next_work() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let channel = ctx.create_comp_channel().unwrap();
    let mut cq_a = ctx.create_cq(16).unwrap();
    let mut cq_b = ctx.create_cq_with(16, Some(&channel), 0).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let mk = |cq: &rverbs::Cq| {
        pd.create_qp(&QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Rc,
            cap,
            sq_sig_all: false,
        })
        .unwrap()
    };
    let mut a = mk(&cq_a);
    let mut b = mk(&cq_b);
    // A bystander on B's CQ: its completion must survive B's reset.
    let mut c = mk(&cq_b);
    let gid = ctx.default_gid_index(1).unwrap();
    let oa = ConnectOpts {
        sgid_index: gid,
        sq_psn: 100,
        ..ConnectOpts::default()
    };
    let ob = ConnectOpts {
        sgid_index: gid,
        sq_psn: 200,
        ..ConnectOpts::default()
    };
    let ea = a.endpoint(&oa).unwrap();
    let eb = b.endpoint(&ob).unwrap();
    a.connect(&eb, all_access(), &oa).unwrap();
    b.connect(&ea, all_access(), &ob).unwrap();

    let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let r = [mr.sge(0..1024).unwrap()];
    b.post_recv(&[RecvWr::new(10, &r), RecvWr::new(11, &r)])
        .unwrap();
    // B fails: the kernel flushes its two receives into cq_b. The armed
    // CQ's event says they are there (unpolled) before B is reset.
    cq_b.req_notify(false).unwrap();
    b.modify(&QpAttr {
        qp_state: Some(QpState::Err),
        ..Default::default()
    })
    .unwrap();
    let ev = channel.get_event_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(
        ev,
        Some(cq_b.event_id()),
        "no completion event for the flushed receives"
    );
    // The bystander's completion, written after B's flushes: D sends to
    // C, whose receive completes in cq_b, unpolled.
    let mut d = mk(&cq_a);
    let (oc, od) = (
        ConnectOpts { sq_psn: 300, ..oa },
        ConnectOpts { sq_psn: 400, ..oa },
    );
    let (ec, ed) = (c.endpoint(&oc).unwrap(), d.endpoint(&od).unwrap());
    c.connect(&ed, all_access(), &oc).unwrap();
    d.connect(&ec, all_access(), &od).unwrap();
    let rc = [mr.sge(1024..2048).unwrap()];
    c.post_recv(&[RecvWr::new(50, &rc)]).unwrap();
    let mut src = pd.alloc_mr(4096, all_access()).unwrap();
    let s0 = [src.sge(0..64).unwrap()];
    d.post_send(&[SendWr::send(60, &s0).signaled()]).unwrap();
    assert!(wait(&mut cq_a, 1)[0].is_success());
    b.modify(&QpAttr {
        qp_state: Some(QpState::Reset),
        ..Default::default()
    })
    .unwrap();
    b.connect(&ea, all_access(), &ob).unwrap();

    b.post_recv(&[RecvWr::new(20, &r)]).unwrap();
    let data = pattern(512, 3);
    src.write_at(0, &data).unwrap();
    let s = [src.sge(0..512).unwrap()];
    a.post_send(&[SendWr::send(30, &s).signaled()]).unwrap();
    assert!(wait(&mut cq_a, 1)[0].is_success());

    let got = wait(&mut cq_b, 2);
    let seen: Vec<_> = got.iter().map(|w| (w.wr_id(), w.status())).collect();
    assert_eq!(
        seen,
        [(50, WcStatus::SUCCESS), (20, WcStatus::SUCCESS)],
        "B's flushed receives 10 and 11 must be gone, C's receive kept"
    );
    assert_eq!(got[1].byte_len(), 512);
    let mut back = vec![0u8; 512];
    mr.read_at(0, &mut back).unwrap();
    assert_eq!(back, data);
}
