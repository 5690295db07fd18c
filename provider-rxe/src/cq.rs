//! rxe completion queues: CREATE_CQ with rxe's driver response, the mapped
//! completion ring, and polling it into `ib_uverbs_wc` entries.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;

use uverbs_abi::cmd::{nr, write_cmd, write_ex_cmd};
use uverbs_abi::cq::{CreateCq, CreateCqResp, ExCreateCq, ExCreateCqResp, ResizeCq, ResizeCqResp};
use uverbs_abi::rxe;
use uverbs_abi::wr::Wc;
use uverbs_abi::Errno;
use zerocopy::{FromZeros, IntoBytes};

use crate::queue::Queue;

/// A CQ's completion ring.
#[derive(Debug)]
pub struct Cq {
    ring: Queue,
}

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
    // SAFETY: CREATE_CQ carries no user address but its response pointer,
    // which write_cmd supplies; rxe takes no driver data in (its ring is
    // the kernel's, mapped below).
    let resp: CreateCqResp = unsafe { write_cmd(fd, nr::CREATE_CQ, cmd, &[], drv.as_mut_bytes())? };
    let cq = Queue::map(fd, &drv.mi).and_then(Cq::from_ring);
    Ok(Created { resp, cq })
}

/// Issues the extended CREATE_CQ (`IB_USER_VERBS_EX_CMD_CREATE_CQ`, which
/// carries creation flags) and maps the ring.
pub fn create_ex(fd: BorrowedFd<'_>, cmd: &ExCreateCq) -> Result<Created, Errno> {
    let mut drv = rxe::CreateCqResp::new_zeroed();
    // SAFETY: the extended CREATE_CQ carries no user address (write_ex_cmd
    // supplies the response buffer); rxe takes no driver data in.
    let resp: ExCreateCqResp =
        unsafe { write_ex_cmd(fd, nr::EX_CREATE_CQ, cmd, &[], drv.as_mut_bytes())? };
    let cq = Queue::map(fd, &drv.mi).and_then(Cq::from_ring);
    Ok(Created {
        resp: resp.base,
        cq,
    })
}

impl Cq {
    fn from_ring(ring: Queue) -> Result<Self, Errno> {
        if ring.elem_size() < size_of::<Wc>() {
            return Err(Errno::EPROTO);
        }
        Ok(Cq { ring })
    }

    /// Polls up to `wc.len()` completions into `wc`, returning how many were
    /// written. One acquire load and at most one release store per call.
    #[inline]
    pub fn poll(&mut self, wc: &mut [Wc]) -> usize {
        let q = &self.ring;
        // The kernel is the only producer; we are the only consumer (`&mut`).
        let mut cons = q.consumer().load(Ordering::Relaxed);
        // Acquire: the kernel's CQE writes happen-before its release store of
        // the producer index, so they are visible once we see the index.
        let prod = q.producer().load(Ordering::Acquire);
        let mut n = 0;
        while n < wc.len() && cons != prod {
            // SAFETY: the slot lies inside the ring, holds at least
            // size_of::<Wc>() bytes (checked in `from_ring`), is 8-aligned, and
            // the kernel will not rewrite it until we move the consumer past it.
            wc[n] = unsafe { std::ptr::read(q.slot(cons).cast::<Wc>()) };
            cons = (cons + 1) & q.mask();
            n += 1;
        }
        if n > 0 {
            // Release: our reads of the slots complete before the kernel may
            // reuse them.
            q.consumer().store(cons, Ordering::Release);
        }
        n
    }

    /// Completions waiting in the ring.
    pub fn pending(&self) -> u32 {
        self.ring.fill()
    }

    /// Ring capacity.
    pub fn capacity(&self) -> u32 {
        self.ring.mask()
    }

    /// Issues RESIZE_CQ and swaps in the new ring. Completions not yet polled
    /// are carried over by the kernel. Returns the new depth.
    pub fn resize(&mut self, fd: BorrowedFd<'_>, cq_handle: u32, cqe: u32) -> Result<u32, Errno> {
        let mut drv = rxe::ResizeCqResp::new_zeroed();
        let cmd = ResizeCq {
            response: 0,
            cq_handle,
            cqe,
        };
        // SAFETY: RESIZE_CQ carries no user address but its response
        // pointer, which write_cmd supplies; rxe takes no driver data in.
        let resp: ResizeCqResp =
            unsafe { write_cmd(fd, nr::RESIZE_CQ, &cmd, &[], drv.as_mut_bytes())? };
        self.ring = Queue::map(fd, &drv.mi)?;
        Ok(resp.cqe)
    }
}
