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

use rverbs_abi::efa::io::RxCdesc;
use zerocopy::FromBytes;

use crate::cqe::{self, Queue, SubCq};
use crate::ctx::Uctx;
use crate::wq::{QpEntry, Slots};

/// Most sub-CQs a CQ is polled over (the device says how many it has;
/// more is refused at creation).
const MAX_SUB_CQS: usize = 4;

/// A CQ's ring and where its consumer stands.
#[derive(Debug)]
pub struct Cq {
    ring: DeviceMapping,
    /// The sub-CQs; only the first `count` are polled.
    subs: [SubCq; MAX_SUB_CQS],
    /// Sub-CQs polled: 1 to [`MAX_SUB_CQS`].
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
    /// snapshot: its `wr_id`, or `None` if no such QP or slot is in use.
    /// The QP of the last completion is tried first (a CQ's entries mostly
    /// come in runs of one QP); any other QP is found by
    /// [`Cq::complete_other`].
    #[inline(always)]
    fn complete(&mut self, qp_num: u32, queue: Queue, req_id: u16) -> Option<u64> {
        if let Some((_, e)) = self.rows.get(self.last).filter(|r| r.0 == qp_num) {
            if let Some(wr_id) = slots_of(e, queue).complete(req_id) {
                return Some(wr_id);
            }
        }
        self.complete_other(qp_num, queue, req_id)
    }

    /// [`Cq::complete`] past the last QP's row: the QP found in the
    /// snapshot (refreshed once on a miss when the table has changed
    /// since), its row kept as the last.
    #[cold]
    #[inline(never)]
    fn complete_other(&mut self, qp_num: u32, queue: Queue, req_id: u16) -> Option<u64> {
        let done = |rows: &[Row<QpEntry>], last: &mut usize| {
            let i = rows.binary_search_by_key(&qp_num, |r| r.0).ok()?;
            *last = i;
            slots_of(&rows[i].1, queue).complete(req_id)
        };
        if let Some(wr_id) = done(&self.rows, &mut self.last) {
            return Some(wr_id);
        }
        // Nothing was completed: a refreshed snapshot may know the QP.
        if self.uctx.table.generation() == self.generation {
            return None;
        }
        self.generation = self.uctx.table.snapshot_into(&mut self.rows);
        done(&self.rows, &mut self.last)
    }

    /// Takes the next new entry of sub-CQ `si`, if there is one, and
    /// writes its work completion to `out` (decoded straight from the
    /// entry's bytes); on a CQ of 32-byte entries (`SGID`) its sender's
    /// GID kept for [`Cq::last_source_gid`]. One copy of the code per
    /// entry size, so that the 16-byte path compiles as if the other did
    /// not exist.
    #[inline(always)]
    fn poll_sub<const SGID: bool>(&mut self, si: usize, out: &mut Wc) -> bool {
        let Some(sub) = self.subs.get_mut(si) else {
            return false;
        };
        let off = si * sub.len_bytes() + sub.offset();
        // A fixed-size copy (two loads for 16 bytes), after the flags byte
        // (the entry's fourth) says the device has written it.
        let mut buf = [0u8; cqe::ENTRY_SIZE_EX];
        let len = if SGID {
            cqe::ENTRY_SIZE_EX
        } else {
            cqe::ENTRY_SIZE
        };
        if !self
            .ring
            .read_published(off, &mut buf[..len], 3, |f| sub.is_new(f))
        {
            return false;
        }
        sub.advance();
        let (head, rest) = buf.split_at(cqe::ENTRY_SIZE);
        let Ok(rx) = RxCdesc::read_from_bytes(head) else {
            return false;
        };
        let queue = match cqe::queue_of(rx.common.flags) {
            Ok(q) => q,
            Err(_) => {
                if SGID {
                    self.last_sgid = None;
                }
                *out = bad(0);
                return true;
            }
        };
        if SGID {
            self.last_sgid = cqe::sgid_of(&rx, queue, rest);
        }
        let qp_num = u32::from(rx.common.qp_num.get());
        match self.complete(qp_num, queue, rx.common.req_id.get()) {
            Some(wr_id) => cqe::fill_wc(&rx, queue, wr_id, out),
            None => *out = bad(qp_num),
        }
        true
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

    /// [`Cq::poll`] for one entry size (see [`Cq::poll_sub`]): the
    /// sub-CQs in turn, until `wc` is full or none has a new entry.
    #[inline(never)]
    fn poll_as<const SGID: bool>(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        let count = self.count;
        let mut n = 0;
        let mut misses = 0;
        while let Some(out) = wc.get_mut(n) {
            let si = self.next;
            self.next = if si + 1 >= count { 0 } else { si + 1 };
            if self.poll_sub::<SGID>(si, out) {
                n += 1;
                misses = 0;
            } else {
                misses += 1;
                if misses >= count {
                    break;
                }
            }
        }
        Ok(n)
    }
}

/// The request slots of `queue` of a QP.
#[inline(always)]
fn slots_of(e: &QpEntry, queue: Queue) -> &Slots {
    match queue {
        Queue::Send => &e.sq,
        Queue::Recv => &e.rq,
    }
}

/// What an entry the decoder refuses, or that names a QP or slot not in
/// use, is reported as (its QP number where it could be read).
fn bad(qp_num: u32) -> Wc {
    Wc {
        status: wc_status::GENERAL_ERR,
        qp_num,
        ..Wc::default()
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
    if sub_cqs == 0 {
        return Err(Errno::EINVAL);
    }
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
        let subs = [sub; MAX_SUB_CQS];
        let mut rows = Vec::new();
        let generation = uctx.table.snapshot_into(&mut rows);
        Ok(Cq {
            ring,
            subs,
            count: sub_cqs,
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
