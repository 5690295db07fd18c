//! What the connection manager reports: [`CmEventKind`], the kinds of
//! rdma_cm events, and [`CmError`], a failure it reported, which
//! [`crate::Error::Cm`] carries. Here, beside the library's error, so that
//! `rverbs-cm`, built on this crate, returns this crate's [`Error`](crate::Error);
//! it re-exports both at its root.

use std::time::Duration;

use rverbs_abi::ucma::event as ev;

/// What the connection manager reported instead of success.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// The address did not resolve to a local RDMA device (`errno` from
    /// the kernel: e.g. ENODEV for an address of a netdev without one).
    #[error("address resolution failed: {errno}")]
    AddrError {
        /// The kernel's errno.
        errno: rverbs_abi::Errno,
    },
    /// No path to the destination was found.
    #[error("route resolution failed: {errno}")]
    RouteError {
        /// The kernel's errno.
        errno: rverbs_abi::Errno,
    },
    /// The peer rejected the connection (nobody listening on the port:
    /// reason 8, invalid service ID; the application's own: 28, consumer
    /// defined, with its private data).
    #[error("connection rejected by the peer (CM reject reason {reason})")]
    Rejected {
        /// The CM's reject reason (`enum ib_cm_rej_reason`).
        reason: i32,
        /// The peer's private data, padded with zeros by the CM to
        /// `rverbs_cm::MAX_REJ_PRIVATE_DATA` bytes on InfiniBand and RoCE
        /// (see `rverbs_cm::private`).
        private_data: Vec<u8>,
    },
    /// The peer did not answer the CM's messages.
    #[error("peer unreachable: {errno}")]
    Unreachable {
        /// The kernel's errno (ETIMEDOUT).
        errno: rverbs_abi::Errno,
    },
    /// The connection failed after it was requested.
    #[error("connection error: {errno}")]
    ConnectError {
        /// The kernel's errno.
        errno: rverbs_abi::Errno,
    },
    /// A multicast join failed (`RDMA_CM_EVENT_MULTICAST_ERROR`).
    #[error("multicast join failed: {errno}")]
    JoinError {
        /// The kernel's errno.
        errno: rverbs_abi::Errno,
    },
    /// The step did not finish in the time allowed.
    #[error("{step} did not finish within {after:?}")]
    Timeout {
        /// What was awaited.
        step: &'static str,
        /// The time allowed.
        after: Duration,
    },
    /// The CM resolved to a device this process cannot find or open.
    #[error(
        "the CM resolved to a device with node GUID {guid}, which is not among the RDMA devices"
    )]
    NoDevice {
        /// The device's node GUID.
        guid: crate::gid::Guid,
    },
    /// The QP given is not on the device the CM resolved.
    #[error("the QP is on {qp_device}, the CM resolved to {cm_device}")]
    WrongDevice {
        /// The QP's device.
        qp_device: String,
        /// The CM's device.
        cm_device: String,
    },
    /// The connection was torn down, or its device removed, while a step
    /// was awaited.
    #[error("{0:?} while connecting")]
    Gone(CmEventKind),
    /// An event the step does not expect.
    #[error("unexpected {got:?} (status {status}) while awaiting {step}")]
    Unexpected {
        /// What was awaited.
        step: &'static str,
        /// What came.
        got: CmEventKind,
        /// Its status.
        status: i32,
    },
}

/// What an rdma_cm event reports (`enum rdma_cm_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CmEventKind {
    /// The destination address resolved to a local device and port.
    AddrResolved,
    /// Address resolution failed (`status`: the errno).
    AddrError,
    /// A path to the destination is known.
    RouteResolved,
    /// Route resolution failed (`status`: the errno).
    RouteError,
    /// A peer asks to connect (on a listening id; the event names the new
    /// id).
    ConnectRequest,
    /// The peer accepted; the active side finishes the connection.
    ConnectResponse,
    /// The connection failed after the request.
    ConnectError,
    /// The peer did not answer.
    Unreachable,
    /// The peer rejected (`status`: the CM's reject reason).
    Rejected,
    /// The connection is up.
    Established,
    /// The connection was torn down.
    Disconnected,
    /// The RDMA device went away.
    DeviceRemoval,
    /// A multicast join completed.
    MulticastJoin,
    /// A multicast join failed.
    MulticastError,
    /// The local address moved to another device.
    AddrChange,
    /// The connection left the CM's time-wait.
    TimewaitExit,
    /// An event this crate does not know, by number.
    Other(u32),
}

impl CmEventKind {
    /// Whether this is an event of a multicast group
    /// ([`CmEventKind::MulticastJoin`], [`CmEventKind::MulticastError`]).
    pub fn is_multicast(self) -> bool {
        matches!(
            self,
            CmEventKind::MulticastJoin | CmEventKind::MulticastError
        )
    }

    /// The kind of the kernel's event number `v` (`RDMA_CM_EVENT_*`, in
    /// GET_EVENT's answer); a number this crate does not know is
    /// [`CmEventKind::Other`].
    pub fn from_raw(v: u32) -> CmEventKind {
        use CmEventKind::*;
        match v {
            ev::ADDR_RESOLVED => AddrResolved,
            ev::ADDR_ERROR => AddrError,
            ev::ROUTE_RESOLVED => RouteResolved,
            ev::ROUTE_ERROR => RouteError,
            ev::CONNECT_REQUEST => ConnectRequest,
            ev::CONNECT_RESPONSE => ConnectResponse,
            ev::CONNECT_ERROR => ConnectError,
            ev::UNREACHABLE => Unreachable,
            ev::REJECTED => Rejected,
            ev::ESTABLISHED => Established,
            ev::DISCONNECTED => Disconnected,
            ev::DEVICE_REMOVAL => DeviceRemoval,
            ev::MULTICAST_JOIN => MulticastJoin,
            ev::MULTICAST_ERROR => MulticastError,
            ev::ADDR_CHANGE => AddrChange,
            ev::TIMEWAIT_EXIT => TimewaitExit,
            other => Other(other),
        }
    }
}
