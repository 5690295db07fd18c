//! The network headers of UD datagrams: the IB GRH and, on a RoCE port,
//! the RoCE v1/v2 headers by GID type.

use rverbs_abi::mlx5::prm::Av;

use super::synd;

/// The network header a RoCE datagram carries, by the type of the GID
/// entry it is sent from (the HCA's GID table records it: the kernel's
/// mlx5 `set_roce_addr` programs each entry with its RoCE version and, for
/// v2, its L3 type, IPv4 for an IPv4-mapped GID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoceL3 {
    /// RoCE v1: an InfiniBand GRH (IPv6 layout, next header 0x1B).
    Grh,
    /// RoCE v2 over IPv6 (next header UDP).
    Ipv6,
    /// RoCE v2 over IPv4 (protocol UDP).
    Ipv4,
}

/// The network header a UD receive starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Net {
    /// The 40-byte GRH area.
    pub(super) bytes: [u8; 40],
    /// Where the written part of it starts: 0, or 20 for an IPv4 header
    /// (the 20 bytes before it are left as they were: "garbled" in the
    /// kernel's words, `ib_get_rdma_header_version`).
    pub(super) from: usize,
    /// On a RoCE port, which header it is (for the CQE).
    pub(super) roce: Option<RoceL3>,
}

/// Bytes a UD packet carries after its network header for `data` bytes
/// of payload (immediate included): BTH, DETH, the payload padded to 4
/// bytes, ICRC.
fn transport_len(data: u32) -> u32 {
    (12 + 8 + 4u32).saturating_add(data.saturating_add(3) & !3)
}

/// An IPv6 header (also the IB GRH's layout): version 6, `tclass`, flow
/// label `fl`, `paylen` bytes after it, next header `nh`, `hop_limit`.
fn ipv6_header(tclass: u8, fl: u32, paylen: u32, nh: u8, hop_limit: u8) -> [u8; 40] {
    let mut g = [0u8; 40];
    let w0 = (6u32 << 28) | (u32::from(tclass) << 20) | (fl & 0xf_ffff);
    g[0..4].copy_from_slice(&w0.to_be_bytes());
    g[4..6].copy_from_slice(&(paylen.min(0xffff) as u16).to_be_bytes());
    g[6] = nh;
    g[7] = hop_limit;
    g
}

/// The 40-byte GRH a UD receiver on an InfiniBand port gets for address
/// vector `av` (if it carries a GRH), for a packet with `data` bytes after
/// the headers.
pub(super) fn grh_of(av: &Av, data: u32) -> Option<[u8; 40]> {
    let fl = av.grh_gid_fl.get();
    if fl & (1 << 30) == 0 {
        return None;
    }
    let mut g = ipv6_header(av.tclass, fl, transport_len(data), 0x1b, av.hop_limit);
    let sgid = crate::device::gid((fl >> 20) & 0xff).unwrap_or_default();
    g[8..24].copy_from_slice(&sgid);
    g[24..40].copy_from_slice(&av.rgid);
    Some(g)
}

/// The RoCE port's handling of a UD datagram sent with address vector
/// `av` and `data` bytes after the headers (immediate included):
///
/// - `Err(syndrome)`: the source GID index names no valid entry of the
///   GID table, so the HCA cannot build the packet's network header: the
///   send completes in error (local QP operation error; an emulator
///   choice, the PRM is not public on this point).
/// - `Ok(None)`: the datagram goes out but this port does not take it:
///   its destination MAC is not the port's, or its destination address
///   is not one of the port's GIDs of the same RoCE version and address
///   family (the receiver's header validation: IBA vol 1 9.6.1.1 for the
///   GRH's DGID, applied to the IP destination on RoCE v2). On a real
///   network it would reach another host or none; here there is none.
/// - `Ok(Some(net))`: the header the receive buffer gets. RoCE packets
///   always carry a network header (libmlx5 `mlx5_create_ah` leaves the
///   address vector's GRH bit clear on Ethernet for that reason), built
///   from the address vector: traffic class, flow label, hop limit, the
///   source GID entry's address and type, the destination GID. RoCE v1:
///   an IB GRH (next header 0x1B); RoCE v2 over IPv6: an IPv6 header
///   with next header UDP (17), the payload length counting the 8-byte
///   UDP header; RoCE v2 over IPv4: a 20-byte IPv4 header (no options,
///   don't-fragment, TTL = hop limit, protocol UDP, a valid header
///   checksum) at offset 20 of the area, as the kernel's
///   `union rdma_network_hdr` and libibverbs' `ibv_init_ah_from_wc` read
///   it. The UDP source port the address vector carries (`rlid`) is not
///   part of what a receive buffer gets.
pub(super) fn roce_header(av: &Av, data: u32) -> Result<Option<Net>, u8> {
    use crate::device::{self, GidKind};
    let fl = av.grh_gid_fl.get();
    let Some(sgid) = device::roce_gid((fl >> 20) & 0xff) else {
        return Err(synd::LOCAL_QP_OP);
    };
    let l3 = match sgid.kind {
        GidKind::RoceV2 if sgid.is_ipv4() => RoceL3::Ipv4,
        GidKind::RoceV2 => RoceL3::Ipv6,
        GidKind::RoceV1 | GidKind::Ib => RoceL3::Grh,
    };
    if av.rmac != device::PORT_MAC {
        return Ok(None);
    }
    let taken = (0..device::ROCE_GID_TBL_LEN)
        .filter_map(device::roce_gid)
        .filter(|e| e.kind == sgid.kind)
        .any(|e| match l3 {
            RoceL3::Ipv4 => e.is_ipv4() && e.gid[12..] == av.rgid[12..],
            RoceL3::Ipv6 => !e.is_ipv4() && e.gid == av.rgid,
            RoceL3::Grh => e.gid == av.rgid,
        });
    if !taken || (l3 == RoceL3::Ipv4 && !device::is_ipv4_mapped(&av.rgid)) {
        return Ok(None);
    }
    let transport = transport_len(data);
    let bytes = match l3 {
        RoceL3::Ipv4 => {
            let mut g = [0u8; 40];
            let h = &mut g[20..];
            let total = (20u32 + 8).saturating_add(transport).min(0xffff) as u16;
            h[0] = 0x45;
            h[1] = av.tclass;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
            h[8] = av.hop_limit;
            h[9] = 17;
            h[12..16].copy_from_slice(&sgid.gid[12..]);
            h[16..20].copy_from_slice(&av.rgid[12..]);
            let sum = ipv4_checksum(h);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
            g
        }
        RoceL3::Ipv6 | RoceL3::Grh => {
            let (paylen, nh) = if l3 == RoceL3::Ipv6 {
                (transport.saturating_add(8), 17)
            } else {
                (transport, 0x1b)
            };
            let mut g = ipv6_header(av.tclass, fl, paylen, nh, av.hop_limit);
            g[8..24].copy_from_slice(&sgid.gid);
            g[24..40].copy_from_slice(&av.rgid);
            g
        }
    };
    Ok(Some(Net {
        bytes,
        from: if l3 == RoceL3::Ipv4 { 20 } else { 0 },
        roce: Some(l3),
    }))
}

/// The IPv4 header checksum of the 20-byte header `h` (its checksum
/// field taken as zero): the ones' complement of the ones' complement sum
/// of its 16-bit words (RFC 791).
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks_exact(2)
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(_, w)| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}
