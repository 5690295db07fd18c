//! The kernel's RDMA netlink interface (`NETLINK_RDMA`, `<rdma/rdma_netlink.h>`):
//! list the RDMA devices the kernel knows, the way `rdma dev show` does.
//!
//! [`devices`] is the one-call entry point: it dumps `RDMA_NLDEV_CMD_GET`
//! and, for each device, asks `RDMA_NLDEV_CMD_GET_CHARDEV` about its
//! "uverbs" char device, which is where the kernel reports the driver id
//! ([`RdmaDev::driver_id`], a [`driver_id`] value). That id is how a verbs
//! library picks its provider for devices without a `device/driver` sysfs
//! link, such as soft-RoCE (`rxe`).
//!
//! The generic pieces are public for other nldev requests (for example the
//! `RDMA_NLDEV_CMD_RES_*_GET` resource dumps): [`NlSocket`] frames requests
//! and walks the replies (sequence numbers, `NLMSG_ERROR`, `NLMSG_DONE`);
//! [`Attrs`] iterates the `struct nlattr` TLVs of a reply; [`cmd`] and
//! [`attr`] hold the command and attribute numbers of the installed header.
//! [`dump_res`] dumps one resource table ([`ResKind`]) of one device and
//! hands out each entry's fields.
//!
//! Every length read from the kernel is checked: a malformed message is
//! [`Errno::EPROTO`](rverbs_abi::Errno::EPROTO), never a panic.
//!
//! One module a job, all re-exported here: `abi` (the header's tables),
//! `attrs` (attribute parsing), `framing` (requests and reply messages),
//! `socket` (the netlink socket), `device` (the device model) and `res`
//! (resource dumps).

// Clean, so denied (issue 44): nothing `pub` that no one outside can
// name, and one unsafe operation per block, each with its own SAFETY line.
#![deny(unreachable_pub)]
#![deny(clippy::multiple_unsafe_ops_per_block)]

#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz;

mod abi;
mod attrs;
mod device;
mod framing;
mod res;
mod socket;

pub use abi::{
    attr, cmd, driver_id, nldev_type, node_type, rdma_nl_get_type, NLA_F_NESTED, NLA_TYPE_MASK,
    RDMA_NL_NLDEV, RECV_TIMEOUT_SECS,
};
pub use attrs::{Attr, Attrs};
pub use device::{chardev, devices, Chardev, RdmaDev};
pub use res::{dump_res, for_each_res_entry, ResKind};
pub use socket::NlSocket;

#[cfg(test)]
mod tests {
    //! Fixtures the modules' tests share: attributes, messages and a
    //! kernel reply built by hand.

    use rverbs_abi::Errno;

    use super::*;
    use crate::abi::{NLA_HDRLEN, NLMSG_HDRLEN};

    /// One padded `struct nlattr` with raw type `ty`.
    pub(crate) fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((NLA_HDRLEN + payload.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    /// One message: header then `payload`.
    pub(crate) fn msg(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((NLMSG_HDRLEN + payload.len()) as u32).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(&flags.to_ne_bytes());
        v.extend_from_slice(&seq.to_ne_bytes());
        v.extend_from_slice(&4242u32.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    pub(crate) fn collect(buf: &[u8]) -> Vec<Result<Attr<'_>, Errno>> {
        Attrs::new(buf).collect()
    }

    /// An `RDMA_NLDEV_CMD_GET` reply for rxe0 as the kernel lays it out,
    /// including the zero-length PAD attributes before the u64s.
    pub(crate) fn rxe0_reply() -> Vec<u8> {
        [
            nla(attr::DEV_INDEX, &3u32.to_ne_bytes()),
            nla(attr::DEV_NAME, b"rxe0\0"),
            nla(attr::PORT_INDEX, &1u32.to_ne_bytes()),
            nla(attr::PAD, &[]),
            nla(attr::CAP_FLAGS, &0x1234u64.to_ne_bytes()),
            nla(attr::NODE_GUID, &0x0200_00ff_fe00_0001u64.to_ne_bytes()),
            nla(
                attr::SYS_IMAGE_GUID,
                &0x0200_00ff_fe00_0001u64.to_ne_bytes(),
            ),
            nla(attr::DEV_NODE_TYPE, &[node_type::IB_CA]),
            nla(attr::DEV_DIM, &[0]),
            nla(attr::DEV_PROTOCOL, b"roce\0"),
        ]
        .concat()
    }
}
