//! No allocation on the data path: `post_send`, `post_recv`,
//! `post_srq_recv` and `poll` run on a real rxe device under a counting
//! global allocator (this file is its own test binary, so the allocator is
//! this test's alone). Each workload runs a few warm-up rounds, then a
//! measured loop during which the calling thread must make no allocator
//! call at all (alloc, alloc_zeroed, realloc or dealloc), while the
//! completions and the bytes that arrived are still checked.
//!
//! Counting is per thread (a `const` thread-local, which needs no
//! allocation and no destructor), so the test harness's own threads cannot
//! disturb it. `counter_sees_allocations` proves the counter counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::IoSlice;

use rverbs::{
    AccessFlags, Ah, AhAttr, ConnectOpts, Cq, Error, GlobalRoute, Grh, Mr, PostError, Qp, QpCap,
    QpInitAttr, QpType, RecvWr, SendFlags, SendWr, Sge, SrqInitAttr, UdSendWr, Wc, WcOpcode,
};
use verbs_tests::{all_access, pattern, Pair, PairOpts, TIMEOUT};

/// [`System`], counting every call made by the current thread.
struct Counting;

thread_local! {
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

fn bump() {
    // `try_with`: during thread teardown the slot may be gone; those calls
    // are not on any measured path.
    let _ = CALLS.try_with(|c| c.set(c.get() + 1));
}

/// Allocator calls made by this thread so far.
fn calls() -> u64 {
    CALLS.with(Cell::get)
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the counter is a thread-local Cell that needs no allocation.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded as is; the caller upholds alloc's contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        bump();
        // SAFETY: forwarded as is; `ptr` came from `System` via this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        bump();
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const WARMUP: usize = 5;
const ROUNDS: usize = 200;

/// Runs `round` WARMUP times, then ROUNDS times counting allocator calls;
/// asserts there were none and returns how many rounds were measured.
fn assert_no_alloc(what: &str, mut round: impl FnMut(usize)) {
    for i in 0..WARMUP {
        round(i);
    }
    let before = calls();
    for i in 0..ROUNDS {
        round(WARMUP + i);
    }
    let during = calls() - before;
    assert_eq!(
        during, 0,
        "{what}: {during} allocator calls in {ROUNDS} rounds of the data path"
    );
}

/// Polls `cq` until exactly `N` completions arrive; asserts they succeeded
/// with the opcodes `ops`, in order. Allocation-free (the array is on the
/// stack; the assertion messages are only built on failure).
fn expect<const N: usize>(cq: &mut Cq, ops: [WcOpcode; N]) -> [Wc; N] {
    let mut wc = [Wc::default(); N];
    let got = cq
        .poll_until(&mut wc, N, TIMEOUT)
        .unwrap_or_else(|e| panic!("waiting for {N} completions: {e}"));
    assert_eq!(got, N);
    for (w, op) in wc.iter().zip(ops) {
        assert!(w.is_success(), "completion failed: {w:?}");
        assert_eq!(w.opcode(), op, "{w:?}");
    }
    wc
}

fn check(mr: &Mr, offset: usize, expected: &[u8]) {
    let mut got = [0u8; 256];
    let got = &mut got[..expected.len()];
    mr.read_at(offset, got).expect("read_at");
    assert_eq!(got, expected, "bytes at offset {offset}");
}

fn mrs(p: &Pair) -> (Mr, Mr) {
    let src = p.pd.alloc_mr(8192, all_access()).expect("alloc_mr");
    let dst = p.pd.alloc_mr(8192, all_access()).expect("alloc_mr");
    (src, dst)
}

#[test]
fn counter_sees_allocations() {
    let before = calls();
    let v: Vec<u8> = std::hint::black_box(Vec::with_capacity(64));
    drop(v);
    assert_eq!(calls() - before, 2, "one alloc and one dealloc");
}

#[test]
fn rc_send_recv_and_send_with_imm() {
    let mut p = Pair::new();
    let (mut src, dst) = mrs(&p);
    let data = pattern(256, 1);
    src.write_at(0, &data).unwrap();
    let s = [src.sge(..256).unwrap()];
    let r = [dst.sge(..256).unwrap()];
    assert_no_alloc("RC SEND / SEND_WITH_IMM", |i| {
        let wr = if i % 2 == 0 {
            SendWr::send(i as u64, &s).signaled()
        } else {
            SendWr::send_with_imm(i as u64, &s, i as u32).signaled()
        };
        p.b.post_recv(&[RecvWr::new(i as u64, &r)]).unwrap();
        p.a.post_send(&[wr]).unwrap();
        expect(&mut p.cq_a, [WcOpcode::SEND]);
        let wc = expect(&mut p.cq_b, [WcOpcode::RECV])[0];
        assert_eq!((wc.wr_id(), wc.byte_len()), (i as u64, 256));
        let imm = (i % 2 == 1).then_some(i as u32);
        assert_eq!(wc.imm_data(), imm);
    });
    check(&dst, 0, &data);
}

#[test]
fn rc_inline_send_and_write() {
    let mut p = Pair::new();
    let (_src, dst) = mrs(&p);
    let rb = dst.remote();
    let r = [dst.sge(..128).unwrap()];
    let head = pattern(32, 2);
    let tail = pattern(96, 3);
    assert_no_alloc("RC inline SEND and RDMA WRITE", |i| {
        let bufs = [IoSlice::new(&head), IoSlice::new(&tail)];
        p.b.post_recv(&[RecvWr::new(i as u64, &r)]).unwrap();
        p.a.post_send(&[
            SendWr::send_inline(1, &bufs),
            rverbs::opcode::Write::inline(2, &bufs, rb.addr + 4096, rb.rkey)
                .build()
                .signaled(),
        ])
        .unwrap();
        // RC completes in order: the signaled WRITE's completion follows
        // the SEND's delivery.
        let wc = expect(&mut p.cq_a, [WcOpcode::RDMA_WRITE])[0];
        assert_eq!(wc.wr_id(), 2);
        assert_eq!(expect(&mut p.cq_b, [WcOpcode::RECV])[0].byte_len(), 128);
    });
    check(&dst, 0, &head);
    check(&dst, 32, &tail);
    check(&dst, 4096, &head);
    check(&dst, 4096 + 32, &tail);
}

#[test]
fn rc_write_chain_with_one_signaled() {
    let mut p = Pair::new();
    let (mut src, dst) = mrs(&p);
    let data = pattern(8 * 64, 4);
    src.write_at(0, &data).unwrap();
    let rb = dst.remote();
    let sges: [[Sge; 1]; 8] = std::array::from_fn(|k| [src.sge(k * 64..(k + 1) * 64).unwrap()]);
    assert_no_alloc("RC chain of 8 RDMA WRITEs", |_| {
        let chain: [SendWr<'_>; 8] = std::array::from_fn(|k| {
            let wr = SendWr::rdma_write(k as u64, &sges[k], rb.addr + (k * 64) as u64, rb.rkey);
            if k == 7 {
                wr.signaled()
            } else {
                wr
            }
        });
        p.a.post_send(&chain).unwrap();
        assert_eq!(expect(&mut p.cq_a, [WcOpcode::RDMA_WRITE])[0].wr_id(), 7);
    });
    check(&dst, 0, &data[..256]);
    check(&dst, 256, &data[256..]);
}

#[test]
fn rc_write_with_imm_and_read() {
    let mut p = Pair::new();
    let (mut src, mut dst) = mrs(&p);
    let data = pattern(200, 5);
    src.write_at(0, &data).unwrap();
    let back = pattern(200, 6);
    dst.write_at(4096, &back).unwrap();
    let rb = dst.remote();
    let s = [src.sge(..200).unwrap()];
    let into = [src.sge(4096..4296).unwrap()];
    let r = [dst.sge(..8).unwrap()];
    assert_no_alloc("RC WRITE_WITH_IMM and READ", |i| {
        p.b.post_recv(&[RecvWr::new(i as u64, &r)]).unwrap();
        p.a.post_send(&[
            SendWr::rdma_write_with_imm(1, &s, rb.addr, rb.rkey, 0xab).signaled(),
            SendWr::rdma_read(2, &into, rb.addr + 4096, rb.rkey).signaled(),
        ])
        .unwrap();
        let wc = expect(&mut p.cq_a, [WcOpcode::RDMA_WRITE, WcOpcode::RDMA_READ]);
        assert_eq!((wc[0].wr_id(), wc[1].wr_id()), (1, 2));
        assert_eq!(wc[1].byte_len(), 200);
        let wc = expect(&mut p.cq_b, [WcOpcode::RECV_RDMA_WITH_IMM])[0];
        assert_eq!(wc.imm_data(), Some(0xab));
    });
    check(&dst, 0, &data);
    check(&src, 4096, &back);
}

#[test]
fn rc_atomics() {
    let mut p = Pair::new();
    let (src, mut dst) = mrs(&p);
    dst.write_at(0, &0u64.to_ne_bytes()).unwrap();
    let rb = dst.remote();
    let old = [src.sge(..8).unwrap()];
    assert_no_alloc("RC FETCH_ADD and CMP_SWAP", |i| {
        p.a.post_send(&[
            SendWr::fetch_add(1, &old[0], rb.addr, rb.rkey, 1).signaled(),
            // Swaps only when the value is 1 << 40, never here.
            SendWr::cmp_swap(2, &old[0], rb.addr, rb.rkey, 1 << 40, 7).signaled(),
        ])
        .unwrap();
        let wc = expect(&mut p.cq_a, [WcOpcode::FETCH_ADD, WcOpcode::COMP_SWAP]);
        assert_eq!((wc[0].wr_id(), wc[1].wr_id()), (1, 2));
        // The value before the add: one per earlier round.
        let mut v = [0u8; 8];
        src.read_at(0, &mut v).unwrap();
        assert_eq!(
            u64::from_ne_bytes(v),
            i as u64 + 1,
            "CMP_SWAP returns the value after the add"
        );
    });
    let mut v = [0u8; 8];
    dst.read_at(0, &mut v).unwrap();
    assert_eq!(u64::from_ne_bytes(v), (WARMUP + ROUNDS) as u64);
}

#[test]
fn poll_of_an_empty_cq_and_refused_posts() {
    let mut p = Pair::with(PairOpts {
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        ..PairOpts::default()
    });
    let (src, dst) = mrs(&p);
    let rb = dst.remote();
    let one = [src.sge(..8).unwrap()];
    // One SGE more than each queue was granted (built before measuring).
    let max = p.a.cap().max_send_sge.max(p.b.cap().max_recv_sge) as usize;
    let many: Vec<Sge> = (0..max + 1)
        .map(|k| src.sge(k * 8..k * 8 + 8).unwrap())
        .collect();
    let smax = p.a.cap().max_send_sge;
    let mut wc = [Wc::default(); 4];
    assert_no_alloc("empty poll and refused posts", |_| {
        assert_eq!(p.cq_a.poll(&mut wc).unwrap(), 0);
        // The second request has too many SGEs: the first is posted and
        // the error names index 1.
        let e =
            p.a.post_send(&[
                SendWr::rdma_write(1, &one, rb.addr, rb.rkey).signaled(),
                SendWr::rdma_write(2, &many[..smax as usize + 1], rb.addr, rb.rkey),
            ])
            .map_err(Error::from)
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Post {
                    index: 1,
                    error: PostError::TooManySge { max, .. }
                } if max == smax
            ),
            "{e}"
        );
        expect(&mut p.cq_a, [WcOpcode::RDMA_WRITE]);
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
    });
}

/// Connects `a` and `b` (RC, on one device) as `Pair` does.
fn connect(ctx: &rverbs::Context, a: &mut Qp, b: &mut Qp) {
    let gid = ctx.default_gid_index(1).expect("gid index");
    let oa = ConnectOpts {
        sgid_index: gid,
        sq_psn: 10,
        ..Default::default()
    };
    let ob = ConnectOpts {
        sgid_index: gid,
        sq_psn: 20,
        ..Default::default()
    };
    let (ea, eb) = (a.endpoint(&oa).unwrap(), b.endpoint(&ob).unwrap());
    a.connect(&eb, all_access(), &oa).unwrap();
    b.connect(&ea, all_access(), &ob).unwrap();
}

#[test]
fn srq_receives() {
    let ctx = verbs_tests::open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let mut srq = pd
        .create_srq(&SrqInitAttr {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let mut scq = ctx.create_cq(64).unwrap();
    let mut rcq = ctx.create_cq(64).unwrap();
    let attr = |cq| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let mut s = pd.create_qp(&attr(&scq)).unwrap();
    let mut r = pd.create_qp_with_srq(&attr(&rcq), &srq).unwrap();
    connect(&ctx, &mut s, &mut r);
    let mut src = pd.alloc_mr(4096, all_access()).unwrap();
    let dst = pd.alloc_mr(4096, all_access()).unwrap();
    let data = pattern(100, 7);
    src.write_at(0, &data).unwrap();
    let sg = [src.sge(..100).unwrap()];
    let rg = [dst.sge(..100).unwrap()];
    assert_no_alloc("SRQ receive", |i| {
        srq.post_srq_recv(&[RecvWr::new(i as u64, &rg)]).unwrap();
        s.post_send(&[SendWr::send(i as u64, &sg).signaled()])
            .unwrap();
        expect(&mut scq, [WcOpcode::SEND]);
        let wc = expect(&mut rcq, [WcOpcode::RECV])[0];
        assert_eq!((wc.wr_id(), wc.byte_len()), (i as u64, 100));
    });
    check(&dst, 0, &data);
}

#[test]
fn ud_send_recv() {
    let ctx = verbs_tests::open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let gid_index = ctx.default_gid_index(1).unwrap();
    let gid = ctx.query_gid(1, gid_index).unwrap();
    let mut cq_a = ctx.create_cq(64).unwrap();
    let mut cq_b = ctx.create_cq(64).unwrap();
    let mk = |cq| {
        let mut qp = pd
            .create_qp(&QpInitAttr {
                send_cq: cq,
                recv_cq: cq,
                qp_type: QpType::Ud,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 64,
                },
                sq_sig_all: false,
            })
            .unwrap();
        qp.ready_ud(1, 0x1111, 0).unwrap();
        qp
    };
    let mut a = mk(&cq_a);
    let mut b = mk(&cq_b);
    let ah: Ah = pd
        .create_ah(&AhAttr {
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid: gid,
                sgid_index: gid_index,
                hop_limit: 64,
                ..Default::default()
            }),
            ..Default::default()
        })
        .unwrap();
    let mut src = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let dst = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let data = pattern(200, 8);
    src.write_at(0, &data).unwrap();
    let s = [src.sge(..200).unwrap()];
    let r = [dst.sge(..Grh::LEN + 200).unwrap()];
    let small = pattern(16, 9);
    let b_qpn = b.qp_num();
    assert_no_alloc("UD SEND (SGE and inline)", |i| {
        let inline = [IoSlice::new(&small)];
        let wr = if i % 2 == 0 {
            SendWr::send(i as u64, &s)
        } else {
            SendWr::send_inline(i as u64, &inline).flags(SendFlags::SOLICITED)
        };
        b.post_recv(&[RecvWr::new(i as u64, &r)]).unwrap();
        a.post_send(&[wr.to(&ah, b_qpn, 0x1111).signaled()])
            .unwrap();
        expect(&mut cq_a, [WcOpcode::SEND]);
        let wc = expect(&mut cq_b, [WcOpcode::RECV])[0];
        let len = if i % 2 == 0 { 200 } else { 16 };
        assert_eq!(wc.byte_len() as usize, Grh::LEN + len);
    });
    // The last round's payload is what the buffer holds.
    if (WARMUP + ROUNDS - 1) % 2 == 0 {
        check(&dst, Grh::LEN, &data);
    } else {
        check(&dst, Grh::LEN, &small);
    }
}
