//! `rverbs rstream -T f` on the host: rstream's fork mode is its socket
//! (TCP) mode with a server that runs each connection's tests in a child
//! process, so it needs no RDMA device. The data must arrive verified
//! (`-T v`), the tests' rows come from the child, and the parent exits 0
//! only when the child did.

use std::net::TcpListener;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A port nobody listens on right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding a probe socket");
    l.local_addr().expect("its address").port()
}

fn rverbs(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rverbs"));
    c.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Waits for `child` (at most 60 s, then kills it).
fn finish(mut child: Child, what: &str) -> Output {
    let until = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("waiting").is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("{what} did not end within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collecting the output")
}

/// Runs a forked server and a TCP client with the same test options;
/// returns both outputs.
fn run(test: &[&str]) -> (Output, Output) {
    let port = free_port().to_string();
    let mut sargs = vec!["rstream", "-T", "f", "-b", "127.0.0.1", "-p", &port];
    sargs.extend_from_slice(test);
    let server = rverbs(&sargs).spawn().expect("starting the server");
    // The client retries nothing: give the server its listening socket.
    std::thread::sleep(Duration::from_millis(300));
    let mut cargs = vec!["rstream", "-T", "s", "-s", "127.0.0.1", "-p", &port];
    cargs.extend_from_slice(test);
    let client = finish(
        rverbs(&cargs).spawn().expect("starting the client"),
        "client",
    );
    (finish(server, "server"), client)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn forked_server_runs_a_verified_custom_test() {
    let (s, c) = run(&["-T", "v", "-S", "100000", "-C", "20", "-I", "2"]);
    let (so, co) = (text(&s.stdout), text(&c.stdout));
    let errs = format!("{}{}", text(&s.stderr), text(&c.stderr));
    assert!(s.status.success() && c.status.success(), "{so}{co}{errs}");
    assert!(!errs.contains("verification failed"), "{errs}");
    // The row is printed by the child, once.
    assert_eq!(
        so.lines().filter(|l| l.starts_with("custom")).count(),
        1,
        "{so}"
    );
    assert_eq!(
        co.lines().filter(|l| l.starts_with("custom")).count(),
        1,
        "{co}"
    );
    assert_eq!(
        so.lines().filter(|l| l.starts_with("name")).count(),
        1,
        "{so}"
    );
}

#[test]
fn forked_server_serves_both_connections_of_the_default_series() {
    let (s, c) = run(&[]);
    let so = text(&s.stdout);
    let errs = format!("{}{}", text(&s.stderr), text(&c.stderr));
    assert!(s.status.success() && c.status.success(), "{so}{errs}");
    // Latency rows from the first child, bandwidth rows from the second.
    assert!(so.lines().any(|l| l.starts_with("64_lat")), "{so}");
    assert!(so.lines().any(|l| l.starts_with("1m_bw")), "{so}");
}

#[test]
fn verifying_the_default_series_across_children_is_refused() {
    let out = rverbs(&["rstream", "-T", "f", "-T", "v", "-p", "1"])
        .output()
        .expect("running rverbs");
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("checks one connection only"), "{err}");
}

#[test]
fn a_failing_child_fails_the_server() {
    // The client vanishes before the test: the child fails, so must the
    // parent.
    let port = free_port().to_string();
    let server = rverbs(&[
        "rstream",
        "-T",
        "f",
        "-b",
        "127.0.0.1",
        "-p",
        &port,
        "-S",
        "1000",
        "-C",
        "10",
        "-I",
        "10",
        "--timeout",
        "5",
    ])
    .spawn()
    .expect("starting the server");
    std::thread::sleep(Duration::from_millis(300));
    drop(std::net::TcpStream::connect((
        "127.0.0.1",
        port.parse::<u16>().unwrap(),
    )));
    let s = finish(server, "server");
    let err = text(&s.stderr);
    assert_eq!(s.status.code(), Some(1), "{err}");
    assert!(err.contains("child process failed"), "{err}");
}
