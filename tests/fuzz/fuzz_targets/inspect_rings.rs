//! `rverbs inspect --pid`: another process's rxe rings as read from its
//! memory, which it may scribble on at will. Rings are synthesized from
//! the input (a header with any element size, mask and indices, or raw
//! bytes as the header; elements from the input), next to a kernel
//! resource snapshot of QPs, CQs and SRQs with any numbers; then
//! classified, and every queued entry decoded and printed. Also the text
//! of `/proc/PID/maps`.
#![no_main]

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use rverbs_cli::inspect::res::{CqRes, Owner, QpRes, Snapshot, SrqRes};
use rverbs_cli::inspect::rings::{self, Header, Kind, Mapping, Ring};
use rverbs_abi::rxe::QUEUE_DATA_OFFSET;

/// The inspected process.
const PID: u32 = 4242;

fn owner(u: &mut Unstructured<'_>) -> Result<Owner> {
    Ok(Owner {
        pid: Some(if u.ratio(1, 8)? { PID + 1 } else { PID }),
        comm: None,
        kernel: false,
    })
}

fn dev(u: &mut Unstructured<'_>) -> Result<String> {
    Ok(if u.ratio(1, 4)? { "rxe1" } else { "rxe0" }.into())
}

fn snapshot(u: &mut Unstructured<'_>) -> Result<Snapshot> {
    let mut s = Snapshot::default();
    for _ in 0..u.int_in_range(0..=4)? {
        s.qps.push(QpRes {
            dev: dev(u)?,
            lqpn: u.arbitrary()?,
            qp_type: u.arbitrary()?,
            state: u.arbitrary()?,
            owner: owner(u)?,
            ..Default::default()
        });
    }
    for _ in 0..u.int_in_range(0..=3)? {
        s.cqs.push(CqRes {
            dev: dev(u)?,
            cqn: u.arbitrary()?,
            cqe: u.arbitrary()?,
            owner: owner(u)?,
            ..Default::default()
        });
    }
    for _ in 0..u.int_in_range(0..=2)? {
        let mut qpns = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            qpns.push((u.arbitrary()?, u.arbitrary()?));
        }
        s.srqs.push(SrqRes {
            dev: dev(u)?,
            srqn: u.arbitrary()?,
            qpns,
            owner: owner(u)?,
            ..Default::default()
        });
    }
    Ok(s)
}

/// A QueueBuf header: log2 element size at 0, index mask at 4, producer
/// index at 128, consumer index at 256 (native endian).
fn header(log2: u32, mask: u32, prod: u32, cons: u32) -> Vec<u8> {
    let mut h = vec![0u8; QUEUE_DATA_OFFSET];
    h[0..4].copy_from_slice(&log2.to_ne_bytes());
    h[4..8].copy_from_slice(&mask.to_ne_bytes());
    h[128..132].copy_from_slice(&prod.to_ne_bytes());
    h[256..260].copy_from_slice(&cons.to_ne_bytes());
    h
}

fn ring(u: &mut Unstructured<'_>) -> Result<Ring> {
    let mut data = if u.ratio(1, 8)? {
        // Raw bytes as the whole mapping.
        let n = u.int_in_range(0..=2048)?;
        u.bytes(n.min(u.len()))?.to_vec()
    } else {
        let log2: u32 = u.int_in_range(3..=9)?;
        let slots_log: u32 = u.int_in_range(0..=6)?;
        let mask = (1u32 << slots_log) - 1;
        let index_mask = if u.ratio(1, 16)? { u.arbitrary()? } else { !0 };
        let prod = u.arbitrary::<u32>()? & (mask | !index_mask);
        let cons = u.arbitrary::<u32>()? & (mask | !index_mask);
        let mut d = header(log2, mask, prod, cons);
        let body = (mask as usize + 1) << log2;
        let take = body.min(u.len());
        d.extend_from_slice(u.bytes(take)?);
        d.resize(QUEUE_DATA_OFFSET + body, 0);
        d
    };
    let len = if u.ratio(1, 8)? {
        u.int_in_range(0..=data.len() as u64 * 2)?
    } else {
        data.len() as u64
    };
    let offset = u64::from(u.arbitrary::<u16>()?) << 12;
    let start = 0x7000_0000_0000u64 + offset;
    let map = Mapping {
        start,
        end: start + len,
        offset,
        uverbs: "uverbs0".into(),
        dev: if u.ratio(1, 8)? { None } else { Some(dev(u)?) },
    };
    let header = Header::parse(&data, len);
    if u.ratio(1, 16)? {
        data.clear();
    }
    Ok(Ring {
        map,
        header,
        data: if u.ratio(1, 16)? { None } else { Some(data) },
        kind: Kind::Unknown,
        basis: Vec::new(),
        qpn: None,
        cqn: None,
        srqn: None,
    })
}

fn run(u: &mut Unstructured<'_>) -> Result<()> {
    let snap = snapshot(u)?;
    let mut rs = Vec::new();
    for _ in 0..u.int_in_range(1..=4)? {
        rs.push(ring(u)?);
    }
    rings::classify(&mut rs, &snap, PID);
    for r in &rs {
        if let Ok(h) = &r.header {
            let _ = (h.elem_size(), h.slots(), h.capacity(), h.fill());
            assert!(h.queued().count() as u32 == h.fill());
        }
        let qp_type = u.arbitrary()?;
        for v in rings::entries(r, qp_type) {
            let _ = rings::entry_text(r.kind, &v);
        }
    }
    let rest = u.bytes(u.len())?;
    let _ = rings::parse_maps(&String::from_utf8_lossy(rest));
    Ok(())
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
