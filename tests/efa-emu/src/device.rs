//! What the emulated EFA device is: its identity (PCI ids, GUIDs, the
//! device node), its limits and capabilities as the EFA driver reports
//! them (GET_CONTEXT, QUERY_DEVICE, the EFA part of EX_QUERY_DEVICE,
//! QUERY_PORT), and the sysfs files libibverbs discovers it through.
//!
//! The numbers are those of a current EFA device (the values the driver
//! reports on a recent instance type), rounded where the exact value
//! does not matter: SRD and UD queue pairs, 2 send SGEs, 1 receive SGE,
//! 32 bytes of inline data, RDMA read and write up to 1 GiB, one sub-CQ
//! per CQ, a maximum message (MTU) of 8928 bytes.

use std::ffi::CStr;

use rverbs_abi::device::{ExQueryDeviceResp, QueryDeviceResp, QueryPortResp};
use rverbs_abi::efa;

/// The RDMA device name.
pub const IBDEV: &str = "efa_0";
/// The uverbs device name.
pub const UVERBS: &str = "uverbs0";
/// The emulated device node.
pub const DEV_PATH: &CStr = c"/dev/infiniband/uverbs0";
/// Its character device numbers (uverbs major, first minor).
pub const CDEV_MAJOR: u32 = 231;
/// See [`CDEV_MAJOR`].
pub const CDEV_MINOR: u32 = 192;
/// Amazon's PCI vendor id.
pub const PCI_VENDOR: u16 = 0x1d0f;
/// EFA's second-generation PCI device id (libefa matches 0xefa0..0xefa2).
pub const PCI_DEVICE: u16 = 0xefa1;
/// The vendor id QUERY_DEVICE reports.
pub const VENDOR_ID: u32 = PCI_VENDOR as u32;
/// The vendor part id QUERY_DEVICE reports.
pub const VENDOR_PART_ID: u32 = PCI_DEVICE as u32;
/// Firmware version bytes (libefa prints them as `a.b.c.d`).
pub const FW_VER: [u8; 4] = [0, 0, 1, 2];
/// The node GUID (host order).
pub const NODE_GUID: u64 = 0x0a5e_fa00_0000_0001;
/// The port GID: an IPv6 link-local style address built from the GUID.
pub fn gid() -> [u8; 16] {
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
    g[8..].copy_from_slice(&NODE_GUID.to_be_bytes());
    g
}

/// Queue pairs.
pub const MAX_QP: u32 = 256;
/// Send queue entries (a power of two).
pub const MAX_SQ_WR: u32 = 4096;
/// Receive queue entries.
pub const MAX_RQ_WR: u32 = 32768;
/// Scatter/gather entries of a send.
pub const MAX_SQ_SGE: u16 = 2;
/// Scatter/gather entries of a receive.
pub const MAX_RQ_SGE: u16 = 1;
/// Scatter/gather entries of an RDMA read or write.
pub const MAX_SGE_RD: u32 = 1;
/// Bytes of inline data a send descriptor holds.
pub const INLINE_BUF_SIZE: u16 = 32;
/// The LLQ: bytes of descriptor ring the device has per send queue.
pub const MAX_LLQ_SIZE: u32 = MAX_SQ_WR * 64;
/// Most 64-byte blocks between two send doorbells.
pub const MAX_TX_BATCH: u16 = 16;
/// The smallest send queue (entries) the device takes.
pub const MIN_SQ_WR: u16 = 4;
/// Sub-CQs per CQ.
pub const SUB_CQS_PER_CQ: u16 = 1;
/// Largest RDMA read or write.
pub const MAX_RDMA_SIZE: u32 = 1 << 30;
/// The device MTU: largest SEND payload, and the port's `max_msg_sz`.
pub const MTU: u32 = 8928;
/// CQs.
pub const MAX_CQ: u32 = 512;
/// Entries of one CQ.
pub const MAX_CQE: u32 = 1 << 16;
/// Memory regions.
pub const MAX_MR: u32 = 1 << 18;
/// Protection domains.
pub const MAX_PD: u32 = 1 << 16;
/// Address handles (distinct destinations).
pub const MAX_AH: u32 = 1 << 16;
/// Largest MR.
pub const MAX_MR_SIZE: u64 = 1 << 39;
/// The EFA capability bits (`EFA_QUERY_DEVICE_CAPS_*`) of this device.
pub const DEVICE_CAPS: u32 = efa::device_caps::RDMA_READ
    | efa::device_caps::RNR_RETRY
    | efa::device_caps::CQ_WITH_SGID
    | efa::device_caps::RDMA_WRITE
    | efa::device_caps::UNSOLICITED_WRITE_RECV;
/// Where the send doorbell is in a QP's doorbell page.
pub const SQ_DB_OFFSET: u32 = 0;
/// Where the receive doorbell is in a QP's doorbell page.
pub const RQ_DB_OFFSET: u32 = 4;
/// Page size of every mapping the device hands out.
pub const PAGE: u64 = 4096;
/// `IB_MTU_4096`: what the port reports for an 8928-byte MTU.
pub const IB_MTU_4096: u8 = 5;
/// `IB_LINK_LAYER_UNSPECIFIED`: EFA's port is neither IB nor Ethernet.
pub const LINK_LAYER_UNSPECIFIED: u8 = 0;

/// The firmware version as QUERY_DEVICE's 64-bit field (its bytes, in
/// memory order, are [`FW_VER`]).
pub const fn fw_ver_u64() -> u64 {
    u64::from_ne_bytes([FW_VER[0], FW_VER[1], FW_VER[2], FW_VER[3], 0, 0, 0, 0])
}

/// The QUERY_DEVICE answer.
pub fn query_device() -> QueryDeviceResp {
    QueryDeviceResp {
        fw_ver: fw_ver_u64(),
        node_guid: NODE_GUID.to_be(),
        sys_image_guid: NODE_GUID.to_be(),
        max_mr_size: MAX_MR_SIZE,
        page_size_cap: 0xffff_f000,
        vendor_id: VENDOR_ID,
        vendor_part_id: VENDOR_PART_ID,
        max_qp: MAX_QP,
        max_qp_wr: MAX_SQ_WR.min(MAX_RQ_WR),
        max_sge: u32::from(MAX_SQ_SGE.min(MAX_RQ_SGE)),
        max_sge_rd: MAX_SGE_RD,
        max_cq: MAX_CQ,
        max_cqe: MAX_CQE,
        max_mr: MAX_MR,
        max_pd: MAX_PD,
        max_ah: MAX_AH,
        max_pkeys: 1,
        phys_port_cnt: 1,
        ..Default::default()
    }
}

/// The core EX_QUERY_DEVICE answer (`response_length` is set by the
/// caller).
pub fn ex_query_device() -> ExQueryDeviceResp {
    ExQueryDeviceResp {
        base: query_device(),
        ..Default::default()
    }
}

/// The EFA part of EX_QUERY_DEVICE.
pub fn efa_query_device() -> efa::ExQueryDeviceResp {
    efa::ExQueryDeviceResp {
        comp_mask: 0,
        max_sq_wr: MAX_SQ_WR,
        max_rq_wr: MAX_RQ_WR,
        max_sq_sge: MAX_SQ_SGE,
        max_rq_sge: MAX_RQ_SGE,
        max_rdma_size: MAX_RDMA_SIZE,
        device_caps: DEVICE_CAPS,
    }
}

/// The QUERY_PORT answer for port 1.
pub fn query_port() -> QueryPortResp {
    QueryPortResp {
        max_msg_sz: MTU,
        gid_tbl_len: 1,
        pkey_tbl_len: 1,
        state: 4,
        max_mtu: IB_MTU_4096,
        active_mtu: IB_MTU_4096,
        active_width: 2,
        active_speed: 64,
        phys_state: 5,
        link_layer: LINK_LAYER_UNSPECIFIED,
        ..Default::default()
    }
}

/// A GUID as sysfs prints it (`xxxx:xxxx:xxxx:xxxx`).
fn guid_sysfs(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// A GID as sysfs prints it (eight groups of four hex digits).
fn gid_sysfs(g: &[u8; 16]) -> String {
    g.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

/// Every file of the sysfs tree: `(relative path, contents)`.
pub fn sysfs_files() -> Vec<(String, String)> {
    let uv = format!("class/infiniband_verbs/{UVERBS}");
    let ib = format!("class/infiniband/{IBDEV}");
    let port = format!("{ib}/ports/1");
    let modalias = format!(
        "pci:v{:08X}d{:08X}sv{:08X}sd{:08X}bc02sc00i00",
        PCI_VENDOR, PCI_DEVICE, PCI_VENDOR, 0
    );
    vec![
        ("class/infiniband_verbs/abi_version".into(), "6\n".into()),
        (format!("{uv}/ibdev"), format!("{IBDEV}\n")),
        (
            format!("{uv}/abi_version"),
            format!("{}\n", efa::EFA_UVERBS_ABI_VERSION),
        ),
        (format!("{uv}/dev"), format!("{CDEV_MAJOR}:{CDEV_MINOR}\n")),
        (format!("{ib}/node_type"), "7: unspecified\n".into()),
        (
            format!("{ib}/node_guid"),
            format!("{}\n", guid_sysfs(NODE_GUID)),
        ),
        (
            format!("{ib}/sys_image_guid"),
            format!("{}\n", guid_sysfs(NODE_GUID)),
        ),
        (
            format!("{ib}/fw_ver"),
            format!("{}.{}.{}.{}\n", FW_VER[0], FW_VER[1], FW_VER[2], FW_VER[3]),
        ),
        (format!("{ib}/hw_rev"), "0x0\n".into()),
        (format!("{ib}/node_desc"), format!("efa-emu {IBDEV}\n")),
        (format!("{ib}/device/modalias"), format!("{modalias}\n")),
        (
            format!("{ib}/device/vendor"),
            format!("{PCI_VENDOR:#06x}\n"),
        ),
        (
            format!("{ib}/device/device"),
            format!("{PCI_DEVICE:#06x}\n"),
        ),
        (format!("{port}/state"), "4: ACTIVE\n".into()),
        (format!("{port}/phys_state"), "5: LinkUp\n".into()),
        (format!("{port}/link_layer"), "Unknown\n".into()),
        (format!("{port}/lid"), "0x0\n".into()),
        (format!("{port}/sm_lid"), "0x0\n".into()),
        (format!("{port}/lid_mask_count"), "0\n".into()),
        (format!("{port}/sm_sl"), "0\n".into()),
        (format!("{port}/cap_mask"), "0x00000000\n".into()),
        (format!("{port}/rate"), "100 Gb/sec (4X EDR)\n".into()),
        (format!("{port}/gids/0"), format!("{}\n", gid_sysfs(&gid()))),
        (format!("{port}/pkeys/0"), "0xffff\n".into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysfs_names_the_device_libefa_matches() {
        let f = sysfs_files();
        let get = |p: &str| f.iter().find(|(n, _)| n == p).map(|(_, c)| c.clone());
        assert_eq!(
            get("class/infiniband_verbs/uverbs0/abi_version").as_deref(),
            Some("1\n")
        );
        let alias = get("class/infiniband/efa_0/device/modalias").unwrap();
        assert!(alias.starts_with("pci:v00001D0Fd0000EFA1"), "{alias}");
        assert_eq!(
            get("class/infiniband/efa_0/ports/1/gids/0").as_deref(),
            Some("fe80:0000:0000:0000:0a5e:fa00:0000:0001\n")
        );
    }

    #[test]
    fn fw_ver_bytes_are_in_memory_order() {
        assert_eq!(&fw_ver_u64().to_ne_bytes()[..4], &FW_VER);
    }
}
