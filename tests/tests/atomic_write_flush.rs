//! ATOMIC_WRITE and RDMA FLUSH on a real rxe device, and the memory
//! registration options that came with newer kernels: an IOVA other than
//! the buffer's address, and the optional access flags.
//!
//! rxe offers ATOMIC_WRITE and FLUSH (global and persistent placement)
//! from Linux 6.2: on 6.12 and 7.x each is exercised (data checked, the
//! completion's opcode, the responder's refusal without the access it
//! needs); on 6.1 each is refused before anything is posted, with
//! `EOPNOTSUPP`. Persistent flush needs persistent memory: the VM's
//! emulated NVDIMM, which the harness makes the device-DAX namespace
//! `/dev/dax0.0`; registering ordinary memory for it is refused.

#![deny(unsafe_code)]

use rverbs::QpAttr;
use rverbs::{
    AccessFlags, Errno, Error, FlushType, PostError, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use verbs_tests::{all_access, kernel_release, pattern, wait, wait_ok, Pair, PairOpts};

/// `device_cap_flags_ex` bits: FLUSH_GLOBAL, FLUSH_PERSISTENT,
/// ATOMIC_WRITE.
const FLUSH_GLOBAL: u64 = 1 << 38;
const FLUSH_PERSISTENT: u64 = 1 << 39;
const ATOMIC_WRITE: u64 = 1 << 40;

/// Whether the running kernel's rxe has ATOMIC_WRITE and FLUSH (6.2 on).
fn offered() -> bool {
    kernel_release() >= (6, 2)
}

fn refused_as_unsupported(r: Result<(), rverbs::PostFailed>, op: WrOpcode) {
    match r.map_err(Error::from) {
        Err(
            e @ Error::Post {
                index: 0,
                error: PostError::OpcodeUnsupported(o),
            },
        ) if o == op => assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP)),
        other => panic!("{op:?} not refused as unsupported: {other:?}"),
    }
}

#[test]
fn capabilities_are_as_the_kernel_says() {
    let p = Pair::new();
    let attr = p.ctx.query_device().unwrap();
    let flags = attr.ex().expect("extended query").device_cap_flags_ex;
    let want = offered();
    for (bit, name) in [
        (ATOMIC_WRITE, "ATOMIC_WRITE"),
        (FLUSH_GLOBAL, "FLUSH_GLOBAL"),
        (FLUSH_PERSISTENT, "FLUSH_PERSISTENT"),
    ] {
        assert_eq!(flags & bit != 0, want, "{name} on {:?}", kernel_release());
    }
    // Context::offers says the same (what the C ABI's ibv_create_qp_ex
    // asks before taking IBV_QP_EX_WITH_ATOMIC_WRITE); rxe has memory
    // windows, and every plain opcode is offered.
    for op in [WrOpcode::AtomicWrite, WrOpcode::Flush] {
        assert_eq!(p.ctx.offers(op), want, "{op:?} on {:?}", kernel_release());
    }
    for op in [
        WrOpcode::Send,
        WrOpcode::RdmaWrite,
        WrOpcode::RdmaRead,
        WrOpcode::LocalInv,
        WrOpcode::SendWithInv,
        WrOpcode::BindMw,
    ] {
        assert!(p.ctx.offers(op), "{op:?} not offered on rxe");
    }
}

#[test]
fn atomic_write_stores_8_bytes() {
    let mut p = Pair::new();
    let target = p.pd.alloc_mr(64, all_access()).unwrap();
    let r = target.remote().slice(8, 8).unwrap();
    let value = 0x1122_3344_5566_7788u64.to_le_bytes();
    let wr = r.atomic_write(1, value).unwrap().signaled();
    if !offered() {
        refused_as_unsupported(p.a.post_send(&[wr]), WrOpcode::AtomicWrite);
        return;
    }
    p.a.post_send(&[wr]).unwrap();
    let wc = wait_ok(&mut p.cq_a);
    assert_eq!((wc.wr_id(), wc.opcode()), (1, WcOpcode::ATOMIC_WRITE));
    let all = target.to_vec();
    assert_eq!(&all[8..16], &value);
    assert!(all[..8].iter().chain(&all[16..]).all(|&b| b == 0));

    // A second one replaces the 8 bytes whole.
    let wr = r.atomic_write(2, [0xee; 8]).unwrap().signaled();
    p.a.post_send(&[wr]).unwrap();
    wait_ok(&mut p.cq_a);
    assert_eq!(&target.to_vec()[8..16], &[0xee; 8]);

    // Unaligned: refused on the host, by the remote descriptor and by the
    // post path for a request built by hand.
    let odd = target.remote().slice(4, 8).unwrap();
    assert!(matches!(
        odd.atomic_write(3, value),
        Err(Error::InvalidArgument(_))
    ));
    let by_hand = SendWr::atomic_write(3, odd.addr, odd.rkey, value);
    match p.a.post_send(&[by_hand]).map_err(Error::from) {
        Err(Error::Post {
            error: PostError::BadAtomic,
            ..
        }) => {}
        other => panic!("unaligned ATOMIC_WRITE posted: {other:?}"),
    }
}

#[test]
fn atomic_write_needs_remote_write() {
    if !offered() {
        return; // refused before posting: see atomic_write_stores_8_bytes
    }
    let mut p = Pair::new();
    let target =
        p.pd.alloc_mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)
            .unwrap();
    let wr = target.remote().atomic_write(1, [7; 8]).unwrap().signaled();
    p.a.post_send(&[wr]).unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");
    assert!(target.to_vec().iter().all(|&b| b == 0), "nothing written");
}

/// An MR peers may write and flush to global visibility.
fn flushable() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::FLUSH_GLOBAL
}

/// A pair whose QPs accept FLUSH to global visibility: the responder
/// checks its QP's access flags as well as the MR's.
fn flush_pair() -> Pair {
    Pair::with(PairOpts {
        access: all_access() | AccessFlags::FLUSH_GLOBAL,
        ..PairOpts::default()
    })
}

#[test]
fn flush_after_write_completes_for_range_and_whole_mr() {
    if !offered() {
        let mut p = Pair::new();
        // Neither the QP's nor an MR's access may ask for it.
        let attr = QpAttr {
            qp_access_flags: Some(AccessFlags::FLUSH_GLOBAL),
            ..QpAttr::default()
        };
        match p.a.modify(&attr) {
            Err(Error::NotOffered { .. }) => {}
            other => panic!("FLUSH_GLOBAL QP access not refused: {other:?}"),
        }
        match p.pd.alloc_mr(4096, flushable()) {
            Err(e @ Error::NotOffered { .. }) => {
                assert_eq!(e.errno(), Some(Errno::EOPNOTSUPP))
            }
            other => panic!("FLUSH_GLOBAL registration not refused: {other:?}"),
        }
        let wr = SendWr::rdma_flush(1, 0x1000, 1, 64, FlushType::GLOBAL);
        refused_as_unsupported(p.a.post_send(&[wr]), WrOpcode::Flush);
        return;
    }
    let mut p = flush_pair();
    let len = 65536;
    let target = p.pd.alloc_mr(len, flushable()).unwrap();
    let mut src = p.pd.alloc_mr(len, all_access()).unwrap();
    let data = pattern(len, 5);
    src.write_at(0, &data).unwrap();
    let s = [src.sge(..).unwrap()];
    let remote = target.remote();
    // WRITE, then FLUSH of the same range (a FLUSH waits for the writes
    // before it), then of the whole MR: each completes as FLUSH.
    p.a.post_send(&[
        remote.rdma_write(1, &s).unwrap(),
        remote.flush(2, FlushType::GLOBAL).unwrap().signaled(),
        remote.flush_mr(3, FlushType::GLOBAL).signaled(),
    ])
    .unwrap();
    let wc = wait(&mut p.cq_a, 2);
    for (wc, id) in wc.iter().zip([2, 3]) {
        assert!(wc.is_success(), "{wc:?}");
        assert_eq!((wc.wr_id(), wc.opcode()), (id, WcOpcode::FLUSH));
    }
    assert_eq!(target.to_vec(), data);
}

#[test]
fn flush_needs_the_flush_access() {
    if !offered() {
        return; // refused before posting: see the test above
    }
    // The QP takes FLUSH, the MR does not: an access error.
    let mut p = flush_pair();
    let target = p.pd.alloc_mr(4096, all_access()).unwrap();
    let wr = target
        .remote()
        .flush(1, FlushType::GLOBAL)
        .unwrap()
        .signaled();
    p.a.post_send(&[wr]).unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");

    // The MR takes it, the responder's QP does not: rxe answers an
    // invalid request (the operation is not enabled on the QP).
    let mut p = Pair::new();
    let target = p.pd.alloc_mr(4096, flushable()).unwrap();
    let wr = target
        .remote()
        .flush(2, FlushType::GLOBAL)
        .unwrap()
        .signaled();
    p.a.post_send(&[wr]).unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    assert_eq!(wc.status(), WcStatus::REM_INV_REQ_ERR, "{wc:?}");
}

#[test]
fn persistent_flush_needs_persistent_memory() {
    let p = Pair::new();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::FLUSH_PERSISTENT;
    match p.pd.alloc_mr(4096, access) {
        // 6.2 on: the device offers it, the kernel refuses DRAM pages.
        Err(Error::Kernel {
            op: "reg_mr",
            errno: Errno::EINVAL,
        }) if offered() => {}
        Err(Error::NotOffered { .. }) if !offered() => {}
        other => panic!("FLUSH_PERSISTENT on ordinary memory: {other:?}"),
    }
}

/// The VM's persistent memory: its emulated NVDIMM, a device-DAX namespace
/// (set up by the harness's guest script).
const PMEM: &str = "/dev/dax0.0";

/// Device DAX maps in units of its alignment (2 MiB).
const PMEM_CHUNK: usize = 2 << 20;

/// Maps the `index`th 2 MiB of the VM's persistent memory.
#[allow(unsafe_code)]
fn map_pmem(index: u64) -> memmap2::MmapMut {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(PMEM)
        .unwrap_or_else(|e| panic!("{PMEM}: {e} (the VM harness provides it)"));
    // SAFETY: each test maps its own 2 MiB of the device, which nothing
    // else in the guest maps; the mapping is owned by the MR from here on.
    unsafe {
        memmap2::MmapOptions::new()
            .offset(index * PMEM_CHUNK as u64)
            .len(PMEM_CHUNK)
            .map_mut(&file)
    }
    .unwrap_or_else(|e| panic!("mmap {PMEM}: {e}"))
}

#[test]
fn persistent_flush_to_pmem() {
    let persistent =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::FLUSH_PERSISTENT;
    if !offered() {
        let p = Pair::new();
        match p.pd.register(map_pmem(0), persistent) {
            Err(rverbs::RegisterError {
                error: Error::NotOffered { .. },
                ..
            }) => {}
            other => panic!("FLUSH_PERSISTENT registration not refused: {other:?}"),
        }
        // Persistent memory registers like any other memory.
        let mut p = Pair::new();
        let target = p.pd.register(map_pmem(0), all_access()).unwrap();
        let mut src = p.pd.alloc_mr(4096, all_access()).unwrap();
        let data = pattern(4096, 3);
        src.write_at(0, &data).unwrap();
        let s = [src.sge(..).unwrap()];
        let wr = target.remote().slice(8192, 4096).unwrap();
        p.a.post_send(&[wr.rdma_write(1, &s).unwrap().signaled()])
            .unwrap();
        wait_ok(&mut p.cq_a);
        assert_eq!(&target.to_vec()[8192..12288], &data[..]);
        return;
    }
    let mut p = Pair::with(PairOpts {
        access: all_access() | AccessFlags::FLUSH_GLOBAL | AccessFlags::FLUSH_PERSISTENT,
        ..PairOpts::default()
    });
    let target =
        p.pd.register(map_pmem(0), persistent | AccessFlags::FLUSH_GLOBAL)
            .unwrap();
    let len = 65536;
    let mut src = p.pd.alloc_mr(len, all_access()).unwrap();
    let data = pattern(len, 11);
    src.write_at(0, &data).unwrap();
    let s = [src.sge(..).unwrap()];
    let remote = target.remote().slice(4096, len as u64).unwrap();
    // WRITE, then FLUSH to persistence of its range, of both placement
    // types at once, and of the whole MR.
    p.a.post_send(&[
        remote.rdma_write(1, &s).unwrap(),
        remote.flush(2, FlushType::PERSISTENT).unwrap().signaled(),
        remote
            .flush(3, FlushType::PERSISTENT | FlushType::GLOBAL)
            .unwrap()
            .signaled(),
        target
            .remote()
            .flush_mr(4, FlushType::PERSISTENT)
            .signaled(),
    ])
    .unwrap();
    let wc = wait(&mut p.cq_a, 3);
    for (wc, id) in wc.iter().zip([2, 3, 4]) {
        assert!(wc.is_success(), "{wc:?}");
        assert_eq!((wc.wr_id(), wc.opcode()), (id, WcOpcode::FLUSH));
    }
    let all = target.to_vec();
    assert_eq!(&all[4096..4096 + len], &data[..]);

    // Persistent memory registered for global flushes only: a flush to
    // persistence is an access error at the responder.
    let global_only = p.pd.register(map_pmem(1), flushable()).unwrap();
    let wr = global_only
        .remote()
        .flush_mr(5, FlushType::PERSISTENT)
        .signaled();
    p.a.post_send(&[wr]).unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");
}

#[test]
fn registration_at_another_iova() {
    let mut p = Pair::new();
    let len = 8192;
    // Same offset within a page as the (page-aligned) buffer.
    let iova = 0x7000_0000_0000;
    let target =
        p.pd.register_at(rverbs::PageBuf::new(len).unwrap(), all_access(), iova)
            .unwrap();
    assert_eq!(target.iova(), iova);
    assert_ne!(target.addr(), iova);
    let remote = target.remote();
    assert_eq!(remote.addr, iova);
    let mut src = p.pd.alloc_mr(len, all_access()).unwrap();
    let data = pattern(len, 9);
    src.write_at(0, &data).unwrap();
    // WRITE to the IOVA range lands in the buffer.
    let s = [src.sge(..4096).unwrap()];
    let wr = remote.slice(4096, 4096).unwrap().rdma_write(1, &s).unwrap();
    p.a.post_send(&[wr.signaled()]).unwrap();
    wait_ok(&mut p.cq_a);
    assert_eq!(&target.to_vec()[4096..], &data[..4096]);
    // The buffer's own address is not the MR's any more: refused.
    let wr = SendWr::rdma_write(2, &s, target.addr(), target.rkey());
    p.a.post_send(&[wr.signaled()]).unwrap();
    let wc = wait(&mut p.cq_a, 1)[0];
    assert_eq!(wc.status(), WcStatus::REM_ACCESS_ERR, "{wc:?}");

    // Local SGEs name the IOVA too: b SENDs from the IOVA-registered MR.
    let mut p = Pair::new();
    let mut local =
        p.pd.register_at(rverbs::PageBuf::new(4096).unwrap(), all_access(), 0x1000)
            .unwrap();
    local.write_at(0, &data[..4096]).unwrap();
    let sge = local.sge(100..200).unwrap();
    assert_eq!(sge.addr, 0x1000 + 100);
    let dst = p.pd.alloc_mr(4096, all_access()).unwrap();
    let r = [dst.sge(..).unwrap()];
    p.a.post_recv(&[rverbs::RecvWr::new(1, &r)]).unwrap();
    p.b.post_send(&[SendWr::send(2, &[sge]).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_b);
    let wc = wait_ok(&mut p.cq_a);
    assert_eq!(wc.byte_len(), 100);
    assert_eq!(&dst.to_vec()[..100], &data[100..200]);

    // An IOVA at another page offset, or running off the address space,
    // is refused before the kernel is asked.
    for bad in [0x1001, u64::MAX - 100] {
        match p.pd.register_at(vec![0u8; 4096], all_access(), bad) {
            Err(e) => assert!(matches!(e.error, Error::InvalidArgument(_)), "{e}"),
            Ok(_) => panic!("IOVA {bad:#x} accepted"),
        }
    }
}

#[test]
fn relaxed_ordering_is_accepted_as_optional() {
    // Every series here takes optional access flags (rxe ignores this
    // one): the registration succeeds at the first try and keeps the flag
    // (a kernel that refused it would have it dropped).
    let p = Pair::new();
    let access = all_access() | AccessFlags::RELAXED_ORDERING;
    let mr = p.pd.alloc_mr(4096, access).unwrap();
    assert_eq!(mr.access(), access);
}
