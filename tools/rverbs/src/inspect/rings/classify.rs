//! Telling rings apart: plausibility checks on entries and matching rings
//! to the QPs, SRQs and CQs of the resource snapshot.

use std::collections::{BTreeMap, HashSet};

use rverbs_abi::rxe::{RecvWqe, SendWqe};
use rverbs_abi::wr::{Sge, Wc};
use zerocopy::FromBytes;

use super::ring::{Kind, Ring};
use crate::inspect::res::{Qpn, Snapshot};

/// Whether `e` reads as a receive WQE of an element of its size: zero
/// reserved words, an SGE count that fits, and a length equal to the sum of
/// the SGE lengths.
pub fn plausible_recv(e: &[u8]) -> bool {
    let Ok((w, rest)) = RecvWqe::read_from_prefix(e) else {
        return false;
    };
    let room = rest.len() / size_of::<Sge>();
    if w.reserved != 0 || w.padding != 0 || w.dma.reserved != 0 || w.dma.num_sge as usize > room {
        return false;
    }
    let sum: u64 = sges(rest, w.dma.num_sge)
        .iter()
        .map(|s| u64::from(s.length))
        .sum();
    sum == u64::from(w.dma.length)
}

/// Whether `e` reads as a work completion: known status and opcode, no
/// vendor error on success, a 24-bit QP number, zero reserved byte.
pub fn plausible_cqe(e: &[u8]) -> bool {
    let Ok((c, _)) = Wc::read_from_prefix(e) else {
        return false;
    };
    let opcode_ok = c.opcode <= 9 || (128..=129).contains(&c.opcode);
    c.status <= 21
        && opcode_ok
        && (c.status != 0 || c.vendor_err == 0)
        && c.qp_num < (1 << 24)
        && c.src_qp < (1 << 24)
        && c.reserved == 0
        && c.sl < 16
}

/// Whether `e` reads as a send WQE.
pub fn plausible_send(e: &[u8]) -> bool {
    let Ok((w, rest)) = SendWqe::read_from_prefix(e) else {
        return false;
    };
    let inline = w.wr.send_flags & rverbs_abi::wr::send_flags::INLINE != 0;
    w.wr.reserved == 0
        && (w.wr.opcode <= 15 || (0x20..=0x22).contains(&w.wr.opcode))
        && w.wr.send_flags < 32
        && w.state <= 4
        && (inline || w.dma.num_sge as usize <= rest.len() / size_of::<Sge>())
}

/// The first `n` SGEs in `b` (as many as fit).
pub(super) fn sges(b: &[u8], n: u32) -> Vec<Sge> {
    b.chunks_exact(size_of::<Sge>())
        .take(n as usize)
        .filter_map(|c| Sge::read_from_bytes(c).ok())
        .collect()
}

/// How the queued elements of a classified ring read: `(plausible, total)`.
fn content_check(r: &Ring) -> (usize, usize) {
    let Ok(h) = &r.header else { return (0, 0) };
    let check: fn(&[u8]) -> bool = match r.kind {
        Kind::Sq => plausible_send,
        Kind::Cq => plausible_cqe,
        k if k.is_recv() => plausible_recv,
        _ => return (0, 0),
    };
    let mut ok = 0;
    let mut n = 0;
    for slot in h.queued() {
        if let Some(e) = r.elem(slot) {
            n += 1;
            ok += usize::from(check(e));
        }
    }
    (ok, n)
}

/// Classify the rings of process `pid` (see the module docs), using the
/// kernel's resource dump `res` where it knows the process.
pub fn classify(rings: &mut [Ring], res: &Snapshot, pid: u32) {
    let send_min = size_of::<SendWqe>();
    let recv_min = size_of::<RecvWqe>();
    let cqe_min = size_of::<Wc>();
    // Devices in first-seen order, each with its rings in offset order.
    let mut by_dev: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in rings.iter_mut().enumerate() {
        if let Err(why) = &r.header {
            let why = format!("not an rxe ring: {why}");
            r.basis.push(why);
            continue;
        }
        let dev = r.map.dev.clone().unwrap_or_else(|| r.map.uverbs.clone());
        by_dev.entry(dev).or_default().push(i);
    }
    for (dev, mut idx) in by_dev {
        idx.sort_by_key(|&i| rings[i].map.offset);
        let mine = |o: &crate::inspect::res::Owner| o.pid == Some(pid);
        let mut cqs: Vec<_> = res
            .cqs
            .iter()
            .filter(|c| c.dev == dev && mine(&c.owner))
            .collect();
        cqs.sort_by_key(|c| c.cqn);
        let mut qps: Vec<_> = res
            .qps
            .iter()
            .filter(|q| q.dev == dev && mine(&q.owner))
            .collect();
        qps.sort_by_key(|q| q.lqpn);
        let mut srqs: Vec<_> = res
            .srqs
            .iter()
            .filter(|s| s.dev == dev && mine(&s.owner))
            .collect();
        srqs.sort_by_key(|s| s.srqn);
        let known = !cqs.is_empty() || !qps.is_empty();

        // 1. CQs by capacity.
        let mut used_cq = HashSet::new();
        for &i in &idx {
            let h = *rings[i].header.as_ref().expect("filtered above");
            if h.elem_size() < cqe_min || h.elem_size() > 256 {
                continue;
            }
            if let Some((k, c)) = cqs
                .iter()
                .enumerate()
                .find(|(k, c)| !used_cq.contains(k) && c.cqe == Some(h.capacity()))
            {
                used_cq.insert(k);
                let r = &mut rings[i];
                r.kind = Kind::Cq;
                r.cqn = c.cqn;
                r.basis.push(format!(
                    "capacity {} = cqe of CQ {} (kernel resource dump)",
                    h.capacity(),
                    crate::inspect::res::opt(c.cqn)
                ));
            }
        }

        // 2. Send queues by element size.
        let mut sqs = Vec::new();
        for &i in &idx {
            let h = *rings[i].header.as_ref().expect("filtered above");
            if rings[i].kind == Kind::Unknown && h.elem_size() >= send_min {
                rings[i].kind = Kind::Sq;
                rings[i].basis.push(format!(
                    "{}-byte elements hold a send WQE ({send_min} bytes)",
                    h.elem_size()
                ));
                sqs.push(i);
            }
        }
        if !qps.is_empty() && sqs.len() == qps.len() {
            for (&i, q) in sqs.iter().zip(&qps) {
                rings[i].qpn = Some(q.lqpn);
                rings[i].basis.push(format!(
                    "QP {} by creation order ({} QPs, {} send queues)",
                    Qpn(q.lqpn),
                    qps.len(),
                    sqs.len()
                ));
            }
        } else if !sqs.is_empty() {
            for &i in &sqs {
                rings[i].basis.push(format!(
                    "owner unknown: the kernel lists {} QPs of this process for {} send queues",
                    qps.len(),
                    sqs.len()
                ));
            }
        }

        // 3. A QP's receive queue follows its send queue.
        for (pos, &i) in idx.iter().enumerate() {
            if rings[i].kind != Kind::Sq {
                continue;
            }
            let qpn = rings[i].qpn;
            if qpn.is_some_and(|n| srqs.iter().any(|s| s.has_qp(n))) {
                rings[i].basis.push("its QP receives from an SRQ".into());
                continue;
            }
            let Some(&j) = idx.get(pos + 1) else { continue };
            let hj = *rings[j].header.as_ref().expect("filtered above");
            if rings[j].kind == Kind::Unknown
                && hj.elem_size() >= recv_min
                && hj.elem_size() < send_min
            {
                if !known && !looks_recv_not_cq(&rings[j]) {
                    continue;
                }
                rings[j].kind = Kind::Rq;
                rings[j].qpn = qpn;
                rings[j].basis.push(format!(
                    "{}-byte elements hold a receive WQE, mapped right after {}",
                    hj.elem_size(),
                    qpn.map_or("a send queue".into(), |n| format!(
                        "QP {}'s send queue",
                        Qpn(n)
                    ))
                ));
            }
        }

        // 4./5. Other rings.
        let unmatched_cqs = cqs.len() > used_cq.len();
        let mut recv = Vec::new();
        for &i in &idx {
            let h = *rings[i].header.as_ref().expect("filtered above");
            if rings[i].kind != Kind::Unknown || h.elem_size() < recv_min {
                continue;
            }
            let cq_sized = h.elem_size() >= cqe_min && h.elem_size() <= 256;
            if cq_sized && (unmatched_cqs || !known) && looks_cq(&rings[i]) {
                rings[i].kind = Kind::Cq;
                rings[i].basis.push(if known {
                    "contents read as work completions; a CQ of this process matched no ring by capacity".into()
                } else {
                    "contents read as work completions (no kernel data)".into()
                });
            } else if known || looks_recv_not_cq(&rings[i]) {
                recv.push(i);
            }
        }
        for (k, &i) in recv.iter().enumerate() {
            let r = &mut rings[i];
            if srqs.is_empty() {
                r.kind = Kind::Rq;
                r.basis.push(if known {
                    "receive-WQE-sized, not a CQ of this process, and it owns no SRQ".into()
                } else {
                    "contents read as receive WQEs (no kernel data)".into()
                });
            } else if recv.len() == srqs.len() {
                r.kind = Kind::Srq;
                r.srqn = srqs[k].srqn;
                r.basis.push(format!(
                    "SRQ {} by creation order ({} SRQs, {} receive rings)",
                    crate::inspect::res::opt(srqs[k].srqn),
                    srqs.len(),
                    recv.len()
                ));
            } else {
                r.kind = Kind::RqOrSrq;
                r.basis
                    .push("receive-WQE-sized; the process owns SRQs and QPs".into());
            }
        }
        for &i in &idx {
            if rings[i].kind == Kind::Unknown && rings[i].basis.is_empty() {
                rings[i]
                    .basis
                    .push("matches no queue of this process".into());
            }
        }
    }
    // The contents of the queued elements, as a check of the above.
    for r in rings.iter_mut() {
        let (ok, n) = content_check(r);
        if n > 0 {
            r.basis.push(if ok == n {
                format!("all {n} queued elements decode plausibly")
            } else {
                format!("only {ok} of {n} queued elements decode plausibly")
            });
        }
    }
}

/// The non-zero elements read as receive WQEs more often than as work
/// completions.
fn looks_recv_not_cq(r: &Ring) -> bool {
    let (mut recv, mut cq) = (0, 0);
    for e in r.elems().filter(|e| e.iter().any(|&b| b != 0)) {
        recv += usize::from(plausible_recv(e));
        cq += usize::from(plausible_cqe(e));
    }
    recv > cq
}

fn looks_cq(r: &Ring) -> bool {
    let (mut recv, mut cq) = (0, 0);
    for e in r.elems().filter(|e| e.iter().any(|&b| b != 0)) {
        recv += usize::from(plausible_recv(e));
        cq += usize::from(plausible_cqe(e));
    }
    cq > recv
}
