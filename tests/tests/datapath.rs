//! Data path on a real rxe device: every opcode of the foundation, with one
//! and several SGEs, inline and not, chained, and signaled every N. Every
//! test checks the bytes that arrived, not only the completion.

#![forbid(unsafe_code)]

use std::io::IoSlice;

use rverbs::{RecvWr, SendFlags, SendWr, Sge, WcOpcode};
use verbs_tests::{assert_quiet, pattern, wait, wait_ok, Pair};

#[test]
fn send_recv_one_sge() {
    let mut p = Pair::new();
    let mut src = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let data = pattern(3000, 1);
    src.write_at(0, &data).unwrap();
    let r = [dst.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(7, &r)]).unwrap();
    let s = [src.sge(..3000).unwrap()];
    p.a.post_send(&[SendWr::send(8, &s).signaled()]).unwrap();
    let wc = wait_ok(&mut p.cq_a);
    assert_eq!((wc.wr_id(), wc.opcode()), (8, WcOpcode::SEND));
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!(
        (wc.wr_id(), wc.opcode(), wc.byte_len()),
        (7, WcOpcode::RECV, 3000)
    );
    assert_eq!(wc.qp_num(), p.b.qp_num());
    assert_eq!(wc.imm_data(), None);
    assert_eq!(&dst.to_vec()[..3000], &data[..]);
}

#[test]
fn send_recv_several_sges_gather_and_scatter() {
    let mut p = Pair::new();
    let mut src = p.pd.alloc_mr(8192, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(8192, verbs_tests::all_access()).unwrap();
    let data = pattern(8192, 2);
    src.write_at(0, &data).unwrap();
    // Gather 3 pieces out of order; scatter into 4 pieces.
    let s = [
        src.sge(5000..6000).unwrap(),
        src.sge(0..100).unwrap(),
        src.sge(2000..2900).unwrap(),
    ];
    let r = [
        dst.sge(0..10).unwrap(),
        dst.sge(100..600).unwrap(),
        dst.sge(1000..1500).unwrap(),
        dst.sge(4000..8000).unwrap(),
    ];
    p.b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    p.a.post_send(&[SendWr::send(2, &s).signaled()]).unwrap();
    wait_ok(&mut p.cq_a);
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!(wc.byte_len(), 2000);
    let expected: Vec<u8> = [&data[5000..6000], &data[0..100], &data[2000..2900]].concat();
    let got = dst.to_vec();
    let scattered: Vec<u8> = [
        &got[0..10],
        &got[100..600],
        &got[1000..1500],
        &got[4000..4990],
    ]
    .concat();
    assert_eq!(scattered, expected);
}

#[test]
fn send_with_imm_delivers_immediate() {
    let mut p = Pair::new();
    let mut src = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(64, verbs_tests::all_access()).unwrap();
    src.write_at(0, b"immediate!").unwrap();
    let r = [dst.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    let s = [src.sge(..10).unwrap()];
    p.a.post_send(&[SendWr::send_with_imm(2, &s, 0xdead_beef).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!(wc.opcode(), WcOpcode::RECV);
    assert_eq!(wc.imm_data(), Some(0xdead_beef));
    assert_eq!(&dst.to_vec()[..10], b"immediate!");
}

#[test]
fn rdma_write_one_and_several_sges() {
    let mut p = Pair::new();
    let mut src = p.pd.alloc_mr(16384, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(16384, verbs_tests::all_access()).unwrap();
    let data = pattern(16384, 3);
    src.write_at(0, &data).unwrap();
    let rm = dst.remote();
    let one = [src.sge(..4096).unwrap()];
    p.a.post_send(&[SendWr::rdma_write(1, &one, rm.addr, rm.rkey).signaled()])
        .unwrap();
    assert_eq!(wait_ok(&mut p.cq_a).opcode(), WcOpcode::RDMA_WRITE);
    assert_eq!(&dst.to_vec()[..4096], &data[..4096]);
    // Three SGEs gathered into one contiguous remote range at offset 8000.
    let three = [
        src.sge(10000..11000).unwrap(),
        src.sge(4096..5096).unwrap(),
        src.sge(15000..16384).unwrap(),
    ];
    let at = rm.at(8000, 3384).unwrap();
    p.a.post_send(&[SendWr::rdma_write(2, &three, at, rm.rkey).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    let expected = [&data[10000..11000], &data[4096..5096], &data[15000..16384]].concat();
    assert_eq!(&dst.to_vec()[8000..11384], &expected[..]);
    // No receive was consumed at B.
    assert_quiet(&mut p.cq_b, std::time::Duration::from_millis(50));
}

#[test]
fn rdma_write_with_imm_consumes_a_receive() {
    let mut p = Pair::new();
    let mut src = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let data = pattern(4096, 4);
    src.write_at(0, &data).unwrap();
    p.b.post_recv(&[RecvWr::new(77, &[])]).unwrap();
    let s = [src.sge(..).unwrap()];
    let rm = dst.remote();
    p.a.post_send(&[SendWr::rdma_write_with_imm(1, &s, rm.addr, rm.rkey, 42).signaled()])
        .unwrap();
    assert_eq!(wait_ok(&mut p.cq_a).opcode(), WcOpcode::RDMA_WRITE);
    let wc = wait_ok(&mut p.cq_b);
    assert_eq!(wc.wr_id(), 77);
    assert_eq!(wc.opcode(), WcOpcode::RECV_RDMA_WITH_IMM);
    assert_eq!(wc.imm_data(), Some(42));
    assert_eq!(dst.to_vec(), data);
}

#[test]
fn rdma_read_one_and_several_sges() {
    let mut p = Pair::new();
    let mut remote = p.pd.alloc_mr(8192, verbs_tests::all_access()).unwrap();
    let local = p.pd.alloc_mr(8192, verbs_tests::all_access()).unwrap();
    let data = pattern(8192, 5);
    remote.write_at(0, &data).unwrap();
    let rm = remote.remote();
    let one = [local.sge(..8192).unwrap()];
    p.a.post_send(&[SendWr::rdma_read(1, &one, rm.addr, rm.rkey).signaled()])
        .unwrap();
    let wc = wait_ok(&mut p.cq_a);
    assert_eq!((wc.opcode(), wc.byte_len()), (WcOpcode::RDMA_READ, 8192));
    assert_eq!(local.to_vec(), data);
    // Scatter a 3000-byte remote range at offset 100 into two local pieces.
    let two = [local.sge(6000..7000).unwrap(), local.sge(0..2000).unwrap()];
    p.a.post_send(&[SendWr::rdma_read(2, &two, rm.at(100, 3000).unwrap(), rm.rkey).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    let got = local.to_vec();
    assert_eq!(&got[6000..7000], &data[100..1100]);
    assert_eq!(&got[0..2000], &data[1100..3100]);
}

#[test]
fn inline_send_and_write_from_unregistered_memory() {
    let mut p = Pair::new();
    let max = p.a.cap().max_inline_data as usize;
    assert!(max >= 64, "rxe grants inline data (got {max})");
    let dst = p.pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    let r = [dst.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    // Two stack buffers, not registered anywhere, gathered inline.
    let (x, y) = (pattern(40, 6), pattern(24, 7));
    let bufs = [IoSlice::new(&x), IoSlice::new(&y)];
    p.a.post_send(&[SendWr::send_inline(2, &bufs).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    assert_eq!(wait_ok(&mut p.cq_b).byte_len(), 64);
    assert_eq!(&dst.to_vec()[..64], &[x.clone(), y.clone()].concat()[..]);
    // Inline RDMA WRITE; the source is dropped before the completion.
    let rm = dst.remote();
    {
        let z = pattern(max, 8);
        let expected = z.clone();
        let bufs = [IoSlice::new(&z)];
        let wr = rverbs::opcode::Write::inline(3, &bufs, rm.at(1000, max as u64).unwrap(), rm.rkey)
            .build()
            .signaled();
        p.a.post_send(&[wr]).unwrap();
        drop(z);
        wait_ok(&mut p.cq_a);
        assert_eq!(&dst.to_vec()[1000..1000 + max], &expected[..]);
    }
}

#[test]
fn chained_requests_one_post_each_side() {
    let mut p = Pair::new();
    let mut src = p.pd.alloc_mr(4 * 256, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(4 * 256, verbs_tests::all_access()).unwrap();
    let data = pattern(1024, 9);
    src.write_at(0, &data).unwrap();
    let r: Vec<[Sge; 1]> = (0..4)
        .map(|i| [dst.sge(i * 256..(i + 1) * 256).unwrap()])
        .collect();
    let rwrs: Vec<RecvWr> = r
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr::new(100 + i as u64, s))
        .collect();
    p.b.post_recv(&rwrs).unwrap();
    let s: Vec<[Sge; 1]> = (0..4)
        .map(|i| [src.sge(i * 256..(i + 1) * 256).unwrap()])
        .collect();
    let swrs: Vec<SendWr> = s
        .iter()
        .enumerate()
        .map(|(i, s)| SendWr::send(i as u64, s).signaled())
        .collect();
    p.a.post_send(&swrs).unwrap();
    let sent = wait(&mut p.cq_a, 4);
    let got = wait(&mut p.cq_b, 4);
    for i in 0..4 {
        assert!(sent[i].is_success() && got[i].is_success());
        assert_eq!(sent[i].wr_id(), i as u64, "send completions in order");
        assert_eq!(got[i].wr_id(), 100 + i as u64, "receives consumed in order");
    }
    assert_eq!(dst.to_vec(), data);
}

#[test]
fn signaled_every_n() {
    const N: u64 = 8;
    const TOTAL: u64 = 64;
    let mut p = Pair::new();
    let mut src =
        p.pd.alloc_mr(TOTAL as usize * 64, verbs_tests::all_access())
            .unwrap();
    let dst =
        p.pd.alloc_mr(TOTAL as usize * 64, verbs_tests::all_access())
            .unwrap();
    let data = pattern(TOTAL as usize * 64, 10);
    src.write_at(0, &data).unwrap();
    let rm = dst.remote();
    let mut signaled = Vec::new();
    let mut posted = 0u64;
    // Post in chains of N, only the last of each chain signaled; wait for
    // it before reusing the queue space.
    while posted < TOTAL {
        let sges: Vec<[Sge; 1]> = (posted..posted + N)
            .map(|i| [src.sge(i as usize * 64..(i as usize + 1) * 64).unwrap()])
            .collect();
        let wrs: Vec<SendWr> = sges
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let i = posted + k as u64;
                let wr = SendWr::rdma_write(i, s, rm.addr + i * 64, rm.rkey);
                if (i + 1) % N == 0 {
                    wr.flags(SendFlags::SIGNALED)
                } else {
                    wr
                }
            })
            .collect();
        p.a.post_send(&wrs).unwrap();
        posted += N;
        signaled.push(wait_ok(&mut p.cq_a).wr_id());
    }
    assert_eq!(
        signaled,
        (1..=TOTAL / N).map(|k| k * N - 1).collect::<Vec<_>>()
    );
    assert_quiet(&mut p.cq_a, std::time::Duration::from_millis(50));
    assert_eq!(dst.to_vec(), data);
}

#[test]
fn large_message_spans_many_mtus() {
    let mut p = Pair::new();
    let len = 256 * 1024;
    let mut src = p.pd.alloc_mr(len, verbs_tests::all_access()).unwrap();
    let dst = p.pd.alloc_mr(len, verbs_tests::all_access()).unwrap();
    let data = pattern(len, 11);
    src.write_at(0, &data).unwrap();
    let r = [dst.sge(..).unwrap()];
    p.b.post_recv(&[RecvWr::new(1, &r)]).unwrap();
    let s = [src.sge(..).unwrap()];
    p.a.post_send(&[SendWr::send(2, &s).signaled()]).unwrap();
    wait_ok(&mut p.cq_a);
    assert_eq!(wait_ok(&mut p.cq_b).byte_len() as usize, len);
    assert!(dst.to_vec() == data, "256 KiB payload corrupted");
}

#[test]
fn caller_buffer_registration_round_trip() {
    let mut p = Pair::new();
    let mine = pattern(2048, 12);
    let expected = mine.clone();
    let src = p.pd.register(mine, verbs_tests::all_access()).unwrap();
    let dst =
        p.pd.register(
            vec![0u8; 2048].into_boxed_slice(),
            verbs_tests::all_access(),
        )
        .unwrap();
    let s = [src.sge(..).unwrap()];
    let rm = dst.remote();
    p.a.post_send(&[SendWr::rdma_write(1, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    // Deregistered: the caller's buffers are plain memory again.
    let back: Box<[u8]> = dst.into_inner().unwrap();
    assert_eq!(&back[..], &expected[..]);
    assert_eq!(src.into_inner().unwrap(), expected);
}

#[test]
fn scoped_registration_of_a_caller_buffer() {
    let mut p = Pair::new();
    let mut mine = pattern(2048, 13);
    let expected = mine.clone();
    let mut back = vec![0u8; 2048];
    let mut rkey_seen = 0;
    p.pd.register_scoped(&mut mine, verbs_tests::all_access(), |src| {
        p.pd.register_scoped(&mut back, verbs_tests::all_access(), |dst| {
            let s = [src.sge(..).unwrap()];
            let rm = dst.remote();
            rkey_seen = rm.rkey;
            p.a.post_send(&[SendWr::rdma_write(1, &s, rm.addr, rm.rkey).signaled()])
                .unwrap();
            wait_ok(&mut p.cq_a);
        })
        .unwrap();
    })
    .unwrap();
    assert_eq!(back, expected);
    // The scope deregistered the region: its rkey is dead, and a WRITE
    // through it fails on the device instead of reaching `back`.
    let src = p.pd.alloc_mr(2048, verbs_tests::all_access()).unwrap();
    let s = [src.sge(..).unwrap()];
    let addr = back.as_ptr() as u64;
    p.a.post_send(&[SendWr::rdma_write(2, &s, addr, rkey_seen).signaled()])
        .unwrap();
    let wc = verbs_tests::wait(&mut p.cq_a, 1)[0];
    assert_eq!(wc.status(), rverbs::WcStatus::REM_ACCESS_ERR);
    assert_eq!(back, expected, "a dead registration reached the buffer");
}

/// One receive scatters a SEND into three caller buffers registered by
/// one `register_scoped_all` (no nested closures, a flat result).
#[test]
fn scoped_registration_of_three_buffers_takes_one_scatter() {
    let mut p = Pair::new();
    let data = pattern(64 + 1000 + 16, 17);
    let mut src =
        p.pd.alloc_mr(data.len(), verbs_tests::all_access())
            .unwrap();
    src.write_at(0, &data).unwrap();
    let (mut header, mut body, mut trailer) = ([0u8; 64], vec![0u8; 1000], [0u8; 16]);
    let len =
        p.pd.register_scoped_all(
            [&mut header[..], &mut body[..], &mut trailer[..]],
            rverbs::AccessFlags::LOCAL_WRITE,
            |[h, b, t]| {
                let sges = [h.sge(..)?, b.sge(..)?, t.sge(..)?];
                p.b.post_recv(&[RecvWr::new(7, &sges)])?;
                let s = [src.sge(..)?];
                p.a.post_send(&[SendWr::send(8, &s).signaled()])?;
                wait_ok(&mut p.cq_a);
                let wc = wait_ok(&mut p.cq_b);
                assert_eq!(wc.wr_id(), 7);
                Ok::<_, rverbs::Error>(wc.byte_len())
            },
        )
        .unwrap();
    assert_eq!(len as usize, data.len());
    assert_eq!(&header[..], &data[..64]);
    assert_eq!(&body[..], &data[64..1064]);
    assert_eq!(&trailer[..], &data[1064..]);
}

#[test]
fn forgetting_an_mr_leaks_its_memory_instead_of_freeing_it() {
    // `mem::forget` is safe: a forgotten MR must keep owning its memory, so
    // the registration can never reach memory the allocator hands out again.
    let mut p = Pair::new();
    let dst =
        p.pd.register(vec![0u8; 1 << 16], verbs_tests::all_access())
            .unwrap();
    let rm = dst.remote();
    std::mem::forget(dst);
    // Allocations of the same size now get other addresses.
    let fresh: Vec<Vec<u8>> = (0..16).map(|_| vec![0u8; 1 << 16]).collect();
    let registered = rm.addr..rm.addr + rm.len;
    for v in &fresh {
        assert!(!registered.contains(&(v.as_ptr() as u64)));
    }
    let mut src = p.pd.alloc_mr(1 << 16, verbs_tests::all_access()).unwrap();
    src.fill(.., 0xa5).unwrap();
    let s = [src.sge(..).unwrap()];
    p.a.post_send(&[SendWr::rdma_write(1, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    for v in &fresh {
        assert!(
            v.iter().all(|&b| b == 0),
            "the device wrote a fresh allocation"
        );
    }
}
