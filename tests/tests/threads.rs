//! Threads: the verbs objects are `Send`/`Sync` where that is sound
//! (checked at compile time below), and a realistic layout works: several
//! threads each post on their own QP pair, while one thread owns the single
//! CQ all those QPs complete on and routes every completion back to the
//! thread that posted it. Every completion arrives exactly once, on the
//! right QP, with the right `wr_id`, and every byte arrives intact.

#![forbid(unsafe_code)]

use std::sync::mpsc;
use std::time::{Duration, Instant};

use rverbs::{
    CompChannel, ConnectOpts, Context, Cq, Device, Mr, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr,
    SendWr, Wc, WcOpcode,
};
use verbs_tests::{open_rxe, pattern, TIMEOUT};

// Compile-time: which verbs types may move between threads (Send) and be
// shared by reference (Sync). Posting and polling take `&mut`, so sharing
// a `&Qp` or `&Cq` only allows the thread-safe control calls.
const _: () = {
    const fn send<T: Send>() {}
    const fn sync<T: Sync>() {}
    send::<Context>();
    sync::<Context>();
    send::<Device>();
    sync::<Device>();
    send::<Pd>();
    sync::<Pd>();
    send::<Mr>();
    sync::<Mr>();
    send::<Cq>();
    sync::<Cq>();
    send::<Qp>();
    sync::<Qp>();
    send::<CompChannel>();
    sync::<CompChannel>();
    send::<Wc>();
    sync::<Wc>();
    send::<rverbs::Error>();
    sync::<rverbs::Error>();
};

const THREADS: usize = 4;
const ROUNDS: u64 = 40;
const BATCH: u64 = 8;
const MSG: usize = 700;
/// wr_id layout: thread in bits 32.., bit 31 set for receives, sequence below.
const RECV_BIT: u64 = 1 << 31;

struct Worker {
    a: Qp,
    b: Qp,
    src: Mr,
    dst: Mr,
}

fn qp(pd: &Pd, cq: &Cq) -> Qp {
    pd.create_qp(&QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        cap: QpCap {
            max_send_wr: BATCH as u32,
            max_recv_wr: BATCH as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    })
    .expect("create_qp")
}

fn seed(t: usize, seq: u64) -> u32 {
    (t as u32) << 24 | seq as u32
}

/// The posting side of thread `t`: ROUNDS rounds of BATCH receives and
/// BATCH SENDs, each round checked (completions from the poller, bytes).
fn work(t: usize, w: &mut Worker, rx: &mpsc::Receiver<Wc>) {
    let tag = (t as u64) << 32;
    for round in 0..ROUNDS {
        let base = round * BATCH;
        w.dst.fill(.., 0).unwrap();
        for j in 0..BATCH {
            let at = j as usize * MSG;
            w.src
                .write_at(at, &pattern(MSG, seed(t, base + j)))
                .unwrap();
        }
        let rsg: Vec<[rverbs::Sge; 1]> = (0..BATCH as usize)
            .map(|j| [w.dst.sge(j * MSG..(j + 1) * MSG).unwrap()])
            .collect();
        let recvs: Vec<RecvWr> = rsg
            .iter()
            .enumerate()
            .map(|(j, s)| RecvWr::new(tag | RECV_BIT | (base + j as u64), s))
            .collect();
        w.b.post_recv(&recvs).unwrap();
        let ssg: Vec<[rverbs::Sge; 1]> = (0..BATCH as usize)
            .map(|j| [w.src.sge(j * MSG..(j + 1) * MSG).unwrap()])
            .collect();
        let sends: Vec<SendWr> = ssg
            .iter()
            .enumerate()
            .map(|(j, s)| SendWr::send(tag | (base + j as u64), s).signaled())
            .collect();
        w.a.post_send(&sends).unwrap();

        let (mut sent, mut recvd) = (Vec::new(), Vec::new());
        for _ in 0..2 * BATCH {
            let wc = rx
                .recv_timeout(TIMEOUT)
                .unwrap_or_else(|e| panic!("thread {t} round {round}: no completion: {e}"));
            assert!(wc.is_success(), "thread {t}: {wc:?}");
            assert_eq!(wc.wr_id() >> 32, t as u64, "routed to the wrong thread");
            if wc.wr_id() & RECV_BIT != 0 {
                assert_eq!(wc.opcode(), WcOpcode::RECV);
                assert_eq!(wc.qp_num(), w.b.qp_num());
                assert_eq!(wc.byte_len(), MSG as u32);
                recvd.push(wc.wr_id() & (RECV_BIT - 1));
            } else {
                assert_eq!(wc.opcode(), WcOpcode::SEND);
                assert_eq!(wc.qp_num(), w.a.qp_num());
                sent.push(wc.wr_id() & (RECV_BIT - 1));
            }
        }
        // Each queue completes in posting order.
        let want: Vec<u64> = (base..base + BATCH).collect();
        assert_eq!(sent, want, "thread {t}: send completions");
        assert_eq!(recvd, want, "thread {t}: receive completions");
        let got = w.dst.to_vec();
        for j in 0..BATCH {
            let at = j as usize * MSG;
            assert!(
                got[at..at + MSG] == pattern(MSG, seed(t, base + j))[..],
                "thread {t}: message {} corrupted",
                base + j
            );
        }
    }
}

#[test]
fn threads_post_on_their_own_qps_one_thread_polls_the_shared_cq() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let depth = (THREADS as u64 * BATCH * 2) as u32;
    let mut cq = ctx.create_cq(depth).unwrap();
    assert!(cq.cqe() >= depth);
    let gid = ctx.default_gid_index(1).unwrap();
    let acc = verbs_tests::all_access();
    let mut workers: Vec<Worker> = (0..THREADS)
        .map(|t| {
            let mut a = qp(&pd, &cq);
            let mut b = qp(&pd, &cq);
            let oa = ConnectOpts {
                sgid_index: gid,
                sq_psn: 1000 + t as u32,
                ..ConnectOpts::default()
            };
            let ob = ConnectOpts {
                sq_psn: 2000 + t as u32,
                ..oa
            };
            let ea = a.endpoint(&oa).unwrap();
            let eb = b.endpoint(&ob).unwrap();
            a.connect(&eb, acc, &oa).unwrap();
            b.connect(&ea, acc, &ob).unwrap();
            let len = BATCH as usize * MSG;
            Worker {
                a,
                b,
                src: pd.alloc_mr(len, acc).unwrap(),
                dst: pd.alloc_mr(len, acc).unwrap(),
            }
        })
        .collect();
    // Which QP each completion must name, per thread: (sender, receiver).
    let qpns: Vec<(u32, u32)> = workers
        .iter()
        .map(|w| (w.a.qp_num(), w.b.qp_num()))
        .collect();
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<Wc>()).unzip();
    let total = THREADS as u64 * ROUNDS * BATCH * 2;

    std::thread::scope(|s| {
        // The poller owns the CQ for the whole run.
        let cq = &mut cq;
        let poller = s.spawn(move || {
            let mut wc = [Wc::default(); 16];
            let mut seen = 0u64;
            let mut idle = Instant::now();
            while seen < total {
                let n = cq.poll(&mut wc).unwrap();
                if n == 0 {
                    assert!(
                        idle.elapsed() < TIMEOUT,
                        "no completion for {TIMEOUT:?} after {seen} of {total}"
                    );
                    std::thread::yield_now();
                    continue;
                }
                idle = Instant::now();
                for w in &wc[..n] {
                    let t = (w.wr_id() >> 32) as usize;
                    let (qa, qb) = *qpns
                        .get(t)
                        .unwrap_or_else(|| panic!("completion with a foreign wr_id: {w:?}"));
                    let want = if w.wr_id() & RECV_BIT != 0 { qb } else { qa };
                    assert_eq!(w.qp_num(), want, "completion on the wrong QP: {w:?}");
                    // A worker that already failed has hung up: keep going so
                    // its own panic is what gets reported.
                    let _ = txs[t].send(*w);
                }
                seen += n as u64;
            }
            // Nothing beyond what was posted.
            let t = Instant::now();
            while t.elapsed() < Duration::from_millis(100) {
                assert_eq!(cq.poll(&mut wc).unwrap(), 0, "extra completion {:?}", wc[0]);
            }
            seen
        });
        let handles: Vec<_> = workers
            .iter_mut()
            .zip(rxs)
            .enumerate()
            .map(|(t, (w, rx))| s.spawn(move || work(t, w, &rx)))
            .collect();
        for (t, h) in handles.into_iter().enumerate() {
            if let Err(e) = h.join() {
                eprintln!("worker {t} failed");
                std::panic::resume_unwind(e);
            }
        }
        assert_eq!(poller.join().expect("poller"), total);
    });
    // The QPs hold the CQ's kernel object; dropping the CQ handle first
    // is fine, and so is tearing everything down after.
    drop(cq);
    drop(workers);
}

#[test]
fn objects_move_to_and_are_dropped_on_other_threads() {
    let ctx = open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let q = qp(&pd, &cq);
    let mr = pd.alloc_mr(4096, verbs_tests::all_access()).unwrap();
    // Shared references on several threads at once.
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                assert!(ctx.query_port(1).is_ok());
                assert_eq!(q.query().unwrap().0.qp_state, Some(rverbs::QpState::Reset));
                assert_eq!(mr.to_vec().len(), 4096);
                cq.req_notify(false).unwrap();
            });
        }
    });
    // Moved to another thread and destroyed there, children before parents.
    std::thread::spawn(move || {
        drop((q, mr, cq, ch));
        drop(pd);
        drop(ctx);
    })
    .join()
    .unwrap();
}
