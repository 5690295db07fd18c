//! UD on a real rxe device: address handles (creation and validation),
//! sends addressed with them, the 40-byte GRH at the start of every
//! receive, Q_Key filtering, the MTU bound, and the post-time refusals.

#![forbid(unsafe_code)]

use std::io::IoSlice;
use std::time::Duration;

use rverbs::{
    AccessFlags, Ah, AhAttr, Context, Cq, Error, Gid, GlobalRoute, Grh, NetworkHeader, Pd,
    PostError, Qp, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendWr, UdSendWr, WcOpcode,
    WcStatus, WrOpcode,
};
use verbs_tests::{assert_quiet, pattern, wait, wait_ok, Pair};

const QKEY: u32 = 0x1234_5678;
const GRH: usize = Grh::LEN;

/// Bytes between the IPv4 header and the UD payload (UDP 8, BTH 12,
/// DETH 8) plus the ICRC after it: what the IPv4 total length adds.
const ROCE_V2_UD_OVERHEAD: u16 = 8 + 12 + 8 + 4;

/// UD QPs on one device, each with its own CQ, all in RTS.
struct Ud {
    ctx: Context,
    pd: Pd,
    gid_index: u8,
    gid: Gid,
    cqs: Vec<Cq>,
    qps: Vec<Qp>,
}

fn ud(n: usize) -> Ud {
    let ctx = verbs_tests::open_rxe();
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let gid_index = ctx.default_gid_index(1).expect("gid index");
    let gid = ctx.query_gid(1, gid_index).expect("gid");
    let cqs: Vec<Cq> = (0..n).map(|_| ctx.create_cq(64).expect("cq")).collect();
    let qps = cqs
        .iter()
        .enumerate()
        .map(|(i, cq)| {
            let mut qp = pd
                .create_qp(&QpInitAttr {
                    send_cq: cq,
                    recv_cq: cq,
                    qp_type: QpType::Ud,
                    cap: QpCap {
                        max_send_wr: 16,
                        max_recv_wr: 16,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data: 64,
                    },
                    sq_sig_all: false,
                })
                .expect("create UD qp");
            qp.ready_ud(1, QKEY, 100 * i as u32).expect("ready_ud");
            qp
        })
        .collect();
    Ud {
        ctx,
        pd,
        gid_index,
        gid,
        cqs,
        qps,
    }
}

impl Ud {
    /// An AH to this port's own GID (the loopback path every QP here uses).
    fn ah(&self) -> Ah {
        self.pd.create_ah(&self.ah_attr()).expect("create_ah")
    }
    fn ah_attr(&self) -> AhAttr {
        AhAttr {
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid: self.gid,
                sgid_index: self.gid_index,
                hop_limit: 64,
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

fn all() -> AccessFlags {
    verbs_tests::all_access()
}

#[test]
fn ready_ud_reaches_rts_with_the_qkey() {
    let u = ud(1);
    let (attr, _, _) = u.qps[0].query().unwrap();
    assert_eq!(attr.qp_state, Some(QpState::Rts));
    assert_eq!(attr.qkey, Some(QKEY));
    assert_eq!(attr.sq_psn, Some(0));
    assert_eq!(u.qps[0].state(), QpState::Rts);
}

#[test]
fn send_recv_delivers_grh_then_payload() {
    let mut u = ud(2);
    let ah = u.ah();
    assert_ne!(ah.ah_num(), 0);
    let mut src = u.pd.alloc_mr(4096, all()).unwrap();
    let mut dst = u.pd.alloc_mr(4096, all()).unwrap();
    dst.fill(.., 0xee).unwrap();
    let data = pattern(1000, 11);
    src.write_at(0, &data).unwrap();
    let b_qpn = u.qps[1].qp_num();
    let a_qpn = u.qps[0].qp_num();

    let r = [dst.sge(..GRH + 1000).unwrap()];
    u.qps[1].post_recv(&[RecvWr::new(5, &r)]).unwrap();
    let s = [src.sge(..1000).unwrap()];
    u.qps[0]
        .post_send(&[SendWr::send(6, &s).to(&ah, b_qpn, QKEY).signaled()])
        .unwrap();
    let wc = wait_ok(&mut u.cqs[0]);
    assert_eq!((wc.wr_id(), wc.opcode()), (6, WcOpcode::SEND));
    let wc = wait_ok(&mut u.cqs[1]);
    assert_eq!((wc.wr_id(), wc.opcode()), (5, WcOpcode::RECV));
    assert_eq!(
        wc.byte_len() as usize,
        GRH + 1000,
        "byte_len counts the GRH"
    );
    assert!(wc.has_grh());
    assert_eq!(wc.src_qp(), a_qpn);
    assert_eq!(wc.qp_num(), b_qpn);
    assert_eq!(wc.imm_data(), None);

    let got = dst.to_vec();
    assert_eq!(&got[GRH..GRH + 1000], &data[..]);
    // RoCE v2 over IPv4: 20 zero bytes, then the IPv4 header.
    assert!(u.gid.to_ipv4().is_some(), "the default GID is IPv4");
    assert_eq!(&got[..20], &[0u8; 20]);
    assert_eq!(got[20], 0x45, "IPv4, 20-byte header");
    let grh = Grh::read(&dst, 0).unwrap();
    assert_eq!(grh.network, NetworkHeader::Ipv4);
    assert_eq!(grh.sgid, u.gid);
    assert_eq!(grh.dgid, u.gid);
    assert_eq!(grh.next_header, 17, "UDP");
    assert_eq!(grh.hop_limit, 64, "the AH's hop limit is the TTL");
    assert_eq!(grh.payload_len, ROCE_V2_UD_OVERHEAD + 1000);
    // Nothing written past the message.
    assert!(got[GRH + 1000..].iter().all(|&b| b == 0xee));
}

#[test]
fn send_with_imm_inline_and_several_sges() {
    let mut u = ud(2);
    let ah = u.ah();
    let b_qpn = u.qps[1].qp_num();
    let grh_mr = u.pd.alloc_mr(64, all()).unwrap();
    let mut src = u.pd.alloc_mr(4096, all()).unwrap();
    let dst = u.pd.alloc_mr(4096, all()).unwrap();
    let data = pattern(700, 12);
    src.write_at(0, &data).unwrap();

    // GRH into its own MR, payload scattered into another: the usual layout.
    let r1 = [grh_mr.sge(..GRH).unwrap(), dst.sge(..1000).unwrap()];
    let r2 = [grh_mr.sge(..GRH).unwrap(), dst.sge(2000..3000).unwrap()];
    u.qps[1]
        .post_recv(&[RecvWr::new(1, &r1), RecvWr::new(2, &r2)])
        .unwrap();
    // Two SGEs gathered, with immediate data.
    let s = [src.sge(300..700).unwrap(), src.sge(0..300).unwrap()];
    let inline = b"inline datagram";
    let bufs = [IoSlice::new(inline)];
    u.qps[0]
        .post_send(&[
            SendWr::send_with_imm(10, &s, 0xfeed_f00d).to(&ah, b_qpn, QKEY),
            SendWr::send_inline(11, &bufs)
                .to(&ah, b_qpn, QKEY)
                .signaled(),
        ])
        .unwrap();
    let wc = wait_ok(&mut u.cqs[0]);
    assert_eq!(wc.wr_id(), 11);
    let wcs = wait(&mut u.cqs[1], 2);
    assert!(wcs.iter().all(|w| w.is_success()), "{wcs:?}");
    assert_eq!(
        (
            wcs[0].wr_id(),
            wcs[0].byte_len() as usize,
            wcs[0].imm_data()
        ),
        (1, GRH + 700, Some(0xfeed_f00d))
    );
    assert_eq!(
        (
            wcs[1].wr_id(),
            wcs[1].byte_len() as usize,
            wcs[1].imm_data()
        ),
        (2, GRH + inline.len(), None)
    );
    let got = dst.to_vec();
    let expected = [&data[300..700], &data[0..300]].concat();
    assert_eq!(&got[..700], &expected[..]);
    assert_eq!(&got[2000..2000 + inline.len()], inline);
}

#[test]
fn one_qp_reaches_several_peers_and_they_reply_from_the_grh() {
    let mut u = ud(3);
    let ah = u.ah();
    let mut src = u.pd.alloc_mr(64, all()).unwrap();
    src.write_at(0, b"ping").unwrap();
    let bufs: Vec<_> = (0..3)
        .map(|_| u.pd.alloc_mr(GRH + 64, all()).unwrap())
        .collect();
    for (i, m) in bufs.iter().enumerate() {
        let r = [m.sge(..).unwrap()];
        u.qps[i].post_recv(&[RecvWr::new(i as u64, &r)]).unwrap();
    }
    // A gets two replies: a datagram finding no receive would be dropped.
    let replies = u.pd.alloc_mr(GRH + 8, all()).unwrap();
    let r = [replies.sge(..).unwrap()];
    u.qps[0].post_recv(&[RecvWr::new(7, &r)]).unwrap();
    let a_qpn = u.qps[0].qp_num();
    let s = [src.sge(..4).unwrap()];
    let (b, c) = (u.qps[1].qp_num(), u.qps[2].qp_num());
    u.qps[0]
        .post_send(&[
            SendWr::send(1, &s).to(&ah, b, QKEY),
            SendWr::send(2, &s).to(&ah, c, QKEY).signaled(),
        ])
        .unwrap();
    wait_ok(&mut u.cqs[0]);
    for (peer, buf) in bufs.iter().enumerate().skip(1) {
        let wc = wait_ok(&mut u.cqs[peer]);
        assert_eq!((wc.src_qp(), wc.byte_len() as usize), (a_qpn, GRH + 4));
        let mut got = [0u8; 4];
        buf.read_at(GRH, &mut got).unwrap();
        assert_eq!(&got, b"ping");
        // Answer the sender with an AH built from the GRH.
        let grh = Grh::read(buf, 0).unwrap();
        let attr = grh.reply_attr(&u.ctx, 1).unwrap();
        let g = attr.grh.unwrap();
        assert_eq!((g.dgid, g.sgid_index), (u.gid, u.gid_index));
        let reply_ah = u.pd.create_ah(&attr).unwrap();
        let mut reply = u.pd.alloc_mr(8, all()).unwrap();
        reply.write_at(0, &[peer as u8; 8]).unwrap();
        let rs = [reply.sge(..).unwrap()];
        u.qps[peer]
            .post_send(&[SendWr::send(9, &rs)
                .to(&reply_ah, wc.src_qp(), QKEY)
                .signaled()])
            .unwrap();
        wait_ok(&mut u.cqs[peer]);
    }
    // A's two receives got one reply each, in either order.
    let wcs = wait(&mut u.cqs[0], 2);
    let mut from: Vec<(u64, u32)> = wcs
        .iter()
        .map(|w| {
            assert!(w.is_success(), "{w:?}");
            assert_eq!(w.byte_len() as usize, GRH + 8);
            (w.wr_id(), w.src_qp())
        })
        .collect();
    from.sort();
    assert_eq!(from.len(), 2);
    assert_eq!((from[0].0, from[1].0), (0, 7));
    let mut senders = [from[0].1, from[1].1];
    senders.sort();
    let mut want = [b, c];
    want.sort();
    assert_eq!(senders, want);
    // Each buffer holds the reply of the QP its completion names.
    for (wr_id, src_qp) in from {
        let mr = if wr_id == 0 { &bufs[0] } else { &replies };
        let mut got = [0u8; 8];
        mr.read_at(GRH, &mut got).unwrap();
        let peer = if src_qp == b { 1u8 } else { 2 };
        assert_eq!(got, [peer; 8], "reply in wr {wr_id} from {src_qp}");
    }
}

#[test]
fn wrong_qkey_is_dropped_and_counted_then_set_qkey_changes_it() {
    let mut u = ud(2);
    let ah = u.ah();
    let b_qpn = u.qps[1].qp_num();
    let mut src = u.pd.alloc_mr(64, all()).unwrap();
    let dst = u.pd.alloc_mr(GRH + 64, all()).unwrap();
    src.write_at(0, b"wrong key").unwrap();
    src.write_at(16, b"right key").unwrap();
    let r = [dst.sge(..).unwrap()];
    u.qps[1].post_recv(&[RecvWr::new(1, &r)]).unwrap();
    let before = u.ctx.query_port(1).unwrap().qkey_viol_cntr;

    let s = [src.sge(0..9).unwrap()];
    u.qps[0]
        .post_send(&[SendWr::send(1, &s).to(&ah, b_qpn, QKEY ^ 1).signaled()])
        .unwrap();
    // UD: the sender completes; the receiver drops the datagram silently.
    wait_ok(&mut u.cqs[0]);
    assert_quiet(&mut u.cqs[1], Duration::from_millis(200));
    let after = u.ctx.query_port(1).unwrap().qkey_viol_cntr;
    assert_eq!(after, before + 1, "Q_Key violation counter");

    // The receive is still there for a datagram with the right key.
    let s = [src.sge(16..25).unwrap()];
    u.qps[0]
        .post_send(&[SendWr::send(2, &s).to(&ah, b_qpn, QKEY).signaled()])
        .unwrap();
    wait_ok(&mut u.cqs[0]);
    let wc = wait_ok(&mut u.cqs[1]);
    assert_eq!(wc.byte_len() as usize, GRH + 9);
    let mut got = [0u8; 9];
    dst.read_at(GRH, &mut got).unwrap();
    assert_eq!(&got, b"right key");

    // Change B's Q_Key in RTS: the old key is now the wrong one.
    u.qps[1].set_qkey(QKEY ^ 1).unwrap();
    assert_eq!(u.qps[1].query().unwrap().0.qkey, Some(QKEY ^ 1));
    assert_eq!(u.qps[1].state(), QpState::Rts);
    u.qps[1].post_recv(&[RecvWr::new(2, &r)]).unwrap();
    u.qps[0]
        .post_send(&[SendWr::send(3, &s).to(&ah, b_qpn, QKEY).signaled()])
        .unwrap();
    wait_ok(&mut u.cqs[0]);
    assert_quiet(&mut u.cqs[1], Duration::from_millis(200));
    let s = [src.sge(0..9).unwrap()];
    u.qps[0]
        .post_send(&[SendWr::send(4, &s).to(&ah, b_qpn, QKEY ^ 1).signaled()])
        .unwrap();
    wait_ok(&mut u.cqs[0]);
    assert_eq!(wait_ok(&mut u.cqs[1]).wr_id(), 2);
    dst.read_at(GRH, &mut got).unwrap();
    assert_eq!(&got, b"wrong key");
}

#[test]
fn message_over_the_active_mtu_is_refused_and_the_mtu_itself_fits() {
    let mut u = ud(2);
    let ah = u.ah();
    let b_qpn = u.qps[1].qp_num();
    let mtu = u
        .ctx
        .query_port(1)
        .unwrap()
        .active_mtu()
        .expect("active mtu")
        .bytes() as usize;
    let mut src = u.pd.alloc_mr(mtu + 1, all()).unwrap();
    let dst = u.pd.alloc_mr(GRH + mtu + 1, all()).unwrap();
    let data = pattern(mtu + 1, 13);
    src.write_at(0, &data).unwrap();
    let r = [dst.sge(..).unwrap()];
    u.qps[1].post_recv(&[RecvWr::new(1, &r)]).unwrap();

    let big = [src.sge(..mtu + 1).unwrap()];
    let e = u.qps[0]
        .post_send(&[SendWr::send(1, &big).to(&ah, b_qpn, QKEY).signaled()])
        .map_err(Error::from)
        .unwrap_err();
    match e {
        Error::Post {
            index: 0,
            error: PostError::UdTooLong { len, mtu: m },
        } => assert_eq!((len, m as usize), (mtu as u64 + 1, mtu)),
        e => panic!("expected UdTooLong, got {e}"),
    }
    assert_eq!(u.qps[0].send_outstanding(), 0);

    let exact = [src.sge(..mtu).unwrap()];
    u.qps[0]
        .post_send(&[SendWr::send(2, &exact).to(&ah, b_qpn, QKEY).signaled()])
        .unwrap();
    assert_eq!(wait_ok(&mut u.cqs[0]).wr_id(), 2);
    let wc = wait_ok(&mut u.cqs[1]);
    assert_eq!(wc.byte_len() as usize, GRH + mtu);
    assert_eq!(&dst.to_vec()[GRH..GRH + mtu], &data[..mtu]);
}

#[test]
fn receive_buffer_without_room_for_grh_and_payload_is_never_overrun() {
    // Linux 6.1's rxe starts copying (the GRH lands), then fails the receive
    // with LOC_QP_OP_ERR and moves the QP to the error state; later kernels
    // check the length first and drop the datagram (IB class D).
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let fails_the_qp = release.starts_with("6.1.");
    let mut u = ud(2);
    let ah = u.ah();
    let b_qpn = u.qps[1].qp_num();
    let mut src = u.pd.alloc_mr(256, all()).unwrap();
    let data = pattern(256, 14);
    src.write_at(0, &data).unwrap();
    let mut dst = u.pd.alloc_mr(256, all()).unwrap();
    dst.fill(.., 0xee).unwrap();
    let r = [dst.sge(..GRH + 16).unwrap()];
    u.qps[1]
        .post_recv(&[RecvWr::new(1, &r), RecvWr::new(2, &r)])
        .unwrap();
    // 17 bytes + GRH do not fit the 56-byte receive.
    let s = [src.sge(..17).unwrap()];
    u.qps[0]
        .post_send(&[SendWr::send(1, &s).to(&ah, b_qpn, QKEY).signaled()])
        .unwrap();
    // UD: the sender cannot know; its send succeeds.
    wait_ok(&mut u.cqs[0]);
    if fails_the_qp {
        let wcs = wait(&mut u.cqs[1], 2);
        assert_eq!(
            (wcs[0].wr_id(), wcs[0].status()),
            (1, WcStatus::LOC_QP_OP_ERR)
        );
        assert_eq!(
            (wcs[1].wr_id(), wcs[1].status()),
            (2, WcStatus::WR_FLUSH_ERR)
        );
        assert_eq!(u.qps[1].query().unwrap().0.qp_state, Some(QpState::Err));
        assert!(
            dst.to_vec()[GRH..].iter().all(|&b| b == 0xee),
            "no payload byte written"
        );
        return;
    }
    assert_quiet(&mut u.cqs[1], Duration::from_millis(200));
    assert_eq!(u.qps[1].query().unwrap().0.qp_state, Some(QpState::Rts));
    assert!(dst.to_vec().iter().all(|&b| b == 0xee), "nothing written");
    // The same receive takes a datagram that fits.
    let s = [src.sge(..16).unwrap()];
    u.qps[0]
        .post_send(&[SendWr::send(2, &s).to(&ah, b_qpn, QKEY).signaled()])
        .unwrap();
    wait_ok(&mut u.cqs[0]);
    let wc = wait_ok(&mut u.cqs[1]);
    assert_eq!((wc.wr_id(), wc.byte_len() as usize), (1, GRH + 16));
    let got = dst.to_vec();
    assert_eq!(&got[GRH..GRH + 16], &data[..16]);
    assert!(got[GRH + 16..].iter().all(|&b| b == 0xee));
}

#[test]
fn post_time_refusals() {
    let mut u = ud(2);
    let ah = u.ah();
    let b_qpn = u.qps[1].qp_num();
    let mut src = u.pd.alloc_mr(64, all()).unwrap();
    src.write_at(0, b"x").unwrap();
    let s = [src.sge(..1).unwrap()];
    let qp = &mut u.qps[0];
    let refused = |qp: &mut Qp, wr: SendWr<'_>| match qp.post_send(&[wr]).map_err(Error::from) {
        Err(Error::Post { index: 0, error }) => error,
        r => panic!("expected a refusal, got {r:?}"),
    };
    // No destination.
    assert_eq!(
        refused(qp, SendWr::send(1, &s).signaled()),
        PostError::MissingAddress
    );
    // ah_num 0 is not an address handle.
    assert_eq!(
        refused(qp, SendWr::send(1, &s).ud(0, b_qpn, QKEY)),
        PostError::MissingAddress
    );
    // Only SEND and SEND_WITH_IMM exist on UD.
    let rm = src.remote();
    for wr in [
        SendWr::rdma_write(1, &s, rm.addr, rm.rkey).to(&ah, b_qpn, QKEY),
        SendWr::rdma_read(1, &s, rm.addr, rm.rkey).to(&ah, b_qpn, QKEY),
    ] {
        assert_eq!(refused(qp, wr), PostError::InvalidOpcode);
    }
    let s8 = [src.sge(..8).unwrap()];
    assert_eq!(
        refused(
            qp,
            SendWr::fetch_add(1, &s8[0], rm.addr, rm.rkey, 1).to(&ah, b_qpn, QKEY)
        ),
        PostError::InvalidOpcode
    );
    // The index names the refused request; the ones before it are posted.
    let e = qp
        .post_send(&[
            SendWr::send(1, &s).to(&ah, b_qpn, QKEY).signaled(),
            SendWr::send(2, &s),
        ])
        .map_err(Error::from)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Post {
                index: 1,
                error: PostError::MissingAddress
            }
        ),
        "{e}"
    );
    assert_eq!(wait_ok(&mut u.cqs[0]).wr_id(), 1);
    assert_quiet(&mut u.cqs[0], Duration::from_millis(50));
    assert_eq!(
        WrOpcode::Send,
        SendWr::send(1, &s).to(&ah, b_qpn, QKEY).opcode()
    );
}

#[test]
fn ud_address_on_a_connected_qp_is_refused() {
    let mut p = Pair::new();
    let gid_index = p.ctx.default_gid_index(1).unwrap();
    let gid = p.ctx.query_gid(1, gid_index).unwrap();
    let ah =
        p.pd.create_ah(&AhAttr {
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid: gid,
                sgid_index: gid_index,
                hop_limit: 1,
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap();
    let mut src = p.pd.alloc_mr(64, all()).unwrap();
    src.write_at(0, b"x").unwrap();
    let s = [src.sge(..1).unwrap()];
    let e =
        p.a.post_send(&[SendWr::send(1, &s).to(&ah, p.b.qp_num(), QKEY).signaled()])
            .map_err(Error::from)
            .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Post {
                index: 0,
                error: PostError::UnexpectedAddress
            }
        ),
        "{e}"
    );
    assert_quiet(&mut p.cq_a, Duration::from_millis(50));
    // ready_ud is for UD QPs only.
    assert!(matches!(
        p.a.ready_ud(1, QKEY, 0),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn create_ah_validates_port_gid_and_grh() {
    let u = ud(0);
    let good = u.ah_attr();
    let invalid = |attr: AhAttr, what: &str| match u.pd.create_ah(&attr) {
        Err(Error::InvalidArgument(m)) => {
            assert!(
                m.message().contains(what),
                "message {m:?} should mention {what:?}"
            )
        }
        r => panic!("expected InvalidArgument for {what}, got {r:?}"),
    };
    invalid(
        AhAttr {
            port_num: 0,
            ..good
        },
        "port 0",
    );
    invalid(
        AhAttr {
            port_num: 2,
            ..good
        },
        "port 2",
    );
    invalid(AhAttr { grh: None, ..good }, "needs a GRH");
    let table = u.ctx.query_gid_table().unwrap();
    let unused = (0..=255u8)
        .rev()
        .find(|i| !table.iter().any(|e| e.port == 1 && e.index == *i as u32))
        .unwrap();
    let mut g = good.grh.unwrap();
    g.sgid_index = unused;
    invalid(
        AhAttr {
            grh: Some(g),
            ..good
        },
        &format!("sgid_index {unused}"),
    );

    let a = u.pd.create_ah(&good).unwrap();
    let b = u.pd.create_ah(&good).unwrap();
    assert_ne!(a.ah_num(), 0);
    assert_ne!(a.ah_num(), b.ah_num());
    assert_ne!(a.handle(), b.handle());
    assert_eq!(a.attr(), &good);
    let d = a.dest(7, 9);
    assert_eq!((d.ah_num, d.remote_qpn, d.remote_qkey), (a.ah_num(), 7, 9));
    drop(a);
    // The PD outlives the AHs made on it, and dropping one leaves the other.
    drop(u.pd);
    assert_ne!(b.ah_num(), 0);
    drop(b);
}

/// An AH dropped while a send that names it is still queued (held back by
/// draining the send queue, SQD) must not be destroyed under it: rxe looks
/// the AH up by number when it builds the packet and hands a destroyed
/// AH's number to a later AH. The send completes and goes out with the
/// dropped AH's attributes (traffic class 0), and a send through a new
/// AH of traffic class 0x28 carries 0x28.
#[test]
fn ah_dropped_under_a_queued_send_stays_until_the_send_is_consumed() {
    let mut u = ud(2);
    let ah = u.ah();
    let held = ah.ah_num();
    let b_qpn = u.qps[1].qp_num();
    let mut src = u.pd.alloc_mr(4096, all()).unwrap();
    let dst = u.pd.alloc_mr(2 * 1024, all()).unwrap();
    src.write_at(0, &pattern(64, 3)).unwrap();
    for i in 0..2u64 {
        let r = [dst.sge(i as usize * 1024..(i as usize + 1) * 1024).unwrap()];
        u.qps[1].post_recv(&[RecvWr::new(10 + i, &r)]).unwrap();
    }
    u.qps[0]
        .modify(&QpAttr {
            qp_state: Some(QpState::Sqd),
            ..Default::default()
        })
        .expect("RTS -> SQD");
    let s = [src.sge(..64).unwrap()];
    u.qps[0]
        .post_send(&[SendWr::send(1, &s).to(&ah, b_qpn, QKEY).signaled()])
        .unwrap();
    drop(ah);
    // rxe would fail the send (its AH number names nothing) or, once the
    // number has been handed out again (its numbers are cyclic: after
    // some 32,000 AHs), send it with that AH's attributes.
    let mut attr = u.ah_attr();
    attr.grh.as_mut().unwrap().traffic_class = 0x28;
    let ah2 = u.pd.create_ah(&attr).expect("create_ah");
    assert_ne!(ah2.ah_num(), held);
    u.qps[0]
        .modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            ..Default::default()
        })
        .expect("SQD -> RTS");
    u.qps[0]
        .post_send(&[SendWr::send(2, &s).to(&ah2, b_qpn, QKEY).signaled()])
        .unwrap();
    let sent = wait(&mut u.cqs[0], 2);
    assert!(sent.iter().all(|w| w.is_success()), "{sent:?}");
    assert_eq!(sent.iter().map(|w| w.wr_id()).collect::<Vec<_>>(), [1, 2]);
    let got = wait(&mut u.cqs[1], 2);
    assert!(got.iter().all(|w| w.is_success()), "{got:?}");
    assert_eq!(got.iter().map(|w| w.wr_id()).collect::<Vec<_>>(), [10, 11]);
    let first = Grh::read(&dst, 0).unwrap();
    let second = Grh::read(&dst, 1024).unwrap();
    assert_eq!(
        (first.traffic_class, second.traffic_class),
        (0, 0x28),
        "each datagram leaves with its own AH's traffic class"
    );
}
