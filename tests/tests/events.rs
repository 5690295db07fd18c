//! Completion channels and asynchronous events on a real rxe device:
//! solicited-only arming, epoll readiness of the channel fd, which CQ an
//! event names, events discarded with their CQ, resizing a CQ that holds
//! completions, CQ overrun (the CQ_ERR async event; what rxe does with the
//! completion that did not fit), and SQ_DRAINED.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::mpsc;
use std::time::Duration;

use rverbs::{
    AsyncEvent, AsyncEventKind, CompChannel, ConnectOpts, Context, Cq, EventElement, Mr, Pd, Qp,
    QpAttr, QpCap, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendWr, WcStatus,
};
use verbs_tests::{all_access, assert_quiet, open_rxe, pattern, wait, wait_ok, TIMEOUT};

/// How long "nothing happens" is watched for.
const QUIET: Duration = Duration::from_millis(300);

/// A connected RC pair whose CQs are chosen by the test.
struct Link {
    pd: Pd,
    a: Qp,
    b: Qp,
}

fn link(ctx: &Context, a_cqs: (&Cq, &Cq), b_cqs: (&Cq, &Cq), cap: QpCap) -> Link {
    link_with(ctx, a_cqs, b_cqs, cap, ConnectOpts::default())
}

fn link_with(
    ctx: &Context,
    a_cqs: (&Cq, &Cq),
    b_cqs: (&Cq, &Cq),
    cap: QpCap,
    opts: ConnectOpts,
) -> Link {
    let pd = ctx.alloc_pd().unwrap();
    let mk = |(s, r): (&Cq, &Cq)| {
        pd.create_qp(&QpInitAttr {
            send_cq: s,
            recv_cq: r,
            qp_type: QpType::Rc,
            cap,
            sq_sig_all: false,
        })
        .unwrap()
    };
    let mut a = mk(a_cqs);
    let mut b = mk(b_cqs);
    let gid = ctx.default_gid_index(1).unwrap();
    let o = ConnectOpts {
        sgid_index: gid,
        ..opts
    };
    let ea = a.endpoint(&o).unwrap();
    let eb = b.endpoint(&o).unwrap();
    a.connect(&eb, all_access(), &o).unwrap();
    b.connect(&ea, all_access(), &o).unwrap();
    Link { pd, a, b }
}

fn small_cap() -> QpCap {
    QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    }
}

/// `poll(2)` on one fd for readability.
fn readable(fd: BorrowedFd<'_>, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut p, 1, timeout.as_millis() as libc::c_int) };
    assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
    n == 1 && p.revents & libc::POLLIN != 0
}

/// Sends `n` inline SENDs from `l.a` (unsignaled unless `flags` says so).
fn send(l: &mut Link, wr_id: u64, flags: SendFlags) {
    let msg = [std::io::IoSlice::new(b"ping")];
    l.a.post_send(&[SendWr::send_inline(wr_id, &msg).flags(flags)])
        .unwrap();
}

fn post_recvs(qp: &mut Qp, mr: &Mr, n: usize) {
    let s = [mr.sge(..).unwrap()];
    for i in 0..n {
        qp.post_recv(&[RecvWr::new(i as u64, &s)]).unwrap();
    }
}

#[test]
fn solicited_only_arm_fires_for_solicited_sends_only() {
    let ctx = open_rxe();
    let ch = ctx.create_comp_channel().unwrap();
    let cq_a = ctx.create_cq(16).unwrap();
    let mut cq_b = ctx.create_cq_with(16, Some(&ch), 0).unwrap();
    let mut l = link(&ctx, (&cq_a, &cq_a), (&cq_b, &cq_b), small_cap());
    let rbuf = l.pd.alloc_mr(64, all_access()).unwrap();
    post_recvs(&mut l.b, &rbuf, 4);

    cq_b.req_notify(true).unwrap();
    send(&mut l, 1, SendFlags::empty());
    // The receive completes, but it is not solicited: no event.
    let wc = wait_ok(&mut cq_b);
    assert_eq!(wc.byte_len(), 4);
    assert_eq!(ch.get_event_timeout(QUIET).unwrap(), None);
    assert!(!readable(ch.as_fd(), Duration::ZERO));

    // Still armed: a solicited SEND fires it.
    send(&mut l, 2, SendFlags::SOLICITED);
    let id = ch.get_event_timeout(TIMEOUT).unwrap().expect("no event");
    assert_eq!(id, cq_b.event_id());
    wait_ok(&mut cq_b);
    // One event per arming.
    assert_eq!(ch.try_get_event().unwrap(), None);

    // Armed for every completion, an unsolicited SEND fires too.
    cq_b.req_notify(false).unwrap();
    send(&mut l, 3, SendFlags::empty());
    assert_eq!(
        ch.get_event_timeout(TIMEOUT).unwrap(),
        Some(cq_b.event_id())
    );
    wait_ok(&mut cq_b);
}

#[test]
fn epoll_sees_the_channel_readable_after_a_completion_and_not_before() {
    let ctx = open_rxe();
    let ch = ctx.create_comp_channel().unwrap();
    let cq_a = ctx.create_cq(16).unwrap();
    let mut cq_b = ctx.create_cq_with(16, Some(&ch), 0).unwrap();
    let mut l = link(&ctx, (&cq_a, &cq_a), (&cq_b, &cq_b), small_cap());
    let rbuf = l.pd.alloc_mr(64, all_access()).unwrap();
    post_recvs(&mut l.b, &rbuf, 2);

    // SAFETY: plain syscalls on fds this test owns; the epoll fd is closed
    // at the end.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0);
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: 0xfeed,
    };
    // SAFETY: as above; `ev` is a valid epoll_event.
    let rc = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, ch.as_fd().as_raw_fd(), &mut ev) };
    assert_eq!(rc, 0, "epoll_ctl: {}", std::io::Error::last_os_error());
    let epoll_wait = |ms: i32| -> Vec<u64> {
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        // SAFETY: `out` has room for 4 events.
        let n = unsafe { libc::epoll_wait(ep, out.as_mut_ptr(), 4, ms) };
        assert!(n >= 0, "epoll_wait: {}", std::io::Error::last_os_error());
        out[..n as usize].iter().map(|e| e.u64).collect()
    };

    // Armed, nothing completed: not readable.
    cq_b.req_notify(false).unwrap();
    assert!(epoll_wait(QUIET.as_millis() as i32).is_empty());
    // Not armed: a completion does not make it readable either.
    let idle = ctx.create_comp_channel().unwrap();
    assert!(!readable(idle.as_fd(), Duration::ZERO));

    send(&mut l, 1, SendFlags::empty());
    assert_eq!(epoll_wait(TIMEOUT.as_millis() as i32), vec![0xfeed]);
    // The fd is non-blocking: one event to read, then "nothing pending".
    assert_eq!(ch.try_get_event().unwrap(), Some(cq_b.event_id()));
    assert_eq!(ch.try_get_event().unwrap(), None);
    assert!(epoll_wait(0).is_empty());
    wait_ok(&mut cq_b);

    // Not re-armed: the next completion leaves the fd quiet.
    send(&mut l, 2, SendFlags::empty());
    wait_ok(&mut cq_b);
    assert!(epoll_wait(QUIET.as_millis() as i32).is_empty());
    // SAFETY: closing the epoll fd created above.
    unsafe { libc::close(ep) };
}

#[test]
fn blocking_get_event_wakes_up_for_a_completion() {
    let ctx = open_rxe();
    let ch = ctx.create_comp_channel().unwrap();
    let cq_a = ctx.create_cq(16).unwrap();
    let mut cq_b = ctx.create_cq_with(16, Some(&ch), 0).unwrap();
    let mut l = link(&ctx, (&cq_a, &cq_a), (&cq_b, &cq_b), small_cap());
    let rbuf = l.pd.alloc_mr(64, all_access()).unwrap();
    post_recvs(&mut l.b, &rbuf, 1);
    cq_b.req_notify(false).unwrap();
    let waiter: CompChannel = ch.clone();
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || tx.send(waiter.get_event()).unwrap());
    // The waiter is asleep: nothing to report yet.
    assert!(rx.recv_timeout(QUIET).is_err());
    send(&mut l, 1, SendFlags::empty());
    let got = rx
        .recv_timeout(TIMEOUT)
        .expect("get_event did not return after a completion");
    assert_eq!(got.unwrap(), cq_b.event_id());
    t.join().unwrap();
    wait_ok(&mut cq_b);
}

#[test]
fn events_name_their_cq_and_die_with_it() {
    let ctx = open_rxe();
    let ch = ctx.create_comp_channel().unwrap();
    let mut cq_a = ctx.create_cq_with(16, Some(&ch), 0).unwrap();
    let mut cq_b = ctx.create_cq_with(16, Some(&ch), 0).unwrap();
    assert_ne!(cq_a.event_id(), cq_b.event_id());
    let mut l = link(&ctx, (&cq_a, &cq_a), (&cq_b, &cq_b), small_cap());
    let rbuf = l.pd.alloc_mr(64, all_access()).unwrap();
    post_recvs(&mut l.b, &rbuf, 2);

    // Only B's CQ is armed: the event names B.
    cq_b.req_notify(false).unwrap();
    send(&mut l, 1, SendFlags::SIGNALED);
    assert_eq!(
        ch.get_event_timeout(TIMEOUT).unwrap(),
        Some(cq_b.event_id())
    );
    assert_eq!(ch.get_event_timeout(QUIET).unwrap(), None);
    wait_ok(&mut cq_a);
    wait_ok(&mut cq_b);

    // Only A's CQ is armed: the event names A.
    cq_a.req_notify(false).unwrap();
    send(&mut l, 2, SendFlags::SIGNALED);
    assert_eq!(
        ch.get_event_timeout(TIMEOUT).unwrap(),
        Some(cq_a.event_id())
    );
    wait_ok(&mut cq_a);
    wait_ok(&mut cq_b);

    // An event still queued for a CQ is discarded when the CQ is destroyed
    // (the kernel drops it from the channel), so no event names a dead CQ.
    let lone = ctx.create_cq_with(4, Some(&ch), 0).unwrap();
    let mut l2 = link(&ctx, (&cq_a, &cq_a), (&lone, &lone), small_cap());
    let rbuf2 = l2.pd.alloc_mr(64, all_access()).unwrap();
    post_recvs(&mut l2.b, &rbuf2, 1);
    lone.req_notify(false).unwrap();
    send(&mut l2, 3, SendFlags::SIGNALED);
    wait_ok(&mut cq_a);
    assert!(readable(ch.as_fd(), TIMEOUT), "the event never came");
    drop(l2); // the QPs hold the CQ's kernel object
    drop(lone);
    assert!(!readable(ch.as_fd(), Duration::ZERO));
    assert_eq!(ch.try_get_event().unwrap(), None);
}

#[test]
fn resize_cq_holding_completions_keeps_them_all_in_order() {
    let ctx = open_rxe();
    let mut cq = ctx.create_cq(8).unwrap();
    let rcq = ctx.create_cq(8).unwrap();
    let mut l = link(
        &ctx,
        (&cq, &rcq),
        (&rcq, &rcq),
        QpCap {
            max_send_wr: 64,
            ..small_cap()
        },
    );
    let mut src = l.pd.alloc_mr(4096, all_access()).unwrap();
    let dst = l.pd.alloc_mr(4096, all_access()).unwrap();
    src.write_at(0, &pattern(4096, 5)).unwrap();
    let rm = dst.remote();
    let n = cq.cqe() as usize;
    let post = |l: &mut Link, from: usize, to: usize| {
        for i in from..to {
            let off = (i * 64) % 4096;
            let s = [src.sge(off..off + 64).unwrap()];
            l.a.post_send(&[
                SendWr::rdma_write(i as u64, &s, rm.addr + off as u64, rm.rkey).signaled(),
            ])
            .unwrap();
        }
    };
    // Fill the CQ to exactly its capacity, unpolled.
    post(&mut l, 0, n);
    let deadline = std::time::Instant::now() + TIMEOUT;
    while l.a.send_outstanding() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "sends never completed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    cq.resize(4 * n as u32).unwrap();
    assert!(cq.cqe() >= 4 * n as u32, "cqe {}", cq.cqe());
    // More completions land in the new ring behind the old ones.
    post(&mut l, n, 3 * n);
    let wcs = wait(&mut cq, 3 * n);
    for (i, wc) in wcs.iter().enumerate() {
        assert!(wc.is_success(), "{wc:?}");
        assert_eq!(wc.wr_id(), i as u64, "completion {i} out of order or lost");
    }
    assert_quiet(&mut cq, Duration::from_millis(50));
    // No overrun happened on the way.
    assert_eq!(ctx.try_get_async_event().unwrap(), None);
    // Shrinking below the completions it holds is the kernel's EINVAL.
    post(&mut l, 3 * n, 4 * n);
    let deadline = std::time::Instant::now() + TIMEOUT;
    while l.a.send_outstanding() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "sends never completed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(50));
    let e = cq.resize(n as u32 / 2).unwrap_err();
    assert_eq!(e.errno(), Some(rverbs::Errno::EINVAL), "{e}");
    let wcs = wait(&mut cq, n);
    assert_eq!(wcs[0].wr_id(), 3 * n as u64);
    let written = (4 * n * 64).min(4096);
    assert_eq!(&dst.to_vec()[..written], &src.to_vec()[..written]);
}

/// Collects the async events that arrive within `QUIET` of each other.
fn drain_async(ctx: &Context) -> Vec<AsyncEvent> {
    let mut out = Vec::new();
    while let Some(ev) = ctx.get_async_event_timeout(QUIET).unwrap() {
        out.push(ev);
    }
    out
}

#[test]
fn send_cq_overrun_raises_cq_err_and_drops_the_completion() {
    let ctx = open_rxe();
    assert!(!readable(ctx.async_fd(), Duration::ZERO));
    let mut tiny = ctx.create_cq(1).unwrap();
    let cap = tiny.cqe() as usize;
    let rcq = ctx.create_cq(16).unwrap();
    let mut l = link(&ctx, (&tiny, &rcq), (&rcq, &rcq), small_cap());
    let mut src = l.pd.alloc_mr(256, all_access()).unwrap();
    let dst = l.pd.alloc_mr(256, all_access()).unwrap();
    src.write_at(0, &pattern(256, 3)).unwrap();
    let rm = dst.remote();
    // cap + 2 signaled writes, nothing polled: two completions do not fit.
    let total = cap + 2;
    for i in 0..total {
        let s = [src.sge(i * 8..i * 8 + 8).unwrap()];
        l.a.post_send(&[
            SendWr::rdma_write(i as u64, &s, rm.addr + i as u64 * 8, rm.rkey).signaled(),
        ])
        .unwrap();
    }
    // The async fd becomes readable; one CQ_ERR per lost completion, each
    // naming the tiny CQ.
    assert!(readable(ctx.async_fd(), TIMEOUT), "no async event");
    let events = drain_async(&ctx);
    assert_eq!(events.len(), 2, "{events:?}");
    for ev in &events {
        assert_eq!(ev.kind, AsyncEventKind::CqErr, "{ev}");
        assert_eq!(ev.element, EventElement::Cq(tiny.event_id()));
        assert!(ev.is_for_cq(&tiny));
    }
    // The CQ holds only what fitted; the lost completions are gone (poll
    // cannot tell: the async event is the only report).
    let wcs = wait(&mut tiny, cap);
    for (i, wc) in wcs.iter().enumerate() {
        assert!(wc.is_success() && wc.wr_id() == i as u64, "{wc:?}");
    }
    assert_quiet(&mut tiny, QUIET);
    // The writes themselves all happened, and the QP is still usable: rxe
    // only drops the completion on the send side.
    assert_eq!(&dst.to_vec()[..total * 8], &src.to_vec()[..total * 8]);
    assert_eq!(l.a.query().unwrap().0.qp_state, Some(QpState::Rts));
    let s = [src.sge(0..8).unwrap()];
    l.a.post_send(&[SendWr::rdma_write(99, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    assert_eq!(wait_ok(&mut tiny).wr_id(), 99);
    assert_eq!(ctx.get_async_event_timeout(QUIET).unwrap(), None);
}

#[test]
fn recv_cq_overrun_raises_cq_err_and_moves_the_qp_to_error() {
    let ctx = open_rxe();
    let mut scq = ctx.create_cq(16).unwrap();
    let mut tiny = ctx.create_cq(1).unwrap();
    let cap = tiny.cqe() as usize;
    // Short retries so the sender gives up quickly once B stops answering.
    let mut l = link_with(
        &ctx,
        (&scq, &scq),
        (&scq, &tiny),
        small_cap(),
        ConnectOpts {
            retry_cnt: 1,
            timeout: 10,
            ..Default::default()
        },
    );
    let rbuf = l.pd.alloc_mr(64, all_access()).unwrap();
    post_recvs(&mut l.b, &rbuf, cap + 2);
    for i in 0..cap + 1 {
        send(&mut l, i as u64, SendFlags::SIGNALED);
    }
    assert!(readable(ctx.async_fd(), TIMEOUT), "no async event");
    let events = drain_async(&ctx);
    assert!(!events.is_empty());
    for ev in &events {
        assert_eq!(
            (ev.kind, ev.element),
            (AsyncEventKind::CqErr, EventElement::Cq(tiny.event_id())),
            "{events:?}"
        );
    }
    // rxe treats a receive it cannot complete as fatal for the QP (no
    // QP_FATAL event: the QP just moves to the error state).
    assert_eq!(l.b.query().unwrap().0.qp_state, Some(QpState::Err));
    assert!(!events
        .iter()
        .any(|e| matches!(e.element, EventElement::Qp(_))));
    // Only what fitted is in the receive CQ.
    let wcs = wait(&mut tiny, cap);
    assert!(wcs.iter().all(|w| w.is_success()), "{wcs:?}");
    assert_quiet(&mut tiny, QUIET);
    // The sender's first messages completed; the one B could not complete
    // was never acknowledged and fails.
    let wcs = wait(&mut scq, cap + 1);
    eprintln!(
        "receive CQ of {cap} overran: {} CQ_ERR event(s); sender saw {:?}",
        events.len(),
        wcs.iter().map(|w| w.status()).collect::<Vec<_>>()
    );
    assert!(wcs[..cap].iter().all(|w| w.is_success()), "{wcs:?}");
    assert_ne!(wcs[cap].status(), WcStatus::SUCCESS, "{wcs:?}");
}

#[test]
fn sq_drained_event_when_moving_to_sqd() {
    let ctx = open_rxe();
    let mut cq = ctx.create_cq(16).unwrap();
    let mut l = link(&ctx, (&cq, &cq), (&cq, &cq), small_cap());
    let dst = l.pd.alloc_mr(64, all_access()).unwrap();
    let rm = dst.remote();
    let msg = [std::io::IoSlice::new(b"drain me")];
    l.a.post_send(&[rverbs::opcode::Write::inline(2, &msg, rm.addr, rm.rkey)
        .build()
        .signaled()])
        .unwrap();
    wait_ok(&mut cq);
    assert_eq!(ctx.try_get_async_event().unwrap(), None);
    l.a.modify(&QpAttr {
        qp_state: Some(QpState::Sqd),
        ..Default::default()
    })
    .unwrap();
    let ev = ctx
        .get_async_event_timeout(TIMEOUT)
        .unwrap()
        .expect("no SQ_DRAINED event");
    assert_eq!(ev.kind, AsyncEventKind::SqDrained, "{ev}");
    assert!(
        ev.is_for_qp(&l.a),
        "{ev} is not for QP A ({:?})",
        l.a.event_id()
    );
    assert!(!ev.is_for_qp(&l.b));
    assert_eq!(l.a.query().unwrap().0.qp_state, Some(QpState::Sqd));
    assert_eq!(drain_async(&ctx), vec![]);
    assert_eq!(&dst.to_vec()[..8], b"drain me");
}
