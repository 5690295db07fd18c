//! Host tests of the streams (no device): the errors of a host without
//! rdma_cm, the `ErrorKind`s the library's errors map to, and the
//! std-shaped signatures. The streams' data path is tested in the VM
//! (tests/tests/stream.rs, async_stream.rs).

use std::io::{self, ErrorKind};
use std::net::{Shutdown, SocketAddr};
use std::time::Duration;

use rverbs_abi::Errno;

use super::socket::{accept_err, io_err, resolve_err};
use super::{RdmaListener, RdmaStream, StreamOptions};
use crate::{channel_test_path, CmError, CmId};
use rverbs::Error;

/// A path no host has, standing in for /dev/infiniband/rdma_cm.
const MISSING: &str = "/nonexistent/rverbs-test/rdma_cm";

fn dst() -> SocketAddr {
    "10.0.0.1:7471".parse().unwrap()
}

/// The cm API's words for a missing rdma_cm node.
fn cm_words() -> String {
    let e = CmId::new().expect_err("rdma_cm opened at a path that does not exist");
    let s = e.to_string();
    assert!(s.contains("is the rdma_ucm module loaded?"), "{s}");
    assert!(s.contains(MISSING), "{s}");
    s
}

/// `e` is what a missing rdma_cm node gives: `NotFound`, in the cm
/// API's words.
fn assert_missing_node(what: &str, e: &io::Error, words: &str) {
    assert_eq!(e.kind(), ErrorKind::NotFound, "{what}: {e}");
    assert_eq!(e.to_string(), words, "{what}");
}

#[test]
fn missing_rdma_cm_is_not_found_in_the_cm_apis_words() {
    channel_test_path::set(Some(MISSING));
    let words = cm_words();
    let e = RdmaStream::connect(dst()).expect_err("connect without rdma_cm");
    assert_missing_node("RdmaStream::connect", &e, &words);
    let e = RdmaListener::bind(dst()).expect_err("bind without rdma_cm");
    assert_missing_node("RdmaListener::bind", &e, &words);
    let e = StreamOptions::new()
        .source("10.0.0.1:0".parse().unwrap())
        .connect(dst())
        .expect_err("connect from a source without rdma_cm");
    assert_missing_node("StreamOptions::connect", &e, &words);
    channel_test_path::set(None);
}

#[cfg(feature = "tokio")]
#[test]
fn missing_rdma_cm_is_not_found_in_the_cm_apis_words_async() {
    channel_test_path::set(Some(MISSING));
    let words = cm_words();
    let rt = ::tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let e = super::AsyncRdmaStream::connect(dst())
            .await
            .expect_err("connect without rdma_cm");
        assert_missing_node("AsyncRdmaStream::connect", &e, &words);
        let e = super::AsyncRdmaListener::bind(dst()).expect_err("bind without rdma_cm");
        assert_missing_node("AsyncRdmaListener::bind", &e, &words);
    });
    channel_test_path::set(None);
}

#[test]
fn a_missing_driver_is_not_found_too() {
    for errno in [libc::ENODEV, libc::ENXIO, libc::ENOENT] {
        let e = io_err(Error::Io {
            what: "open /dev/infiniband/rdma_cm (is the rdma_ucm module loaded?)".into(),
            source: io::Error::from_raw_os_error(errno),
        });
        assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
        assert!(e.to_string().contains("rdma_ucm"), "{e}");
    }
}

/// The kind std gives an errno (`HostUnreachable`, `NetworkUnreachable`
/// cannot be named before Rust 1.83).
fn kind_of(raw: i32) -> ErrorKind {
    io::Error::from_raw_os_error(raw).kind()
}

#[test]
fn connect_failures_map_to_tcps_kinds() {
    let rejected = |reason| {
        Error::Cm(CmError::Rejected {
            reason,
            private_data: vec![],
        })
    };
    // Nobody listens (8), rdma_cm found no listener or the server said
    // no (28): refused, as TcpStream's connect to a closed port.
    for reason in [8, 28, 10] {
        let e = io_err(rejected(reason));
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
        assert!(e.to_string().contains(&format!("reason {reason}")), "{e}");
    }
    // The peer's CM never answered; a step ran out of time.
    let e = io_err(Error::Cm(CmError::Unreachable {
        errno: Errno::ETIMEDOUT,
    }));
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    let e = io_err(Error::Cm(CmError::Timeout {
        step: "the peer's answer",
        after: Duration::from_secs(1),
    }));
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    // Resolution: no RDMA device on the way, no neighbour answering, no
    // route at all.
    let e = resolve_err(
        Error::Cm(CmError::AddrError {
            errno: Errno::ENODEV,
        }),
        dst(),
    );
    assert_eq!(e.kind(), kind_of(libc::ENETUNREACH), "{e}");
    assert!(e
        .to_string()
        .contains("no RDMA device reaches 10.0.0.1:7471"));
    let e = resolve_err(
        Error::Kernel {
            op: "rdma_resolve_route",
            errno: Errno::ENODEV,
        },
        dst(),
    );
    assert_eq!(e.kind(), kind_of(libc::ENETUNREACH), "{e}");
    let e = resolve_err(
        Error::Cm(CmError::AddrError {
            errno: Errno::ETIMEDOUT,
        }),
        dst(),
    );
    assert_eq!(e.kind(), kind_of(libc::EHOSTUNREACH), "{e}");
    let e = resolve_err(
        Error::Kernel {
            op: "rdma_resolve_addr",
            errno: Errno::ENETUNREACH,
        },
        dst(),
    );
    assert_eq!(e.kind(), kind_of(libc::ENETUNREACH), "{e}");
    let e = resolve_err(
        Error::Cm(CmError::Timeout {
            step: "address resolution",
            after: Duration::from_secs(1),
        }),
        dst(),
    );
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    // A handshake the peer abandoned before accept returned.
    let e = accept_err(Error::Cm(CmError::Timeout {
        step: "the peer's RTU",
        after: Duration::from_secs(1),
    }));
    assert_eq!(e.kind(), ErrorKind::ConnectionAborted, "{e}");
    let e = accept_err(Error::Kernel {
        op: "rdma_accept",
        errno: Errno::ENOMEM,
    });
    assert_eq!(e.kind(), ErrorKind::OutOfMemory, "{e}");
}

/// `TcpStream`'s and `TcpListener`'s signatures, where the streams
/// imitate them (compiled, so a change breaks the build).
#[test]
fn signatures_match_std() {
    let _: fn(&RdmaStream) -> io::Result<RdmaStream> = RdmaStream::try_clone;
    let _: fn(&RdmaStream, Option<Duration>) -> io::Result<()> = RdmaStream::set_read_timeout;
    let _: fn(&RdmaStream, Option<Duration>) -> io::Result<()> = RdmaStream::set_write_timeout;
    let _: fn(&RdmaStream) -> io::Result<Option<Duration>> = RdmaStream::read_timeout;
    let _: fn(&RdmaStream) -> io::Result<Option<Duration>> = RdmaStream::write_timeout;
    let _: fn(&RdmaStream, bool) -> io::Result<()> = RdmaStream::set_nonblocking;
    let _: fn(&RdmaStream) -> io::Result<SocketAddr> = RdmaStream::peer_addr;
    let _: fn(&RdmaStream) -> io::Result<SocketAddr> = RdmaStream::local_addr;
    let _: fn(&RdmaStream, Shutdown) -> io::Result<()> = RdmaStream::shutdown;
    let _: fn(&RdmaListener) -> io::Result<SocketAddr> = RdmaListener::local_addr;
    let _: fn(&RdmaListener) -> io::Result<(RdmaStream, SocketAddr)> = RdmaListener::accept;
    fn read_write<T: io::Read + io::Write>() {}
    read_write::<RdmaStream>();
    read_write::<&RdmaStream>();
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RdmaStream>();
    send_sync::<RdmaListener>();
    #[cfg(feature = "tokio")]
    {
        let _: fn(&super::AsyncRdmaStream) -> io::Result<SocketAddr> =
            super::AsyncRdmaStream::peer_addr;
        let _: fn(&super::AsyncRdmaStream) -> io::Result<SocketAddr> =
            super::AsyncRdmaStream::local_addr;
        let _: fn(&super::AsyncRdmaListener) -> io::Result<SocketAddr> =
            super::AsyncRdmaListener::local_addr;
    }
}

#[test]
fn a_zero_timeout_is_refused_as_std_does() {
    let e = super::check_timeout(Some(Duration::ZERO)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    super::check_timeout(Some(Duration::from_nanos(1))).unwrap();
    super::check_timeout(None).unwrap();
}
