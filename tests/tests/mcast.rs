//! Multicast against the real kernel (VM, rxe0 on veth0 = 10.0.0.1, RoCE
//! v2): ATTACH_MCAST / DETACH_MCAST and their errnos, joins and leaves
//! through the rdma_cm (the MULTICAST_JOIN event's group address vector,
//! QPN 0xFFFFFF and Q_Key), and datagrams sent to a group arriving at the
//! QPs attached to it, and no longer once they are detached.
//!
//! On RoCE the host's IP stack must take the group's datagrams before rxe
//! sees them: a full-member join through the rdma_cm joins the netdev to
//! the IP group (IGMP); a bare attach does not, so the verbs-only test
//! joins it with an ordinary UDP socket.

#![forbid(unsafe_code)]

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use rverbs::{
    AccessFlags, Cq, Errno, Gid, Grh, InvalidKind, Mr, PageBuf, Pd, Qp, QpCap, QpInitAttr, QpType,
    RecvWr, SendWr, UdSendWr, Wc,
};
use rverbs_cm::{JoinMode, McastGroup, McastId, MCAST_QPN, UDP_QKEY};

/// The address of rxe0's netdev in the VM.
const RXE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const STEP: Duration = Duration::from_secs(10);
const LEN: usize = 256;

fn group(last: u8) -> SocketAddr {
    SocketAddr::from(([239, 1, 9, last], 0))
}

fn src() -> Option<SocketAddr> {
    Some(SocketAddr::from((RXE_IP, 0)))
}

/// One UD endpoint: PD, CQ, QP and a buffer of 8 receive slots then a
/// send area.
struct End {
    pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr<PageBuf>,
}

const SLOT: usize = Grh::LEN + LEN;

fn end_on(dev: &rverbs::Device) -> End {
    let ctx = dev.open().expect("open the CM's device");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(32).unwrap();
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq).cap(QpCap::default()))
        .unwrap();
    let mr = pd.alloc_mr(SLOT * 9, AccessFlags::LOCAL_WRITE).unwrap();
    End { pd, cq, qp, mr }
}

impl End {
    fn post_recvs(&mut self, n: usize) {
        for i in 0..n {
            let sge = [self.mr.sge(i * SLOT..(i + 1) * SLOT).unwrap()];
            self.qp.post_recv(&[RecvWr::new(i as u64, &sge)]).unwrap();
        }
    }

    /// Sends `n` datagrams of LEN bytes (byte `k` of datagram `i`: `seed +
    /// i + k`) to the group through `ah`, and waits for their completions.
    fn send(&mut self, ah: &rverbs::Ah, qpn: u32, qkey: u32, n: usize, seed: u8) {
        for i in 0..n {
            let at = SLOT * 8;
            let data: Vec<u8> = (0..LEN)
                .map(|k| seed.wrapping_add(i as u8).wrapping_add(k as u8))
                .collect();
            self.mr.write_at(at, &data).unwrap();
            let sge = [self.mr.sge(at..at + LEN).unwrap()];
            let me = self.qp.qp_num();
            self.qp
                .post_send(&[SendWr::send_with_imm(100 + i as u64, &sge, me)
                    .signaled()
                    .to(ah, qpn, qkey)])
                .unwrap();
            let mut wc = [Wc::default()];
            self.cq
                .poll_until(&mut wc, 1, STEP)
                .expect("send completion");
            assert!(wc[0].is_success(), "send: {}", wc[0].status().as_str());
        }
    }

    /// The receive completions within `wait` (at most 8).
    fn received(&mut self, want: usize, wait: Duration) -> Vec<Wc> {
        let mut wc = vec![Wc::default(); 8];
        let got = self.cq.poll_until(&mut wc, want, wait).unwrap_or(0);
        let mut more = self.cq.poll(&mut wc[got..]).unwrap();
        more += got;
        wc.truncate(more);
        wc
    }

    /// Checks that `wc` are `n` datagrams from `sender` with the pattern
    /// of `seed`, in order.
    fn check(&self, wc: &[Wc], n: usize, sender: u32, seed: u8) {
        assert_eq!(wc.len(), n, "datagrams received");
        for (i, w) in wc.iter().enumerate() {
            assert!(w.is_success(), "receive: {}", w.status().as_str());
            assert_eq!(w.byte_len() as usize, SLOT, "GRH + payload");
            assert_eq!(w.src_qp(), sender, "source QP");
            assert_eq!(w.imm_data(), Some(sender), "immediate: the sender's QPN");
            let slot = w.wr_id() as usize;
            let mut got = vec![0u8; LEN];
            self.mr.read_at(slot * SLOT + Grh::LEN, &mut got).unwrap();
            let want: Vec<u8> = (0..LEN)
                .map(|k| seed.wrapping_add(i as u8).wrapping_add(k as u8))
                .collect();
            assert_eq!(got, want, "datagram {i}'s bytes");
            let grh = Grh::read(&self.mr, slot * SLOT).unwrap();
            assert_eq!(
                grh.dgid.to_ipv4().map(|a| a.is_multicast()),
                Some(true),
                "the GRH names the group"
            );
        }
    }
}

#[test]
fn attach_and_detach_reach_the_kernel_with_its_errnos() {
    let dev = rverbs::device("rxe0").expect("rxe0");
    let e = end_on(&dev);
    let mgid = Gid::from_ipv4(Ipv4Addr::new(239, 1, 9, 200));
    assert!(mgid.is_multicast());

    // Refused before any command.
    let rc =
        e.pd.create_qp(&QpInitAttr::new(QpType::Rc, &e.cq).cap(QpCap::default()))
            .unwrap();
    let err = rc.attach_mcast(&mgid, 0).unwrap_err();
    assert_eq!(err.invalid_kind(), Some(InvalidKind::WrongUse), "{err}");
    let unicast = Gid::from_ipv4(RXE_IP);
    assert!(!unicast.is_multicast());
    let err = e.qp.attach_mcast(&unicast, 0).unwrap_err();
    assert!(err.to_string().contains("not a multicast GID"), "{err}");

    // The kernel's answers: attaching twice is fine, a detach of a group
    // not attached is EINVAL.
    e.qp.attach_mcast(&mgid, 0).expect("attach");
    e.qp.attach_mcast(&mgid, 0).expect("attach again: no error");
    let v6 = Gid::from("ff0e::1:2".parse::<std::net::Ipv6Addr>().unwrap());
    e.qp.attach_mcast(&v6, 0).expect("attach an IPv6 group");
    e.qp.detach_mcast(&mgid, 0).expect("detach");
    let err = e.qp.detach_mcast(&mgid, 0).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EINVAL), "detach twice: {err}");
    let other = Gid::from_ipv4(Ipv4Addr::new(239, 1, 9, 201));
    let err = e.qp.detach_mcast(&other, 0).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EINVAL), "never attached: {err}");
    e.qp.detach_mcast(&v6, 0).expect("detach the IPv6 group");
    // Dropping the QP while attached is fine (the kernel detaches it).
    e.qp.attach_mcast(&mgid, 0).unwrap();
}

#[test]
fn destroying_an_attached_qp_is_refused_and_hands_it_back() {
    let dev = rverbs::device("rxe0").expect("rxe0");
    let e = end_on(&dev);
    let mgid = Gid::from_ipv4(Ipv4Addr::new(239, 1, 9, 202));
    e.qp.attach_mcast(&mgid, 0).expect("attach");
    let qpn = e.qp.qp_num();
    let refused = e.qp.destroy().expect_err("destroyed while attached");
    assert_eq!(
        refused.error.errno(),
        Some(Errno::EBUSY),
        "{}",
        refused.error
    );
    // Still the same live QP: it detaches, and then it goes.
    let qp = refused.qp;
    assert_eq!(qp.qp_num(), qpn);
    qp.detach_mcast(&mgid, 0)
        .expect("detach the QP handed back");
    qp.destroy().expect("destroy once detached");
}

/// A sender's send-only join: its address vector and the remote QPN and
/// Q_Key a datagram to the group takes.
fn sender(g: SocketAddr) -> (McastId, End, McastGroup, rverbs::Ah) {
    let mut id = McastId::resolve_from(src(), g, STEP).expect("resolve the group");
    let mut s = end_on(id.device());
    id.init_qp(&mut s.qp).unwrap();
    let m = id
        .join(g, JoinMode::SendOnlyFullMember, Some(&mut s.qp), STEP)
        .expect("send-only join");
    assert_eq!(m.attached_qpn(), None, "a send-only join attaches nothing");
    let ah = s.pd.create_ah(m.ah_attr()).expect("the group's AH");
    (id, s, m, ah)
}

#[test]
fn joined_qps_receive_the_groups_datagrams_until_they_leave() {
    let g = group(1);
    // The receiver: full member, its QP attached by the join.
    let mut rid = McastId::resolve_from(src(), g, STEP).expect("resolve the group");
    assert_eq!(rid.device().name(), "rxe0");
    assert_eq!(rid.local_addr().map(|a| a.ip()), Some(RXE_IP.into()));
    let mut r = end_on(rid.device());
    rid.init_qp(&mut r.qp).unwrap();
    assert_eq!(r.qp.query().unwrap().0.qkey, Some(UDP_QKEY));
    r.post_recvs(8);
    let m = rid
        .join(g, JoinMode::FullMember, Some(&mut r.qp), STEP)
        .expect("full-member join");
    // What the MULTICAST_JOIN event carried, as mckey prints and uses it.
    assert_eq!(m.remote_qpn(), MCAST_QPN);
    assert_eq!(m.qkey(), UDP_QKEY);
    assert_eq!(m.mgid(), Gid::from_ipv4(Ipv4Addr::new(239, 1, 9, 1)));
    assert_eq!(m.addr(), g);
    let grh = m.ah_attr().grh.expect("a RoCE group's AH has a GRH");
    assert_eq!(grh.dgid, m.mgid());
    assert_eq!(m.attached_qpn(), Some(r.qp.qp_num()));

    let (mut sid, mut s, sm, ah) = sender(g);
    assert_eq!(sm.mgid(), m.mgid());
    let sender_qpn = s.qp.qp_num();
    s.send(&ah, sm.remote_qpn(), sm.qkey(), 3, 7);
    let wc = r.received(3, STEP);
    r.check(&wc, 3, sender_qpn, 7);

    // A wrong Q_Key is dropped by the receiver.
    s.send(&ah, MCAST_QPN, UDP_QKEY ^ 1, 1, 9);
    assert!(r.received(1, Duration::from_secs(1)).is_empty());

    // Leaving with another QP is refused; leaving detaches and leaves.
    let mut other = end_on(rid.device());
    let err = rid.leave(m.clone(), Some(&mut other.qp)).unwrap_err();
    assert_eq!(err.invalid_kind(), Some(InvalidKind::WrongUse), "{err}");
    rid.leave(m.clone(), Some(&mut r.qp)).expect("leave");
    // The QP is detached: a detach now is the kernel's EINVAL.
    let err = r.qp.detach_mcast(&m.mgid(), m.mlid()).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EINVAL), "{err}");
    let err = rid.leave(m, Some(&mut r.qp)).unwrap_err();
    assert_eq!(
        err.invalid_kind(),
        Some(InvalidKind::WrongUse),
        "left twice: {err}"
    );
    s.send(&ah, sm.remote_qpn(), sm.qkey(), 2, 11);
    assert!(
        r.received(1, Duration::from_secs(1)).is_empty(),
        "datagrams after the leave"
    );
    sid.leave(sm, Some(&mut s.qp)).expect("the sender leaves");
}

#[test]
fn a_bare_attach_receives_once_the_netdev_is_in_the_ip_group() {
    let g = group(2);
    let Some(SocketAddr::V4(g4)) = Some(g) else {
        unreachable!()
    };
    // The IP group joined on rxe0's netdev, as the rdma_cm's full-member
    // join does (IGMP), by an ordinary socket.
    let sock = UdpSocket::bind((RXE_IP, 0)).unwrap();
    sock.join_multicast_v4(g4.ip(), &RXE_IP)
        .expect("join the IP group on veth0");

    let (_sid, mut s, sm, ah) = sender(g);
    let dev = rverbs::device("rxe0").unwrap();
    let mut r = end_on(&dev);
    let port = sm.ah_attr().port_num;
    r.qp.ready_ud(port, UDP_QKEY, 0).unwrap();
    r.post_recvs(8);
    r.qp.attach_mcast(&sm.mgid(), sm.mlid()).expect("attach");
    s.send(&ah, MCAST_QPN, UDP_QKEY, 2, 21);
    let wc = r.received(2, STEP);
    r.check(&wc, 2, s.qp.qp_num(), 21);
    r.qp.detach_mcast(&sm.mgid(), sm.mlid()).expect("detach");
    s.send(&ah, MCAST_QPN, UDP_QKEY, 1, 31);
    assert!(
        r.received(1, Duration::from_secs(1)).is_empty(),
        "datagrams after the detach"
    );
}

#[test]
fn joins_refuse_what_cannot_work_before_any_command() {
    let err = McastId::resolve_from(src(), "10.0.0.2:0".parse().unwrap(), STEP).unwrap_err();
    assert!(err.to_string().contains("not a multicast address"), "{err}");
    let g = group(3);
    let err = rverbs_cm::CmId::new()
        .unwrap()
        .resolve_mcast(g, STEP)
        .unwrap_err();
    assert_eq!(err.invalid_kind(), Some(InvalidKind::WrongUse), "{err}");
    // The VM has no default route and no multicast route: unbound, the
    // group is unreachable (RESOLVE_ADDR itself fails).
    let err = rverbs_cm::CmId::new_ud()
        .unwrap()
        .resolve_mcast(g, STEP)
        .unwrap_err();
    assert_eq!(err.errno(), Some(Errno::ENETUNREACH), "unbound: {err}");
    let id = McastId::resolve_from(src(), g, STEP);
    let mut id = id.expect("resolve from rxe0's address");
    let e = end_on(id.device());
    let mut rc =
        e.pd.create_qp(&QpInitAttr::new(QpType::Rc, &e.cq).cap(QpCap::default()))
            .unwrap();
    let err = id
        .join(g, JoinMode::FullMember, Some(&mut rc), STEP)
        .unwrap_err();
    assert_eq!(err.invalid_kind(), Some(InvalidKind::WrongUse), "{err}");
    let err = id
        .join(
            "10.0.0.9:0".parse().unwrap(),
            JoinMode::FullMember,
            None,
            STEP,
        )
        .unwrap_err();
    assert!(err.to_string().contains("not a multicast address"), "{err}");
    // Without a QP a join attaches nothing and still completes.
    let m = id.join(g, JoinMode::FullMember, None, STEP).expect("join");
    assert_eq!(m.attached_qpn(), None);
    assert_eq!(m.remote_qpn(), MCAST_QPN);
    id.leave(m, None).expect("leave");
}

#[test]
fn tokio_awaits_the_join_as_the_blocking_api_does() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    rt.block_on(async {
        let g = group(4);
        let mut id = rverbs_cm::tokio::resolve_mcast(src(), g, STEP)
            .await
            .expect("resolve, awaited");
        let mut r = end_on(id.device());
        id.init_qp(&mut r.qp).unwrap();
        r.post_recvs(8);
        let m =
            rverbs_cm::tokio::join_mcast(&mut id, g, JoinMode::FullMember, Some(&mut r.qp), STEP)
                .await
                .expect("join, awaited");
        assert_eq!(m.remote_qpn(), MCAST_QPN);
        assert_eq!(m.attached_qpn(), Some(r.qp.qp_num()));
        let (_sid, mut s, sm, ah) = sender(g);
        s.send(&ah, sm.remote_qpn(), sm.qkey(), 2, 41);
        let wc = r.received(2, STEP);
        r.check(&wc, 2, s.qp.qp_num(), 41);
        id.leave(m, Some(&mut r.qp)).unwrap();
    });
}

#[test]
fn a_tokio_join_dropped_mid_join_leaves_nothing_for_the_next_join() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let first = group(31);
        let second = group(32);
        let mut id = rverbs_cm::tokio::resolve_mcast(src(), first, STEP)
            .await
            .expect("resolve");
        let mut r = end_on(id.device());
        id.init_qp(&mut r.qp).unwrap();
        // Poll the join once (its command goes out, its event is not in
        // yet), then drop it. On RoCE the kernel answers a join from a
        // work item, so the first poll is nearly always too early; a join
        // that did complete at once is left and tried again.
        let mut cancelled = false;
        for _ in 0..20 {
            let join = rverbs_cm::tokio::join_mcast(
                &mut id,
                first,
                JoinMode::FullMember,
                Some(&mut r.qp),
                STEP,
            );
            let done = tokio::select! {
                biased;
                g = join => Some(g),
                _ = std::future::ready(()) => None,
            };
            match done {
                None => {
                    cancelled = true;
                    break;
                }
                Some(g) => id.leave(g.expect("join"), Some(&mut r.qp)).unwrap(),
            }
        }
        assert!(cancelled, "every join completed within its first poll");
        // Let the abandoned join's answer come, had it not been left.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let m = rverbs_cm::tokio::join_mcast(
            &mut id,
            second,
            JoinMode::FullMember,
            Some(&mut r.qp),
            STEP,
        )
        .await
        .expect("the second join");
        let want = match second {
            SocketAddr::V4(a) => Gid::from_ipv4(*a.ip()),
            SocketAddr::V6(_) => unreachable!(),
        };
        assert_eq!(m.mgid(), want, "the second join got another group's answer");
        assert_eq!(m.addr(), second);
        // Nothing of the first group is left queued on the id.
        let ev = id.next_event(Some(Duration::from_millis(300))).unwrap();
        assert!(ev.is_none(), "an event was left over: {ev:?}");
        // The QP receives the second group's datagrams, not the first's.
        r.post_recvs(8);
        let (_sid, mut s, sm, ah) = sender(second);
        s.send(&ah, sm.remote_qpn(), sm.qkey(), 2, 57);
        let wc = r.received(2, STEP);
        r.check(&wc, 2, s.qp.qp_num(), 57);
        let (_fid, mut f, fm, fah) = sender(first);
        f.send(&fah, fm.remote_qpn(), fm.qkey(), 1, 9);
        let wc = r.received(1, Duration::from_millis(500));
        assert!(wc.is_empty(), "the left group's datagram arrived: {wc:?}");
        id.leave(m, Some(&mut r.qp)).unwrap();
    });
}
