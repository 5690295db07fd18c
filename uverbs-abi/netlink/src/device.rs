//! The device model: [`RdmaDev`] and its "uverbs" [`Chardev`], read from
//! the `RDMA_NLDEV_CMD_GET` dump and `GET_CHARDEV`, and [`devices`], the
//! one-call listing.

use rverbs_abi::Errno;

use super::abi::{attr, cmd, nldev_type};
use super::attrs::Attrs;
use super::socket::NlSocket;

/// An RDMA device as `RDMA_NLDEV_CMD_GET` (and `GET_CHARDEV`) report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaDev {
    /// The kernel's device index ([`attr::DEV_INDEX`]).
    pub index: u32,
    /// The device name, such as `rxe0` ([`attr::DEV_NAME`]).
    pub name: String,
    /// The driver ([`driver_id`](crate::driver_id)), from [`attr::UVERBS_DRIVER_ID`] of the
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
    /// The node type ([`node_type`](crate::node_type); [`attr::DEV_NODE_TYPE`]).
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
    pub(super) fn parse(attrs: &[u8]) -> Result<Self, Errno> {
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
    /// The driver ([`driver_id`](crate::driver_id); [`attr::UVERBS_DRIVER_ID`]), uverbs only.
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

    pub(super) fn parse(attrs: &[u8]) -> Result<Self, Errno> {
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

#[cfg(test)]
mod tests {
    use rverbs_abi::Errno;

    use super::*;
    use crate::tests::{nla, rxe0_reply};
    use crate::*;

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
}
