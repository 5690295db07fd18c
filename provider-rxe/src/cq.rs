//! rxe completion queues: CREATE_CQ with rxe's driver response, the mapped
//! completion ring, and polling it into `ib_uverbs_wc` entries.

use std::os::fd::BorrowedFd;

use rverbs_abi::cq::{CreateCq, CreateCqResp, ExCreateCq, ResizeCq};
use rverbs_abi::rxe;
use rverbs_abi::wr::Wc;
use rverbs_abi::Errno;
use zerocopy::FromZeros;

use crate::cmd;
use crate::queue::{CqRing, Queue};
use crate::stale::{CqShared, StaleFilter};

/// A CQ's completion ring.
#[derive(Debug)]
pub(crate) struct Cq {
    /// `None` after a resize whose new ring could not be mapped.
    ring: Option<CqRing>,
    /// The marks of its reset QPs' stale completions, shared with them.
    shared: CqShared,
}

/// [`Cq::poll`]'s error: the CQ has no ring any more. RESIZE_CQ succeeded,
/// so the kernel produces into its new ring only, but that ring could not
/// be mapped; polling the old one would report nothing while completions
/// pile up unseen. The CQ can only be destroyed.
pub(crate) use rverbs_provider::RingLost;

/// What CREATE_CQ returned: the kernel's answer and the mapped ring. If
/// mapping fails the caller must destroy `resp.cq_handle`.
#[derive(Debug)]
pub(crate) struct Created {
    /// Core response (handle, actual depth).
    pub resp: CreateCqResp,
    /// The ring, or why it could not be mapped.
    pub cq: Result<Cq, Errno>,
}

/// Issues CREATE_CQ for `cmd` (its `response` is filled in) and maps the ring.
pub(crate) fn create(fd: BorrowedFd<'_>, cmd: &CreateCq) -> Result<Created, Errno> {
    let mut drv = rxe::CreateCqResp::new_zeroed();
    let resp = cmd::create_cq(fd, cmd, &mut drv)?;
    let cq = Queue::map(fd, &drv.mi).and_then(Cq::from_ring);
    Ok(Created { resp, cq })
}

/// Issues the extended CREATE_CQ (`IB_USER_VERBS_EX_CMD_CREATE_CQ`, which
/// carries creation flags) and maps the ring.
pub(crate) fn create_ex(fd: BorrowedFd<'_>, cmd: &ExCreateCq) -> Result<Created, Errno> {
    let mut drv = rxe::CreateCqResp::new_zeroed();
    let resp = cmd::create_cq_ex(fd, cmd, &mut drv)?;
    let cq = Queue::map(fd, &drv.mi).and_then(Cq::from_ring);
    Ok(Created {
        resp: resp.base,
        cq,
    })
}

impl Cq {
    fn from_ring(ring: Queue) -> Result<Self, Errno> {
        let ring = CqRing::new(ring)?;
        let shared = CqShared::new(ring.shared_queue());
        Ok(Cq {
            ring: Some(ring),
            shared,
        })
    }

    /// What the CQ's QPs keep of it (to mark their completions stale when
    /// they are reset).
    pub(crate) fn shared(&self) -> CqShared {
        self.shared.clone()
    }

    /// Polls up to `wc.len()` completions into `wc`, returning how many were
    /// written. Two acquire loads and at most one release store per call;
    /// completions a reset QP left ([`crate::stale`]) are dropped.
    /// Fails, every time, once a resize lost the ring ([`RingLost`]).
    #[inline]
    pub(crate) fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        let Some(ring) = &mut self.ring else {
            return Err(RingLost);
        };
        if let Some(mut stale) = self.shared.filter() {
            return Ok(poll_dropping_stale(ring, wc, &mut stale));
        }
        // The kernel is the only producer; we are the only consumer (`&mut`).
        let mut c = ring.consumer();
        let mut n = 0;
        while n < wc.len() && c.pop_into(&mut wc[n]) {
            n += 1;
        }
        if n > 0 {
            c.publish();
        }
        Ok(n)
    }

    /// Completions waiting in the ring (0 once the ring is lost).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> u32 {
        self.ring.as_ref().map_or(0, |r| r.queue().fill())
    }

    /// Ring capacity (0 once the ring is lost).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> u32 {
        self.ring.as_ref().map_or(0, |r| r.queue().mask())
    }

    /// Issues RESIZE_CQ and swaps in the new ring. Completions not yet polled
    /// are carried over by the kernel. Returns the new depth.
    ///
    /// If the kernel resized but the new ring cannot be mapped, the error
    /// is returned and the CQ is left without a ring: every later
    /// [`Cq::poll`] fails with [`RingLost`]. The old mapping still shows
    /// the old buffer, but the kernel no longer produces into it, so
    /// polling it would lose completions silently. (As the SRQ's resize.)
    pub(crate) fn resize(
        &mut self,
        fd: BorrowedFd<'_>,
        cq_handle: u32,
        cqe: u32,
    ) -> Result<u32, Errno> {
        let mut drv = rxe::ResizeCqResp::new_zeroed();
        let cmd = ResizeCq {
            response: 0,
            cq_handle,
            cqe,
        };
        let old = self
            .ring
            .as_ref()
            .map(|r| (r.queue().consumer_now(), r.queue().mask()));
        let resp = cmd::resize_cq(fd, &cmd, &mut drv)?;
        // The kernel has swapped rings: from here on only the new one is
        // produced into.
        self.ring = None;
        let ring = Queue::map(fd, &drv.mi).and_then(CqRing::new);
        let (old_cons, old_mask) = old.unwrap_or((0, 0));
        self.shared.resized(
            ring.as_ref().ok().map(CqRing::shared_queue),
            old_cons,
            old_mask,
        );
        self.ring = Some(ring?);
        Ok(resp.cqe)
    }
}

/// [`Cq::poll`] while a reset QP's completions are marked stale: each
/// completion is read, and those of a marked QP before its mark are
/// handed back to the kernel without being reported.
#[cold]
fn poll_dropping_stale(ring: &mut CqRing, wc: &mut [Wc], stale: &mut StaleFilter<'_>) -> usize {
    let mut c = ring.consumer();
    let (mut n, mut read) = (0, false);
    while n < wc.len() {
        stale.at(c.index());
        if !c.pop_into(&mut wc[n]) {
            break;
        }
        read = true;
        if !stale.drops(&wc[n]) {
            n += 1;
        }
    }
    stale.at(c.index());
    if read {
        c.publish();
    }
    n
}

#[cfg(test)]
// The fixtures make rings in memfds and large read-only mappings.
#[allow(unsafe_code)]
mod tests {
    use std::fs::File;
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};

    use rverbs_abi::rxe::{MmInfo, QUEUE_DATA_OFFSET};

    use super::*;
    use zerocopy::IntoBytes;

    const SLOTS: u32 = 8;
    const LOG2_ELEM: u32 = 6; // 64-byte slots, as rxe's CQEs

    /// A CQ over a ring in a memfd laid out as rxe lays out its rings,
    /// with one completion (`wr_id` 7) produced.
    fn memfd_cq() -> (OwnedFd, Cq) {
        memfd_cq_at(0)
    }

    /// [`memfd_cq`] with the header's consumer index set to `consumer`
    /// (the producer index is 1).
    fn memfd_cq_at(consumer: u32) -> (OwnedFd, Cq) {
        // SAFETY: a valid C string; memfd_create has no other preconditions.
        let raw = unsafe { libc::memfd_create(c"rxe-cq-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0, "memfd_create: {}", Errno::last());
        // SAFETY: memfd_create just returned this fd; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = QUEUE_DATA_OFFSET + ((SLOTS as usize) << LOG2_ELEM);
        let f = File::from(fd.try_clone().unwrap());
        f.set_len(size as u64).unwrap();
        let mut hdr = rverbs_abi::rxe::QueueBuf::new_zeroed();
        hdr.log2_elem_size = LOG2_ELEM;
        hdr.index_mask = SLOTS - 1;
        hdr.producer_index = 1;
        hdr.consumer_index = consumer;
        let wc = Wc {
            wr_id: 7,
            ..Wc::new_zeroed()
        };
        use std::os::unix::fs::FileExt;
        f.write_all_at(hdr.as_bytes(), 0).unwrap();
        f.write_all_at(wc.as_bytes(), QUEUE_DATA_OFFSET as u64)
            .unwrap();
        let mi = MmInfo {
            offset: 0,
            size: size as u32,
            pad: 0,
        };
        let cq = Queue::map(fd.as_fd(), &mi).and_then(Cq::from_ring).unwrap();
        (fd, cq)
    }

    /// The kernel's side of a memfd ring: writes completion `wc` at slot
    /// `index` and sets the producer index to `index + 1`.
    fn produce(fd: &OwnedFd, index: u32, wc: &Wc) {
        use std::os::unix::fs::FileExt;
        let f = File::from(fd.try_clone().unwrap());
        let at = QUEUE_DATA_OFFSET as u64 + ((index as u64 & (SLOTS as u64 - 1)) << LOG2_ELEM);
        f.write_all_at(wc.as_bytes(), at).unwrap();
        let prod = (index + 1) & (SLOTS - 1);
        let off = std::mem::offset_of!(rverbs_abi::rxe::QueueBuf, producer_index);
        f.write_all_at(&prod.to_ne_bytes(), off as u64).unwrap();
    }

    fn wc_of(qp_num: u32, wr_id: u64) -> Wc {
        Wc {
            wr_id,
            qp_num,
            ..Wc::new_zeroed()
        }
    }

    /// A reset QP's completions already in the ring are dropped, its
    /// later ones and another QP's are reported, in order, across polls
    /// that stop mid-way and across the ring's wrap.
    #[test]
    fn completions_of_a_reset_qp_before_the_reset_are_dropped() {
        // Consumer at 5: slots 5, 6, 7, 0, ... (the wrap inside the run).
        let (fd, mut cq) = memfd_cq_at(5);
        let shared = cq.shared();
        // Slot 0 holds wr_id 7 of QP 0 (the fixture); rewrite the run.
        produce(&fd, 5, &wc_of(9, 1)); // QP 9, before its reset
        produce(&fd, 6, &wc_of(4, 2)); // QP 4
        produce(&fd, 7, &wc_of(9, 3)); // QP 9, before its reset
        shared.reset_qp(9);
        produce(&fd, 0, &wc_of(9, 4)); // QP 9's next life
        produce(&fd, 1, &wc_of(4, 5));
        let mut wc = [Wc::new_zeroed(); 1];
        let mut got = vec![];
        while cq.poll(&mut wc) == Ok(1) {
            got.push((wc[0].qp_num, wc[0].wr_id));
        }
        assert_eq!(got, [(4, 2), (9, 4), (4, 5)]);
        // The mark is spent: QP 9's completions are reported again.
        produce(&fd, 2, &wc_of(9, 6));
        assert_eq!(shared.marked(), 0);
        let mut wc = [Wc::new_zeroed(); 4];
        assert_eq!(cq.poll(&mut wc), Ok(1));
        assert_eq!(wc[0].wr_id, 6);
    }

    /// A reset with nothing in the ring marks nothing; a poll of a ring of
    /// only stale completions reports none and hands their slots back.
    #[test]
    fn stale_only_ring_polls_empty_and_is_consumed() {
        let (fd, mut cq) = memfd_cq_at(0);
        let shared = cq.shared();
        // The fixture's completion (QP 0) at slot 0; one more of QP 0.
        produce(&fd, 1, &wc_of(0, 8));
        shared.reset_qp(0);
        let mut wc = [Wc::new_zeroed(); 4];
        assert_eq!(cq.poll(&mut wc), Ok(0));
        assert_eq!(cq.pending(), 0);
        assert_eq!(shared.marked(), 0);
        shared.reset_qp(0);
        assert_eq!(shared.marked(), 0);
    }

    #[test]
    fn poll_reads_the_ring() {
        let (_fd, mut cq) = memfd_cq();
        assert_eq!(cq.pending(), 1);
        let mut wc = [Wc::new_zeroed(); 4];
        assert_eq!(cq.poll(&mut wc), Ok(1));
        assert_eq!(wc[0].wr_id, 7);
        assert_eq!(cq.poll(&mut wc), Ok(0));
    }

    /// The shared header is memory the kernel maps too: an index there
    /// that is not masked (here u32::MAX, one below the producer's 1 when
    /// wrapped) is stepped over with wrapping arithmetic, never an
    /// overflow panic, and the poll ends at the producer index.
    #[test]
    fn an_unmasked_consumer_index_does_not_overflow() {
        let (_fd, mut cq) = memfd_cq_at(u32::MAX);
        let mut wc = [Wc::new_zeroed(); 16];
        // Slots 7 (u32::MAX masked) and 0 (the completion written).
        assert_eq!(cq.poll(&mut wc), Ok(2));
        assert_eq!(wc[1].wr_id, 7);
        assert_eq!(cq.poll(&mut wc), Ok(0));
    }

    /// RESIZE_CQ succeeds but the new ring cannot be mapped: the CQ must
    /// not go on polling the old ring (which the kernel no longer fills).
    /// `/dev/null` stands in for the kernel: it accepts the command and
    /// answers nothing, so the new ring's description is all zeros and
    /// mapping it fails.
    #[test]
    fn resize_whose_ring_cannot_be_mapped_loses_the_ring_loudly() {
        let (_fd, mut cq) = memfd_cq();
        let null = File::options().write(true).open("/dev/null").unwrap();
        assert_eq!(cq.resize(null.as_fd(), 1, 64), Err(Errno::EINVAL));
        let mut wc = [Wc::new_zeroed(); 4];
        // Before the fix the stale ring was still polled: Ok(1) here.
        assert_eq!(cq.poll(&mut wc), Err(RingLost));
        assert_eq!(cq.poll(&mut wc), Err(RingLost));
        assert_eq!((cq.pending(), cq.capacity()), (0, 0));
        assert!(RingLost.to_string().contains("cannot be read"));
    }
}
