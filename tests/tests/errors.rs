//! Failure paths on a real rxe device: error completions with the right
//! status, the QP error state and flushed receives, queue overflow without
//! corruption, the kernel's errno for invalid transitions, and arguments
//! refused before they reach the kernel.

#![forbid(unsafe_code)]

use std::io::IoSlice;
use std::time::Duration;

use rverbs::{
    AccessFlags, Errno, Error, PostError, QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr,
    SendWr, Sge, WcOpcode, WcStatus,
};
use verbs_tests::{open_rxe, pattern, wait, wait_ok, Pair};

/// RDMA WRITE from `sge` and return the error completion.
fn write_from(p: &mut Pair, sge: Sge) -> rverbs::Wc {
    let dst = p.pd.alloc_mr(256, verbs_tests::all_access()).unwrap();
    let rm = dst.remote();
    let s = [sge];
    p.a.post_send(&[SendWr::rdma_write(5, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    assert_eq!(wc.wr_id(), 5);
    assert_eq!(
        p.a.query().unwrap().0.qp_state,
        Some(QpState::Err),
        "a local error moves the QP to ERR"
    );
    wc
}

/// The status rxe gives the send WQE whose local access failed: 6.1 reports
/// the cause (`on_61`); 6.12 moves the QP to ERR and completes that WQE,
/// like every other, with WR_FLUSH_ERR.
fn local_error_status(on_61: WcStatus) -> WcStatus {
    if verbs_tests::kernel_release() >= (6, 12) {
        WcStatus::WR_FLUSH_ERR
    } else {
        on_61
    }
}

#[test]
fn local_key_outside_its_region_gives_local_protection_error() {
    let mut p = Pair::new();
    let src = p.pd.alloc_mr(256, verbs_tests::all_access()).unwrap();
    // A valid lkey whose range runs past the MR's end.
    let mut sge = src.sge(..).unwrap();
    sge.addr += 128;
    let wc = write_from(&mut p, sge);
    assert_eq!(
        wc.status(),
        local_error_status(WcStatus::LOC_PROT_ERR),
        "{wc:?}"
    );
}

#[test]
fn unknown_lkey_gives_an_error_completion() {
    let mut p = Pair::new();
    let src = p.pd.alloc_mr(256, verbs_tests::all_access()).unwrap();
    let mut sge = src.sge(..).unwrap();
    sge.lkey ^= 0x00ab_cd00; // a key that names no MR
    let wc = write_from(&mut p, sge);
    // rxe reports a key it cannot look up as a local QP operation error
    // (its MR lookup fails with EINVAL; only EFAULT, a range outside a
    // valid MR, becomes LOC_PROT_ERR: see the test above).
    assert_eq!(
        wc.status(),
        local_error_status(WcStatus::LOC_QP_OP_ERR),
        "{wc:?}"
    );
}

#[test]
fn remote_write_without_access_errors_and_flushes() {
    let mut p = Pair::new();
    let mut src = p.pd.alloc_mr(512, verbs_tests::all_access()).unwrap();
    src.write_at(0, &pattern(512, 1)).unwrap();
    // B's MR allows only local writes: remote writes must be refused.
    let mut guarded = p.pd.alloc_mr(512, AccessFlags::LOCAL_WRITE).unwrap();
    guarded.fill(.., 0x5a).unwrap();
    // Receives posted on A before the failure must flush afterwards.
    let rbuf = p.pd.alloc_mr(512, verbs_tests::all_access()).unwrap();
    let r = [rbuf.sge(..).unwrap()];
    p.a.post_recv(&[RecvWr::new(901, &r), RecvWr::new(902, &r)])
        .unwrap();

    let s = [src.sge(..).unwrap()];
    let rm = guarded.remote();
    p.a.post_send(&[SendWr::rdma_write(900, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    let mut wcs = wait(&mut p.cq_a, 3);
    wcs.sort_by_key(|w| w.wr_id());
    assert_eq!(wcs[0].wr_id(), 900);
    assert_eq!(wcs[0].status(), WcStatus::REM_ACCESS_ERR, "{:?}", wcs[0]);
    for (wc, id) in wcs[1..].iter().zip([901, 902]) {
        assert_eq!(wc.wr_id(), id);
        assert_eq!(wc.status(), WcStatus::WR_FLUSH_ERR, "{wc:?}");
    }
    let (attr, _, _) = p.a.query().unwrap();
    assert_eq!(attr.qp_state, Some(QpState::Err));
    assert!(
        guarded.to_vec().iter().all(|&b| b == 0x5a),
        "protected memory was written"
    );
    // A send posted in the error state is flushed too. (A receive posted
    // now would stay queued: rxe has no receive doorbell, so nothing tells
    // the kernel to flush it; rdma-core's provider behaves the same.)
    p.a.post_send(&[SendWr::rdma_write(904, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    assert_eq!((wc.wr_id(), wc.status()), (904, WcStatus::WR_FLUSH_ERR));
}

#[test]
fn posting_past_the_queue_depth_is_refused_and_corrupts_nothing() {
    let mut p = Pair::with(verbs_tests::PairOpts {
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        ..Default::default()
    });
    let depth = p.b.cap().max_recv_wr as usize;
    let dst =
        p.pd.alloc_mr(64 * (depth + 1), verbs_tests::all_access())
            .unwrap();
    let sges: Vec<[Sge; 1]> = (0..=depth)
        .map(|i| [dst.sge(i * 64..(i + 1) * 64).unwrap()])
        .collect();
    let wrs: Vec<RecvWr> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(i as u64, s))
        .collect();
    // One more than the depth: the first `depth` are posted, the last refused.
    let err = p.b.post_recv(&wrs).map_err(Error::from).unwrap_err();
    assert!(
        matches!(err, Error::Post { index, error: PostError::RecvQueueFull } if index == depth),
        "{err}"
    );
    let err = p.b.post_recv(&wrs[..1]).map_err(Error::from).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Post {
                index: 0,
                error: PostError::RecvQueueFull
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("receive queue full"), "{err}");

    // Every posted receive is intact: fill them in order and check each.
    let mut src =
        p.pd.alloc_mr(64 * depth, verbs_tests::all_access())
            .unwrap();
    let data = pattern(64 * depth, 2);
    src.write_at(0, &data).unwrap();
    for i in 0..depth {
        let s = [src.sge(i * 64..(i + 1) * 64).unwrap()];
        p.a.post_send(&[SendWr::send(i as u64, &s).signaled()])
            .unwrap();
        wait_ok(&mut p.cq_a);
        let wc = wait_ok(&mut p.cq_b);
        assert_eq!(wc.wr_id(), i as u64);
    }
    assert_eq!(&dst.to_vec()[..64 * depth], &data[..]);

    // The send queue: a chain longer than the depth stops at the depth.
    let sdepth = p.a.cap().max_send_wr as usize;
    let one = [src.sge(0..8).unwrap()];
    let rm = dst.remote();
    let chain: Vec<SendWr> = (0..sdepth + 3)
        .map(|i| SendWr::rdma_write(i as u64, &one, rm.addr, rm.rkey).signaled())
        .collect();
    let err = p.a.post_send(&chain).map_err(Error::from).unwrap_err();
    assert!(
        matches!(err, Error::Post { index, error: PostError::QueueFull } if index == sdepth),
        "{err}"
    );
    let wcs = wait(&mut p.cq_a, sdepth);
    for (i, wc) in wcs.iter().enumerate() {
        assert!(wc.is_success(), "{wc:?}");
        assert_eq!((wc.wr_id(), wc.opcode()), (i as u64, WcOpcode::RDMA_WRITE));
    }
}

#[test]
fn invalid_transition_returns_the_kernels_errno() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4).unwrap();
    let mut qp = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            qp_type: QpType::Rc,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap();
    // RESET -> RTS is not a legal transition.
    let err = qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(0),
            ..Default::default()
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Kernel {
                op: "modify_qp RESET -> RTS",
                errno: Errno::EINVAL
            }
        ),
        "{err}"
    );
    assert_eq!(qp.state(), QpState::Reset);
    assert_eq!(qp.query().unwrap().0.qp_state, Some(QpState::Reset));
    // RESET -> INIT without the required port attribute: refused as well.
    let err = qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Init),
            ..Default::default()
        })
        .unwrap_err();
    assert_eq!(err.errno(), Some(Errno::EINVAL), "{err}");
    // Out-of-range values never reach the kernel.
    let err = qp
        .modify(&QpAttr {
            rq_psn: Some(1 << 24),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err = qp
        .modify(&QpAttr {
            retry_cnt: Some(8),
            ..Default::default()
        })
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

/// A peer GID nobody answers for (on veth0's subnet, no such host): RTR
/// cannot resolve its neighbour. The error names the transition, and the
/// QP is left where the failed step found it.
#[test]
fn a_connect_the_kernel_refuses_names_the_transition() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4).unwrap();
    let mut qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap::default()))
        .unwrap();
    let gid_index = ctx.default_gid_index(1).expect("gid index");
    let o = rverbs::ConnectOpts {
        sgid_index: gid_index,
        ..Default::default()
    };
    let mut peer = qp.endpoint(&o).unwrap();
    peer.gid = rverbs::Gid::from_ipv4(std::net::Ipv4Addr::new(10, 0, 0, 99));
    peer.qpn = 0x123;
    let err = qp.connect(&peer, AccessFlags::LOCAL_WRITE, &o).unwrap_err();
    match &err {
        Error::Kernel { op, errno } => {
            assert_eq!(*op, "modify_qp INIT -> RTR", "{err}");
            assert!(
                matches!(
                    *errno,
                    Errno::ETIMEDOUT | Errno::EHOSTUNREACH | Errno::ENODATA
                ),
                "{err}"
            );
        }
        e => panic!("not the kernel's refusal: {e}"),
    }
    assert!(
        err.to_string().starts_with("modify_qp INIT -> RTR: "),
        "{err}"
    );
    assert_eq!(qp.state(), QpState::Init, "RESET -> INIT went through");
}

#[test]
fn posting_in_the_wrong_state_is_refused() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4).unwrap();
    let mut qp = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            qp_type: QpType::Rc,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap();
    let mr = pd.alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
    let s = [mr.sge(..).unwrap()];
    let e = qp
        .post_recv(&[RecvWr::new(1, &s)])
        .map_err(Error::from)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Post {
                index: 0,
                error: PostError::InvalidState
            }
        ),
        "{e}"
    );
    let e = qp
        .post_send(&[SendWr::send(1, &s)])
        .map_err(Error::from)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Post {
                index: 0,
                error: PostError::InvalidState
            }
        ),
        "{e}"
    );
    qp.to_init_at(1, 0, AccessFlags::empty()).unwrap();
    qp.post_recv(&[RecvWr::new(1, &s)]).unwrap();
}

#[test]
fn zero_sized_and_unaligned_requests_are_rejected() {
    let mut p = Pair::new();
    assert!(matches!(
        p.pd.alloc_mr(0, AccessFlags::LOCAL_WRITE),
        Err(Error::InvalidArgument(_))
    ));
    // A refused registration hands the buffer back, unregistered.
    let e =
        p.pd.register(Vec::with_capacity(64), AccessFlags::LOCAL_WRITE)
            .unwrap_err();
    assert!(matches!(e.error, Error::InvalidArgument(_)));
    assert_eq!(e.buf.capacity(), 64);
    let mut empty: [u8; 0] = [];
    assert!(matches!(
        p.pd.register_scoped(&mut empty, AccessFlags::LOCAL_WRITE, |_| ()),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(p.ctx.create_cq(0), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        p.pd.alloc_mr(64, AccessFlags::REMOTE_WRITE),
        Err(Error::InvalidArgument(_))
    ));
    // Atomics need an 8-byte aligned remote address and an 8-byte buffer.
    let local = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let remote = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let s8 = [local.sge(0..8).unwrap()];
    let rm = remote.remote();
    let wr = SendWr::fetch_add(1, &s8[0], rm.addr + 3, rm.rkey, 1);
    let e = p.a.post_send(&[wr]).map_err(Error::from).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Post {
                index: 0,
                error: PostError::BadAtomic
            }
        ),
        "{e}"
    );
    let s4 = [local.sge(0..4).unwrap()];
    let wr = SendWr::fetch_add(1, &s4[0], rm.addr, rm.rkey, 1);
    let e = p.a.post_send(&[wr]).map_err(Error::from).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Post {
                error: PostError::BadAtomic,
                ..
            }
        ),
        "{e}"
    );
    // SGE ranges are checked against the MR.
    assert!(matches!(local.sge(60..70), Err(Error::InvalidArgument(_))));
    assert!(matches!(rm.at(60, 8), Err(Error::InvalidArgument(_))));
    // Nothing was posted by the refused requests.
    verbs_tests::assert_quiet(&mut p.cq_a, Duration::from_millis(50));
}

/// A QP asking for more inline bytes than rxe gives (512) is refused
/// before the command, the limit named; the limit itself is granted.
#[test]
fn inline_above_the_devices_limit_is_refused_with_the_limit_named() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4).unwrap();
    for t in [QpType::Rc, QpType::Ud] {
        let cap = |inline| QpCap {
            max_inline_data: inline,
            ..QpCap::default()
        };
        let e = pd
            .create_qp(&QpInitAttr::new(t, &cq).cap(cap(513)))
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        let text = e.to_string();
        assert!(
            text.contains("max_inline_data 513") && text.contains("limit of 512 bytes"),
            "{text}"
        );
        let qp = pd
            .create_qp(&QpInitAttr::new(t, &cq).cap(cap(512)))
            .expect("the limit itself");
        assert!(qp.cap().max_inline_data >= 512);
    }
}

#[test]
fn oversized_sge_lists_and_inline_are_rejected() {
    let mut p = Pair::new();
    let mr = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let max = p.a.cap().max_send_sge as usize;
    let many: Vec<Sge> = (0..max + 1)
        .map(|i| mr.sge(i * 8..i * 8 + 8).unwrap())
        .collect();
    let e =
        p.a.post_send(&[SendWr::send(1, &many)])
            .map_err(Error::from)
            .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Post {
                index: 0,
                error: PostError::TooManySge { .. }
            }
        ),
        "{e}"
    );
    let rmax = p.b.cap().max_recv_sge as usize;
    let e =
        p.b.post_recv(&[RecvWr::new(1, &many[..rmax + 1])])
            .map_err(Error::from)
            .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Post {
                index: 0,
                error: PostError::TooManySge { .. }
            }
        ),
        "{e}"
    );
    let big = vec![0u8; p.a.cap().max_inline_data as usize + 1];
    let bufs = [IoSlice::new(&big)];
    let e =
        p.a.post_send(&[SendWr::send_inline(1, &bufs)])
            .map_err(Error::from)
            .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Post {
                index: 0,
                error: PostError::InlineTooLarge { .. }
            }
        ),
        "{e}"
    );
    // A chain with a bad request in the middle posts the ones before it.
    let dst = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let r = [dst.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    let one = [mr.sge(0..16).unwrap()];
    let e =
        p.a.post_send(&[SendWr::send(10, &one).signaled(), SendWr::send(11, &many)])
            .map_err(Error::from)
            .unwrap_err();
    assert!(matches!(e, Error::Post { index: 1, .. }), "{e}");
    assert_eq!(wait_ok(&mut p.cq_a).wr_id(), 10);
    assert_eq!(wait_ok(&mut p.cq_b).byte_len(), 16);
}
