//! Receiver-not-ready on RC: a SEND that finds no receive posted is NAKed
//! with RNR. With `rnr_retry` 0 the sender gives up at once
//! (`RNR_RETRY_EXC_ERR`, the QP moves to ERR and later work flushes); with
//! `rnr_retry` 7 it retries forever and the SEND lands once a receive shows
//! up, however late.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use rverbs::{ConnectOpts, QpState, RecvWr, SendWr, WcOpcode, WcStatus};
use verbs_tests::{assert_quiet, pattern, wait, wait_ok, Pair, PairOpts};

fn pair(rnr_retry: u8, min_rnr_timer: u8) -> Pair {
    Pair::with(PairOpts {
        connect: ConnectOpts {
            rnr_retry,
            min_rnr_timer,
            ..ConnectOpts::default()
        },
        ..PairOpts::default()
    })
}

#[test]
fn rnr_retry_zero_fails_the_send_with_rnr_retry_exceeded() {
    let mut p = pair(0, 1);
    let mut src = p.pd.alloc_mr(1024, verbs_tests::all_access()).unwrap();
    src.write_at(0, &pattern(1024, 11)).unwrap();
    let s = [src.sge(..).unwrap()];
    // Nothing is posted on B. The second SEND is queued behind the first.
    p.a.post_send(&[
        SendWr::send(1, &s).signaled(),
        SendWr::send(2, &s).signaled(),
    ])
    .unwrap();
    let wcs = wait(&mut p.cq_a, 2);
    assert_eq!(wcs[0].wr_id(), 1);
    assert_eq!(wcs[0].status(), WcStatus::RNR_RETRY_EXC_ERR, "{:?}", wcs[0]);
    assert_eq!(wcs[1].wr_id(), 2);
    assert_eq!(wcs[1].status(), WcStatus::WR_FLUSH_ERR, "{:?}", wcs[1]);
    assert_eq!(p.a.query().unwrap().0.qp_state, Some(QpState::Err));
    // The receiver saw nothing and is still usable.
    assert_quiet(&mut p.cq_b, Duration::from_millis(50));
    assert_eq!(p.b.query().unwrap().0.qp_state, Some(QpState::Rts));
}

#[test]
fn infinite_rnr_retry_delivers_once_a_late_receive_is_posted() {
    // min_rnr_timer 1: B asks for 0.01 ms between retries, so the sender
    // keeps retrying the whole time. The default retry_cnt 7 matters: rxe
    // treats it as unlimited too, and its retransmit timer can expire during
    // RNR waits; with a finite retry_cnt the held SEND could end in
    // RETRY_EXC_ERR instead (timing-dependent, seen on 6.1 and 6.12).
    let mut p = pair(7, 1);
    let mut src = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let data = pattern(3000, 12);
    src.write_at(0, &data).unwrap();
    let s = [src.sge(..3000).unwrap()];
    p.a.post_send(&[SendWr::send(21, &s).signaled()]).unwrap();
    let posted = Instant::now();
    // For ~200 ms nothing may complete on either side: the SEND is held
    // in RNR retries, not dropped and not failed.
    assert_quiet(&mut p.cq_a, Duration::from_millis(200));
    assert_quiet(&mut p.cq_b, Duration::from_millis(1));
    assert_eq!(p.a.query().unwrap().0.qp_state, Some(QpState::Rts));
    let r = [dst.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(22, &r)]).unwrap();
    let wc = wait_ok(&mut p.cq_a);
    assert_eq!((wc.wr_id(), wc.opcode()), (21, WcOpcode::SEND));
    assert!(posted.elapsed() >= Duration::from_millis(200));
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!(
        (wc.wr_id(), wc.opcode(), wc.byte_len(), wc.qp_num()),
        (22, WcOpcode::RECV, 3000, p.b.qp_num())
    );
    assert_eq!(&dst.to_vec()[..3000], &data[..]);
    // The connection is healthy afterwards: another SEND goes straight in.
    p.b.post_recv(&[RecvWr::new(23, &r)]).unwrap();
    p.a.post_send(&[SendWr::send(24, &s).signaled()]).unwrap();
    assert_eq!(wait_ok(&mut p.cq_a).wr_id(), 24);
    assert_eq!(wait_ok(&mut p.cq_b).wr_id(), 23);
}

#[test]
fn finite_rnr_retry_gives_up_after_its_retries() {
    // rnr_retry 3 with B asking for 10.24 ms (code 20) between retries:
    // the sender gives up after 3 retries, ~30 ms (timers run in jiffies,
    // so allow a tick of early firing per retry).
    let mut p = pair(3, 20);
    let src = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let s = [src.sge(..).unwrap()];
    let t = Instant::now();
    p.a.post_send(&[SendWr::send(31, &s).signaled()]).unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    let took = t.elapsed();
    assert_eq!(wc.wr_id(), 31);
    assert_eq!(wc.status(), WcStatus::RNR_RETRY_EXC_ERR, "{wc:?}");
    assert!(
        took >= Duration::from_millis(20),
        "3 RNR retries 10.24 ms apart took only {took:?}"
    );
    assert_quiet(&mut p.cq_b, Duration::from_millis(20));
    eprintln!("3 RNR retries 10.24 ms apart: gave up after {took:?}");
}
