//! The crate's error type: kernel errnos tagged with the operation that
//! failed, refused arguments, and refused work requests.

pub use rverbs_abi::Errno;
pub use rverbs_provider::{Feature, PostError, PostFailed};

mod cm;
pub use cm::{CmError, CmEventKind};

/// Everything a verbs call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel refused a command; `op` names it (e.g. `"modify_qp INIT -> RTR"`).
    #[error("{op}: {errno}")]
    Kernel {
        /// The operation.
        op: &'static str,
        /// The kernel's errno.
        errno: Errno,
    },
    /// An operating-system call outside the verbs commands failed: reading
    /// sysfs, opening the device node, mapping memory.
    #[error("{what}: {source}")]
    Io {
        /// What was being done (a path, or the operation).
        what: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The device's provider does not implement what the call needs; no
    /// command was sent (see [`Feature`]).
    #[error("the {provider} provider does not support {feature}")]
    Unsupported {
        /// The provider (`rxe`, `mlx5`).
        provider: &'static str,
        /// What it lacks.
        feature: Feature,
    },
    /// The device does not offer what the call needs: its capabilities, as
    /// the running kernel reports them, lack it (rxe before Linux 6.2 has
    /// no ATOMIC_WRITE or FLUSH, for one). No command was sent. Its
    /// [`Error::errno`] is `EOPNOTSUPP`.
    #[error("the device does not offer {what} (its capabilities, as the running kernel reports them, lack it)")]
    NotOffered {
        /// What it lacks.
        what: &'static str,
    },
    /// No RDMA device has that name.
    #[error("no RDMA device named {0:?}")]
    NoSuchDevice(String),
    /// The device's driver has no provider here.
    #[error(
        "device {device}: driver {driver} is not supported by this crate (supported: rxe, mlx5, efa)"
    )]
    UnsupportedDriver {
        /// The ibdev name.
        device: String,
        /// What the kernel reports as its driver.
        driver: String,
    },
    /// The kernel speaks another uverbs ABI version.
    #[error("device {device}: uverbs ABI version {found}, this crate speaks {expected}")]
    AbiVersion {
        /// The ibdev name.
        device: String,
        /// Version found in sysfs.
        found: u32,
        /// Version this crate implements.
        expected: u32,
    },
    /// The driver speaks an ABI version its provider does not.
    #[error("device {device}: driver ABI version {found}, the provider speaks {supported:?}")]
    DriverAbiVersion {
        /// The ibdev name.
        device: String,
        /// Version found in sysfs.
        found: u32,
        /// Versions the provider implements.
        supported: std::ops::RangeInclusive<u32>,
    },
    /// The device node did not check out as the uverbs character device
    /// discovery found (see [`crate::Device::open_node`]).
    #[error("device {device}: {path} is not its uverbs character device: {reason}")]
    NotUverbsDevice {
        /// The ibdev name.
        device: String,
        /// The node opened.
        path: String,
        /// What did not match.
        reason: String,
    },
    /// A command's response lacks a file descriptor the kernel must have
    /// written: the field still holds the -1 it was prefilled with (or
    /// another negative value). What answered is not a uverbs device, and
    /// no fd number from it is trusted.
    #[error("{op}: the response holds no file descriptor in {field} ({value}): not a uverbs device's answer")]
    NoFdInResponse {
        /// The command.
        op: &'static str,
        /// The response field.
        field: &'static str,
        /// What it held.
        value: i32,
    },
    /// The object can no longer be used: an earlier failure left it out of
    /// step with the kernel. Only dropping it remains.
    #[error("{0}")]
    Unusable(String),
    /// An argument was refused before anything reached the kernel: its
    /// [`InvalidKind`] ([`Invalid::kind`], to branch on) and a message
    /// naming the value and the rule.
    #[error("invalid argument: {0}")]
    InvalidArgument(Invalid),
    /// Waiting for completions took longer than allowed.
    #[error("timed out after {0:?} waiting for completions")]
    Timeout(std::time::Duration),
    /// The RDMA connection manager reported a failure (see
    /// [`CmError`]).
    #[error("rdma_cm: {0}")]
    Cm(CmError),
    /// A work request was refused; those before `index` were posted.
    #[error("work request {index} refused: {error}")]
    Post {
        /// Index in the posted chain of the first refused request.
        index: usize,
        /// Why.
        error: PostError,
    },
}

/// A refused post ([`crate::Qp::post_send`] and the other post calls) as
/// the library's error: [`Error::Post`] with the same index and error, so
/// `?` works in functions returning [`Result`].
impl From<PostFailed> for Error {
    #[cold]
    #[inline(never)]
    fn from(f: PostFailed) -> Error {
        Error::Post {
            index: f.index(),
            error: f.error(),
        }
    }
}

/// A poll's only failure ([`crate::Cq::poll`]) as the library's error:
/// [`Error::Unusable`], so `?` works in functions returning [`Result`].
impl From<rverbs_provider::RingLost> for Error {
    #[cold]
    #[inline(never)]
    fn from(e: rverbs_provider::RingLost) -> Error {
        Error::Unusable(format!("poll_cq: {e}"))
    }
}

impl Error {
    /// The errno behind the error, where there is one.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Kernel { errno, .. } => Some(*errno),
            Error::Post {
                error: PostError::Doorbell(e),
                ..
            } => Some(*e),
            Error::Io { source, .. } => source.raw_os_error().map(Errno::from_raw),
            Error::NotOffered { .. }
            | Error::Post {
                error: PostError::OpcodeUnsupported(_),
                ..
            } => Some(Errno::EOPNOTSUPP),
            Error::Cm(
                CmError::AddrError { errno }
                | CmError::RouteError { errno }
                | CmError::Unreachable { errno }
                | CmError::ConnectError { errno },
            ) => Some(*errno),
            _ => None,
        }
    }

    /// A closure that makes an [`Error::Kernel`] of `op` from the errno a
    /// command returned: `.map_err(Error::kernel("rdma_listen"))`. For
    /// crates built on this one (`rverbs-cm`), whose failures are this
    /// crate's errors.
    pub fn kernel(op: &'static str) -> impl FnOnce(Errno) -> Error {
        move |errno| Error::Kernel { op, errno }
    }

    /// The [`InvalidKind`] of an [`Error::InvalidArgument`], `None` for
    /// any other error.
    pub fn invalid_kind(&self) -> Option<InvalidKind> {
        match self {
            Error::InvalidArgument(i) => Some(i.kind),
            _ => None,
        }
    }

    /// An [`Error::InvalidArgument`] of `kind` whose message is `msg` (the
    /// value and the rule it broke). For crates built on this one, as
    /// [`Error::kernel`] is.
    pub fn invalid_as(kind: InvalidKind, msg: impl Into<String>) -> Error {
        Error::InvalidArgument(Invalid {
            kind,
            message: msg.into(),
        })
    }
}

/// What was wrong with an argument ([`Error::InvalidArgument`]), for a
/// caller that branches on it; the message says the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InvalidKind {
    /// A range, offset or length outside the object it refers to (a
    /// memory region, a remote region, a buffer) or past the end of the
    /// address space.
    OutOfRange,
    /// A number above what the device, the field or the object allows
    /// (private data, a completion vector, an SRQ limit, a QP attribute).
    TooLarge,
    /// Zero where something is needed: a length, a count, room for a
    /// completion.
    Empty,
    /// An object of another device context or provider.
    Foreign,
    /// Something the device, the port or the kernel does not have: a port,
    /// a GID, completion timestamps, huge pages.
    NotPresent,
    /// Access rights that cannot go together or that the object was not
    /// registered with.
    Access,
    /// An address or IOVA not aligned as the operation needs.
    Alignment,
    /// A call that does not fit the object's type, mode or state (a UD
    /// call on an RC id, a request already answered, a CQ without a
    /// completion channel).
    WrongUse,
    /// Bytes that do not parse as what they should be.
    Malformed,
    /// None of the above.
    Other,
}

/// An argument refused before anything reached the kernel: its kind and
/// the message ([`Error::InvalidArgument`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    kind: InvalidKind,
    message: String,
}

impl Invalid {
    /// An argument refused as `kind` with `message` (for code that builds
    /// this crate's errors, such as adapters).
    pub fn new(kind: InvalidKind, message: impl Into<String>) -> Invalid {
        Invalid {
            kind,
            message: message.into(),
        }
    }
    /// What was wrong.
    pub fn kind(&self) -> InvalidKind {
        self.kind
    }
    /// The message: the value and the rule it broke.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
