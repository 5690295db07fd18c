//! `rverbs_cm::stream` (rsockets over RC) against the real kernel (VM, rxe0 on
//! veth0 = 10.0.0.1), both ends ours: bytes arrive intact and in order
//! through buffer wrap-around, grants and credits running out; a half
//! close gives end of file one way while the other still flows; a reader
//! that stops makes the writer time out with bounded memory; requests and
//! answers without rsockets' connection data are refused; direct
//! placement (`iomap`/`iowrite`) lands every byte where the peer mapped
//! it, and refuses what it must. Interop with librdmacm's rsockets is
//! tests/vm/rstream.sh and tests/vm/riostream.sh.

#![forbid(unsafe_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use rverbs::{QpCap, QpInitAttr, QpType};
use rverbs_cm::stream::{RdmaListener, RdmaStream, StreamOptions};
use rverbs_cm::{ConnParams, Listener, Resolved};

/// The address of rxe0's netdev in the VM.
const RXE_IP: &str = "10.0.0.1";

fn any_port() -> SocketAddr {
    format!("{RXE_IP}:0").parse().unwrap()
}

/// An RC QP on `dev` for a plain rdma_cm peer (the QP holds its PD, CQ
/// and context).
fn plain_qp(dev: &rverbs::Device) -> rverbs::Qp {
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap::default()))
        .unwrap()
}

/// 4 KiB buffers, 16-deep queues, nothing inline: grants, credits and
/// the send ring run out all the time.
fn small_options() -> StreamOptions {
    StreamOptions::new()
        .send_buffer(4096)
        .recv_buffer(4096)
        .sq_size(16)
        .rq_size(16)
        .inline_size(0)
}

/// Byte `i` of a test stream.
fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 9)) as u8
}

/// A listener, and a thread that accepts one stream and runs `serve`.
fn serve<T: Send + 'static>(
    opts: StreamOptions,
    serve: impl FnOnce(RdmaStream) -> T + Send + 'static,
) -> (SocketAddr, thread::JoinHandle<T>) {
    let l = opts.bind(any_port()).expect("listen on rxe0's address");
    let addr = l.local_addr().unwrap();
    let h = thread::spawn(move || {
        let (s, peer) = l.accept().expect("accept");
        assert_eq!(peer.ip(), addr.ip());
        serve(s)
    });
    (addr, h)
}

/// Writes `total` pattern bytes in chunks cycling through `chunks`, while
/// the server echoes them; reads the echo back and checks every byte.
fn echo_round(opts: StreamOptions, recv_buf: usize, total: usize, chunks: &[usize]) {
    let (addr, server) = serve(opts.clone(), |mut s| {
        let mut buf = vec![0u8; 70_000];
        let mut n = 0usize;
        loop {
            let got = s.read(&mut buf).expect("server read");
            if got == 0 {
                break;
            }
            s.write_all(&buf[..got]).expect("server echo");
            n += got;
        }
        n
    });
    let mut c = opts.connect(addr).expect("connect");
    assert_eq!(c.peer_addr().unwrap(), addr);
    let data: Vec<u8> = (0..total).map(pattern).collect();
    // One `&mut` stream cannot be read by another thread: interleave.
    // Bytes in flight stay under what both receive buffers hold (the
    // server writes its echo before it reads on), so neither side waits
    // on the other for good.
    let limit = recv_buf / 2;
    assert!(chunks.iter().all(|&c| c <= recv_buf));
    let mut sent = 0usize;
    let mut back = Vec::with_capacity(total);
    let mut buf = vec![0u8; 100_000];
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for k in 0.. {
        if back.len() == total {
            break;
        }
        if sent < total {
            let n = chunks[k % chunks.len()].min(total - sent);
            c.write_all(&data[sent..sent + n]).expect("client write");
            sent += n;
        }
        let keep = if sent == total { 0 } else { limit };
        while sent - back.len() > keep {
            let got = c.read(&mut buf).expect("client read");
            assert!(got > 0, "end of file after {} of {total} bytes", back.len());
            back.extend_from_slice(&buf[..got]);
        }
    }
    assert_eq!(back.len(), total);
    if let Some(i) = (0..total).find(|&i| back[i] != data[i]) {
        panic!(
            "byte {i} of {total} came back {:#x}, sent {:#x}",
            back[i], data[i]
        );
    }
    c.shutdown(Shutdown::Both).expect("shutdown");
    assert_eq!(server.join().unwrap(), total, "bytes the server echoed");
}

#[test]
fn echo_default_sizes() {
    // 3 MiB through 128 KiB buffers: each side's ring wraps many times;
    // chunks cross the inline size, the 2 KiB to 64 KiB message sizes
    // and the buffer halves.
    echo_round(
        StreamOptions::new(),
        128 << 10,
        3 << 20,
        &[1, 64, 65, 4000, 70_000, 65_536, 100_000, 7],
    );
}

#[test]
fn echo_small_buffers_and_queues() {
    // 4 KiB buffers and 16-deep queues: grants and credits run out all
    // the time, and no byte goes inline.
    echo_round(
        small_options(),
        4096,
        300_000,
        &[1, 2, 3, 1000, 4096, 2049, 3000],
    );
}

#[test]
fn half_close_gives_end_of_file_one_way() {
    let (addr, server) = serve(StreamOptions::new(), |mut s| {
        let mut got = Vec::new();
        s.read_to_end(&mut got)
            .expect("read until the client's shutdown");
        // The client still reads: answer after its end of file.
        s.write_all(&(got.len() as u32).to_be_bytes()).unwrap();
        s.write_all(&got).unwrap();
        got.len()
    });
    let mut c = RdmaStream::connect(addr).unwrap();
    let msg: Vec<u8> = (0..100_000).map(pattern).collect();
    c.write_all(&msg).unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    let err = c.write(b"x").expect_err("a write after shutdown(Write)");
    assert_eq!(err.kind(), ErrorKind::BrokenPipe);
    let mut answer = Vec::new();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.read_to_end(&mut answer)
        .expect("read the answer to end of file");
    assert_eq!(&answer[..4], &100_000u32.to_be_bytes());
    assert!(answer[4..] == msg[..], "the echoed bytes differ");
    assert_eq!(server.join().unwrap(), 100_000);
}

#[test]
fn stopped_reader_times_out_the_writer() {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (addr, server) = serve(StreamOptions::new(), move |mut s| {
        // Read nothing until told, then everything.
        rx.recv().unwrap();
        let mut n = 0usize;
        let mut buf = vec![0u8; 65536];
        loop {
            let got = s.read(&mut buf).unwrap();
            if got == 0 {
                return n;
            }
            for (j, b) in buf[..got].iter().enumerate() {
                assert_eq!(*b, pattern(n + j), "byte {}", n + j);
            }
            n += got;
        }
    });
    let mut c = RdmaStream::connect(addr).unwrap();
    c.set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let data: Vec<u8> = (0..1 << 20).map(pattern).collect();
    let mut sent = 0usize;
    let start = Instant::now();
    let err = loop {
        match c.write(&data[sent..sent + 8192]) {
            Ok(n) => sent += n,
            Err(e) => break e,
        }
        assert!(
            sent < data.len() - 8192,
            "1 MiB went out to a reader that reads nothing"
        );
    };
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
    // What went out is what the peer's 128 KiB buffer (its first half,
    // then the second, granted only as it is read) could take.
    assert!(
        sent <= 128 << 10,
        "{sent} bytes accepted by a reader that reads nothing"
    );
    // A non-blocking write says so at once.
    c.set_nonblocking(true).unwrap();
    assert_eq!(
        c.write(&data[sent..]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    c.set_nonblocking(false).unwrap();
    tx.send(()).unwrap();
    c.set_write_timeout(None).unwrap();
    c.write_all(&data[sent..])
        .expect("the rest, once the reader reads");
    drop(c);
    assert_eq!(server.join().unwrap(), data.len());
}

#[test]
fn requests_without_connection_data_are_refused() {
    // A plain rdma_cm client (no rsockets data) is rejected; the listener
    // then accepts a stream as usual.
    let l = RdmaListener::bind(any_port()).unwrap();
    let addr = l.local_addr().unwrap();
    let server = thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut b = [0u8; 3];
        s.read_exact(&mut b).unwrap();
        b
    });
    let id = Resolved::resolve(addr, Duration::from_secs(5)).unwrap();
    let qp = plain_qp(id.device());
    let params = ConnParams {
        private_data: vec![7; 40],
        timeout: Duration::from_secs(10),
        ..ConnParams::default()
    };
    let err = id
        .connect(qp, &params)
        .expect_err("a connect with junk private data");
    assert!(err.to_string().contains("reject"), "{err}");
    let mut s = RdmaStream::connect(addr).unwrap();
    s.write_all(b"abc").unwrap();
    assert_eq!(&server.join().unwrap(), b"abc");
}

#[test]
fn answers_without_connection_data_are_refused() {
    // A plain rdma_cm server accepts with junk private data: the connect
    // fails with InvalidData instead of trusting it.
    let l = Listener::bind(any_port(), 1).unwrap();
    let addr = l.local_addr();
    let server = thread::spawn(move || {
        let req = l
            .get_request(Some(Duration::from_secs(20)))
            .unwrap()
            .unwrap();
        let qp = plain_qp(req.device());
        let params = ConnParams {
            private_data: vec![2; 40],
            ..ConnParams::default()
        };
        let conn = req.accept(qp, &params);
        thread::sleep(Duration::from_millis(500));
        drop(conn);
    });
    let err = RdmaStream::connect(addr).expect_err("a stream to a server without rsockets");
    assert_eq!(err.kind(), ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains("version 2"), "{err}");
    server.join().unwrap();
}

#[test]
fn bad_options_are_refused() {
    for o in [
        StreamOptions::new().recv_buffer(4097),
        StreamOptions::new().recv_buffer(100),
        StreamOptions::new().send_buffer(0),
    ] {
        let e = o.connect(format!("{RXE_IP}:1")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        let e = o.bind(any_port()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
}

/// The client's side of [`direct_placement_round`]: what it writes.
const IO_LEN: usize = 200_000;

/// The server offers the client two MRs (at offset 0 and at the second's
/// address) and says where; the client writes both by offset in pieces
/// of every size (`iowrite`), then says so on the stream, which the
/// server reads only after the bytes landed: every byte is checked.
fn direct_placement_round(opts: StreamOptions) {
    use rverbs::AccessFlags;
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (addr, server) = serve(opts.clone(), move |mut s| {
        let mr = s.pd().alloc_mr(IO_LEN, remote).unwrap();
        let small = s.pd().alloc_mr(4096, remote).unwrap();
        let m = s.iomap(&mr, Some(0)).expect("map at 0");
        assert_eq!((m.offset(), m.len()), (0, IO_LEN as u32));
        let m2 = s.iomap(&small, None).expect("map at its address");
        assert_eq!(m2.offset(), small.iova());
        // The client offers two entries: a third mapping finds none.
        let third = s.pd().alloc_mr(64, remote).unwrap();
        let e = s.iomap(&third, Some(1 << 40)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}");
        // MRs the peer must not be offered.
        let other_pd = s.pd().context().alloc_pd().unwrap();
        let foreign = other_pd.alloc_mr(64, remote).unwrap();
        let e = s.iomap(&foreign, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        let local_only = s.pd().alloc_mr(64, AccessFlags::LOCAL_WRITE).unwrap();
        let e = s.iomap(&local_only, None).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        s.write_all(&m2.offset().to_le_bytes()).unwrap();
        let mut done = [0u8; 4];
        s.read_exact(&mut done).expect("the client's word");
        assert_eq!(&done, b"done");
        let got = mr.to_vec();
        for (i, b) in got.iter().enumerate() {
            assert_eq!(*b, pattern(i), "byte {i} of the region at 0");
        }
        assert_eq!(&small.to_vec()[..100], &[0x5a; 100][..]);
        // Unmapped, the entry takes another MR.
        s.iounmap(m).unwrap();
        assert_eq!(s.iounmap(m).unwrap_err().kind(), ErrorKind::InvalidInput);
        s.iomap(&third, Some(1 << 40)).expect("the freed entry");
        s.write_all(b"ok").unwrap();
    });
    let mut c = opts.clone().iomap_size(2).connect(addr).expect("connect");
    // The server offers no entries: nothing of ours can be mapped there.
    let mine = c
        .pd()
        .alloc_mr(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    assert_eq!(
        c.iomap(&mine, None).unwrap_err().kind(),
        ErrorKind::OutOfMemory
    );
    let mut at = [0u8; 8];
    c.read_exact(&mut at).expect("the server's word");
    let small_at = u64::from_le_bytes(at);
    let data: Vec<u8> = (0..IO_LEN).map(pattern).collect();
    let sizes = [1usize, 63, 64, 65, 2048, 5000, 65_536, 100_000];
    let mut off = 0usize;
    let mut k = 0;
    while off < IO_LEN {
        let end = (off + sizes[k % sizes.len()]).min(IO_LEN);
        k += 1;
        while off < end {
            off += c.iowrite(&data[off..end], off as u64).expect("iowrite");
        }
    }
    // A write past a region's end stops there.
    assert_eq!(c.iowrite(&[0x5a; 100], small_at).unwrap(), 100);
    assert_eq!(c.iowrite(&[0; 64], small_at + 4090).unwrap(), 6);
    // No region at that offset.
    let e = c.iowrite(&[0; 8], IO_LEN as u64).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    c.write_all(b"done").unwrap();
    let mut ok = [0u8; 2];
    c.read_exact(&mut ok).expect("the server's answer");
    assert_eq!(&ok, b"ok");
    server.join().expect("server");
}

#[test]
fn direct_placement_default_sizes() {
    direct_placement_round(StreamOptions::new());
}

#[test]
fn direct_placement_through_a_small_send_ring() {
    // No byte inline (descriptors too go through the ring), and a 4 KiB
    // ring that wraps under the direct writes.
    direct_placement_round(small_options());
}

/// The kind std gives `raw` (an errno): `HostUnreachable` and
/// `NetworkUnreachable` have no stable name before Rust 1.83.
fn kind_of(raw: i32) -> ErrorKind {
    std::io::Error::from_raw_os_error(raw).kind()
}

#[test]
fn connect_failures_are_tcps_kinds() {
    // A port nobody listens on (one a listener just gave back): the
    // peer's CM rejects (reason 8), refused as a TCP connect is.
    let port = RdmaListener::bind(any_port())
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Instant::now();
    let e = RdmaStream::connect((RXE_IP, port)).expect_err("a connect nobody answers");
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    assert!(e.to_string().contains("reason 8"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let quick = StreamOptions::new().timeout(Duration::from_secs(1));
    // veth1's address: its route leaves by a netdev without an RDMA device.
    let e = quick.connect("10.0.0.2:7471").unwrap_err();
    assert_eq!(e.kind(), kind_of(libc::ENETUNREACH), "{e}");
    assert!(e.to_string().contains("no RDMA device reaches"), "{e}");
    // No route at all.
    let e = quick.connect("192.168.77.1:7471").unwrap_err();
    assert_eq!(e.kind(), kind_of(libc::ENETUNREACH), "{e}");
    // On rxe0's subnet, but nobody answers ARP.
    let e = quick.connect("10.0.0.99:7471").unwrap_err();
    assert_eq!(e.kind(), kind_of(libc::EHOSTUNREACH), "{e}");
    // Binding an address this host does not have.
    let e = RdmaListener::bind("192.168.77.1:0").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrNotAvailable, "{e}");
    // A port taken.
    let l = RdmaListener::bind(any_port()).unwrap();
    let e = RdmaListener::bind(l.local_addr().unwrap()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AddrInUse, "{e}");
}

/// A server that echoes everything until end of file; returns the bytes
/// echoed.
fn echo_server(opts: StreamOptions) -> (SocketAddr, thread::JoinHandle<usize>) {
    serve(opts, |mut s| {
        let mut buf = vec![0u8; 70_000];
        let mut n = 0usize;
        loop {
            let got = s.read(&mut buf).expect("server read");
            if got == 0 {
                return n;
            }
            s.write_all(&buf[..got]).expect("server echo");
            n += got;
        }
    })
}

/// Waits at most `secs` for `h`'s thread: a deadlocked one fails the
/// test instead of hanging it.
fn join_within<T: Send + 'static>(what: &str, h: thread::JoinHandle<T>, secs: u64) -> T {
    let t = Instant::now();
    while !h.is_finished() {
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "{what}: not done after {secs} s (deadlocked?)"
        );
        thread::sleep(Duration::from_millis(10));
    }
    h.join().unwrap_or_else(|_| panic!("{what} panicked"))
}

#[test]
fn try_clone_reader_blocked_while_another_thread_writes() {
    let (addr, server) = echo_server(StreamOptions::new());
    let c = RdmaStream::connect(addr).unwrap();
    let mut rd = c.try_clone().unwrap();
    // The reader blocks first: nothing has been written yet.
    let reader = thread::spawn(move || {
        let mut b = [0u8; 5];
        rd.read_exact(&mut b).map(|()| b)
    });
    thread::sleep(Duration::from_millis(300));
    assert!(!reader.is_finished(), "the read returned before any data");
    let mut wr = c.try_clone().unwrap();
    let writer = thread::spawn(move || wr.write_all(b"hello"));
    join_within("the write beside a blocked read", writer, 10).unwrap();
    let got = join_within("the read of the echo", reader, 10).unwrap();
    assert_eq!(&got, b"hello");
    // The last handle's drop closes: the server reads end of file.
    drop(c);
    assert_eq!(join_within("the server", server, 20), 5);
}

#[test]
fn try_clone_full_duplex_through_small_buffers() {
    // A writer thread and a reader thread on one stream, 4 KiB buffers
    // and 16-deep queues: both wait all the time, each on what the other
    // and the peer free (the pattern a single `&mut` stream cannot run).
    const TOTAL: usize = 1 << 20;
    let (addr, server) = echo_server(small_options());
    let c = small_options().connect(addr).unwrap();
    let mut wr = c.try_clone().unwrap();
    let writer = thread::spawn(move || {
        let data: Vec<u8> = (0..TOTAL).map(pattern).collect();
        let sizes = [1usize, 7, 100, 4096, 3000, 65_536];
        let mut at = 0;
        let mut k = 0;
        while at < TOTAL {
            let n = sizes[k % sizes.len()].min(TOTAL - at);
            wr.write_all(&data[at..at + n]).expect("client write");
            at += n;
            k += 1;
        }
        wr.shutdown(Shutdown::Write).expect("shutdown(Write)");
    });
    let mut rd = c;
    let reader = thread::spawn(move || {
        let mut back = Vec::with_capacity(TOTAL);
        rd.read_to_end(&mut back).expect("read the echo");
        back
    });
    join_within("the writer", writer, 120);
    let back = join_within("the reader", reader, 120);
    assert_eq!(back.len(), TOTAL);
    if let Some(i) = (0..TOTAL).find(|&i| back[i] != pattern(i)) {
        panic!("byte {i} came back {:#x}, sent {:#x}", back[i], pattern(i));
    }
    assert_eq!(join_within("the server", server, 20), TOTAL);
}

#[test]
fn shutdown_on_one_handle_ends_a_read_blocked_on_another() {
    let (addr, server) = serve(StreamOptions::new(), |mut s| {
        let mut got = Vec::new();
        s.read_to_end(&mut got)
            .expect("read until the client's close");
        got
    });
    let c = RdmaStream::connect(addr).unwrap();
    let mut rd = c.try_clone().unwrap();
    let reader = thread::spawn(move || {
        let mut b = [0u8; 8];
        rd.read(&mut b)
    });
    thread::sleep(Duration::from_millis(300));
    assert!(
        !reader.is_finished(),
        "the read returned before the shutdown"
    );
    c.shutdown(Shutdown::Read).unwrap();
    assert_eq!(join_within("the blocked read", reader, 10).unwrap(), 0);
    // The write side still works.
    (&c).write_all(b"still").unwrap();
    c.shutdown(Shutdown::Write).unwrap();
    assert_eq!(join_within("the server", server, 20), b"still");
}

#[test]
fn timeouts_as_std_has_them() {
    let (addr, server) = echo_server(StreamOptions::new());
    let c = RdmaStream::connect(addr).unwrap();
    assert_eq!(c.read_timeout().unwrap(), None);
    assert_eq!(c.write_timeout().unwrap(), None);
    for e in [
        c.set_read_timeout(Some(Duration::ZERO)).unwrap_err(),
        c.set_write_timeout(Some(Duration::ZERO)).unwrap_err(),
    ] {
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    }
    // The setting is the stream's: a clone has it too.
    let d = c.try_clone().unwrap();
    c.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    c.set_write_timeout(Some(Duration::from_secs(7))).unwrap();
    assert_eq!(d.read_timeout().unwrap(), Some(Duration::from_millis(300)));
    assert_eq!(d.write_timeout().unwrap(), Some(Duration::from_secs(7)));
    // Two readers of a quiet stream (one sleeps on the fds, the other on
    // its turn) both time out.
    let readers: Vec<_> = [c.try_clone().unwrap(), d]
        .into_iter()
        .map(|s| {
            thread::spawn(move || {
                let t = Instant::now();
                let e = (&s).read(&mut [0u8; 4]).unwrap_err();
                (e.kind(), t.elapsed())
            })
        })
        .collect();
    for r in readers {
        let (kind, took) = join_within("a read with a timeout", r, 10);
        assert_eq!(kind, ErrorKind::TimedOut);
        assert!(
            took >= Duration::from_millis(290),
            "timed out after {took:?}"
        );
        assert!(took < Duration::from_secs(5), "timed out after {took:?}");
    }
    c.set_nonblocking(true).unwrap();
    assert_eq!(
        (&c).read(&mut [0u8; 4]).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    assert_eq!(c.local_addr().unwrap().ip(), addr.ip());
    assert_eq!(c.peer_addr().unwrap(), addr);
    drop(c);
    assert_eq!(join_within("the server", server, 20), 0);
}
