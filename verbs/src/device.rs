//! Device discovery: the uverbs character devices listed in
//! `/sys/class/infiniband_verbs`, their ibdev names, GUIDs and drivers, and
//! opening one into a [`Context`].

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use uverbs_abi::netlink;

use crate::context::Context;
use crate::error::{Error, Result};

const SYSFS_VERBS: &str = "/sys/class/infiniband_verbs";
const SYSFS_IB: &str = "/sys/class/infiniband";

/// The driver behind a device, which decides the provider.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Driver {
    /// Soft-RoCE (`rdma_rxe`): served by `provider-rxe`.
    Rxe,
    /// A driver this crate has no provider for, by name.
    Other(String),
}

impl Driver {
    /// The kernel's `enum rdma_driver_id` value, which `ioctl()` method
    /// calls must carry in their header.
    pub fn id(&self) -> Option<u32> {
        match self {
            Driver::Rxe => Some(netlink::driver_id::RXE),
            Driver::Other(_) => None,
        }
    }
}

impl fmt::Display for Driver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Driver::Rxe => f.write_str("rxe"),
            Driver::Other(s) => f.write_str(s),
        }
    }
}

/// A 64-bit GUID as the kernel stores it (network byte order).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Guid(pub [u8; 8]);

impl Guid {
    /// From the raw `__be64` the kernel writes in command responses.
    pub fn from_raw_be(raw: u64) -> Guid {
        Guid(raw.to_ne_bytes())
    }
}

/// Formats as `ibv_devinfo` does: `xxxx:xxxx:xxxx:xxxx`.
impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
        )
    }
}

impl fmt::Debug for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Guid({self})")
    }
}

/// An RDMA device with a uverbs character device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The ibdev name (`rxe0`, `mlx5_0`).
    pub name: String,
    /// The uverbs node name (`uverbs0`).
    pub uverbs: String,
    /// The character device to open (`/dev/infiniband/uverbs0`).
    pub dev_path: PathBuf,
    /// Node GUID from sysfs.
    pub node_guid: Guid,
    /// The driver, from the kernel's RDMA netlink (or sysfs).
    pub driver: Driver,
    /// The uverbs ABI version the kernel speaks
    /// (`/sys/class/infiniband_verbs/abi_version`).
    pub abi_version: u32,
    /// The driver's ABI version for this device (its uverbs node's
    /// `abi_version`), which the provider must speak.
    pub driver_abi_version: u32,
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
    let dir = Path::new(SYSFS_VERBS);
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                what: SYSFS_VERBS.into(),
                source,
            })
        }
    };
    // The netlink list carries the driver ids; failure (old kernel, no
    // permission) falls back to sysfs.
    let nl = netlink::devices().unwrap_or_default();
    let abi_version = read_trim(&dir.join("abi_version"))?.parse().unwrap_or(0);
    let mut out = Vec::new();
    for ent in entries {
        let ent = ent.map_err(|source| Error::Io {
            what: SYSFS_VERBS.into(),
            source,
        })?;
        let uverbs = ent.file_name().to_string_lossy().into_owned();
        if !uverbs.starts_with("uverbs") {
            continue;
        }
        let p = ent.path();
        let name = read_trim(&p.join("ibdev"))?;
        let driver_abi_version = read_trim(&p.join("abi_version"))?.parse().unwrap_or(0);
        let ib = Path::new(SYSFS_IB).join(&name);
        let node_guid = read_trim(&ib.join("node_guid"))
            .map(|s| parse_guid(&s))
            .unwrap_or_default();
        let driver = driver_of(&name, &ib, &nl);
        out.push(Device {
            dev_path: PathBuf::from("/dev/infiniband").join(&uverbs),
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

fn driver_of(name: &str, ib: &Path, nl: &[netlink::RdmaDev]) -> Driver {
    if let Some(id) = nl.iter().find(|d| d.name == name).and_then(|d| d.driver_id) {
        if id == netlink::driver_id::RXE {
            return Driver::Rxe;
        }
        return Driver::Other(format!("driver id {id}"));
    }
    // Hardware devices link to their PCI driver.
    if let Ok(link) = fs::read_link(ib.join("device/driver")) {
        if let Some(base) = link.file_name() {
            return Driver::Other(base.to_string_lossy().into_owned());
        }
    }
    Driver::Other("unknown".into())
}

/// The device named `name`.
pub fn device(name: &str) -> Result<Device> {
    devices()?
        .into_iter()
        .find(|d| d.name == name)
        .ok_or_else(|| Error::NoSuchDevice(name.to_string()))
}

impl Device {
    /// Opens the device: checks the ABI version and the driver, opens the
    /// character device and creates a user context (GET_CONTEXT).
    pub fn open(&self) -> Result<Context> {
        if self.abi_version != uverbs_abi::IB_USER_VERBS_ABI_VERSION {
            return Err(Error::AbiVersion {
                device: self.name.clone(),
                found: self.abi_version,
                expected: uverbs_abi::IB_USER_VERBS_ABI_VERSION,
            });
        }
        if self.driver != Driver::Rxe {
            return Err(Error::UnsupportedDriver {
                device: self.name.clone(),
                driver: self.driver.to_string(),
            });
        }
        if !provider_rxe::DRIVER_ABI.contains(&self.driver_abi_version) {
            return Err(Error::DriverAbiVersion {
                device: self.name.clone(),
                found: self.driver_abi_version,
                supported: provider_rxe::DRIVER_ABI,
            });
        }
        Context::open(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_parse_and_format() {
        let g = parse_guid("5054:00ff:fe12:3456");
        assert_eq!(g.to_string(), "5054:00ff:fe12:3456");
        let raw = u64::from_ne_bytes([0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56]);
        assert_eq!(Guid::from_raw_be(raw), g);
    }

    #[test]
    fn unsupported_driver_is_a_clear_error() {
        let d = Device {
            name: "fake0".into(),
            uverbs: "uverbs9".into(),
            dev_path: "/dev/null".into(),
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
}
