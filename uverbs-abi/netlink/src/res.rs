//! Resource dumps: [`ResKind`], the `RDMA_NLDEV_CMD_RES_*_GET` tables, and
//! [`dump_res`] / [`for_each_res_entry`], which walk one device's table
//! and hand out each entry's attributes.

use nix::errno::Errno;

use super::abi::{attr, cmd, nldev_type};
use super::attrs::Attrs;
use super::socket::NlSocket;

/// The resource tables of the nldev resource dumps (what `rdma res show`
/// reads): each has a dump command and the table and entry attributes its
/// replies nest the entries under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResKind {
    /// Queue pairs ([`cmd::RES_QP_GET`]).
    Qp,
    /// RDMA CM ids ([`cmd::RES_CM_ID_GET`]).
    CmId,
    /// Completion queues ([`cmd::RES_CQ_GET`]).
    Cq,
    /// Memory regions ([`cmd::RES_MR_GET`]).
    Mr,
    /// Protection domains ([`cmd::RES_PD_GET`]).
    Pd,
    /// User contexts ([`cmd::RES_CTX_GET`]; Linux 5.13+).
    Ctx,
    /// Shared receive queues ([`cmd::RES_SRQ_GET`]; Linux 5.19+).
    Srq,
}

impl ResKind {
    /// The dump command (`RDMA_NLDEV_CMD_RES_*_GET`).
    pub const fn cmd(self) -> u16 {
        match self {
            ResKind::Qp => cmd::RES_QP_GET,
            ResKind::CmId => cmd::RES_CM_ID_GET,
            ResKind::Cq => cmd::RES_CQ_GET,
            ResKind::Mr => cmd::RES_MR_GET,
            ResKind::Pd => cmd::RES_PD_GET,
            ResKind::Ctx => cmd::RES_CTX_GET,
            ResKind::Srq => cmd::RES_SRQ_GET,
        }
    }

    /// The nested table attribute of a reply (`RDMA_NLDEV_ATTR_RES_*`).
    pub const fn table(self) -> u16 {
        match self {
            ResKind::Qp => attr::RES_QP,
            ResKind::CmId => attr::RES_CM_ID,
            ResKind::Cq => attr::RES_CQ,
            ResKind::Mr => attr::RES_MR,
            ResKind::Pd => attr::RES_PD,
            ResKind::Ctx => attr::RES_CTX,
            ResKind::Srq => attr::RES_SRQ,
        }
    }

    /// The attribute of one entry inside the table
    /// (`RDMA_NLDEV_ATTR_RES_*_ENTRY`).
    pub const fn entry(self) -> u16 {
        match self {
            ResKind::Qp => attr::RES_QP_ENTRY,
            ResKind::CmId => attr::RES_CM_ID_ENTRY,
            ResKind::Cq => attr::RES_CQ_ENTRY,
            ResKind::Mr => attr::RES_MR_ENTRY,
            ResKind::Pd => attr::RES_PD_ENTRY,
            ResKind::Ctx => attr::RES_CTX_ENTRY,
            ResKind::Srq => attr::RES_SRQ_ENTRY,
        }
    }
}

/// Call `f` with the fields of every `kind` entry in the attributes of one
/// resource-dump reply message: the entries nested under
/// [`ResKind::table`] as [`ResKind::entry`] attributes (other attributes,
/// such as the device handle, are skipped). [`Errno::EPROTO`] if the
/// message or a nested table is malformed.
pub fn for_each_res_entry(
    msg_attrs: &[u8],
    kind: ResKind,
    mut f: impl FnMut(Attrs<'_>) -> Result<(), Errno>,
) -> Result<(), Errno> {
    for a in Attrs::new(msg_attrs) {
        let a = a?;
        if a.kind != kind.table() {
            continue;
        }
        for e in a.nested() {
            let e = e?;
            if e.kind == kind.entry() {
                f(e.nested())?;
            }
        }
    }
    Ok(())
}

/// Dump the `kind` resources of device `dev_index` (a `RDMA_NLDEV_CMD_RES_*_GET`
/// dump with the [`attr::DEV_INDEX`] the kernel requires), calling `f` with
/// the fields of each entry ([`for_each_res_entry`]). The kernel shows only
/// the resources of the caller's PID namespace (and kernel-owned ones in the
/// initial namespace); some fields (an MR's lkey and iova, a PD's
/// local_dma_lkey) only to callers with `CAP_NET_ADMIN`.
///
/// Errors: the kernel's errno (`EINVAL` for an unknown index,
/// `EOPNOTSUPP` for a table this kernel does not dump), or
/// [`Errno::EPROTO`] for a malformed reply. A device without such
/// resources is not an error: `f` is simply not called.
pub fn dump_res(
    sock: &mut NlSocket,
    dev_index: u32,
    kind: ResKind,
    mut f: impl FnMut(Attrs<'_>) -> Result<(), Errno>,
) -> Result<(), Errno> {
    let index = dev_index.to_ne_bytes();
    sock.dump(
        nldev_type(kind.cmd()),
        &[(attr::DEV_INDEX, &index)],
        |attrs| for_each_res_entry(attrs, kind, &mut f),
    )
}
