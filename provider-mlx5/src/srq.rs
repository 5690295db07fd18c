//! mlx5 shared receive queues: the linked WQE list, CREATE_SRQ with mlx5's
//! driver data and posting receives to it.
//!
//! The WQEs form a list linked through the `next_wqe_index` of the next
//! segment ([`SrqNextSeg`]) that starts each WQE. The device consumes WQEs by following the links from
//! WQE 0; we post by following the same links from our `head`. The list
//! always keeps one unposted WQE at its `tail`, to which WQEs the CQ has
//! completed are linked back (only the poster edits the list; the CQ just
//! marks completed WQEs in a bitmap, `wq::SrqShared`).

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use rverbs_abi::mlx5;
use rverbs_abi::mlx5::prm::{DataSeg, SrqNextSeg};
use rverbs_abi::mlx5::qdir::kind;
use rverbs_abi::srq::{CreateSrq, CreateSrqResp};
use rverbs_abi::Errno;
use rverbs_provider::check::check_recv_sges;
use rverbs_provider::wr::RecvWr;
use zerocopy::FromZeros;

use crate::hw::dbrec::DbRec;
use crate::hw::map::{Mapping, QueueKind};
use crate::hw::qdir::{self, Listing};
use crate::hw::wqe::SrqRing;
use crate::hw::{barrier, cmd};
use crate::uctx::{Limits, Uctx};
use crate::wq::SrqShared;
use crate::{PostError, PostFailed};

/// Bytes of the `mlx5_wqe_srq_next_seg` header.
const NEXT_SEG: usize = size_of::<SrqNextSeg>();
/// Bytes of a data segment.
const DATA_SEG: usize = size_of::<DataSeg>();

/// What CREATE_SRQ returned. The caller must destroy `resp.srq_handle` if
/// it cannot use the SRQ.
#[derive(Debug)]
pub struct Created {
    /// Core response, `max_wr`/`max_sge` rewritten to what the SRQ holds.
    pub resp: CreateSrqResp,
    /// The SRQ number.
    pub srqn: u32,
    /// The SRQ.
    pub srq: Srq,
}

/// The SRQ's geometry, as libmlx5 lays it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Geometry {
    /// log2 of the WQE size.
    wqe_shift: u32,
    /// Data segments per WQE.
    max_gs: u32,
    /// WQEs in the buffer (a power of two).
    max: u32,
    /// Last WQE of the initial free list (= the receives it holds).
    tail: u32,
}

fn geometry(limits: &Limits, max_wr: u32, max_sge: u32) -> Result<Geometry, Errno> {
    if max_wr > limits.max_srq_recv_wr || max_sge > limits.max_rq_desc_sz / DATA_SEG as u32 {
        return Err(Errno::EINVAL);
    }
    let size = (NEXT_SEG as u32 + DATA_SEG as u32 * max_sge)
        .max(32)
        .next_power_of_two();
    let wqe_shift = size.trailing_zeros();
    let max_gs = (size - NEXT_SEG as u32) / DATA_SEG as u32;
    let with_waitq = max_wr as u64 * 2 + 1;
    let count = if with_waitq <= limits.max_srq_recv_wr as u64 {
        with_waitq
    } else {
        max_wr as u64 + 1
    };
    let max = count.next_power_of_two();
    let tail = (max_wr as u64 + 1).next_power_of_two() - 1;
    if max > 1 << 16 || (max << wqe_shift) > 1 << 31 {
        return Err(Errno::EINVAL);
    }
    Ok(Geometry {
        wqe_shift,
        max_gs,
        max: max as u32,
        tail: tail as u32,
    })
}

/// Builds the SRQ's WQE list and doorbell record and issues CREATE_SRQ.
/// The WQE list and the record come from `alloc` where one is given
/// (through it, else the provider's own memory).
pub fn create(
    fd: BorrowedFd<'_>,
    uctx: &Arc<Uctx>,
    cmd: &CreateSrq,
    alloc: Option<&rverbs_provider::SharedAllocator>,
) -> Result<Created, Errno> {
    let g = geometry(&uctx.limits(), cmd.max_wr, cmd.max_sge)?;
    let buf = Arc::new(Mapping::queue_in(
        (g.max as usize) << g.wqe_shift,
        QueueKind::Srq,
        alloc,
    )?);
    let db = uctx.alloc_dbrec_in(alloc)?;
    let mut srq = Srq::new(buf, db, g)?;
    let mut core = *cmd;
    core.max_wr = g.max - 1;
    core.max_sge = g.max_gs;
    let drv = mlx5::CreateSrq {
        buf_addr: srq.ring.mem().addr(),
        db_addr: srq.db.addr(),
        flags: 0,
        reserved0: 0,
        uidx: 0,
        reserved1: 0,
    };
    let mut drv_resp = mlx5::CreateSrqResp::new_zeroed();
    // The Srq and its SrqMemory keep the buffer and record until
    // DESTROY_SRQ.
    let mut resp = cmd::create_srq(fd, &core, &drv, &mut drv_resp, srq.ring.mem(), &srq.db)?;
    resp.max_wr = g.tail;
    resp.max_sge = g.max_gs;
    // The queue directory: where an outside tool finds the WQEs.
    let (wrid, completed, list, freed) = srq.shared.addrs();
    srq.listing = qdir::list(&qdir::Entry {
        kind: kind::SRQ,
        num: drv_resp.srqn,
        entries: g.max,
        stride_shift: g.wqe_shift,
        info: g.max_gs,
        info2: g.tail + 1,
        buf: srq.ring.mem().addr(),
        dbrec: srq.db.addr(),
        wrid,
        retired: completed,
        extra: list,
        extra2: freed,
    });
    Ok(Created {
        resp,
        srqn: drv_resp.srqn,
        srq,
    })
}

/// Keeps an SRQ's WQE buffer and doorbell record alive (the kernel object
/// may outlive the [`Srq`] value: hold this until it is destroyed).
#[derive(Debug, Clone)]
pub struct SrqMemory {
    _buf: Arc<Mapping>,
    _db: DbRec,
}

/// An mlx5 SRQ.
#[derive(Debug)]
pub struct Srq {
    /// The WQEs (and the buffer they keep mapped).
    ring: SrqRing,
    /// The doorbell record (the counter word).
    db: DbRec,
    max_gs: u32,
    /// WQEs in the buffer.
    max: u32,
    /// Next WQE to post.
    head: u32,
    /// Last WQE of the free list (never posted while it is the tail).
    tail: u32,
    /// WQEs posted (the doorbell counter; the device uses 16 bits).
    counter: u32,
    /// What the SRQ reports it holds.
    capacity: u32,
    shared: Arc<SrqShared>,
    /// The WQEs' slot in the queue directory.
    listing: Listing,
}

impl Srq {
    fn new(buf: Arc<Mapping>, db: DbRec, g: Geometry) -> Result<Srq, Errno> {
        let ring = SrqRing::new(buf, g.max, g.wqe_shift, g.max_gs).ok_or(Errno::EINVAL)?;
        let mut srq = Srq {
            ring,
            db,
            max_gs: g.max_gs,
            max: g.max,
            head: 0,
            tail: g.tail,
            counter: 0,
            capacity: g.tail,
            shared: Arc::new(SrqShared::new(g.max)),
            listing: Listing::default(),
        };
        for i in 0..g.tail {
            srq.ring.set_next(i, i + 1);
        }
        srq.shared.publish_list(srq.head, srq.tail);
        // WQEs past `tail` (libmlx5's ODP wait queue) stay unused.
        Ok(srq)
    }

    /// Links every WQE the CQ has completed back at the list tail.
    #[cold]
    fn reclaim(&mut self) {
        for w in 0..self.shared.freed_words() {
            let mut bits = self.shared.take_freed(w);
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                let i = (w as u32) * 64 + b;
                if i < self.max {
                    self.ring.set_next(self.tail, i);
                    self.tail = i;
                }
            }
        }
    }

    /// Posts the chain `wrs`. On error the WRs before the failing index are
    /// posted.
    #[inline]
    pub fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        let mut result = Ok(());
        let mut n = 0u32;
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = check_recv_sges(wr.sg_list, self.max_gs) {
                result = Err(PostFailed::new(i, e));
                break;
            }
            if self.head == self.tail {
                self.reclaim();
                if self.head == self.tail {
                    result = Err(PostFailed::new(i, PostError::SrqFull));
                    break;
                }
            }
            let idx = self.head;
            self.shared.post(idx, wr.wr_id);
            // WQE idx is free (off the list between head and tail); the
            // device reads it only after the doorbell counter covers it.
            self.ring.write(idx, wr.sg_list);
            self.head = self.ring.next(idx);
            n += 1;
        }
        // For the queue directory's reader (one store per call).
        self.shared.publish_list(self.head, self.tail);
        if n > 0 {
            self.counter = self.counter.wrapping_add(n);
            // The WQEs (and wr_ids) are written before the device can see
            // the new counter.
            barrier::to_device();
            self.db.set_recv(self.counter);
        }
        result
    }

    /// Work requests the SRQ holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Receives posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.counter.wrapping_sub(self.shared.completed())
    }

    /// Keeps the buffer and doorbell record alive after this value drops.
    pub fn memory(&self) -> SrqMemory {
        SrqMemory {
            _buf: Arc::clone(self.ring.mem()),
            _db: self.db.clone(),
        }
    }

    /// The bookkeeping the CQ completes this SRQ's WQEs through.
    pub(crate) fn shared(&self) -> Arc<SrqShared> {
        Arc::clone(&self.shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_abi::wr::Sge;

    fn limits() -> Limits {
        Limits {
            max_rq_desc_sz: 512,
            max_srq_recv_wr: 1 << 15,
            ..Default::default()
        }
    }

    fn test_srq(max_wr: u32, max_sge: u32) -> Srq {
        let g = geometry(&limits(), max_wr, max_sge).unwrap();
        let u = Uctx::for_tests(limits());
        let buf = Arc::new(Mapping::anon((g.max as usize) << g.wqe_shift).unwrap());
        Srq::new(buf, u.alloc_dbrec().unwrap(), g).unwrap()
    }

    fn bytes(s: &Srq, i: u32) -> Vec<u8> {
        s.ring.bytes(i)
    }

    #[test]
    fn geometry_matches_libmlx5() {
        // 16 + 16 = 32 bytes, 2*10+1 = 21 -> 32 WQEs, tail 15.
        assert_eq!(
            geometry(&limits(), 10, 1).unwrap(),
            Geometry {
                wqe_shift: 5,
                max_gs: 1,
                max: 32,
                tail: 15
            }
        );
        // 16 + 48 = 64 -> max_gs 3; no room for the wait queue.
        let l = Limits {
            max_srq_recv_wr: 100,
            ..limits()
        };
        assert_eq!(
            geometry(&l, 60, 3).unwrap(),
            Geometry {
                wqe_shift: 6,
                max_gs: 3,
                max: 64,
                tail: 63
            }
        );
        assert_eq!(geometry(&l, 101, 1).unwrap_err(), Errno::EINVAL);
        assert_eq!(geometry(&l, 1, 33).unwrap_err(), Errno::EINVAL);
    }

    #[test]
    fn free_list_post_and_reclaim() {
        let mut s = test_srq(3, 2); // WQE 48 -> 64 B, max_gs 3, max 8, tail 3
        assert_eq!((s.max, s.tail, s.max_gs, s.capacity()), (8, 3, 3, 3));
        for i in 0..3 {
            assert_eq!(
                u16::from_be_bytes([bytes(&s, i)[2], bytes(&s, i)[3]]),
                i as u16 + 1
            );
        }
        let sge = [
            Sge {
                addr: 0x1122_3344_5566_7788,
                length: 0,
                lkey: 0xabcd,
            },
            Sge {
                addr: 0x10,
                length: 9,
                lkey: 7,
            },
        ];
        let wrs = [
            RecvWr {
                wr_id: 100,
                sg_list: &sge,
            },
            RecvWr {
                wr_id: 101,
                sg_list: &sge[1..],
            },
            RecvWr {
                wr_id: 102,
                sg_list: &[],
            },
        ];
        s.post(&wrs).unwrap();
        let w0 = bytes(&s, 0);
        // The zero-length SGE left out (a byte count of 0 is 2 GiB to the
        // device): the real one first, then the terminator.
        assert_eq!(
            &w0[16..32],
            &[0, 0, 0, 9, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0x10]
        );
        assert_eq!(&w0[32..40], &[0, 0, 0, 0, 0, 0, 1, 0]); // terminator
        assert_eq!(&bytes(&s, 1)[16..40], &w0[16..40]);
        assert_eq!(&bytes(&s, 2)[16..24], &[0, 0, 0, 0, 0, 0, 1, 0]);
        assert_eq!(s.db.load(0), 3);
        assert_eq!(s.outstanding(), 3);
        // Exhausted: head == tail.
        assert_eq!(
            s.post(&wrs[..1]).unwrap_err(),
            PostFailed::new(0, PostError::SrqFull)
        );
        // The CQ completes WQE 1; the next post reuses the tail (3) and
        // links 1 after it.
        assert_eq!(s.shared.complete(1), Some(101));
        assert_eq!(s.outstanding(), 2);
        s.post(&wrs[..1]).unwrap();
        assert_eq!(u16::from_be_bytes([bytes(&s, 3)[2], bytes(&s, 3)[3]]), 1);
        assert_eq!((s.head, s.tail), (1, 1));
        assert_eq!(s.shared.wrid(3), 100);
        assert_eq!(s.db.load(0), 4);
        let too_many = [sge[0]; 4];
        assert_eq!(
            s.post(&[RecvWr {
                wr_id: 1,
                sg_list: &too_many
            }])
            .unwrap_err(),
            PostFailed::new(0, PostError::TooManySge { given: 4, max: 3 })
        );
    }
}
