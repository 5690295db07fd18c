//! Extended creation commands, memory re-registration and huge-page memory
//! on a real rxe device: what works moves verified data, what rxe does not
//! support fails with the exact error the kernel (or our pre-check) gives.

#![forbid(unsafe_code)]

use std::time::Duration;

use rverbs::{
    AccessFlags, ConnectOpts, CqFlags, CqInitAttr, Errno, Error, QpCap, QpCreateFlags, QpInitAttr,
    QpType, RecvWr, SendWr, WcStatus,
};
use verbs_tests::{all_access, kernel_release, open_rxe, pattern, wait, wait_ok, Pair};

#[test]
fn extended_cq_and_qp_carry_data() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let attr = |ch| CqInitAttr {
        cqe: 32,
        channel: ch,
        comp_vector: 0,
        flags: CqFlags::empty(),
    };
    let mut cq_a = ctx.create_cq_ex(&attr(Some(&ch))).unwrap();
    let mut cq_b = ctx.create_cq_ex(&attr(None)).unwrap();
    assert!(cq_a.cqe() >= 32);
    let init = |cq| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let mut a = pd
        .create_qp_ex(&init(&cq_a), QpCreateFlags::empty(), None)
        .unwrap();
    let mut b = pd
        .create_qp_ex(&init(&cq_b), QpCreateFlags::empty(), None)
        .unwrap();
    let gid = ctx.default_gid_index(1).unwrap();
    let o = ConnectOpts {
        sgid_index: gid,
        ..Default::default()
    };
    let (ea, eb) = (a.endpoint(&o).unwrap(), b.endpoint(&o).unwrap());
    a.connect(&eb, all_access(), &o).unwrap();
    b.connect(&ea, all_access(), &o).unwrap();
    let mut src = pd.alloc_mr(1024, all_access()).unwrap();
    let dst = pd.alloc_mr(1024, all_access()).unwrap();
    let data = pattern(1024, 21);
    src.write_at(0, &data).unwrap();
    let r = [dst.sge(..).unwrap()];
    b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    cq_a.req_notify(false).unwrap();
    let s = [src.sge(..).unwrap()];
    a.post_send(&[SendWr::send(2, &s).signaled()]).unwrap();
    // The extended CQ is bound to the channel: the completion raises an event.
    let id = ch.get_event_timeout(Duration::from_secs(10)).unwrap();
    assert!(
        id.is_some(),
        "no completion event on the extended CQ's channel"
    );
    assert_eq!(wait_ok(&mut cq_a).wr_id(), 2);
    assert_eq!(wait_ok(&mut cq_b).byte_len(), 1024);
    assert_eq!(dst.to_vec(), data);
}

#[test]
fn unsupported_creation_flags_are_refused_clearly() {
    let ctx = open_rxe();
    let with = |flags| CqInitAttr {
        cqe: 8,
        channel: None,
        comp_vector: 0,
        flags,
    };
    // rxe has no completion clock: refused before the kernel, with a reason.
    let e = ctx
        .create_cq_ex(&with(CqFlags::TIMESTAMP_COMPLETION))
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.message().contains("timestamp_mask")),
        "{e}"
    );
    // rxe's driver refuses every CQ creation flag.
    let e = ctx
        .create_cq_ex(&with(CqFlags::IGNORE_OVERRUN))
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Kernel {
                op: "create_cq_ex",
                errno: Errno::EOPNOTSUPP
            }
        ),
        "{e}"
    );

    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let init = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        qp_type: QpType::Rc,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    // A flag the core knows but rxe does not implement.
    let e = pd
        .create_qp_ex(&init, QpCreateFlags::BLOCK_MULTICAST_LOOPBACK, None)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Kernel {
                op: "create_qp_ex",
                errno: Errno::EOPNOTSUPP
            }
        ),
        "{e}"
    );
    // A flag the write() path of the core does not accept at all.
    let e = pd
        .create_qp_ex(&init, QpCreateFlags::SQ_SIG_ALL, None)
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Kernel {
                op: "create_qp_ex",
                errno: Errno::EINVAL
            }
        ),
        "{e}"
    );
    // Nothing was left behind: a plain QP still works.
    pd.create_qp(&init).unwrap();
}

#[test]
fn rereg_changes_access_where_the_kernel_supports_it() {
    let mut p = Pair::new();
    let mut src = p.pd.alloc_mr(512, all_access()).unwrap();
    src.write_at(0, &pattern(512, 22)).unwrap();
    let mut dst = p.pd.alloc_mr(512, AccessFlags::LOCAL_WRITE).unwrap();
    match dst.rereg_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE) {
        Ok(()) => {
            // The new keys allow the remote write the old ones refused.
            assert_eq!(
                dst.access(),
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
            );
            let s = [src.sge(..).unwrap()];
            let rm = dst.remote();
            p.a.post_send(&[SendWr::rdma_write(1, &s, rm.addr, rm.rkey).signaled()])
                .unwrap();
            assert_eq!(wait(&mut p.cq_a, 1)[0].status(), WcStatus::SUCCESS);
            assert_eq!(dst.to_vec(), pattern(512, 22));
            assert!(
                kernel_release() >= (6, 4),
                "rereg worked on a kernel whose rxe lacks it?"
            );
        }
        Err(e) => {
            // rxe in 6.1 has no rereg_user_mr: the core answers EOPNOTSUPP.
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
            assert!(kernel_release() < (6, 12), "rxe on 6.12 re-registers: {e}");
            // The MR is unchanged and still usable with its old keys.
            assert_eq!(dst.access(), AccessFlags::LOCAL_WRITE);
            let r = [dst.sge(..).unwrap()];
            p.b.post_recv(&[RecvWr::new(3, &r)]).unwrap();
            let s = [src.sge(..).unwrap()];
            p.a.post_send(&[SendWr::send(4, &s).signaled()]).unwrap();
            wait_ok(&mut p.cq_a);
            wait_ok(&mut p.cq_b);
            assert_eq!(dst.to_vec(), pattern(512, 22));
        }
    }
    // Invalid combinations never reach the kernel.
    let e = dst.rereg_access(AccessFlags::REMOTE_WRITE).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let other = open_rxe().alloc_pd().unwrap();
    let e = dst.rereg_pd(&other).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

#[test]
fn rereg_of_pd_and_access_changes_both_or_neither() {
    let p = Pair::new();
    let other = p.pd.context().alloc_pd().unwrap();
    let mut mr = p.pd.alloc_mr(512, AccessFlags::LOCAL_WRITE).unwrap();
    let keys = (mr.lkey(), mr.rkey());
    // Refused before the kernel is asked: nothing moves.
    let e = mr
        .rereg_pd_access(&other, AccessFlags::REMOTE_WRITE)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let foreign = open_rxe().alloc_pd().unwrap();
    let e = mr
        .rereg_pd_access(&foreign, AccessFlags::LOCAL_WRITE)
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(
        mr.pd().handle() == p.pd.handle(),
        "a refused call moved the MR"
    );
    assert_eq!((mr.lkey(), mr.rkey()), keys);
    let want = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    match mr.rereg_pd_access(&other, want) {
        Ok(()) => {
            assert!(kernel_release() >= (6, 4), "rereg on a kernel without it?");
            assert!(mr.pd().handle() == other.handle(), "not moved");
            assert_eq!(mr.access(), want);
        }
        Err(e) => {
            // rxe in 6.1 has no rereg_user_mr: one command refused whole.
            assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP), "{e}");
            assert!(kernel_release() < (6, 12), "rxe on 6.12 re-registers: {e}");
            assert!(
                mr.pd().handle() == p.pd.handle(),
                "a refused rereg moved the MR"
            );
            assert_eq!(mr.access(), AccessFlags::LOCAL_WRITE);
            assert_eq!((mr.lkey(), mr.rkey()), keys);
        }
    }
}

/// Sets `vm.nr_hugepages` and restores the old value on drop.
struct HugePages(String);

impl HugePages {
    const PATH: &'static str = "/proc/sys/vm/nr_hugepages";
    fn set(n: u32) -> HugePages {
        let old = std::fs::read_to_string(Self::PATH).expect("reading nr_hugepages");
        std::fs::write(Self::PATH, n.to_string())
            .expect("setting nr_hugepages (the VM suite runs as root)");
        HugePages(old.trim().to_string())
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.0);
    }
}

#[test]
fn huge_page_memory_registers_and_carries_data() {
    let mut p = Pair::new();
    {
        let _none = HugePages::set(0);
        let e = p.pd.alloc_mr_huge(1 << 20, all_access()).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert_eq!(e.errno(), Some(Errno::ENOMEM), "{e}");
    }
    let _some = HugePages::set(4);
    let len = 3 << 20; // spans two 2 MiB pages
    let mut huge = p.pd.alloc_mr_huge(len, all_access()).unwrap();
    assert_eq!(huge.len(), len);
    let plain = p.pd.alloc_mr(len, all_access()).unwrap();
    let data = pattern(len, 23);
    huge.write_at(0, &data).unwrap();
    // WRITE from huge pages, then READ back into huge pages.
    let s = [huge.sge(..).unwrap()];
    let rm = plain.remote();
    p.a.post_send(&[SendWr::rdma_write(1, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    assert!(
        plain.to_vec() == data,
        "data written from huge pages corrupted"
    );
    huge.fill(.., 0).unwrap();
    p.a.post_send(&[SendWr::rdma_read(2, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    assert!(huge.to_vec() == data, "data read into huge pages corrupted");
}
