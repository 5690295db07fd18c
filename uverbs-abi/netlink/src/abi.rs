//! The ABI tables of `<rdma/rdma_netlink.h>` and `<linux/netlink.h>`: the
//! nldev client and message types, the [`cmd`] and [`attr`] numbers, the
//! [`driver_id`] and [`node_type`] values, and the socket's limits.

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
pub(super) const NLMSG_HDRLEN: usize = 16;
pub(super) const NLA_HDRLEN: usize = 4;
pub(super) const NLMSG_NOOP: u16 = 1;
pub(super) const NLMSG_ERROR: u16 = 2;
pub(super) const NLMSG_DONE: u16 = 3;
pub(super) const NLMSG_OVERRUN: u16 = 4;
pub(super) const NLMSG_MIN_TYPE: u16 = 0x10;
pub(super) const NLM_F_REQUEST: u16 = 1;
pub(super) const NLM_F_ACK: u16 = 4;
pub(super) const NLM_F_DUMP: u16 = 0x300;

/// The receive timeout of an [`NlSocket`](crate::NlSocket): a kernel that does not answer
/// within it makes the call fail with [`Errno::ETIMEDOUT`](rverbs_abi::Errno::ETIMEDOUT).
pub const RECV_TIMEOUT_SECS: i64 = 10;

/// The initial receive buffer size; a larger datagram grows it.
pub(super) const RECV_BUF: usize = 64 * 1024;

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

/// The `RDMA_NODE_*` values of [`attr::DEV_NODE_TYPE`] ([`RdmaDev::node_type`](crate::RdmaDev::node_type)).
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

#[cfg(test)]
mod tests {

    use super::*;

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
}
