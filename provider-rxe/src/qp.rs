//! rxe queue pairs: CREATE_QP with rxe's driver response, and the send and
//! receive rings with their post paths.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;

use rverbs_abi::cmd::{nr, write_cmd, write_cmd_fixed, write_ex_cmd};
use rverbs_abi::qp::{CreateQp, CreateQpResp, ExCreateQp, ExCreateQpResp};
use rverbs_abi::rxe::{self, DmaInfo, RecvWqe, SendWqe};
use rverbs_abi::wr::{PostSend, PostSendResp, Sge, UVERBS_SEND_WR_SIZE};
use rverbs_abi::Errno;
use rverbs_provider::check::{check_recv, SendChecks};
use rverbs_provider::wr::{Payload, RecvWr, SendFlags, SendWr, WrOpcode};
use zerocopy::{FromZeros, IntoBytes};

use crate::queue::Queue;
use crate::PostError;

/// What CREATE_QP returned: the kernel's answer and the mapped rings. If
/// either ring failed to map the caller must destroy `resp.qp_handle`.
#[derive(Debug)]
pub struct Created {
    /// Core response (handle, QPN, granted capabilities).
    pub resp: CreateQpResp,
    /// The send ring.
    pub sq: Result<SendQueue, Errno>,
    /// The receive ring; `None` when the QP uses an SRQ.
    pub rq: Result<Option<RecvQueue>, Errno>,
}

/// Issues CREATE_QP for `cmd` and maps its rings.
pub fn create(fd: BorrowedFd<'_>, cmd: &CreateQp) -> Result<Created, Errno> {
    let mut drv = rxe::CreateQpResp::new_zeroed();
    // SAFETY: CREATE_QP carries no user address but its response pointer,
    // which write_cmd supplies; rxe takes no driver data in (its rings are
    // the kernel's, mapped below).
    let resp: CreateQpResp = unsafe { write_cmd(fd, nr::CREATE_QP, cmd, &[], drv.as_mut_bytes())? };
    Ok(map_rings(fd, resp, &drv, cmd.qp_type, cmd.is_srq != 0))
}

/// Issues the extended CREATE_QP (`IB_USER_VERBS_EX_CMD_CREATE_QP`, which
/// carries creation flags) and maps the rings.
pub fn create_ex(fd: BorrowedFd<'_>, cmd: &ExCreateQp) -> Result<Created, Errno> {
    let mut drv = rxe::CreateQpResp::new_zeroed();
    // SAFETY: the extended CREATE_QP carries no user address (write_ex_cmd
    // supplies the response buffer); rxe takes no driver data in.
    let resp: ExCreateQpResp =
        unsafe { write_ex_cmd(fd, nr::EX_CREATE_QP, cmd, &[], drv.as_mut_bytes())? };
    Ok(map_rings(fd, resp.base, &drv, cmd.qp_type, cmd.is_srq != 0))
}

fn map_rings(
    fd: BorrowedFd<'_>,
    resp: CreateQpResp,
    drv: &rxe::CreateQpResp,
    qp_type: u8,
    is_srq: bool,
) -> Created {
    let sq = Queue::map(fd, &drv.sq_mi).and_then(|ring| {
        SendQueue::new(
            ring,
            resp.qp_handle,
            qp_type,
            resp.max_send_wr,
            resp.max_send_sge,
            resp.max_inline_data,
        )
    });
    let rq = if is_srq || drv.rq_mi.size == 0 {
        Ok(None)
    } else {
        Queue::map(fd, &drv.rq_mi)
            .and_then(|ring| RecvQueue::new(ring, resp.max_recv_wr, resp.max_recv_sge).map(Some))
    };
    Created { resp, sq, rq }
}

/// Whether `max_wr` work requests are outstanding between the producer
/// index `prod` and the consumer index, refreshing the cached `cons` from the
/// ring (acquire) before answering yes.
#[inline]
fn full(prod: u32, cons: &mut u32, q: &Queue, max_wr: u32) -> bool {
    let mask = q.mask();
    if prod.wrapping_sub(*cons) & mask < max_wr {
        return false;
    }
    *cons = q.consumer().load(Ordering::Acquire);
    prod.wrapping_sub(*cons) & mask >= max_wr
}

/// Copies `sges` to `dst`. One SGE, the common case, is a single 16-byte
/// store instead of a call to `memcpy`.
///
/// # Safety
/// `dst` must be valid for writing `sges.len()` SGEs, 8-byte aligned, and
/// not overlap `sges`.
#[inline(always)]
unsafe fn copy_sges(sges: &[Sge], dst: *mut Sge) {
    match sges {
        [] => {}
        // SAFETY: the caller guarantees room for one SGE at `dst`.
        [one] => unsafe { dst.write(*one) },
        // SAFETY: the caller guarantees room for all of them at `dst`.
        _ => unsafe { std::ptr::copy_nonoverlapping(sges.as_ptr(), dst, sges.len()) },
    }
}

/// A QP's send ring.
#[derive(Debug)]
pub struct SendQueue {
    ring: Queue,
    qp_handle: u32,
    max_wr: u32,
    /// The limits every request is checked against.
    checks: SendChecks,
}

impl SendQueue {
    fn new(
        ring: Queue,
        qp_handle: u32,
        qp_type: u8,
        max_wr: u32,
        max_sge: u32,
        max_inline: u32,
    ) -> Result<Self, Errno> {
        // Checked: the sizes come from the kernel.
        let room = (max_sge as usize)
            .checked_mul(size_of::<Sge>())
            .map(|sges| sges.max(max_inline as usize))
            .and_then(|body| body.checked_add(size_of::<SendWqe>()));
        if room.is_none_or(|room| ring.elem_size() < room) || max_wr > ring.mask() {
            return Err(Errno::EPROTO);
        }
        Ok(SendQueue {
            ring,
            qp_handle,
            max_wr,
            checks: SendChecks::new(qp_type, max_sge, max_inline),
        })
    }

    /// Sets the largest UD message this queue accepts: the active MTU of
    /// the QP's port, which is what rxe compares UD sends against (a longer
    /// one is dropped without an error, IB spec C10-93.1.1). Ignored for
    /// connected QPs, whose messages span packets.
    pub fn set_ud_mtu(&mut self, mtu: u32) {
        self.checks.set_ud_mtu(mtu);
    }

    /// Capacity in work requests: the depth the kernel granted (the ring
    /// itself may have more slots, which are not used).
    pub fn capacity(&self) -> u32 {
        self.max_wr
    }

    /// Work requests posted and not yet consumed by the kernel.
    pub fn outstanding(&self) -> u32 {
        self.ring.fill()
    }

    /// Posts the chain `wrs`: every request is checked, written to the ring
    /// and published with one release store, then one doorbell is rung.
    /// On error, the requests before the failing index are posted (and the
    /// doorbell rung for them) and the error names the index.
    #[inline]
    pub fn post(
        &mut self,
        fd: BorrowedFd<'_>,
        wrs: &[SendWr<'_>],
    ) -> Result<(), (usize, PostError)> {
        if let [wr] = wrs {
            return self.post_one(fd, wr);
        }
        let q = &self.ring;
        let mask = q.mask();
        // We are the only producer (`&mut self`).
        let start = q.producer().load(Ordering::Relaxed);
        let mut prod = start;
        // Acquire: slots the kernel released are free to overwrite. Re-read
        // only when the queue looks full.
        let mut cons = q.consumer().load(Ordering::Acquire);
        let mut result = Ok(());
        for wr in wrs {
            // The index of `wr` in the chain: one slot per request posted so
            // far, and fewer than `mask + 1` of them fit.
            let i = (prod.wrapping_sub(start) & mask) as usize;
            if full(prod, &mut cons, q, self.max_wr) {
                result = Err((i, PostError::QueueFull));
                break;
            }
            if let Err(e) = self.write_wqe(prod, wr) {
                result = Err((i, e));
                break;
            }
            prod = (prod + 1) & mask;
        }
        if prod != start {
            // Release: the WQE contents happen-before the kernel sees the index.
            q.producer().store(prod, Ordering::Release);
            if let Err(e) = self.doorbell(fd) {
                return Err((wrs.len(), PostError::Doorbell(e)));
            }
        }
        result
    }

    /// [`SendQueue::post`] of a single request, the common case: the same
    /// steps without the loop, whose bookkeeping (kept in registers and
    /// stack slots across iterations) would cost more than the request.
    #[inline]
    fn post_one(&mut self, fd: BorrowedFd<'_>, wr: &SendWr<'_>) -> Result<(), (usize, PostError)> {
        let q = &self.ring;
        // We are the only producer (`&mut self`).
        let prod = q.producer().load(Ordering::Relaxed);
        // Acquire: slots the kernel released are free to overwrite.
        let mut cons = q.consumer().load(Ordering::Acquire);
        if full(prod, &mut cons, q, self.max_wr) {
            return Err((0, PostError::QueueFull));
        }
        self.write_wqe(prod, wr).map_err(|e| (0, e))?;
        // Release: the WQE contents happen-before the kernel sees the index.
        q.producer().store((prod + 1) & q.mask(), Ordering::Release);
        self.doorbell(fd).map_err(|e| (1, PostError::Doorbell(e)))
    }

    #[inline(always)]
    fn write_wqe(&self, index: u32, wr: &SendWr<'_>) -> Result<(), PostError> {
        // ah_num 0 is how old kernels said "the AV is in the WQE", which
        // this provider does not build.
        let length = self.checks.check(wr, |d| d.ah_num != 0)?;
        let (flags, num_sge) = match wr.payload() {
            Payload::Sge(sges) => (wr.send_flags().difference(SendFlags::INLINE), sges.len()),
            Payload::Inline(_) => (wr.send_flags().union(SendFlags::INLINE), 0),
        };

        let slot = self.ring.slot(index);
        // SAFETY: `slot` is a free slot of this ring (between producer and
        // consumer, so the kernel neither reads nor writes it until we
        // publish it), 8-byte aligned, and `new` checked it holds a SendWqe
        // plus max_sge SGEs or max_inline bytes, which the checks above
        // bound. The WQE is built in place: zeroed, then the fields this
        // request uses are set (no copy through the stack).
        unsafe {
            let wqe = slot.cast::<SendWqe>();
            std::ptr::write_bytes(wqe, 0, 1);
            let hdr = &mut *wqe;
            hdr.wr.wr_id = wr.wr_id();
            hdr.wr.opcode = wr.opcode() as u32;
            hdr.wr.send_flags = flags.bits();
            hdr.wr.ex = match wr.opcode() {
                WrOpcode::SendWithInv | WrOpcode::LocalInv => wr.imm_data(),
                _ => wr.imm_data().to_be(),
            };
            // The `wr` union's words are 8-byte aligned and at least as large
            // as each arm (asserted in rverbs_abi::rxe), so each arm may be
            // written through a cast of the union's start.
            let union = hdr.wr.wr.as_mut_ptr();
            if wr.opcode().is_rdma() {
                let r = &mut *union.cast::<rxe::WrRdma>();
                r.remote_addr = wr.remote_addr();
                r.rkey = wr.rkey();
                hdr.iova = wr.remote_addr();
            } else if wr.opcode().is_atomic() {
                let a = &mut *union.cast::<rxe::WrAtomic>();
                a.remote_addr = wr.remote_addr();
                a.compare_add = wr.compare_add();
                a.swap = wr.swap();
                a.rkey = wr.rkey();
                hdr.iova = wr.remote_addr();
            }
            if let Some(d) = wr.ud_dest() {
                let u = &mut *union.cast::<rxe::WrUd>();
                u.remote_qpn = d.remote_qpn;
                u.remote_qkey = d.remote_qkey;
                u.ah_num = d.ah_num;
            }
            hdr.dma = DmaInfo {
                length: length as u32,
                resid: length as u32,
                cur_sge: 0,
                num_sge: num_sge as u32,
                sge_offset: 0,
                reserved: 0,
            };
            let tail = slot.add(size_of::<SendWqe>());
            match wr.payload() {
                Payload::Sge(sges) => copy_sges(sges, tail.cast::<Sge>()),
                Payload::Inline(bufs) => {
                    let mut at = tail;
                    for b in bufs {
                        std::ptr::copy_nonoverlapping(b.as_ptr(), at, b.len());
                        at = at.add(b.len());
                    }
                }
            }
        }
        Ok(())
    }

    /// rxe's doorbell: POST_SEND with no work requests tells the kernel to
    /// run the requester for this QP.
    ///
    /// The command is framed at its exact size on the stack
    /// ([`write_cmd_fixed`]): it is rung on every post.
    #[inline]
    fn doorbell(&self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        let cmd = PostSend {
            response: 0,
            qp_handle: self.qp_handle,
            wr_count: 0,
            sge_count: 0,
            wqe_size: UVERBS_SEND_WR_SIZE,
        };
        // SAFETY: with `wr_count` 0 POST_SEND carries no work request, hence
        // no user address but its response pointer, which write_cmd_fixed
        // supplies.
        unsafe { write_cmd_fixed::<_, PostSendResp>(fd, nr::POST_SEND, &cmd) }.map(|_| ())
    }
}

/// A receive ring (a QP's RQ or an SRQ's).
#[derive(Debug)]
pub struct RecvQueue {
    ring: Queue,
    max_wr: u32,
    max_sge: u32,
}

impl RecvQueue {
    /// Wraps a mapped receive ring of granted depth `max_wr` whose elements
    /// hold `max_sge` SGEs.
    pub fn new(ring: Queue, max_wr: u32, max_sge: u32) -> Result<Self, Errno> {
        // Checked: the sizes come from the kernel.
        let room = (max_sge as usize)
            .checked_mul(size_of::<Sge>())
            .and_then(|sges| sges.checked_add(size_of::<RecvWqe>()));
        if room.is_none_or(|room| ring.elem_size() < room) || max_wr > ring.mask() {
            return Err(Errno::EPROTO);
        }
        Ok(RecvQueue {
            ring,
            max_wr,
            max_sge,
        })
    }

    /// Capacity in work requests: the depth the kernel granted.
    pub fn capacity(&self) -> u32 {
        self.max_wr
    }

    /// Receives posted and not yet consumed.
    pub fn outstanding(&self) -> u32 {
        self.ring.fill()
    }

    /// Posts the chain `wrs` with one release store of the producer index
    /// (rxe needs no receive doorbell). On error the requests before the
    /// failing index are posted.
    #[inline]
    pub fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), (usize, PostError)> {
        let q = &self.ring;
        let mask = q.mask();
        let start = q.producer().load(Ordering::Relaxed);
        let mut prod = start;
        let mut cons = q.consumer().load(Ordering::Acquire);
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if full(prod, &mut cons, q, self.max_wr) {
                result = Err((i, PostError::QueueFull));
                break;
            }
            let length = match check_recv(wr.sg_list, self.max_sge) {
                Ok(length) => length,
                Err(e) => {
                    result = Err((i, e));
                    break;
                }
            };
            let hdr = RecvWqe {
                wr_id: wr.wr_id,
                reserved: 0,
                padding: 0,
                dma: DmaInfo {
                    length: length as u32,
                    resid: length as u32,
                    cur_sge: 0,
                    num_sge: wr.sg_list.len() as u32,
                    sge_offset: 0,
                    reserved: 0,
                },
            };
            let slot = q.slot(prod);
            // SAFETY: a free slot of this ring, 8-aligned, sized in `new` for
            // a RecvWqe plus max_sge SGEs, which the check above bounds.
            unsafe {
                std::ptr::write(slot.cast::<RecvWqe>(), hdr);
                copy_sges(wr.sg_list, slot.add(size_of::<RecvWqe>()).cast::<Sge>());
            }
            prod = (prod + 1) & mask;
        }
        if prod != start {
            // Release: the WQEs are visible before the kernel sees the index.
            q.producer().store(prod, Ordering::Release);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::io::IoSlice;
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

    use rverbs_abi::qp::qp_type;
    use rverbs_abi::rxe::{MmInfo, QUEUE_DATA_OFFSET};

    use super::*;

    /// A ring of 8 slots of 2^log2 bytes in a memfd, mapped as the kernel's
    /// would be (the header says so), and the memfd.
    fn ring(log2: u32) -> (Queue, OwnedFd) {
        // SAFETY: creates a new fd that nothing else owns.
        let fd = unsafe { libc::memfd_create(c"rxe-ring".as_ptr(), 0) };
        assert!(fd >= 0);
        // SAFETY: `fd` was just opened and is owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let size = QUEUE_DATA_OFFSET + (8 << log2);
        let mut hdr = [0u8; 8];
        hdr[..4].copy_from_slice(&log2.to_ne_bytes());
        hdr[4..].copy_from_slice(&7u32.to_ne_bytes());
        nix::unistd::ftruncate(&fd, size as i64).unwrap();
        // SAFETY: writes `hdr` (8 readable bytes) at offset 0 of our fd.
        let n = unsafe { libc::pwrite(fd.as_raw_fd(), hdr.as_ptr().cast(), hdr.len(), 0) };
        assert_eq!(n, 8);
        let mi = MmInfo {
            offset: 0,
            size: size as u32,
            pad: 0,
        };
        (Queue::map(fd.as_fd(), &mi).unwrap(), fd)
    }

    /// A read-only anonymous mapping of a power of two of bytes (up to 64
    /// TiB) that is never written: no memory is committed for it. It makes
    /// real `&[u8]`s long enough that a few hundred thousand of them add up
    /// past `usize::MAX` without unsafe slices over memory that does not
    /// exist.
    struct Reserved {
        ptr: *mut u8,
        len: usize,
    }

    impl Reserved {
        fn new() -> Reserved {
            for shift in (40..=46).rev() {
                let len = 1usize << shift;
                // SAFETY: a fresh private mapping at an address of the
                // kernel's choosing; nothing existing is touched.
                let p = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                if p != libc::MAP_FAILED {
                    return Reserved { ptr: p.cast(), len };
                }
            }
            panic!("no room for a 1 TiB read-only mapping");
        }

        /// Slices whose lengths add up to 2^64 + `extra.len()`.
        fn overflowing<'a>(&'a self, extra: &'a [u8]) -> Vec<IoSlice<'a>> {
            // SAFETY: `len` readable (zero) bytes mapped at `ptr` until
            // `self` drops; nothing writes them.
            let big = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
            let n = (1u128 << 64) / self.len as u128;
            let mut v: Vec<IoSlice<'a>> = (0..n).map(|_| IoSlice::new(big)).collect();
            v.push(IoSlice::new(extra));
            v
        }
    }

    impl Drop for Reserved {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`; no slice of it outlives
            // `self`.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }

    /// Inline slices whose lengths sum past `usize::MAX` (wrapping to 16,
    /// which fits `max_inline`) are refused as too large, before anything
    /// is copied or published.
    #[test]
    fn inline_length_overflow_is_refused() {
        let (q, fd) = ring(10);
        let mut sq = SendQueue::new(q, 1, qp_type::RC, 4, 1, 64).unwrap();
        let big = Reserved::new();
        let extra = [0x5au8; 16];
        let bufs = big.overflowing(&extra);
        let wrapped = bufs.iter().fold(0usize, |a, b| a.wrapping_add(b.len()));
        assert_eq!(wrapped, 16, "the lengths wrap to 16 bytes");
        let wr = SendWr::send_inline(1, &bufs);
        let want = PostError::InlineTooLarge {
            len: usize::MAX,
            max: 64,
        };
        assert_eq!(sq.post(fd.as_fd(), &[wr]), Err((0, want)));
        assert_eq!(sq.post(fd.as_fd(), &[wr, wr]), Err((0, want)));
        assert_eq!(sq.outstanding(), 0);
    }

    /// Receive scatter lists whose lengths sum past 2^31 are refused.
    #[test]
    fn recv_length_is_checked() {
        let (q, _fd) = ring(8);
        let mut rq = RecvQueue::new(q, 4, 4).unwrap();
        let sge = Sge {
            addr: 0,
            length: u32::MAX,
            lkey: 1,
        };
        let sges = [sge; 4];
        assert_eq!(
            rq.post(&[RecvWr::new(1, &sges)]),
            Err((0, PostError::MessageTooLong))
        );
        assert_eq!(rq.outstanding(), 0);
    }
}
