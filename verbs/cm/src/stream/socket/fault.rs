//! How a socket fails: the fault it records and the `io::Error`s the
//! stream's calls return.

use std::io::{self};
use std::net::SocketAddr;

use rverbs::WcStatus;

/// How the connection ended, if it did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::stream) enum Fault {
    /// The peer went away without closing (rdma_cm disconnect, or its
    /// QP's error), while a direction was still open.
    Reset,
    /// A work request failed.
    Failed(WcStatus),
    /// The peer broke the protocol.
    Protocol(String),
    /// A local verbs call failed.
    Local(String),
}

impl Fault {
    pub(in crate::stream) fn to_io(&self) -> io::Error {
        match self {
            Fault::Reset => io::Error::new(
                io::ErrorKind::ConnectionReset,
                "the peer disconnected without closing the stream",
            ),
            Fault::Failed(s) => io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("a work request failed: {}", s.as_str()),
            ),
            Fault::Protocol(m) => io::Error::new(
                io::ErrorKind::InvalidData,
                format!("rsockets protocol violation by the peer: {m}"),
            ),
            Fault::Local(m) => io::Error::other(m.clone()),
        }
    }
}

/// A library error as an I/O error: the `ErrorKind` a `TcpStream`
/// would give for the same cause, the library's message kept.
pub(in crate::stream) fn io_err(e: rverbs::Error) -> io::Error {
    use crate::CmError;
    use rverbs::Error;
    match e {
        Error::Timeout(_) | Error::Cm(CmError::Timeout { .. }) => {
            io::Error::new(io::ErrorKind::TimedOut, e.to_string())
        }
        Error::InvalidArgument(_) => io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
        // The peer's CM refused the connection: nobody listens on the port
        // (reason 8, invalid service ID, or 28 when rdma_cm finds no
        // listener for the address), or the server rejected it. librdmacm
        // reports every reject as ECONNREFUSED too.
        Error::Cm(CmError::Rejected { .. }) => {
            io::Error::new(io::ErrorKind::ConnectionRefused, e.to_string())
        }
        // A device node that is not there (ENOENT), or whose driver is not
        // (ENODEV, ENXIO): the message names it (and the module to load).
        Error::Io { ref source, .. } => {
            let kind = match source.raw_os_error() {
                Some(libc::ENODEV | libc::ENXIO) => io::ErrorKind::NotFound,
                _ => source.kind(),
            };
            io::Error::new(kind, e.to_string())
        }
        other => match other.errno() {
            Some(errno) => io::Error::new(
                io::Error::from_raw_os_error(errno.raw()).kind(),
                other.to_string(),
            ),
            None => io::Error::other(other.to_string()),
        },
    }
}

/// The kind a `TcpStream::connect` gives for `raw` (an errno): read off
/// std's own mapping, so `HostUnreachable` and `NetworkUnreachable`
/// come out as they do for TCP even where the toolchain cannot name them
/// (they are stable from Rust 1.83).
fn kind_of(raw: i32) -> io::ErrorKind {
    io::Error::from_raw_os_error(raw).kind()
}

/// A connect's failed address or route resolution to `dst` as the kinds
/// a TCP connect gives: no RDMA device on the way (ENODEV: the route
/// leaves by a netdev without one, loopback included) is
/// `NetworkUnreachable`; no answer to address resolution (the neighbour
/// did not answer ARP, ETIMEDOUT) is `HostUnreachable`, as TCP's "no
/// route to host"; the rest as [`io_err`].
pub(in crate::stream) fn resolve_err(e: rverbs::Error, dst: SocketAddr) -> io::Error {
    use crate::CmError;
    use rverbs_abi::Errno;
    match &e {
        _ if e.errno() == Some(Errno::ENODEV) => io::Error::new(
            kind_of(libc::ENETUNREACH),
            format!("no RDMA device reaches {dst} (its route leaves by a netdev without one): {e}"),
        ),
        rverbs::Error::Cm(CmError::AddrError {
            errno: Errno::ETIMEDOUT,
        }) => io::Error::new(
            kind_of(libc::EHOSTUNREACH),
            format!("{dst} did not answer address resolution (ARP): {e}"),
        ),
        _ => io_err(e),
    }
}

/// The passive side's handshake that failed after the request was
/// taken (the peer gave up, went away, or never confirmed) as
/// `ConnectionAborted`, as a TCP `accept` reports a connection reset
/// before it was accepted; a local failure as [`io_err`].
pub(in crate::stream) fn accept_err(e: rverbs::Error) -> io::Error {
    match e {
        rverbs::Error::Cm(_) => io::Error::new(
            io::ErrorKind::ConnectionAborted,
            format!("the connection was aborted before it was accepted: {e}"),
        ),
        e => io_err(e),
    }
}
