//! rxe queue pairs: CREATE_QP with rxe's driver response, and the send and
//! receive rings with their post paths.

use std::os::fd::BorrowedFd;

use rverbs_abi::qp::{qp_type as qpt, CreateQp, CreateQpResp, ExCreateQp};
use rverbs_abi::rxe::{self, DmaInfo, RecvWqe};
use rverbs_abi::Errno;
use rverbs_provider::batch::{push_batch, BatchWr, SendBatch};
use rverbs_provider::wr::{AhHold, RecvWr, SendRequest, SendWr, WrOpcode};
use zerocopy::FromZeros;

use crate::cmd;
use crate::queue::{Queue, RecvRing, SendRing};
use crate::{PostError, PostFailed};

/// What CREATE_QP returned: the kernel's answer and the mapped rings. If
/// either ring failed to map the caller must destroy `resp.qp_handle`.
#[derive(Debug)]
pub(crate) struct Created {
    /// Core response (handle, QPN, granted capabilities).
    pub resp: CreateQpResp,
    /// The send ring.
    pub sq: Result<SendQueue, Errno>,
    /// The receive ring; `None` when the QP uses an SRQ.
    pub rq: Result<Option<RecvQueue>, Errno>,
}

/// Issues CREATE_QP for `cmd` and maps its rings.
pub(crate) fn create(fd: BorrowedFd<'_>, cmd: &CreateQp) -> Result<Created, Errno> {
    let mut drv = rxe::CreateQpResp::new_zeroed();
    let resp = cmd::create_qp(fd, cmd, &mut drv)?;
    Ok(map_rings(fd, resp, &drv, cmd.qp_type, cmd.is_srq != 0))
}

/// Issues the extended CREATE_QP (`IB_USER_VERBS_EX_CMD_CREATE_QP`, which
/// carries creation flags) and maps the rings.
pub(crate) fn create_ex(fd: BorrowedFd<'_>, cmd: &ExCreateQp) -> Result<Created, Errno> {
    let mut drv = rxe::CreateQpResp::new_zeroed();
    let resp = cmd::create_qp_ex(fd, cmd, &mut drv)?;
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

/// A QP's send ring.
#[derive(Debug)]
pub(crate) struct SendQueue {
    /// The ring, with the limits every request is checked against.
    ring: SendRing,
    qp_handle: u32,
    /// UD only (empty otherwise), one per ring slot: the address handle
    /// the send last written to that slot names. rxe finds the address
    /// handle by its number when it builds the packet, so the number must
    /// not be handed to another address handle before then: the hold is
    /// dropped only when the slot is written again (the kernel has
    /// consumed the send by then) or with the QP, after DESTROY_QP.
    holds: Box<[Option<AhHold>]>,
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
        let holds = if qp_type == qpt::UD {
            // Bounded by the mapping, which `Queue::map` checked holds
            // this many slots.
            (0..=ring.mask()).map(|_| None).collect()
        } else {
            Box::default()
        };
        Ok(SendQueue {
            ring: SendRing::new(ring, qp_type, max_wr, max_sge, max_inline)?,
            qp_handle,
            holds,
        })
    }

    /// Address handles held for sends the kernel may not have consumed
    /// yet (UD; for tests).
    #[cfg(test)]
    pub(crate) fn ah_holds(&self) -> usize {
        self.holds.iter().filter(|h| h.is_some()).count()
    }

    /// Sets the largest UD message this queue accepts: the active MTU of
    /// the QP's port, which is what rxe compares UD sends against (a longer
    /// one is dropped without an error, IB spec C10-93.1.1). Ignored for
    /// connected QPs, whose messages span packets.
    pub(crate) fn set_ud_mtu(&mut self, mtu: u32) {
        self.ring.set_ud_mtu(mtu);
    }

    /// Accepts `op` (ATOMIC_WRITE, FLUSH), which the caller has seen the
    /// device offer, if the ring's slots can hold it; returns whether it
    /// is accepted.
    pub(crate) fn allow(&mut self, op: WrOpcode) -> bool {
        self.ring.allow(op)
    }

    /// Capacity in work requests: the depth the kernel granted (the ring
    /// itself may have more slots, which are not used).
    pub(crate) fn capacity(&self) -> u32 {
        self.ring.max_wr()
    }

    /// Work requests posted and not yet consumed by the kernel.
    pub(crate) fn outstanding(&self) -> u32 {
        self.ring.queue().fill()
    }

    /// Posts the chain `wrs`: every request is checked, written to the ring
    /// and published with one release store, then one doorbell is rung.
    /// On error, the requests before the failing index are posted (and the
    /// doorbell rung for them) and the error names the index.
    #[inline]
    pub(crate) fn post(
        &mut self,
        fd: BorrowedFd<'_>,
        wrs: &[SendWr<'_>],
    ) -> Result<(), PostFailed> {
        if let [wr] = wrs {
            return self.post_one(fd, wr);
        }
        self.post_chain(fd, wrs.iter())
    }

    /// Posts the requests `reqs` yields, read in place ([`SendRequest`]),
    /// as [`SendQueue::post`] posts a slice of them.
    #[inline]
    pub(crate) fn post_iter<R: SendRequest, I: Iterator<Item = R>>(
        &mut self,
        fd: BorrowedFd<'_>,
        reqs: I,
    ) -> Result<(), PostFailed> {
        self.post_chain(fd, reqs)
    }

    /// [`SendQueue::post`] of a chain (or of nothing). A function of its
    /// own: its loop gets the registers to itself, whatever code the
    /// caller is compiled into.
    #[inline(never)]
    fn post_chain<R: SendRequest, I: Iterator<Item = R>>(
        &mut self,
        fd: BorrowedFd<'_>,
        wrs: I,
    ) -> Result<(), PostFailed> {
        let mut p = self.ring.producer();
        let mut result = Ok(());
        for wr in wrs {
            let slot = p.next_slot();
            if let Err(e) = p.push_send(&wr, has_dest) {
                // A failed push pushes nothing: what was pushed is the
                // index of `wr` in the chain.
                result = Err(PostFailed::new(p.pushed(), e));
                break;
            }
            keep_hold(&mut self.holds, slot, &wr);
        }
        let pushed = p.pushed();
        if p.publish() {
            if let Err(e) = cmd::doorbell(fd, self.qp_handle) {
                return Err(PostFailed::new(pushed, PostError::Doorbell(e)));
            }
        }
        result
    }

    /// Posts the batch `wrs` of `batch`'s operation: its uniform part
    /// checked once, then as many entries as the ring has free slots are
    /// written as the equivalent requests, one at a time
    /// ([`push_batch`]: no array, no allocation), signaled as the batch
    /// says, published with one release store and one doorbell. Entries
    /// that do not fit end with [`PostError::QueueFull`] at the first of
    /// them; on error the entries before the returned index were posted.
    pub(crate) fn post_batch(
        &mut self,
        fd: BorrowedFd<'_>,
        batch: &SendBatch,
        wrs: &[BatchWr],
    ) -> Result<(), PostFailed> {
        self.ring.checks().check_batch(batch)?;
        // The kernel only frees slots: all of these stay free.
        let free = self.ring.max_wr().saturating_sub(self.outstanding());
        let mut p = self.ring.producer();
        let result =
            push_batch(batch, wrs, free, |wr| p.push_send(wr, has_dest)).map_err(PostFailed::from);
        let pushed = p.pushed();
        if p.publish() {
            if let Err(e) = cmd::doorbell(fd, self.qp_handle) {
                return Err(PostFailed::new(pushed, PostError::Doorbell(e)));
            }
        }
        result
    }

    /// [`SendQueue::post`] of a single request, the common case: the same
    /// steps without the loop, whose bookkeeping (kept in registers and
    /// stack slots across iterations) would cost more than the request.
    /// Always compiled into its caller: the library's post and the C
    /// ABI's `ibv_post_send`, one frame each.
    #[inline(always)]
    fn post_one<R: SendRequest + ?Sized>(
        &mut self,
        fd: BorrowedFd<'_>,
        wr: &R,
    ) -> Result<(), PostFailed> {
        let mut p = self.ring.producer();
        let slot = p.next_slot();
        p.push_send(wr, has_dest)?;
        p.publish();
        keep_hold(&mut self.holds, slot, wr);
        cmd::doorbell(fd, self.qp_handle).map_err(|e| PostFailed::new(1, PostError::Doorbell(e)))
    }

    /// Posts one request read in place ([`SendRequest`]: a [`SendWr`], or
    /// another form of it such as the C ABI's), with the same checks and
    /// the same entry as [`SendQueue::post`]; [`PostError::Doorbell`] (at
    /// index 1) means it was posted and the doorbell failed.
    #[inline(always)]
    pub(crate) fn post_request<R: SendRequest + ?Sized>(
        &mut self,
        fd: BorrowedFd<'_>,
        wr: &R,
    ) -> Result<(), PostFailed> {
        self.post_one(fd, wr)
    }
}

/// Keeps the hold of `wr`'s address handle (none: drops the one kept) in
/// `slot`, where `wr` was just written: whatever send used the slot
/// before has been consumed by the kernel, or the slot would not have
/// been free. No-op for a connected QP (no holds).
#[inline(always)]
fn keep_hold<R: SendRequest + ?Sized>(holds: &mut [Option<AhHold>], slot: u32, wr: &R) {
    if let Some(h) = holds.get_mut(slot as usize) {
        *h = wr.ud_dest().and_then(|d| d.hold).cloned();
    }
}

/// Whether a UD destination is one this provider can send to: ah_num 0 is
/// how old kernels said "the AV is in the WQE", which it does not build.
#[inline(always)]
fn has_dest(d: &rverbs_provider::wr::UdDest<'_>) -> bool {
    d.ah_num != 0
}

/// A receive ring (a QP's RQ or an SRQ's).
#[derive(Debug)]
pub(crate) struct RecvQueue {
    ring: RecvRing,
}

impl RecvQueue {
    /// Wraps a mapped receive ring of granted depth `max_wr` whose elements
    /// hold `max_sge` SGEs.
    pub(crate) fn new(ring: Queue, max_wr: u32, max_sge: u32) -> Result<Self, Errno> {
        Ok(RecvQueue {
            ring: RecvRing::new(ring, max_wr, max_sge)?,
        })
    }

    /// Capacity in work requests: the depth the kernel granted.
    pub(crate) fn capacity(&self) -> u32 {
        self.ring.max_wr()
    }

    /// Receives posted and not yet consumed.
    pub(crate) fn outstanding(&self) -> u32 {
        self.ring.queue().fill()
    }

    /// Posts the chain `wrs` with one release store of the producer index
    /// (rxe needs no receive doorbell). On error the requests before the
    /// failing index are posted.
    #[inline]
    pub(crate) fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        if let [wr] = wrs {
            return self.post_one(wr).map_err(PostFailed::first);
        }
        self.post_chain(wrs)
    }

    /// [`RecvQueue::post`] of a chain (or of nothing).
    #[inline(never)]
    fn post_chain(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        let mut p = self.ring.producer();
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if let Err(e) = p.push_recv(wr.sg_list, |length| recv_wqe(wr, length)) {
                result = Err(PostFailed::new(i, e));
                break;
            }
        }
        p.publish();
        result
    }

    /// [`RecvQueue::post`] of a lone request, the common call, in one
    /// straight line.
    #[inline(always)]
    fn post_one(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        let mut p = self.ring.producer();
        p.push_recv(wr.sg_list, |length| recv_wqe(wr, length))?;
        p.publish();
        Ok(())
    }
}

/// The header of the receive WQE of `wr`, whose scatter list holds
/// `length` bytes (checked: at most 2^31).
#[inline(always)]
fn recv_wqe(wr: &RecvWr<'_>, length: u64) -> RecvWqe {
    RecvWqe {
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
    }
}

#[cfg(test)]
// The fixtures make rings in memfds and large read-only mappings.
#[allow(unsafe_code)]
mod tests {
    use std::io::IoSlice;
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

    use rverbs_abi::qp::qp_type;
    use rverbs_abi::rxe::{MmInfo, QUEUE_DATA_OFFSET};
    use rverbs_provider::wr::SendFlags;

    use super::*;
    use rverbs_abi::wr::Sge;
    use rverbs_provider::wr::UdDest;
    use zerocopy::{FromBytes, IntoBytes};

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
        assert_eq!(sq.post(fd.as_fd(), &[wr]), Err(PostFailed::new(0, want)));
        assert_eq!(
            sq.post(fd.as_fd(), &[wr, wr]),
            Err(PostFailed::new(0, want))
        );
        assert_eq!(sq.outstanding(), 0);
    }

    /// The bytes of slot `index` of a ring of 2^`log2`-byte slots in `fd`.
    fn slot_bytes(fd: &OwnedFd, log2: u32, index: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::from(fd.try_clone().unwrap());
        let mut b = vec![0u8; 1 << log2];
        f.read_exact_at(&mut b, (QUEUE_DATA_OFFSET + (index << log2)) as u64)
            .unwrap();
        b
    }

    /// Sets the ring's shared index at `offset` in `fd`, as the kernel would.
    fn set_index(fd: &OwnedFd, offset: usize, value: u32) {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::from(fd.try_clone().unwrap());
        f.write_all_at(&value.to_ne_bytes(), offset as u64).unwrap();
    }

    const PROD: usize = std::mem::offset_of!(rverbs_abi::rxe::QueueBuf, producer_index);
    const CONS: usize = std::mem::offset_of!(rverbs_abi::rxe::QueueBuf, consumer_index);

    /// Where the tests' doorbells (`write()`s on the command fd) go.
    fn doorbell_sink() -> std::fs::File {
        std::fs::File::options()
            .write(true)
            .open("/dev/null")
            .unwrap()
    }

    /// UD: each slot keeps the address handle its send names until the
    /// slot is written again (the kernel consumed that send) or the queue
    /// is dropped; a send without a hold (a destination built by hand)
    /// drops the one its slot kept.
    #[test]
    fn ud_sends_hold_their_address_handle_until_the_slot_is_reused() {
        let (q, fd) = ring(10);
        let mut sq = SendQueue::new(q, 1, qp_type::UD, 6, 2, 64).unwrap();
        sq.set_ud_mtu(4096);
        let null = doorbell_sink();
        let sge = [Sge {
            addr: 0x1000,
            length: 64,
            lkey: 9,
        }];
        let hold = AhHold::new(std::sync::Arc::new(()));
        let dest = UdDest {
            ah_num: 3,
            av: None,
            remote_qpn: 5,
            remote_qkey: 7,
            hold: Some(&hold),
        };
        let held = SendWr::send(1, &sge).dest(dest);
        let by_hand = SendWr::send(2, &sge).dest(UdDest { hold: None, ..dest });
        sq.post(null.as_fd(), &[held]).unwrap();
        assert_eq!((hold.holders(), sq.ah_holds()), (2, 1));
        sq.post(null.as_fd(), &[held, held]).unwrap();
        assert_eq!((hold.holders(), sq.ah_holds()), (4, 3));
        // The kernel consumes slots 0..3; five more fill 3..8 (no holds
        // kept for them) and wrap the producer to 0.
        set_index(&fd, CONS, 3);
        sq.post(null.as_fd(), &[by_hand; 5]).unwrap();
        assert_eq!((hold.holders(), sq.ah_holds()), (4, 3));
        // Slot 0 is written again once the kernel has consumed it.
        set_index(&fd, CONS, 0);
        sq.post(null.as_fd(), &[by_hand]).unwrap();
        assert_eq!((hold.holders(), sq.ah_holds()), (3, 2));
        drop(sq);
        assert_eq!(hold.holders(), 1);
    }

    /// A chain fills the ring up to the granted depth, is published once,
    /// and the slots the kernel hands back are reused across the wrap.
    /// Each WQE holds its header and SGE where the kernel reads them.
    #[test]
    fn send_ring_fills_publishes_and_wraps() {
        let (q, fd) = ring(10);
        let mut sq = SendQueue::new(q, 1, qp_type::RC, 6, 2, 64).unwrap();
        let null = doorbell_sink();
        let sge = [Sge {
            addr: 0x1000,
            length: 64,
            lkey: 9,
        }];
        let wrs: Vec<_> = (0..7)
            .map(|i| SendWr::rdma_write(i, &sge, 0xabc0 + i, 77))
            .collect();
        assert_eq!(
            sq.post(null.as_fd(), &wrs),
            Err(PostFailed::new(6, PostError::QueueFull))
        );
        assert_eq!(sq.outstanding(), 6);
        let b = slot_bytes(&fd, 10, 5);
        let wqe = rxe::SendWqe::read_from_prefix(&b).unwrap().0;
        assert_eq!(wqe.wr.wr_id, 5);
        assert_eq!(wqe.wr.opcode, WrOpcode::RdmaWrite as u32);
        assert_eq!(wqe.iova, 0xabc5);
        let rdma = rxe::WrRdma::read_from_prefix(wqe.wr.wr.as_bytes())
            .unwrap()
            .0;
        assert_eq!((rdma.remote_addr, rdma.rkey), (0xabc5, 77));
        assert_eq!((wqe.dma.num_sge, wqe.dma.length), (1, 64));
        let tail = Sge::read_from_prefix(&b[size_of::<rxe::SendWqe>()..])
            .unwrap()
            .0;
        assert_eq!(tail, sge[0]);
        // The kernel consumes four: four more fit, wrapping past slot 7.
        set_index(&fd, CONS, 4);
        assert_eq!(sq.outstanding(), 2);
        assert_eq!(sq.post(null.as_fd(), &wrs[..4]), Ok(()));
        assert_eq!(sq.outstanding(), 6);
        assert_eq!(
            sq.post(null.as_fd(), &wrs[..1]),
            Err(PostFailed::new(0, PostError::QueueFull))
        );
        let b = slot_bytes(&fd, 10, 1);
        assert_eq!(rxe::SendWqe::read_from_prefix(&b).unwrap().0.wr.wr_id, 3);
    }

    /// Requests read in place, one at a time (`post_request`) or as a
    /// chain (`post_iter`), make the very slots `post` makes of the same
    /// requests; a refused one stops the chain at its index, as with
    /// `post`. Receives posted one at a time land as a chain's do.
    #[test]
    fn requests_read_in_place_make_the_same_slots() {
        use rverbs_provider::wr::ForeignWr;
        let null = doorbell_sink();
        let sge = [Sge {
            addr: 0x1000,
            length: 64,
            lkey: 9,
        }];
        let eight = [Sge {
            addr: 0x2000,
            length: 8,
            lkey: 9,
        }];
        let data = [0x5au8; 12];
        let inline = [IoSlice::new(&data)];
        let wrs = [
            SendWr::rdma_write_with_imm(1, &sge, 0xabc0, 77, 0xcafe_f00d)
                .flags(SendFlags::SOLICITED | SendFlags::FENCE),
            SendWr::rdma_read(2, &sge, 0x10, 0x20).signaled(),
            SendWr::send(3, &sge),
            SendWr::send_inline(4, &inline).signaled(),
            SendWr::cmp_swap(5, &eight[0], 0x8008, 0x78, 1, 2),
            SendWr::fetch_add(6, &eight[0], 0x8010, 0x78, 3).signaled(),
        ];
        let slots = |fd: &OwnedFd, n: usize| -> Vec<Vec<u8>> {
            (0..n).map(|i| slot_bytes(fd, 10, i)).collect()
        };
        let queue = || {
            let (q, fd) = ring(10);
            (SendQueue::new(q, 1, qp_type::RC, 7, 2, 64).unwrap(), fd)
        };
        let (mut a, fa) = queue();
        let (mut b, fb) = queue();
        let (mut c, fc) = queue();
        a.post(null.as_fd(), &wrs).unwrap();
        for wr in &wrs {
            b.post_request(null.as_fd(), &ForeignWr(*wr)).unwrap();
        }
        c.post_iter(null.as_fd(), wrs.iter().map(|w| ForeignWr(*w)))
            .unwrap();
        assert_eq!(slots(&fa, wrs.len()), slots(&fb, wrs.len()));
        assert_eq!(slots(&fa, wrs.len()), slots(&fc, wrs.len()));
        assert_eq!((b.outstanding(), c.outstanding()), (6, 6));

        let three = [sge[0]; 3];
        let mixed = [wrs[0], SendWr::send(9, &three), wrs[2]];
        let (mut a, fa) = queue();
        let (mut b, fb) = queue();
        let want = a.post(null.as_fd(), &mixed);
        assert_eq!(
            want,
            Err(PostFailed::new(
                1,
                PostError::TooManySge { given: 3, max: 2 }
            ))
        );
        assert_eq!(
            b.post_iter(null.as_fd(), mixed.iter().map(|w| ForeignWr(*w))),
            want
        );
        assert_eq!(slots(&fa, 2), slots(&fb, 2));
        assert_eq!(b.outstanding(), 1);

        let (q, fa) = ring(10);
        let mut a = RecvQueue::new(q, 4, 2).unwrap();
        let (q, fb) = ring(10);
        let mut b = RecvQueue::new(q, 4, 2).unwrap();
        let recvs = [RecvWr::new(10, &sge), RecvWr::new(11, &three[..2])];
        a.post(&recvs).unwrap();
        for r in &recvs {
            b.post(std::slice::from_ref(r)).unwrap();
        }
        assert_eq!(slots(&fa, 2), slots(&fb, 2));
        assert_eq!(
            b.post(&[RecvWr::new(12, &three)]),
            Err(PostFailed::new(
                0,
                PostError::TooManySge { given: 3, max: 2 }
            ))
        );
    }

    /// ATOMIC_WRITE and FLUSH are refused until allowed, then land as
    /// rdma-core's rxe provider writes them: the RDMA arm and the 8 bytes
    /// in the data area (length 8, no SGE), or the FLUSH arm with the
    /// range's length in `dma`.
    #[test]
    fn atomic_write_and_flush_wqes() {
        use rverbs_provider::wr::FlushType;
        let (q, fd) = ring(8);
        let mut sq = SendQueue::new(q, 1, qp_type::RC, 4, 0, 0).unwrap();
        let null = doorbell_sink();
        let aw = SendWr::atomic_write(7, 0x4000, 0x55, *b"12345678")
            .flags(SendFlags::SIGNALED | SendFlags::INLINE);
        let fl = SendWr::rdma_flush(8, 0x5000, 0x66, 65536, FlushType::GLOBAL);
        for wr in [aw, fl] {
            assert_eq!(
                sq.post(null.as_fd(), &[wr]),
                Err(PostFailed::new(
                    0,
                    PostError::OpcodeUnsupported(wr.opcode())
                ))
            );
        }
        assert!(sq.allow(WrOpcode::AtomicWrite) && sq.allow(WrOpcode::Flush));
        assert_eq!(sq.post(null.as_fd(), &[aw, fl]), Ok(()));

        let b = slot_bytes(&fd, 8, 0);
        let wqe = rxe::SendWqe::read_from_prefix(&b).unwrap().0;
        assert_eq!((wqe.wr.wr_id, wqe.wr.opcode), (7, 15));
        assert_eq!(
            wqe.wr.send_flags,
            SendFlags::SIGNALED.bits(),
            "never INLINE"
        );
        let r = rxe::WrRdma::read_from_prefix(wqe.wr.wr.as_bytes())
            .unwrap()
            .0;
        assert_eq!((r.remote_addr, r.rkey, wqe.iova), (0x4000, 0x55, 0x4000));
        let d = wqe.dma;
        assert_eq!((d.length, d.resid, d.num_sge), (8, 8, 0));
        let at = size_of::<rxe::SendWqe>();
        assert_eq!(&b[at..at + 8], b"12345678");

        let b = slot_bytes(&fd, 8, 1);
        let wqe = rxe::SendWqe::read_from_prefix(&b).unwrap().0;
        assert_eq!((wqe.wr.wr_id, wqe.wr.opcode), (8, 14));
        let f = rxe::WrFlush::read_from_prefix(wqe.wr.wr.as_bytes())
            .unwrap()
            .0;
        assert_eq!(
            (f.remote_addr, f.length, f.rkey, f.type_, f.level),
            (0x5000, 65536, 0x66, 1, 0)
        );
        assert_eq!(
            (wqe.dma.length, wqe.dma.resid, wqe.iova),
            (65536, 65536, 0x5000)
        );
    }

    /// Receives: the depth is the granted one, failures post nothing, and
    /// the header and SGEs land in the slot.
    #[test]
    fn recv_ring_fills_and_writes_sges() {
        let (q, fd) = ring(8);
        let mut rq = RecvQueue::new(q, 3, 2).unwrap();
        let sges = [
            Sge {
                addr: 1,
                length: 10,
                lkey: 2,
            },
            Sge {
                addr: 3,
                length: 20,
                lkey: 4,
            },
        ];
        let wrs = [RecvWr::new(10, &sges), RecvWr::new(11, &sges[..1])];
        assert_eq!(rq.post(&wrs), Ok(()));
        assert_eq!(
            rq.post(&[RecvWr::new(12, &[sges[0]; 3])]),
            Err(PostFailed::new(
                0,
                PostError::TooManySge { given: 3, max: 2 }
            ))
        );
        assert_eq!(
            rq.post(&wrs),
            Err(PostFailed::new(1, PostError::RecvQueueFull))
        );
        assert_eq!(rq.outstanding(), 3);
        let b = slot_bytes(&fd, 8, 0);
        let wqe = RecvWqe::read_from_prefix(&b).unwrap().0;
        assert_eq!((wqe.wr_id, wqe.dma.num_sge, wqe.dma.length), (10, 2, 30));
        let at = size_of::<RecvWqe>();
        let got = <[Sge; 2]>::read_from_prefix(&b[at..]).unwrap().0;
        assert_eq!(got, sges);
        set_index(&fd, CONS, 3);
        set_index(&fd, PROD, 3);
        assert_eq!(rq.outstanding(), 0);
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
            Err(PostFailed::new(0, PostError::MessageTooLong))
        );
        assert_eq!(rq.outstanding(), 0);
    }
}
