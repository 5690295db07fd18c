//! Executing one send WQE against its responder, and taking receives.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rverbs_abi::mlx5::prm::{self, DataSeg, SrqNextSeg};
use rverbs_abi::qp::{qp_state, qp_type};

use super::cqe::Cqe;
use super::decode::{decode_recv, seg, Data, SendWqe};
use super::events::set_err;
use super::roce::{grh_of, roce_header, Net};
use super::user::{read_dbrec, read_user, write_user};
use super::{
    cqe_op, op, synd, view, Fail, Hw, QpView, Recv, LOCAL_WRITE, REMOTE_ATOMIC, REMOTE_READ,
    REMOTE_WRITE,
};
use crate::emu::Emu;

impl Hw {
    /// Executes one WQE; returns the requester byte count.
    pub(super) fn execute(&mut self, e: &mut Emu, q: &QpView, w: &SendWqe) -> Result<u32, Fail> {
        let local_err = |s| Fail::Err(s, None);
        let rdma = matches!(w.opcode, op::RDMA_WRITE | op::RDMA_WRITE_IMM);
        let send = matches!(w.opcode, op::SEND | op::SEND_IMM);
        let ok = match q.ty {
            qp_type::RC => {
                send || rdma || matches!(w.opcode, op::RDMA_READ | op::ATOMIC_CS | op::ATOMIC_FA)
            }
            qp_type::UC => send || rdma,
            qp_type::UD => send,
            _ => false,
        };
        if !ok {
            return Err(local_err(synd::LOCAL_QP_OP));
        }
        let reads_into_local = matches!(w.opcode, op::RDMA_READ | op::ATOMIC_CS | op::ATOMIC_FA);
        // Local side: gather (or validate the scatter targets).
        let (payload, locals) = match &w.data {
            Data::Inline(b) => {
                if reads_into_local {
                    return Err(local_err(synd::LOCAL_QP_OP));
                }
                (b.clone(), Vec::new())
            }
            Data::Segs(segs) => {
                let need = if reads_into_local { LOCAL_WRITE } else { 0 };
                let mut locals = Vec::with_capacity(segs.len());
                for s in segs {
                    let user = translate(e, q.ctx, q.pd, s.lkey, s.addr, s.bytes(), need, false)
                        .ok_or(local_err(synd::LOCAL_PROT))?;
                    locals.push((user, s.bytes()));
                }
                let mut payload = Vec::new();
                if !reads_into_local {
                    for &(a, l) in &locals {
                        payload.extend_from_slice(&read_user(a, l as usize));
                    }
                }
                (payload, locals)
            }
        };
        if payload.len() as u64 > u64::from(crate::device::MAX_MSG_SZ) {
            return Err(local_err(synd::LOCAL_LENGTH));
        }
        // The destination.
        let dqpn = match w.ud {
            Some((n, _)) => n,
            None => q.dest,
        };
        let reliable = q.ty == qp_type::RC;
        let lost = if reliable {
            Err(local_err(synd::TRANSPORT_RETRY))
        } else {
            Ok(0)
        };
        let Some(d) = e.qp_by_qpn(dqpn).map(|(h, _)| h).and_then(|h| view(e, h)) else {
            return lost;
        };
        if d.ty != q.ty || !(d.state == qp_state::RTR || d.state == qp_state::RTS) {
            return lost;
        }
        if let Some((_, qkey)) = w.ud {
            if qkey != d.qkey {
                return Ok(0);
            }
        }
        // A class C error at an RC responder (see [`Fail::Nak`]); UC drops
        // the request silently.
        let nak = |s| Fail::Nak(s, d.h);
        let remote_err = |s| if reliable { Err(nak(s)) } else { Ok(0) };
        let len = payload.len() as u32;
        match w.opcode {
            op::RDMA_WRITE | op::RDMA_WRITE_IMM => {
                let (va, rkey) = w.raddr.unwrap_or_default();
                if d.access & REMOTE_WRITE == 0 {
                    return remote_err(synd::REMOTE_ACCESS);
                }
                let Some(user) = translate(e, d.ctx, d.pd, rkey, va, len, REMOTE_WRITE, true)
                else {
                    return remote_err(synd::REMOTE_ACCESS);
                };
                if w.opcode == op::RDMA_WRITE {
                    write_user(user, &payload);
                    return Ok(len);
                }
                let r = match self.take_recv(e, &d) {
                    Some(r) => r,
                    None => return self.rnr(q),
                };
                write_user(user, &payload);
                let mut c = Cqe::new(cqe_op::RESP_WR_IMM);
                c.byte_cnt(len)
                    .imm(w.imm)
                    .rqpn(q.qpn)
                    .slid(crate::device::lid())
                    .srqn_uidx(resp_uidx(&d))
                    .sop_qpn(0, d.qpn)
                    .wqe_counter(r.counter);
                if w.fm_ce_se & prm::WQE_CTRL_SOLICITED != 0 {
                    c.solicited();
                }
                self.push(e, d.recv_cq, &c, w.fm_ce_se & prm::WQE_CTRL_SOLICITED != 0);
                Ok(len)
            }
            op::SEND | op::SEND_IMM => {
                // The network header a UD receive starts with: on an
                // InfiniBand port a GRH if the address vector has one
                // (otherwise the 40-byte area is consumed but not
                // written); on a RoCE port always one, and a datagram the
                // port does not take is dropped before it consumes a
                // receive (see `roce_header`).
                let data = len + if w.opcode == op::SEND_IMM { 4 } else { 0 };
                let net = match w.av.as_ref() {
                    Some(av) if crate::device::link() == crate::device::Link::Eth => {
                        match roce_header(av, data) {
                            Ok(Some(h)) => Some(h),
                            Ok(None) => return Ok(0),
                            Err(s) => return Err(local_err(s)),
                        }
                    }
                    Some(av) => grh_of(av, data).map(|bytes| Net {
                        bytes,
                        from: 0,
                        roce: None,
                    }),
                    None => None,
                };
                let r = match self.take_recv(e, &d) {
                    Some(r) => r,
                    None if q.ty == qp_type::RC => return self.rnr(q),
                    None => return Ok(0),
                };
                let grh = if q.ty == qp_type::UD { 40u32 } else { 0 };
                // Scatter: skip the GRH area for UD, then the payload.
                let mut targets = Vec::new();
                for s in &r.segs {
                    match translate(
                        e,
                        d.ctx,
                        d.pd,
                        s.lkey,
                        s.addr,
                        s.bytes(),
                        LOCAL_WRITE,
                        false,
                    ) {
                        Some(u) => targets.push((u, s.bytes())),
                        None if reliable => {
                            return Err(Fail::Err(
                                synd::REMOTE_OP,
                                Some(Box::new((d, r, synd::LOCAL_PROT))),
                            ))
                        }
                        None => {
                            self.resp_err(e, &d, &r, synd::LOCAL_PROT);
                            return Ok(0);
                        }
                    }
                }
                let cap: u64 = targets.iter().map(|t| u64::from(t.1)).sum();
                if cap < u64::from(len + grh) {
                    if reliable {
                        return Err(Fail::Err(
                            synd::REMOTE_INVAL_REQ,
                            Some(Box::new((d, r, synd::LOCAL_LENGTH))),
                        ));
                    }
                    self.resp_err(e, &d, &r, synd::LOCAL_LENGTH);
                    return Ok(0);
                }
                let message;
                let (mut skip, mut src) = match &net {
                    Some(n) => {
                        message = [&n.bytes[n.from..], &payload[..]].concat();
                        (n.from, &message[..])
                    }
                    None => (grh as usize, &payload[..]),
                };
                for (a, l) in targets {
                    let l = l as usize;
                    let s = skip.min(l);
                    skip -= s;
                    let n = (l - s).min(src.len());
                    write_user(a + s as u64, &src[..n]);
                    src = &src[n..];
                }
                let opc = if w.opcode == op::SEND {
                    cqe_op::RESP_SEND
                } else {
                    cqe_op::RESP_SEND_IMM
                };
                let mut c = Cqe::new(opc);
                c.byte_cnt(len + grh)
                    .rqpn(q.qpn)
                    .slid(crate::device::lid())
                    .srqn_uidx(resp_uidx(&d))
                    .sop_qpn(0, d.qpn)
                    .wqe_counter(r.counter);
                if w.opcode == op::SEND_IMM {
                    c.imm(w.imm);
                }
                if let Some(n) = &net {
                    c.grh();
                    if let Some(l3) = n.roce {
                        c.roce_l3(l3);
                    }
                }
                if w.fm_ce_se & prm::WQE_CTRL_SOLICITED != 0 {
                    c.solicited();
                }
                self.push(e, d.recv_cq, &c, w.fm_ce_se & prm::WQE_CTRL_SOLICITED != 0);
                Ok(len)
            }
            op::RDMA_READ => {
                let (va, rkey) = w.raddr.unwrap_or_default();
                let total: u64 = locals.iter().map(|l| u64::from(l.1)).sum();
                if d.access & REMOTE_READ == 0 {
                    return Err(nak(synd::REMOTE_ACCESS));
                }
                let Some(user) =
                    translate(e, d.ctx, d.pd, rkey, va, total as u32, REMOTE_READ, true)
                else {
                    return Err(nak(synd::REMOTE_ACCESS));
                };
                let data = read_user(user, total as usize);
                let mut src = &data[..];
                for (a, l) in locals {
                    write_user(a, &src[..l as usize]);
                    src = &src[l as usize..];
                }
                Ok(total as u32)
            }
            _ => {
                // Atomics.
                let (va, rkey) = w.raddr.unwrap_or_default();
                let (swap_add, compare) = w.atomic.unwrap_or_default();
                if locals.len() != 1 || locals[0].1 != 8 {
                    return Err(local_err(synd::LOCAL_LENGTH));
                }
                if d.access & REMOTE_ATOMIC == 0 {
                    return Err(nak(synd::REMOTE_ACCESS));
                }
                if va % 8 != 0 {
                    return Err(nak(synd::REMOTE_INVAL_REQ));
                }
                let Some(user) = translate(e, d.ctx, d.pd, rkey, va, 8, REMOTE_ATOMIC, true) else {
                    return Err(nak(synd::REMOTE_ACCESS));
                };
                if user % 8 != 0 {
                    return Err(nak(synd::REMOTE_INVAL_REQ));
                }
                // SAFETY: `user` is an 8-byte aligned address inside a live
                // MR with remote atomic access (checked above).
                let a = unsafe { &*(user as *const AtomicU64) };
                let old = if w.opcode == op::ATOMIC_CS {
                    match a.compare_exchange(compare, swap_add, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(v) | Err(v) => v,
                    }
                } else {
                    a.fetch_add(swap_add, Ordering::AcqRel)
                };
                write_user(locals[0].0, &old.to_ne_bytes());
                Ok(8)
            }
        }
    }

    /// Completes receive `r` of QP `d` in error and moves `d` to ERR.
    pub(super) fn resp_err(&mut self, e: &mut Emu, d: &QpView, r: &Recv, s: u8) {
        let mut c = Cqe::new(cqe_op::RESP_ERR);
        c.sop_qpn(0, d.qpn)
            .wqe_counter(r.counter)
            .srqn_uidx(resp_uidx(d))
            .syndrome(s);
        self.push(e, d.recv_cq, &c, true);
        set_err(e, d.h);
    }

    /// No receive posted on an RC responder: retry later or give up.
    fn rnr(&mut self, q: &QpView) -> Result<u32, Fail> {
        let st = self.qp_hw(q);
        let left = match st.rnr {
            Some((_, n)) => n,
            None => q.rnr_retry,
        };
        if left == 0 {
            return Err(Fail::Err(synd::RNR_RETRY, None));
        }
        let next = if left == 7 { 7 } else { left - 1 };
        st.rnr = Some((Instant::now() + Duration::from_micros(500), next));
        Err(Fail::Stall)
    }

    /// Takes the next posted receive of QP `d` (its RQ or SRQ).
    fn take_recv(&mut self, e: &Emu, d: &QpView) -> Option<Recv> {
        if let Some(sh) = d.srq {
            let srq = e.srqs.get(&sh)?;
            let wq = srq.wq();
            let max_gs = srq.max_gs() as usize;
            let count = read_dbrec(srq.db_addr()) & 0xffff;
            let st = self.srqs.entry(sh).or_default();
            if st.consumed & 0xffff == count || wq.wqe_cnt == 0 {
                return None;
            }
            let idx = u32::from(st.head) & (wq.wqe_cnt - 1);
            let bytes = read_user(wq.buf + (u64::from(idx) << wq.wqe_shift), 1 << wq.wqe_shift);
            let next = size_of::<SrqNextSeg>();
            let segs = decode_recv(bytes.get(next..).unwrap_or_default(), max_gs);
            let used = (next
                + (segs.len() + usize::from(segs.len() < max_gs)) * size_of::<DataSeg>())
            .min(bytes.len());
            crate::record::wqe(crate::record::Kind::Srq, sh, idx, count, &bytes[..used]);
            st.head = seg::<SrqNextSeg>(&bytes, 0).map_or(0, |n| n.next_wqe_index.get());
            st.consumed = st.consumed.wrapping_add(1);
            return Some(Recv {
                segs,
                counter: idx as u16,
            });
        }
        if d.rq.wqe_cnt == 0 {
            return None;
        }
        let count = read_dbrec(d.db) & 0xffff;
        let st = self.qp_hw(d);
        if st.rq_cons & 0xffff == count {
            return None;
        }
        let idx = st.rq_cons & (d.rq.wqe_cnt - 1);
        let size = 1usize << d.rq.wqe_shift;
        let bytes = read_user(d.rq.buf + (u64::from(idx) << d.rq.wqe_shift), size);
        // With signatures, the WQE starts with a next segment.
        let skip = if d.sig { size_of::<SrqNextSeg>() } else { 0 };
        let dseg = size_of::<DataSeg>();
        let segs = decode_recv(bytes.get(skip..).unwrap_or_default(), (size - skip) / dseg);
        let counter = (st.rq_cons & 0xffff) as u16;
        let used = (skip + (segs.len() + 1) * dseg).min(bytes.len());
        crate::record::wqe(crate::record::Kind::Rq, d.h, idx, count, &bytes[..used]);
        st.rq_cons = st.rq_cons.wrapping_add(1);
        Some(Recv { segs, counter })
    }
}

/// The srqn_uidx field of a responder CQE for QP `d`.
fn resp_uidx(d: &QpView) -> u32 {
    if d.v1 {
        d.uidx
    } else {
        d.srqn
    }
}

/// Looks a key up in context `ctx` and PD `pd` and translates
/// `[va, va + len)` to a user address, if the MR grants `need`.
#[allow(clippy::too_many_arguments)]
fn translate(
    e: &Emu,
    ctx: u64,
    pd: u32,
    key: u32,
    va: u64,
    len: u32,
    need: u32,
    remote: bool,
) -> Option<u64> {
    let mr = e
        .mrs
        .values()
        .find(|m| m.ctx == ctx && (if remote { m.rkey } else { m.lkey }) == key)?;
    if mr.pd() != pd || mr.access() & need != need {
        return None;
    }
    mr.translate(va, u64::from(len))
}
