//! Memory regions over a dmabuf ([`Pd::reg_dmabuf_mr`]): memory another
//! device's driver exports as a dma-buf file descriptor (GPU memory, for
//! one), registered so that the RDMA device reads and writes it directly
//! (`UVERBS_METHOD_REG_DMABUF_MR`, what `ibv_reg_dmabuf_mr` sends).
//!
//! # Why this is safe to call
//!
//! An [`Mr`](crate::Mr) registers process memory and must own or borrow it
//! (the device may write it behind any Rust reference's back). A dmabuf
//! region is different, and needs no such promise:
//!
//! - **The fd is only borrowed for the call.** The kernel resolves it while
//!   registering and keeps its own reference to the dma-buf for as long as
//!   the registration lives; closing the fd afterwards (dropping the
//!   `OwnedFd` it was borrowed from) neither frees the buffer under the
//!   device nor ends the registration. The exporter moves or revokes the
//!   buffer only through the kernel, which updates or invalidates the
//!   device's mapping (dma-buf `move_notify`) before the pages go.
//! - **The kernel checks the fd.** A descriptor that is not a dma-buf is
//!   refused (`EINVAL`), one that is not open too (`EBADF`), as is a range
//!   past the buffer's end; nothing else in the process can be registered
//!   this way.
//! - **No process memory is involved.** The device writes the exporter's
//!   memory, which this process reaches only through the exporter's API or
//!   an `mmap` of the dma-buf, and creating a Rust reference from such a
//!   mapping is already `unsafe`, under a contract that must allow for
//!   other writers (the GPU, other processes, this device). So the region
//!   has no `read_at`/`write_at`: data moves through the exporter.
//!
//! What stays the caller's business is the usual RDMA protocol question of
//! when the memory holds what a peer should see, as with any MR.
//!
//! rxe has no dmabuf registration: [`Pd::reg_dmabuf_mr`] refuses it before
//! the kernel is asked ([`Error::Unsupported`] naming
//! [`Feature::DmabufMr`]). A kernel driver without it (mlx5 built without
//! on-demand paging) answers `EOPNOTSUPP`, reported as
//! [`Error::NotOffered`].

use std::fmt;
use std::os::fd::{AsRawFd, BorrowedFd};

use rverbs_abi::wr::Sge;

use crate::error::{Errno, Error, Feature, InvalidKind, Result};
use crate::mr::{check_access, AccessFlags, RemoteMr};
use crate::pd::Pd;

/// The access flags a dmabuf registration accepts (the kernel refuses any
/// other with `EINVAL`; on-demand paging among them).
pub const DMABUF_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::RELAXED_ORDERING);

/// Page size the kernel aligns registrations to.
const PAGE: u64 = 4096;

/// A registered region of a dmabuf (see the [module docs](self)).
/// Dropping it deregisters the region; the dma-buf itself belongs to its
/// exporter and is not touched.
pub struct DmabufMr {
    pd: Pd,
    handle: u32,
    lkey: u32,
    rkey: u32,
    offset: u64,
    len: u64,
    iova: u64,
    access: AccessFlags,
}

impl fmt::Debug for DmabufMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DmabufMr")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .field("iova", &self.iova)
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .field("access", &self.access)
            .finish()
    }
}

impl Pd {
    /// Registers `len` bytes of the dma-buf `fd` from `offset` on, for the
    /// device to address from `iova` (`ibv_reg_dmabuf_mr`). `fd` is only
    /// borrowed: the kernel holds the dma-buf for as long as the region is
    /// registered (see the [module docs](crate::dmabuf) for why this needs
    /// no `unsafe`).
    ///
    /// Refused before the kernel: a provider without dmabuf registration
    /// ([`Error::Unsupported`]; rxe), an empty range, access flags outside
    /// [`DMABUF_ACCESS`] or remote write/atomic without local write, an
    /// `iova` at another offset within a page than `offset`, and ranges
    /// that pass the end of the address space ([`Error::InvalidArgument`]).
    /// The kernel refuses a descriptor that is not a dma-buf (`EINVAL`) or
    /// not open (`EBADF`) and a range past the buffer's end (`EINVAL`).
    pub fn reg_dmabuf_mr(
        &self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        iova: u64,
        access: AccessFlags,
    ) -> Result<DmabufMr> {
        let ctx = self.context();
        ctx.provider().require(Feature::DmabufMr)?;
        if len == 0 {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "cannot register a zero-length dmabuf region",
            ));
        }
        if !DMABUF_ACCESS.contains(access) {
            return Err(Error::invalid_as(
                InvalidKind::Access,
                format!(
                    "a dmabuf region takes only local write, remote read/write/atomic and \
                 relaxed ordering; not {:?}",
                    access.difference(DMABUF_ACCESS)
                ),
            ));
        }
        check_access(access)?;
        if offset % PAGE != iova % PAGE {
            return Err(Error::invalid_as(
                InvalidKind::Alignment,
                format!(
                "IOVA {iova:#x} is at offset {:#x} within a page, the dmabuf offset {offset:#x} \
                 at {:#x}: they must match",
                iova % PAGE,
                offset % PAGE
            ),
            ));
        }
        if offset.checked_add(len).is_none() || iova.checked_add(len).is_none() {
            return Err(Error::invalid_as(
                InvalidKind::OutOfRange,
                format!(
                    "{len} bytes from offset {offset:#x} / IOVA {iova:#x} pass the end of the \
                 address space"
                ),
            ));
        }
        let raw_fd = u32::try_from(fd.as_raw_fd())
            .map_err(|_| Error::invalid_as(InvalidKind::Malformed, "a negative file descriptor"))?;
        let crate::sys::cmd::DmabufReg {
            done,
            handle,
            lkey,
            rkey,
        } = crate::sys::cmd::reg_dmabuf_mr(
            ctx.fd(),
            ctx.device().driver().id().unwrap_or(0),
            self.handle(),
            offset,
            len,
            iova,
            raw_fd,
            access.bits(),
        );
        match done {
            Ok(()) => {}
            Err(Errno::EOPNOTSUPP) => {
                return Err(Error::NotOffered {
                    what: "dmabuf memory registration",
                })
            }
            Err(e) => return Err(Error::kernel("reg_dmabuf_mr")(e)),
        }
        let handle = handle.ok_or_else(|| {
            Error::Unusable("reg_dmabuf_mr: the kernel returned no MR handle".into())
        })?;
        Ok(DmabufMr {
            pd: self.clone(),
            handle,
            lkey,
            rkey,
            offset,
            len,
            iova,
            access,
        })
    }
}

impl DmabufMr {
    /// Local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// The kernel's handle for the MR (`ibv_mr.handle`).
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// Remote key, for peers.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// Where in the dma-buf the region starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Whether the region is empty (never: registration refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The address the device knows the start by: what SGEs and peers
    /// name.
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// The access flags it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// The PD it belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// An SGE covering `len` bytes `offset` bytes into the region
    /// (bounds-checked).
    pub fn sge(&self, offset: u64, len: u32) -> Result<Sge> {
        match offset.checked_add(u64::from(len)) {
            Some(end) if end <= self.len => Ok(Sge {
                // `iova + len` fits a u64 (checked at registration).
                addr: self.iova + offset,
                length: len,
                lkey: self.lkey,
            }),
            _ => Err(Error::invalid_as(
                InvalidKind::OutOfRange,
                format!(
                    "range {offset}+{len} outside the {}-byte dmabuf region",
                    self.len
                ),
            )),
        }
    }

    /// The descriptor a peer needs for RDMA on the whole region.
    pub fn remote(&self) -> RemoteMr {
        RemoteMr {
            addr: self.iova,
            len: self.len,
            rkey: self.rkey,
        }
    }
}

impl Drop for DmabufMr {
    fn drop(&mut self) {
        // A failure (device gone) leaves the registration to the context's
        // teardown; no process memory is at stake either way.
        let _ = crate::sys::cmd::dereg_mr(self.pd.context().fd(), self.handle);
    }
}
