//! An EFA CQ: the ring the kernel allocated (all sub-CQs, one after the
//! other), mapped read-only by its key, and polled by phase, sub-CQ after
//! sub-CQ, as libefa polls it. A completion names its QP by number: the
//! CQ finds the queue's request slots in the context's table through a
//! snapshot of its own, refreshed only when the table changed, so polling
//! takes no lock and allocates nothing.
//!
//! An entry the decoder refuses, or that names a QP or slot not in use,
//! is consumed and reported as a general error with `wr_id` 0: bytes from
//! the device never make the poll panic or stall.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rverbs_abi::cq::{CreateCq, CreateCqResp, DestroyCq};
use rverbs_abi::efa::{self, device_caps};
use rverbs_abi::wr::{wc_status, Wc};
use rverbs_abi::Errno;
use rverbs_provider::map::{Access, DeviceMapping};
use rverbs_provider::table::Row;
use rverbs_provider::RingLost;

use crate::cqe::{self, Queue, SubCq};
use crate::ctx::Uctx;
use crate::wq::QpEntry;

/// Most sub-CQs a CQ is polled over (the device says how many it has;
/// more is refused at creation).
const MAX_SUB_CQS: usize = 4;

/// A CQ's ring and where its consumer stands.
#[derive(Debug)]
pub struct Cq {
    ring: DeviceMapping,
    subs: [Option<SubCq>; MAX_SUB_CQS],
    count: usize,
    next: usize,
    uctx: Arc<Uctx>,
    rows: Vec<Row<QpEntry>>,
    generation: u64,
    /// The row of the last completion's QP (an index into `rows`, checked
    /// before use).
    last: usize,
}

impl Cq {
    /// Completes request `req_id` of `queue` of QP `qp_num` through the
    /// snapshot (refreshed once on a miss when the table has changed
    /// since): its `wr_id`, or `None` if no such QP or slot is in use.
    fn complete(&mut self, qp_num: u32, queue: Queue, req_id: u16) -> Option<u64> {
        let slots = |e: &QpEntry| match queue {
            Queue::Send => e.sq.complete(req_id),
            Queue::Recv => e.rq.complete(req_id),
        };
        // The QP of the last completion first: a CQ's entries mostly come
        // in runs of one QP.
        if let Some((_, e)) = self.rows.get(self.last).filter(|r| r.0 == qp_num) {
            if let Some(wr_id) = slots(e) {
                return Some(wr_id);
            }
        }
        let last = &mut self.last;
        let done = |rows: &[Row<QpEntry>], last: &mut usize| {
            let i = rows.binary_search_by_key(&qp_num, |r| r.0).ok()?;
            *last = i;
            slots(&rows[i].1)
        };
        if let Some(wr_id) = done(&self.rows, last) {
            return Some(wr_id);
        }
        // Nothing was completed: a refreshed snapshot may know the QP.
        if self.uctx.table.generation() == self.generation {
            return None;
        }
        self.generation = self.uctx.table.snapshot_into(&mut self.rows);
        done(&self.rows, &mut self.last)
    }

    /// The next new entry of sub-CQ `si`, as a work completion.
    fn poll_sub(&mut self, si: usize) -> Option<Wc> {
        let sub = self.subs.get(si).copied().flatten()?;
        let off = si * sub.len_bytes() + sub.offset();
        let flags = self.ring.load_u8_acquire(off + 3)?;
        if !sub.is_new(flags) {
            return None;
        }
        // This provider's CQs have 16-byte entries (created so): a
        // fixed-size copy, which compiles to two loads.
        let mut buf = [0u8; cqe::ENTRY_SIZE];
        let bytes = &mut buf[..];
        if !self.ring.read(off, bytes) {
            return None;
        }
        if let Some(s) = self.subs.get_mut(si).and_then(Option::as_mut) {
            s.advance();
        }
        let bad = |qp_num: u32| Wc {
            status: wc_status::GENERAL_ERR,
            qp_num,
            ..Wc::default()
        };
        let Ok(c) = cqe::decode(bytes) else {
            return Some(bad(0));
        };
        match self.complete(u32::from(c.qp_num), c.queue, c.req_id) {
            Some(wr_id) => Some(c.to_wc(wr_id)),
            None => Some(bad(u32::from(c.qp_num))),
        }
    }

    /// Polls up to `wc.len()` completions.
    pub(crate) fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        let mut n = 0;
        'out: while n < wc.len() {
            for _ in 0..self.count {
                let si = self.next;
                self.next = (si + 1) % self.count;
                if let Some(w) = self.poll_sub(si) {
                    wc[n] = w;
                    n += 1;
                    continue 'out;
                }
            }
            break;
        }
        Ok(n)
    }
}

/// CREATE_CQ with EFA's driver data (16-byte entries, the device's
/// sub-CQs, no completion channel: EFA without `CQ_NOTIFICATIONS` has no
/// completion events) and the ring mapped; on any failure after the
/// command the kernel CQ is destroyed again.
pub(crate) fn create(
    fd: &Arc<OwnedFd>,
    uctx: &Arc<Uctx>,
    cmd: &CreateCq,
) -> Result<(CreateCqResp, Cq), Errno> {
    let lim = &uctx.limits;
    if cmd.comp_channel >= 0 && !lim.has(device_caps::CQ_NOTIFICATIONS) {
        return Err(Errno::EOPNOTSUPP);
    }
    let sub_cqs = usize::from(lim.sub_cqs_per_cq);
    if sub_cqs > MAX_SUB_CQS {
        return Err(Errno::EOPNOTSUPP);
    }
    // As libefa: the entry count rounded up to a power of two.
    let entries = cmd
        .cqe
        .max(1)
        .checked_next_power_of_two()
        .ok_or(Errno::EINVAL)?;
    let core = CreateCq {
        cqe: entries,
        ..*cmd
    };
    let drv = efa::CreateCq {
        comp_mask: 0,
        cq_entry_size: cqe::ENTRY_SIZE as u32,
        num_sub_cqs: lim.sub_cqs_per_cq,
        flags: 0,
        reserved_58: [0; 5],
    };
    let (resp, out) = efa::cmd::create_cq(fd.as_fd(), &core, &drv)?;
    let destroy = || {
        let _ = rverbs_abi::cmd::exec(
            fd.as_fd(),
            &DestroyCq {
                response: 0,
                cq_handle: resp.cq_handle,
                reserved: 0,
            },
            &mut [],
        );
    };
    let built = (|| {
        // Each sub-CQ holds the entries the kernel granted.
        let sub = SubCq::new(resp.cqe, cqe::ENTRY_SIZE).ok_or(Errno::EINVAL)?;
        let need = sub.len_bytes().checked_mul(sub_cqs).ok_or(Errno::EINVAL)?;
        let len = usize::try_from(out.q_mmap_size).map_err(|_| Errno::EINVAL)?;
        if len < need {
            return Err(Errno::EINVAL);
        }
        let ring = DeviceMapping::map(fd.as_fd(), out.q_mmap_key, len, Access::Read)?;
        let mut subs = [None; MAX_SUB_CQS];
        for s in subs.iter_mut().take(sub_cqs) {
            *s = Some(sub);
        }
        let mut rows = Vec::new();
        let generation = uctx.table.snapshot_into(&mut rows);
        Ok(Cq {
            ring,
            subs,
            count: sub_cqs.max(1),
            next: 0,
            uctx: Arc::clone(uctx),
            rows,
            generation,
            last: 0,
        })
    })();
    match built {
        Ok(cq) => Ok((resp, cq)),
        Err(e) => {
            destroy();
            Err(e)
        }
    }
}
