//! Unit tests of the WQE decoder, the header builders and the CQE layout.

use rverbs_abi::mlx5::prm::Av;
use rverbs_abi::qp::qp_type;
use zerocopy::network_endian::U32;
use zerocopy::{FromBytes, IntoBytes};

use super::roce::{grh_of, roce_header, RoceL3};
use super::*;

#[test]
fn decodes_an_rc_send_wqe() {
    // The worked example of the notes (section 2.8).
    let b = [
        0x00, 0x00, 0x05, 0x0a, 0x00, 0x01, 0x23, 0x02, 0, 0, 0, 0x08, 0, 0, 0, 0, 0x00, 0x00,
        0x00, 0x40, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x00,
    ];
    let w = decode_send(&b, qp_type::RC).unwrap();
    assert_eq!(
        (w.opcode, w.pi, w.qpn, w.ds, w.fm_ce_se),
        (op::SEND, 5, 0x123, 2, 8)
    );
    assert_eq!(
        w.data,
        Data::Segs(vec![Seg {
            len: 64,
            lkey: 0x1234,
            addr: 0x7f00_0000_1000
        }])
    );
}

#[test]
fn decodes_inline_and_atomic() {
    let mut b = vec![0u8; 64];
    b[3] = op::ATOMIC_CS;
    b[4..8].copy_from_slice(&((7u32 << 8) | 4).to_be_bytes());
    b[16..24].copy_from_slice(&0x1000u64.to_be_bytes());
    b[24..28].copy_from_slice(&0xabcdu32.to_be_bytes());
    b[32..40].copy_from_slice(&5u64.to_be_bytes());
    b[40..48].copy_from_slice(&6u64.to_be_bytes());
    b[48..52].copy_from_slice(&8u32.to_be_bytes());
    let w = decode_send(&b, qp_type::RC).unwrap();
    assert_eq!(w.raddr, Some((0x1000, 0xabcd)));
    assert_eq!(w.atomic, Some((5, 6)));
    let mut i = vec![0u8; 32];
    i[3] = op::SEND;
    i[4..8].copy_from_slice(&2u32.to_be_bytes());
    i[16..20].copy_from_slice(&(0x8000_0003u32).to_be_bytes());
    i[20..23].copy_from_slice(b"abc");
    let w = decode_send(&i, qp_type::RC).unwrap();
    assert_eq!(w.data, Data::Inline(b"abc".to_vec()));
    assert!(decode_send(&i[..16], qp_type::RC).is_none());
}

#[test]
fn receive_lists_stop_at_the_terminator() {
    let mut b = vec![0u8; 48];
    b[0..4].copy_from_slice(&16u32.to_be_bytes());
    b[4..8].copy_from_slice(&0x205u32.to_be_bytes());
    b[20..24].copy_from_slice(&0x100u32.to_be_bytes());
    let s = decode_recv(&b, 3);
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].len, s[0].lkey), (16, 0x205));
    assert_eq!(decode_recv(&b, 1).len(), 1);
}

#[test]
fn grh_only_for_global_address_vectors() {
    let mut av = [0u8; 48];
    let parse = |b: &[u8; 48]| Av::read_from_bytes(b).unwrap();
    assert!(grh_of(&parse(&av), 10).is_none());
    av[26] = 3;
    av[27] = 64;
    av[28..32].copy_from_slice(&((1u32 << 30) | 0x12345).to_be_bytes());
    av[32..48].copy_from_slice(&[9; 16]);
    let g = grh_of(&parse(&av), 10).unwrap();
    assert_eq!(
        &g[0..4],
        &((6u32 << 28) | (3 << 20) | 0x12345).to_be_bytes()
    );
    assert_eq!(u16::from_be_bytes([g[4], g[5]]), 12 + 8 + 12 + 4);
    assert_eq!((g[6], g[7]), (0x1b, 64));
    assert_eq!(&g[8..24], &crate::device::gid(0).unwrap());
    assert_eq!(&g[24..40], &[9; 16]);
}

/// A RoCE address vector from GID entry `sgid` to `dgid`.
fn roce_av(sgid: u32, dgid: [u8; 16], rmac: [u8; 6]) -> Av {
    let mut av = Av::read_from_bytes(&[0u8; 48]).unwrap();
    av.tclass = 0x20;
    av.hop_limit = 9;
    av.grh_gid_fl = U32::new((sgid << 20) | 0x12345);
    av.rgid = dgid;
    av.rmac = rmac;
    av
}

#[test]
fn roce_headers_by_gid_type() {
    use crate::device::{roce_gid, PORT_MAC};
    let g = |i| roce_gid(i).unwrap().gid;
    // RoCE v2 over IPv4: the header at 20, checksum valid.
    let n = roce_header(&roce_av(3, g(3), PORT_MAC), 100)
        .unwrap()
        .unwrap();
    assert_eq!((n.from, n.roce), (20, Some(RoceL3::Ipv4)));
    let h = &n.bytes[20..];
    assert_eq!(&h[..4], &[0x45, 0x20, 0, 20 + 8 + 12 + 8 + 100 + 4]);
    assert_eq!((h[6], h[8], h[9]), (0x40, 9, 17));
    assert_eq!(&h[12..16], &[192, 0, 2, 1]);
    assert_eq!(&h[16..20], &[192, 0, 2, 1]);
    let folded = h
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    assert_eq!((folded & 0xffff) + (folded >> 16), 0xffff, "checksum");
    // RoCE v2 over IPv6: UDP follows; v1: an IB GRH.
    let n = roce_header(&roce_av(5, g(5), PORT_MAC), 5)
        .unwrap()
        .unwrap();
    assert_eq!((n.from, n.roce), (0, Some(RoceL3::Ipv6)));
    assert_eq!(
        &n.bytes[..4],
        &((6u32 << 28) | (0x20 << 20) | 0x12345).to_be_bytes()
    );
    assert_eq!(
        u16::from_be_bytes([n.bytes[4], n.bytes[5]]),
        8 + 12 + 8 + 8 + 4
    );
    assert_eq!((n.bytes[6], n.bytes[7]), (17, 9));
    assert_eq!((&n.bytes[8..24], &n.bytes[24..40]), (&g(5)[..], &g(5)[..]));
    let n = roce_header(&roce_av(0, g(0), PORT_MAC), 5)
        .unwrap()
        .unwrap();
    assert_eq!((n.roce, n.bytes[6]), (Some(RoceL3::Grh), 0x1b));
    assert_eq!(u16::from_be_bytes([n.bytes[4], n.bytes[5]]), 12 + 8 + 8 + 4);
}

#[test]
fn roce_datagrams_the_port_does_not_take() {
    use crate::device::{roce_gid, PORT_MAC};
    let g = |i| roce_gid(i).unwrap().gid;
    let mut other_mac = PORT_MAC;
    other_mac[0] ^= 0x80;
    assert_eq!(roce_header(&roce_av(3, g(3), other_mac), 1), Ok(None));
    let mut stranger = g(3);
    stranger[15] = 7;
    assert_eq!(roce_header(&roce_av(3, stranger, PORT_MAC), 1), Ok(None));
    // An IPv4 source towards an IPv6 destination, and the reverse.
    assert_eq!(roce_header(&roce_av(3, g(5), PORT_MAC), 1), Ok(None));
    assert_eq!(roce_header(&roce_av(5, g(3), PORT_MAC), 1), Ok(None));
    // An empty source entry: the send fails.
    assert_eq!(
        roce_header(&roce_av(6, g(3), PORT_MAC), 1),
        Err(synd::LOCAL_QP_OP)
    );
}

#[test]
fn cqe_fields_land_where_libmlx5_reads_them() {
    let mut c = Cqe::new(cqe_op::REQ_ERR);
    c.sop_qpn(op::SEND, 0x123)
        .wqe_counter(0x0102)
        .syndrome(synd::REMOTE_ACCESS)
        .byte_cnt(9)
        .srqn_uidx(3);
    // Offsets spelled out: an independent check of the shared layout.
    let c = c.0.as_bytes();
    assert_eq!(c[63], 0xd0);
    assert_eq!(&c[56..62], &[0x0a, 0x00, 0x01, 0x23, 0x01, 0x02]);
    assert_eq!(c[55], 0x13);
    assert_eq!(&c[44..48], &[0, 0, 0, 9]);
    assert_eq!(&c[32..36], &[0, 0, 0, 3]);
}
