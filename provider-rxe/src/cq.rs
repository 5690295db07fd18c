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

/// A CQ's completion ring.
#[derive(Debug)]
pub struct Cq {
    /// `None` after a resize whose new ring could not be mapped.
    ring: Option<CqRing>,
}

/// [`Cq::poll`]'s error: the CQ has no ring any more. RESIZE_CQ succeeded,
/// so the kernel produces into its new ring only, but that ring could not
/// be mapped; polling the old one would report nothing while completions
/// pile up unseen. The CQ can only be destroyed.
pub use rverbs_provider::RingLost;

/// What CREATE_CQ returned: the kernel's answer and the mapped ring. If
/// mapping fails the caller must destroy `resp.cq_handle`.
#[derive(Debug)]
pub struct Created {
    /// Core response (handle, actual depth).
    pub resp: CreateCqResp,
    /// The ring, or why it could not be mapped.
    pub cq: Result<Cq, Errno>,
}

/// Issues CREATE_CQ for `cmd` (its `response` is filled in) and maps the ring.
pub fn create(fd: BorrowedFd<'_>, cmd: &CreateCq) -> Result<Created, Errno> {
    let mut drv = rxe::CreateCqResp::new_zeroed();
    let resp = cmd::create_cq(fd, cmd, &mut drv)?;
    let cq = Queue::map(fd, &drv.mi).and_then(Cq::from_ring);
    Ok(Created { resp, cq })
}

/// Issues the extended CREATE_CQ (`IB_USER_VERBS_EX_CMD_CREATE_CQ`, which
/// carries creation flags) and maps the ring.
pub fn create_ex(fd: BorrowedFd<'_>, cmd: &ExCreateCq) -> Result<Created, Errno> {
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
        Ok(Cq {
            ring: Some(CqRing::new(ring)?),
        })
    }

    /// Polls up to `wc.len()` completions into `wc`, returning how many were
    /// written. One acquire load and at most one release store per call.
    /// Fails, every time, once a resize lost the ring ([`RingLost`]).
    #[inline]
    pub fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        let Some(ring) = &mut self.ring else {
            return Err(RingLost);
        };
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
    pub fn pending(&self) -> u32 {
        self.ring.as_ref().map_or(0, |r| r.queue().fill())
    }

    /// Ring capacity (0 once the ring is lost).
    pub fn capacity(&self) -> u32 {
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
    pub fn resize(&mut self, fd: BorrowedFd<'_>, cq_handle: u32, cqe: u32) -> Result<u32, Errno> {
        let mut drv = rxe::ResizeCqResp::new_zeroed();
        let cmd = ResizeCq {
            response: 0,
            cq_handle,
            cqe,
        };
        let resp = cmd::resize_cq(fd, &cmd, &mut drv)?;
        // The kernel has swapped rings: from here on only the new one is
        // produced into.
        self.ring = None;
        self.ring = Some(Queue::map(fd, &drv.mi).and_then(CqRing::new)?);
        Ok(resp.cqe)
    }
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
