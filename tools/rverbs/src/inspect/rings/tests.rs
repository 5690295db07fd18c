//! Unit tests of the maps parser, the ring reader, the classifier and the
//! entry decoders.

use rverbs_abi::rxe::{QueueBuf, RecvWqe, SendWqe, QUEUE_DATA_OFFSET};
use rverbs_abi::wr::{Sge, Wc};
use serde_json::json;
use zerocopy::{FromBytes, IntoBytes};

use super::super::guard::Budget;
use super::super::res::Snapshot;
use super::super::res::{CqRes, Owner, QpRes, SrqRes};
use super::classify::*;
use super::entries::*;
use super::ring::*;
use super::*;

fn header(log2: u32, mask: u32, prod: u32, cons: u32) -> Vec<u8> {
    let mut q = QueueBuf::read_from_bytes(&[0u8; QUEUE_DATA_OFFSET][..]).unwrap();
    q.log2_elem_size = log2;
    q.index_mask = mask;
    q.producer_index = prod;
    q.consumer_index = cons;
    q.as_bytes().to_vec()
}

fn ring(offset: u64, log2: u32, mask: u32, prod: u32, cons: u32) -> Ring {
    let mut data = header(log2, mask, prod, cons);
    data.resize(QUEUE_DATA_OFFSET + ((mask as usize + 1) << log2), 0);
    let len = data.len().next_multiple_of(4096) as u64;
    data.resize(len as usize, 0);
    let map = Mapping {
        start: 0x7000_0000 + offset,
        end: 0x7000_0000 + offset + len,
        offset,
        uverbs: "uverbs0".into(),
        dev: Some("rxe0".into()),
    };
    Ring {
        header: Header::parse(&data, len),
        data: Some(data),
        map,
        kind: Kind::Unknown,
        basis: Vec::new(),
        qpn: None,
        cqn: None,
        srqn: None,
    }
}

fn put(r: &mut Ring, slot: u32, bytes: &[u8]) {
    let es = r.header.as_ref().unwrap().elem_size();
    let off = QUEUE_DATA_OFFSET + slot as usize * es;
    r.data.as_mut().unwrap()[off..off + bytes.len()].copy_from_slice(bytes);
}

fn owner(pid: u32) -> Owner {
    Owner {
        pid: Some(pid),
        comm: None,
        kernel: false,
    }
}

#[test]
fn maps_lines() {
    let text = "\
7fe42bc7c000-7fe42bc85000 rw-s 0002e000 00:05 101                        /dev/infiniband/uverbs0
7fe42bc85000-7fe42bc96000 rw-s 0001c000 00:05 101                        /dev/infiniband/uverbs1
55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
7fe42c06e000-7fe42c06f000 rw-s 0002d000 00:05 101                        /dev/infiniband/rdma_cm
garbage line
7fe4-7fe3 rw-s 0 00:05 1 /dev/infiniband/uverbs0
";
    let m = parse_maps(text);
    assert_eq!(m.len(), 2);
    assert_eq!(
        (m[0].start, m[0].end, m[0].offset, m[0].uverbs.as_str()),
        (0x7fe42bc7c000, 0x7fe42bc85000, 0x2e000, "uverbs0")
    );
    assert_eq!(m[1].uverbs, "uverbs1");
    assert_eq!(m[0].len(), 0x9000);
}

#[test]
fn headers() {
    let h = Header::parse(&header(6, 511, 10, 500), 0x9000).unwrap();
    assert_eq!(
        (h.elem_size(), h.slots(), h.capacity(), h.fill()),
        (64, 512, 511, 22)
    );
    assert_eq!(h.queued().take(3).collect::<Vec<_>>(), vec![500, 501, 502]);
    assert_eq!(h.queued().last(), Some(9));
    // Does not fit the mapping, bad mask, bad element size, bad index.
    assert!(Header::parse(&header(6, 511, 0, 0), 0x8000).is_err());
    assert!(Header::parse(&header(6, 500, 0, 0), 0x9000).is_err());
    assert!(Header::parse(&header(2, 1, 0, 0), 0x9000).is_err());
    assert!(Header::parse(&header(30, 1, 0, 0), 0x9000).is_err());
    assert!(Header::parse(&header(6, 511, 512, 0), 0x9000).is_err());
    assert!(Header::parse(&[0; 10], 0x9000).is_err());
    assert!(Header::parse(&header(6, 0, 0, 0), 0x9000).is_err());
}

fn recv_wqe(wr_id: u64, len: u32) -> Vec<u8> {
    let mut w = RecvWqe {
        wr_id,
        ..Default::default()
    };
    w.dma.length = len;
    w.dma.resid = len;
    w.dma.num_sge = 1;
    let mut b = w.as_bytes().to_vec();
    b.extend_from_slice(
        Sge {
            addr: 0x7f00_1234_5000,
            length: len,
            lkey: 0x365,
        }
        .as_bytes(),
    );
    b
}

fn cqe(wr_id: u64, qpn: u32, opcode: u32) -> Vec<u8> {
    Wc {
        wr_id,
        opcode,
        byte_len: 4096,
        qp_num: qpn,
        port_num: 1,
        ..Default::default()
    }
    .as_bytes()
    .to_vec()
}

fn send_wqe(wr_id: u64, opcode: u32, flags: u32) -> Vec<u8> {
    let mut w = SendWqe::read_from_bytes(&[0u8; size_of::<SendWqe>()][..]).unwrap();
    w.wr.wr_id = wr_id;
    w.wr.opcode = opcode;
    w.wr.send_flags = flags;
    w.dma.length = 4096;
    w.dma.resid = 4096;
    w.dma.num_sge = 1;
    w.wr.rdma().remote_addr = 0xdead_0000;
    w.wr.rdma().rkey = 0x77;
    let mut b = w.as_bytes().to_vec();
    b.extend_from_slice(
        Sge {
            addr: 0x1000,
            length: 4096,
            lkey: 5,
        }
        .as_bytes(),
    );
    b
}

fn snapshot_for(pid: u32) -> Snapshot {
    Snapshot {
        qps: vec![QpRes {
            dev: "rxe0".into(),
            lqpn: 18,
            qp_type: Some(2),
            state: Some(3),
            owner: owner(pid),
            ..Default::default()
        }],
        cqs: vec![CqRes {
            dev: "rxe0".into(),
            cqn: Some(2),
            cqe: Some(511),
            owner: owner(pid),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// The rings of a paused `ibv_rc_pingpong` client: a CQ (512 x 128),
/// the SQ (2 x 512) and the RQ (512 x 64), in creation order.
fn pingpong_rings() -> Vec<Ring> {
    let mut cq = ring(0x1c000, 7, 511, 3, 1);
    put(&mut cq, 1, &cqe(1, 18, 128));
    put(&mut cq, 2, &cqe(2, 18, 0));
    let mut sq = ring(0x2d000, 9, 1, 1, 0);
    put(&mut sq, 0, &send_wqe(2, 2, 2));
    let mut rq = ring(0x2e000, 6, 511, 499, 0);
    for s in 0..499 {
        put(&mut rq, s, &recv_wqe(1, 4096));
    }
    // Listed out of order, as /proc may.
    vec![rq, cq, sq]
}

#[test]
fn classify_with_kernel_data() {
    let mut rings = pingpong_rings();
    classify(&mut rings, &snapshot_for(150), 150);
    let got: Vec<_> = rings.iter().map(|r| (r.kind, r.qpn, r.cqn)).collect();
    assert_eq!(
        got,
        vec![
            (Kind::Rq, Some(18), None),
            (Kind::Cq, None, Some(2)),
            (Kind::Sq, Some(18), None),
        ],
        "{:#?}",
        rings.iter().map(|r| &r.basis).collect::<Vec<_>>()
    );
    assert!(rings[0]
        .basis
        .iter()
        .any(|b| b == "all 499 queued elements decode plausibly"));
    // Another pid's resources say nothing about these rings: contents
    // decide the small ones.
    let mut rings = pingpong_rings();
    classify(&mut rings, &snapshot_for(7), 150);
    let kinds: Vec<_> = rings.iter().map(|r| r.kind).collect();
    assert_eq!(kinds, vec![Kind::Rq, Kind::Cq, Kind::Sq]);
    assert_eq!(rings[2].qpn, None);
}

#[test]
fn classify_srq_and_unknowns() {
    // An SRQ (64-byte elements) before two QPs that use it.
    let mut snap = snapshot_for(9);
    snap.qps.push(QpRes {
        lqpn: 19,
        ..snap.qps[0].clone()
    });
    snap.srqs.push(SrqRes {
        dev: "rxe0".into(),
        srqn: Some(1),
        qpns: vec![(18, 19)],
        owner: owner(9),
        ..Default::default()
    });
    let mut rings = vec![
        ring(0x1c000, 7, 511, 0, 0),
        ring(0x2d000, 6, 1023, 5, 0),
        ring(0x40000, 9, 15, 0, 0),
        ring(0x42000, 9, 15, 0, 0),
        // Right after QP 19's SQ, but QP 19 is on the SRQ.
        ring(0x44000, 6, 63, 0, 0),
    ];
    for s in 0..5 {
        put(&mut rings[1], s, &recv_wqe(s.into(), 100));
    }
    // Not a ring at all.
    let mut junk = ring(0x50000, 6, 63, 0, 0);
    junk.data.as_mut().unwrap()[..4].copy_from_slice(&40u32.to_ne_bytes());
    junk.header = Header::parse(junk.data.as_ref().unwrap(), junk.map.len());
    rings.push(junk);
    classify(&mut rings, &snap, 9);
    let got: Vec<_> = rings.iter().map(|r| (r.kind, r.qpn, r.srqn)).collect();
    assert_eq!(
        got,
        vec![
            (Kind::Cq, None, None),
            (Kind::RqOrSrq, None, None),
            (Kind::Sq, Some(18), None),
            (Kind::Sq, Some(19), None),
            (Kind::RqOrSrq, None, None),
            (Kind::Unknown, None, None),
        ]
    );
    assert!(rings[5].basis[0].starts_with("not an rxe ring"));
}

#[test]
fn decode_entries() {
    let mut rings = pingpong_rings();
    classify(&mut rings, &snapshot_for(150), 150);
    let sq = entries(&rings[2], Some(2));
    assert_eq!(sq.len(), 1);
    assert_eq!(sq[0]["opcode"], "SEND");
    assert_eq!(sq[0]["flags"], json!(["SIGNALED"]));
    assert_eq!(sq[0]["sges"][0]["length"], 4096);
    assert_eq!(sq[0].get("remote_addr"), None);
    let cq = entries(&rings[1], None);
    assert_eq!(cq.len(), 2);
    assert_eq!(
        (&cq[0]["opcode"], &cq[0]["status"]),
        (&json!("RECV"), &json!("SUCCESS"))
    );
    assert_eq!(cq[1]["wr_id"], 2);
    let rq = entries(&rings[0], None);
    assert_eq!(rq.len(), 499);
    assert_eq!(rq[0]["sges"][0]["lkey"], 0x365);
    let t = entry_text(Kind::Sq, &sq[0]);
    assert!(
        t.contains("SEND len 4096 flags SIGNALED state posted sge [0x1000+4096 lkey 0x5]"),
        "{t}"
    );
    // An RDMA write shows its remote end; inline data its bytes.
    let w = send_entry(3, &send_wqe(9, 0, 8 | 2), None);
    assert_eq!(
        (w["remote_addr"].as_u64(), w["rkey"].as_u64()),
        (Some(0xdead_0000), Some(0x77))
    );
    assert_eq!(w["flags"], json!(["SIGNALED", "INLINE"]));
    assert!(w["inline"]
        .as_str()
        .unwrap()
        .starts_with("0010000000000000"));
    // Short elements are reported, not a panic.
    assert!(send_entry(0, &[0; 8], None).get("error").is_some());
    assert!(recv_entry(0, &[0; 8]).get("error").is_some());
    assert!(cq_entry(0, &[0; 8]).get("error").is_some());
}

#[test]
fn plausibility() {
    assert!(plausible_recv(&{
        let mut b = recv_wqe(1, 100);
        b.resize(64, 0);
        b
    }));
    assert!(!plausible_recv(&cqe(1, 18, 128)));
    assert!(plausible_cqe(&cqe(1, 18, 128)));
    assert!(!plausible_cqe(&recv_wqe(1, 4096)));
    assert!(plausible_send(&send_wqe(1, 2, 2)));
    assert!(!plausible_send(&send_wqe(1, 99, 2)));
}

#[test]
fn a_ring_is_read_within_the_budget_and_no_further() {
    // A ring of 1024 slots of 64 bytes in this very process, inside a
    // "mapping" four times as long.
    let mut mem = header(6, 1023, 3, 1);
    let ring_len = mem.len() + (1024 << 6);
    mem.resize(ring_len * 4, 0);
    let start = mem.as_ptr() as u64;
    let map = Mapping {
        start,
        end: start + mem.len() as u64,
        offset: 0,
        uverbs: "uverbs0".into(),
        dev: None,
    };
    let pid = std::process::id();
    let mut b = Budget::default();
    let r = Ring::read(pid, map.clone(), &mut b).unwrap();
    // The ring, not the whole mapping.
    assert_eq!(r.data.as_ref().map(Vec::len), Some(ring_len));
    assert_eq!(r.header.as_ref().unwrap().fill(), 2);
    assert_eq!(b.used(), (QUEUE_DATA_OFFSET + ring_len) as u64);
    // Over a queue's share: the header only, and why.
    let mut b = Budget::new(4096, 1 << 20);
    let r = Ring::read(pid, map.clone(), &mut b).unwrap();
    assert!(r.data.is_none() && r.header.is_ok());
    assert!(
        r.basis[0].contains("not read (header only)")
            && r.basis[0].contains("--max-queue-bytes 4096"),
        "{:?}",
        r.basis
    );
    // The run's budget spent: not even the header.
    let mut b = Budget::new(1 << 20, 100);
    let r = Ring::read(pid, map, &mut b).unwrap();
    assert!(r.header.unwrap_err().contains("--max-total-bytes 100"));
    drop(mem);
}

#[test]
fn only_uverbs_nodes_by_number() {
    let text = "\
7f00-7f01 rw-s 0 00:05 1 /dev/infiniband/uverbs0
7f01-7f02 rw-s 0 00:05 1 /dev/infiniband/uverbs12
7f02-7f03 rw-s 0 00:05 1 /dev/infiniband/uverbs
7f03-7f04 rw-s 0 00:05 1 /dev/infiniband/uverbs0x
7f04-7f05 rw-s 0 00:05 1 /dev/infiniband/rdma_cm
";
    let m: Vec<String> = parse_maps(text).into_iter().map(|m| m.uverbs).collect();
    assert_eq!(m, ["uverbs0", "uverbs12"]);
}
