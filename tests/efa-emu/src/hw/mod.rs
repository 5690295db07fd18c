//! The emulated EFA device itself: a daemon thread (`emu_core::worker`)
//! that watches every QP's doorbells, reads the send descriptors libefa
//! wrote into the LLQ and the receive descriptors of the receive rings,
//! delivers SRD and UD messages between QPs of this process, executes
//! RDMA READ and WRITE on SRD QPs, and writes completion entries with the
//! phase bit into the CQ rings.
//!
//! It is strict where the device is: a descriptor without the meta bit,
//! FIRST and LAST, with the wrong phase, an unknown operation, more
//! buffers than the device has, inline data over 32 bytes, an unknown
//! key, an address outside its region or a message over the MTU (SEND) or
//! `max_rdma_size` (RDMA) completes with the status EFA reports for it,
//! and the log (`EFA_EMU_LOG=1`) names the field. A doorbell past the
//! ring is ignored and logged. UD is unreliable: a datagram to a QP that
//! does not exist, has another Q_Key, is not ready or has no receive
//! posted is dropped and the send completes successfully; SRD reports
//! those (`REMOTE_ERROR_BAD_DEST_QPN`, and `REMOTE_ERROR_RNR` unless
//! the QP's RNR retry is 7, "retry for ever", in which case the send
//! waits for a receive). EFA's UD receives carry no GRH. A QP moved to
//! ERR completes what it holds with `FLUSHED`.
//!
//! Descriptors and completion entries are read and written through the
//! layouts of `rverbs_abi::efa::io` (checked against rdma-core's
//! definitions by rverbs-abi's tests); what the device does with them is
//! this module's own and shares no code with our provider.
//!
//! Locking: each pass takes the [`crate::emu::EMU`] lock, finds every
//! object it touches in the live state, and releases the lock; the
//! emulator's own mappings of the rings live exactly as long as their
//! objects, and user buffers are checked to be mapped before each copy.

mod exec;

use std::collections::BTreeMap;
use std::sync::atomic::{fence, AtomicU32, AtomicU8, Ordering};
use std::sync::Once;

use rverbs_abi::efa::io::{self, cdesc_flags, RxCdescEx};
use rverbs_abi::qp::qp_state;
use zerocopy::IntoBytes;

use crate::emu::{self, Emu};
use crate::{device, log, record};

/// QP `h`'s creation ordinal among the live QPs (QP numbers are handed
/// out in creation order).
fn ordinal(e: &Emu, h: u32) -> usize {
    let Some(qpn) = e.qps.get(&h).map(|q| q.qpn) else {
        return usize::MAX;
    };
    e.qps.values().filter(|q| q.qpn < qpn).count()
}

static START: Once = Once::new();

/// Starts the device thread once per process (at the first QP). Not in
/// unit tests, which drive commands with fake buffers.
pub fn start() {
    if cfg!(test) {
        return;
    }
    emu_core::worker::start(&START, "efa-emu-device", {
        let mut hw = Hw::default();
        move || {
            let mut e = emu::lock();
            hw.step(&mut e)
        }
    });
}

/// What the device keeps per QP.
#[derive(Debug, Clone, Copy, Default)]
struct QpHw {
    /// Send descriptors consumed.
    sq_cc: u32,
    /// Receive descriptors consumed.
    rq_cc: u32,
    /// The QP's reset count these counters belong to.
    resets: u32,
}

/// The device's state beside the emulator's objects.
#[derive(Debug, Default)]
pub struct Hw {
    qps: BTreeMap<u32, QpHw>,
    /// Completion entries written, per CQ handle.
    cq_pc: BTreeMap<u32, u32>,
}

/// Descriptors one QP may execute in one pass (then the others get a
/// turn).
const BUDGET: u32 = 16;

impl Hw {
    /// One pass over every QP; whether anything was done.
    fn step(&mut self, e: &mut Emu) -> bool {
        self.qps.retain(|h, _| e.qps.contains_key(h));
        self.cq_pc.retain(|h, _| e.cqs.contains_key(h));
        let handles: Vec<u32> = e.qps.keys().copied().collect();
        let mut busy = false;
        for h in handles {
            busy |= self.qp_pass(e, h);
        }
        busy
    }

    /// The counters of QP `h`, restarted if it was reset since.
    fn qp_hw(&mut self, e: &Emu, h: u32) -> QpHw {
        let resets = e.qps.get(&h).map_or(0, |q| q.resets);
        let q = self.qps.entry(h).or_default();
        if q.resets != resets {
            *q = QpHw {
                resets,
                ..QpHw::default()
            };
        }
        *q
    }

    /// Executes what QP `h` has posted.
    fn qp_pass(&mut self, e: &Emu, h: u32) -> bool {
        let Some(qp) = e.qps.get(&h) else {
            return false;
        };
        let state = qp.state;
        if state == qp_state::ERR {
            return self.flush(e, h);
        }
        if state != qp_state::RTS {
            return false;
        }
        let Some(llq) = qp.llq_key.and_then(|k| region_host(e, qp.ctx, k)) else {
            return false;
        };
        let Some(db) = region_host(e, qp.ctx, qp.db_key) else {
            return false;
        };
        let wqe_cnt = qp.sq_ring_size / io::TX_WQE_SIZE as u32;
        let posted = read_db(db + u64::from(device::SQ_DB_OFFSET));
        let mut busy = false;
        for _ in 0..BUDGET {
            let hwq = self.qp_hw(e, h);
            let pending = posted.wrapping_sub(hwq.sq_cc as u16);
            if pending == 0 {
                break;
            }
            if u32::from(pending) > wqe_cnt {
                log::line(format_args!(
                    "qp {}: send doorbell {posted} is {pending} descriptors past {}, more than the ring's {wqe_cnt}: ignored",
                    qp.qpn, hwq.sq_cc as u16
                ));
                break;
            }
            let index = hwq.sq_cc % wqe_cnt;
            let phase = ((hwq.sq_cc / wqe_cnt) & 1) as u8;
            let wqe = read_tx(llq + u64::from(index) * io::TX_WQE_SIZE as u64);
            if record::descriptors() {
                record::descriptor("tx", ordinal(e, h), index, wqe.as_bytes());
            }
            match exec::send(e, self, h, &wqe, phase) {
                exec::Done::Wait => break,
                exec::Done::Completed(status) => {
                    if let Some(q) = self.qps.get_mut(&h) {
                        q.sq_cc = q.sq_cc.wrapping_add(1);
                    }
                    if wqe.meta.ctrl2 & io::tx_ctrl2::COMP_REQ != 0 {
                        self.push_send_cqe(e, h, wqe.meta.req_id.get(), status);
                    }
                    busy = true;
                }
            }
        }
        busy
    }

    /// A QP in ERR: everything posted completes with `FLUSHED`.
    fn flush(&mut self, e: &Emu, h: u32) -> bool {
        let Some(qp) = e.qps.get(&h) else {
            return false;
        };
        let Some(db) = region_host(e, qp.ctx, qp.db_key) else {
            return false;
        };
        let mut busy = false;
        if let Some(llq) = qp.llq_key.and_then(|k| region_host(e, qp.ctx, k)) {
            let wqe_cnt = qp.sq_ring_size / io::TX_WQE_SIZE as u32;
            let posted = read_db(db + u64::from(device::SQ_DB_OFFSET));
            loop {
                let hwq = self.qp_hw(e, h);
                let pending = posted.wrapping_sub(hwq.sq_cc as u16);
                if pending == 0 || u32::from(pending) > wqe_cnt {
                    break;
                }
                let index = hwq.sq_cc % wqe_cnt;
                let wqe = read_tx(llq + u64::from(index) * io::TX_WQE_SIZE as u64);
                if let Some(q) = self.qps.get_mut(&h) {
                    q.sq_cc = q.sq_cc.wrapping_add(1);
                }
                self.push_send_cqe(e, h, wqe.meta.req_id.get(), io::comp_status::FLUSHED);
                busy = true;
            }
        }
        while let Some(rx) = self.take_recv(e, h) {
            let mut c = RxCdescEx::default();
            c.base.common.req_id = rx.req_id;
            c.base.common.status = io::comp_status::FLUSHED;
            self.push_recv_cqe(e, h, c, 0);
            busy = true;
        }
        busy
    }

    /// The next receive descriptor QP `h` posted, consumed; `None` if it
    /// has none (or no receive ring).
    fn take_recv(&mut self, e: &Emu, h: u32) -> Option<io::RxDesc> {
        let qp = e.qps.get(&h)?;
        let ring = region_host(e, qp.ctx, qp.rq_key?)?;
        let db = region_host(e, qp.ctx, qp.db_key)?;
        let cnt = qp.rq_ring_size / 16;
        let posted = read_db(db + u64::from(device::RQ_DB_OFFSET));
        let hwq = self.qp_hw(e, h);
        let pending = posted.wrapping_sub(hwq.rq_cc as u16);
        if pending == 0 || cnt == 0 {
            return None;
        }
        if u32::from(pending) > cnt {
            log::line(format_args!(
                "qp {}: receive doorbell {posted} is past the ring's {cnt} descriptors: ignored",
                qp.qpn
            ));
            return None;
        }
        let at = ring + u64::from(hwq.rq_cc % cnt) * 16;
        let mut d = io::RxDesc::default();
        // SAFETY: `at` is a 16-byte descriptor inside the receive ring's
        // mapping of ours, alive while the QP is (we hold the lock).
        unsafe {
            std::ptr::copy_nonoverlapping(at as *const u8, d.as_mut_bytes().as_mut_ptr(), 16);
        }
        if let Some(q) = self.qps.get_mut(&h) {
            q.rq_cc = q.rq_cc.wrapping_add(1);
        }
        if record::descriptors() {
            record::descriptor("rx", ordinal(e, h), hwq.rq_cc % cnt, d.as_bytes());
        }
        Some(d)
    }

    /// Writes a send completion of QP `h` to its send CQ.
    fn push_send_cqe(&mut self, e: &Emu, h: u32, req_id: u16, status: u8) {
        let Some(qp) = e.qps.get(&h) else {
            return;
        };
        let mut c = RxCdescEx::default();
        c.base.common.req_id = req_id.into();
        c.base.common.status = status;
        c.base.common.qp_num = (qp.qpn as u16).into();
        let flags = io::queue_type::SEND << cdesc_flags::Q_TYPE_SHIFT;
        self.push(e, qp.send_cq, c, flags);
    }

    /// Writes a receive completion of QP `h` (common fields other than the
    /// queue type and the QP number filled in) to its receive CQ.
    fn push_recv_cqe(&mut self, e: &Emu, h: u32, mut c: RxCdescEx, flags: u8) {
        let Some(qp) = e.qps.get(&h) else {
            return;
        };
        c.base.common.qp_num = (qp.qpn as u16).into();
        let flags = flags | (io::queue_type::RECV << cdesc_flags::Q_TYPE_SHIFT);
        self.push(e, qp.recv_cq, c, flags);
    }

    /// Writes one completion entry at CQ `cq`'s producer index: every byte
    /// but the flags first, then (released after them) the flags with the
    /// phase of this pass over the ring (1 on the first).
    fn push(&mut self, e: &Emu, cq: u32, c: RxCdescEx, flags: u8) {
        let Some(q) = e.cqs.get(&cq) else {
            return;
        };
        let Some(ring) = region_host(e, q.ctx, q.key) else {
            return;
        };
        let pc = self.cq_pc.entry(cq).or_default();
        let index = *pc % q.entries;
        let phase = u8::from((*pc / q.entries) & 1 == 0);
        *pc = pc.wrapping_add(1);
        let size = q.entry_size as usize;
        let mut bytes = [0u8; 32];
        bytes.copy_from_slice(c.as_bytes());
        let at = ring + u64::from(index) * u64::from(q.entry_size);
        // SAFETY: entry `index` of the ring mapping of ours (alive while
        // the CQ is; we hold the lock), `size` (16 or 32) bytes; the flags
        // byte (offset 3) is written last, atomically, so libefa, which
        // reads the phase first, never sees a half-written entry as new.
        unsafe {
            let p = at as *mut u8;
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, 3);
            std::ptr::copy_nonoverlapping(bytes.as_ptr().add(4), p.add(4), size - 4);
            fence(Ordering::Release);
            (*(p.add(3) as *const AtomicU8)).store(flags | phase, Ordering::Release);
        }
    }
}

/// The emulator's own mapping of region `key` of context `ctx`.
fn region_host(e: &Emu, ctx: u64, key: u64) -> Option<u64> {
    let r = e.contexts.get(&ctx)?.ucontext.as_ref()?.regions.get(&key)?;
    Some(r.host)
}

/// A doorbell: the 16-bit producer counter the library wrote, read
/// atomically, later reads ordered after it.
fn read_db(addr: u64) -> u16 {
    // SAFETY: an aligned word (offsets 0 and 4) of a doorbell page mapping
    // of ours, alive while its QP is; the application writes it
    // concurrently, hence the atomic load.
    let v = unsafe { (*(addr as *const AtomicU32)).load(Ordering::Acquire) };
    v as u16
}

/// A send descriptor of the LLQ, copied out.
fn read_tx(addr: u64) -> io::TxWqe {
    let mut w = io::TxWqe::default();
    // SAFETY: a 64-byte descriptor inside the LLQ mapping of ours, alive
    // while its QP is (we hold the lock); the library wrote it before the
    // doorbell we read with acquire ordering.
    unsafe {
        std::ptr::copy_nonoverlapping(addr as *const u8, w.as_mut_bytes().as_mut_ptr(), 64);
    }
    w
}
