//! The fake sysfs tree libibverbs discovers the emulated ConnectX-5
//! through, generated from [`crate::device`]; `emu_core::sysfs` installs
//! it (at `MLX5_EMU_SYSFS`, or under `/tmp/mlx5-emu-<uid>/`).

use std::io;
use std::path::PathBuf;

use emu_core::sysfs::Tree;

use crate::device;

/// Bump when the set of files or their format changes.
pub const LAYOUT_VERSION: u32 = 1;

/// Every file of the tree: `(relative path, contents)`.
pub fn files() -> Vec<(String, String)> {
    let uv = format!("class/infiniband_verbs/{}", device::UVERBS);
    let ib = format!("class/infiniband/{}", device::IBDEV);
    let port = format!("{ib}/ports/1");
    let mut f = vec![
        (
            "class/infiniband_verbs/abi_version".to_string(),
            format!("{}\n", rverbs_abi::IB_USER_VERBS_ABI_VERSION),
        ),
        (format!("{uv}/ibdev"), format!("{}\n", device::IBDEV)),
        (
            format!("{uv}/abi_version"),
            format!("{}\n", rverbs_abi::mlx5::MLX5_IB_UVERBS_ABI_VERSION),
        ),
        (
            format!("{uv}/dev"),
            format!("{}:{}\n", device::CDEV_MAJOR, device::CDEV_MINOR),
        ),
        (format!("{ib}/node_type"), "1: CA\n".to_string()),
        (
            format!("{ib}/node_guid"),
            format!("{}\n", device::guid_sysfs(device::NODE_GUID)),
        ),
        (
            format!("{ib}/sys_image_guid"),
            format!("{}\n", device::guid_sysfs(device::SYS_IMAGE_GUID)),
        ),
        (format!("{ib}/board_id"), format!("{}\n", device::BOARD_ID)),
        (
            format!("{ib}/fw_ver"),
            format!(
                "{}.{}.{:04}\n",
                device::FW_VER.0,
                device::FW_VER.1,
                device::FW_VER.2
            ),
        ),
        (
            format!("{ib}/hca_type"),
            format!("MT{}\n", device::VENDOR_PART_ID),
        ),
        (format!("{ib}/hw_rev"), format!("{:#x}\n", device::HW_VER)),
        (
            format!("{ib}/node_desc"),
            format!("mlx5-emu {}\n", device::IBDEV),
        ),
        (
            format!("{ib}/device/modalias"),
            format!("{}\n", device::modalias()),
        ),
        (
            format!("{ib}/device/vendor"),
            format!("{:#06x}\n", device::PCI_VENDOR),
        ),
        (
            format!("{ib}/device/device"),
            format!("{:#06x}\n", device::PCI_DEVICE),
        ),
        (format!("{port}/state"), "4: ACTIVE\n".to_string()),
        (format!("{port}/phys_state"), "5: LinkUp\n".to_string()),
        (format!("{port}/lid_mask_count"), "0\n".to_string()),
        (format!("{port}/sm_sl"), "0\n".to_string()),
        (format!("{port}/rate"), "100 Gb/sec (4X EDR)\n".to_string()),
    ];
    let eth = device::link() == device::Link::Eth;
    let (link_layer, cap_mask) = if eth {
        ("Ethernet", device::ROCE_PORT_CAP_FLAGS)
    } else {
        ("InfiniBand", device::PORT_CAP_FLAGS)
    };
    let sm_lid = if eth { 0 } else { device::SM_LID };
    f.extend([
        (format!("{port}/link_layer"), format!("{link_layer}\n")),
        (format!("{port}/lid"), format!("{:#x}\n", device::lid())),
        (format!("{port}/sm_lid"), format!("{sm_lid:#x}\n")),
        (format!("{port}/cap_mask"), format!("{cap_mask:#010x}\n")),
    ]);
    for i in 0..device::gid_tbl_len() {
        let gid = device::gid(i).expect("index below the table length");
        f.push((
            format!("{port}/gids/{i}"),
            format!("{}\n", device::gid_sysfs(&gid)),
        ));
        if !eth {
            // InfiniBand ports of mlx5 have no gid_attrs.
            continue;
        }
        // The kernel fails the read of an empty entry's type with EINVAL,
        // which libibverbs reads as "IB/RoCE v1"; a plain file cannot fail
        // a read, so it says that. An empty entry has no netdev: its file
        // fails to read in the kernel, is absent here (libibverbs reads
        // both as "no netdev").
        let entry = device::gid_entry(i);
        let kind = match entry.map(|e| e.kind) {
            Some(device::GidKind::RoceV2) => "RoCE v2",
            _ => "IB/RoCE v1",
        };
        f.push((format!("{port}/gid_attrs/types/{i}"), format!("{kind}\n")));
        if entry.is_some() {
            f.push((
                format!("{port}/gid_attrs/ndevs/{i}"),
                format!("{}\n", device::PORT_NETDEV),
            ));
        }
    }
    for i in 0..device::pkey_tbl_len() {
        let pkey = device::pkey(i).expect("index below the table length");
        f.push((format!("{port}/pkeys/{i}"), format!("{pkey:#06x}\n")));
    }
    f
}

/// The tree, ready to install.
pub fn tree() -> Tree {
    Tree {
        name: "mlx5-emu",
        env: "MLX5_EMU_SYSFS",
        layout_version: LAYOUT_VERSION,
        files: files(),
    }
}

/// The constructor's set-up: writes the tree where `MLX5_EMU_SYSFS` says
/// (or under `/tmp/mlx5-emu-<uid>/`) and sets `SYSFS_PATH` to it unless
/// already set. Returns the tree's location.
pub fn setup() -> io::Result<PathBuf> {
    tree().setup()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_has_the_discovery_files() {
        let names: Vec<String> = files().into_iter().map(|(p, _)| p).collect();
        for need in [
            "class/infiniband_verbs/abi_version",
            "class/infiniband_verbs/uverbs0/ibdev",
            "class/infiniband_verbs/uverbs0/abi_version",
            "class/infiniband_verbs/uverbs0/dev",
            "class/infiniband/mlx5_0/device/modalias",
            "class/infiniband/mlx5_0/ports/1/gids/0",
            "class/infiniband/mlx5_0/ports/1/gids/1",
        ] {
            assert!(names.iter().any(|n| n == need), "{need} missing");
        }
        let dev = files()
            .into_iter()
            .find(|(p, _)| p == "class/infiniband_verbs/uverbs0/dev")
            .map(|(_, c)| c);
        assert_eq!(dev.as_deref(), Some("231:192\n"));
    }
}
