//! rdma_cm SET_OPTION against the real kernel (VM, rxe0 on veth0 =
//! 10.0.0.1): each option's effect read back from the kernel. The type of
//! service becomes the traffic class of both connected QPs' address
//! vectors (QUERY_QP), the ACK timeout the QP's RTS timeout; REUSEADDR and
//! AFONLY decide which binds of one port succeed, with the errnos the
//! kernel's port check (`cma_check_port` in drivers/infiniband/core/cma.c)
//! gives; bad values are refused before any command.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::time::Duration;

use rverbs::{Device, Errno, Error, InvalidKind, QpCap, QpInitAttr, QpType};
use rverbs_cm::{CmId, ConnParams, ConnRequest, Connection, Listener, Resolved};

/// The address of rxe0's netdev in the VM.
const RXE_IP: &str = "10.0.0.1";
const STEP: Duration = Duration::from_secs(5);

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// An RC or UD QP on `dev` (the QP holds its PD, CQ and context).
fn qp_on(dev: &Device, t: QpType) -> rverbs::Qp {
    let ctx = dev.open().expect("open the CM's device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    pd.create_qp(&QpInitAttr::new(t, &cq).cap(QpCap::default()))
        .unwrap()
}

fn params() -> ConnParams {
    ConnParams {
        timeout: Duration::from_secs(15),
        ..ConnParams::default()
    }
}

/// Connects `client` (an id prepared by the caller, not yet resolved) to
/// a fresh listener on rxe0's address; `on_resolved` runs on the client's
/// resolved id before it connects, `on_request` on the server's request
/// before it accepts. Returns (client, server).
fn connect_pair(
    client: CmId,
    on_resolved: impl FnOnce(&Resolved),
    on_request: impl FnOnce(&ConnRequest) + Send + 'static,
) -> (Connection, Connection) {
    let l = Listener::bind(addr(&format!("{RXE_IP}:0")), 4).expect("listen on rxe0's address");
    let dst = l.local_addr();
    let server = std::thread::spawn(move || {
        let req = l
            .get_request(Some(Duration::from_secs(20)))
            .unwrap()
            .expect("a request within 20 s");
        on_request(&req);
        let qp = qp_on(req.device(), QpType::Rc);
        req.accept(qp, &params()).expect("accept")
    });
    let id = client.resolve(dst, STEP).expect("resolve rxe0's listener");
    on_resolved(&id);
    let qp = qp_on(id.device(), QpType::Rc);
    let c = id.connect(qp, &params()).expect("connect");
    let s = server.join().expect("the server thread");
    (c, s)
}

/// The traffic class of `c`'s QP's address vector, as QUERY_QP reports it.
fn traffic_class(c: &Connection) -> u8 {
    let (a, _, _) = c.qp().query().unwrap();
    let ah = a.ah_attr.expect("QUERY_QP's address vector");
    ah.grh
        .expect("a RoCE address vector has a GRH")
        .traffic_class
}

/// The local ACK timeout of `c`'s QP, as QUERY_QP reports it.
fn ack_timeout(c: &Connection) -> u8 {
    c.qp().query().unwrap().0.timeout.unwrap()
}

#[test]
fn tos_set_before_resolution_is_both_connected_qps_traffic_class() {
    // Not set: the port's default_roce_tos, 0 unless configfs changed it.
    let (c, s) = connect_pair(CmId::new().unwrap(), |_| {}, |_| {});
    assert_eq!((traffic_class(&c), traffic_class(&s)), (0, 0));
    drop((c, s));
    // DSCP 26 (AF31) with ECN bits 00, and a value using every bit.
    for tos in [0x68, 0xff] {
        let id = CmId::new().unwrap();
        id.set_tos(tos).unwrap();
        let (c, s) = connect_pair(id, |_| {}, |_| {});
        // The active side's path carries it; the passive side's QP takes
        // the traffic class of the request's path.
        assert_eq!(traffic_class(&c), tos, "active side");
        assert_eq!(traffic_class(&s), tos, "passive side");
    }
}

#[test]
fn tos_reaches_the_address_vector_of_a_datagram_peer() {
    let l = Listener::bind_ud(addr(&format!("{RXE_IP}:0")), 4).unwrap();
    let dst = l.local_addr();
    let server = std::thread::spawn(move || {
        let req = l
            .get_request(Some(Duration::from_secs(20)))
            .unwrap()
            .unwrap();
        let mut qp = qp_on(req.device(), QpType::Ud);
        req.accept_ud(&mut qp, b"").unwrap();
        qp
    });
    let id = CmId::new_ud().unwrap();
    id.set_tos(0x2e).unwrap();
    let r = id.resolve(dst, STEP).unwrap();
    let mut qp = qp_on(r.device(), QpType::Ud);
    let peer = r.connect_ud(&mut qp, b"", STEP).unwrap();
    let grh = peer.ah_attr.grh.expect("a RoCE address vector has a GRH");
    assert_eq!(grh.traffic_class, 0x2e);
    let _server_qp = server.join().unwrap();
}

#[test]
fn ack_timeout_is_each_sides_qp_timeout_at_rts() {
    // Not set: what the kernel's CM derives from the path.
    let (c, s) = connect_pair(CmId::new().unwrap(), |_| {}, |_| {});
    let (dc, ds) = (ack_timeout(&c), ack_timeout(&s));
    drop((c, s));
    assert!(
        dc != 22 && ds != 12,
        "defaults {dc}, {ds}: not the values set"
    );
    // Set on the resolved id (the QP only) and on the request.
    let (c, s) = connect_pair(
        CmId::new().unwrap(),
        |r| r.set_ack_timeout(22).unwrap(),
        |req| req.set_ack_timeout(12).unwrap(),
    );
    assert_eq!(ack_timeout(&c), 22, "active side");
    assert_eq!(ack_timeout(&s), 12, "passive side");
    drop((c, s));
    // 0, no timeout at all, on the resolved id (before resolution the
    // kernel would derive the path's packet lifetime as 0 - 1).
    let (c, _s) = connect_pair(
        CmId::new().unwrap(),
        |r| r.set_ack_timeout(0).unwrap(),
        |_| {},
    );
    assert_eq!(ack_timeout(&c), 0, "active side");
    drop(c);
    // Set before resolution (the path's packet lifetime follows it), the
    // passive side left alone; up to the largest, 31.
    for t in [14, 31] {
        let id = CmId::new().unwrap();
        id.set_ack_timeout(t).unwrap();
        let (c, s) = connect_pair(id, |_| {}, |_| {});
        assert_eq!(ack_timeout(&c), t, "active side");
        let _ = s;
    }
    eprintln!("defaults: active {dc}, passive {ds}");
}

/// A fresh id bound to `a`, with REUSEADDR set first if `reuse`.
fn bound(a: SocketAddr, reuse: bool) -> rverbs::Result<CmId> {
    let mut id = CmId::new()?;
    if reuse {
        id.set_reuseaddr(true)?;
    }
    id.bind(a)?;
    Ok(id)
}

fn errno_of<T: std::fmt::Debug>(r: rverbs::Result<T>) -> Errno {
    let e = r.expect_err("the kernel refuses");
    e.errno()
        .unwrap_or_else(|| panic!("a kernel error, not {e}"))
}

#[test]
fn reuseaddr_lets_ids_share_an_address_and_port_until_one_listens() {
    // Without it: the same address and port is EADDRINUSE; the wildcard
    // beside a specific address EADDRNOTAVAIL.
    let first = bound(addr(&format!("{RXE_IP}:0")), false).unwrap();
    let a = first.local_addr().unwrap();
    assert_ne!(a.port(), 0);
    assert_eq!(errno_of(bound(a, false)), Errno::EADDRINUSE);
    assert_eq!(errno_of(bound(a, true)), Errno::EADDRINUSE, "one side only");
    let any = SocketAddr::new(addr("0.0.0.0:0").ip(), a.port());
    assert_eq!(errno_of(bound(any, false)), Errno::EADDRNOTAVAIL);
    drop(first);

    // With it on both: both binds succeed, a third without it fails.
    let one = bound(addr(&format!("{RXE_IP}:0")), true).unwrap();
    let a = one.local_addr().unwrap();
    let two = bound(a, true).expect("a second bind with REUSEADDR on both");
    assert_eq!(two.local_addr(), Some(a));
    assert_eq!(errno_of(bound(a, false)), Errno::EADDRINUSE);
    // A listener's port is its own: listening while another id holds the
    // address is EADDRINUSE...
    assert_eq!(errno_of(one.listen(4)), Errno::EADDRINUSE);
    // ...and once alone it listens, and no id shares its port any more.
    let l = two.listen(4).expect("listen once the other id is gone");
    assert_eq!(l.local_addr(), a);
    assert_eq!(errno_of(bound(a, true)), Errno::EADDRINUSE);
    drop(l);

    // Turning it on after the bind is taken; turning it off is EINVAL.
    let mut id = CmId::new().unwrap();
    id.bind(addr(&format!("{RXE_IP}:0"))).unwrap();
    let e = id.set_reuseaddr(false).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    assert!(e.to_string().contains("RDMA_OPTION_ID_REUSEADDR"), "{e}");
    id.set_reuseaddr(true).unwrap();
}

#[test]
fn afonly_decides_whether_an_ipv6_wildcard_takes_the_ipv4_port() {
    let v6_any = |port: u16| SocketAddr::new(addr("[::]:0").ip(), port);
    let v4 = |port: u16| addr(&format!("{RXE_IP}:{port}"));

    // AF-only: the IPv4 bind of the same port succeeds, and both listen.
    let mut six = CmId::new().unwrap();
    six.set_afonly(true).unwrap();
    let port = six.bind(v6_any(0)).unwrap().port();
    let mut four = CmId::new().unwrap();
    four.bind(v4(port))
        .expect("IPv4 beside an AF-only IPv6 wildcard");
    let l6 = six.listen(4).unwrap();
    let l4 = four.listen(4).unwrap();
    assert_eq!(
        (l6.local_addr().port(), l4.local_addr().port()),
        (port, port)
    );
    drop((l6, l4));

    // Not AF-only: the IPv6 wildcard covers IPv4, whose bind meets a
    // wildcard in the port's list: EADDRNOTAVAIL (not EADDRINUSE).
    let mut six = CmId::new().unwrap();
    six.set_afonly(false).unwrap();
    let port = six.bind(v6_any(0)).unwrap().port();
    assert_eq!(errno_of(bound(v4(port), false)), Errno::EADDRNOTAVAIL);
    let any4 = SocketAddr::new(addr("0.0.0.0:0").ip(), port);
    assert_eq!(errno_of(bound(any4, false)), Errno::EADDRNOTAVAIL);
    drop(six);

    // Not set: an IPv6 id follows net.ipv6.bindv6only.
    let v6only = std::fs::read_to_string("/proc/sys/net/ipv6/bindv6only")
        .expect("IPv6 in the guest kernel")
        .trim()
        .to_string();
    let mut six = CmId::new().unwrap();
    let port = six.bind(v6_any(0)).unwrap().port();
    let r = bound(v4(port), false);
    match v6only.as_str() {
        "0" => assert_eq!(errno_of(r), Errno::EADDRNOTAVAIL),
        _ => assert!(r.is_ok(), "bindv6only={v6only}: {r:?}"),
    }
    // Still taken once bound (the kernel takes it until the id resolves
    // or listens).
    six.set_afonly(true).unwrap();
}

#[test]
fn bad_option_values_and_misuse_are_clear_errors() {
    // Refused before any command: the id is untouched and still usable.
    let id = CmId::new().unwrap();
    for t in [32, 255] {
        let e = id.set_ack_timeout(t).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert_eq!(e.invalid_kind(), Some(InvalidKind::TooLarge), "{e}");
        assert!(e.to_string().contains("ack timeout"), "{e}");
    }
    id.set_ack_timeout(31).unwrap();
    let ud = CmId::new_ud().unwrap();
    let e = ud.set_ack_timeout(14).unwrap_err();
    assert_eq!(e.invalid_kind(), Some(InvalidKind::WrongUse), "{e}");
    ud.set_tos(0x10).unwrap();
    // The kernel's refusals: a second bind is EINVAL.
    let mut id = CmId::new().unwrap();
    id.bind(addr(&format!("{RXE_IP}:0"))).unwrap();
    let e = id.bind(addr(&format!("{RXE_IP}:0"))).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    // On a request, as on an id.
    let l = Listener::bind(addr(&format!("{RXE_IP}:0")), 4).unwrap();
    let dst = l.local_addr();
    let server = std::thread::spawn(move || {
        let req = l
            .get_request(Some(Duration::from_secs(20)))
            .unwrap()
            .unwrap();
        let e = req.set_ack_timeout(40).unwrap_err();
        assert_eq!(e.invalid_kind(), Some(InvalidKind::TooLarge), "{e}");
        req.reject(b"").unwrap();
    });
    let r = Resolved::resolve(dst, STEP).unwrap();
    let e = r.set_ack_timeout(32).unwrap_err();
    assert_eq!(e.invalid_kind(), Some(InvalidKind::TooLarge), "{e}");
    let qp = qp_on(r.device(), QpType::Rc);
    let e = r.connect(qp, &params()).unwrap_err();
    assert!(
        matches!(e, Error::Cm(rverbs_cm::CmError::Rejected { .. })),
        "{e}"
    );
    server.join().unwrap();
}
