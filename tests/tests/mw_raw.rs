//! A memory window on a raw registration (`Pd::register_raw` with
//! `MW_BIND`), as the C library registers a program's memory: a type 1
//! window bound to it carries a remote WRITE into the caller's buffer;
//! while it is bound the kernel refuses to deregister the MR (rxe: EINVAL), and
//! `deregister_raw` hands it back (no abort); once the window is gone the
//! MR deregisters and the buffer is the caller's again.

use rverbs::{AccessFlags, Errno, MwType, SendFlags, SendWr, WcOpcode};
use verbs_tests::{pattern, wait, wait_ok, Pair};

#[test]
fn a_window_on_a_raw_registration_holds_it_until_it_goes() {
    let mut p = Pair::new();
    let mut buf = vec![0u8; 8192];
    // SAFETY: `buf` outlives the MR: it is deregistered (deregister_raw
    // returned Ok) before `buf` is read or dropped, and nothing touches
    // `buf` meanwhile.
    let mr = unsafe {
        p.pd.register_raw(
            buf.as_mut_ptr(),
            buf.len(),
            AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
        )
    }
    .expect("a raw registration allowing windows");
    let mut mw = p.pd.alloc_mw(MwType::Type1).unwrap();
    let bind = mr.mw_bind(2048..6144, AccessFlags::REMOTE_WRITE).unwrap();
    p.b.bind_mw(&mut mw, 3, &bind, SendFlags::SIGNALED).unwrap();
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!((wc.wr_id(), wc.opcode()), (3, WcOpcode::BIND_MW));

    let mut src = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let data = pattern(4096, 5);
    src.write_at(0, &data).unwrap();
    let s = [src.sge(..).unwrap()];
    let r = mw.remote();
    p.a.post_send(&[SendWr::rdma_write(1, &s, r.addr, r.rkey).signaled()])
        .unwrap();
    assert!(wait(&mut p.cq_a, 1)[0].is_success());

    // Bound: the kernel keeps the MR, and says so without an abort.
    let refused = mr
        .deregister_raw()
        .expect_err("deregistered with a window bound");
    // rxe answers EINVAL (IBA 10.6.7.2.6: an MR with windows bound is
    // not deregistered); a driver may answer EBUSY.
    assert!(
        matches!(refused.error.errno(), Some(Errno::EINVAL | Errno::EBUSY)),
        "{}",
        refused.error
    );
    let mr = refused.mr;
    drop(mw);
    mr.deregister_raw()
        .expect("deregistered once the window is gone");

    assert_eq!(&buf[2048..6144], &data[..], "the WRITE through the window");
    assert!(buf[..2048].iter().all(|&b| b == 0));
    assert!(buf[6144..].iter().all(|&b| b == 0));
}
