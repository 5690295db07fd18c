//! `rverbs_cm::stream`'s tokio streams on the real kernel (VM, rxe0 on veth0
//! = 10.0.0.1): `tokio::io::copy` echoes 2 MiB through a split stream
//! while the client writes from one task and reads from another, every
//! byte checked; `AsyncWriteExt::shutdown` gives the peer end of file; a
//! read pending on a quiet stream wakes when data comes; direct placement
//! (`iomap`/`iowrite`) lands every byte from an async writer; a pending
//! read with keep-alive probes the quiet peer (rxe0's packet counter).

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::time::Duration;

use rverbs_cm::stream::{AsyncRdmaListener, AsyncRdmaStream, StreamOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn any_port() -> SocketAddr {
    "10.0.0.1:0".parse().unwrap()
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(131) ^ (i >> 9)) as u8
}

#[test]
fn copy_echoes_through_split_halves() {
    rt().block_on(async {
        let l = StreamOptions::new()
            .recv_buffer(64 << 10)
            .send_buffer(64 << 10)
            .bind_async(any_port())
            .unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (s, _) = l.accept().await.unwrap();
            let (mut rd, mut wr) = tokio::io::split(s);
            let n = tokio::io::copy(&mut rd, &mut wr).await.unwrap();
            wr.shutdown().await.unwrap();
            n
        });
        let c = AsyncRdmaStream::connect(addr).await.unwrap();
        let (mut rd, mut wr) = tokio::io::split(c);
        const TOTAL: usize = 2 << 20;
        let writer = tokio::spawn(async move {
            let data: Vec<u8> = (0..TOTAL).map(pattern).collect();
            for chunk in data.chunks(50_000) {
                wr.write_all(chunk).await.unwrap();
            }
            wr.shutdown().await.unwrap();
            wr
        });
        let mut back = Vec::with_capacity(TOTAL);
        tokio::time::timeout(Duration::from_secs(60), rd.read_to_end(&mut back))
            .await
            .expect("the echo within 60 s")
            .unwrap();
        assert_eq!(back.len(), TOTAL);
        if let Some(i) = (0..TOTAL).find(|&i| back[i] != pattern(i)) {
            panic!("byte {i} came back {:#x}, sent {:#x}", back[i], pattern(i));
        }
        let _wr = writer.await.unwrap();
        assert_eq!(server.await.unwrap(), TOTAL as u64);
    });
}

#[test]
fn pending_read_wakes_when_data_comes() {
    rt().block_on(async {
        let l = AsyncRdmaListener::bind(any_port()).unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, peer) = l.accept().await.unwrap();
            assert_eq!(peer.ip(), addr.ip());
            // The client's read is pending by now.
            tokio::time::sleep(Duration::from_millis(300)).await;
            s.write_all(b"late").await.unwrap();
            let mut b = [0u8; 2];
            s.read_exact(&mut b).await.unwrap();
            b
        });
        let mut c = AsyncRdmaStream::connect(addr).await.unwrap();
        let mut b = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(10), c.read_exact(&mut b))
            .await
            .expect("woken within 10 s")
            .unwrap();
        assert_eq!(&b, b"late");
        c.write_all(b"ok").await.unwrap();
        assert_eq!(&server.await.unwrap(), b"ok");
        // The server's stream is gone (dropped: closed): end of file.
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    });
}

#[test]
fn direct_placement_from_an_async_stream() {
    use rverbs::AccessFlags;
    const LEN: usize = 300_000;
    rt().block_on(async {
        let l = StreamOptions::new()
            .send_buffer(16 << 10)
            .bind_async(any_port())
            .unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
            let mr = s.pd().alloc_mr(LEN, remote).unwrap();
            let m = s.iomap(&mr, Some(1 << 20)).unwrap();
            assert_eq!(m.offset(), 1 << 20);
            s.write_all(b"go").await.unwrap();
            let mut done = [0u8; 4];
            s.read_exact(&mut done).await.unwrap();
            assert_eq!(&done, b"done");
            let got = mr.to_vec();
            for (i, b) in got.iter().enumerate() {
                assert_eq!(*b, pattern(i), "byte {i}");
            }
        });
        let mut c = StreamOptions::new()
            .send_buffer(16 << 10)
            .iomap_size(1)
            .connect_async(addr)
            .await
            .unwrap();
        let mut go = [0u8; 2];
        c.read_exact(&mut go).await.unwrap();
        let data: Vec<u8> = (0..LEN).map(pattern).collect();
        // More than the 16 KiB send ring at once: the writes wait for
        // room on the runtime.
        let mut off = 0;
        while off < LEN {
            off += c
                .iowrite(&data[off..], (1 << 20) + off as u64)
                .await
                .unwrap();
        }
        c.write_all(b"done").await.unwrap();
        tokio::time::timeout(Duration::from_secs(60), server)
            .await
            .expect("the server within 60 s")
            .unwrap();
    });
}

/// rxe0's packets sent (both ends of a stream in this VM are on it).
fn rxe_sent_pkts() -> u64 {
    let path = "/sys/class/infiniband/rxe0/ports/1/hw_counters/sent_pkts";
    let s = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    s.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {s:?}: {e}"))
}

/// Packets rxe0 sends while a client read waits 2 s on a quiet server,
/// with the client's keep-alive `ka`.
fn packets_while_quiet(ka: Option<Duration>) -> u64 {
    rt().block_on(async {
        let l = StreamOptions::new().bind_async(any_port()).unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut go = [0u8; 1];
            s.read_exact(&mut go).await.unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            s.write_all(b"!").await.unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).await.unwrap();
        });
        let mut c = StreamOptions::new()
            .keepalive(ka)
            .connect_async(addr)
            .await
            .unwrap();
        c.write_all(b"?").await.unwrap();
        // Let the write's packet and its ACK go out before counting.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = rxe_sent_pkts();
        let mut got = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(30), c.read_exact(&mut got))
            .await
            .expect("the server's byte within 30 s")
            .unwrap();
        let sent = rxe_sent_pkts() - before;
        assert_eq!(&got, b"!");
        drop(c);
        server.await.unwrap();
        sent
    })
}

#[test]
fn keepalive_probes_while_a_read_is_pending() {
    // Without keep-alive the quiet stream sends nothing but the server's
    // byte and its ACK; with a probe every 100 ms, each probe is a
    // zero-length WRITE and its ACK (about 38 packets in 2 s; fewer when
    // the emulated machine is slow).
    let quiet = packets_while_quiet(None);
    let probed = packets_while_quiet(Some(Duration::from_millis(100)));
    assert!(quiet <= 6, "{quiet} packets without keep-alive");
    assert!(
        probed >= quiet + 10,
        "{probed} packets with keep-alive every 100 ms ({quiet} without)"
    );
}

#[test]
fn connect_to_a_port_nobody_listens_on_is_refused() {
    rt().block_on(async {
        // A port a listener just gave back: the peer's CM rejects
        // (reason 8), refused as a TCP connect is.
        let port = AsyncRdmaListener::bind(any_port())
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = AsyncRdmaStream::connect(("10.0.0.1", port))
            .await
            .expect_err("a connect nobody answers");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
        assert!(e.to_string().contains("reason 8"), "{e}");
        let s = AsyncRdmaListener::bind(any_port()).unwrap();
        let addr = s.local_addr().unwrap();
        let accept = tokio::spawn(async move { s.accept().await.map(|(s, _)| s) });
        let c = AsyncRdmaStream::connect(addr).await.unwrap();
        assert_eq!(c.peer_addr().unwrap(), addr);
        assert_eq!(c.local_addr().unwrap().ip(), addr.ip());
        let _server = accept.await.unwrap().unwrap();
    });
}
