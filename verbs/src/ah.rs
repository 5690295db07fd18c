//! Address handles (where a UD send goes), [`UdSendWr::to`] to address a
//! send with one, and [`Grh`], the 40-byte header that precedes every UD
//! receive.
//!
//! # UD on rxe
//!
//! * A UD QP is brought up with [`Qp::ready_ud`](crate::Qp::ready_ud) (or
//!   [`Qp::connect`](crate::Qp::connect), whose remote end UD ignores).
//! * Every send names its destination: `SendWr::send(..).to(&ah, qpn, qkey)`.
//!   A UD send without one is refused with [`PostError::MissingAddress`](crate::PostError::MissingAddress)
//!   and a destination on an RC/UC QP with [`PostError::UnexpectedAddress`](crate::PostError::UnexpectedAddress).
//! * A UD message is one packet: longer than the port's active MTU is
//!   refused with [`PostError::UdTooLong`](crate::PostError::UdTooLong) (rxe itself would drop it and
//!   still report success, as IB spec C10-93.1.1 allows).
//! * rxe looks the address handle up by its number when it builds the
//!   packet, not when the request is posted, and hands a destroyed AH's
//!   number to the next AH created. So the QP holds the kernel's AH for
//!   every send that names it: dropping an [`Ah`] while such a send is
//!   queued is safe, the send still goes where it was addressed, and the
//!   kernel object is destroyed once the send's queue slot is reused (or
//!   the QP destroyed), not before. (A destination built by hand,
//!   [`UdDest`] without a hold, has no such protection.)
//! * The receiver's buffer must have room for a 40-byte [`Grh`] before the
//!   payload; the completion's `byte_len` counts it. On RoCE v2 over IPv4
//!   rxe writes 20 zero bytes and then the IPv4 header. A datagram that
//!   does not fit is never written past the buffer, but what happens
//!   differs: Linux 6.1 fails that receive with `LOC_QP_OP_ERR` and moves
//!   the QP to the error state; later kernels (6.12) drop the datagram and
//!   leave the receive posted.
//! * A datagram whose Q_Key differs from the receiving QP's is dropped
//!   silently (the port's Q_Key violation counter goes up).
//!
//! # UD on mlx5
//!
//! The address vector (`mlx5_wqe_av`) is built in user space when the
//! [`Ah`] is created and copied into every UD send WQE; on an InfiniBand
//! port no kernel object is created ([`Ah::handle`] is 0, [`Ah::ah_num`]
//! 0). On a RoCE port the address needs a GRH, the vector carries the
//! UDP source port when the source GID is RoCE v2, and the destination
//! MAC comes from the kernel: CREATE_AH resolves it (its own address:
//! the port's MAC; a neighbour: the neighbour table, which can take the
//! kernel a while and fail with `ETIMEDOUT`) and the mlx5 driver answers
//! it, so a kernel AH exists too ([`Ah::handle`] non-zero). A kernel whose
//! mlx5 driver does not answer the MAC (before Linux 4.15) is refused
//! with [`Error::Unsupported`]: libmlx5 would ask the neighbour table
//! itself over netlink, this crate does not.
//!
//! A UD receive on RoCE starts with the network header of the sender's
//! GID type ([`Grh::parse`] tells which): an IB GRH (RoCE v1), an IPv6
//! header (RoCE v2, IPv6 GID), or 20 undefined bytes and an IPv4 header
//! (RoCE v2, IPv4 GID).
//!
//! # Invalidation on rxe
//!
//! LOCAL_INV and SEND_WITH_INV invalidate type 2 memory windows (see
//! [`crate::mw`]); rxe also invalidates fast-registration MRs, which this
//! crate does not create. Aimed at an MR from a plain registration they
//! fail in the kernel: on Linux 6.1 a LOCAL_INV completes with
//! `LOC_QP_OP_ERR` (6.12: `WR_FLUSH_ERR`) and moves the QP to the error
//! state; a SEND_WITH_INV completes as a success at the sender while the
//! receiver gets `REM_INV_REQ_ERR` and its QP goes to the error state.
//! mlx5 refuses all three window operations at post time with
//! [`PostError::InvalidateUnsupported`](crate::PostError::InvalidateUnsupported).
//! RDMA READ and atomics are RC only ([`PostError::InvalidOpcode`](crate::PostError::InvalidOpcode) on UC
//! and UD), and RDMA WRITE is not available on UD.

use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

use rverbs_abi::ah::{AhAttr as RawAhAttr, CreateAh, DestroyAh, GlobalRoute as RawGrh};
use rverbs_abi::cmd::exec;
use rverbs_provider::wr::{AhHold, SendWr, UdDest};
use rverbs_provider::{AhCreated, AhNetwork};

use crate::context::{Context, LinkLayer};
use crate::error::{Error, Feature, InvalidKind, Result};
use crate::gid::{Gid, GidType};
use crate::mr::Mr;
use crate::pd::Pd;
use crate::qp::{AhAttr, GlobalRoute};

/// An address handle: the path to a UD destination, created on a [`Pd`]
/// (which it keeps alive) and destroyed when dropped, or on rxe once the
/// last queued send that names it is consumed (see the
/// [module docs](self)).
///
/// On mlx5 the address vector the device reads is built in user space
/// and travels in every UD send WQE; on an InfiniBand port no kernel
/// object is created at all (as libmlx5 does).
pub struct Ah {
    pd: Pd,
    /// The kernel's AH, if one was created: destroyed when the last
    /// holder lets go (this handle, and on rxe each send queue slot whose
    /// send names it, see [`AhHold`]).
    kernel: Option<AhHold>,
    /// The kernel's handle for it (0: none).
    handle: u32,
    /// Whether sends carry [`Ah::kernel`] for the provider to hold (rxe,
    /// which looks the AH up by number when it sends; mlx5 copies the
    /// address into the WQE).
    held_by_sends: bool,
    ah_num: u32,
    attr: AhAttr,
    /// mlx5: the 48-byte `mlx5_wqe_av` for UD sends.
    av: Option<[u8; 48]>,
}

impl fmt::Debug for Ah {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ah")
            .field("handle", &self.handle)
            .field("ah_num", &self.ah_num)
            .field("attr", &self.attr)
            .finish()
    }
}

fn to_raw(a: &AhAttr) -> RawAhAttr {
    let g = a.grh.unwrap_or_default();
    RawAhAttr {
        grh: RawGrh {
            dgid: g.dgid.0,
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            reserved: 0,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.grh.is_some() as u8,
        port_num: a.port_num,
        reserved: 0,
    }
}

fn destroy_ah(ctx: &Context, handle: u32) {
    let cmd = DestroyAh { ah_handle: handle };
    // On failure (device removed) the kernel frees the AH with the context.
    let _ = exec(ctx.fd(), &cmd, &mut []);
}

/// The kernel's AH: DESTROY_AH when the last [`AhHold`] of it goes.
struct KernelAh {
    pd: Pd,
    handle: u32,
}

impl Drop for KernelAh {
    fn drop(&mut self) {
        destroy_ah(self.pd.context(), self.handle);
    }
}

impl Ah {
    fn new(pd: &Pd, created: AhCreated, attr: &AhAttr) -> Ah {
        Ah {
            pd: pd.clone(),
            kernel: created.handle.map(|handle| {
                AhHold::new(Arc::new(KernelAh {
                    pd: pd.clone(),
                    handle,
                }))
            }),
            handle: created.handle.unwrap_or(0),
            held_by_sends: created.held_by_sends,
            ah_num: created.ah_num,
            attr: *attr,
            av: created.av,
        }
    }
}

impl Pd {
    /// Creates an address handle for `attr`. Checked first: the port exists,
    /// a RoCE (Ethernet) port has a GRH, and the GRH's `sgid_index` names a
    /// valid GID of that port.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah> {
        let ctx = self.context();
        let ports = ctx.phys_port_cnt()?;
        if attr.port_num == 0 || attr.port_num > ports {
            return Err(Error::invalid_as(
                InvalidKind::NotPresent,
                format!(
                    "address handle on port {}: the device has ports 1..={ports}",
                    attr.port_num
                ),
            ));
        }
        let roce = ctx.link_layer(attr.port_num)? == LinkLayer::Ethernet;
        // RoCE: the source GID's type decides the packet format.
        let mut gid_type = None;
        if let Some(g) = &attr.grh {
            // The one entry is asked for; the table only to name the valid
            // indices when it is missing.
            match ctx.query_gid_entry(attr.port_num, u32::from(g.sgid_index)) {
                Ok(e) => gid_type = roce.then_some(e.gid_type),
                Err(Error::InvalidArgument(_)) => {
                    let on_port: Vec<u32> = ctx
                        .query_gid_table()?
                        .iter()
                        .filter(|e| e.port == attr.port_num as u32)
                        .map(|e| e.index)
                        .collect();
                    return Err(Error::invalid_as(InvalidKind::NotPresent, format!(
                    "address handle: port {} has no GID at sgid_index {} (valid indices: {on_port:?})",
                    attr.port_num, g.sgid_index
                )));
                }
                Err(e) => return Err(e),
            }
        } else if roce {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                format!(
                "address handle: port {} is RoCE (Ethernet), which needs a GRH (destination GID)",
                attr.port_num
            ),
            ));
        }
        let cmd = CreateAh {
            response: 0,
            user_handle: 0,
            pd_handle: self.handle(),
            reserved: 0,
            attr: to_raw(attr),
        };
        if roce {
            ctx.provider().require(Feature::RoceAddressHandle)?;
        }
        let network = match gid_type {
            None => AhNetwork::Ib,
            Some(GidType::RoceV2) => AhNetwork::RoceV2,
            Some(_) => AhNetwork::RoceV1,
        };
        let created = ctx.provider().create_ah(&cmd, network)?;
        Ok(Ah::new(self, created, attr))
    }
}

impl Ah {
    /// The number the provider puts in UD work requests (rxe's `ah_num`;
    /// 0 on mlx5, whose WQEs carry [`Ah::av`] instead).
    pub fn ah_num(&self) -> u32 {
        self.ah_num
    }
    /// The kernel's handle (0 when there is no kernel object: mlx5 on an
    /// InfiniBand port).
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// The address vector UD send WQEs carry (mlx5), if the provider uses
    /// one.
    pub fn av(&self) -> Option<&[u8; 48]> {
        self.av.as_ref()
    }
    /// The attributes it was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }
    /// The PD it belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }
    /// The destination of a UD send through this AH to QP `remote_qpn`
    /// presenting `remote_qkey`.
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest<'_> {
        UdDest {
            ah_num: self.ah_num,
            av: self.av.as_ref(),
            remote_qpn,
            remote_qkey,
            hold: if self.held_by_sends {
                self.kernel.as_ref()
            } else {
                None
            },
        }
    }
}

/// Addresses a UD send with an [`Ah`] (implemented for [`SendWr`]):
/// `wr.to(&ah, qpn, qkey)`. Without importing this trait, the same is
/// `wr.dest(ah.dest(qpn, qkey))` ([`SendWr::dest`], [`Ah::dest`]).
pub trait UdSendWr<'a> {
    /// Sends to QP `remote_qpn` through `ah`, presenting `remote_qkey`.
    /// Once posted, the send keeps what it needs of `ah` itself: `ah` may
    /// be dropped before the send completes (see the [module docs](self)).
    fn to(self, ah: &'a Ah, remote_qpn: u32, remote_qkey: u32) -> Self;
}

impl<'a> UdSendWr<'a> for SendWr<'a> {
    #[inline]
    fn to(self, ah: &'a Ah, remote_qpn: u32, remote_qkey: u32) -> Self {
        self.dest(ah.dest(remote_qpn, remote_qkey))
    }
}

/// Which network header a [`Grh`] was parsed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NetworkHeader {
    /// RoCE v2 over IPv4: 20 undefined bytes (rxe writes zeros, mlx5
    /// leaves what was there), then the IPv4 header.
    Ipv4,
    /// An IB GRH, or RoCE v2 over IPv6: the IPv6 header (same layout).
    Ipv6,
}

/// The 40 bytes a UD receive starts with, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grh {
    /// IPv4 (RoCE v2) or IPv6/IB GRH.
    pub network: NetworkHeader,
    /// The sender's GID (an IPv4-mapped GID for IPv4).
    pub sgid: Gid,
    /// The GID the datagram was sent to (one of the receiving port's).
    pub dgid: Gid,
    /// Traffic class (IPv4: the TOS byte).
    pub traffic_class: u8,
    /// Flow label (0 for IPv4).
    pub flow_label: u32,
    /// Hop limit (IPv4: TTL).
    pub hop_limit: u8,
    /// Next header (IPv4: protocol; 17, UDP, for RoCE v2).
    pub next_header: u8,
    /// Bytes after the network header (IPv6 payload length; IPv4 total
    /// length less the header).
    pub payload_len: u16,
}

impl Grh {
    /// Size of the header at the start of every UD receive buffer.
    pub const LEN: usize = 40;

    /// Decodes the first [`Grh::LEN`] bytes of a UD receive buffer.
    ///
    /// Which header it is, is told as libibverbs' `ibv_init_ah_from_wc`
    /// (and the kernel's `ib_get_rdma_header_version`) tell it, since the
    /// 20 bytes before an IPv4 header are undefined: not IP version 6 in
    /// byte 0 means IPv4 (if byte 20 says so); IP version 6 means IPv6
    /// unless bytes 20..40 are an option-less IPv4 header with a valid
    /// checksum.
    pub fn parse(buf: &[u8]) -> Result<Grh> {
        let b: &[u8; 40] = buf
            .get(..Self::LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| {
                Error::invalid_as(
                    InvalidKind::Malformed,
                    format!("a GRH is {} bytes, the buffer has {}", Self::LEN, buf.len()),
                )
            })?;
        let be16 = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let gid = |i: usize| {
            let mut g = [0u8; 16];
            g.copy_from_slice(&b[i..i + 16]);
            Gid(g)
        };
        let ip = &b[20..];
        let ipv4 = if b[0] >> 4 != 6 {
            ip[0] >> 4 == 4
        } else {
            ip[0] == 0x45 && ipv4_checksum_ok(ip)
        };
        if ipv4 {
            let ihl = (ip[0] & 0xf) as u16 * 4;
            let v4 =
                |i: usize| Gid::from_ipv4(Ipv4Addr::new(ip[i], ip[i + 1], ip[i + 2], ip[i + 3]));
            return Ok(Grh {
                network: NetworkHeader::Ipv4,
                sgid: v4(12),
                dgid: v4(16),
                traffic_class: ip[1],
                flow_label: 0,
                hop_limit: ip[8],
                next_header: ip[9],
                payload_len: be16(22).saturating_sub(ihl),
            });
        }
        if b[0] >> 4 == 6 {
            return Ok(Grh {
                network: NetworkHeader::Ipv6,
                sgid: gid(8),
                dgid: gid(24),
                traffic_class: (b[0] << 4) | (b[1] >> 4),
                flow_label: u32::from_be_bytes([0, b[1] & 0xf, b[2], b[3]]),
                hop_limit: b[7],
                next_header: b[6],
                payload_len: be16(4),
            });
        }
        Err(Error::invalid_as(
            InvalidKind::Malformed,
            "not a GRH: neither an IPv6 header nor 20 zero bytes and an IPv4 header",
        ))
    }

    /// Reads and decodes the GRH at `offset` of `mr` (where the UD receive
    /// buffer started). No receive may be outstanding on that range.
    pub fn read<B>(mr: &Mr<B>, offset: usize) -> Result<Grh> {
        let mut b = [0u8; Self::LEN];
        mr.read_at(offset, &mut b)?;
        Grh::parse(&b)
    }

    /// The address to answer the sender with from port `port_num` of `ctx`:
    /// destination = the sender's GID, source = the GID this datagram was
    /// sent to (its index is looked up in the port's table, preferring
    /// RoCE v2 entries).
    pub fn reply_attr(&self, ctx: &Context, port_num: u8) -> Result<AhAttr> {
        let table = ctx.query_gid_table()?;
        let mut matching = table
            .iter()
            .filter(|e| e.port == port_num as u32 && e.gid == self.dgid);
        let first = matching.clone().next();
        let entry = matching
            .find(|e| e.gid_type == GidType::RoceV2)
            .or(first)
            .ok_or_else(|| {
                Error::invalid_as(
                    InvalidKind::NotPresent,
                    format!("port {port_num} has no GID {} to answer from", self.dgid),
                )
            })?;
        let sgid_index = u8::try_from(entry.index)
            .map_err(|_| Error::invalid_as(InvalidKind::TooLarge, "GID index above 255"))?;
        Ok(AhAttr {
            port_num,
            grh: Some(GlobalRoute {
                dgid: self.sgid,
                flow_label: self.flow_label,
                sgid_index,
                hop_limit: 0xff,
                traffic_class: self.traffic_class,
            }),
            ..Default::default()
        })
    }
}

/// Whether the 20-byte IPv4 header `h` has a valid checksum (its 16-bit
/// words, checksum included, sum to 0xffff in ones' complement).
fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h
        .chunks_exact(2)
        .take(10)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 header 10.0.0.1 -> 10.0.0.2, TOS 2, TTL 64, UDP, with its
    /// checksum.
    fn ipv4_header() -> [u8; 20] {
        let mut h = [
            0x45, 0x02, 0x00, 0x3c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0, 0, 10, 0, 0, 1, 10, 0,
            0, 2,
        ];
        let mut sum: u32 = h
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        h
    }

    #[test]
    fn ipv4_after_undefined_bytes() {
        // mlx5 leaves the 20 bytes before the header as they were: here
        // they look like the start of an IPv6 header, and the checksum
        // tells the IPv4 header.
        let mut b = [0x65u8; 40];
        b[20..].copy_from_slice(&ipv4_header());
        let g = Grh::parse(&b).unwrap();
        assert_eq!(g.network, NetworkHeader::Ipv4);
        assert_eq!(g.sgid, "::ffff:10.0.0.1".parse().unwrap());
        // A bad checksum: the bytes are an IPv6 header after all.
        b[31] ^= 1;
        assert_eq!(Grh::parse(&b).unwrap().network, NetworkHeader::Ipv6);
    }

    #[test]
    fn parses_roce_v2_ipv4() {
        let mut b = [0u8; 40];
        b[20..40].copy_from_slice(&[
            0x45, 0x02, 0x00, 0x3c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0, 0, 10, 0, 0, 1, 10, 0,
            0, 2,
        ]);
        let g = Grh::parse(&b).unwrap();
        assert_eq!(g.network, NetworkHeader::Ipv4);
        assert_eq!(g.sgid, "::ffff:10.0.0.1".parse().unwrap());
        assert_eq!(g.dgid, "::ffff:10.0.0.2".parse().unwrap());
        assert_eq!(
            (g.traffic_class, g.hop_limit, g.next_header, g.payload_len),
            (2, 64, 17, 40)
        );
    }

    #[test]
    fn parses_ipv6() {
        let mut b = [0u8; 40];
        b[..8].copy_from_slice(&[0x6a, 0xb1, 0x23, 0x45, 0x00, 0x20, 0x11, 0x07]);
        let s: Gid = "fe80::1".parse().unwrap();
        let d: Gid = "fe80::2".parse().unwrap();
        b[8..24].copy_from_slice(&s.0);
        b[24..40].copy_from_slice(&d.0);
        let g = Grh::parse(&b).unwrap();
        assert_eq!(g.network, NetworkHeader::Ipv6);
        assert_eq!((g.sgid, g.dgid), (s, d));
        assert_eq!(g.traffic_class, 0xab);
        assert_eq!(g.flow_label, 0x1_2345);
        assert_eq!((g.payload_len, g.next_header, g.hop_limit), (0x20, 0x11, 7));
    }

    #[test]
    fn refuses_short_and_garbage() {
        assert!(matches!(
            Grh::parse(&[0; 39]),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            Grh::parse(&[0; 40]),
            Err(Error::InvalidArgument(_))
        ));
        let mut b = [0u8; 40];
        b[0] = 0x45; // IPv4 header where the zero padding should be
        assert!(matches!(Grh::parse(&b), Err(Error::InvalidArgument(_))));
    }
}
