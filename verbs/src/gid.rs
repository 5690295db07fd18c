//! GIDs (16-byte global identifiers: IPv6-shaped addresses, with IPv4 mapped
//! for RoCE v2), GID table entries, and the 64-bit GUIDs that name nodes
//! and ports.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A GID, in network byte order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The all-zero GID (an empty table slot).
    pub const ZERO: Gid = Gid([0; 16]);

    /// The GID of a RoCE v2 IPv4 address (`::ffff:a.b.c.d`).
    pub fn from_ipv4(ip: Ipv4Addr) -> Gid {
        Gid(ip.to_ipv6_mapped().octets())
    }

    /// The IPv4 address inside an IPv4-mapped GID.
    pub fn to_ipv4(&self) -> Option<Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }

    /// Whether this is a multicast GID, as the kernel tells one
    /// (`rdma_is_multicast_addr`): an IPv6 multicast address (`ff00::/8`)
    /// or an IPv4-mapped IPv4 multicast address (`::ffff:224.0.0.0/100`,
    /// RoCE v2's groups of IPv4 addresses).
    pub fn is_multicast(&self) -> bool {
        let ip = Ipv6Addr::from(self.0);
        ip.is_multicast() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_multicast())
    }

    /// Whether this is the zero GID.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// Subnet prefix (first 8 bytes) as a big-endian integer.
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().unwrap_or([0; 8]))
    }

    /// Interface id (last 8 bytes) as a big-endian integer.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().unwrap_or([0; 8]))
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(a: Ipv6Addr) -> Gid {
        Gid(a.octets())
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(g: Gid) -> Ipv6Addr {
        Ipv6Addr::from(g.0)
    }
}

/// Formats in IPv6 notation, as `ibv_devinfo` and `ip` print GIDs
/// (`fe80::5054:ff:fe12:3456`, `::ffff:10.0.0.1`).
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&Ipv6Addr::from(self.0), f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// Parses the [`fmt::Display`] form or any IPv6 address notation.
impl FromStr for Gid {
    type Err = std::net::AddrParseError;
    fn from_str(s: &str) -> Result<Gid, Self::Err> {
        Ipv6Addr::from_str(s).map(Gid::from)
    }
}

/// What a GID identifies (`IB_UVERBS_GID_TYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand GID.
    Ib,
    /// RoCE v1 (Ethernet, EtherType 0x8915).
    RoceV1,
    /// RoCE v2 (UDP/IP, port 4791).
    RoceV2,
    /// A value this crate does not know.
    Other(u32),
}

impl GidType {
    pub(crate) fn from_raw(v: u32) -> GidType {
        use rverbs_abi::device::*;
        match v {
            IB_UVERBS_GID_TYPE_IB => GidType::Ib,
            IB_UVERBS_GID_TYPE_ROCE_V1 => GidType::RoceV1,
            IB_UVERBS_GID_TYPE_ROCE_V2 => GidType::RoceV2,
            o => GidType::Other(o),
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidType::Ib => f.write_str("IB"),
            GidType::RoceV1 => f.write_str("RoCE v1"),
            GidType::RoceV2 => f.write_str("RoCE v2"),
            GidType::Other(v) => write!(f, "type {v}"),
        }
    }
}

/// One valid entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the port's table, as the kernel reports it (`u32`);
    /// [`GidEntry::sgid_index`] gives it as the `u8` that
    /// [`crate::ConnectOpts::sgid_index`], [`crate::GlobalRoute`] and
    /// [`crate::Context::query_gid`] take.
    pub index: u32,
    /// The port, from 1, as the kernel reports it; [`GidEntry::port_num`]
    /// gives the `u8` the rest of the API takes.
    pub port: u32,
    /// IB, RoCE v1 or RoCE v2.
    pub gid_type: GidType,
    /// The netdev's ifindex (0 if none).
    pub netdev_ifindex: u32,
}

impl GidEntry {
    /// The index as an `sgid_index` (the ABI's `u8`); `None` for an entry
    /// past 255, which no QP or address handle can send from.
    pub fn sgid_index(&self) -> Option<u8> {
        u8::try_from(self.index).ok()
    }

    /// The port as the `u8` port numbers take elsewhere.
    pub fn port_num(&self) -> Option<u8> {
        u8::try_from(self.port).ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let g = Gid::from_ipv4(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(g.to_string(), "::ffff:10.0.0.1");
        let ll: Gid = "fe80:0000:0000:0000:5054:00ff:fe12:3456".parse().unwrap();
        assert_eq!(ll.to_string(), "fe80::5054:ff:fe12:3456");
        assert_eq!(g.to_string().parse::<Gid>().unwrap(), g);
        assert_eq!(g.to_ipv4(), Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert!("not a gid".parse::<Gid>().is_err());
    }
}
