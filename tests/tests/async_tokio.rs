//! The `tokio` feature on a real rxe device: `AsyncCq::wait` wakes for
//! completions that land around its arm (a ping-pong whose messages arrive
//! before, during and after the poll/arm/poll sequence), and
//! `AsyncEvents::next_event` delivers a device event.

#![forbid(unsafe_code)]

use std::time::Duration;

use rverbs::tokio::{AsyncCq, AsyncEvents};
use rverbs::{
    AsyncEventKind, ConnectOpts, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, Wc,
};
use verbs_tests::{all_access, open_rxe, wait_ok, TIMEOUT};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn async_cq_wakes_for_completions_racing_the_arm() {
    // As api.rs's poll_blocking ping-pong, with B awaiting on tokio: a
    // lost wake-up leaves B's wait pending until the 2 s limit.
    let rt = rt();
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let cq_a = ctx.create_cq(64).unwrap();
    let mut cq_b = rt.block_on(async { AsyncCq::new(&ctx, 64) }).unwrap();
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: 32,
        ..QpCap::default()
    };
    let mut a = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq_a).cap(cap))
        .unwrap();
    let mut b = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, cq_b.cq()).cap(cap))
        .unwrap();
    let o = ConnectOpts {
        sgid_index: ctx.default_gid_index(1).unwrap(),
        ..Default::default()
    };
    let (ea, eb) = (a.endpoint(&o).unwrap(), b.endpoint(&o).unwrap());
    a.connect(&eb, all_access(), &o).unwrap();
    b.connect(&ea, all_access(), &o).unwrap();
    let rounds = 2000u64;
    let limit = Duration::from_secs(2);
    let a_side = verbs_tests::spawn_pinger(a, cq_a, &pd, rounds);
    let got = pd.alloc_mr(64, all_access()).unwrap();
    let mut out = pd.alloc_mr(8, all_access()).unwrap();
    rt.block_on(async {
        let g = [got.sge(..).unwrap()];
        let o = [out.sge(..).unwrap()];
        let mut wc = [Wc::default(); 1];
        b.post_recv(&[RecvWr::new(0, &g)]).unwrap();
        for i in 0..rounds {
            let n = tokio::time::timeout(limit, cq_b.wait(&mut wc))
                .await
                .unwrap_or_else(|_| panic!("round {i}: no wake-up within {limit:?}"))
                .unwrap();
            assert_eq!(n, 1);
            assert!(wc[0].is_success() && wc[0].wr_id() == i, "{:?}", wc[0]);
            let mut v = [0u8; 8];
            got.read_at(0, &mut v).unwrap();
            assert_eq!(u64::from_le_bytes(v), i, "round {i}: the message");
            b.post_recv(&[RecvWr::new(i + 1, &g)]).unwrap();
            out.write_at(0, &i.to_le_bytes()).unwrap();
            b.post_send(&[SendWr::send(i, &o)]).unwrap();
        }
    });
    a_side.join().unwrap();
}

#[test]
fn async_cq_outside_a_runtime_is_a_clear_error() {
    let ctx = open_rxe();
    let e = AsyncCq::new(&ctx, 16).unwrap_err();
    assert!(e.to_string().contains("tokio runtime"), "{e}");
}

#[test]
fn async_events_deliver_sq_drained() {
    let rt = rt();
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let mut cq = ctx.create_cq(16).unwrap();
    let mut a = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let mut b = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq)).unwrap();
    let o = ConnectOpts {
        sgid_index: ctx.default_gid_index(1).unwrap(),
        ..Default::default()
    };
    let (ea, eb) = (a.endpoint(&o).unwrap(), b.endpoint(&o).unwrap());
    a.connect(&eb, all_access(), &o).unwrap();
    b.connect(&ea, all_access(), &o).unwrap();
    let dst = pd.alloc_mr(64, all_access()).unwrap();
    let src = pd.alloc_mr(64, all_access()).unwrap();
    let s = [src.sge(..).unwrap()];
    a.post_send(&[dst.remote().rdma_write(1, &s).unwrap().signaled()])
        .unwrap();
    wait_ok(&mut cq);
    let ev = rt.block_on(async {
        let mut events = AsyncEvents::new(&ctx).unwrap();
        // Nothing pending yet: the await does not return.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), events.next_event())
                .await
                .is_err(),
            "an event before any"
        );
        a.modify(&QpAttr {
            qp_state: Some(QpState::Sqd),
            ..Default::default()
        })
        .unwrap();
        tokio::time::timeout(TIMEOUT, events.next_event())
            .await
            .expect("no SQ_DRAINED event")
            .unwrap()
    });
    assert_eq!(ev.kind, AsyncEventKind::SqDrained, "{ev}");
    assert!(ev.is_for_qp(&a), "{ev}");
}

/// A QP of type `t` on `dev` (opened here; the QP holds its PD, CQ and
/// context), with the default capacities and one CQ of 8 entries.
fn qp_on(dev: &rverbs::Device, t: QpType) -> rverbs::Qp {
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    pd.create_qp(&QpInitAttr::new(t, &cq).cap(QpCap::default()))
        .unwrap()
}

/// `f`, checked to be `Send` (a future a multi-threaded runtime may move).
fn sendable<F: std::future::Future + Send>(f: F) -> F {
    f
}

#[test]
fn rdma_cm_listen_connect_and_disconnect_awaited() {
    use rverbs_cm::tokio::{accept, connect, resolve, AsyncListener};
    use rverbs_cm::{CmEventKind, ConnParams, Listener};
    let rt = rt();
    rt.block_on(async {
        let l =
            AsyncListener::new(Listener::bind("10.0.0.1:0".parse().unwrap(), 4).unwrap()).unwrap();
        let dst = l.get_ref().local_addr();
        // Nothing pending: the wait is cancelled by the timeout, and the
        // request that comes later is still delivered (cancel-safe).
        assert!(
            tokio::time::timeout(Duration::from_millis(200), l.get_request())
                .await
                .is_err(),
            "no request yet"
        );
        let server = async {
            let req = l.get_request().await.unwrap();
            assert_eq!(&req.private_data()[..5], b"async");
            let qp = qp_on(req.device(), QpType::Rc);
            let mut conn = accept(req, qp, &ConnParams::default()).await.unwrap();
            let ev = tokio::time::timeout(TIMEOUT, conn.next_event())
                .await
                .expect("the client's disconnect in time")
                .unwrap();
            assert_eq!(ev.kind(), CmEventKind::Disconnected);
            assert_eq!(conn.get_ref().qp().state(), QpState::Err);
        };
        let client = async {
            let id = resolve(dst, Duration::from_secs(5)).await.unwrap();
            let qp = qp_on(id.device(), QpType::Rc);
            let p = ConnParams {
                private_data: b"async".to_vec(),
                ..ConnParams::default()
            };
            // The handshake's future may move to another worker thread.
            let mut conn = sendable(connect(id, qp, &p)).await.unwrap();
            assert_eq!(conn.get_ref().qp().state(), QpState::Rts);
            conn.get_mut().disconnect().unwrap();
        };
        tokio::join!(server, client);
    });
}

/// An id whose options are set before it resolves (`CmId`), resolved on
/// the runtime (`resolve_id`): the connected QPs carry the type of
/// service as their traffic class and the ACK timeout as the active
/// side's RTS timeout, read back with QUERY_QP.
#[test]
fn rdma_cm_id_options_then_resolution_awaited() {
    use rverbs_cm::tokio::{accept, connect, resolve_id, AsyncListener};
    use rverbs_cm::{CmId, ConnParams, Listener};
    let rt = rt();
    rt.block_on(async {
        let l =
            AsyncListener::new(Listener::bind("10.0.0.1:0".parse().unwrap(), 4).unwrap()).unwrap();
        let dst = l.get_ref().local_addr();
        let server = async {
            let req = l.get_request().await.unwrap();
            let qp = qp_on(req.device(), QpType::Rc);
            accept(req, qp, &ConnParams::default()).await.unwrap()
        };
        let client = async {
            let id = CmId::new().unwrap();
            id.set_tos(0x48).unwrap();
            id.set_ack_timeout(15).unwrap();
            let r = sendable(resolve_id(id, dst, Duration::from_secs(5)))
                .await
                .unwrap();
            let qp = qp_on(r.device(), QpType::Rc);
            connect(r, qp, &ConnParams::default()).await.unwrap()
        };
        let (s, c) = tokio::join!(server, client);
        let (ca, _, _) = c.get_ref().qp().query().unwrap();
        let (sa, _, _) = s.get_ref().qp().query().unwrap();
        let tc = |a: &QpAttr| a.ah_attr.unwrap().grh.unwrap().traffic_class;
        assert_eq!((tc(&ca), tc(&sa)), (0x48, 0x48));
        assert_eq!(ca.timeout, Some(15));
    });
}

/// Resolution awaited natively: on a current-thread runtime whose I/O
/// driver alone runs the steps, a UD peer resolves from the source address
/// given (to the device behind it), in the UDP port space, and a TCP id
/// resolves as well.
#[test]
fn rdma_cm_resolution_is_awaited_on_the_runtime() {
    use rverbs_cm::tokio::{resolve_from, resolve_ud, resolve_ud_from};
    use rverbs_cm::Listener;
    let rt = rt();
    rt.block_on(async {
        let l = Listener::bind_ud("10.0.0.1:0".parse().unwrap(), 4).unwrap();
        let dst = l.local_addr();
        let src = "10.0.0.1:0".parse().unwrap();
        let ud = resolve_ud_from(Some(src), dst, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(ud.peer_addr(), dst);
        assert_eq!(ud.local_addr().map(|a| a.ip()), Some(src.ip()));
        assert_eq!(ud.device().name(), "rxe0");
        let ud = resolve_ud(dst, Duration::from_secs(5)).await.unwrap();
        assert_eq!(ud.device().name(), "rxe0");
        let tcp = resolve_from(None, dst, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(tcp.device().name(), "rxe0");
    });
}

/// An address nobody answers for fails with the CM's error, ended by the
/// kernel's timer, while the same current-thread runtime keeps running
/// other tasks (a blocking wait would stall the ticker).
#[test]
fn rdma_cm_resolution_failure_is_awaited_without_blocking_the_runtime() {
    use rverbs::Error;
    use rverbs_cm::CmError;
    let rt = rt();
    rt.block_on(async {
        let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
        let t = std::sync::Arc::clone(&ticks);
        let ticker = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                t.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        });
        let start = std::time::Instant::now();
        let err = rverbs_cm::tokio::resolve(
            "10.0.0.77:7000".parse().unwrap(),
            Duration::from_millis(1500),
        )
        .await
        .map(|_| ())
        .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Cm(CmError::AddrError { .. }) | Error::Cm(CmError::RouteError { .. })
            ),
            "{err}"
        );
        let took = start.elapsed();
        assert!(took < Duration::from_secs(10), "{took:?}");
        // The ticker ran during the wait (a wait that blocked the thread
        // would leave it at 0: nothing yields between the error and here).
        let n = ticks.load(std::sync::atomic::Ordering::Relaxed);
        assert!(n >= 3, "{n} ticks in {took:?}");
        ticker.abort();
    });
}

/// A UD peer's SIDR exchange with both sides awaited on one
/// current-thread runtime (a blocking step on either side would stall
/// the other, which then never answers): resolve_ud, connect_ud against
/// an AsyncListener's request answered with accept_ud; the CM names the
/// server's QP and carries its private data.
#[test]
fn rdma_cm_sidr_exchange_awaited_on_one_thread() {
    use rverbs_cm::tokio::{accept_ud, connect_ud, resolve_ud, AsyncListener};
    use rverbs_cm::Listener;
    let rt = rt();
    rt.block_on(async {
        let l = AsyncListener::new(Listener::bind_ud("10.0.0.1:0".parse().unwrap(), 4).unwrap())
            .unwrap();
        let dst = l.get_ref().local_addr();
        let server = async {
            let req = l.get_request().await.unwrap();
            assert_eq!(&req.private_data()[..3], b"cli");
            let mut qp = qp_on(req.device(), QpType::Ud);
            accept_ud(req, &mut qp, b"srv").await.unwrap();
            qp.qp_num()
        };
        let client = async {
            let id = resolve_ud(dst, Duration::from_secs(5)).await.unwrap();
            let mut qp = qp_on(id.device(), QpType::Ud);
            connect_ud(id, &mut qp, b"cli", Duration::from_secs(15))
                .await
                .unwrap()
        };
        let (server_qpn, peer) = tokio::join!(server, client);
        assert_eq!(peer.qp_num, server_qpn, "the CM named the server's QP");
        assert_eq!(&peer.private_data[..3], b"srv");
    });
}

/// A peer that never answers (its listener holds the request, nobody
/// accepts): the awaited connect ends with the step's timeout, measured
/// by the timerfd awaited beside the id, on a runtime built without
/// tokio's timer driver (I/O only), which it therefore does not need.
#[test]
fn rdma_cm_connect_times_out_on_a_runtime_without_timers() {
    use rverbs::Error;
    use rverbs_cm::{CmError, ConnParams, Listener};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let l = Listener::bind("10.0.0.1:0".parse().unwrap(), 4).unwrap();
    let dst = l.local_addr();
    rt.block_on(async {
        let id = rverbs_cm::tokio::resolve(dst, Duration::from_secs(5))
            .await
            .unwrap();
        let qp = qp_on(id.device(), QpType::Rc);
        let p = ConnParams {
            timeout: Duration::from_millis(500),
            ..ConnParams::default()
        };
        let start = std::time::Instant::now();
        let err = rverbs_cm::tokio::connect(id, qp, &p)
            .await
            .map(|_| ())
            .unwrap_err();
        let took = start.elapsed();
        match err {
            Error::Cm(CmError::Timeout { step, after }) => {
                assert_eq!(step, "the peer's answer");
                assert_eq!(after, Duration::from_millis(500));
            }
            other => panic!("expected the step's timeout, got {other}"),
        }
        assert!(took >= Duration::from_millis(500), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
    });
    drop(l);
}
