//! Device discovery: the uverbs character devices listed in
//! `/sys/class/infiniband_verbs`, their ibdev names, GUIDs and drivers, and
//! opening one into a [`Context`](crate::Context).
//!
//! As in libibverbs, the sysfs root is `$SYSFS_PATH` when that is set (and
//! the process is not set-uid), `/sys` otherwise. The driver comes from the
//! kernel's RDMA netlink when it answers; otherwise from the device's
//! `device/driver` link, its PCI ids (`device/vendor` + `device/device`, or
//! `device/modalias`), and for soft-RoCE its name.

use std::fs::{self, File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The sysfs root libibverbs would use: `$SYSFS_PATH` without trailing
/// slashes when it is set, not empty and the real and effective user ids
/// agree (no set-uid program); `/sys` otherwise.
pub(crate) fn sysfs_root() -> PathBuf {
    let same_user = crate::sys::same_user();
    if same_user {
        if let Some(v) = std::env::var_os("SYSFS_PATH") {
            let s = v.to_string_lossy();
            let t = s.trim_end_matches('/');
            if !t.is_empty() {
                return PathBuf::from(t);
            }
        }
    }
    PathBuf::from("/sys")
}

/// `<root>/class/infiniband/<name>`: the ibdev's sysfs directory.
pub(crate) fn ibdev_dir(name: &str) -> PathBuf {
    sysfs_root().join("class/infiniband").join(name)
}

pub use crate::gid::Guid;
pub use crate::provider::Driver;

/// An RDMA device with a uverbs character device, as discovery
/// ([`devices`], [`device`]) found it. Only discovery makes one: the fields
/// are private, so a `Device` always names a uverbs node sysfs listed, and
/// [`Device::open`] checks that the node it opens is that character device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    name: String,
    uverbs: String,
    dev_path: PathBuf,
    /// The uverbs node's sysfs directory
    /// (`<root>/class/infiniband_verbs/uverbs0`), whose `dev` file holds
    /// the character device's number.
    sysfs_node: PathBuf,
    node_guid: Guid,
    driver: Driver,
    abi_version: u32,
    driver_abi_version: u32,
}

/// Where discovery looks for the uverbs character devices.
const DEV_DIR: &str = "/dev/infiniband";

/// `ibv_transport_type` of a sysfs node type (see [`Device::transport_type`]).
fn transport_of_node_type(node: Option<u32>) -> i32 {
    match node {
        Some(1..=3) => 0,
        Some(4) => 1,
        Some(5) => 2,
        Some(6) => 3,
        Some(7) => 4,
        _ => -1,
    }
}

fn read_trim(path: &Path) -> Result<String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| Error::Io {
            what: path.display().to_string(),
            source,
        })
}

fn parse_guid(s: &str) -> Guid {
    let hex: String = s.chars().filter(|c| *c != ':').collect();
    let v = u64::from_str_radix(&hex, 16).unwrap_or(0);
    Guid(v.to_be_bytes())
}

/// Every uverbs device the kernel exposes, sorted by name. An empty list
/// (not an error) when there are none or the RDMA core is not loaded.
pub fn devices() -> Result<Vec<Device>> {
    // The netlink list carries the driver ids; failure (old kernel, no
    // permission, an emulated device) falls back to sysfs.
    let nl = rverbs_netlink::devices().unwrap_or_default();
    devices_in(&sysfs_root(), Path::new(DEV_DIR), &nl)
}

/// [`devices`] over the sysfs tree at `root`, with `nl` the netlink list
/// and the character devices in `dev_dir`.
fn devices_in(root: &Path, dev_dir: &Path, nl: &[rverbs_netlink::RdmaDev]) -> Result<Vec<Device>> {
    let dir = root.join("class/infiniband_verbs");
    let io_err = |source| Error::Io {
        what: dir.display().to_string(),
        source,
    };
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(io_err(source)),
    };
    let abi_version = read_trim(&dir.join("abi_version"))?.parse().unwrap_or(0);
    let mut out = Vec::new();
    for ent in entries {
        let ent = ent.map_err(io_err)?;
        let uverbs = ent.file_name().to_string_lossy().into_owned();
        if !uverbs.starts_with("uverbs") {
            continue;
        }
        let p = ent.path();
        let name = read_trim(&p.join("ibdev"))?;
        let driver_abi_version = read_trim(&p.join("abi_version"))?.parse().unwrap_or(0);
        let ib = root.join("class/infiniband").join(&name);
        let node_guid = read_trim(&ib.join("node_guid"))
            .map(|s| parse_guid(&s))
            .unwrap_or_default();
        let driver = driver_of(&name, &ib, nl);
        out.push(Device {
            dev_path: dev_dir.join(&uverbs),
            sysfs_node: p,
            name,
            uverbs,
            node_guid,
            driver,
            abi_version,
            driver_abi_version,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

fn driver_of(name: &str, ib: &Path, nl: &[rverbs_netlink::RdmaDev]) -> Driver {
    if let Some(id) = nl.iter().find(|d| d.name == name).and_then(|d| d.driver_id) {
        return Driver::from_id(id);
    }
    // Hardware devices link to their PCI driver.
    if let Ok(link) = fs::read_link(ib.join("device/driver")) {
        if let Some(base) = link.file_name() {
            return Driver::from_module(&base.to_string_lossy());
        }
    }
    // No driver link: match the PCI ids, as libibverbs matches modaliases.
    if let Some((vendor, device)) = pci_ids(&ib.join("device")) {
        return Driver::from_pci(vendor, device);
    }
    // A soft device has no parent device; libibverbs matches it by name.
    Driver::from_name(name)
}

/// The PCI vendor and device ids of the device directory `dev`: from its
/// `vendor` and `device` files, else from its `modalias`.
fn pci_ids(dev: &Path) -> Option<(u16, u16)> {
    let hex16 = |p: &Path| {
        let s = fs::read_to_string(p).ok()?;
        let s = s.trim();
        let s = s
            .strip_prefix("0x")
            .or_else(|| s.strip_prefix("0X"))
            .unwrap_or(s);
        u16::from_str_radix(s, 16).ok()
    };
    if let (Some(v), Some(d)) = (hex16(&dev.join("vendor")), hex16(&dev.join("device"))) {
        return Some((v, d));
    }
    parse_pci_modalias(fs::read_to_string(dev.join("modalias")).ok()?.trim())
}

/// Parses the vendor and device ids out of a PCI modalias
/// (`pci:v000015B3d00001017sv...`: 8 hex digits each, any case).
fn parse_pci_modalias(s: &str) -> Option<(u16, u16)> {
    let rest = s.strip_prefix("pci:v")?;
    let vendor = rest.get(..8)?;
    let device = rest.get(8..)?.strip_prefix('d')?.get(..8)?;
    let hex = |h: &str| {
        if h.bytes().all(|b| b.is_ascii_hexdigit()) {
            u32::from_str_radix(h, 16)
                .ok()
                .and_then(|v| u16::try_from(v).ok())
        } else {
            None
        }
    };
    Some((hex(vendor)?, hex(device)?))
}

/// The device named `name`.
pub fn device(name: &str) -> Result<Device> {
    devices()?
        .into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| Error::NoSuchDevice(name.to_string()))
}

/// The device whose node GUID is `guid` (the rdma_cm names devices so),
/// `None` if no device has it. Answered from the devices found by the
/// last enumeration while that entry still holds in sysfs (its uverbs
/// node names the same device, which has the same GUID): two small reads
/// instead of a netlink query and every device's sysfs files per
/// connection. A miss, or an entry sysfs no longer confirms (a device
/// removed or re-created), enumerates again.
pub fn device_by_guid(guid: Guid) -> Result<Option<Device>> {
    static KNOWN: std::sync::Mutex<Vec<Device>> = std::sync::Mutex::new(Vec::new());
    let mut known = KNOWN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(d) = known.iter().find(|d| d.node_guid == guid) {
        if d.still_current() {
            return Ok(Some(d.clone()));
        }
    }
    *known = devices()?;
    Ok(known.iter().find(|d| d.node_guid == guid).cloned())
}

/// Parses a sysfs `dev` file's `MAJOR:MINOR`.
fn parse_dev_number(s: &str) -> Option<(u32, u32)> {
    let (major, minor) = s.split_once(':')?;
    let num = |t: &str| {
        if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            t.parse().ok()
        } else {
            None
        }
    };
    Some((num(major)?, num(minor)?))
}

impl Device {
    /// A device as discovery would list it, for unit tests that need one
    /// without a sysfs tree.
    #[cfg(test)]
    pub(crate) fn for_tests(name: &str, driver: Driver, dev_path: &Path) -> Device {
        Device {
            name: name.into(),
            uverbs: "uverbs9".into(),
            dev_path: dev_path.into(),
            sysfs_node: "/nonexistent/sys/class/infiniband_verbs/uverbs9".into(),
            node_guid: Guid::default(),
            driver,
            abi_version: rverbs_abi::IB_USER_VERBS_ABI_VERSION,
            driver_abi_version: 2,
        }
    }

    /// The ibdev name (`rxe0`, `mlx5_0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The uverbs node name (`uverbs0`).
    pub fn uverbs(&self) -> &str {
        &self.uverbs
    }

    /// The character device [`Device::open`] opens
    /// (`/dev/infiniband/uverbs0`).
    pub fn dev_path(&self) -> &Path {
        &self.dev_path
    }

    /// Node GUID from sysfs.
    pub fn node_guid(&self) -> Guid {
        self.node_guid
    }

    /// Whether sysfs still says what discovery found: the uverbs node
    /// names this device, and the device has this node GUID.
    fn still_current(&self) -> bool {
        let Some(root) = self
            .sysfs_node
            .parent()
            .and_then(Path::parent)
            .and_then(Path::parent)
        else {
            return false;
        };
        read_trim(&self.sysfs_node.join("ibdev")).is_ok_and(|n| n == self.name)
            && read_trim(
                &root
                    .join("class/infiniband")
                    .join(&self.name)
                    .join("node_guid"),
            )
            .is_ok_and(|g| parse_guid(&g) == self.node_guid)
    }

    /// The driver, from the kernel's RDMA netlink (or sysfs).
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// The uverbs ABI version the kernel speaks
    /// (`/sys/class/infiniband_verbs/abi_version`).
    pub fn abi_version(&self) -> u32 {
        self.abi_version
    }

    /// The driver's ABI version for this device (its uverbs node's
    /// `abi_version`), which the provider must speak.
    pub fn driver_abi_version(&self) -> u32 {
        self.driver_abi_version
    }

    /// Opens the device's uverbs character device for commands, checking
    /// that what opened is that device: a character device whose number is
    /// the one in its uverbs node's sysfs `dev` file (`MAJOR:MINOR`), as
    /// rdma-core checks. [`Device::open`] does this before anything else;
    /// it is public for tools that need a second, raw command fd.
    pub fn open_node(&self) -> Result<File> {
        let dev_file = self.sysfs_node.join("dev");
        let text = read_trim(&dev_file)?;
        let not_uverbs = |reason: String| Error::NotUverbsDevice {
            device: self.name.clone(),
            path: self.dev_path.display().to_string(),
            reason,
        };
        let (major, minor) = parse_dev_number(&text).ok_or_else(|| {
            not_uverbs(format!(
                "{} holds {text:?}, not MAJOR:MINOR",
                dev_file.display()
            ))
        })?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.dev_path)
            .map_err(|source| Error::Io {
                what: self.dev_path.display().to_string(),
                source,
            })?;
        // libc's fstat, not std's metadata (statx): the mlx5 emulator
        // interposes fstat to describe its device fds.
        let st = nix::sys::stat::fstat(file.as_raw_fd()).map_err(|errno| Error::Io {
            what: format!("fstat {}", self.dev_path.display()),
            source: errno.into(),
        })?;
        if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
            return Err(not_uverbs("not a character device".into()));
        }
        let (found_major, found_minor) = (libc::major(st.st_rdev), libc::minor(st.st_rdev));
        if (found_major, found_minor) != (major, minor) {
            return Err(not_uverbs(format!(
                "character device {found_major}:{found_minor}, but {} says {major}:{minor}",
                dev_file.display()
            )));
        }
        Ok(file)
    }

    /// The device's sysfs directory, `<root>/class/infiniband/<name>`
    /// (`<root>` is `$SYSFS_PATH` when set, as in libibverbs, else
    /// `/sys`): where `node_type`, `board_id`, `fw_ver` and `ports/` are.
    pub fn sysfs_dir(&self) -> PathBuf {
        ibdev_dir(&self.name)
    }

    /// The node type sysfs reports (`node_type`, `<n>: <name>`): 1 CA,
    /// 2 switch, 3 router, 4 RNIC (iWARP), 5 usNIC, 6 usNIC UDP,
    /// 7 unspecified; `None` if the file is missing or unreadable.
    pub fn node_type(&self) -> Option<u32> {
        let text = read_trim(&self.sysfs_dir().join("node_type")).ok()?;
        text.split(':').next()?.trim().parse().ok()
    }

    /// The transport of the device, as libibverbs' `enum
    /// ibv_transport_type` numbers it, from [`Device::node_type`]: 0
    /// InfiniBand (CAs, switches, routers: rxe and mlx5 too), 1 iWARP,
    /// 2 usNIC, 3 usNIC UDP, 4 unspecified, -1 unknown.
    pub fn transport_type(&self) -> i32 {
        transport_of_node_type(self.node_type())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::TempTree;

    #[test]
    fn transport_follows_the_node_type() {
        assert_eq!(transport_of_node_type(Some(1)), 0);
        assert_eq!(transport_of_node_type(Some(3)), 0);
        assert_eq!(transport_of_node_type(Some(4)), 1);
        assert_eq!(transport_of_node_type(Some(7)), 4);
        assert_eq!(transport_of_node_type(Some(9)), -1);
        assert_eq!(transport_of_node_type(None), -1);
    }

    #[test]
    fn guid_parse_and_format() {
        let g = parse_guid("5054:00ff:fe12:3456");
        assert_eq!(g.to_string(), "5054:00ff:fe12:3456");
        let raw = u64::from_ne_bytes([0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56]);
        assert_eq!(Guid::from_raw_be(raw), g);
    }

    #[test]
    fn pci_modalias_parse() {
        assert_eq!(
            parse_pci_modalias("pci:v000015B3d00001017sv000015B3sd00000020bc02sc00i00"),
            Some((0x15b3, 0x1017))
        );
        assert_eq!(
            parse_pci_modalias("pci:v000015b3d0000a2dcsv*"),
            Some((0x15b3, 0xa2dc))
        );
        assert_eq!(parse_pci_modalias("pci:v000015B3"), None);
        assert_eq!(parse_pci_modalias("pci:v000015B3x00001017"), None);
        assert_eq!(parse_pci_modalias("pci:v0000zzzzd00001017sv"), None);
        assert_eq!(parse_pci_modalias("pci:v000115B3d00001017sv"), None);
        assert_eq!(parse_pci_modalias("usb:v15B3p1017"), None);
        assert_eq!(parse_pci_modalias(""), None);
    }

    fn add_uverbs(t: &TempTree, uv: &str, ibdev: &str, abi: u32) {
        t.file(
            &format!("class/infiniband_verbs/{uv}/ibdev"),
            &format!("{ibdev}\n"),
        );
        t.file(
            &format!("class/infiniband_verbs/{uv}/abi_version"),
            &format!("{abi}\n"),
        );
        t.dir(&format!("class/infiniband/{ibdev}"));
    }

    #[test]
    fn driver_detection_on_a_sysfs_tree() {
        let t = TempTree::new("detect");
        t.file("class/infiniband_verbs/abi_version", "6\n");
        // mlx5 by modalias only (what the emulator's tree has).
        add_uverbs(&t, "uverbs0", "mlx5_0", 1);
        t.file(
            "class/infiniband/mlx5_0/device/modalias",
            "pci:v000015B3d00001017sv000015B3sd00000020bc02sc00i00\n",
        );
        t.file("class/infiniband/mlx5_0/node_guid", "0c42:a103:00fb:1234\n");
        // mlx5 by vendor/device files.
        add_uverbs(&t, "uverbs1", "mlx5_1", 1);
        t.file("class/infiniband/mlx5_1/device/vendor", "0x15b3\n");
        t.file("class/infiniband/mlx5_1/device/device", "0x101b\n");
        // mlx5 by its driver link (the ids say otherwise: the link wins).
        add_uverbs(&t, "uverbs2", "mlx5_2", 1);
        t.file("class/infiniband/mlx5_2/device/vendor", "0x8086\n");
        t.file("class/infiniband/mlx5_2/device/device", "0x1572\n");
        std::os::unix::fs::symlink(
            "../../bus/pci/drivers/mlx5_core",
            t.0.join("class/infiniband/mlx5_2/device/driver"),
        )
        .unwrap();
        // Another driver's link.
        add_uverbs(&t, "uverbs3", "irdma0", 1);
        t.dir("class/infiniband/irdma0/device");
        std::os::unix::fs::symlink(
            "../../bus/pci/drivers/irdma",
            t.0.join("class/infiniband/irdma0/device/driver"),
        )
        .unwrap();
        // A Mellanox id that is not mlx5 (ConnectX-3, mlx4).
        add_uverbs(&t, "uverbs4", "mlx4_0", 1);
        t.file(
            "class/infiniband/mlx4_0/device/modalias",
            "pci:v000015B3d00001007sv000015B3sd00000000bc02sc00i00\n",
        );
        // Soft-RoCE: no device directory, matched by name.
        add_uverbs(&t, "uverbs5", "rxe0", 2);
        // Nothing to go by.
        add_uverbs(&t, "uverbs6", "odd0", 1);
        // Not a uverbs node.
        t.file("class/infiniband_verbs/other/ibdev", "x\n");

        let list = devices_in(&t.0, Path::new(DEV_DIR), &[]).unwrap();
        let by = |n: &str| list.iter().find(|d| d.name == n).unwrap().clone();
        assert_eq!(list.len(), 7, "{list:?}");
        let m0 = by("mlx5_0");
        assert_eq!(m0.driver, Driver::Mlx5);
        assert_eq!(m0.uverbs, "uverbs0");
        assert_eq!(m0.dev_path, PathBuf::from("/dev/infiniband/uverbs0"));
        assert_eq!(m0.sysfs_node, t.0.join("class/infiniband_verbs/uverbs0"));
        assert_eq!(m0.node_guid.to_string(), "0c42:a103:00fb:1234");
        assert_eq!((m0.abi_version, m0.driver_abi_version), (6, 1));
        // The rdma_cm's cache keeps an entry while sysfs confirms it: not
        // once the node names another device or the GUID changed.
        assert!(m0.still_current());
        t.file("class/infiniband/mlx5_0/node_guid", "0c42:a103:00fb:9999\n");
        assert!(!m0.still_current());
        t.file("class/infiniband/mlx5_0/node_guid", "0c42:a103:00fb:1234\n");
        t.file("class/infiniband_verbs/uverbs0/ibdev", "mlx5_9\n");
        assert!(!m0.still_current());
        t.file("class/infiniband_verbs/uverbs0/ibdev", "mlx5_0\n");
        assert!(m0.still_current());
        assert_eq!(by("mlx5_1").driver, Driver::Mlx5);
        assert_eq!(by("mlx5_2").driver, Driver::Mlx5);
        assert_eq!(by("irdma0").driver, Driver::Other("irdma".into()));
        assert_eq!(by("mlx4_0").driver, Driver::Other("pci 15b3:1007".into()));
        assert_eq!(by("rxe0").driver, Driver::Rxe);
        assert_eq!(by("odd0").driver, Driver::Other("unknown".into()));
        assert_eq!(Driver::Mlx5.id(), Some(rverbs_netlink::driver_id::MLX5));
        assert_eq!(Driver::Mlx5.to_string(), "mlx5");
        // EFA: by its module, its PCI ids, its driver id.
        assert_eq!(Driver::from_module("efa"), Driver::Efa);
        assert_eq!(Driver::from_pci(0x1d0f, 0xefa1), Driver::Efa);
        assert_eq!(
            Driver::from_pci(0x1d0f, 0x1234),
            Driver::Other("pci 1d0f:1234".into())
        );
        assert_eq!(Driver::from_id(rverbs_netlink::driver_id::EFA), Driver::Efa);
        assert_eq!(Driver::Efa.id(), Some(rverbs_netlink::driver_id::EFA));
        assert_eq!(Driver::Efa.to_string(), "efa");

        // Netlink, when it knows the device, decides.
        let nl = [rverbs_netlink::RdmaDev {
            index: 0,
            name: "odd0".into(),
            driver_id: Some(rverbs_netlink::driver_id::MLX5),
            node_guid: None,
            fw_version: None,
            node_type: None,
            protocol: None,
            port_count: None,
        }];
        let list = devices_in(&t.0, Path::new(DEV_DIR), &nl).unwrap();
        let odd = list.iter().find(|d| d.name == "odd0").unwrap();
        assert_eq!(odd.driver, Driver::Mlx5);

        // No class directory: no devices, not an error.
        let empty = TempTree::new("empty");
        assert!(devices_in(&empty.0, Path::new(DEV_DIR), &[])
            .unwrap()
            .is_empty());
    }

    #[test]
    fn mlx5_driver_abi_is_checked() {
        let d = Device {
            name: "mlx5_9".into(),
            uverbs: "uverbs9".into(),
            dev_path: "/nonexistent/uverbs9".into(),
            sysfs_node: "/nonexistent/sys/class/infiniband_verbs/uverbs9".into(),
            node_guid: Guid::default(),
            driver: Driver::Mlx5,
            abi_version: 6,
            driver_abi_version: 2,
        };
        assert!(matches!(
            d.open().unwrap_err(),
            Error::DriverAbiVersion { found: 2, .. }
        ));
        // The right ABI gets as far as opening the node.
        let ok_abi = Device {
            driver_abi_version: 1,
            ..d
        };
        assert!(matches!(ok_abi.open().unwrap_err(), Error::Io { .. }));
    }

    #[test]
    fn unsupported_driver_is_a_clear_error() {
        let d = Device {
            name: "fake0".into(),
            uverbs: "uverbs9".into(),
            dev_path: "/dev/null".into(),
            sysfs_node: "/nonexistent/sys/class/infiniband_verbs/uverbs9".into(),
            node_guid: Guid::default(),
            driver: Driver::Other("fakedrv".into()),
            abi_version: 6,
            driver_abi_version: 2,
        };
        let e = d.open().unwrap_err();
        assert!(matches!(e, Error::UnsupportedDriver { .. }), "{e}");
        assert!(e.to_string().contains("fakedrv"));
        let old = Device {
            abi_version: 5,
            ..d
        };
        assert!(matches!(
            old.open().unwrap_err(),
            Error::AbiVersion { found: 5, .. }
        ));
        let rxe_v9 = Device {
            driver: Driver::Rxe,
            driver_abi_version: 9,
            ..old
        };
        let rxe_v9 = Device {
            abi_version: 6,
            ..rxe_v9
        };
        assert!(matches!(
            rxe_v9.open().unwrap_err(),
            Error::DriverAbiVersion { found: 9, .. }
        ));
    }

    #[test]
    fn dev_number_parse() {
        assert_eq!(parse_dev_number("231:192"), Some((231, 192)));
        assert_eq!(parse_dev_number("1:3"), Some((1, 3)));
        assert_eq!(parse_dev_number("231"), None);
        assert_eq!(parse_dev_number("231:"), None);
        assert_eq!(parse_dev_number(":1"), None);
        assert_eq!(parse_dev_number("-1:3"), None);
        assert_eq!(parse_dev_number("1:3:4"), None);
        assert_eq!(parse_dev_number("99999999999:0"), None);
    }

    /// `/dev/null`'s device number, `MAJOR:MINOR` (1:3 on Linux).
    fn null_rdev() -> String {
        use std::os::unix::fs::MetadataExt;
        let rdev = fs::metadata("/dev/null").unwrap().rdev();
        format!("{}:{}", libc::major(rdev), libc::minor(rdev))
    }

    /// A sysfs tree listing `rxe0` (uverbs0) and `mlx5_0` (uverbs1) whose
    /// `dev` files say `dev`, and a device directory whose nodes are
    /// links to `/dev/null`.
    fn null_device_tree(dev: &str) -> (TempTree, Vec<Device>) {
        let t = TempTree::new("nulldev");
        t.file("sys/class/infiniband_verbs/abi_version", "6\n");
        t.file("sys/class/infiniband_verbs/uverbs0/ibdev", "rxe0\n");
        t.file(
            "sys/class/infiniband_verbs/uverbs0/abi_version",
            &format!("{}\n", rverbs_rxe::DRIVER_ABI.start()),
        );
        t.file(
            "sys/class/infiniband_verbs/uverbs0/dev",
            &format!("{dev}\n"),
        );
        t.dir("sys/class/infiniband/rxe0");
        t.file("sys/class/infiniband_verbs/uverbs1/ibdev", "mlx5_0\n");
        t.file(
            "sys/class/infiniband_verbs/uverbs1/abi_version",
            &format!("{}\n", rverbs_mlx5::DRIVER_ABI.start()),
        );
        t.file(
            "sys/class/infiniband_verbs/uverbs1/dev",
            &format!("{dev}\n"),
        );
        t.file(
            "sys/class/infiniband/mlx5_0/device/modalias",
            "pci:v000015B3d00001017sv000015B3sd00000020bc02sc00i00\n",
        );
        t.dir("dev");
        for uv in ["uverbs0", "uverbs1"] {
            std::os::unix::fs::symlink("/dev/null", t.0.join("dev").join(uv)).unwrap();
        }
        let list = devices_in(&t.0.join("sys"), &t.0.join("dev"), &[]).unwrap();
        assert_eq!(list.len(), 2);
        (t, list)
    }

    /// A node that is not the uverbs character device sysfs names (here
    /// `/dev/null`, 1:3, where sysfs says 231:192) is refused before any
    /// command, with an error naming the mismatch; fd 0 is untouched.
    /// Before the check, the open "succeeded": GET_CONTEXT's response was
    /// never written, read as zeros, and the context adopted fd 0.
    #[test]
    fn a_node_that_is_not_the_uverbs_device_is_refused() {
        let before = crate::test_util::fd0_state();
        let null = null_rdev();
        assert_ne!(null, "231:192");
        let (_t, list) = null_device_tree("231:192");
        for d in &list {
            let e = d.open().unwrap_err();
            assert!(matches!(e, Error::NotUverbsDevice { .. }), "{e}");
            let msg = e.to_string();
            assert!(msg.contains(&format!("character device {null}")), "{msg}");
            assert!(msg.contains("231:192"), "{msg}");
            assert!(matches!(
                d.open_node().unwrap_err(),
                Error::NotUverbsDevice { .. }
            ));
        }
        assert_eq!(crate::test_util::fd0_state(), before);
    }

    /// Even when sysfs agrees with the node (a forged sysfs tree through
    /// SYSFS_PATH can say anything), a GET_CONTEXT answer without an async
    /// fd is refused: the field was prefilled with -1 and nothing wrote it.
    /// fd 0 is neither adopted nor closed.
    #[test]
    fn get_context_without_an_async_fd_is_refused() {
        let before = crate::test_util::fd0_state();
        let (_t, list) = null_device_tree(&null_rdev());
        for d in &list {
            assert!(d.open_node().is_ok(), "{}", d.name());
            let e = d.open().unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::NoFdInResponse {
                        op: "get_context",
                        field: "async_fd",
                        value: -1
                    }
                ),
                "{}: {e}",
                d.name()
            );
            assert!(e.to_string().contains("not a uverbs device"), "{e}");
        }
        assert_eq!(crate::test_util::fd0_state(), before);
    }
}
