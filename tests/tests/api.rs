//! The API's rough edges on a real rxe device: waiting for completions
//! through the channel (`Cq::poll_blocking`, with completions landing
//! right around the arm), `connect()` refusing bad options before any
//! transition, `Qp::cap`/`query` agreeing with what can be posted,
//! `SignalEvery`, and the real QP state after an error.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use rverbs::{
    AccessFlags, ConnectOpts, Cq, Endpoint, Error, PostError, QpCap, QpInitAttr, QpState, QpType,
    RecvWr, SendWr, SignalEvery, Wc, WcOpcode, WcStatus,
};
use verbs_tests::{all_access, open_rxe, pattern, wait_ok, Pair, PairOpts, TIMEOUT};

/// A connected pair whose CQs signal completion channels.
fn channel_pair() -> (rverbs::Context, rverbs::Pd, Cq, Cq, rverbs::Qp, rverbs::Qp) {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let ch_a = ctx.create_comp_channel().unwrap();
    let ch_b = ctx.create_comp_channel().unwrap();
    let cq_a = ctx.create_cq_with(64, Some(&ch_a), 0).unwrap();
    let cq_b = ctx.create_cq_with(64, Some(&ch_b), 0).unwrap();
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        ..QpCap::default()
    };
    let mut a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq_a).cap(cap))
        .unwrap();
    let mut b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq_b).cap(cap))
        .unwrap();
    let o = ConnectOpts {
        sgid_index: ctx.default_gid_index(1).unwrap(),
        ..Default::default()
    };
    let (ea, eb) = (a.endpoint(&o).unwrap(), b.endpoint(&o).unwrap());
    a.connect(&eb, all_access(), &o).unwrap();
    b.connect(&ea, all_access(), &o).unwrap();
    (ctx, pd, cq_a, cq_b, a, b)
}

#[test]
fn poll_blocking_sleeps_until_a_completion_arrives() {
    let (_ctx, pd, mut cq_a, mut cq_b, a, mut b) = channel_pair();
    let src = pd.alloc_mr(64, all_access()).unwrap();
    let dst = pd.alloc_mr(64, all_access()).unwrap();
    let r = [dst.sge(..).unwrap()];
    b.post_recv(&[RecvWr::new(5, &r)]).unwrap();
    let mut wc = [Wc::default(); 4];
    // Nothing yet: the wait times out (without spinning through the
    // timeout: it sleeps on the channel).
    let t = Instant::now();
    assert!(matches!(
        cq_b.poll_blocking(&mut wc, Duration::from_millis(200)),
        Err(Error::Timeout(_))
    ));
    assert!(t.elapsed() >= Duration::from_millis(200));
    // A send 300 ms from now, from another thread: the waiter wakes for it.
    let sender = std::thread::spawn(move || {
        let mut a = a;
        let mut src = src;
        std::thread::sleep(Duration::from_millis(300));
        src.write_at(0, &pattern(64, 9)).unwrap();
        let s = [src.sge(..).unwrap()];
        a.post_send(&[SendWr::send(6, &s).signaled()]).unwrap();
        (a, src)
    });
    let n = cq_b.poll_blocking(&mut wc, TIMEOUT).unwrap();
    assert_eq!(n, 1);
    assert!(wc[0].is_success(), "{:?}", wc[0]);
    assert_eq!((wc[0].wr_id(), wc[0].opcode()), (5, WcOpcode::RECV));
    assert_eq!(dst.to_vec(), pattern(64, 9));
    let (_a, _src) = sender.join().unwrap();
    let n = cq_a.poll_blocking(&mut wc, TIMEOUT).unwrap();
    assert_eq!((n, wc[0].opcode()), (1, WcOpcode::SEND));
}

#[test]
fn poll_blocking_returns_every_completion_over_many_rounds() {
    // Each round posts and immediately waits, on both sides, checking the
    // data: the wait returns the completion whether it is already there
    // (rxe often completes a loopback request within the post) or arrives
    // after. The arm race itself is driven by
    // poll_blocking_wakes_for_completions_racing_the_arm.
    let (_ctx, pd, mut cq_a, mut cq_b, mut a, mut b) = channel_pair();
    let mut src = pd.alloc_mr(256, all_access()).unwrap();
    let dst = pd.alloc_mr(256, all_access()).unwrap();
    let r = [dst.sge(..).unwrap()];
    let s = [src.sge(..).unwrap()];
    let mut wc = [Wc::default(); 1];
    let rounds = 3000u64;
    let per_round = Duration::from_secs(5);
    for i in 0..rounds {
        let data = pattern(256, i as u32);
        src.write_at(0, &data).unwrap();
        b.post_recv(&[RecvWr::new(i, &r)]).unwrap();
        a.post_send(&[SendWr::send(i, &s).signaled()]).unwrap();
        let n = cq_b
            .poll_blocking(&mut wc, per_round)
            .unwrap_or_else(|e| panic!("round {i}: receive: {e}"));
        assert_eq!(n, 1);
        assert!(wc[0].is_success() && wc[0].wr_id() == i, "{:?}", wc[0]);
        let n = cq_a
            .poll_blocking(&mut wc, per_round)
            .unwrap_or_else(|e| panic!("round {i}: send: {e}"));
        assert_eq!((n, wc[0].opcode(), wc[0].wr_id()), (1, WcOpcode::SEND, i));
        assert_eq!(dst.to_vec(), data, "round {i}");
    }
}

#[test]
fn poll_blocking_wakes_for_completions_racing_the_arm() {
    // A ping-pong: B waits in poll_blocking for A's message, then replies;
    // A waits (spinning) for the reply, then spins a delay that varies
    // from 0 to ~60 us before it sends the next message, so that its
    // arrival at B falls before B's first poll, between that poll and
    // B's arm (a REQ_NOTIFY_CQ system call on rxe), between the arm and
    // the second poll, and during B's sleep. Nothing else completes on
    // B's CQ (its replies are unsignaled), so a wake-up lost in that
    // window would leave B asleep until its timeout: every wait must end
    // well before it.
    let (_ctx, pd, cq_a, mut cq_b, a, mut b) = channel_pair();
    let rounds = 3000u64;
    let limit = Duration::from_secs(2);
    let a_side = verbs_tests::spawn_pinger(a, cq_a, &pd, rounds);
    let mut got = pd.alloc_mr(64, all_access()).unwrap();
    let mut out = pd.alloc_mr(8, all_access()).unwrap();
    let g = [got.sge(..).unwrap()];
    let o = [out.sge(..).unwrap()];
    let mut wc = [Wc::default(); 1];
    let mut slowest = Duration::ZERO;
    b.post_recv(&[RecvWr::new(0, &g)]).unwrap();
    for i in 0..rounds {
        let t = Instant::now();
        let n = cq_b
            .poll_blocking(&mut wc, limit)
            .unwrap_or_else(|e| panic!("round {i}: {e}"));
        let took = t.elapsed();
        slowest = slowest.max(took);
        assert!(
            took < limit / 2,
            "round {i}: the completion was found only after {took:?}: a lost wake-up"
        );
        assert_eq!(n, 1);
        assert!(wc[0].is_success() && wc[0].wr_id() == i, "{:?}", wc[0]);
        let mut v = [0u8; 8];
        got.read_at(0, &mut v).unwrap();
        assert_eq!(u64::from_le_bytes(v), i, "round {i}: the message");
        got.fill(.., 0).unwrap();
        b.post_recv(&[RecvWr::new(i + 1, &g)]).unwrap();
        out.write_at(0, &i.to_le_bytes()).unwrap();
        b.post_send(&[SendWr::send(i, &o)]).unwrap();
    }
    a_side.join().unwrap();
    println!("{rounds} rounds, slowest wait {slowest:?}");
}

#[test]
fn poll_blocking_without_a_channel_is_a_clear_error() {
    let mut p = Pair::new();
    let mut wc = [Wc::default(); 1];
    let e = p.cq_a.poll_blocking(&mut wc, TIMEOUT).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("completion channel"), "{e}");
}

#[test]
fn connect_refuses_a_25_bit_psn_before_any_transition() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mut a = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let b = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let good = ConnectOpts {
        sgid_index: ctx.default_gid_index(1).unwrap(),
        ..Default::default()
    };
    let bad = ConnectOpts {
        sq_psn: 1 << 24,
        ..good
    };
    // endpoint() refuses it too, instead of handing the peer a bad PSN.
    assert!(matches!(a.endpoint(&bad), Err(Error::InvalidArgument(_))));
    let eb = b.endpoint(&good).unwrap();
    let e = a.connect(&eb, all_access(), &bad).unwrap_err();
    assert!(e.to_string().contains("sq_psn"), "{e}");
    // The QP did not move: the kernel still has it in RESET.
    assert_eq!(a.state(), QpState::Reset);
    assert_eq!(a.query().unwrap().0.qp_state, Some(QpState::Reset));
    // A peer endpoint with a 25-bit PSN, a GID index past the table, and a
    // port 0: refused, still RESET.
    let peer_bad = Endpoint { psn: 1 << 24, ..eb };
    assert!(a.connect(&peer_bad, all_access(), &good).is_err());
    let gid_bad = ConnectOpts {
        sgid_index: 250,
        ..good
    };
    assert!(a.connect(&eb, all_access(), &gid_bad).is_err());
    let port_bad = ConnectOpts {
        port_num: 0,
        ..good
    };
    assert!(a.connect(&eb, all_access(), &port_bad).is_err());
    assert_eq!(a.query().unwrap().0.qp_state, Some(QpState::Reset));
    // The good options still work on the same QP.
    a.connect(&eb, all_access(), &good).unwrap();
    assert_eq!(a.query().unwrap().0.qp_state, Some(QpState::Rts));
}

#[test]
fn query_and_cap_agree_with_what_can_be_posted() {
    let p = Pair::with(PairOpts {
        cap: QpCap {
            max_send_wr: 64,
            max_recv_wr: 64,
            ..QpCap::default()
        },
        ..PairOpts::default()
    });
    let mut p = p;
    let cap = p.a.cap();
    let (_, qcap, _) = p.a.query().unwrap();
    assert_eq!(qcap, cap, "query() and cap() disagree");
    assert!(cap.max_send_wr >= 64 && cap.max_recv_wr >= 64, "{cap:?}");
    // Exactly max_recv_wr receives fit: the one after is RecvQueueFull.
    let dst = p.pd.alloc_mr(64, all_access()).unwrap();
    let r = [dst.sge(..).unwrap()];
    let wrs: Vec<RecvWr> = (0..=u64::from(cap.max_recv_wr))
        .map(|i| RecvWr::new(i, &r))
        .collect();
    match p.b.post_recv(&wrs).map_err(Error::from) {
        Err(Error::Post {
            index,
            error: PostError::RecvQueueFull,
        }) => assert_eq!(index, cap.max_recv_wr as usize),
        other => panic!("posting max_recv_wr + 1 receives: {other:?}"),
    }
    // And max_send_wr sends in one chain are accepted.
    let src = p.pd.alloc_mr(64, all_access()).unwrap();
    let s = [src.sge(..).unwrap()];
    let wrs: Vec<SendWr> = (0..u64::from(cap.max_send_wr))
        .map(|i| SendWr::rdma_write(i, &s, dst.addr(), dst.rkey()))
        .collect();
    p.a.post_send(&wrs).unwrap();
}

#[test]
fn signal_every_keeps_a_long_unsignaled_stream_going() {
    // 4 x max_send_wr RDMA WRITEs, one in every max_send_wr / 2 signaled
    // and polled: the queue never stays full, and the data of the last one
    // arrives.
    let mut p = Pair::new();
    let mut src = p.pd.alloc_mr(4096, all_access()).unwrap();
    let dst = p.pd.alloc_mr(4096, all_access()).unwrap();
    let mut sig = SignalEvery::for_qp(&p.a);
    assert_eq!(sig.every(), p.a.cap().max_send_wr / 2);
    let total = 4 * u64::from(p.a.cap().max_send_wr);
    let mut signaled = 0;
    let mut wc = [Wc::default(); 8];
    let mut completed = 0;
    for i in 0..total {
        src.write_at(0, &pattern(4096, i as u32)).unwrap();
        let s = [src.sge(..).unwrap()];
        let wr = sig.mark(SendWr::rdma_write(i, &s, dst.addr(), dst.rkey()));
        if wr.send_flags().contains(rverbs::SendFlags::SIGNALED) {
            signaled += 1;
        }
        // The device works asynchronously (6.12's rxe from a work queue):
        // a full queue is retried after polling, as an application does.
        // What must not happen is a queue that stays full.
        let end = Instant::now() + TIMEOUT;
        loop {
            match p.a.post_send(&[wr]).map_err(Error::from) {
                Ok(()) => break,
                Err(Error::Post {
                    error: PostError::QueueFull,
                    ..
                }) if Instant::now() < end => {}
                Err(e) => panic!("post {i}: {e}"),
            }
            let n = p.cq_a.poll(&mut wc).unwrap();
            assert!(wc[..n].iter().all(|w| w.is_success()), "{wc:?}");
            completed += n;
        }
        let n = p.cq_a.poll(&mut wc).unwrap();
        assert!(wc[..n].iter().all(|w| w.is_success()), "{wc:?}");
        completed += n;
    }
    assert_eq!(signaled, total / u64::from(sig.every()));
    while completed < signaled as usize {
        let n = p
            .cq_a
            .poll_until(&mut wc, 1, TIMEOUT)
            .expect("signaled completions");
        assert!(
            wc[..n].iter().all(|w| w.status() == WcStatus::SUCCESS),
            "{wc:?}"
        );
        completed += n;
    }
    assert_eq!(dst.to_vec(), pattern(4096, (total - 1) as u32));
}

#[test]
fn query_tells_the_real_state_after_an_error_completion() {
    let mut p = Pair::new();
    let src = p.pd.alloc_mr(64, all_access()).unwrap();
    let s = [src.sge(..).unwrap()];
    // A write under a wrong rkey: remote access error, QP to ERROR.
    p.a.post_send(&[SendWr::rdma_write(1, &s, 0x1000, 0xdead_beef).signaled()])
        .unwrap();
    let mut wc = [Wc::default(); 1];
    p.cq_a.poll_until(&mut wc, 1, TIMEOUT).unwrap();
    assert!(!wc[0].is_success(), "{:?}", wc[0]);
    assert_eq!(p.a.state(), QpState::Rts, "state() is the last state set");
    assert_eq!(p.a.query().unwrap().0.qp_state, Some(QpState::Err));
}

#[test]
fn opcodes_print_by_name() {
    let mut p = Pair::new();
    let src = p.pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let s = [src.sge(..).unwrap()];
    let dst = p.pd.alloc_mr(64, all_access()).unwrap();
    p.a.post_send(&[SendWr::rdma_write(1, &s, dst.addr(), dst.rkey()).signaled()])
        .unwrap();
    let wc = wait_ok(&mut p.cq_a);
    assert_eq!(format!("{}", wc.opcode()), "RDMA_WRITE");
    assert!(format!("{wc:?}").contains("opcode: RDMA_WRITE"), "{wc:?}");
}
