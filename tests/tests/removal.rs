//! Tests that disturb the device for everyone, isolated in their own
//! binary: the port going down and up (PORT_ERR / PORT_ACTIVE async
//! events), and removing the rxe device (`rdma link delete rxe0`) while
//! this process has objects on it. Both put the device back as the VM
//! harness made it (rxe0 on veth0, port ACTIVE, GID index 1 =
//! ::ffff:10.0.0.1) and wait for it, so the suites that run after them
//! are unaffected. Tests run in name order with --test-threads=1; the
//! removal test is named to run last.

#![forbid(unsafe_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rverbs::{
    AsyncEventKind, EventElement, PortState, QpAttr, QpState, RecvWr, SendFlags, SendWr,
    SrqInitAttr,
};
use verbs_tests::{all_access, open_rxe, pattern, wait_ok, Pair, TIMEOUT};

const DEV: &str = "rxe0";
const NETDEV: &str = "veth0";
/// GID index 1 of rxe0 as sysfs prints it: ::ffff:10.0.0.1.
const GID1: &str = "0000:0000:0000:0000:0000:ffff:0a00:0001";

fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn sysfs(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Whether rxe0 is as the harness left it: listed with a uverbs node, port
/// ACTIVE, IPv4 GID at index 1.
fn device_ready() -> bool {
    let listed = rverbs::devices()
        .map(|d| d.iter().any(|d| d.name() == DEV && d.dev_path().exists()))
        .unwrap_or(false);
    listed
        && sysfs("/sys/class/infiniband/rxe0/ports/1/state").contains("ACTIVE")
        && sysfs("/sys/class/infiniband/rxe0/ports/1/gids/1").contains(GID1)
}

fn wait_ready(what: &str) {
    let start = Instant::now();
    while !device_ready() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{DEV} not ready 20 s after {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Brings veth0 back up if a port test fails half way.
struct LinkUp;

impl Drop for LinkUp {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "set", NETDEV, "up"])
            .status();
    }
}

#[test]
fn port_down_and_up_raise_port_events() {
    wait_ready("the previous test");
    let _guard = LinkUp;
    let ctx = open_rxe();
    assert_eq!(ctx.try_get_async_event().unwrap(), None);

    run("ip", &["link", "set", NETDEV, "down"]);
    let ev = ctx
        .get_async_event_timeout(TIMEOUT)
        .unwrap()
        .expect("no event after the netdev went down");
    assert_eq!(
        (ev.kind, ev.element),
        (AsyncEventKind::PortErr, EventElement::Port(1))
    );
    assert_eq!(ctx.query_port(1).unwrap().state(), PortState::Down);

    run("ip", &["link", "set", NETDEV, "up"]);
    // PORT_ACTIVE follows; the GID table may report changes on the way.
    let start = Instant::now();
    loop {
        let ev = ctx
            .get_async_event_timeout(TIMEOUT)
            .unwrap()
            .expect("no PORT_ACTIVE after the netdev came up");
        eprintln!("after link up: {ev}");
        if ev.kind == AsyncEventKind::PortActive {
            assert_eq!(ev.element, EventElement::Port(1));
            break;
        }
        assert_eq!(
            (ev.kind, ev.element),
            (AsyncEventKind::GidChange, EventElement::Port(1)),
            "unexpected event"
        );
        assert!(start.elapsed() < TIMEOUT);
    }
    assert_eq!(ctx.query_port(1).unwrap().state(), PortState::Active);
    wait_ready("ip link set veth0 up");
}

/// Puts rxe0 back if the removal test fails half way: waits (bounded) for
/// the pending `rdma link delete`, then re-adds the device if it is gone.
/// Declared before the verbs objects, so it runs after they are dropped.
struct Restore {
    child: Option<Child>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(20) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if !std::path::Path::new("/sys/class/infiniband/rxe0").exists() {
            let _ = Command::new("rdma")
                .args(["link", "add", DEV, "type", "rxe", "netdev", NETDEV])
                .status();
        }
        let start = Instant::now();
        while !device_ready() && start.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Exits within `limit`, or `None` if still running.
fn exited(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return Some(st);
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What rxe does when its device is removed while a process uses it.
///
/// Linux 6.1 and 6.12: rxe has no `disassociate_ucontext`, so the uverbs core
/// removes the device node at once and then waits for every open file of
/// the device to be closed. `rdma link delete` blocks; this process's
/// objects keep working (commands, doorbells, completions); no
/// DEVICE_FATAL (or any) async event is raised; nothing here can hang.
/// Once every object is dropped the removal completes, and no fd leaks.
///
/// Linux 7.x: rxe disassociates. `rdma link delete` returns at once; the
/// process gets DEVICE_FATAL, every command fails with EIO (doorbells
/// included), polling finds nothing (the rings are unmapped under us and
/// read as zeros: no panic, no garbage completion), and dropping every
/// object afterwards is clean.
#[test]
fn zz_device_removed_while_in_use() {
    wait_ready("the previous test");
    let base = open_fds();
    let mut restore = Restore { child: None };

    let mut p = Pair::new();
    let ch = p.ctx.create_comp_channel().unwrap();
    let armed = p.ctx.create_cq_with(4, Some(&ch), 0).unwrap();
    armed.req_notify(false).unwrap();
    let mut srq = p.pd.create_srq(&SrqInitAttr::default()).unwrap();
    let mut src = p.pd.alloc_mr(4096, all_access()).unwrap();
    let dst = p.pd.alloc_mr(4096, all_access()).unwrap();
    src.write_at(0, &pattern(4096, 42)).unwrap();
    let rm = dst.remote();
    let s = [src.sge(0..1024).unwrap()];
    p.a.post_send(&[SendWr::rdma_write(1, &s, rm.addr, rm.rkey).signaled()])
        .unwrap();
    wait_ok(&mut p.cq_a);
    assert!(!p.ctx.removal_pending());
    assert!(open_fds() > base);

    let child = Command::new("rdma")
        .args(["link", "delete", DEV])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning rdma link delete");
    let pid = child.id();
    let child = restore.child.insert(child);
    if verbs_tests::kernel_release() >= (7, 0) {
        let st = exited(child, Duration::from_secs(10))
            .expect("rdma link delete did not return although rxe disassociates");
        assert!(st.success(), "rdma link delete: {st}");
        restore.child = None;
        assert!(p.ctx.removal_pending());
        let ev = p
            .ctx
            .get_async_event_timeout(TIMEOUT)
            .unwrap()
            .expect("no DEVICE_FATAL after the device was disassociated");
        assert_eq!(
            (ev.kind, ev.element),
            (AsyncEventKind::DeviceFatal, EventElement::Device)
        );
        let eio = Some(rverbs::Errno::EIO);
        assert_eq!(
            ch.get_event_timeout(Duration::from_millis(100))
                .unwrap_err()
                .errno(),
            eio
        );
        assert_eq!(p.ctx.query_port(1).unwrap_err().errno(), eio);
        let s = [src.sge(1024..2048).unwrap()];
        let e =
            p.a.post_send(&[SendWr::rdma_write(2, &s, rm.addr + 1024, rm.rkey).signaled()])
                .map_err(rverbs::Error::from)
                .unwrap_err();
        assert_eq!(e.errno(), eio, "{e}");
        let mut wc = [rverbs::Wc::default(); 4];
        assert_eq!(p.cq_a.poll(&mut wc).unwrap(), 0);
        assert_eq!(p.cq_b.poll(&mut wc).unwrap(), 0);
        assert_eq!(p.ctx.alloc_pd().unwrap_err().errno(), eio);
        assert_eq!(p.pd.alloc_mr(4096, all_access()).unwrap_err().errno(), eio);
        assert_eq!(armed.req_notify(false).unwrap_err().errno(), eio);
        let err = QpAttr {
            qp_state: Some(QpState::Err),
            ..Default::default()
        };
        assert_eq!(p.a.modify(&err).unwrap_err().errno(), eio);
        // Registered memory is ours and still readable.
        assert_eq!(&dst.to_vec()[..1024], &src.to_vec()[..1024]);
        drop((armed, ch, srq, src, dst, p));
        assert!(!std::path::Path::new("/sys/class/infiniband/rxe0").exists());
        assert_eq!(open_fds(), base, "fds leaked");
        readd_and_use();
        return;
    }
    // The removal waits for this process.
    assert_eq!(
        exited(child, Duration::from_secs(2)),
        None,
        "rdma link delete finished while the device was in use"
    );
    eprintln!(
        "rdma link delete (pid {pid}) is blocked in {:?}",
        sysfs(&format!("/proc/{pid}/wchan"))
    );
    // The device node is gone at once: the device is no longer listed
    // and cannot be opened again.
    assert!(p.ctx.removal_pending());
    assert!(!rverbs::devices().unwrap().iter().any(|d| d.name() == DEV));
    // No event on either fd (poll with a timeout, so nothing can hang).
    assert_eq!(
        p.ctx
            .get_async_event_timeout(Duration::from_millis(300))
            .unwrap(),
        None
    );
    assert_eq!(
        ch.get_event_timeout(Duration::from_millis(100)).unwrap(),
        None
    );

    // Every kind of call still works.
    assert_eq!(p.ctx.query_port(1).unwrap().state(), PortState::Active);
    let s = [src.sge(1024..2048).unwrap()];
    p.a.post_send(&[SendWr::rdma_write(2, &s, rm.addr + 1024, rm.rkey).signaled()])
        .unwrap();
    assert_eq!(wait_ok(&mut p.cq_a).wr_id(), 2);
    assert_eq!(&dst.to_vec()[..2048], &src.to_vec()[..2048]);
    let extra = p.pd.alloc_mr(4096, all_access()).unwrap();
    let r = [extra.sge(..).unwrap()];
    srq.post_srq_recv(&[RecvWr::new(5, &r)]).unwrap();
    p.b.post_recv(&[RecvWr::new(6, &r)]).unwrap();
    let m = [std::io::IoSlice::new(b"still here")];
    p.a.post_send(&[SendWr::send_inline(3, &m).flags(SendFlags::SIGNALED)])
        .unwrap();
    assert_eq!(wait_ok(&mut p.cq_a).wr_id(), 3);
    assert_eq!(wait_ok(&mut p.cq_b).wr_id(), 6);
    assert_eq!(&extra.to_vec()[..10], b"still here");
    drop(p.ctx.alloc_pd().unwrap());
    p.a.modify(&QpAttr {
        qp_state: Some(QpState::Err),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        exited(child, Duration::ZERO),
        None,
        "removal finished early"
    );

    // Dropping everything lets the removal finish.
    drop((armed, ch, srq, src, dst, extra, p));
    let st = exited(child, Duration::from_secs(10))
        .expect("rdma link delete still blocked after every object was dropped");
    assert!(st.success(), "rdma link delete: {st}");
    restore.child = None;
    assert!(!std::path::Path::new("/sys/class/infiniband/rxe0").exists());
    assert_eq!(open_fds(), base, "fds leaked");

    readd_and_use();
}

/// Puts the device back for the suites that follow, and uses it.
fn readd_and_use() {
    run(
        "rdma",
        &["link", "add", DEV, "type", "rxe", "netdev", NETDEV],
    );
    wait_ready("rdma link add");
    let ctx = open_rxe();
    let cq = ctx.create_cq(4).unwrap();
    assert!(cq.cqe() >= 4);
    assert_eq!(ctx.query_port(1).unwrap().state(), PortState::Active);
}
