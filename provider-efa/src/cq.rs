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
    /// Entries are 32 bytes, with the sender's GID (created so).
    with_sgid: bool,
    /// The sender's GID of the last completion polled, when it carried one.
    last_sgid: Option<[u8; 16]>,
}

impl Cq {
    /// Completes request `req_id` of `queue` of QP `qp_num` through the
    /// snapshot (refreshed once on a miss when the table has changed
    /// since): its `wr_id`, or `None` if no such QP or slot is in use.
    #[inline(always)]
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

    /// The next new entry of sub-CQ `si`, as a work completion; on a CQ of
    /// 32-byte entries (`SGID`) its sender's GID kept for
    /// [`Cq::last_source_gid`]. One copy of the code per entry size, so
    /// that the 16-byte path compiles as if the other did not exist.
    #[inline(always)]
    fn poll_sub<const SGID: bool>(&mut self, si: usize) -> Option<Wc> {
        let sub = self.subs.get(si).copied().flatten()?;
        let off = si * sub.len_bytes() + sub.offset();
        let flags = self.ring.load_u8_acquire(off + 3)?;
        if !sub.is_new(flags) {
            return None;
        }
        // A fixed-size copy (two loads for 16 bytes).
        let mut buf = [0u8; cqe::ENTRY_SIZE_EX];
        let bytes = if SGID {
            &mut buf[..]
        } else {
            &mut buf[..cqe::ENTRY_SIZE]
        };
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
        let decoded = cqe::decode(bytes);
        if SGID {
            self.last_sgid = decoded.as_ref().ok().and_then(|c| c.sgid);
        }
        let Ok(c) = decoded else {
            return Some(bad(0));
        };
        match self.complete(u32::from(c.qp_num), c.queue, c.req_id) {
            Some(wr_id) => Some(c.to_wc(wr_id)),
            None => Some(bad(u32::from(c.qp_num))),
        }
    }

    /// The sender's GID of the last completion polled
    /// ([`rverbs_provider::CompletionQueue::poll`]): on a
    /// CQ created with source GIDs, for a receive from a sender that has no
    /// address handle on this device (libefa's `efadv_wc_read_sgid`);
    /// `None` otherwise.
    pub fn last_source_gid(&self) -> Option<[u8; 16]> {
        self.last_sgid
    }

    /// Whether the CQ was created with source GIDs (32-byte entries).
    pub fn with_source_gid(&self) -> bool {
        self.with_sgid
    }

    /// Polls up to `wc.len()` completions.
    #[inline(always)]
    pub(crate) fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        if self.with_sgid {
            self.poll_as::<true>(wc)
        } else {
            self.poll_as::<false>(wc)
        }
    }

    /// [`Cq::poll`] for one entry size (see [`Cq::poll_sub`]).
    #[inline(never)]
    fn poll_as<const SGID: bool>(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        let mut n = 0;
        'out: while n < wc.len() {
            for _ in 0..self.count {
                let si = self.next;
                self.next = (si + 1) % self.count;
                if let Some(w) = self.poll_sub::<SGID>(si) {
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

/// CREATE_CQ with EFA's driver data (16-byte entries, or 32 with the
/// sender's GID when `with_sgid`, which needs the device's `CQ_WITH_SGID`;
/// the device's sub-CQs; no completion channel: EFA without
/// `CQ_NOTIFICATIONS` has no completion events) and the ring mapped; on
/// any failure after the command the kernel CQ is destroyed again.
pub(crate) fn create(
    fd: &Arc<OwnedFd>,
    uctx: &Arc<Uctx>,
    cmd: &CreateCq,
    with_sgid: bool,
) -> Result<(CreateCqResp, Cq), Errno> {
    let lim = &uctx.limits;
    if cmd.comp_channel >= 0 && !lim.has(device_caps::CQ_NOTIFICATIONS) {
        return Err(Errno::EOPNOTSUPP);
    }
    if with_sgid && !lim.has(device_caps::CQ_WITH_SGID) {
        return Err(Errno::EOPNOTSUPP);
    }
    let entry_size = if with_sgid {
        cqe::ENTRY_SIZE_EX
    } else {
        cqe::ENTRY_SIZE
    };
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
        cq_entry_size: entry_size as u32,
        num_sub_cqs: lim.sub_cqs_per_cq,
        flags: if with_sgid {
            efa::create_cq_flags::WITH_SGID
        } else {
            0
        },
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
        let sub = SubCq::new(resp.cqe, entry_size).ok_or(Errno::EINVAL)?;
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
            with_sgid,
            last_sgid: None,
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
