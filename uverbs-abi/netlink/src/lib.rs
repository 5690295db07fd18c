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
//! [`Errno::EPROTO`], never a panic.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz;

use nix::errno::Errno;

/// `RDMA_NL_NLDEV`: the netlink client of the RDMA device interface.
pub const RDMA_NL_NLDEV: u16 = 5;

/// `RDMA_NL_GET_TYPE(client, op)`: the `nlmsg_type` of an RDMA netlink
/// message, `(client << 10) + op`.
pub const fn rdma_nl_get_type(client: u16, op: u16) -> u16 {
    (client << 10) + op
}

/// `RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)`: the `nlmsg_type` of the nldev
/// command `op` (one of [`cmd`]).
pub const fn nldev_type(op: u16) -> u16 {
    rdma_nl_get_type(RDMA_NL_NLDEV, op)
}

/// `NLA_TYPE_MASK`: the bits of `nla_type` that carry the attribute number
/// (without `NLA_F_NESTED` and `NLA_F_NET_BYTEORDER`).
pub const NLA_TYPE_MASK: u16 = 0x3fff;
/// `NLA_F_NESTED`: the attribute's payload is itself a list of attributes.
pub const NLA_F_NESTED: u16 = 1 << 15;

// Netlink protocol numbers of `<linux/netlink.h>` used here.
const NLMSG_HDRLEN: usize = 16;
const NLA_HDRLEN: usize = 4;
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
const NLMSG_MIN_TYPE: u16 = 0x10;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_DUMP: u16 = 0x300;

/// The receive timeout of an [`NlSocket`]: a kernel that does not answer
/// within it makes the call fail with [`Errno::ETIMEDOUT`].
pub const RECV_TIMEOUT_SECS: i64 = 10;

/// The initial receive buffer size; a larger datagram grows it.
const RECV_BUF: usize = 64 * 1024;

/// `enum rdma_nldev_command`: the nldev commands (`op` of [`nldev_type`]).
pub mod cmd {
    /// `RDMA_NLDEV_CMD_UNSPEC`.
    pub const UNSPEC: u16 = 0;
    /// `RDMA_NLDEV_CMD_GET`.
    pub const GET: u16 = 1;
    /// `RDMA_NLDEV_CMD_SET`.
    pub const SET: u16 = 2;
    /// `RDMA_NLDEV_CMD_NEWLINK`.
    pub const NEWLINK: u16 = 3;
    /// `RDMA_NLDEV_CMD_DELLINK`.
    pub const DELLINK: u16 = 4;
    /// `RDMA_NLDEV_CMD_PORT_GET`.
    pub const PORT_GET: u16 = 5;
    /// `RDMA_NLDEV_CMD_SYS_GET`.
    pub const SYS_GET: u16 = 6;
    /// `RDMA_NLDEV_CMD_SYS_SET`.
    pub const SYS_SET: u16 = 7;
    /// `RDMA_NLDEV_CMD_RES_GET`.
    pub const RES_GET: u16 = 9;
    /// `RDMA_NLDEV_CMD_RES_QP_GET`.
    pub const RES_QP_GET: u16 = 10;
    /// `RDMA_NLDEV_CMD_RES_CM_ID_GET`.
    pub const RES_CM_ID_GET: u16 = 11;
    /// `RDMA_NLDEV_CMD_RES_CQ_GET`.
    pub const RES_CQ_GET: u16 = 12;
    /// `RDMA_NLDEV_CMD_RES_MR_GET`.
    pub const RES_MR_GET: u16 = 13;
    /// `RDMA_NLDEV_CMD_RES_PD_GET`.
    pub const RES_PD_GET: u16 = 14;
    /// `RDMA_NLDEV_CMD_GET_CHARDEV`.
    pub const GET_CHARDEV: u16 = 15;
    /// `RDMA_NLDEV_CMD_STAT_SET`.
    pub const STAT_SET: u16 = 16;
    /// `RDMA_NLDEV_CMD_STAT_GET`.
    pub const STAT_GET: u16 = 17;
    /// `RDMA_NLDEV_CMD_STAT_DEL`.
    pub const STAT_DEL: u16 = 18;
    /// `RDMA_NLDEV_CMD_RES_QP_GET_RAW`.
    pub const RES_QP_GET_RAW: u16 = 19;
    /// `RDMA_NLDEV_CMD_RES_CQ_GET_RAW`.
    pub const RES_CQ_GET_RAW: u16 = 20;
    /// `RDMA_NLDEV_CMD_RES_MR_GET_RAW`.
    pub const RES_MR_GET_RAW: u16 = 21;
    /// `RDMA_NLDEV_CMD_RES_CTX_GET`.
    pub const RES_CTX_GET: u16 = 22;
    /// `RDMA_NLDEV_CMD_RES_SRQ_GET`.
    pub const RES_SRQ_GET: u16 = 23;
    /// `RDMA_NLDEV_CMD_STAT_GET_STATUS`.
    pub const STAT_GET_STATUS: u16 = 24;
}

/// `enum rdma_nldev_attr`: the nldev attribute numbers, named without the
/// `RDMA_NLDEV_ATTR_` prefix (`RDMA_NLDEV_SYS_ATTR_X` is `SYS_X`).
pub mod attr {
    /// `RDMA_NLDEV_ATTR_UNSPEC`: never a real attribute.
    pub const UNSPEC: u16 = 0;
    /// `RDMA_NLDEV_ATTR_PAD`: zero-length padding the kernel inserts to 8-align a u64.
    pub const PAD: u16 = 0;
    /// `RDMA_NLDEV_ATTR_DEV_INDEX` (u32).
    pub const DEV_INDEX: u16 = 1;
    /// `RDMA_NLDEV_ATTR_DEV_NAME` (string).
    pub const DEV_NAME: u16 = 2;
    /// `RDMA_NLDEV_ATTR_PORT_INDEX` (u32).
    pub const PORT_INDEX: u16 = 3;
    /// `RDMA_NLDEV_ATTR_CAP_FLAGS` (u64).
    pub const CAP_FLAGS: u16 = 4;
    /// `RDMA_NLDEV_ATTR_FW_VERSION` (string).
    pub const FW_VERSION: u16 = 5;
    /// `RDMA_NLDEV_ATTR_NODE_GUID` (u64).
    pub const NODE_GUID: u16 = 6;
    /// `RDMA_NLDEV_ATTR_SYS_IMAGE_GUID` (u64).
    pub const SYS_IMAGE_GUID: u16 = 7;
    /// `RDMA_NLDEV_ATTR_SUBNET_PREFIX` (u64).
    pub const SUBNET_PREFIX: u16 = 8;
    /// `RDMA_NLDEV_ATTR_LID` (u32).
    pub const LID: u16 = 9;
    /// `RDMA_NLDEV_ATTR_SM_LID` (u32).
    pub const SM_LID: u16 = 10;
    /// `RDMA_NLDEV_ATTR_LMC` (u8).
    pub const LMC: u16 = 11;
    /// `RDMA_NLDEV_ATTR_PORT_STATE` (u8).
    pub const PORT_STATE: u16 = 12;
    /// `RDMA_NLDEV_ATTR_PORT_PHYS_STATE` (u8).
    pub const PORT_PHYS_STATE: u16 = 13;
    /// `RDMA_NLDEV_ATTR_DEV_NODE_TYPE` (u8).
    pub const DEV_NODE_TYPE: u16 = 14;
    /// `RDMA_NLDEV_ATTR_RES_SUMMARY` (nested table).
    pub const RES_SUMMARY: u16 = 15;
    /// `RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY` (nested table).
    pub const RES_SUMMARY_ENTRY: u16 = 16;
    /// `RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_NAME` (string).
    pub const RES_SUMMARY_ENTRY_NAME: u16 = 17;
    /// `RDMA_NLDEV_ATTR_RES_SUMMARY_ENTRY_CURR` (u64).
    pub const RES_SUMMARY_ENTRY_CURR: u16 = 18;
    /// `RDMA_NLDEV_ATTR_RES_QP` (nested table).
    pub const RES_QP: u16 = 19;
    /// `RDMA_NLDEV_ATTR_RES_QP_ENTRY` (nested table).
    pub const RES_QP_ENTRY: u16 = 20;
    /// `RDMA_NLDEV_ATTR_RES_LQPN` (u32).
    pub const RES_LQPN: u16 = 21;
    /// `RDMA_NLDEV_ATTR_RES_RQPN` (u32).
    pub const RES_RQPN: u16 = 22;
    /// `RDMA_NLDEV_ATTR_RES_RQ_PSN` (u32).
    pub const RES_RQ_PSN: u16 = 23;
    /// `RDMA_NLDEV_ATTR_RES_SQ_PSN` (u32).
    pub const RES_SQ_PSN: u16 = 24;
    /// `RDMA_NLDEV_ATTR_RES_PATH_MIG_STATE` (u8).
    pub const RES_PATH_MIG_STATE: u16 = 25;
    /// `RDMA_NLDEV_ATTR_RES_TYPE` (u8).
    pub const RES_TYPE: u16 = 26;
    /// `RDMA_NLDEV_ATTR_RES_STATE` (u8).
    pub const RES_STATE: u16 = 27;
    /// `RDMA_NLDEV_ATTR_RES_PID` (u32).
    pub const RES_PID: u16 = 28;
    /// `RDMA_NLDEV_ATTR_RES_KERN_NAME` (string).
    pub const RES_KERN_NAME: u16 = 29;
    /// `RDMA_NLDEV_ATTR_RES_CM_ID` (nested table).
    pub const RES_CM_ID: u16 = 30;
    /// `RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY` (nested table).
    pub const RES_CM_ID_ENTRY: u16 = 31;
    /// `RDMA_NLDEV_ATTR_RES_PS` (u32).
    pub const RES_PS: u16 = 32;
    /// `RDMA_NLDEV_ATTR_RES_SRC_ADDR` (__kernel_sockaddr_storage).
    pub const RES_SRC_ADDR: u16 = 33;
    /// `RDMA_NLDEV_ATTR_RES_DST_ADDR` (__kernel_sockaddr_storage).
    pub const RES_DST_ADDR: u16 = 34;
    /// `RDMA_NLDEV_ATTR_RES_CQ` (nested table).
    pub const RES_CQ: u16 = 35;
    /// `RDMA_NLDEV_ATTR_RES_CQ_ENTRY` (nested table).
    pub const RES_CQ_ENTRY: u16 = 36;
    /// `RDMA_NLDEV_ATTR_RES_CQE` (u32).
    pub const RES_CQE: u16 = 37;
    /// `RDMA_NLDEV_ATTR_RES_USECNT` (u64).
    pub const RES_USECNT: u16 = 38;
    /// `RDMA_NLDEV_ATTR_RES_POLL_CTX` (u8).
    pub const RES_POLL_CTX: u16 = 39;
    /// `RDMA_NLDEV_ATTR_RES_MR` (nested table).
    pub const RES_MR: u16 = 40;
    /// `RDMA_NLDEV_ATTR_RES_MR_ENTRY` (nested table).
    pub const RES_MR_ENTRY: u16 = 41;
    /// `RDMA_NLDEV_ATTR_RES_RKEY` (u32).
    pub const RES_RKEY: u16 = 42;
    /// `RDMA_NLDEV_ATTR_RES_LKEY` (u32).
    pub const RES_LKEY: u16 = 43;
    /// `RDMA_NLDEV_ATTR_RES_IOVA` (u64).
    pub const RES_IOVA: u16 = 44;
    /// `RDMA_NLDEV_ATTR_RES_MRLEN` (u64).
    pub const RES_MRLEN: u16 = 45;
    /// `RDMA_NLDEV_ATTR_RES_PD` (nested table).
    pub const RES_PD: u16 = 46;
    /// `RDMA_NLDEV_ATTR_RES_PD_ENTRY` (nested table).
    pub const RES_PD_ENTRY: u16 = 47;
    /// `RDMA_NLDEV_ATTR_RES_LOCAL_DMA_LKEY` (u32).
    pub const RES_LOCAL_DMA_LKEY: u16 = 48;
    /// `RDMA_NLDEV_ATTR_RES_UNSAFE_GLOBAL_RKEY` (u32).
    pub const RES_UNSAFE_GLOBAL_RKEY: u16 = 49;
    /// `RDMA_NLDEV_ATTR_NDEV_INDEX` (u32).
    pub const NDEV_INDEX: u16 = 50;
    /// `RDMA_NLDEV_ATTR_NDEV_NAME` (string).
    pub const NDEV_NAME: u16 = 51;
    /// `RDMA_NLDEV_ATTR_DRIVER` (nested table).
    pub const DRIVER: u16 = 52;
    /// `RDMA_NLDEV_ATTR_DRIVER_ENTRY` (nested table).
    pub const DRIVER_ENTRY: u16 = 53;
    /// `RDMA_NLDEV_ATTR_DRIVER_STRING` (string).
    pub const DRIVER_STRING: u16 = 54;
    /// `RDMA_NLDEV_ATTR_DRIVER_PRINT_TYPE` (u8).
    pub const DRIVER_PRINT_TYPE: u16 = 55;
    /// `RDMA_NLDEV_ATTR_DRIVER_S32` (s32).
    pub const DRIVER_S32: u16 = 56;
    /// `RDMA_NLDEV_ATTR_DRIVER_U32` (u32).
    pub const DRIVER_U32: u16 = 57;
    /// `RDMA_NLDEV_ATTR_DRIVER_S64` (s64).
    pub const DRIVER_S64: u16 = 58;
    /// `RDMA_NLDEV_ATTR_DRIVER_U64` (u64).
    pub const DRIVER_U64: u16 = 59;
    /// `RDMA_NLDEV_ATTR_RES_PDN` (u32).
    pub const RES_PDN: u16 = 60;
    /// `RDMA_NLDEV_ATTR_RES_CQN` (u32).
    pub const RES_CQN: u16 = 61;
    /// `RDMA_NLDEV_ATTR_RES_MRN` (u32).
    pub const RES_MRN: u16 = 62;
    /// `RDMA_NLDEV_ATTR_RES_CM_IDN` (u32).
    pub const RES_CM_IDN: u16 = 63;
    /// `RDMA_NLDEV_ATTR_RES_CTXN` (u32).
    pub const RES_CTXN: u16 = 64;
    /// `RDMA_NLDEV_ATTR_LINK_TYPE` (string).
    pub const LINK_TYPE: u16 = 65;
    /// `RDMA_NLDEV_SYS_ATTR_NETNS_MODE` (u8).
    pub const SYS_NETNS_MODE: u16 = 66;
    /// `RDMA_NLDEV_ATTR_DEV_PROTOCOL` (string).
    pub const DEV_PROTOCOL: u16 = 67;
    /// `RDMA_NLDEV_NET_NS_FD` (u32).
    pub const NET_NS_FD: u16 = 68;
    /// `RDMA_NLDEV_ATTR_CHARDEV_TYPE` (string).
    pub const CHARDEV_TYPE: u16 = 69;
    /// `RDMA_NLDEV_ATTR_CHARDEV_NAME` (string).
    pub const CHARDEV_NAME: u16 = 70;
    /// `RDMA_NLDEV_ATTR_CHARDEV_ABI` (u64).
    pub const CHARDEV_ABI: u16 = 71;
    /// `RDMA_NLDEV_ATTR_CHARDEV` (u64).
    pub const CHARDEV: u16 = 72;
    /// `RDMA_NLDEV_ATTR_UVERBS_DRIVER_ID`: the `enum rdma_driver_id` of the
    /// device ([`super::driver_id`]); the header says u64, the kernel sends a
    /// u32. Only in the reply to [`super::cmd::GET_CHARDEV`] for "uverbs".
    pub const UVERBS_DRIVER_ID: u16 = 73;
    /// `RDMA_NLDEV_ATTR_STAT_MODE` (u32).
    pub const STAT_MODE: u16 = 74;
    /// `RDMA_NLDEV_ATTR_STAT_RES` (u32).
    pub const STAT_RES: u16 = 75;
    /// `RDMA_NLDEV_ATTR_STAT_AUTO_MODE_MASK` (u32).
    pub const STAT_AUTO_MODE_MASK: u16 = 76;
    /// `RDMA_NLDEV_ATTR_STAT_COUNTER` (nested table).
    pub const STAT_COUNTER: u16 = 77;
    /// `RDMA_NLDEV_ATTR_STAT_COUNTER_ENTRY` (nested table).
    pub const STAT_COUNTER_ENTRY: u16 = 78;
    /// `RDMA_NLDEV_ATTR_STAT_COUNTER_ID` (u32).
    pub const STAT_COUNTER_ID: u16 = 79;
    /// `RDMA_NLDEV_ATTR_STAT_HWCOUNTERS` (nested table).
    pub const STAT_HWCOUNTERS: u16 = 80;
    /// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY` (nested table).
    pub const STAT_HWCOUNTER_ENTRY: u16 = 81;
    /// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_NAME` (string).
    pub const STAT_HWCOUNTER_ENTRY_NAME: u16 = 82;
    /// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_ENTRY_VALUE` (u64).
    pub const STAT_HWCOUNTER_ENTRY_VALUE: u16 = 83;
    /// `RDMA_NLDEV_ATTR_DEV_DIM` (u8).
    pub const DEV_DIM: u16 = 84;
    /// `RDMA_NLDEV_ATTR_RES_RAW` (binary).
    pub const RES_RAW: u16 = 85;
    /// `RDMA_NLDEV_ATTR_RES_CTX` (nested table).
    pub const RES_CTX: u16 = 86;
    /// `RDMA_NLDEV_ATTR_RES_CTX_ENTRY` (nested table).
    pub const RES_CTX_ENTRY: u16 = 87;
    /// `RDMA_NLDEV_ATTR_RES_SRQ` (nested table).
    pub const RES_SRQ: u16 = 88;
    /// `RDMA_NLDEV_ATTR_RES_SRQ_ENTRY` (nested table).
    pub const RES_SRQ_ENTRY: u16 = 89;
    /// `RDMA_NLDEV_ATTR_RES_SRQN` (u32).
    pub const RES_SRQN: u16 = 90;
    /// `RDMA_NLDEV_ATTR_MIN_RANGE` (u32).
    pub const MIN_RANGE: u16 = 91;
    /// `RDMA_NLDEV_ATTR_MAX_RANGE` (u32).
    pub const MAX_RANGE: u16 = 92;
    /// `RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK` (u8).
    pub const SYS_COPY_ON_FORK: u16 = 93;
    /// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_INDEX` (u32).
    pub const STAT_HWCOUNTER_INDEX: u16 = 94;
    /// `RDMA_NLDEV_ATTR_STAT_HWCOUNTER_DYNAMIC` (u8).
    pub const STAT_HWCOUNTER_DYNAMIC: u16 = 95;
    /// `RDMA_NLDEV_SYS_ATTR_PRIVILEGED_QKEY_MODE` (u8).
    pub const SYS_PRIVILEGED_QKEY_MODE: u16 = 96;
    /// `RDMA_NLDEV_ATTR_DRIVER_DETAILS` (u8).
    pub const DRIVER_DETAILS: u16 = 97;
    /// `RDMA_NLDEV_ATTR_RES_SUBTYPE` (string).
    pub const RES_SUBTYPE: u16 = 98;
}

/// `enum rdma_driver_id` (`<rdma/ib_user_ioctl_verbs.h>`): the driver of a
/// device, as reported in [`attr::UVERBS_DRIVER_ID`].
pub mod driver_id {
    /// `RDMA_DRIVER_UNKNOWN`.
    pub const UNKNOWN: u32 = 0;
    /// `RDMA_DRIVER_MLX5`.
    pub const MLX5: u32 = 1;
    /// `RDMA_DRIVER_MLX4`.
    pub const MLX4: u32 = 2;
    /// `RDMA_DRIVER_CXGB3`.
    pub const CXGB3: u32 = 3;
    /// `RDMA_DRIVER_CXGB4`.
    pub const CXGB4: u32 = 4;
    /// `RDMA_DRIVER_MTHCA`.
    pub const MTHCA: u32 = 5;
    /// `RDMA_DRIVER_BNXT_RE`.
    pub const BNXT_RE: u32 = 6;
    /// `RDMA_DRIVER_OCRDMA`.
    pub const OCRDMA: u32 = 7;
    /// `RDMA_DRIVER_NES`.
    pub const NES: u32 = 8;
    /// `RDMA_DRIVER_I40IW`.
    pub const I40IW: u32 = 9;
    /// `RDMA_DRIVER_IRDMA`.
    pub const IRDMA: u32 = 9;
    /// `RDMA_DRIVER_VMW_PVRDMA`.
    pub const VMW_PVRDMA: u32 = 10;
    /// `RDMA_DRIVER_QEDR`.
    pub const QEDR: u32 = 11;
    /// `RDMA_DRIVER_HNS`.
    pub const HNS: u32 = 12;
    /// `RDMA_DRIVER_USNIC`.
    pub const USNIC: u32 = 13;
    /// `RDMA_DRIVER_RXE`.
    pub const RXE: u32 = 14;
    /// `RDMA_DRIVER_HFI1`.
    pub const HFI1: u32 = 15;
    /// `RDMA_DRIVER_QIB`.
    pub const QIB: u32 = 16;
    /// `RDMA_DRIVER_EFA`.
    pub const EFA: u32 = 17;
    /// `RDMA_DRIVER_SIW`.
    pub const SIW: u32 = 18;
    /// `RDMA_DRIVER_ERDMA`.
    pub const ERDMA: u32 = 19;
    /// `RDMA_DRIVER_MANA` (newer than the installed header: Linux 6.2+).
    pub const MANA: u32 = 20;
}

/// The `RDMA_NODE_*` values of [`attr::DEV_NODE_TYPE`] ([`RdmaDev::node_type`]).
pub mod node_type {
    /// `RDMA_NODE_IB_CA`: an InfiniBand channel adapter (also RoCE devices).
    pub const IB_CA: u8 = 1;
    /// `RDMA_NODE_IB_SWITCH`.
    pub const IB_SWITCH: u8 = 2;
    /// `RDMA_NODE_IB_ROUTER`.
    pub const IB_ROUTER: u8 = 3;
    /// `RDMA_NODE_RNIC`: an iWARP NIC.
    pub const RNIC: u8 = 4;
    /// `RDMA_NODE_USNIC`.
    pub const USNIC: u8 = 5;
    /// `RDMA_NODE_USNIC_UDP`.
    pub const USNIC_UDP: u8 = 6;
    /// `RDMA_NODE_UNSPECIFIED`.
    pub const UNSPECIFIED: u8 = 7;
}

/// `NLA_ALIGN`/`NLMSG_ALIGN`: round up to 4 bytes (`None` on overflow).
fn align4(len: usize) -> Option<usize> {
    len.checked_add(3).map(|n| n & !3)
}

fn ne_u16(b: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(..2)?.try_into().ok()?))
}

fn ne_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

fn ne_u64(b: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?))
}

/// One netlink attribute (`struct nlattr` and its payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    /// The attribute number: `nla_type & NLA_TYPE_MASK` (one of [`attr`]).
    pub kind: u16,
    /// `NLA_F_NESTED` was set. The kernel does not set it on every nested
    /// nldev table, so callers pick [`Attr::nested`] by [`Attr::kind`].
    pub nested_flag: bool,
    /// The payload, without the header and the alignment padding.
    pub payload: &'a [u8],
}

impl<'a> Attr<'a> {
    /// The payload as a `u8`; `None` if it is shorter than 1 byte.
    pub fn u8(&self) -> Option<u8> {
        self.payload.first().copied()
    }

    /// The payload as a host-order `u16`; `None` if it is shorter.
    pub fn u16(&self) -> Option<u16> {
        ne_u16(self.payload)
    }

    /// The payload as a host-order `u32`; `None` if it is shorter.
    pub fn u32(&self) -> Option<u32> {
        ne_u32(self.payload)
    }

    /// The payload as a host-order `u64`; `None` if it is shorter.
    pub fn u64(&self) -> Option<u64> {
        ne_u64(self.payload)
    }

    /// A host-order unsigned integer of exactly 1, 2, 4 or 8 bytes, for
    /// attributes whose width the kernel and the header disagree on (such
    /// as [`attr::UVERBS_DRIVER_ID`]); `None` for any other length.
    pub fn uint(&self) -> Option<u64> {
        match self.payload.len() {
            1 => self.u8().map(u64::from),
            2 => self.u16().map(u64::from),
            4 => self.u32().map(u64::from),
            8 => self.u64(),
            _ => None,
        }
    }

    /// The payload as a string: the bytes before the first NUL (all of them
    /// if there is none); `None` if they are not UTF-8.
    pub fn str(&self) -> Option<&'a str> {
        let end = self
            .payload
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.payload.len());
        std::str::from_utf8(&self.payload[..end]).ok()
    }

    /// The payload as a list of attributes (a nested table).
    pub fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.payload)
    }
}

/// An iterator over the `struct nlattr` TLVs of a buffer (the payload of a
/// message or of a nested attribute).
///
/// Each item is an [`Attr`], or [`Errno::EPROTO`] once if the buffer is
/// malformed (a header or payload running past the end, or `nla_len`
/// shorter than the header), after which the iteration stops. The padding
/// after the last attribute may be missing, as the kernel's `nla_ok` allows.
#[derive(Debug, Clone)]
pub struct Attrs<'a> {
    rest: &'a [u8],
}

impl<'a> Attrs<'a> {
    /// Iterate the attributes in `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Attrs { rest: buf }
    }

    /// The first attribute numbered `kind` (later duplicates are ignored),
    /// or `Ok(None)`; [`Errno::EPROTO`] if the buffer is malformed before it.
    pub fn get(self, kind: u16) -> Result<Option<Attr<'a>>, Errno> {
        for a in self {
            let a = a?;
            if a.kind == kind {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, Errno>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = self.rest;
        // Stop after this item whatever happens; a valid attribute resets it.
        self.rest = &[];
        let (Some(len), Some(ty)) = (ne_u16(rest), rest.get(2..).and_then(ne_u16)) else {
            return Some(Err(Errno::EPROTO));
        };
        let len = usize::from(len);
        if len < NLA_HDRLEN || len > rest.len() {
            return Some(Err(Errno::EPROTO));
        }
        let next = align4(len).map_or(rest.len(), |n| n.min(rest.len()));
        self.rest = &rest[next..];
        Some(Ok(Attr {
            kind: ty & NLA_TYPE_MASK,
            nested_flag: ty & NLA_F_NESTED != 0,
            payload: &rest[NLA_HDRLEN..len],
        }))
    }
}

/// One netlink message of a received datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NlMsg<'a> {
    ty: u16,
    flags: u16,
    seq: u32,
    payload: &'a [u8],
}

/// The messages of a datagram (`NLMSG_OK`/`NLMSG_NEXT`); a truncated
/// header or a length running past the datagram is [`Errno::EPROTO`].
struct Messages<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<NlMsg<'a>, Errno>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = self.rest;
        self.rest = &[];
        let hdr = match rest.get(..NLMSG_HDRLEN) {
            Some(h) => h,
            None => return Some(Err(Errno::EPROTO)),
        };
        let (Some(len), Some(ty), Some(flags), Some(seq)) = (
            ne_u32(hdr),
            ne_u16(&hdr[4..]),
            ne_u16(&hdr[6..]),
            ne_u32(&hdr[8..]),
        ) else {
            return Some(Err(Errno::EPROTO));
        };
        let len = match usize::try_from(len) {
            Ok(l) if (NLMSG_HDRLEN..=rest.len()).contains(&l) => l,
            _ => return Some(Err(Errno::EPROTO)),
        };
        let next = align4(len).map_or(rest.len(), |n| n.min(rest.len()));
        self.rest = &rest[next..];
        Some(Ok(NlMsg {
            ty,
            flags,
            seq,
            payload: &rest[NLMSG_HDRLEN..len],
        }))
    }
}

/// Append one request message to `out`: `struct nlmsghdr` then each
/// `(type, payload)` as a padded `struct nlattr`. [`Errno::E2BIG`] if an
/// attribute or the message does not fit its length field.
fn encode_request(
    out: &mut Vec<u8>,
    nl_type: u16,
    flags: u16,
    seq: u32,
    attrs: &[(u16, &[u8])],
) -> Result<(), Errno> {
    let start = out.len();
    out.extend_from_slice(&[0; NLMSG_HDRLEN]);
    for &(kind, payload) in attrs {
        let len = u16::try_from(NLA_HDRLEN + payload.len()).map_err(|_| Errno::E2BIG)?;
        out.extend_from_slice(&len.to_ne_bytes());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(payload);
        let padded = align4(out.len()).ok_or(Errno::E2BIG)?;
        out.resize(padded, 0);
    }
    let total = u32::try_from(out.len() - start).map_err(|_| Errno::E2BIG)?;
    let hdr = &mut out[start..start + NLMSG_HDRLEN];
    hdr[0..4].copy_from_slice(&total.to_ne_bytes());
    hdr[4..6].copy_from_slice(&nl_type.to_ne_bytes());
    hdr[6..8].copy_from_slice(&flags.to_ne_bytes());
    hdr[8..12].copy_from_slice(&seq.to_ne_bytes());
    // nlmsg_pid stays 0: the kernel fills in the sender's port id.
    Ok(())
}

/// What one reply message means for the exchange in progress.
#[derive(Debug, PartialEq, Eq)]
enum Step<'a> {
    /// A data message: its attribute bytes.
    Data(&'a [u8]),
    /// Not ours or nothing to do (`NLMSG_NOOP`, a stale sequence number).
    Skip,
    /// The exchange is over (`NLMSG_DONE`, or an `NLMSG_ERROR` ack of 0).
    Done,
    /// The kernel failed the request (negative errno of `NLMSG_ERROR` or of
    /// `NLMSG_DONE`), or the message is malformed.
    Fail(Errno),
}

/// Classify a reply message of the exchange with sequence number `seq`.
fn classify<'a>(msg: &NlMsg<'a>, seq: u32) -> Step<'a> {
    if msg.seq != seq {
        // Left over from an earlier exchange on this socket.
        return Step::Skip;
    }
    let error = || match msg.payload.get(..4).and_then(ne_u32) {
        Some(e) => Ok(e as i32),
        None => Err(Errno::EPROTO),
    };
    match msg.ty {
        NLMSG_ERROR => match error() {
            Ok(0) => Step::Done,
            Ok(e) if e < 0 => Step::Fail(Errno::from_raw(e.saturating_neg())),
            Ok(_) | Err(_) => Step::Fail(Errno::EPROTO),
        },
        // A dump's NLMSG_DONE carries the dump's status; an old kernel may
        // send it without payload.
        NLMSG_DONE => match error() {
            Ok(e) if e < 0 => Step::Fail(Errno::from_raw(e.saturating_neg())),
            _ => Step::Done,
        },
        NLMSG_OVERRUN => Step::Fail(Errno::EPROTO),
        NLMSG_NOOP => Step::Skip,
        // Other (reserved) control messages carry nothing for us.
        t if t < NLMSG_MIN_TYPE => Step::Skip,
        _ => Step::Data(msg.payload),
    }
}

/// Walks one reply datagram of the exchange with sequence number `seq`,
/// handing the attributes of each data message to `f` until it fails (its
/// first error is kept in `cb_err`). `Some` with the exchange's result once
/// a message ends it, `None` while more datagrams are to come.
fn feed(
    datagram: &[u8],
    seq: u32,
    cb_err: &mut Option<Errno>,
    f: &mut impl FnMut(&[u8]) -> Result<(), Errno>,
) -> Option<Result<(), Errno>> {
    for msg in (Messages { rest: datagram }) {
        let step = match msg {
            Ok(ref m) => classify(m, seq),
            Err(e) => Step::Fail(e),
        };
        match step {
            Step::Skip => {}
            Step::Data(attrs) => {
                if cb_err.is_none() {
                    *cb_err = f(attrs).err();
                }
            }
            Step::Done => return Some(cb_err.map_or(Ok(()), Err)),
            Step::Fail(e) => return Some(Err(cb_err.unwrap_or(e))),
        }
    }
    None
}

/// A `NETLINK_RDMA` socket bound to a kernel-assigned port.
///
/// Requests carry increasing sequence numbers; replies with another
/// sequence number (left over from an abandoned exchange) are skipped, as
/// are datagrams not sent by the kernel.
#[derive(Debug)]
pub struct NlSocket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

impl NlSocket {
    /// Open and bind a `NETLINK_RDMA` socket. [`Errno::EPROTONOSUPPORT`]
    /// means the kernel has no RDMA core (so no RDMA devices).
    pub fn open() -> Result<Self, Errno> {
        // SAFETY: plain syscall with constant arguments; no pointers.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_RDMA,
            )
        };
        if raw < 0 {
            return Err(Errno::last());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let tv = libc::timeval {
            tv_sec: RECV_TIMEOUT_SECS as libc::time_t,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a live timeval and the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(Errno::last());
        }

        let addr = kernel_addr();
        // SAFETY: `addr` is a live sockaddr_nl and the length is its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(Errno::last());
        }
        Ok(NlSocket {
            fd,
            seq: 0,
            buf: Vec::new(),
        })
    }

    /// Dump: send `nl_type` (for example `nldev_type(cmd::GET)`) with
    /// `NLM_F_REQUEST | NLM_F_DUMP` and the attributes `attrs`, then call
    /// `f` with the attribute bytes of each reply message until
    /// `NLMSG_DONE`. A kernel error ends the dump with its errno. If `f`
    /// fails, the rest of the dump is read and discarded (so the socket can
    /// dump again) and `f`'s error is returned.
    pub fn dump(
        &mut self,
        nl_type: u16,
        attrs: &[(u16, &[u8])],
        f: impl FnMut(&[u8]) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.exchange(nl_type, NLM_F_REQUEST | NLM_F_DUMP, attrs, f)
    }

    /// Single request (a "doit" command such as [`cmd::GET_CHARDEV`]): send
    /// `nl_type` with `NLM_F_REQUEST | NLM_F_ACK` and `attrs`, call `f` with
    /// the attribute bytes of each reply message, and return at the
    /// kernel's acknowledgement (or its error).
    pub fn request(
        &mut self,
        nl_type: u16,
        attrs: &[(u16, &[u8])],
        f: impl FnMut(&[u8]) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.exchange(nl_type, NLM_F_REQUEST | NLM_F_ACK, attrs, f)
    }

    fn exchange(
        &mut self,
        nl_type: u16,
        flags: u16,
        attrs: &[(u16, &[u8])],
        mut f: impl FnMut(&[u8]) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut req = Vec::new();
        encode_request(&mut req, nl_type, flags, seq, attrs)?;
        self.send(&req)?;

        let mut cb_err = None;
        loop {
            let n = match self.recv() {
                Ok(n) => n,
                Err(e) => return Err(cb_err.unwrap_or(e)),
            };
            if let Some(end) = feed(&self.buf[..n], seq, &mut cb_err, &mut f) {
                return end;
            }
        }
    }

    fn send(&self, req: &[u8]) -> Result<(), Errno> {
        let addr = kernel_addr();
        loop {
            // SAFETY: `req` and `addr` are live for the call and the lengths
            // passed are theirs.
            let n = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    req.as_ptr().cast(),
                    req.len(),
                    0,
                    (&addr as *const libc::sockaddr_nl).cast(),
                    size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if n < 0 {
                match Errno::last() {
                    Errno::EINTR => continue,
                    e => return Err(e),
                }
            }
            return if n as usize == req.len() {
                Ok(())
            } else {
                Err(Errno::EIO)
            };
        }
    }

    /// Receive one datagram from the kernel into `self.buf`, growing it to
    /// the datagram's size (peeked with `MSG_PEEK | MSG_TRUNC`); returns
    /// its length. Datagrams from other senders are dropped.
    fn recv(&mut self) -> Result<usize, Errno> {
        if self.buf.len() < RECV_BUF {
            self.buf.resize(RECV_BUF, 0);
        }
        loop {
            let want = self.recv_once(libc::MSG_PEEK | libc::MSG_TRUNC)?.0;
            if want > self.buf.len() {
                self.buf.resize(want, 0);
            }
            let (n, from_kernel) = self.recv_once(libc::MSG_TRUNC)?;
            if n > self.buf.len() {
                // The datagram changed between peek and read: cannot happen
                // with one reader; refuse rather than parse a partial one.
                return Err(Errno::EMSGSIZE);
            }
            if from_kernel {
                return Ok(n);
            }
        }
    }

    /// One `recvfrom` into `self.buf`: the datagram's full length (thanks to
    /// `MSG_TRUNC`) and whether the kernel (port 0) sent it.
    fn recv_once(&mut self, flags: libc::c_int) -> Result<(usize, bool), Errno> {
        loop {
            // SAFETY: sockaddr_nl is plain old data; all-zero is valid.
            let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut from_len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: the buffer and `from` are live and writable for the
            // lengths passed; the kernel writes at most those many bytes.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    flags,
                    (&mut from as *mut libc::sockaddr_nl).cast(),
                    &mut from_len,
                )
            };
            if n < 0 {
                match Errno::last() {
                    Errno::EINTR => continue,
                    Errno::EAGAIN => return Err(Errno::ETIMEDOUT),
                    e => return Err(e),
                }
            }
            let from_kernel = from_len as usize >= size_of::<libc::sockaddr_nl>()
                && from.nl_family as libc::c_int == libc::AF_NETLINK
                && from.nl_pid == 0;
            return Ok((n as usize, from_kernel));
        }
    }
}

/// The kernel's netlink address (port 0, no groups); also the bind address
/// (port 0 asks the kernel to assign one).
fn kernel_addr() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr
}

/// An RDMA device as `RDMA_NLDEV_CMD_GET` (and `GET_CHARDEV`) report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDev {
    /// The kernel's device index ([`attr::DEV_INDEX`]).
    pub index: u32,
    /// The device name, such as `rxe0` ([`attr::DEV_NAME`]).
    pub name: String,
    /// The driver ([`driver_id`]), from [`attr::UVERBS_DRIVER_ID`] of the
    /// "uverbs" char device; `None` if the kernel does not say (no uverbs
    /// char device, a driver that opts out, or a kernel older than 5.3).
    pub driver_id: Option<u32>,
    /// The node GUID exactly as the kernel's u64 attribute value
    /// ([`attr::NODE_GUID`]): the kernel sends `be64_to_cpu(node_guid)`, so
    /// `format!("{:016x}", g)` reads as the GUID's bytes in wire order.
    pub node_guid: Option<u64>,
    /// The firmware version ([`attr::FW_VERSION`]); absent for devices
    /// without firmware, such as rxe.
    pub fw_version: Option<String>,
    /// The node type ([`node_type`]; [`attr::DEV_NODE_TYPE`]).
    pub node_type: Option<u8>,
    /// The link protocol of the first port: "ib", "roce", "iw", "opa" or
    /// "usnic" ([`attr::DEV_PROTOCOL`]).
    pub protocol: Option<String>,
    /// The number of ports ([`attr::PORT_INDEX`] in a `GET` reply).
    pub port_count: Option<u32>,
}

impl RdmaDev {
    /// Parse the attributes of one `RDMA_NLDEV_CMD_GET` reply. The index and
    /// name are required ([`Errno::EPROTO`] without them); the other fields
    /// are `None` when absent or too short.
    fn parse(attrs: &[u8]) -> Result<Self, Errno> {
        let (mut index, mut name) = (None, None);
        let mut dev = RdmaDev {
            index: 0,
            name: String::new(),
            driver_id: None,
            node_guid: None,
            fw_version: None,
            node_type: None,
            protocol: None,
            port_count: None,
        };
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind {
                attr::DEV_INDEX => index = a.u32(),
                attr::DEV_NAME => name = a.str().map(str::to_owned),
                attr::UVERBS_DRIVER_ID => {
                    dev.driver_id = a.uint().and_then(|v| u32::try_from(v).ok())
                }
                attr::NODE_GUID => dev.node_guid = a.u64(),
                attr::FW_VERSION => dev.fw_version = a.str().map(str::to_owned),
                attr::DEV_NODE_TYPE => dev.node_type = a.u8(),
                attr::DEV_PROTOCOL => dev.protocol = a.str().map(str::to_owned),
                attr::PORT_INDEX => dev.port_count = a.u32(),
                _ => {}
            }
        }
        dev.index = index.ok_or(Errno::EPROTO)?;
        dev.name = name.ok_or(Errno::EPROTO)?;
        Ok(dev)
    }
}

/// A device's char device as `RDMA_NLDEV_CMD_GET_CHARDEV` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chardev {
    /// The `/dev/infiniband/` file name, such as `uverbs0`
    /// ([`attr::CHARDEV_NAME`]).
    pub name: String,
    /// The ABI version ([`attr::CHARDEV_ABI`]; upper 32 bits reserved). For
    /// "uverbs" it is the driver's ABI (`uverbs_abi_ver`, 2 for rxe), not
    /// the uverbs ABI version (`IB_USER_VERBS_ABI_VERSION`, 6).
    pub abi: u64,
    /// The device number in the kernel's `huge_encode_dev` format
    /// ([`attr::CHARDEV`]); see [`Chardev::major`] and [`Chardev::minor`].
    pub dev: u64,
    /// The driver ([`driver_id`]; [`attr::UVERBS_DRIVER_ID`]), uverbs only.
    pub driver_id: Option<u32>,
}

impl Chardev {
    /// The major number of [`Chardev::dev`].
    pub fn major(&self) -> u32 {
        ((self.dev & 0xfff00) >> 8) as u32
    }

    /// The minor number of [`Chardev::dev`].
    pub fn minor(&self) -> u32 {
        ((self.dev & 0xff) | ((self.dev >> 12) & 0xfff00)) as u32
    }

    fn parse(attrs: &[u8]) -> Result<Self, Errno> {
        let (mut name, mut abi, mut dev, mut driver_id) = (None, None, None, None);
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind {
                attr::CHARDEV_NAME => name = a.str().map(str::to_owned),
                attr::CHARDEV_ABI => abi = a.u64(),
                attr::CHARDEV => dev = a.u64(),
                attr::UVERBS_DRIVER_ID => driver_id = a.uint().and_then(|v| u32::try_from(v).ok()),
                _ => {}
            }
        }
        Ok(Chardev {
            name: name.ok_or(Errno::EPROTO)?,
            abi: abi.ok_or(Errno::EPROTO)?,
            dev: dev.ok_or(Errno::EPROTO)?,
            driver_id,
        })
    }
}

/// Ask the kernel for the char device of type `kind` ("uverbs", "umad",
/// ...) of device `dev_index` (`RDMA_NLDEV_CMD_GET_CHARDEV`). Kernel errors
/// come back as their errno: `ENOENT`/`EOPNOTSUPP` when there is no such
/// char device, `EINVAL` for an unknown index or a kernel before 5.3.
pub fn chardev(sock: &mut NlSocket, dev_index: u32, kind: &str) -> Result<Chardev, Errno> {
    let mut kind_z = Vec::with_capacity(kind.len() + 1);
    kind_z.extend_from_slice(kind.as_bytes());
    kind_z.push(0);
    let index = dev_index.to_ne_bytes();
    let mut out = None;
    sock.request(
        nldev_type(cmd::GET_CHARDEV),
        &[(attr::DEV_INDEX, &index), (attr::CHARDEV_TYPE, &kind_z)],
        |attrs| {
            out = Some(Chardev::parse(attrs)?);
            Ok(())
        },
    )?;
    out.ok_or(Errno::EPROTO)
}

/// List the RDMA devices of this network namespace, in the kernel's order,
/// as `rdma dev show` does (a dump of `RDMA_NLDEV_CMD_GET`), each with its
/// driver id from its "uverbs" char device ([`chardev`]).
///
/// Errors: [`Errno::EPROTONOSUPPORT`] if the kernel has no RDMA netlink
/// (no RDMA core, hence no devices), a kernel errno, or [`Errno::EPROTO`]
/// for a malformed reply. A device whose char device query fails with
/// `ENOENT`, `EOPNOTSUPP`, `EINVAL`, `ENODEV` or `EPERM` (no uverbs, or a
/// device removed meanwhile) is listed with `driver_id: None`.
pub fn devices() -> Result<Vec<RdmaDev>, Errno> {
    let mut sock = NlSocket::open()?;
    let mut devs = Vec::new();
    sock.dump(nldev_type(cmd::GET), &[], |attrs| {
        devs.push(RdmaDev::parse(attrs)?);
        Ok(())
    })?;
    for dev in &mut devs {
        if dev.driver_id.is_some() {
            continue;
        }
        match chardev(&mut sock, dev.index, "uverbs") {
            Ok(c) => dev.driver_id = c.driver_id,
            Err(
                Errno::ENOENT | Errno::EOPNOTSUPP | Errno::EINVAL | Errno::ENODEV | Errno::EPERM,
            ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(devs)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// One padded `struct nlattr` with raw type `ty`.
    fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
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
    fn msg(ty: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
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

    fn collect(buf: &[u8]) -> Vec<Result<Attr<'_>, Errno>> {
        Attrs::new(buf).collect()
    }

    /// An `RDMA_NLDEV_CMD_GET` reply for rxe0 as the kernel lays it out,
    /// including the zero-length PAD attributes before the u64s.
    fn rxe0_reply() -> Vec<u8> {
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

    #[test]
    fn header_constants() {
        assert_eq!(nldev_type(cmd::GET), (5 << 10) + 1);
        assert_eq!(nldev_type(cmd::GET_CHARDEV), 0x140f);
        assert_eq!(nldev_type(cmd::RES_QP_GET), 0x140a);
        assert_eq!(attr::UVERBS_DRIVER_ID, 73);
        assert_eq!(driver_id::RXE, 14);
        assert_eq!(driver_id::SIW, 18);
        assert_eq!(driver_id::MLX5, 1);
        assert_eq!(driver_id::IRDMA, driver_id::I40IW);
    }

    #[test]
    fn attrs_valid() {
        let buf = [
            nla(attr::DEV_INDEX, &7u32.to_ne_bytes()),
            nla(attr::DEV_NAME, b"mlx5_0\0"),
            nla(attr::DEV_NODE_TYPE, &[1]),
            nla(attr::NODE_GUID, &0x1122_3344_5566_7788u64.to_ne_bytes()),
        ]
        .concat();
        let a: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(a.len(), 4);
        assert_eq!((a[0].kind, a[0].u32()), (attr::DEV_INDEX, Some(7)));
        assert_eq!((a[1].kind, a[1].str()), (attr::DEV_NAME, Some("mlx5_0")));
        assert_eq!(a[1].payload, b"mlx5_0\0");
        assert_eq!((a[2].kind, a[2].u8()), (attr::DEV_NODE_TYPE, Some(1)));
        assert_eq!(a[2].payload.len(), 1);
        assert_eq!(a[3].u64(), Some(0x1122_3344_5566_7788));
        assert!(a.iter().all(|a| !a.nested_flag));
        assert_eq!(
            Attrs::new(&buf).get(attr::DEV_NAME).unwrap().unwrap().str(),
            Some("mlx5_0")
        );
        assert_eq!(Attrs::new(&buf).get(attr::FW_VERSION), Ok(None));
    }

    #[test]
    fn attrs_empty_buffer() {
        assert!(collect(&[]).is_empty());
    }

    #[test]
    fn attrs_truncated_header() {
        for cut in 1..NLA_HDRLEN {
            let buf = nla(attr::DEV_INDEX, &1u32.to_ne_bytes());
            assert_eq!(collect(&buf[..cut]), vec![Err(Errno::EPROTO)], "cut {cut}");
        }
    }

    #[test]
    fn attrs_truncated_payload() {
        let mut buf = nla(attr::DEV_INDEX, &1u32.to_ne_bytes());
        buf.extend(nla(attr::DEV_NAME, b"rxe0\0"));
        // The second attribute claims 9 bytes but only 7 are there.
        let r = collect(&buf[..8 + 7]);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].unwrap().u32(), Some(1));
        assert_eq!(r[1], Err(Errno::EPROTO));
        // `get` reports the malformation instead of "absent".
        assert_eq!(
            Attrs::new(&buf[..15]).get(attr::DEV_NAME),
            Err(Errno::EPROTO)
        );
    }

    #[test]
    fn attrs_len_below_header() {
        for bad in 0..NLA_HDRLEN as u16 {
            let mut buf = Vec::new();
            buf.extend_from_slice(&bad.to_ne_bytes());
            buf.extend_from_slice(&attr::DEV_INDEX.to_ne_bytes());
            buf.extend_from_slice(&[0; 8]);
            // Must neither loop forever nor panic: one error, then the end.
            assert_eq!(collect(&buf), vec![Err(Errno::EPROTO)], "nla_len {bad}");
        }
    }

    #[test]
    fn attrs_nested() {
        let entry = [
            nla(attr::RES_SUMMARY_ENTRY_NAME, b"qp\0"),
            nla(attr::RES_SUMMARY_ENTRY_CURR, &5u64.to_ne_bytes()),
        ]
        .concat();
        let table = nla(attr::RES_SUMMARY_ENTRY | NLA_F_NESTED, &entry);
        let buf = [
            nla(attr::DEV_INDEX, &0u32.to_ne_bytes()),
            nla(attr::RES_SUMMARY | NLA_F_NESTED, &table),
        ]
        .concat();
        let outer: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(outer.len(), 2);
        assert_eq!(outer[1].kind, attr::RES_SUMMARY);
        assert!(outer[1].nested_flag);
        assert_eq!(outer[1].payload, &table[..]);
        let entries: Vec<Attr<'_>> = outer[1].nested().map(Result::unwrap).collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].kind, attr::RES_SUMMARY_ENTRY);
        let fields: Vec<Attr<'_>> = entries[0].nested().map(Result::unwrap).collect();
        assert_eq!(fields[0].str(), Some("qp"));
        assert_eq!(fields[1].u64(), Some(5));
        // A nested table without NLA_F_NESTED (nla_nest_start_noflag) parses
        // the same way.
        let plain = nla(attr::RES_SUMMARY, &table);
        let a = collect(&plain)[0].unwrap();
        assert!(!a.nested_flag);
        assert_eq!(a.nested().count(), 1);
        // A malformed nested payload errors inside, not outside.
        let bad = nla(attr::RES_SUMMARY, &[9, 0, 1, 0]);
        let a = collect(&bad)[0].unwrap();
        assert_eq!(a.nested().collect::<Vec<_>>(), vec![Err(Errno::EPROTO)]);
    }

    #[test]
    fn attrs_type_mask() {
        // NLA_F_NET_BYTEORDER (1 << 14) and NLA_F_NESTED are masked off.
        let buf = nla(
            attr::DEV_INDEX | (1 << 14) | NLA_F_NESTED,
            &1u32.to_ne_bytes(),
        );
        let a = collect(&buf)[0].unwrap();
        assert_eq!(a.kind, attr::DEV_INDEX);
        assert!(a.nested_flag);
    }

    #[test]
    fn attrs_zero_length() {
        let buf = [nla(attr::PAD, &[]), nla(attr::FW_VERSION, &[])].concat();
        assert_eq!(buf.len(), 8);
        let a: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(a.len(), 2);
        for a in &a {
            assert!(a.payload.is_empty());
            assert_eq!(
                (a.u8(), a.u16(), a.u32(), a.u64(), a.uint()),
                (None, None, None, None, None)
            );
            assert_eq!(a.str(), Some(""));
            assert_eq!(a.nested().count(), 0);
        }
    }

    #[test]
    fn attrs_unaligned_padding() {
        // A 1-byte u8 and a 5-byte string are each padded to 8; the next
        // attribute starts after the padding.
        let buf = [
            nla(attr::DEV_NODE_TYPE, &[4]),
            nla(attr::DEV_NAME, b"siw0\0"),
            nla(attr::DEV_INDEX, &9u32.to_ne_bytes()),
        ]
        .concat();
        assert_eq!(buf.len(), 8 + 12 + 8);
        let a: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(a[0].u8(), Some(4));
        assert_eq!(a[1].str(), Some("siw0"));
        assert_eq!(a[2].u32(), Some(9));
        // The padding of the last attribute may be missing.
        let short = &buf[..8 + 9];
        let a: Vec<Attr<'_>> = collect(short).into_iter().map(Result::unwrap).collect();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].str(), Some("siw0"));
        // Stray bytes after the last attribute (fewer than a header) are an
        // error.
        let mut stray = nla(attr::DEV_INDEX, &9u32.to_ne_bytes());
        stray.extend_from_slice(&[0, 0]);
        let r = collect(&stray);
        assert_eq!(r.len(), 2);
        assert_eq!(r[1], Err(Errno::EPROTO));
    }

    #[test]
    fn attr_helpers_short_payloads() {
        let one = nla(1, &[0xab]);
        let a = collect(&one)[0].unwrap();
        assert_eq!(
            (a.u8(), a.u16(), a.u32(), a.u64()),
            (Some(0xab), None, None, None)
        );
        let three = nla(1, &[1, 2, 3]);
        let a = collect(&three)[0].unwrap();
        assert_eq!(
            (a.u16(), a.u32(), a.uint()),
            (Some(u16::from_ne_bytes([1, 2])), None, None)
        );
        let seven = nla(1, &[0; 7]);
        let a = collect(&seven)[0].unwrap();
        assert_eq!((a.u32(), a.u64(), a.uint()), (Some(0), None, None));
        // uint accepts the widths the kernel may use for one value.
        let w4 = nla(1, &14u32.to_ne_bytes());
        let w8 = nla(1, &14u64.to_ne_bytes());
        assert_eq!(collect(&w4)[0].unwrap().uint(), Some(14));
        assert_eq!(collect(&w8)[0].unwrap().uint(), Some(14));
        // Strings: no NUL is fine, bytes after the NUL are ignored, and
        // invalid UTF-8 is None.
        let s = nla(1, b"abc");
        assert_eq!(collect(&s)[0].unwrap().str(), Some("abc"));
        let s = nla(1, b"ab\0cd");
        assert_eq!(collect(&s)[0].unwrap().str(), Some("ab"));
        let s = nla(1, &[0xff, 0xfe, 0]);
        assert_eq!(collect(&s)[0].unwrap().str(), None);
    }

    #[test]
    fn messages_split_and_truncation() {
        let a = msg(nldev_type(cmd::GET), 2, 5, &nla(1, &1u32.to_ne_bytes()));
        let b = msg(NLMSG_DONE, 2, 5, &0i32.to_ne_bytes());
        let buf = [a.clone(), b].concat();
        let m: Vec<NlMsg<'_>> = Messages { rest: &buf }.map(Result::unwrap).collect();
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[0].ty, m[0].flags, m[0].seq),
            (nldev_type(cmd::GET), 2, 5)
        );
        assert_eq!(m[0].payload, &nla(1, &1u32.to_ne_bytes())[..]);
        assert_eq!(m[1].ty, NLMSG_DONE);

        // A header cut short, a length past the datagram, a length below
        // the header: EPROTO, once.
        for cut in [1, 15, 16, 23] {
            let r: Vec<_> = Messages { rest: &a[..cut] }.collect();
            assert_eq!(r, vec![Err(Errno::EPROTO)], "cut {cut}");
        }
        for bad_len in [0u32, 15, 1000] {
            let mut m = a.clone();
            m[..4].copy_from_slice(&bad_len.to_ne_bytes());
            let r: Vec<_> = Messages { rest: &m }.collect();
            assert_eq!(r, vec![Err(Errno::EPROTO)], "nlmsg_len {bad_len}");
        }
        // The padding of the last message may be missing.
        let odd = msg(nldev_type(cmd::GET), 0, 1, &[7]);
        let r: Vec<_> = Messages { rest: &odd[..17] }.collect();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].unwrap().payload, &[7]);
    }

    #[test]
    fn classify_replies() {
        let t = nldev_type(cmd::GET);
        let one = |v: Vec<u8>| {
            Messages { rest: &v }
                .next()
                .unwrap()
                .map(|m| classify(&m, 9).to_owned_step())
        };
        assert_eq!(
            one(msg(t, 2, 9, &[1, 2, 3, 4])),
            Ok(OwnedStep::Data(vec![1, 2, 3, 4]))
        );
        assert_eq!(one(msg(t, 2, 8, &[1, 2, 3, 4])), Ok(OwnedStep::Skip));
        assert_eq!(one(msg(NLMSG_NOOP, 0, 9, &[])), Ok(OwnedStep::Skip));
        assert_eq!(
            one(msg(NLMSG_DONE, 2, 9, &0i32.to_ne_bytes())),
            Ok(OwnedStep::Done)
        );
        assert_eq!(one(msg(NLMSG_DONE, 2, 9, &[])), Ok(OwnedStep::Done));
        assert_eq!(
            one(msg(NLMSG_DONE, 2, 9, &(-libc::EBUSY).to_ne_bytes())),
            Ok(OwnedStep::Fail(Errno::EBUSY))
        );
        // An ack (error 0) followed by the echoed request header.
        let ack = [0i32.to_ne_bytes().to_vec(), msg(t, 5, 9, &[])].concat();
        assert_eq!(one(msg(NLMSG_ERROR, 0x100, 9, &ack)), Ok(OwnedStep::Done));
        let err = [(-libc::ENOENT).to_ne_bytes().to_vec(), msg(t, 5, 9, &[])].concat();
        assert_eq!(
            one(msg(NLMSG_ERROR, 0, 9, &err)),
            Ok(OwnedStep::Fail(Errno::ENOENT))
        );
        assert_eq!(
            one(msg(NLMSG_ERROR, 0, 9, &[0, 0])),
            Ok(OwnedStep::Fail(Errno::EPROTO))
        );
        assert_eq!(
            one(msg(NLMSG_ERROR, 0, 9, &5i32.to_ne_bytes())),
            Ok(OwnedStep::Fail(Errno::EPROTO))
        );
        assert_eq!(
            one(msg(NLMSG_ERROR, 0, 9, &i32::MIN.to_ne_bytes())),
            Ok(OwnedStep::Fail(Errno::from_raw(i32::MAX)))
        );
        assert_eq!(
            one(msg(NLMSG_OVERRUN, 0, 9, &[])),
            Ok(OwnedStep::Fail(Errno::EPROTO))
        );
    }

    /// [`Step`] without the borrow, for comparisons.
    #[derive(Debug, PartialEq, Eq)]
    enum OwnedStep {
        Data(Vec<u8>),
        Skip,
        Done,
        Fail(Errno),
    }

    impl Step<'_> {
        fn to_owned_step(&self) -> OwnedStep {
            match self {
                Step::Data(d) => OwnedStep::Data(d.to_vec()),
                Step::Skip => OwnedStep::Skip,
                Step::Done => OwnedStep::Done,
                Step::Fail(e) => OwnedStep::Fail(*e),
            }
        }
    }

    #[test]
    fn encode_chardev_request() {
        let mut out = Vec::new();
        let index = 3u32.to_ne_bytes();
        let attrs: [(u16, &[u8]); 2] =
            [(attr::DEV_INDEX, &index), (attr::CHARDEV_TYPE, b"uverbs\0")];
        encode_request(
            &mut out,
            nldev_type(cmd::GET_CHARDEV),
            NLM_F_REQUEST | NLM_F_ACK,
            77,
            &attrs,
        )
        .unwrap();
        // 16 header + 8 (u32) + 12 ("uverbs\0" padded from 11).
        assert_eq!(out.len(), 36);
        let m = Messages { rest: &out }.next().unwrap().unwrap();
        assert_eq!((m.ty, m.flags, m.seq), (0x140f, 5, 77));
        assert_eq!(&out[12..16], &[0; 4], "nlmsg_pid");
        let a: Vec<Attr<'_>> = Attrs::new(m.payload).map(Result::unwrap).collect();
        assert_eq!((a[0].kind, a[0].u32()), (attr::DEV_INDEX, Some(3)));
        assert_eq!(
            (a[1].kind, a[1].payload),
            (attr::CHARDEV_TYPE, &b"uverbs\0"[..])
        );
        assert_eq!(&out[35..], &[0], "attribute padding");

        let mut dump = Vec::new();
        encode_request(
            &mut dump,
            nldev_type(cmd::GET),
            NLM_F_REQUEST | NLM_F_DUMP,
            1,
            &[],
        )
        .unwrap();
        assert_eq!(dump.len(), 16);
        let m = Messages { rest: &dump }.next().unwrap().unwrap();
        assert_eq!(
            (m.ty, m.flags, m.seq, m.payload),
            (0x1401, 0x301, 1, &[][..])
        );

        let big = vec![0u8; 70_000];
        let mut o = Vec::new();
        assert_eq!(
            encode_request(&mut o, 1, 0, 0, &[(1, &big)]),
            Err(Errno::E2BIG)
        );
    }

    #[test]
    fn parse_get_reply() {
        let dev = RdmaDev::parse(&rxe0_reply()).unwrap();
        assert_eq!(
            dev,
            RdmaDev {
                index: 3,
                name: "rxe0".into(),
                driver_id: None,
                node_guid: Some(0x0200_00ff_fe00_0001),
                fw_version: None,
                node_type: Some(node_type::IB_CA),
                protocol: Some("roce".into()),
                port_count: Some(1),
            }
        );
        // A driver id in the reply (u32 as the kernel sends, or u64 as the
        // header says) is taken.
        for width in [4, 8] {
            let id = if width == 4 {
                nla(attr::UVERBS_DRIVER_ID, &14u32.to_ne_bytes())
            } else {
                nla(attr::UVERBS_DRIVER_ID, &14u64.to_ne_bytes())
            };
            let reply = [rxe0_reply(), id].concat();
            assert_eq!(
                RdmaDev::parse(&reply).unwrap().driver_id,
                Some(driver_id::RXE)
            );
        }
        // Short optional fields are None, not errors.
        let reply = [
            nla(attr::DEV_INDEX, &0u32.to_ne_bytes()),
            nla(attr::DEV_NAME, b"x\0"),
            nla(attr::NODE_GUID, &[1, 2, 3]),
            nla(attr::PORT_INDEX, &[1]),
        ]
        .concat();
        let dev = RdmaDev::parse(&reply).unwrap();
        assert_eq!((dev.node_guid, dev.port_count), (None, None));
        // Index and name are required.
        let no_name = nla(attr::DEV_INDEX, &0u32.to_ne_bytes());
        assert_eq!(RdmaDev::parse(&no_name), Err(Errno::EPROTO));
        let no_index = nla(attr::DEV_NAME, b"rxe0\0");
        assert_eq!(RdmaDev::parse(&no_index), Err(Errno::EPROTO));
        // Every truncation of a valid reply either parses (cut on an
        // attribute boundary after the name) or is EPROTO; never a panic.
        let full = rxe0_reply();
        for cut in 0..full.len() {
            let _ = RdmaDev::parse(&full[..cut]);
        }
        // Only the last attribute's padding may go missing.
        assert!(RdmaDev::parse(&full[..full.len() - 3]).is_ok());
        assert_eq!(RdmaDev::parse(&full[..full.len() - 4]), Err(Errno::EPROTO));
    }

    #[test]
    fn parse_chardev_reply() {
        // huge_encode_dev(MKDEV(231, 192)) = minor & 0xff | major << 8 |
        // (minor & ~0xff) << 12.
        let dev = 192u64 | (231 << 8);
        let reply = [
            nla(attr::UVERBS_DRIVER_ID, &driver_id::RXE.to_ne_bytes()),
            nla(attr::PAD, &[]),
            nla(attr::CHARDEV, &dev.to_ne_bytes()),
            nla(attr::PAD, &[]),
            nla(attr::CHARDEV_ABI, &6u64.to_ne_bytes()),
            nla(attr::CHARDEV_NAME, b"uverbs0\0"),
        ]
        .concat();
        let c = Chardev::parse(&reply).unwrap();
        assert_eq!(
            c,
            Chardev {
                name: "uverbs0".into(),
                abi: 6,
                dev,
                driver_id: Some(driver_id::RXE)
            }
        );
        assert_eq!((c.major(), c.minor()), (231, 192));
        let big = Chardev {
            dev: 0x1_2300 | (0xabc_u64 << 20) | 0x45,
            ..c.clone()
        };
        assert_eq!((big.major(), big.minor()), (0x123, 0xabc45));
        // Without a driver id (uverbs_no_driver_id_binding) it is None.
        let no_id = &reply[8..];
        assert_eq!(Chardev::parse(no_id).unwrap().driver_id, None);
        // Name, ABI and dev are required.
        assert_eq!(Chardev::parse(&reply[..8]), Err(Errno::EPROTO));
    }

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
