//! rdma_cm against the real kernel (VM, rxe0 on veth0 = 10.0.0.1; veth1 =
//! 10.0.0.2 has no RDMA device): connect by address and port, data over
//! the connection, private data both ways, and the failure paths, each
//! reported as a typed error within its timeout.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rverbs::{
    Cq, Device, Errno, Error, Grh, Mr, PageBuf, Pd, QpCap, QpInitAttr, QpState, QpType, RemoteMr,
    UdSendWr,
};
use rverbs::{RecvWr, SendWr, WcStatus};
use rverbs_cm::{CmError, CmEventKind, ConnParams, Connection, Listener, Resolved, UDP_QKEY};
use verbs_tests::{all_access, pattern, wait_ok};

/// The address of rxe0's netdev in the VM.
const RXE_IP: &str = "10.0.0.1";
/// A local address whose netdev has no RDMA device.
const NO_RDMA_IP: &str = "10.0.0.2";

fn addr(ip: &str, port: u16) -> SocketAddr {
    format!("{ip}:{port}").parse().unwrap()
}

fn params(private: &[u8]) -> ConnParams {
    ConnParams {
        private_data: private.to_vec(),
        timeout: Duration::from_secs(15),
        ..ConnParams::default()
    }
}

/// One side's verbs objects on `dev`: PD, CQ, an RC QP and a 4 KiB MR.
struct Side {
    pd: Pd,
    cq: Cq,
    mr: Mr<PageBuf>,
}

fn side(dev: &Device) -> (Side, rverbs::Qp) {
    let ctx = dev.open().expect("open the CM's device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(32).unwrap();
    let mr = pd.alloc_mr(4096, all_access()).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap::default()))
        .unwrap();
    (Side { pd, cq, mr }, qp)
}

/// A listener on rxe0's address, on a port the kernel chose.
fn listener() -> Listener {
    Listener::bind(addr(RXE_IP, 0), 8).expect("listen on rxe0's address")
}

#[test]
fn connect_accept_then_send_and_rdma_write_with_private_data_both_ways() {
    let l = listener();
    let port = l.local_addr().port();
    assert_ne!(port, 0, "the kernel assigned a port");
    let server = std::thread::spawn(move || {
        let req = l
            .get_request(Some(Duration::from_secs(20)))
            .unwrap()
            .expect("a request within 20 s");
        assert_eq!(&req.private_data()[..9], b"hello-req");
        let peer_mr = RemoteMr::from_bytes(req.private_data()[9..29].try_into().unwrap());
        let (mut s, mut qp) = side(req.device());
        // The receive is posted before the accept (the client sends at
        // once): the CM's INIT first.
        req.init_qp(&mut qp).unwrap();
        let sge = [s.mr.sge(0..64).unwrap()];
        qp.post_recv(&[RecvWr::new(7, &sge)]).unwrap();
        let mut conn = req.accept(qp, &params(b"hello-rep")).expect("accept");
        // The client's SEND arrives, then we RDMA WRITE into its MR.
        let wc = wait_ok(&mut s.cq);
        assert_eq!(wc.wr_id(), 7);
        let mut got = [0u8; 64];
        s.mr.read_at(0, &mut got).unwrap();
        assert_eq!(got.to_vec(), pattern(64, 1), "the SEND's payload");
        let data = pattern(256, 2);
        s.mr.write_at(1024, &data).unwrap();
        let sge = [s.mr.sge(1024..1280).unwrap()];
        let wr = peer_mr.rdma_write(9, &sge).unwrap().signaled();
        conn.qp_mut().post_send(&[wr]).unwrap();
        assert_eq!(wait_ok(&mut s.cq).wr_id(), 9);
        // Tell the client the write is done; then it disconnects.
        let sge = [s.mr.sge(0..1).unwrap()];
        conn.qp_mut()
            .post_send(&[SendWr::send(10, &sge).signaled()])
            .unwrap();
        assert_eq!(wait_ok(&mut s.cq).wr_id(), 10);
        let ev = conn
            .next_event(Some(Duration::from_secs(20)))
            .unwrap()
            .expect("the client's disconnect within 20 s");
        assert_eq!(ev.kind(), CmEventKind::Disconnected);
        assert!(conn.is_disconnected());
        drop(conn);
        drop(s.pd);
    });

    let id = Resolved::resolve(addr(RXE_IP, port), Duration::from_secs(5)).expect("resolve");
    assert_eq!(id.device().name(), "rxe0");
    let (mut c, mut qp) = side(id.device());
    let mut private = b"hello-req".to_vec();
    private.extend_from_slice(&c.mr.remote().to_bytes());
    // The receive for the server's "done" message, before connecting.
    id.init_qp(&mut qp).unwrap();
    let rsge = [c.mr.sge(2048..2049).unwrap()];
    qp.post_recv(&[RecvWr::new(3, &rsge)]).unwrap();
    let conn: Connection = id.connect(qp, &params(&private)).expect("connect");
    let mut conn = conn;
    assert_eq!(&conn.private_data()[..9], b"hello-rep");
    c.mr.write_at(0, &pattern(64, 1)).unwrap();
    let sge = [c.mr.sge(0..64).unwrap()];
    conn.qp_mut()
        .post_send(&[SendWr::send(1, &sge).signaled()])
        .unwrap();
    let mut seen = vec![wait_ok(&mut c.cq).wr_id(), wait_ok(&mut c.cq).wr_id()];
    seen.sort();
    assert_eq!(seen, [1, 3], "our SEND and the server's done message");
    let mut got = vec![0u8; 256];
    // The server wrote pattern 2 at the start of our MR: over the first
    // 64 bytes of our own message (sent already).
    c.mr.read_at(0, &mut got).unwrap();
    assert_eq!(
        got,
        pattern(256, 2),
        "the server's RDMA WRITE landed intact"
    );
    conn.disconnect().unwrap();
    server.join().unwrap();
}

#[test]
fn framed_private_data_comes_back_exactly_as_long_as_it_was_sent() {
    use rverbs_cm::private::{frame, unframe};
    use rverbs_cm::{MAX_REP_PRIVATE_DATA, MAX_REQ_PRIVATE_DATA};
    let l = listener();
    let port = l.local_addr().port();
    let server = std::thread::spawn(move || {
        let req = l
            .get_request(Some(Duration::from_secs(20)))
            .unwrap()
            .expect("a request within 20 s");
        // The CM padded it; the frame says how much was sent.
        assert_eq!(req.private_data().len(), MAX_REQ_PRIVATE_DATA);
        assert_eq!(unframe(req.private_data()).unwrap(), b"5byte");
        let (_s, mut qp) = side(req.device());
        req.init_qp(&mut qp).unwrap();
        let rep = frame(&[0, 0, 7], MAX_REP_PRIVATE_DATA).unwrap();
        let mut conn = req.accept(qp, &params(&rep)).expect("accept");
        let ev = conn
            .next_event(Some(Duration::from_secs(20)))
            .unwrap()
            .expect("the client's disconnect within 20 s");
        assert_eq!(ev.kind(), CmEventKind::Disconnected);
    });
    let id = Resolved::resolve(addr(RXE_IP, port), Duration::from_secs(5)).expect("resolve");
    let (_c, mut qp) = side(id.device());
    id.init_qp(&mut qp).unwrap();
    let req = frame(b"5byte", MAX_REQ_PRIVATE_DATA).unwrap();
    let mut conn = id.connect(qp, &params(&req)).expect("connect");
    assert_eq!(conn.private_data().len(), MAX_REP_PRIVATE_DATA);
    // Trailing zeros that were sent are kept; the padding is not.
    assert_eq!(unframe(conn.private_data()).unwrap(), [0, 0, 7]);
    conn.disconnect().unwrap();
    server.join().unwrap();
}

#[test]
fn connecting_where_nobody_listens_is_rejected_within_the_timeout() {
    // A port nobody listens on: bind one, learn its number, close it.
    let port = listener().local_addr().port();
    let id = Resolved::resolve(addr(RXE_IP, port), Duration::from_secs(5)).unwrap();
    let (_s, qp) = side(id.device());
    let t = Instant::now();
    let p = ConnParams {
        timeout: Duration::from_secs(20),
        ..ConnParams::default()
    };
    match id.connect(qp, &p) {
        Err(Error::Cm(CmError::Rejected { reason, .. })) => {
            assert_eq!(reason, 8, "IB_CM_REJ_INVALID_SERVICE_ID")
        }
        Err(Error::Cm(CmError::Unreachable { .. })) => {}
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

#[test]
fn a_rejection_carries_the_servers_reason_and_private_data() {
    let l = listener();
    let port = l.local_addr().port();
    let server = std::thread::spawn(move || {
        let req = l
            .get_request(Some(Duration::from_secs(20)))
            .unwrap()
            .unwrap();
        req.reject(b"go away").unwrap();
    });
    let id = Resolved::resolve(addr(RXE_IP, port), Duration::from_secs(5)).unwrap();
    let (_s, qp) = side(id.device());
    match id.connect(qp, &params(b"hi")) {
        Err(Error::Cm(CmError::Rejected {
            reason,
            private_data,
        })) => {
            assert_eq!(reason, 28, "IB_CM_REJ_CONSUMER_DEFINED");
            assert_eq!(&private_data[..7], b"go away");
        }
        other => panic!("expected the server's rejection, got {other:?}"),
    }
    server.join().unwrap();
}

#[test]
fn binding_a_port_in_use_is_eaddrinuse() {
    let l = listener();
    let err = Listener::bind(l.local_addr(), 8).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EADDRINUSE), "{err}");
}

#[test]
fn an_address_without_an_rdma_device_is_a_clear_error() {
    let err = Listener::bind(addr(NO_RDMA_IP, 0), 8).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err.errno(),
            Some(Errno::ENODEV) | Some(Errno::EADDRNOTAVAIL)
        ),
        "{msg}"
    );
    assert!(msg.contains("rdma_bind_addr"), "{msg}");
}

#[test]
fn an_address_nobody_answers_for_fails_resolution_in_time() {
    // On veth0's subnet, but no host answers ARP for it.
    let t = Instant::now();
    let err = Resolved::resolve(addr("10.0.0.77", 7000), Duration::from_millis(1500))
        .map(|_| ())
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Cm(CmError::AddrError { .. }) | Error::Cm(CmError::RouteError { .. })
        ),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
}

#[test]
fn oversized_private_data_is_refused_before_anything_is_sent() {
    let l = listener();
    let id = Resolved::resolve(l.local_addr(), Duration::from_secs(5)).unwrap();
    let (_s, qp) = side(id.device());
    let err = id.connect(qp, &params(&[0u8; 57])).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // Nothing reached the listener.
    assert!(l
        .get_request(Some(Duration::from_millis(300)))
        .unwrap()
        .is_none());
}

#[test]
fn a_listener_dropped_with_requests_pending_rejects_them() {
    let l = listener();
    let port = l.local_addr().port();
    let client = std::thread::spawn(move || {
        let id = Resolved::resolve(addr(RXE_IP, port), Duration::from_secs(5)).unwrap();
        let (_s, qp) = side(id.device());
        let t = Instant::now();
        let r = id.connect(qp, &params(b"x")).map(|_| ());
        (r, t.elapsed())
    });
    // Wait until the request is pending on the listener, then drop it.
    assert!(
        l.wait(Some(Duration::from_secs(20))).unwrap(),
        "the request arrived"
    );
    drop(l);
    let (r, took) = client.join().unwrap();
    match r {
        Err(Error::Cm(CmError::Rejected { .. } | CmError::Unreachable { .. })) => {}
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(took < Duration::from_secs(15), "{took:?}");
}

/// A UD side on `dev`: PD, CQ, a UD QP and a 4 KiB MR.
fn ud_side(dev: &Device) -> (Side, rverbs::Qp) {
    let ctx = dev.open().expect("open the CM's device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(32).unwrap();
    let mr = pd.alloc_mr(4096, all_access()).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq).cap(QpCap::default()))
        .unwrap();
    (Side { pd, cq, mr }, qp)
}

#[test]
fn ud_through_sidr_datagrams_both_ways_with_private_data() {
    let l = Listener::bind_ud(addr(RXE_IP, 0), 8).expect("listen (UDP port space)");
    let port = l.local_addr().port();
    let server = std::thread::spawn(move || {
        let req = l
            .get_request(Some(Duration::from_secs(20)))
            .unwrap()
            .expect("a SIDR request within 20 s");
        assert_eq!(req.private_data(), &pattern(180, 5)[..], "all 180 bytes");
        let (mut s, mut qp) = ud_side(req.device());
        // RTS with the CM's Q_Key; the receive before the answer.
        req.init_qp(&mut qp).unwrap();
        assert_eq!(qp.state(), QpState::Rts);
        assert_eq!(qp.query().unwrap().0.qkey, Some(UDP_QKEY));
        let sge = [s.mr.sge(0..40 + 64).unwrap()];
        qp.post_recv(&[RecvWr::new(7, &sge)]).unwrap();
        req.accept_ud(&mut qp, b"sidr-rep").expect("accept");
        let wc = wait_ok(&mut s.cq);
        assert_eq!((wc.wr_id(), wc.byte_len()), (7, 40 + 64));
        let mut got = [0u8; 64];
        s.mr.read_at(40, &mut got).unwrap();
        assert_eq!(got.to_vec(), pattern(64, 6), "the client's datagram");
        // Answer the sender: its QPN from the completion (and, as
        // udaddy does, in the immediate), its address from the GRH.
        assert_eq!(wc.imm_data(), Some(wc.src_qp()));
        let grh = Grh::read(&s.mr, 0).unwrap();
        let ah =
            s.pd.create_ah(&grh.reply_attr(s.pd.context(), 1).unwrap())
                .unwrap();
        s.mr.write_at(1024, &pattern(32, 7)).unwrap();
        let sge = [s.mr.sge(1024..1056).unwrap()];
        let wr = SendWr::send(8, &sge)
            .signaled()
            .to(&ah, wc.src_qp(), UDP_QKEY);
        qp.post_send(&[wr]).unwrap();
        assert_eq!(wait_ok(&mut s.cq).wr_id(), 8);
        qp
    });

    let id = Resolved::resolve_ud(addr(RXE_IP, port), Duration::from_secs(5))
        .expect("resolve (UDP port space)");
    let (mut c, mut qp) = ud_side(id.device());
    id.init_qp(&mut qp).unwrap();
    let rsge = [c.mr.sge(2048..2048 + 40 + 32).unwrap()];
    qp.post_recv(&[RecvWr::new(3, &rsge)]).unwrap();
    let peer = id
        .connect_ud(&mut qp, &pattern(180, 5), Duration::from_secs(15))
        .expect("SIDR exchange");
    assert_eq!(&peer.private_data[..8], b"sidr-rep");
    assert_eq!(peer.qkey, UDP_QKEY);
    let ah =
        c.pd.create_ah(&peer.ah_attr)
            .expect("AH from the CM's route");
    c.mr.write_at(0, &pattern(64, 6)).unwrap();
    let sge = [c.mr.sge(0..64).unwrap()];
    let wr = SendWr::send_with_imm(1, &sge, qp.qp_num())
        .signaled()
        .to(&ah, peer.qp_num, peer.qkey);
    qp.post_send(&[wr]).unwrap();
    let mut seen = vec![wait_ok(&mut c.cq).wr_id(), wait_ok(&mut c.cq).wr_id()];
    seen.sort();
    assert_eq!(seen, [1, 3], "our datagram and the server's answer");
    let mut got = [0u8; 32];
    c.mr.read_at(2048 + 40, &mut got).unwrap();
    assert_eq!(got.to_vec(), pattern(32, 7), "the server's datagram");
    let server_qp = server.join().unwrap();
    assert_eq!(
        peer.qp_num,
        server_qp.qp_num(),
        "the CM named the server's QP"
    );
}

#[test]
fn ud_sidr_errors_are_typed_nobody_listening_rejection_and_misuse() {
    // Nobody listens on the port: SIDR status 1 (unsupported).
    let port = Listener::bind_ud(addr(RXE_IP, 0), 8)
        .unwrap()
        .local_addr()
        .port();
    let id = Resolved::resolve_ud(addr(RXE_IP, port), Duration::from_secs(5)).unwrap();
    let (_s, mut qp) = ud_side(id.device());
    let t = Instant::now();
    match id.connect_ud(&mut qp, b"x", Duration::from_secs(20)) {
        Err(Error::Cm(CmError::Rejected { reason, .. })) => assert_eq!(reason, 1),
        Err(Error::Cm(CmError::Unreachable { .. })) => {}
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());

    // The application rejects: SIDR status 2 with its private data.
    let l = Listener::bind_ud(addr(RXE_IP, 0), 8).unwrap();
    let port = l.local_addr().port();
    let server = std::thread::spawn(move || {
        let req = l
            .get_request(Some(Duration::from_secs(20)))
            .unwrap()
            .unwrap();
        // An RC QP cannot answer a datagram request.
        let (_s, mut rc) = side(req.device());
        let err = req.init_qp(&mut rc).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        req.reject(b"no room").unwrap();
    });
    // Oversized private data is refused before anything is sent (the
    // server's first request is the next one).
    let id = Resolved::resolve_ud(addr(RXE_IP, port), Duration::from_secs(5)).unwrap();
    let (_s, mut qp) = ud_side(id.device());
    match id.connect_ud(&mut qp, &[1u8; 181], Duration::from_secs(5)) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.message().contains("181"), "{m}");
            assert_eq!(m.kind(), rverbs::InvalidKind::TooLarge);
        }
        other => panic!("181 bytes of private data: {other:?}"),
    }
    let id = Resolved::resolve_ud(addr(RXE_IP, port), Duration::from_secs(5)).unwrap();
    match id.connect_ud(&mut qp, b"hi", Duration::from_secs(20)) {
        Err(Error::Cm(CmError::Rejected {
            reason,
            private_data,
        })) => {
            assert_eq!(reason, 2, "IB_SIDR_REJECT");
            assert_eq!(&private_data[..7], b"no room");
        }
        other => panic!("expected the server's rejection, got {other:?}"),
    }
    server.join().unwrap();
    // An RC id refuses a UD QP, and a datagram id the RC path.
    let l = listener();
    let id = Resolved::resolve(l.local_addr(), Duration::from_secs(5)).unwrap();
    let err = id
        .connect_ud(&mut qp, b"", Duration::from_secs(1))
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

#[test]
fn a_peer_killed_mid_transfer_leaves_a_disconnect_and_error_completions() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_cm_peer"))
        .arg(RXE_IP)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the peer process");
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let port: u16 = line
        .strip_prefix("listening ")
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("peer said {line:?}"));
    let id = Resolved::resolve(addr(RXE_IP, port), Duration::from_secs(5)).unwrap();
    let (mut c, mut qp) = side(id.device());
    // Receives the peer never sends to: outstanding when it dies.
    id.init_qp(&mut qp).unwrap();
    let rsge = [c.mr.sge(0..64).unwrap()];
    for i in 0..8 {
        qp.post_recv(&[RecvWr::new(RECV_BASE + i, &rsge)]).unwrap();
    }
    let mut conn = id.connect(qp, &params(b"")).expect("connect");
    let peer_mr = RemoteMr::from_bytes(conn.private_data()[..20].try_into().unwrap());
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "connected");

    // RDMA WRITEs, 4 in flight; after 40 succeeded the peer is killed.
    let sge = [c.mr.sge(0..4096).unwrap()];
    let (mut posted, mut done, mut ok, mut write_errors) = (0u64, 0u64, 0u64, 0u64);
    let mut flushed_recvs = 0;
    let mut killed = false;
    let mut disconnected = false;
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        while posted - done < 4 && !conn.is_disconnected() {
            let wr = peer_mr.rdma_write(posted, &sge).unwrap().signaled();
            if conn.qp_mut().post_send(&[wr]).is_err() {
                break;
            }
            posted += 1;
        }
        let mut wc = [rverbs::Wc::default(); 8];
        let n = c.cq.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            if w.wr_id() >= RECV_BASE {
                assert_eq!(w.status(), WcStatus::WR_FLUSH_ERR, "{w:?}");
                flushed_recvs += 1;
                continue;
            }
            done += 1;
            if w.is_success() {
                ok += 1;
            } else {
                write_errors += 1;
            }
        }
        if !killed && ok >= 40 {
            child.kill().unwrap();
            killed = true;
        }
        if let Some(ev) = conn.next_event(Some(Duration::ZERO)).unwrap() {
            assert_eq!(ev.kind(), CmEventKind::Disconnected, "{ev:?}");
            disconnected = true;
        }
        if disconnected && done == posted && flushed_recvs == 8 {
            break;
        }
    }
    child.wait().unwrap();
    assert!(killed, "40 WRITEs succeeded before the kill ({ok})");
    assert!(
        disconnected,
        "the survivor saw the disconnect within 60 s (posted {posted}, done {done})"
    );
    assert_eq!(
        done, posted,
        "every WRITE completed (ok {ok}, in error {write_errors})"
    );
    assert_eq!(flushed_recvs, 8, "the posted receives completed flushed");
    assert_eq!(conn.qp().state(), QpState::Err);
}

/// `wr_id`s from here on are receives.
const RECV_BASE: u64 = 1 << 32;
