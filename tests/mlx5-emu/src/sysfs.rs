//! The fake sysfs tree libibverbs discovers the device through, generated
//! from [`crate::device`], and its idempotent, concurrency-safe
//! installation.
//!
//! Paths are relative to the tree root (libibverbs' `SYSFS_PATH`). The
//! tree is built in a temporary sibling directory and renamed into place,
//! so readers never see a half-written tree and concurrent writers do not
//! clash (the loser of the rename discards its copy). The root carries a
//! marker file with the layout version and a hash of the contents; a tree
//! whose marker differs is replaced, a non-empty directory without a
//! marker is left alone (an error).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::device;

/// Bump when the set of files or their format changes.
pub const LAYOUT_VERSION: u32 = 1;
/// The marker file at the root of a tree written by this library.
pub const MARKER: &str = ".mlx5-emu-layout";

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

/// The layout stamp: version and a hash of every path and content, so any
/// change of the tree yields a new stamp.
pub fn stamp() -> String {
    // FNV-1a, 64 bit: stable across builds and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes.iter().chain(std::iter::once(&0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    for (p, c) in files() {
        eat(p.as_bytes());
        eat(c.as_bytes());
    }
    format!("v{LAYOUT_VERSION}-{h:016x}")
}

/// The default location: `/tmp/mlx5-emu-<uid>/sysfs-<stamp>`.
pub fn default_root() -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/tmp/mlx5-emu-{uid}")).join(format!("sysfs-{}", stamp()))
}

/// A name unique to this process and moment, for temporary siblings.
fn unique(tag: &str) -> String {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(".{tag}-{pid}-{nanos}")
}

fn marker_of(root: &Path) -> Option<String> {
    fs::read_to_string(root.join(MARKER)).ok()
}

/// Writes the whole tree (and the marker, last) under `dir`.
fn write_tree(dir: &Path, stamp: &str) -> io::Result<()> {
    for (rel, content) in files() {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(&path, content)?;
    }
    fs::write(dir.join(MARKER), format!("{stamp}\n"))
}

/// Makes `root` hold the current tree: returns at once if it already does,
/// otherwise writes a copy next to it and renames it into place (replacing
/// an older tree of ours).
pub fn install(root: &Path) -> io::Result<()> {
    let stamp = stamp();
    let want = format!("{stamp}\n");
    if marker_of(root).as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    let parent = root
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::create_dir_all(parent)?;
    let name = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(unique(&format!("{name}.tmp")));
    fs::DirBuilder::new().mode(0o755).create(&tmp)?;
    if let Err(e) = write_tree(&tmp, &stamp) {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let result = place(root, &tmp, parent, &name, &want);
    if tmp.exists() {
        let _ = fs::remove_dir_all(&tmp);
    }
    result
}

/// Renames the finished copy `tmp` to `root`, coping with a tree that is
/// already there (current: keep it; older of ours: replace it).
fn place(root: &Path, tmp: &Path, parent: &Path, name: &str, want: &str) -> io::Result<()> {
    for _ in 0..8 {
        if fs::rename(tmp, root).is_ok() {
            return Ok(());
        }
        // Something is in the way.
        match marker_of(root) {
            Some(m) if m == want => return Ok(()),
            Some(_) => {
                // An older tree of ours: move it aside, then retry.
                let old = parent.join(unique(&format!("{name}.old")));
                if fs::rename(root, &old).is_ok() {
                    let _ = fs::remove_dir_all(&old);
                }
            }
            None => {
                // An empty directory may go; anything else is not ours.
                if fs::remove_dir(root).is_err() && root.exists() {
                    return Err(io::Error::new(
                        io::ErrorKind::AlreadyExists,
                        format!(
                            "{} exists and is not an mlx5-emu sysfs tree (no {MARKER}); \
                             refusing to replace it",
                            root.display()
                        ),
                    ));
                }
            }
        }
    }
    Err(io::Error::other(format!(
        "could not install the sysfs tree at {}",
        root.display()
    )))
}

/// Creates `/tmp/mlx5-emu-<uid>` (mode 0700) if needed and checks that it
/// is a real directory owned by us.
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let md = fs::symlink_metadata(dir)?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if !md.is_dir() || md.uid() != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} is not a directory owned by uid {uid}", dir.display()),
        ));
    }
    Ok(())
}

/// The constructor's set-up: writes the tree where `MLX5_EMU_SYSFS` says
/// (or at [`default_root`]) and sets `SYSFS_PATH` to it unless already set.
/// Returns the tree's location.
pub fn setup() -> io::Result<PathBuf> {
    let root = match std::env::var_os("MLX5_EMU_SYSFS").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            let root = default_root();
            if let Some(parent) = root.parent() {
                ensure_private_dir(parent)?;
            }
            root
        }
    };
    install(&root)?;
    if std::env::var_os("SYSFS_PATH").is_none() {
        // Runs in the constructor, before the program's own threads exist.
        std::env::set_var("SYSFS_PATH", &root);
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(unique(&format!("mlx5-emu-test-{tag}")));
        fs::create_dir_all(&d).expect("scratch dir");
        d
    }

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
    }

    #[test]
    fn install_is_idempotent_and_replaces_old_trees() {
        let base = scratch("install");
        let root = base.join("sysfs");
        install(&root).expect("first install");
        let dev = fs::read_to_string(root.join("class/infiniband_verbs/uverbs0/dev")).unwrap();
        assert_eq!(dev, "231:192\n");
        install(&root).expect("second install (no-op)");
        // An older tree of ours is replaced.
        fs::write(root.join(MARKER), "v0-old\n").unwrap();
        fs::write(root.join("stale"), "x").unwrap();
        install(&root).expect("replacing an old tree");
        assert!(!root.join("stale").exists());
        assert_eq!(marker_of(&root), Some(format!("{}\n", stamp())));
        // A foreign non-empty directory is left alone.
        let foreign = base.join("foreign");
        fs::create_dir_all(&foreign).unwrap();
        fs::write(foreign.join("mine"), "keep").unwrap();
        assert!(install(&foreign).is_err());
        assert_eq!(fs::read_to_string(foreign.join("mine")).unwrap(), "keep");
        // No temporary siblings are left behind.
        let leftovers: Vec<_> = fs::read_dir(&base)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with('.'))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
        fs::remove_dir_all(&base).unwrap();
    }
}
