//! `rverbs::stream`'s tokio streams on the real kernel (VM, rxe0 on veth0
//! = 10.0.0.1): `tokio::io::copy` echoes 2 MiB through a split stream
//! while the client writes from one task and reads from another, every
//! byte checked; `AsyncWriteExt::shutdown` gives the peer end of file; a
//! read pending on a quiet stream wakes when data comes.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::time::Duration;

use rverbs::stream::{AsyncRdmaListener, AsyncRdmaStream, StreamOptions};
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
        let addr = l.local_addr();
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
        let addr = l.local_addr();
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
