//! Memory windows on a real rxe device: type 1 bound with the bind verb
//! and type 2 with a BIND_MW work request; remote WRITE and READ through
//! the window's key (data checked); refusal for rights it does not grant,
//! outside its MR (rxe checks a window key against the MR's bounds, not
//! the window's: asserted as such) and after it is revoked; LOCAL_INV and SEND_WITH_INV invalidating a type
//! 2 window, the invalidated key in the receive completion; and the host
//! checks that refuse a bind before anything is posted.

#![forbid(unsafe_code)]

use rverbs::{
    AccessFlags, Error, Mr, MwBind, MwType, PostError, QpState, QpType, RecvWr, SendFlags, SendWr,
    WcOpcode, WcStatus,
};
use verbs_tests::{pattern, wait, wait_ok, Pair, PairOpts};

/// An MR windows can be bound to: local write (for writable windows) and
/// bind rights, no remote rights of its own.
fn window_mr(p: &Pair, len: usize) -> Mr {
    p.pd.alloc_mr(len, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)
        .unwrap()
}

/// `a` WRITEs `data` at `addr` under `rkey`; returns the completion.
fn write_to(p: &mut Pair, src: &mut Mr, data: &[u8], addr: u64, rkey: u32, id: u64) -> rverbs::Wc {
    src.write_at(0, data).unwrap();
    let s = [src.sge(0..data.len()).unwrap()];
    p.a.post_send(&[SendWr::rdma_write(id, &s, addr, rkey).signaled()])
        .unwrap();
    wait(&mut p.cq_a, 1)[0]
}

#[test]
fn type1_window_grants_write_and_read_to_its_range_only() {
    let mut p = Pair::new();
    // Zeroed by alloc_mr.
    let target = window_mr(&p, 8192);
    let mut src = p.pd.alloc_mr(8192, verbs_tests::all_access()).unwrap();
    let mut mw = p.pd.alloc_mw(MwType::Type1).unwrap();
    assert_eq!(mw.mw_type(), MwType::Type1);
    let first = mw.rkey();

    // Bound on b (the target's side) to 4096 bytes at offset 1024.
    let bind = target
        .mw_bind(
            1024..5120,
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let rkey = p.b.bind_mw(&mut mw, 7, &bind, SendFlags::SIGNALED).unwrap();
    assert_eq!(rkey, mw.rkey());
    assert_ne!(rkey, first, "a bind gives the window a new key");
    assert_eq!(rkey & !0xff, first & !0xff, "same index");
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!((wc.wr_id(), wc.opcode()), (7, WcOpcode::BIND_MW));

    // WRITE through the window lands where it says.
    let r = mw.remote();
    assert_eq!((r.addr, r.len, r.rkey), (target.addr() + 1024, 4096, rkey));
    let data = pattern(4096, 11);
    let wc = write_to(&mut p, &mut src, &data, r.addr, r.rkey, 1);
    assert!(wc.is_success(), "{wc:?}");
    let all = target.to_vec();
    assert_eq!(&all[1024..5120], &data[..]);
    assert!(all[..1024].iter().all(|&b| b == 0));
    assert!(all[5120..].iter().all(|&b| b == 0));

    // READ through it gets the bytes back.
    let s = [src.sge(4096..8192).unwrap()];
    p.a.post_send(&[SendWr::rdma_read(2, &s, r.addr, r.rkey).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    let mut back = vec![0u8; 4096];
    src.read_at(4096, &mut back).unwrap();
    assert_eq!(back, data);

    // Past the window's end but inside the MR: rxe (6.1, 6.12, 7.x) checks
    // a window key's access against the MR's bounds, not the window's
    // (check_rkey in rxe_resp.c), so the write lands. Asserted so that a
    // kernel that starts enforcing the window is noticed.
    let wc = write_to(&mut p, &mut src, &[0xab; 8], r.addr + 4092, r.rkey, 3);
    assert!(wc.is_success(), "rxe now enforces window bounds: {wc:?}");
    assert_eq!(&target.to_vec()[5116..5124], &[0xab; 8]);
    // Past the MR's end: refused, and nothing written.
    let wc = write_to(
        &mut p,
        &mut src,
        &[0xcd; 8],
        target.addr() + 8188,
        r.rkey,
        4,
    );
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");
    assert!(
        target.to_vec()[8188..].iter().all(|&b| b == 0),
        "nothing written"
    );
}

#[test]
fn type1_window_refuses_rights_it_was_not_given_and_after_unbind() {
    let mut p = Pair::new();
    let target = window_mr(&p, 4096);
    let mut src = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let mut mw = p.pd.alloc_mw(MwType::Type1).unwrap();
    let bind = target.mw_bind(.., AccessFlags::REMOTE_READ).unwrap();
    p.b.bind_mw(&mut mw, 1, &bind, SendFlags::SIGNALED).unwrap();
    wait_ok(&mut p.cq_b);
    // Read-only window: a WRITE is refused by b's responder.
    let r = mw.remote();
    let wc = write_to(&mut p, &mut src, &[9u8; 64], r.addr, r.rkey, 1);
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");
    assert!(target.to_vec().iter().all(|&b| b == 0), "nothing written");

    // A fresh pair: bind, unbind, and the old key no longer reaches.
    let mut p = Pair::new();
    let target = window_mr(&p, 4096);
    let mut src = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let mut mw = p.pd.alloc_mw(MwType::Type1).unwrap();
    let bind = target.mw_bind(.., AccessFlags::REMOTE_WRITE).unwrap();
    p.b.bind_mw(&mut mw, 1, &bind, SendFlags::SIGNALED).unwrap();
    wait_ok(&mut p.cq_b);
    let r = mw.remote();
    let wc = write_to(&mut p, &mut src, &[5u8; 64], r.addr, r.rkey, 2);
    assert!(wc.is_success(), "{wc:?}");
    let new =
        p.b.bind_mw(&mut mw, 2, &MwBind::unbind(), SendFlags::SIGNALED)
            .unwrap();
    assert_ne!(new, r.rkey);
    wait_ok(&mut p.cq_b);
    let wc = write_to(&mut p, &mut src, &[6u8; 64], r.addr, r.rkey, 3);
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");
    assert!(
        target.to_vec()[..64].iter().all(|&b| b == 5),
        "old key wrote nothing"
    );
}

#[test]
fn type2_window_bound_by_work_request_and_invalidated_locally() {
    let mut p = Pair::new();
    let target = window_mr(&p, 4096);
    let mut src = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let bind = target.mw_bind(256..768, AccessFlags::REMOTE_WRITE).unwrap();
    let wr = mw.bind_wr(1, &bind).unwrap().signaled();
    p.b.post_send(&[wr]).unwrap();
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!(wc.opcode(), WcOpcode::BIND_MW);
    let r = mw.remote();
    assert_eq!((r.addr, r.len), (target.addr() + 256, 512));
    let data = pattern(512, 3);
    let wc = write_to(&mut p, &mut src, &data, r.addr, r.rkey, 1);
    assert!(wc.is_success(), "{wc:?}");
    assert_eq!(&target.to_vec()[256..768], &data[..]);

    // LOCAL_INV on b revokes it: the same WRITE is now refused.
    p.b.post_send(&[SendWr::local_inv(2, r.rkey).signaled()])
        .unwrap();
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!((wc.wr_id(), wc.opcode()), (2, WcOpcode::LOCAL_INV));
    let wc = write_to(&mut p, &mut src, &[0xee; 512], r.addr, r.rkey, 2);
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");
    assert_eq!(&target.to_vec()[256..768], &data[..], "nothing overwritten");
}

#[test]
fn send_with_inv_revokes_the_receivers_window_and_reports_the_key() {
    let mut p = Pair::new();
    let target = window_mr(&p, 4096);
    let mut src = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let rbuf = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let bind = target.mw_bind(.., AccessFlags::REMOTE_WRITE).unwrap();
    p.b.post_send(&[mw.bind_wr(1, &bind).unwrap().signaled()])
        .unwrap();
    wait_ok(&mut p.cq_b);
    let r = mw.remote();
    let wc = write_to(&mut p, &mut src, &[1u8; 64], r.addr, r.rkey, 1);
    assert!(wc.is_success(), "{wc:?}");

    // a: "done with it" as a SEND that invalidates b's window.
    let rs = [rbuf.sge(0..64).unwrap()];
    p.b.post_recv(&[RecvWr::new(9, &rs)]).unwrap();
    src.write_at(0, b"done").unwrap();
    let s = [src.sge(0..4).unwrap()];
    p.a.post_send(&[SendWr::send_with_inv(2, &s, r.rkey).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!((wc.wr_id(), wc.byte_len()), (9, 4));
    assert_eq!(wc.invalidated_rkey(), Some(r.rkey));
    let mut got = [0u8; 4];
    rbuf.read_at(0, &mut got).unwrap();
    assert_eq!(&got, b"done");

    // The key no longer reaches b's memory.
    let wc = write_to(&mut p, &mut src, &[2u8; 64], r.addr, r.rkey, 3);
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");
    assert!(target.to_vec()[..64].iter().all(|&b| b == 1));

    // The window can be bound again, under a new key.
    let mut p2 = Pair::new();
    let t2 = window_mr(&p2, 4096);
    let mut mw2 = p2.pd.alloc_mw(MwType::Type2).unwrap();
    let b2 = t2.mw_bind(.., AccessFlags::REMOTE_WRITE).unwrap();
    p2.b.post_send(&[mw2.bind_wr(1, &b2).unwrap().signaled()])
        .unwrap();
    wait_ok(&mut p2.cq_b);
    let k1 = mw2.rkey();
    p2.b.post_send(&[SendWr::local_inv(2, k1).signaled()])
        .unwrap();
    wait_ok(&mut p2.cq_b);
    p2.b.post_send(&[mw2.bind_wr(3, &b2).unwrap().signaled()])
        .unwrap();
    wait_ok(&mut p2.cq_b);
    assert_ne!(mw2.rkey(), k1);
    let mut s2 = p2.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let r2 = mw2.remote();
    let wc = write_to(&mut p2, &mut s2, &[3u8; 64], r2.addr, r2.rkey, 4);
    assert!(wc.is_success(), "{wc:?}");
    assert!(t2.to_vec()[..64].iter().all(|&b| b == 3));
}

#[test]
fn type2_window_answers_only_through_the_qp_it_was_bound_on() {
    // Bound on a (so usable by b only); a second pair's QP, same PD
    // context but another connection, must be refused.
    let mut p = Pair::new();
    let target = window_mr(&p, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type2).unwrap();
    let bind = target.mw_bind(.., AccessFlags::REMOTE_WRITE).unwrap();
    // Bind on b: a may use it.
    p.b.post_send(&[mw.bind_wr(1, &bind).unwrap().signaled()])
        .unwrap();
    wait_ok(&mut p.cq_b);
    let r = mw.remote();
    // b writing to its own window arrives at a's QP: not the bound QP.
    let mut src = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    src.write_at(0, &[4u8; 64]).unwrap();
    let s = [src.sge(0..64).unwrap()];
    p.b.post_send(&[SendWr::rdma_write(2, &s, r.addr, r.rkey).signaled()])
        .unwrap();
    let wc = wait(&mut p.cq_b, 1)[0];
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");
    assert!(target.to_vec()[..64].iter().all(|&b| b == 0));
}

#[test]
fn binds_are_checked_before_anything_is_posted() {
    let mut p = Pair::new();
    // Without MW_BIND on the MR.
    let plain = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    assert!(matches!(
        plain.mw_bind(.., AccessFlags::REMOTE_READ),
        Err(Error::InvalidArgument(_))
    ));
    let target = window_mr(&p, 4096);
    // Outside the MR, empty, rights a window cannot grant.
    for bad in [
        target.mw_bind(0..4097, AccessFlags::REMOTE_READ),
        target.mw_bind(100..100, AccessFlags::REMOTE_READ),
        target.mw_bind(.., AccessFlags::MW_BIND),
        target.mw_bind(.., AccessFlags::ZERO_BASED | AccessFlags::REMOTE_READ),
    ] {
        assert!(matches!(bad, Err(Error::InvalidArgument(_))), "{bad:?}");
    }
    // Writable rights need LOCAL_WRITE on the MR.
    let ro =
        p.pd.alloc_mr(4096, AccessFlags::MW_BIND | AccessFlags::REMOTE_READ)
            .unwrap();
    assert!(ro.mw_bind(.., AccessFlags::REMOTE_READ).is_ok());
    assert!(ro.mw_bind(.., AccessFlags::REMOTE_WRITE).is_err());

    // Each type is bound its own way; an empty type 2 bind is refused.
    let bind = target.mw_bind(.., AccessFlags::REMOTE_READ).unwrap();
    let mut t1 = p.pd.alloc_mw(MwType::Type1).unwrap();
    let mut t2 = p.pd.alloc_mw(MwType::Type2).unwrap();
    let (k1, k2) = (t1.rkey(), t2.rkey());
    assert!(t1.bind_wr(1, &bind).is_err());
    assert!(p.a.bind_mw(&mut t2, 1, &bind, SendFlags::empty()).is_err());
    assert!(t2.bind_wr(1, &MwBind::unbind()).is_err());
    assert_eq!((t1.rkey(), t2.rkey()), (k1, k2), "keys unchanged");

    // LOCAL_INV and SEND_WITH_INV are RC only, BIND_MW RC and UC; none
    // is posted elsewhere.
    let mut uc = Pair::with(PairOpts {
        qp_type: QpType::Uc,
        ..Default::default()
    });
    for wr in [
        SendWr::local_inv(1, k2),
        SendWr::send_with_inv(2, &sge_of(&target), k2),
    ] {
        match uc.a.post_send(&[wr]).map_err(Error::from) {
            Err(Error::Post { index: 0, error }) => assert_eq!(error, PostError::InvalidOpcode),
            other => panic!("{wr:?} on UC: {other:?}"),
        }
    }
    let mut t1 = uc.pd.alloc_mw(MwType::Type1).unwrap();
    let ut = window_mr(&uc, 4096);
    let ub = ut.mw_bind(.., AccessFlags::REMOTE_READ).unwrap();
    uc.a.bind_mw(&mut t1, 3, &ub, SendFlags::SIGNALED).unwrap();
    let wc = wait_ok(&mut uc.cq_a);
    assert_eq!(wc.opcode(), WcOpcode::BIND_MW);
    assert_eq!(uc.a.state(), QpState::Rts);
}

fn sge_of(mr: &Mr) -> [rverbs::Sge; 1] {
    [mr.sge(0..8).unwrap()]
}

#[test]
fn a_bound_window_keeps_its_mr_registered() {
    // The kernel refuses to deregister an MR while a window is bound to
    // it: `into_inner` fails and hands the MR back, still registered (the
    // window still reaches it); once the window is gone, the same MR
    // deregisters and gives its memory back.
    let mut p = Pair::new();
    let target = window_mr(&p, 4096);
    let mut mw = p.pd.alloc_mw(MwType::Type1).unwrap();
    let bind = target.mw_bind(.., AccessFlags::REMOTE_WRITE).unwrap();
    p.b.bind_mw(&mut mw, 1, &bind, SendFlags::SIGNALED).unwrap();
    wait_ok(&mut p.cq_b);
    let Err(e) = target.into_inner() else {
        panic!("deregistration of an MR with a window bound to it succeeded");
    };
    assert_eq!(e.error.errno(), Some(rverbs::Errno::EINVAL), "{e}");
    let target = e.mr;
    // The window still reaches the (still registered) memory.
    let r = mw.remote();
    let mut src = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let wc = write_to(&mut p, &mut src, &[7u8; 64], r.addr, r.rkey, 2);
    assert!(wc.is_success(), "{wc:?}");
    drop(mw);
    let buf = target
        .into_inner()
        .expect("deregistration once the window is gone");
    assert_eq!(
        &buf[..64],
        &[7u8; 64],
        "the WRITE through the window landed"
    );
    assert!(buf[64..].iter().all(|&b| b == 0));
}

#[test]
fn scoped_registrations_cannot_allow_windows() {
    // A window bound to a scoped MR would keep the kernel from
    // deregistering it when the scope ends (the process used to abort), so
    // it refuses MW_BIND up front, which also makes the device refuse any
    // bind to it. (Raw registrations allow it: tests/mw_raw.rs.)
    let p = Pair::new();
    let mut buf = vec![0u8; 4096];
    let bind = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND;
    let e =
        p.pd.register_scoped(&mut buf, bind, |_| ())
            .expect_err("a scoped registration allowing windows");
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.message().contains("MW_BIND") && m.kind() == rverbs::InvalidKind::Access),
        "{e}"
    );
    // Without MW_BIND it registers, and cannot gain it later.
    p.pd.register_scoped(&mut buf, AccessFlags::LOCAL_WRITE, |mr| {
        let e = mr.rereg_access(bind).expect_err("MW_BIND added by rereg");
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.message().contains("MW_BIND") && m.kind() == rverbs::InvalidKind::Access),
            "{e}"
        );
    })
    .unwrap();
}
