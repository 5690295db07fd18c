//! Resource dumps: [`ResKind`], the `RDMA_NLDEV_CMD_RES_*_GET` tables, and
//! [`dump_res`] / [`for_each_res_entry`], which walk one device's table
//! and hand out each entry's attributes.

use rverbs_abi::Errno;

use super::abi::{attr, cmd, nldev_type};
use super::attrs::Attrs;
use super::socket::NlSocket;

/// The resource tables of the nldev resource dumps (what `rdma res show`
/// reads): each has a dump command and the table and entry attributes its
/// replies nest the entries under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
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

#[cfg(test)]
mod tests {
    use rverbs_abi::Errno;

    use super::*;
    use crate::tests::nla;
    use crate::*;

    #[test]
    fn res_entries_of_a_dump_message() {
        let qp = |n: u32, pid: u32| {
            nla(
                attr::RES_QP_ENTRY | NLA_F_NESTED,
                &[
                    nla(attr::RES_LQPN, &n.to_ne_bytes()),
                    nla(attr::RES_PID, &pid.to_ne_bytes()),
                ]
                .concat(),
            )
        };
        let table = [qp(17, 148), nla(attr::PAD, &[]), qp(18, 150)].concat();
        let msg = [
            nla(attr::DEV_INDEX, &0u32.to_ne_bytes()),
            nla(attr::DEV_NAME, b"rxe0\0"),
            // A table of another kind is not ours.
            nla(attr::RES_CQ | NLA_F_NESTED, &qp(99, 1)),
            // The QP table without NLA_F_NESTED (nla_nest_start_noflag).
            nla(attr::RES_QP, &table),
        ]
        .concat();
        let mut seen = Vec::new();
        for_each_res_entry(&msg, ResKind::Qp, |e| {
            let n = e.clone().get(attr::RES_LQPN)?.and_then(|a| a.u32());
            let p = e.get(attr::RES_PID)?.and_then(|a| a.u32());
            seen.push((n, p));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, vec![(Some(17), Some(148)), (Some(18), Some(150))]);
        // No table: no entries, no error.
        let mut n = 0;
        for_each_res_entry(&msg[..8], ResKind::Qp, |_| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, 0);
        // A malformed table is EPROTO, and the callback's error comes back.
        let bad = nla(attr::RES_QP, &[9, 0, 1, 0]);
        assert_eq!(
            for_each_res_entry(&bad, ResKind::Qp, |_| Ok(())),
            Err(Errno::EPROTO)
        );
        assert_eq!(
            for_each_res_entry(&msg, ResKind::Qp, |_| Err(Errno::EBADMSG)),
            Err(Errno::EBADMSG)
        );
    }

    #[test]
    fn res_kinds_match_the_header() {
        let all = [
            ResKind::Qp,
            ResKind::CmId,
            ResKind::Cq,
            ResKind::Mr,
            ResKind::Pd,
            ResKind::Ctx,
            ResKind::Srq,
        ];
        let got: Vec<(u16, u16, u16)> = all
            .iter()
            .map(|k| (k.cmd(), k.table(), k.entry()))
            .collect();
        assert_eq!(
            got,
            vec![
                (10, 19, 20),
                (11, 30, 31),
                (12, 35, 36),
                (13, 40, 41),
                (14, 46, 47),
                (22, 86, 87),
                (23, 88, 89),
            ]
        );
    }
}
