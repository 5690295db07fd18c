//! The peer disappears: its QP is destroyed while work is outstanding
//! towards it. Nothing answers any more, so the sender's transport timer
//! runs out: the oldest request completes with `RETRY_EXC_ERR` after
//! `retry_cnt` retries of `timeout` each, the QP moves to ERR and every
//! request behind it (and every posted receive) is flushed, all within a
//! time bounded by the QP's own timeout settings: no hang.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use rverbs::{ConnectOpts, QpState, RecvWr, SendWr, Wc, WcStatus};
use verbs_tests::{assert_quiet, pattern, Pair, PairOpts};

/// Local ACK timeout code: 4.096 us * 2^10 = ~4.2 ms per attempt.
const TIMEOUT_CODE: u8 = 10;
/// Transport retries after the first attempt.
const RETRY_CNT: u8 = 2;

/// How long the sender may take to give up, derived from the QP's timeout
/// settings: (retry_cnt + 1) attempts of one timeout each, where rxe arms
/// its timer in jiffies (at least one; 10 ms at HZ=100, the coarsest
/// common tick), times 50 for the emulated CPU and scheduling.
fn give_up_bound() -> Duration {
    let per_attempt = Duration::from_nanos(4096 << TIMEOUT_CODE).max(Duration::from_millis(10));
    per_attempt * (u32::from(RETRY_CNT) + 1) * 50
}

fn pair() -> Pair {
    Pair::with(PairOpts {
        connect: ConnectOpts {
            timeout: TIMEOUT_CODE,
            retry_cnt: RETRY_CNT,
            // RNR never ends the test: only the transport timeout may.
            rnr_retry: 7,
            min_rnr_timer: 1,
            ..ConnectOpts::default()
        },
        ..PairOpts::default()
    })
}

/// Waits up to `limit` for `n` completions on `cq`.
fn collect(cq: &mut rverbs::Cq, n: usize, limit: Duration) -> Vec<Wc> {
    let mut wc = vec![Wc::default(); n];
    cq.poll_until(&mut wc, n, limit)
        .unwrap_or_else(|e| panic!("waiting for {n} completions after the peer went away: {e}"));
    wc
}

/// Checks the sender's completions: send `first` failed with
/// RETRY_EXC_ERR, the later sends and the receives flushed.
fn check_failure(wcs: &[Wc], sends: std::ops::Range<u64>, recvs: std::ops::Range<u64>) {
    let (send_wcs, recv_wcs): (Vec<Wc>, Vec<Wc>) =
        wcs.iter().partition(|w| sends.contains(&w.wr_id()));
    // Send completions come in posting order.
    let ids: Vec<u64> = send_wcs.iter().map(Wc::wr_id).collect();
    assert_eq!(ids, sends.clone().collect::<Vec<_>>());
    assert_eq!(
        send_wcs[0].status(),
        WcStatus::RETRY_EXC_ERR,
        "{:?}",
        send_wcs[0]
    );
    for wc in &send_wcs[1..] {
        assert_eq!(wc.status(), WcStatus::WR_FLUSH_ERR, "{wc:?}");
    }
    let mut ids: Vec<u64> = recv_wcs.iter().map(Wc::wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, recvs.collect::<Vec<_>>());
    for wc in &recv_wcs {
        assert_eq!(wc.status(), WcStatus::WR_FLUSH_ERR, "{wc:?}");
    }
}

#[test]
fn destroying_the_peer_with_sends_outstanding_fails_then_flushes_in_bounded_time() {
    let Pair {
        ctx: _ctx,
        pd,
        mut cq_a,
        mut cq_b,
        mut a,
        b,
    } = pair();
    let mut src = pd.alloc_mr(8192, verbs_tests::all_access()).unwrap();
    src.write_at(0, &pattern(8192, 5)).unwrap();
    let rbuf = pd.alloc_mr(1024, verbs_tests::all_access()).unwrap();
    let r = [rbuf.sge(..).unwrap()];
    a.post_recv(&[RecvWr::new(100, &r), RecvWr::new(101, &r)])
        .unwrap();
    let s = [src.sge(..2000).unwrap()];
    let sends: Vec<SendWr> = (0..8).map(|i| SendWr::send(i, &s).signaled()).collect();
    // B has no receive, so none of these can succeed; B goes away while
    // they are outstanding. (No waiting in between: rxe's retransmit timer
    // can expire while a SEND is RNR-NAKed and count against retry_cnt, so
    // with a finite retry_cnt a SEND held in RNR may end in RETRY_EXC_ERR
    // on its own, timing-dependently, on 6.1 and 6.12 alike.)
    a.post_send(&sends).unwrap();
    drop(b);
    let gone = Instant::now();
    let bound = give_up_bound();
    let wcs = collect(&mut cq_a, 10, bound * 2);
    let took = gone.elapsed();
    check_failure(&wcs, 0..8, 100..102);
    assert!(
        took < bound,
        "the sender took {took:?} to give up; its timeout settings allow {bound:?}"
    );
    assert_eq!(a.query().unwrap().0.qp_state, Some(QpState::Err));
    // Nothing else trickles in later, and B's CQ stayed empty.
    assert_quiet(&mut cq_a, Duration::from_millis(100));
    assert_quiet(&mut cq_b, Duration::from_millis(1));
    eprintln!("peer gone: RETRY_EXC_ERR and flushes after {took:?} (bound {bound:?})");
}

#[test]
fn rdma_writes_to_a_destroyed_peer_fail_then_flush_in_bounded_time() {
    let Pair {
        ctx: _ctx,
        pd,
        mut cq_a,
        cq_b: _cq_b,
        mut a,
        b,
    } = pair();
    let src = pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    // The peer's MR stays registered: only its QP goes away.
    let dst = pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let rm = dst.remote();
    // Prove the path works while B exists.
    let s = [src.sge(..).unwrap()];
    a.post_send(&[SendWr::rdma_write(50, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    let ok = collect(&mut cq_a, 1, verbs_tests::TIMEOUT)[0];
    assert!(ok.is_success(), "{ok:?}");

    drop(b);
    let gone = Instant::now();
    let writes: Vec<SendWr> = (0..4)
        .map(|i| SendWr::rdma_write(i, &s, rm.addr, rm.rkey).signaled())
        .collect();
    a.post_send(&writes).unwrap();
    let bound = give_up_bound();
    let wcs = collect(&mut cq_a, 4, bound * 2);
    let took = gone.elapsed();
    check_failure(&wcs, 0..4, 0..0);
    assert!(
        took < bound,
        "the sender took {took:?} to give up; its timeout settings allow {bound:?}"
    );
    assert_eq!(a.query().unwrap().0.qp_state, Some(QpState::Err));
}
