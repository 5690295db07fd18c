//! EFA queue pairs: CREATE_QP with EFA's driver data (ring sizes, SRD as
//! the driver QP type), the kernel's rings mapped by key (the LLQ, the
//! receive ring, the doorbell page), and the two queues the library posts
//! to. Geometry as libefa's: the send queue holds a power of two of
//! 64-byte descriptors, at least the device's `min_sq_wr`; the receive
//! ring a power of two of 16-byte descriptors, one per receive buffer.
//!
//! Sends are written straight into the LLQ, 64 bytes at a time, and the
//! doorbell (the count of descriptors posted, modulo 2^16) rung after at
//! most `max_tx_batch` blocks and at the end of each post; receives into
//! the host ring, their doorbell rung once per post.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rverbs_abi::efa::io::{RxDesc, TxWqe, TX_WQE_SIZE};
use rverbs_abi::efa::{self, device_caps};
use rverbs_abi::qp::{qp_type, CreateQp, CreateQpResp, DestroyQp};
use rverbs_abi::Errno;
use rverbs_provider::map::{page_size, Access, DeviceMapping};
use rverbs_provider::wr::{RecvWr, SendRequest, WrOpcode};
use rverbs_provider::{PostError, PostFailed, QpState};
use zerocopy::IntoBytes;

use crate::ctx::Uctx;
use crate::sq::{self, SqLimits};
use crate::wq::{QpEntry, Slots};
use crate::{rq, QPT_DRIVER};

/// Bytes of a receive descriptor.
const RX_DESC: usize = size_of::<RxDesc>();

/// Removes the QP from the context's table when its last queue goes
/// (after the kernel QP: the library destroys it before the queues drop).
#[derive(Debug)]
struct Registration {
    uctx: Arc<Uctx>,
    qpn: u32,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.uctx.table.remove(self.qpn);
    }
}

/// A QP's send queue.
#[derive(Debug)]
pub struct SendQueue {
    /// The LLQ (absent for a QP created without a send queue).
    llq: Option<DeviceMapping>,
    db: Arc<DeviceMapping>,
    db_off: usize,
    desc_off: usize,
    /// Descriptors in the ring: a power of two, or 0.
    wqe_cnt: u32,
    /// Descriptors written (wrapping).
    pc: u32,
    /// Where the next slot is looked for.
    next_slot: u32,
    /// Descriptors between two doorbells.
    max_batch: u32,
    limits: SqLimits,
    state: QpState,
    entry: Arc<QpEntry>,
    _reg: Arc<Registration>,
}

/// A QP's receive queue.
#[derive(Debug)]
pub struct RecvQueue {
    ring: Option<DeviceMapping>,
    db: Arc<DeviceMapping>,
    db_off: usize,
    /// Descriptors in the ring: a power of two, or 0.
    desc_cnt: u32,
    max_sge: u32,
    /// Receives the queue holds: its slots, at most one per descriptor.
    cap: u32,
    pc: u32,
    posted: u32,
    next_slot: u32,
    state: QpState,
    entry: Arc<QpEntry>,
    _reg: Arc<Registration>,
}

impl SendQueue {
    /// Requests outstanding.
    #[inline(always)]
    pub(crate) fn outstanding(&self) -> u32 {
        self.pc.wrapping_sub(self.entry.sq.completed())
    }

    /// Requests the queue holds.
    pub(crate) fn capacity(&self) -> u32 {
        self.wqe_cnt
    }

    #[inline]
    fn ring(&self) {
        // A doorbell past the page cannot happen (checked at creation);
        // the counter is 16 bits on the device.
        let _ = self.db.doorbell(self.db_off, self.pc & 0xffff);
    }

    /// Writes one request's descriptor (not yet rung).
    #[inline]
    fn put<R: SendRequest + ?Sized>(&mut self, wr: &R) -> Result<(), PostError> {
        if !self.state.may_post_send() {
            return Err(PostError::InvalidState);
        }
        let Some(llq) = &self.llq else {
            return Err(PostError::QueueFull);
        };
        if self.outstanding() >= self.wqe_cnt {
            return Err(PostError::QueueFull);
        }
        let req_id = self
            .entry
            .sq
            .take(self.next_slot, wr.wr_id())
            .ok_or(PostError::QueueFull)?;
        let shift = self.wqe_cnt.trailing_zeros();
        let phase = ((self.pc >> shift) & 1) as u8;
        let mut wqe = TxWqe::default();
        if let Err(e) = sq::build_into(wr, &self.limits, req_id, phase, &mut wqe) {
            self.entry.sq.untake(req_id);
            return Err(e);
        }
        let index = (self.pc & (self.wqe_cnt - 1)) as usize;
        let bytes: &[u8; TX_WQE_SIZE] = zerocopy::transmute_ref!(&wqe);
        if !llq.write_desc64(self.desc_off + index * TX_WQE_SIZE, bytes) {
            self.entry.sq.untake(req_id);
            return Err(PostError::QueueFull);
        }
        self.pc = self.pc.wrapping_add(1);
        self.next_slot = u32::from(req_id) + 1;
        Ok(())
    }

    /// Posts the requests of `reqs` (values or references): one doorbell
    /// at the end (and one per `max_batch`); on error those before it are
    /// posted.
    pub(crate) fn post_reqs<R: SendRequest, I: Iterator<Item = R>>(
        &mut self,
        reqs: I,
    ) -> Result<(), PostFailed> {
        let mut batch = 0u32;
        let mut result = Ok(());
        for (i, wr) in reqs.enumerate() {
            if let Err(e) = self.put(&wr) {
                result = Err(PostFailed::new(i, e));
                break;
            }
            batch += 1;
            if batch == self.max_batch {
                self.ring();
                batch = 0;
            }
        }
        if batch > 0 {
            self.ring();
        }
        result
    }

    /// Follows the QP's state: on RESET the device forgot every request.
    pub(crate) fn set_state(&mut self, state: QpState) {
        if state == QpState::Reset {
            self.pc = 0;
            self.next_slot = 0;
            self.entry.sq.reset(0);
        }
        self.state = state;
    }

    /// Accepts RDMA READ or WRITE where the device has them.
    pub(crate) fn allow(&mut self, op: WrOpcode) -> bool {
        match op {
            WrOpcode::RdmaRead => self.limits.rdma_read,
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => self.limits.rdma_write,
            _ => false,
        }
    }
}

impl RecvQueue {
    /// Receives outstanding.
    #[inline(always)]
    pub(crate) fn outstanding(&self) -> u32 {
        self.posted.wrapping_sub(self.entry.rq.completed())
    }

    /// Receives the queue holds.
    #[inline(always)]
    pub(crate) fn capacity(&self) -> u32 {
        self.cap
    }

    /// Posts the receives of `wrs`, one doorbell at the end.
    pub(crate) fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        let mut result = Ok(());
        let mut any = false;
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = self.put(wr) {
                result = Err(PostFailed::new(i, e));
                break;
            }
            any = true;
        }
        if any {
            let _ = self.db.doorbell(self.db_off, self.pc & 0xffff);
        }
        result
    }

    #[inline]
    fn put(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        if !self.state.may_post_recv() {
            return Err(PostError::InvalidState);
        }
        let Some(ring) = &self.ring else {
            return Err(PostError::RecvQueueFull);
        };
        if self.outstanding() >= self.capacity() {
            return Err(PostError::RecvQueueFull);
        }
        // One buffer (what EFA's devices take): one descriptor, written
        // straight to the ring.
        if let ([sge], 1..) = (wr.sg_list, self.max_sge) {
            if self.outstanding_descs() >= self.desc_cnt {
                return Err(PostError::RecvQueueFull);
            }
            let req_id = self
                .entry
                .rq
                .take(self.next_slot, wr.wr_id)
                .ok_or(PostError::RecvQueueFull)?;
            let index = (self.pc & (self.desc_cnt - 1)) as usize;
            let _ = ring.write(index * RX_DESC, rq::one(sge, req_id).as_bytes());
            self.pc = self.pc.wrapping_add(1);
            self.posted = self.posted.wrapping_add(1);
            self.next_slot = u32::from(req_id) + 1;
            return Ok(());
        }
        let free = self.desc_cnt - self.outstanding_descs();
        let mut descs = [RxDesc::default(); 2];
        let room = (self.max_sge as usize).min(descs.len());
        let req_id = self
            .entry
            .rq
            .take(self.next_slot, wr.wr_id)
            .ok_or(PostError::RecvQueueFull)?;
        let n = match rq::build(wr.sg_list, self.max_sge, req_id, &mut descs[..room]) {
            Ok(n) => n,
            Err(e) => {
                self.entry.rq.untake(req_id);
                return Err(e);
            }
        };
        if n as u32 > free {
            self.entry.rq.untake(req_id);
            return Err(PostError::RecvQueueFull);
        }
        for d in &descs[..n] {
            let index = (self.pc & (self.desc_cnt - 1)) as usize;
            let _ = ring.write(index * RX_DESC, d.as_bytes());
            self.pc = self.pc.wrapping_add(1);
        }
        self.posted = self.posted.wrapping_add(1);
        self.next_slot = u32::from(req_id) + 1;
        Ok(())
    }

    /// Ring descriptors possibly still held by the device: one per
    /// outstanding receive per buffer at most; with one-buffer receives
    /// (EFA's devices take one) exactly the outstanding count.
    fn outstanding_descs(&self) -> u32 {
        self.outstanding()
            .saturating_mul(self.max_sge.max(1))
            .min(self.desc_cnt)
    }

    /// Follows the QP's state: on RESET the ring starts over.
    pub(crate) fn set_state(&mut self, state: QpState) {
        if state == QpState::Reset {
            self.pc = 0;
            self.posted = 0;
            self.next_slot = 0;
            self.entry.rq.reset(0);
        }
        self.state = state;
    }
}

/// `n` rounded up to a power of two (0 stays 0); `None` on overflow.
fn pow2(n: u32) -> Option<u32> {
    if n == 0 {
        Some(0)
    } else {
        n.checked_next_power_of_two()
    }
}

/// `n` rounded up to a multiple of the page size.
fn page_align(n: usize) -> Option<usize> {
    let p = page_size();
    n.checked_add(p - 1).map(|v| v / p * p)
}

/// CREATE_QP for `cmd` (UD, or SRD as `IB_QPT_DRIVER`) and its queues.
/// The limits are checked first, as libefa checks them (`EINVAL`), and
/// anything but UD and SRD, or an SRQ, is `EOPNOTSUPP` before any
/// command. On a failure after the command the kernel QP is destroyed.
pub(crate) fn create(
    fd: &Arc<OwnedFd>,
    uctx: &Arc<Uctx>,
    cmd: &CreateQp,
) -> Result<(CreateQpResp, SendQueue, RecvQueue), Errno> {
    let lim = uctx.limits;
    if cmd.qp_type != qp_type::UD && cmd.qp_type != QPT_DRIVER {
        return Err(Errno::EOPNOTSUPP);
    }
    if cmd.is_srq != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if cmd.max_send_sge > u32::from(lim.max_sq_sge)
        || cmd.max_recv_sge > u32::from(lim.max_rq_sge)
        || cmd.max_send_wr > lim.max_sq_wr
        || cmd.max_recv_wr > lim.max_rq_wr
        || cmd.max_inline_data > u32::from(lim.inline_buf_size)
    {
        return Err(Errno::EINVAL);
    }
    let sq_cnt = pow2(cmd.max_send_wr.max(u32::from(lim.min_sq_wr))).ok_or(Errno::EINVAL)?;
    let rq_descs =
        pow2(cmd.max_recv_sge.max(1).saturating_mul(cmd.max_recv_wr)).ok_or(Errno::EINVAL)?;
    let rq_cnt = rq_descs / cmd.max_recv_sge.max(1);
    let sq_ring = sq_cnt
        .checked_mul(TX_WQE_SIZE as u32)
        .ok_or(Errno::EINVAL)?;
    if sq_ring > lim.max_llq_size {
        return Err(Errno::EINVAL);
    }
    let core = CreateQp {
        max_send_wr: sq_cnt,
        max_recv_wr: rq_cnt,
        ..*cmd
    };
    let drv = efa::CreateQp {
        comp_mask: 0,
        rq_ring_size: rq_descs * RX_DESC as u32,
        sq_ring_size: sq_ring,
        driver_qp_type: efa::EFA_QP_DRIVER_TYPE_SRD,
    };
    let (resp, out) = efa::cmd::create_qp(fd.as_fd(), &core, &drv)?;
    let built = (|| {
        let pg = page_size();
        let db = Arc::new(DeviceMapping::map(
            fd.as_fd(),
            out.sq_db_mmap_key,
            pg,
            Access::Write,
        )?);
        let rq_db = if out.rq_db_mmap_key == out.sq_db_mmap_key {
            Arc::clone(&db)
        } else {
            Arc::new(DeviceMapping::map(
                fd.as_fd(),
                out.rq_db_mmap_key,
                pg,
                Access::Write,
            )?)
        };
        let db_off = out.sq_db_offset as usize;
        let rq_db_off = out.rq_db_offset as usize;
        if db_off.checked_add(4).is_none_or(|e| e > pg)
            || rq_db_off.checked_add(4).is_none_or(|e| e > pg)
        {
            return Err(Errno::EINVAL);
        }
        let desc_off = out.llq_desc_offset as usize;
        // Descriptors are written 64 bytes at a time at 64-byte boundaries.
        if desc_off % TX_WQE_SIZE != 0 {
            return Err(Errno::EINVAL);
        }
        let llq = if sq_cnt > 0 {
            let len = page_align(sq_ring as usize + desc_off).ok_or(Errno::EINVAL)?;
            Some(DeviceMapping::map(
                fd.as_fd(),
                out.llq_desc_mmap_key,
                len,
                Access::Write,
            )?)
        } else {
            None
        };
        let ring = if rq_descs > 0 {
            let len = usize::try_from(out.rq_mmap_size).map_err(|_| Errno::EINVAL)?;
            if len < rq_descs as usize * RX_DESC {
                return Err(Errno::EINVAL);
            }
            Some(DeviceMapping::map(
                fd.as_fd(),
                out.rq_mmap_key,
                len,
                Access::Write,
            )?)
        } else {
            None
        };
        Ok((db, rq_db, db_off, rq_db_off, desc_off, llq, ring))
    })();
    let (db, rq_db, db_off, rq_db_off, desc_off, llq, ring) = match built {
        Ok(b) => b,
        Err(e) => {
            let _ = rverbs_abi::cmd::exec(
                fd.as_fd(),
                &DestroyQp {
                    response: 0,
                    qp_handle: resp.qp_handle,
                    reserved: 0,
                },
                &mut [],
            );
            return Err(e);
        }
    };
    let entry = Arc::new(QpEntry {
        sq: Slots::new(sq_cnt),
        rq: Slots::new(rq_cnt),
    });
    uctx.table.insert(resp.qpn, Arc::clone(&entry));
    let reg = Arc::new(Registration {
        uctx: Arc::clone(uctx),
        qpn: resp.qpn,
    });
    let max_batch = match lim.max_tx_batch {
        // In 64-byte blocks: one per descriptor.
        0 => u32::MAX,
        b => u32::from(b),
    };
    // A device with min_sq_wr takes no doorbell for the whole ring at once.
    let max_batch = if lim.min_sq_wr > 0 {
        max_batch.min(sq_cnt.saturating_sub(1).max(1))
    } else {
        max_batch
    };
    let limits = SqLimits {
        max_sge: cmd.max_send_sge,
        max_inline: cmd.max_inline_data,
        // The device bounds a SEND by its MTU (it completes a longer one
        // with a length error, as under libefa); the port's active MTU,
        // 4096 on EFA, is below what it takes.
        max_msg: u32::MAX,
        max_rdma_size: lim.max_rdma_size,
        rdma_read: cmd.qp_type == QPT_DRIVER && lim.has(device_caps::RDMA_READ),
        rdma_write: cmd.qp_type == QPT_DRIVER && lim.has(device_caps::RDMA_WRITE),
        sig_all: cmd.sq_sig_all != 0,
    }
    .clamped();
    let sq = SendQueue {
        llq,
        db,
        db_off,
        desc_off,
        wqe_cnt: sq_cnt,
        pc: 0,
        next_slot: 0,
        max_batch,
        limits,
        state: QpState::Reset,
        entry: Arc::clone(&entry),
        _reg: Arc::clone(&reg),
    };
    let rq = RecvQueue {
        ring,
        db: rq_db,
        db_off: rq_db_off,
        desc_cnt: rq_descs,
        max_sge: cmd.max_recv_sge.max(1),
        cap: entry.rq.len().min(rq_descs),
        pc: 0,
        posted: 0,
        next_slot: 0,
        state: QpState::Reset,
        entry,
        _reg: reg,
    };
    let resp = CreateQpResp {
        max_send_wr: sq_cnt,
        max_recv_wr: rq_cnt,
        ..resp
    };
    Ok((resp, sq, rq))
}
