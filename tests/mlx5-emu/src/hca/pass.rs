//! One pass of the HCA: CQ arms, CQE writes, running and flushing the
//! send queues.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use rverbs_abi::mlx5::prm::{self, CtrlSeg};
use rverbs_abi::qp::qp_state;

use super::cqe::{write_cqe, Cqe};
use super::decode::{be32, decode_send, seg};
use super::events::{async_event, notify, responder_fatal, set_err};
use super::user::{read_dbrec, read_ring};
use super::{cqe_op, event, synd, view, Fail, Hw, QpHw, QpView};
use crate::emu::Emu;

impl Hw {
    /// One pass over every object; true if anything happened.
    pub(super) fn step(&mut self, e: &mut Emu) -> bool {
        self.qps.retain(|h, _| e.qps.contains_key(h));
        self.srqs.retain(|h, _| e.srqs.contains_key(h));
        self.cqs.retain(|h, _| e.cqs.contains_key(h));
        // RESIZE_CQ may have advanced a producer counter.
        for (h, cq) in &e.cqs {
            self.cqs.entry(*h).or_default().pi = cq.hw_pi;
        }
        crate::record::note_objects(e);
        let mut busy = self.arms(e);
        let handles: Vec<u32> = e.qps.keys().copied().collect();
        for h in handles {
            busy |= self.run_qp(e, h);
        }
        busy
    }

    /// Detects CQ arm doorbells.
    fn arms(&mut self, e: &mut Emu) -> bool {
        let mut busy = false;
        let cqs: Vec<u32> = e.cqs.keys().copied().collect();
        for h in cqs {
            let Some(cq) = e.cqs.get(&h) else { continue };
            let word = read_dbrec(cq.db_addr + 4);
            let slot = e
                .uar_maps()
                .find(|(_, m)| m.ctx == cq.ctx && m.index == cq.uar_page && m.len >= 0x28)
                .map(|(a, _)| a as u64 + 0x20);
            let cqn = cq.cqn;
            let st = self.cqs.entry(h).or_default();
            let mut arm = None;
            if word != st.arm_word {
                st.arm_word = word;
                st.ever_armed = true;
                arm = Some(word);
            }
            if let Some(slot) = slot {
                // SAFETY: the UAR page is mapped (recorded in `uar_maps`
                // under the lock) and the 8-byte slot at 0x20 is aligned;
                // the application stores to it with 64-bit writes.
                let a = unsafe { &*(slot as *const AtomicU64) };
                let v = a.load(Ordering::Acquire);
                let b = v.to_ne_bytes();
                if be32(&b, 4) == cqn
                    && a.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    && !st.ever_armed
                {
                    st.ever_armed = true;
                    arm = Some(be32(&b, 0));
                }
            }
            if let Some(w) = arm {
                busy = true;
                let sol = w & (1 << 24) != 0;
                let ci = w & 0xff_ffff;
                // The arm's sequence number (bits 29..28) must be the
                // count of events this CQ raised: one made before the
                // latest event was read (libmlx5 steps its number in
                // mlx5_cq_event, for each event read) is stale, and
                // ignored (notes, 4.8).
                if (w >> 28) & 3 != st.sn & 3 {
                    crate::log::line(format_args!(
                        "cq {h}: stale arm ignored (sn {}, expected {})",
                        (w >> 28) & 3,
                        st.sn & 3
                    ));
                    continue;
                }
                if !sol && st.pi.wrapping_sub(ci) & 0xff_ffff != 0 {
                    st.armed = None;
                    st.sn = st.sn.wrapping_add(1);
                    notify(e, h);
                } else {
                    st.armed = Some(sol);
                }
            }
        }
        busy
    }

    /// Free CQE slots in CQ `h`.
    fn cq_room(&self, e: &Emu, h: u32) -> u32 {
        let Some(cq) = e.cqs.get(&h) else { return 0 };
        let pi = self.cqs.get(&h).map_or(0, |s| s.pi);
        let ci = read_dbrec(cq.db_addr) & 0xff_ffff;
        let used = pi.wrapping_sub(ci) & 0xff_ffff;
        cq.ring.entries.saturating_sub(used)
    }

    /// Writes a CQE to CQ `h`; `event` says whether it may fire a
    /// solicited-only arm.
    ///
    /// A CQE that finds the CQ full (the consumer index, as the
    /// application last wrote it to the doorbell record, a whole ring
    /// behind) is not written: the CQ enters the error state and a CQ_ERR
    /// async event names it, once; from then on the CQ takes no CQE
    /// (those already in the ring stay). This is the CQ Error affiliated
    /// asynchronous error of the InfiniBand specification (vol 1, 11.6.3.1
    /// in release 1.2.1 numbering: "CQ overrun", after which no more CQEs
    /// are posted to the CQ), what mlx5 raises as its CQ_ERROR event
    /// (syndrome CQ overrun) and the kernel forwards as
    /// `IB_EVENT_CQ_ERR`. The QP whose completion was lost is not moved
    /// to an error state here (the specification's Local Work Queue
    /// Catastrophic Error for later users of the CQ is not modelled).
    pub(super) fn push(&mut self, e: &mut Emu, h: u32, cqe: &Cqe, event: bool) {
        let Some(cq) = e.cqs.get(&h) else { return };
        let (ring, ctx, user_handle) = (cq.ring, cq.ctx, cq.user_handle());
        if self.cqs.get(&h).is_some_and(|s| s.error) {
            return;
        }
        if self.cq_room(e, h) == 0 {
            self.cqs.entry(h).or_default().error = true;
            crate::log::line(format_args!("cq {h}: overrun, CQ in error"));
            async_event(e, ctx, user_handle, event::CQ_ERR);
            return;
        }
        let st = self.cqs.entry(h).or_default();
        let idx = u64::from(st.pi & (ring.entries - 1));
        let addr = ring.buf + idx * u64::from(ring.cqe_size) + u64::from(ring.cqe_size - 64);
        let owner = u8::from(st.pi & ring.entries != 0);
        // A CQE in the live ring of CQ `h` (checked to exist under the lock).
        write_cqe(addr, cqe, owner);
        st.pi = st.pi.wrapping_add(1);
        if let Some(c) = e.cqs.get_mut(&h) {
            c.hw_pi = st.pi;
        }
        if let Some(sol) = st.armed {
            if !sol || event {
                st.armed = None;
                st.sn = st.sn.wrapping_add(1);
                notify(e, h);
            }
        }
    }

    /// The counters of QP `q`, restarted if it was reset since.
    pub(super) fn qp_hw(&mut self, q: &QpView) -> &mut QpHw {
        let fresh = QpHw {
            resets: q.resets,
            ..QpHw::default()
        };
        let st = self.qps.entry(q.h).or_insert(fresh);
        if q.state == qp_state::RESET || st.resets != q.resets {
            *st = fresh;
        }
        st
    }

    /// Runs the send queue of QP `h` (and flushes it in ERR).
    fn run_qp(&mut self, e: &mut Emu, h: u32) -> bool {
        let Some(q) = view(e, h) else { return false };
        self.qp_hw(&q);
        if q.state == qp_state::RESET {
            return false;
        }
        if q.state == qp_state::ERR {
            return self.flush(e, &q);
        }
        if q.state != qp_state::RTS || q.sq.wqe_cnt == 0 {
            return false;
        }
        let mut busy = false;
        for _ in 0..32 {
            let st = self.qps.get(&h).copied().unwrap_or_default();
            let db = read_dbrec(q.db + 4) & 0xffff;
            if st.sq_pc & 0xffff == db {
                break;
            }
            if st.rnr.is_some_and(|(t, _)| Instant::now() < t) {
                break;
            }
            let off = u64::from(st.sq_pc & (q.sq.wqe_cnt - 1)) * 64;
            let ctrl = read_ring(&q.sq, off, size_of::<CtrlSeg>());
            let ds = seg::<CtrlSeg>(&ctrl, 0).map_or(0, |c| (c.qpn_ds.get() & 0x3f) as usize);
            let bbs = (ds.max(1) as u32).div_ceil(4);
            let bytes = read_ring(&q.sq, off, ds * 16);
            let wqe = decode_send(&bytes, q.ty)
                .filter(|w| u32::from(w.pi) == st.sq_pc & 0xffff && w.qpn == q.qpn);
            let result = match &wqe {
                Some(w) => self.execute(e, &q, w),
                None => Err(Fail::Err(synd::LOCAL_QP_OP, None)),
            };
            let pi = (st.sq_pc & 0xffff) as u16;
            let opcode = wqe.as_ref().map_or(0, |w| w.opcode);
            if !matches!(result, Err(Fail::Stall)) {
                crate::record::wqe(crate::record::Kind::Sq, h, u32::from(pi), db, &bytes);
            }
            match result {
                Err(Fail::Stall) => break,
                Ok(byte_cnt) => {
                    let signaled = q.sq_sig_all
                        || wqe
                            .as_ref()
                            .is_some_and(|w| w.fm_ce_se & prm::WQE_CTRL_CQ_UPDATE != 0);
                    if signaled {
                        let mut c = Cqe::new(cqe_op::REQ);
                        c.sop_qpn(opcode, q.qpn)
                            .wqe_counter(pi)
                            .srqn_uidx(if q.v1 { q.uidx } else { 0 })
                            .byte_cnt(byte_cnt);
                        self.push(e, q.send_cq, &c, false);
                    }
                }
                Err(Fail::Err(s, _) | Fail::Nak(s, _)) => {
                    let mut c = Cqe::new(cqe_op::REQ_ERR);
                    c.sop_qpn(opcode, q.qpn)
                        .wqe_counter(pi)
                        .srqn_uidx(if q.v1 { q.uidx } else { 0 })
                        .syndrome(s);
                    self.push(e, q.send_cq, &c, true);
                    set_err(e, h);
                    match result {
                        Err(Fail::Err(_, Some(b))) => {
                            let (d, r, rs) = *b;
                            self.resp_err(e, &d, &r, rs);
                        }
                        Err(Fail::Nak(s, dh)) => responder_fatal(e, dh, s),
                        _ => {}
                    }
                }
            }
            busy = true;
            let st = self.qps.entry(h).or_default();
            st.sq_pc = st.sq_pc.wrapping_add(bbs);
            st.rnr = None;
            if view(e, h).is_none_or(|v| v.state != qp_state::RTS) {
                break;
            }
        }
        busy
    }

    /// Flushes the outstanding send and receive WQEs of a QP in ERR.
    fn flush(&mut self, e: &mut Emu, q: &QpView) -> bool {
        let mut busy = false;
        let mut st = *self.qp_hw(q);
        let uidx = if q.v1 { q.uidx } else { 0 };
        if q.sq.wqe_cnt > 0 {
            for _ in 0..64 {
                let db = read_dbrec(q.db + 4) & 0xffff;
                if st.sq_pc & 0xffff == db {
                    break;
                }
                let off = u64::from(st.sq_pc & (q.sq.wqe_cnt - 1)) * 64;
                let ctrl = read_ring(&q.sq, off, size_of::<CtrlSeg>());
                let ctrl: CtrlSeg = seg(&ctrl, 0).unwrap_or_default();
                let ds = ctrl.qpn_ds.get() & 0x3f;
                let mut c = Cqe::new(cqe_op::REQ_ERR);
                c.sop_qpn(ctrl.opmod_idx_opcode.get() as u8, q.qpn)
                    .wqe_counter((st.sq_pc & 0xffff) as u16)
                    .srqn_uidx(uidx)
                    .syndrome(synd::WR_FLUSH);
                self.push(e, q.send_cq, &c, true);
                st.sq_pc = st.sq_pc.wrapping_add(ds.max(1).div_ceil(4));
                busy = true;
            }
        }
        if q.srq.is_none() && q.rq.wqe_cnt > 0 {
            for _ in 0..64 {
                let db = read_dbrec(q.db) & 0xffff;
                if st.rq_cons & 0xffff == db {
                    break;
                }
                let mut c = Cqe::new(cqe_op::RESP_ERR);
                c.sop_qpn(0, q.qpn)
                    .wqe_counter((st.rq_cons & 0xffff) as u16)
                    .srqn_uidx(uidx)
                    .syndrome(synd::WR_FLUSH);
                self.push(e, q.recv_cq, &c, true);
                st.rq_cons = st.rq_cons.wrapping_add(1);
                busy = true;
            }
        }
        self.qps.insert(q.h, st);
        busy
    }
}
