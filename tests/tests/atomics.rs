//! RC atomics on a real rxe device (compare-and-swap, fetch-and-add: the
//! remote 8 bytes change and the original lands in the local 8 bytes) and
//! the access checks that guard them.

#![forbid(unsafe_code)]

use std::time::Duration;

use rverbs::{AccessFlags, QpState, SendWr, WcOpcode, WcStatus};
use verbs_tests::{assert_quiet, wait, wait_ok, Pair, PairOpts};

fn read_u64(mr: &rverbs::Mr, offset: usize) -> u64 {
    let mut b = [0u8; 8];
    mr.read_at(offset, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

#[test]
fn device_reports_atomic_support() {
    let ctx = verbs_tests::open_rxe();
    let a = ctx.query_device().unwrap();
    // IB_ATOMIC_HCA (1): atomic within this device; rxe's value.
    assert_eq!(a.atomic_cap, 1, "atomic_cap");
    assert!(a.max_qp_rd_atom >= 1 && a.max_qp_init_rd_atom >= 1);
}

#[test]
fn fetch_add_returns_the_original_and_adds() {
    let mut p = Pair::new();
    let mut remote = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let mut local = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    local.fill(.., 0xcc).unwrap();
    let orig = 0x1122_3344_5566_7788u64;
    remote.write_at(8, &orig.to_ne_bytes()).unwrap();
    let rm = remote.remote();
    let s = [local.sge(16..24).unwrap()];
    p.a.post_send(&[SendWr::fetch_add(1, &s[0], rm.at(8, 8).unwrap(), rm.rkey, 5).signaled()])
        .unwrap();
    let wc = wait_ok(&mut p.cq_a);
    assert_eq!(
        (wc.wr_id(), wc.opcode(), wc.byte_len()),
        (1, WcOpcode::FETCH_ADD, 8)
    );
    assert_eq!(read_u64(&remote, 8), orig + 5);
    assert_eq!(read_u64(&local, 16), orig);
    // Only the 8 bytes at each end changed.
    let r = remote.to_vec();
    assert!(r[..8].iter().chain(&r[16..]).all(|&b| b == 0));
    let l = local.to_vec();
    assert!(l[..16].iter().chain(&l[24..]).all(|&b| b == 0xcc));
    // Wrap-around is modulo 2^64.
    remote.write_at(8, &u64::MAX.to_ne_bytes()).unwrap();
    p.a.post_send(&[SendWr::fetch_add(2, &s[0], rm.at(8, 8).unwrap(), rm.rkey, 2).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    assert_eq!(read_u64(&remote, 8), 1);
    assert_eq!(read_u64(&local, 16), u64::MAX);
    assert_quiet(&mut p.cq_b, Duration::from_millis(50));
}

#[test]
fn cmp_swap_swaps_only_on_a_match() {
    let mut p = Pair::new();
    let mut remote = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let local = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    remote.write_at(0, &42u64.to_ne_bytes()).unwrap();
    let rm = remote.remote();
    let s = [local.sge(0..8).unwrap()];
    // Mismatch: remote unchanged, the original comes back.
    p.a.post_send(&[SendWr::cmp_swap(1, &s[0], rm.addr, rm.rkey, 41, 7).signaled()])
        .unwrap();
    let wc = wait_ok(&mut p.cq_a);
    assert_eq!((wc.opcode(), wc.byte_len()), (WcOpcode::COMP_SWAP, 8));
    assert_eq!(read_u64(&remote, 0), 42);
    assert_eq!(read_u64(&local, 0), 42);
    // Match: swapped.
    let s2 = [local.sge(8..16).unwrap()];
    p.a.post_send(&[SendWr::cmp_swap(2, &s2[0], rm.addr, rm.rkey, 42, u64::MAX - 1).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    assert_eq!(read_u64(&remote, 0), u64::MAX - 1);
    assert_eq!(read_u64(&local, 8), 42);
}

#[test]
fn chained_atomics_execute_in_order() {
    let mut p = Pair::with(PairOpts {
        connect: rverbs::ConnectOpts {
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            ..Default::default()
        },
        ..Default::default()
    });
    let remote = p.pd.alloc_mr(8, verbs_tests::all_access()).unwrap();
    let local = p.pd.alloc_mr(8 * 16, verbs_tests::all_access()).unwrap();
    let rm = remote.remote();
    let sges: Vec<[rverbs::Sge; 1]> = (0..16)
        .map(|i| [local.sge(i * 8..i * 8 + 8).unwrap()])
        .collect();
    let wrs: Vec<SendWr<'_>> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let wr = if i % 2 == 0 {
                SendWr::fetch_add(i as u64, &s[0], rm.addr, rm.rkey, 1)
            } else {
                // Swap in the value a fetch-add would have produced.
                SendWr::cmp_swap(i as u64, &s[0], rm.addr, rm.rkey, i as u64, i as u64 + 1)
            };
            wr.signaled()
        })
        .collect();
    p.a.post_send(&wrs).unwrap();
    let wcs = wait(&mut p.cq_a, 16);
    for (i, wc) in wcs.iter().enumerate() {
        assert!(wc.is_success(), "{wc:?}");
        assert_eq!(wc.wr_id(), i as u64);
        assert_eq!(read_u64(&local, i * 8), i as u64, "original seen by {i}");
    }
    assert_eq!(read_u64(&remote, 0), 16);
}

#[test]
fn atomic_on_an_mr_without_remote_atomic_fails_with_rem_access_err() {
    let mut p = Pair::new();
    let no_atomic = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mut remote = p.pd.alloc_mr(64, no_atomic).unwrap();
    let mut local = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    remote.write_at(0, &100u64.to_ne_bytes()).unwrap();
    local.fill(.., 0xab).unwrap();
    let rm = remote.remote();
    let s = [local.sge(0..8).unwrap()];
    p.a.post_send(&[SendWr::fetch_add(1, &s[0], rm.addr, rm.rkey, 1).signaled()])
        .unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    assert_eq!(wc.wr_id(), 1);
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR);
    assert_eq!(read_u64(&remote, 0), 100);
    assert_eq!(local.to_vec(), vec![0xab; 64]);
    // The requester's QP is in the error state now.
    assert_eq!(p.a.query().unwrap().0.qp_state, Some(QpState::Err));
}

#[test]
fn atomic_to_a_qp_without_remote_atomic_access_fails_with_rem_inv_req_err() {
    let mut p = Pair::with(PairOpts {
        access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        ..Default::default()
    });
    let mut remote = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let local = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    remote.write_at(0, &100u64.to_ne_bytes()).unwrap();
    let rm = remote.remote();
    let s = [local.sge(0..8).unwrap()];
    p.a.post_send(&[SendWr::cmp_swap(1, &s[0], rm.addr, rm.rkey, 100, 5).signaled()])
        .unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    assert_eq!(wc.status(), WcStatus::REM_INV_REQ_ERR);
    assert_eq!(read_u64(&remote, 0), 100);
}
