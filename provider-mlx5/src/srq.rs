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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rverbs_abi::cmd::{nr, write_cmd};
use rverbs_abi::mlx5;
use rverbs_abi::mlx5::prm::{self, DataSeg, SrqNextSeg};
use rverbs_abi::srq::{CreateSrq, CreateSrqResp};
use rverbs_abi::Errno;
use rverbs_provider::check::check_recv_sges;
use rverbs_provider::wr::RecvWr;
use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromZeros, IntoBytes};

use crate::buf::{Buf, DbRec};
use crate::uctx::{Limits, Uctx};
use crate::wq::SrqShared;
use crate::{mmio, PostError};

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
pub fn create(fd: BorrowedFd<'_>, uctx: &Arc<Uctx>, cmd: &CreateSrq) -> Result<Created, Errno> {
    let g = geometry(&uctx.limits(), cmd.max_wr, cmd.max_sge)?;
    let buf = Buf::new((g.max as usize) << g.wqe_shift)?;
    let db = uctx.alloc_dbrec()?;
    let mem = Arc::new(Mem { buf, db });
    let srq = Srq::new(Arc::clone(&mem), g);
    let mut core = *cmd;
    core.max_wr = g.max - 1;
    core.max_sge = g.max_gs;
    let drv = mlx5::CreateSrq {
        buf_addr: mem.buf.addr(),
        db_addr: mem.db.addr(),
        flags: 0,
        reserved0: 0,
        uidx: 0,
        reserved1: 0,
    };
    let mut drv_resp = mlx5::CreateSrqResp::new_zeroed();
    // SAFETY: the user addresses are the driver data's `buf_addr` and
    // `db_addr`: the SRQ's WQE buffer and doorbell record in `mem`
    // (mappings of our own that no Rust reference covers, accessed through
    // raw pointers only), which the returned Srq and its SrqMemory keep
    // until DESTROY_SRQ; the kernel pins their pages for the SRQ's life.
    // The core command carries only its response pointer, which write_cmd
    // supplies.
    let mut resp: CreateSrqResp = unsafe {
        write_cmd(
            fd,
            nr::CREATE_SRQ,
            &core,
            drv.as_bytes(),
            drv_resp.as_mut_bytes(),
        )?
    };
    resp.max_wr = g.tail;
    resp.max_sge = g.max_gs;
    Ok(Created {
        resp,
        srqn: drv_resp.srqn,
        srq,
    })
}

/// The WQE buffer and doorbell record of an SRQ.
#[derive(Debug)]
struct Mem {
    buf: Buf,
    db: DbRec,
}

/// Keeps an SRQ's WQE buffer and doorbell record alive (the kernel object
/// may outlive the [`Srq`] value: hold this until it is destroyed).
#[derive(Debug, Clone)]
pub struct SrqMemory {
    _mem: Arc<Mem>,
}

/// An mlx5 SRQ.
#[derive(Debug)]
pub struct Srq {
    /// First WQE.
    base: *mut u8,
    /// The counter word of the doorbell record.
    db: *const AtomicU32,
    wqe_shift: u32,
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
    mem: Arc<Mem>,
}

// SAFETY: `base` and `db` point into `mem`, owned through the Arc; every
// write through them takes `&mut self`.
unsafe impl Send for Srq {}
// SAFETY: `&self` methods only read atomics.
unsafe impl Sync for Srq {}

impl Srq {
    fn new(mem: Arc<Mem>, g: Geometry) -> Srq {
        let base = mem.buf.as_ptr();
        let db: *const AtomicU32 = mem.db.word(0);
        let mut srq = Srq {
            base,
            db,
            wqe_shift: g.wqe_shift,
            max_gs: g.max_gs,
            max: g.max,
            head: 0,
            tail: g.tail,
            counter: 0,
            capacity: g.tail,
            shared: Arc::new(SrqShared::new(g.max)),
            mem,
        };
        for i in 0..g.tail {
            srq.set_next(i, i + 1);
        }
        // WQEs past `tail` (libmlx5's ODP wait queue) stay unused.
        srq
    }

    #[inline]
    fn wqe(&self, i: u32) -> *mut u8 {
        debug_assert!(i < self.max);
        // SAFETY: i < max and the buffer holds `max << wqe_shift` bytes.
        unsafe { self.base.add((i as usize) << self.wqe_shift) }
    }

    #[inline]
    fn set_next(&mut self, i: u32, next: u32) {
        let p = self.wqe(i).cast::<SrqNextSeg>();
        // SAFETY: the next segment starts WQE i, inside the buffer and
        // aligned (WQEs are at least 32 bytes, in a page-aligned buffer);
        // only its `next_wqe_index` is written, through the raw pointer
        // (no reference to the shared buffer). We are the only writer
        // (`&mut self`) and the device only reads this field of WQEs it
        // has been given.
        unsafe { std::ptr::addr_of_mut!((*p).next_wqe_index).write(U16::new(next as u16)) };
    }

    #[inline]
    fn next(&self, i: u32) -> u32 {
        let p = self.wqe(i).cast::<SrqNextSeg>();
        // SAFETY: as in `set_next`: a field of WQE i's next segment, read
        // through the raw pointer; only we write it.
        let v = unsafe { std::ptr::addr_of!((*p).next_wqe_index).read() };
        u32::from(v.get()) & (self.max - 1)
    }

    /// Links every WQE the CQ has completed back at the list tail.
    #[cold]
    fn reclaim(&mut self) {
        for w in 0..self.shared.freed.len() {
            let mut bits = self.shared.freed[w].swap(0, Ordering::Acquire);
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                let i = (w as u32) * 64 + b;
                if i < self.max {
                    self.set_next(self.tail, i);
                    self.tail = i;
                }
            }
        }
    }

    /// Posts the chain `wrs`. On error the WRs before the failing index are
    /// posted.
    #[inline]
    pub fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), (usize, PostError)> {
        let mut result = Ok(());
        let mut n = 0u32;
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = check_recv_sges(wr.sg_list, self.max_gs) {
                result = Err((i, e));
                break;
            }
            if self.head == self.tail {
                self.reclaim();
                if self.head == self.tail {
                    result = Err((i, PostError::QueueFull));
                    break;
                }
            }
            let idx = self.head;
            self.shared.wrid[idx as usize].store(wr.wr_id, Ordering::Relaxed);
            let p = self.wqe(idx);
            for (j, sge) in wr.sg_list.iter().enumerate() {
                // SAFETY: segment j < max_gs lies inside WQE idx (its size
                // is 16 + 16 * max_gs or more), at a 16-byte multiple of the
                // page-aligned buffer; only we write it, and the device reads
                // it only after the doorbell counter covers it.
                unsafe {
                    write_seg(
                        p.add(NEXT_SEG + j * DATA_SEG),
                        sge.length,
                        sge.lkey,
                        sge.addr,
                    )
                };
            }
            if wr.sg_list.len() < self.max_gs as usize {
                // SAFETY: as above, the segment after the last SGE.
                unsafe {
                    write_seg(
                        p.add(NEXT_SEG + wr.sg_list.len() * DATA_SEG),
                        0,
                        prm::INVALID_LKEY,
                        0,
                    )
                };
            }
            self.head = self.next(idx);
            n += 1;
        }
        if n > 0 {
            self.counter = self.counter.wrapping_add(n);
            // The WQEs (and wr_ids) are written before the device can see
            // the new counter.
            mmio::to_device();
            // SAFETY: `db` points into the doorbell record `mem` keeps alive.
            unsafe { &*self.db }.store((self.counter & 0xFFFF).to_be(), Ordering::Relaxed);
        }
        result
    }

    /// Work requests the SRQ holds.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Receives posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.counter
            .wrapping_sub(self.shared.completed.load(Ordering::Acquire))
    }

    /// Keeps the buffer and doorbell record alive after this value drops.
    pub fn memory(&self) -> SrqMemory {
        SrqMemory {
            _mem: Arc::clone(&self.mem),
        }
    }

    /// The bookkeeping the CQ completes this SRQ's WQEs through.
    pub(crate) fn shared(&self) -> Arc<SrqShared> {
        Arc::clone(&self.shared)
    }
}

/// Writes one data segment at `p`, whole, through the raw pointer.
///
/// # Safety
/// `p` must be valid for a write of a [`DataSeg`] and aligned for it.
#[inline]
unsafe fn write_seg(p: *mut u8, len: u32, lkey: u32, addr: u64) {
    let seg = DataSeg {
        byte_count: U32::new(len),
        lkey: U32::new(lkey),
        addr: U64::new(addr),
    };
    // SAFETY: as the caller guarantees.
    unsafe { p.cast::<DataSeg>().write(seg) };
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
        let mem = Arc::new(Mem {
            buf: Buf::new((g.max as usize) << g.wqe_shift).unwrap(),
            db: u.alloc_dbrec().unwrap(),
        });
        Srq::new(mem, g)
    }

    fn bytes(s: &Srq, i: u32) -> &[u8] {
        // SAFETY: WQE i lies inside the buffer, which `s` keeps alive.
        unsafe { std::slice::from_raw_parts(s.wqe(i), 1 << s.wqe_shift) }
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
        // Zero-length SGE kept.
        assert_eq!(
            &w0[16..32],
            &[0, 0, 0, 0, 0, 0, 0xab, 0xcd, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
        );
        assert_eq!(&w0[32..40], &[0, 0, 0, 9, 0, 0, 0, 7]);
        assert_eq!(&w0[48..56], &[0, 0, 0, 0, 0, 0, 1, 0]); // terminator
        assert_eq!(&bytes(&s, 2)[16..24], &[0, 0, 0, 0, 0, 0, 1, 0]);
        assert_eq!(s.mem.db.word(0).load(Ordering::Acquire), 3u32.to_be());
        assert_eq!(s.outstanding(), 3);
        // Exhausted: head == tail.
        assert_eq!(s.post(&wrs[..1]).unwrap_err(), (0, PostError::QueueFull));
        // The CQ completes WQE 1; the next post reuses the tail (3) and
        // links 1 after it.
        assert_eq!(s.shared.complete(1), Some(101));
        assert_eq!(s.outstanding(), 2);
        s.post(&wrs[..1]).unwrap();
        assert_eq!(u16::from_be_bytes([bytes(&s, 3)[2], bytes(&s, 3)[3]]), 1);
        assert_eq!((s.head, s.tail), (1, 1));
        assert_eq!(s.shared.wrid[3].load(Ordering::Relaxed), 100);
        assert_eq!(s.mem.db.word(0).load(Ordering::Acquire), 4u32.to_be());
        let too_many = [sge[0]; 4];
        assert_eq!(
            s.post(&[RecvWr {
                wr_id: 1,
                sg_list: &too_many
            }])
            .unwrap_err(),
            (0, PostError::TooManySge { given: 4, max: 3 })
        );
    }
}
