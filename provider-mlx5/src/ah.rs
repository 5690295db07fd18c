//! Address vectors: the 48-byte `mlx5_wqe_av` (`Av`) a UD send WQE
//! carries, built in user space from an address handle's attributes. The
//! Q_Key and remote QPN are filled per work request; the rest comes from
//! here. It travels as bytes (the provider-neutral `wr::UdDest` holds
//! `[u8; 48]`). On a RoCE port the kernel's address handle is created
//! too, for the destination MAC it resolves (`create_roce_ah`).

use std::os::fd::BorrowedFd;

use rverbs_abi::ah::{AhAttr, CreateAh, DestroyAh};
use rverbs_abi::cmd::exec;
use rverbs_abi::mlx5::prm::Av;
use rverbs_abi::mlx5::CreateAhResp;
use rverbs_abi::Errno;
use zerocopy::network_endian::{U16, U32};
use zerocopy::{FromZeros, IntoBytes};

use crate::uctx::Uctx;

/// What an address vector is built for: the port's link layer and, on
/// RoCE, the type of the source GID (only RoCE v2 carries a UDP source
/// port). The contract's `rverbs_provider::AhNetwork`, under
/// the name this module used.
pub use rverbs_provider::AhNetwork as AvKind;

/// Flow labels are 20 bits.
const FLOW_LABEL_MASK: u32 = 0xF_FFFF;
/// First port of the RoCE v2 source-port range (the top 2 bits set).
const ROCE_SPORT_MIN: u16 = 0xC000;

/// The device's code for an `IB_RATE_*` static rate: the smallest device
/// rate at least as fast, 0 (unlimited) for "port rate", for rates above
/// 120 Gb/s and for unknown values.
fn mlx5_rate(static_rate: u8) -> u8 {
    match static_rate {
        2 => 7,       // 2.5 Gb/s
        3 => 8,       // 10
        4 => 9,       // 30
        5 => 10,      // 5
        6 => 11,      // 20
        7 => 12,      // 40
        8 => 13,      // 60
        9 => 14,      // 80
        10 => 15,     // 120
        11 => 11,     // 14 -> 20
        12 => 13,     // 56 -> 60
        13 => 15,     // 112 -> 120
        15 | 19 => 9, // 25, 28 -> 30
        16 => 15,     // 100 -> 120
        20 => 13,     // 50 -> 60
        _ => 0,
    }
}

/// The RoCE v2 UDP source port for a flow: from the flow label when it is
/// set (its low 14 bits folded with its top 6), else a value derived from
/// the destination GID (libmlx5 picks a random one; a fixed one keeps a
/// flow on one path and makes the bytes reproducible).
fn udp_sport(attr: &AhAttr) -> u16 {
    let fl = attr.grh.flow_label & FLOW_LABEL_MASK;
    let folded = if fl != 0 {
        (fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14)
    } else {
        // FNV-1a over the destination GID and source GID index.
        let mut h: u32 = 0x811C_9DC5;
        for &b in attr.grh.dgid.iter().chain([attr.grh.sgid_index].iter()) {
            h = (h ^ u32::from(b)).wrapping_mul(0x0100_0193);
        }
        (h ^ (h >> 14)) & 0x3FFF
    };
    folded as u16 | ROCE_SPORT_MIN
}

/// Builds the address vector for `attr` of `kind` (on RoCE the
/// destination MAC is left zero for the caller to fill with `set_rmac`;
/// the GRH bit stays clear, since every RoCE packet has a network header).
pub fn av(attr: &AhAttr, kind: AvKind) -> [u8; 48] {
    let mut av = Av::default();
    let rate = mlx5_rate(attr.static_rate);
    let grh_bit: u32 = if kind != AvKind::Ib {
        av.stat_rate_sl = rate << 4 | (attr.sl & 0x7) << 1;
        if kind == AvKind::RoceV2 {
            av.rlid = U16::new(udp_sport(attr));
        }
        0
    } else {
        av.stat_rate_sl = rate << 4 | (attr.sl & 0xF);
        av.fl_mlid = attr.src_path_bits & 0x7F;
        av.rlid = U16::new(attr.dlid);
        1
    };
    if attr.is_global != 0 {
        av.tclass = attr.grh.traffic_class;
        av.hop_limit = attr.grh.hop_limit;
        av.grh_gid_fl = U32::new(
            grh_bit << 30
                | u32::from(attr.grh.sgid_index) << 20
                | (attr.grh.flow_label & FLOW_LABEL_MASK),
        );
        av.rgid = attr.grh.dgid;
    }
    zerocopy::transmute!(av)
}

/// Stores the destination MAC of a RoCE address vector.
pub fn set_rmac(av: &mut [u8; 48], mac: [u8; 6]) {
    let at = std::mem::offset_of!(Av, rmac);
    av[at..at + mac.len()].copy_from_slice(&mac);
}

/// Bytes of the mlx5 CREATE_AH answer up to the end of the MAC.
const AH_RESP_DMAC_END: usize = std::mem::offset_of!(CreateAhResp, reserved);

/// CREATE_AH for `cmd` on the command fd `fd` of context `uctx`, and the
/// destination MAC the kernel answers stored in `av`. Returns the AH's
/// handle (destroyed again if the answer is unusable).
pub(crate) fn create_roce_ah(
    fd: BorrowedFd<'_>,
    uctx: &Uctx,
    cmd: &CreateAh,
    av: &mut [u8; 48],
) -> Result<u32, Errno> {
    if !uctx.create_ah_answers_dmac() {
        return Err(Errno::EOPNOTSUPP);
    }
    let mut drv = CreateAhResp::new_zeroed();
    let resp = exec(fd, cmd, drv.as_mut_bytes())?;
    if (drv.response_length as usize) < AH_RESP_DMAC_END {
        // On failure (device removed) the kernel frees the AH with the
        // context.
        let _ = exec(
            fd,
            &DestroyAh {
                ah_handle: resp.ah_handle,
            },
            &mut [],
        );
        return Err(Errno::EPROTO);
    }
    set_rmac(av, drv.dmac);
    Ok(resp.ah_handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_abi::ah::GlobalRoute;

    fn attr() -> AhAttr {
        AhAttr {
            grh: GlobalRoute {
                dgid: [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
                flow_label: 0x12345,
                sgid_index: 3,
                hop_limit: 64,
                traffic_class: 0x20,
                reserved: 0,
            },
            dlid: 0x1234,
            sl: 0x1b,
            src_path_bits: 0xff,
            static_rate: 3,
            is_global: 1,
            port_num: 1,
            reserved: 0,
        }
    }

    #[test]
    fn ib_global() {
        let av = av(&attr(), AvKind::Ib);
        let mut want = [0u8; 48];
        want[12] = 8 << 4 | 0xb;
        want[13] = 0x7f;
        want[14..16].copy_from_slice(&[0x12, 0x34]);
        want[26] = 0x20;
        want[27] = 64;
        want[28..32].copy_from_slice(&(1u32 << 30 | 3 << 20 | 0x12345).to_be_bytes());
        want[32..48].copy_from_slice(&attr().grh.dgid);
        assert_eq!(av, want);
    }

    #[test]
    fn ib_local_has_no_grh() {
        let mut a = attr();
        a.is_global = 0;
        a.static_rate = 0;
        let av = av(&a, AvKind::Ib);
        assert_eq!(&av[12..16], &[0x0b, 0x7f, 0x12, 0x34]);
        assert!(av[16..].iter().all(|&b| b == 0));
    }

    #[test]
    fn roce_v2() {
        let mut av = av(&attr(), AvKind::RoceV2);
        assert_eq!(av[12], 8 << 4 | (0x1b & 7) << 1);
        assert_eq!(av[13], 0);
        // 0x12345: (0x2345) ^ (0x10000 >> 14 = 4) = 0x2341 | 0xC000.
        assert_eq!(&av[14..16], &0xE341u16.to_be_bytes());
        assert_eq!(&av[28..32], &(3u32 << 20 | 0x12345).to_be_bytes());
        set_rmac(&mut av, [1, 2, 3, 4, 5, 6]);
        assert_eq!(&av[20..26], &[1, 2, 3, 4, 5, 6]);
        // No flow label: a fixed port in the RoCE range.
        let mut a = attr();
        a.grh.flow_label = 0;
        let p1 = u16::from_be_bytes(super::av(&a, AvKind::RoceV2)[14..16].try_into().unwrap());
        let p2 = u16::from_be_bytes(super::av(&a, AvKind::RoceV2)[14..16].try_into().unwrap());
        assert_eq!(p1, p2);
        assert!(p1 >= 0xC000);
    }

    #[test]
    fn roce_v1_has_no_udp_port() {
        let av = av(&attr(), AvKind::RoceV1);
        assert_eq!(av[12], 8 << 4 | (0x1b & 7) << 1);
        assert_eq!(&av[13..16], &[0, 0, 0]);
        assert_eq!(&av[28..32], &(3u32 << 20 | 0x12345).to_be_bytes());
        assert_eq!(&av[32..48], &attr().grh.dgid);
    }

    #[test]
    fn rate_table() {
        let got: Vec<u8> = (0..=24).map(mlx5_rate).collect();
        assert_eq!(
            got,
            [
                0, 0, 7, 8, 9, 10, 11, 12, 13, 14, 15, 11, 13, 15, 0, 9, 15, 0, 0, 9, 13, 0, 0, 0,
                0
            ]
        );
    }
}
