//! The emulated device's identity, attributes and limits: the one place
//! both the fake sysfs tree ([`crate::sysfs`]) and the command answers
//! ([`crate::dispatch`]) take them from, so the two always agree.
//!
//! The device looks like a single-port ConnectX-5 (PCI 15b3:1017). Its
//! port has one of two personalities ([`Link`]), chosen per process by
//! `MLX5_EMU_LINK` ([`LINK_ENV`]):
//!
//! - InfiniBand (the default): LID 1, a GID table of two entries (the
//!   link-local GID from the node GUID, then an empty one), 128 P_Keys.
//! - Ethernet (`MLX5_EMU_LINK=eth`): a RoCE port as mlx5 reports one
//!   (kernel `mlx5_query_port_roce`): LID 0, `IB_PORT_CM_SUP` and
//!   IP-based GIDs in the capability mask, one P_Key, `max_mtu` 4096 and
//!   `active_mtu` 1024 (what `iboe_get_mtu` makes of a netdev MTU of
//!   1500), a GID table of 256 entries ([`ROCE_GID_TBL_LEN`]) filled the
//!   way the kernel's RoCE GID management fills it for a netdev with one
//!   IPv4 and one IPv6 address (see [`roce_gid`]), and a MAC address
//!   ([`PORT_MAC`]) the HCA answers to.

use std::ffi::CStr;
use std::sync::OnceLock;

use rverbs_abi::Errno;

use rverbs_abi::device::{ExQueryDeviceResp, QueryDeviceResp, QueryPortResp};
use rverbs_abi::mlx5::{
    AllocUcontextResp, MLX5_USER_CMDS_SUPP_UHW_CREATE_AH, MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE,
};

/// The RDMA device name.
pub const IBDEV: &str = "mlx5_0";
/// The uverbs character device's name (under `/dev/infiniband` and the
/// sysfs class `infiniband_verbs`).
pub const UVERBS: &str = "uverbs0";
/// The character device path libibverbs opens.
pub const DEV_PATH: &CStr = c"/dev/infiniband/uverbs0";
/// Character device major number (the kernel's uverbs major).
pub const CDEV_MAJOR: u32 = 231;
/// Character device minor number (uverbs0).
pub const CDEV_MINOR: u32 = 192;

/// PCI vendor ID (Mellanox).
pub const PCI_VENDOR: u16 = 0x15b3;
/// PCI device ID (ConnectX-5).
pub const PCI_DEVICE: u16 = 0x1017;
/// PCI subsystem device ID.
pub const PCI_SUBDEVICE: u16 = 0x0020;
/// IEEE OUI reported as the verbs vendor ID.
pub const VENDOR_ID: u32 = 0x02c9;
/// Verbs vendor part ID (ConnectX-5).
pub const VENDOR_PART_ID: u32 = 4119;
/// Hardware revision.
pub const HW_VER: u32 = 0;
/// Firmware version (major, minor, sub-minor).
pub const FW_VER: (u16, u16, u16) = (16, 35, 2000);
/// Board ID.
pub const BOARD_ID: &str = "MT_0000000008";
/// Node GUID (host order; the uverbs ABI carries it big-endian).
pub const NODE_GUID: u64 = 0x0c42_a103_00fb_1234;
/// System image GUID.
pub const SYS_IMAGE_GUID: u64 = NODE_GUID;

/// Number of ports.
pub const NUM_PORTS: u8 = 1;
/// The port's LID.
pub const LID: u16 = 1;
/// The subnet manager's LID.
pub const SM_LID: u16 = 1;
/// Entries of the InfiniBand port's GID table (every `ports/1/gids/<i>`
/// file exists); see [`gid_tbl_len`].
pub const GID_TBL_LEN: u32 = 2;
/// Entries of the device's P_Key tables (`max_pkeys`; the InfiniBand
/// port's table); see [`pkey_tbl_len`].
pub const PKEY_TBL_LEN: u16 = 128;
/// The default P_Key (full member), at index 0.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// Largest message in bytes.
pub const MAX_MSG_SZ: u32 = 1 << 30;
/// `IB_MTU_4096`.
pub const MTU_4096: u8 = 5;
/// `IB_PORT_ACTIVE`.
pub const PORT_STATE_ACTIVE: u8 = 4;
/// Physical state `LinkUp`.
pub const PHYS_STATE_LINK_UP: u8 = 5;
/// Port capability mask (a typical ConnectX InfiniBand port).
pub const PORT_CAP_FLAGS: u32 = 0x2651_e848;
/// Active width: 4X.
pub const ACTIVE_WIDTH_4X: u8 = 2;
/// Active speed: EDR (25 Gb/s per lane).
pub const ACTIVE_SPEED_EDR: u8 = 32;
/// Link layer: InfiniBand.
pub const LINK_LAYER: u8 = rverbs_abi::device::IB_LINK_LAYER_INFINIBAND;

/// The environment variable choosing the port's [`Link`]: `eth` for a
/// RoCE port, `ib` (or unset) for InfiniBand.
pub const LINK_ENV: &str = "MLX5_EMU_LINK";

/// The port's personality.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// InfiniBand link layer (the default).
    Ib,
    /// Ethernet link layer: RoCE.
    Eth,
}

/// The port's link, read from [`LINK_ENV`] once per process. A value
/// other than `eth` or `ib` is reported on stderr and taken as `ib`.
pub fn link() -> Link {
    static LINK: OnceLock<Link> = OnceLock::new();
    *LINK.get_or_init(|| match std::env::var(LINK_ENV).as_deref() {
        Ok("eth") => Link::Eth,
        Ok("ib") | Err(_) => Link::Ib,
        Ok(other) => {
            eprintln!("mlx5-emu: {LINK_ENV}={other:?} is neither \"eth\" nor \"ib\"; using ib");
            Link::Ib
        }
    })
}

/// The RoCE port's MAC address (its netdev's). The node GUID above is
/// what mlx5 derives from a MAC like it (bytes 0..3, `03:00`, bytes 3..6).
pub const PORT_MAC: [u8; 6] = [0x0c, 0x42, 0xa1, 0xfb, 0x12, 0x34];
/// The IPv4 address of the RoCE port's netdev (RFC 5737 documentation
/// range: never a real host).
pub const PORT_IPV4: [u8; 4] = [192, 0, 2, 1];
/// The IPv6 address of the RoCE port's netdev (RFC 3849 documentation
/// prefix).
pub const PORT_IPV6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
/// The netdev the RoCE GIDs name in `gid_attrs/ndevs/<i>`. libibverbs
/// turns that name into an ifindex with `if_nametoindex` and fails the
/// query if no such interface exists, so it must be one the host has:
/// `lo` always exists, and the emulated traffic never leaves the process
/// anyway.
pub const PORT_NETDEV: &str = "lo";
/// Entries of the RoCE port's GID table (ConnectX-5's
/// `roce_address_table_size`).
pub const ROCE_GID_TBL_LEN: u32 = 256;
/// `IB_PORT_CM_SUP`.
const PORT_CM_SUP: u32 = 1 << 16;
/// `IB_UVERBS_PCF_IP_BASED_GIDS` (the kernel's `make_port_cap_flags` sets
/// it for ports with `ip_gids`).
const PORT_IP_BASED_GIDS: u32 = 1 << 26;
/// The RoCE port's capability mask: mlx5 sets only `IB_PORT_CM_SUP` and
/// `ip_gids` (kernel `mlx5_query_port_roce`).
pub const ROCE_PORT_CAP_FLAGS: u32 = PORT_CM_SUP | PORT_IP_BASED_GIDS;
/// `IB_MTU_1024`: the RoCE port's active MTU (`iboe_get_mtu(1500)`).
pub const MTU_1024: u8 = 3;

/// A GID entry's type, as `gid_attrs/types/<i>` names it and the HCA's
/// GID table records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidKind {
    /// An InfiniBand GID ("IB/RoCE v1" in sysfs, no `gid_attrs` on IB).
    Ib,
    /// RoCE v1: an IB GRH in an Ethernet frame ("IB/RoCE v1").
    RoceV1,
    /// RoCE v2: over UDP/IP ("RoCE v2"); IPv4 if the GID is IPv4-mapped.
    RoceV2,
}

/// One valid entry of the port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: [u8; 16],
    /// Its type.
    pub kind: GidKind,
}

impl GidEntry {
    /// Whether the GID is an IPv4-mapped address (`::ffff:a.b.c.d`).
    pub fn is_ipv4(&self) -> bool {
        is_ipv4_mapped(&self.gid)
    }
}

/// Whether `gid` is an IPv4-mapped IPv6 address.
pub fn is_ipv4_mapped(gid: &[u8; 16]) -> bool {
    gid[..10].iter().all(|&b| b == 0) && gid[10] == 0xff && gid[11] == 0xff
}

/// The RoCE port's default GID: link-local, the interface identifier the
/// modified EUI-64 of [`PORT_MAC`] (as the kernel's `make_default_gid`).
pub fn roce_default_gid() -> [u8; 16] {
    let m = PORT_MAC;
    [
        0xfe,
        0x80,
        0,
        0,
        0,
        0,
        0,
        0,
        m[0] ^ 0x02,
        m[1],
        m[2],
        0xff,
        0xfe,
        m[3],
        m[4],
        m[5],
    ]
}

/// Entry `index` of the RoCE port's GID table, as the kernel's RoCE GID
/// management (`roce_gid_mgmt.c`) fills it for a netdev with one IPv4
/// and one IPv6 address: the default (link-local) GID first, then each
/// address, IPv4 first as an IPv4-mapped GID; every GID twice, as a
/// RoCE v1 entry and then a RoCE v2 one (the port supports both types).
/// The rest of the table is empty (`None`).
pub fn roce_gid(index: u32) -> Option<GidEntry> {
    let mut v4 = [0u8; 16];
    v4[10] = 0xff;
    v4[11] = 0xff;
    v4[12..].copy_from_slice(&PORT_IPV4);
    let gid = match index / 2 {
        0 => roce_default_gid(),
        1 => v4,
        2 => PORT_IPV6,
        _ => return None,
    };
    let kind = if index % 2 == 0 {
        GidKind::RoceV1
    } else {
        GidKind::RoceV2
    };
    Some(GidEntry { gid, kind })
}

/// The valid GID entry at `index` of port 1 (`None`: empty or past the
/// table).
pub fn gid_entry(index: u32) -> Option<GidEntry> {
    match link() {
        Link::Ib => {
            let gid = gid(index)?;
            (gid != [0; 16]).then_some(GidEntry {
                gid,
                kind: GidKind::Ib,
            })
        }
        Link::Eth => roce_gid(index),
    }
}

/// Entries of the port's GID table.
pub fn gid_tbl_len() -> u32 {
    match link() {
        Link::Ib => GID_TBL_LEN,
        Link::Eth => ROCE_GID_TBL_LEN,
    }
}

/// Entries of the port's P_Key table (mlx5 reports one on a RoCE port).
pub fn pkey_tbl_len() -> u16 {
    match link() {
        Link::Ib => PKEY_TBL_LEN,
        Link::Eth => 1,
    }
}

/// The port's LID (0 on Ethernet).
pub fn lid() -> u16 {
    match link() {
        Link::Ib => LID,
        Link::Eth => 0,
    }
}

/// `rdma_link_local_addr`: `fe80::/64`.
fn is_link_local(gid: &[u8; 16]) -> bool {
    gid[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0]
}

/// The destination MAC the kernel resolves for a RoCE address vector
/// from source GID entry `sgid` to `dgid` (CREATE_AH answers it; a
/// connected QP's MODIFY_QP with an address vector resolves it too), as
/// `ib_resolve_eth_dmac` does:
///
/// - a multicast GID (IPv6 `ff00::/8`, or an IPv4-mapped `224.0.0.0/4`)
///   maps to its multicast MAC (`ipv6_eth_mc_map`, `ip_eth_mc_map`);
/// - a link-local GID sent to from a RoCE v1 GID carries the MAC in its
///   interface identifier (`rdma_get_ll_mac`);
/// - anything else goes through IP neighbour resolution
///   (`rdma_addr_find_l2_eth_by_grh`), which refuses source and
///   destination of different address families (`EINVAL`). On the
///   emulated link the only host is the port itself: an address of its
///   own netdev resolves to its own MAC (the kernel's loopback route);
///   any other finds no neighbour, and the kernel gives up after its
///   resolution timeout (`ETIMEDOUT`; here at once).
pub fn resolve_dmac(sgid: &GidEntry, dgid: &[u8; 16]) -> Result<[u8; 6], Errno> {
    if dgid[0] == 0xff {
        return Ok([0x33, 0x33, dgid[12], dgid[13], dgid[14], dgid[15]]);
    }
    if is_ipv4_mapped(dgid) && dgid[12] & 0xf0 == 0xe0 {
        return Ok([0x01, 0x00, 0x5e, dgid[13] & 0x7f, dgid[14], dgid[15]]);
    }
    if is_link_local(dgid) && sgid.kind == GidKind::RoceV1 {
        return Ok([
            dgid[8] ^ 0x02,
            dgid[9],
            dgid[10],
            dgid[13],
            dgid[14],
            dgid[15],
        ]);
    }
    if sgid.is_ipv4() != is_ipv4_mapped(dgid) {
        return Err(Errno::EINVAL);
    }
    let own = (0..ROCE_GID_TBL_LEN).any(|i| roce_gid(i).is_some_and(|e| e.gid == *dgid));
    if own {
        Ok(PORT_MAC)
    } else {
        Err(Errno::ETIMEDOUT)
    }
}

/// Completion vectors.
pub const NUM_COMP_VECTORS: u32 = 1;
/// QP number space (`1 << log_max_qp`).
pub const MAX_QP: u32 = 1 << 18;
/// Largest QP (send or receive) in WRs / basic blocks.
pub const MAX_QP_WR: u32 = 1 << 15;
/// Scatter/gather entries per WR.
pub const MAX_SGE: u32 = 30;
/// Number of CQs.
pub const MAX_CQ: u32 = 1 << 24;
/// log2 of the largest CQ.
pub const LOG_MAX_CQ_SZ: u32 = 22;
/// Largest CQ in entries, as reported (`(1 << log_max_cq_sz) - 1`).
pub const MAX_CQE: u32 = (1 << LOG_MAX_CQ_SZ) - 1;
/// Number of MRs.
pub const MAX_MR: u32 = 1 << 24;
/// Number of PDs.
pub const MAX_PD: u32 = 1 << 24;
/// Outstanding RDMA READ / atomic operations per QP, either direction.
pub const MAX_RD_ATOMIC: u32 = 16;
/// Number of SRQs.
pub const MAX_SRQ: u32 = 1 << 23;
/// Largest SRQ WQE count (`1 << log_max_srq_sz`); `max_srq_wr` is one less.
pub const MAX_SRQ_WQES: u32 = 1 << 15;
/// Scatter entries per SRQ WQE.
pub const MAX_SRQ_SGE: u32 = 31;
/// Number of AHs.
pub const MAX_AH: u32 = i32::MAX as u32;
/// `IBV_ATOMIC_HCA`.
pub const ATOMIC_CAP_HCA: u32 = 1;
/// HCA core clock in kHz (156.25 MHz).
pub const HCA_CORE_CLOCK_KHZ: u64 = 156_250;

/// Device capability flags (`IB_DEVICE_*`): only what the emulator
/// honours: bad P_Key / Q_Key counters, port-active events, a system image
/// GUID, RNR NAK generation, and `N_NOTIFY_CQ`. (Memory windows, XRC,
/// checksum offloads and the like are not advertised.)
pub const DEVICE_CAP_FLAGS: u64 =
    (1 << 1) | (1 << 2) | (1 << 10) | (1 << 11) | (1 << 12) | (1 << 14);

/// mlx5 ucontext: blue-flame register stride in a UAR page.
pub const BF_REG_SIZE: u32 = 512;
/// mlx5 ucontext: cache line size (doorbell-record stride).
pub const CACHE_LINE_SIZE: u32 = 64;
/// mlx5 ucontext: largest send WQE (ConnectX-5 `max_wqe_sz_sq`).
pub const MAX_SQ_DESC_SZ: u16 = 1024;
/// mlx5 ucontext: largest receive WQE (ConnectX-5 `max_wqe_sz_rq`).
pub const MAX_RQ_DESC_SZ: u16 = 512;
/// mlx5: non-fast-path bfregs per UAR page (two of the four registers).
pub const BFREGS_PER_UAR: u32 = 2;
/// mlx5: most static bfregs a ucontext may ask for.
pub const MAX_TOTAL_BFREGS: u32 = 512;
/// mlx5: highest CQE version the emulated firmware supports.
pub const MAX_CQE_VERSION: u8 = 1;
/// mlx5: UAR page size (4 KiB UARs, one per system page).
pub const UAR_SIZE: usize = 4096;

/// The firmware version as the 64-bit value QUERY_DEVICE reports.
pub const fn fw_ver_u64() -> u64 {
    ((FW_VER.0 as u64) << 32) | ((FW_VER.1 as u64) << 16) | FW_VER.2 as u64
}

/// The GID at `index` of port 1 as sysfs shows it (all zero for an
/// empty entry; `None` past the table). InfiniBand: index 0 is the
/// link-local GID built from the node GUID, the other is empty.
/// Ethernet: see [`roce_gid`].
pub fn gid(index: u32) -> Option<[u8; 16]> {
    if link() == Link::Eth {
        return (index < ROCE_GID_TBL_LEN).then(|| roce_gid(index).map_or([0; 16], |e| e.gid));
    }
    if index >= GID_TBL_LEN {
        return None;
    }
    let mut g = [0u8; 16];
    if index == 0 {
        g[..8].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
        g[8..].copy_from_slice(&NODE_GUID.to_be_bytes());
    }
    Some(g)
}

/// The P_Key at `index` of port 1 (the default P_Key at 0, zero elsewhere).
pub fn pkey(index: u16) -> Option<u16> {
    match index {
        0 => Some(DEFAULT_PKEY),
        i if i < pkey_tbl_len() => Some(0),
        _ => None,
    }
}

/// Whether `port` is a valid port number.
pub fn port_valid(port: u8) -> bool {
    (1..=NUM_PORTS).contains(&port)
}

/// The QUERY_DEVICE answer.
pub fn query_device() -> QueryDeviceResp {
    QueryDeviceResp {
        fw_ver: fw_ver_u64(),
        node_guid: NODE_GUID.to_be(),
        sys_image_guid: SYS_IMAGE_GUID.to_be(),
        max_mr_size: u64::MAX,
        page_size_cap: 0xffff_ffff_ffff_f000,
        vendor_id: VENDOR_ID,
        vendor_part_id: VENDOR_PART_ID,
        hw_ver: HW_VER,
        max_qp: MAX_QP,
        max_qp_wr: MAX_QP_WR,
        device_cap_flags: DEVICE_CAP_FLAGS as u32,
        max_sge: MAX_SGE,
        max_sge_rd: MAX_SGE,
        max_cq: MAX_CQ,
        max_cqe: MAX_CQE,
        max_mr: MAX_MR,
        max_pd: MAX_PD,
        max_qp_rd_atom: MAX_RD_ATOMIC,
        max_ee_rd_atom: 0,
        max_res_rd_atom: MAX_RD_ATOMIC * MAX_QP,
        max_qp_init_rd_atom: MAX_RD_ATOMIC,
        max_ee_init_rd_atom: 0,
        atomic_cap: ATOMIC_CAP_HCA,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 0,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 1 << 21,
        max_mcast_qp_attach: 240,
        max_total_mcast_qp_attach: 240 << 21,
        max_ah: MAX_AH,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: MAX_SRQ,
        max_srq_wr: MAX_SRQ_WQES - 1,
        max_srq_sge: MAX_SRQ_SGE,
        max_pkeys: PKEY_TBL_LEN,
        local_ca_ack_delay: 16,
        phys_port_cnt: NUM_PORTS,
        reserved: [0; 4],
    }
}

/// The EX QUERY_DEVICE answer (`response_length` is set by the caller).
pub fn ex_query_device() -> ExQueryDeviceResp {
    ExQueryDeviceResp {
        base: query_device(),
        timestamp_mask: (1 << 63) - 1,
        hca_core_clock: HCA_CORE_CLOCK_KHZ,
        device_cap_flags_ex: DEVICE_CAP_FLAGS,
        ..Default::default()
    }
}

/// The QUERY_PORT answer for port 1.
pub fn query_port() -> QueryPortResp {
    if link() == Link::Eth {
        return roce_query_port();
    }
    QueryPortResp {
        port_cap_flags: PORT_CAP_FLAGS,
        max_msg_sz: MAX_MSG_SZ,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        gid_tbl_len: GID_TBL_LEN,
        pkey_tbl_len: PKEY_TBL_LEN,
        lid: LID,
        sm_lid: SM_LID,
        state: PORT_STATE_ACTIVE,
        max_mtu: MTU_4096,
        active_mtu: MTU_4096,
        lmc: 0,
        max_vl_num: 4,
        sm_sl: 0,
        subnet_timeout: 18,
        init_type_reply: 0,
        active_width: ACTIVE_WIDTH_4X,
        active_speed: ACTIVE_SPEED_EDR,
        phys_state: PHYS_STATE_LINK_UP,
        link_layer: LINK_LAYER,
        flags: 0,
        reserved: 0,
    }
}

/// The QUERY_PORT answer for the RoCE port (kernel
/// `mlx5_query_port_roce`; what it leaves unset is zero): 100 Gb/s
/// Ethernet (4X EDR), active.
fn roce_query_port() -> QueryPortResp {
    QueryPortResp {
        port_cap_flags: ROCE_PORT_CAP_FLAGS,
        max_msg_sz: MAX_MSG_SZ,
        gid_tbl_len: ROCE_GID_TBL_LEN,
        pkey_tbl_len: 1,
        state: PORT_STATE_ACTIVE,
        max_mtu: MTU_4096,
        active_mtu: MTU_1024,
        active_width: ACTIVE_WIDTH_4X,
        active_speed: ACTIVE_SPEED_EDR,
        phys_state: PHYS_STATE_LINK_UP,
        link_layer: rverbs_abi::device::IB_LINK_LAYER_ETHERNET,
        ..Default::default()
    }
}

/// The mlx5 GET_CONTEXT driver answer for a context with `tot_bfregs`
/// static bfregs and CQE format `cqe_version` (`response_length` is set by
/// the caller). Legacy (static) UARs only: no dynamic bfregs, no clock
/// pages, no DEVX-only features.
pub fn ucontext_resp(tot_bfregs: u32, cqe_version: u8) -> AllocUcontextResp {
    AllocUcontextResp {
        qp_tab_size: MAX_QP,
        bf_reg_size: BF_REG_SIZE,
        tot_bfregs,
        cache_line_size: CACHE_LINE_SIZE,
        max_sq_desc_sz: MAX_SQ_DESC_SZ,
        max_rq_desc_sz: MAX_RQ_DESC_SZ,
        max_send_wqebb: MAX_QP_WR,
        max_recv_wr: MAX_QP_WR,
        max_srq_recv_wr: MAX_SRQ_WQES,
        num_ports: NUM_PORTS as u16,
        flow_action_flags: 0,
        comp_mask: 0,
        response_length: 0,
        cqe_version,
        cmds_supp_uhw: MLX5_USER_CMDS_SUPP_UHW_QUERY_DEVICE | MLX5_USER_CMDS_SUPP_UHW_CREATE_AH,
        // InfiniBand: no L2 header to inline. Ethernet: the kernel answers
        // the device's minimal inline mode plus one; ConnectX-5 needs none
        // (MLX5_INLINE_MODE_NONE, 0).
        eth_min_inline: u8::from(link() == Link::Eth),
        clock_info_versions: 0,
        hca_core_clock_offset: 0,
        log_uar_size: UAR_SIZE.trailing_zeros(),
        num_uars_per_page: 1,
        // No dynamic bfregs: the legacy dynamic-UAR mmap (command 6) is not
        // emulated.
        num_dyn_bfregs: 0,
        dump_fill_mkey: 0,
    }
}

/// The sysfs `modalias` of the PCI function (what libmlx5 matches).
pub fn modalias() -> String {
    format!(
        "pci:v{:08X}d{:08X}sv{:08X}sd{:08X}bc02sc07i00",
        PCI_VENDOR, PCI_DEVICE, PCI_VENDOR, PCI_SUBDEVICE
    )
}

/// A GUID in sysfs notation (`xxxx:xxxx:xxxx:xxxx`).
pub fn guid_sysfs(guid: u64) -> String {
    let b = guid.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

/// A GID in sysfs notation (eight groups of four hex digits).
pub fn gid_sysfs(gid: &[u8; 16]) -> String {
    gid.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid0_is_link_local_from_node_guid() {
        let g = gid(0).expect("index 0 exists");
        assert_eq!(gid_sysfs(&g), "fe80:0000:0000:0000:0c42:a103:00fb:1234");
        assert_eq!(gid(1), Some([0; 16]));
        assert_eq!(gid(GID_TBL_LEN), None);
    }

    #[test]
    fn roce_gid_table() {
        let e = |i| roce_gid(i).map(|e| (gid_sysfs(&e.gid), e.kind));
        let ll = "fe80:0000:0000:0000:0e42:a1ff:fefb:1234".to_string();
        let v4 = "0000:0000:0000:0000:0000:ffff:c000:0201".to_string();
        let v6 = "2001:0db8:0000:0000:0000:0000:0000:0001".to_string();
        assert_eq!(e(0), Some((ll.clone(), GidKind::RoceV1)));
        assert_eq!(e(1), Some((ll, GidKind::RoceV2)));
        assert_eq!(e(2), Some((v4.clone(), GidKind::RoceV1)));
        assert_eq!(e(3), Some((v4, GidKind::RoceV2)));
        assert_eq!(e(4), Some((v6.clone(), GidKind::RoceV1)));
        assert_eq!(e(5), Some((v6, GidKind::RoceV2)));
        assert_eq!(e(6), None);
        assert_eq!(e(ROCE_GID_TBL_LEN), None);
        assert!(roce_gid(3).unwrap().is_ipv4() && !roce_gid(5).unwrap().is_ipv4());
    }

    #[test]
    fn roce_dmac_resolution() {
        let v1_ll = roce_gid(0).unwrap();
        let v2_v4 = roce_gid(3).unwrap();
        let v2_v6 = roce_gid(5).unwrap();
        // Own addresses: the port's MAC (loopback route).
        assert_eq!(resolve_dmac(&v2_v4, &v2_v4.gid), Ok(PORT_MAC));
        assert_eq!(resolve_dmac(&v2_v6, &v2_v6.gid), Ok(PORT_MAC));
        assert_eq!(resolve_dmac(&v2_v6, &v1_ll.gid), Ok(PORT_MAC));
        // Link-local from RoCE v1: the MAC in the interface identifier.
        let mut other_ll = v1_ll.gid;
        other_ll[15] = 0x99;
        let mut mac = PORT_MAC;
        mac[5] = 0x99;
        assert_eq!(resolve_dmac(&v1_ll, &other_ll), Ok(mac));
        // No neighbour: nobody else is on the link.
        assert_eq!(resolve_dmac(&v2_v6, &other_ll), Err(Errno::ETIMEDOUT));
        let mut stranger = v2_v4.gid;
        stranger[15] = 9;
        assert_eq!(resolve_dmac(&v2_v4, &stranger), Err(Errno::ETIMEDOUT));
        // Address families differ.
        assert_eq!(resolve_dmac(&v2_v4, &v2_v6.gid), Err(Errno::EINVAL));
        assert_eq!(resolve_dmac(&v2_v6, &v2_v4.gid), Err(Errno::EINVAL));
        // Multicast.
        let mut mc6 = [0u8; 16];
        mc6[0] = 0xff;
        mc6[12..].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(resolve_dmac(&v2_v6, &mc6), Ok([0x33, 0x33, 1, 2, 3, 4]));
        let mut mc4 = v2_v4.gid;
        mc4[12..].copy_from_slice(&[239, 0x81, 2, 3]);
        assert_eq!(resolve_dmac(&v2_v4, &mc4), Ok([1, 0, 0x5e, 1, 2, 3]));
    }

    #[test]
    fn sysfs_notations() {
        assert_eq!(guid_sysfs(NODE_GUID), "0c42:a103:00fb:1234");
        assert!(modalias().starts_with("pci:v000015B3d00001017sv"));
        assert_eq!(fw_ver_u64(), (16 << 32) | (35 << 16) | 2000);
    }
}
