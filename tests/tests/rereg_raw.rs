//! Re-registering a raw MR at a new address (`Mr::rereg_translation`,
//! the C library's `IBV_REREG_MR_CHANGE_TRANSLATION`): rxe's kernel cannot
//! move an MR on any kernel we run, so the kernel's refusal comes back and
//! the MR keeps its old memory, keys and PD, which still receive data;
//! arguments refused before the kernel never reach it.

use rverbs::{AccessFlags, Errno, Error, RecvWr, SendWr};
use verbs_tests::{all_access, pattern, wait_ok, Pair};

#[test]
fn a_refused_move_leaves_the_mr_on_its_old_memory() {
    let mut p = Pair::new();
    let mut old = vec![0u8; 4096];
    let mut new = vec![0u8; 4096];
    // SAFETY: `old` and `new` outlive the MR (deregistered below, before
    // either is read or dropped), and nothing touches them meanwhile.
    let mut mr = unsafe {
        p.pd.register_raw(old.as_mut_ptr(), old.len(), AccessFlags::LOCAL_WRITE)
    }
    .unwrap();
    let (lkey, rkey) = (mr.lkey(), mr.rkey());
    // SAFETY: as above; `new` stays valid and untouched until the MR goes.
    let e = unsafe { mr.rereg_translation(new.as_mut_ptr(), new.len(), None, None) }.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Kernel {
                op: "rereg_mr",
                errno: Errno::EOPNOTSUPP
            }
        ),
        "{e}"
    );
    // SAFETY: as above.
    let e = unsafe { mr.rereg_translation(new.as_mut_ptr(), 0, None, None) }.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // SAFETY: as above.
    let e = unsafe {
        mr.rereg_translation(
            new.as_mut_ptr(),
            new.len(),
            None,
            Some(AccessFlags::REMOTE_WRITE),
        )
    }
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!((mr.lkey(), mr.rkey()), (lkey, rkey));

    // Still the old memory: a receive through it fills `old`.
    let mut src = p.pd.alloc_mr(4096, all_access()).unwrap();
    let data = pattern(4096, 9);
    src.write_at(0, &data).unwrap();
    let r = [mr.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    let s = [src.sge(..).unwrap()];
    p.a.post_send(&[SendWr::send(2, &s).signaled()]).unwrap();
    wait_ok(&mut p.cq_a);
    assert_eq!(wait_ok(&mut p.cq_b).byte_len(), 4096);
    mr.deregister_raw().map_err(|e| e.error).unwrap();
    assert_eq!(old, data);
    assert!(new.iter().all(|&b| b == 0));
}
