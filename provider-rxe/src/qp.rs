//! rxe queue pairs: CREATE_QP with rxe's driver response, and the send and
//! receive rings with their post paths.

use std::os::fd::BorrowedFd;
use std::sync::atomic::Ordering;

use uverbs_abi::cmd::{nr, write_cmd};
use uverbs_abi::qp::{qp_type, CreateQp, CreateQpResp};
use uverbs_abi::rxe::{self, DmaInfo, RecvWqe, SendWqe};
use uverbs_abi::wr::{
    Payload, PostSend, PostSendResp, RecvWr, SendFlags, SendWr, Sge, WrOpcode, UVERBS_SEND_WR_SIZE,
};
use uverbs_abi::Errno;
use zerocopy::{FromZeros, IntoBytes};

use crate::queue::Queue;
use crate::PostError;

/// Largest message IB allows (2^31 bytes).
const MAX_MSG: u64 = 1 << 31;

/// Largest IB MTU: the UD message bound until [`SendQueue::set_ud_mtu`]
/// gives the port's.
const MAX_MTU: u32 = 4096;

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
    let resp: CreateQpResp = write_cmd(fd, nr::CREATE_QP, cmd, &[], drv.as_mut_bytes())?;
    let sq = Queue::map(fd, &drv.sq_mi).and_then(|ring| {
        SendQueue::new(
            ring,
            resp.qp_handle,
            cmd.qp_type,
            resp.max_send_wr,
            resp.max_send_sge,
            resp.max_inline_data,
        )
    });
    let rq = if cmd.is_srq != 0 || drv.rq_mi.size == 0 {
        Ok(None)
    } else {
        Queue::map(fd, &drv.rq_mi)
            .and_then(|ring| RecvQueue::new(ring, resp.max_recv_wr, resp.max_recv_sge).map(Some))
    };
    Ok(Created { resp, sq, rq })
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

/// A QP's send ring.
#[derive(Debug)]
pub struct SendQueue {
    ring: Queue,
    qp_handle: u32,
    qp_type: u8,
    max_wr: u32,
    max_sge: u32,
    max_inline: u32,
    ud_mtu: u32,
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
        let room =
            size_of::<SendWqe>() + (max_sge as usize * size_of::<Sge>()).max(max_inline as usize);
        if ring.elem_size() < room || max_wr > ring.mask() {
            return Err(Errno::EPROTO);
        }
        Ok(SendQueue {
            ring,
            qp_handle,
            qp_type,
            max_wr,
            max_sge,
            max_inline,
            ud_mtu: MAX_MTU,
        })
    }

    /// Sets the largest UD message this queue accepts: the active MTU of
    /// the QP's port, which is what rxe compares UD sends against (a longer
    /// one is dropped without an error, IB spec C10-93.1.1). Ignored for
    /// connected QPs, whose messages span packets.
    pub fn set_ud_mtu(&mut self, mtu: u32) {
        self.ud_mtu = mtu;
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
    pub fn post(
        &mut self,
        fd: BorrowedFd<'_>,
        wrs: &[SendWr<'_>],
    ) -> Result<(), (usize, PostError)> {
        let q = &self.ring;
        let mask = q.mask();
        // We are the only producer (`&mut self`).
        let start = q.producer().load(Ordering::Relaxed);
        let mut prod = start;
        // Acquire: slots the kernel released are free to overwrite. Re-read
        // only when the queue looks full.
        let mut cons = q.consumer().load(Ordering::Acquire);
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
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

    fn write_wqe(&self, index: u32, wr: &SendWr<'_>) -> Result<(), PostError> {
        let mut flags = wr.send_flags;
        let (num_sge, length) = match wr.payload {
            Payload::Sge(sges) => {
                if sges.len() > self.max_sge as usize {
                    return Err(PostError::TooManySge {
                        given: sges.len(),
                        max: self.max_sge,
                    });
                }
                flags.remove(SendFlags::INLINE);
                (
                    sges.len(),
                    sges.iter().map(|s| s.length as u64).sum::<u64>(),
                )
            }
            Payload::Inline(bufs) => {
                let len: usize = bufs.iter().map(|b| b.len()).sum();
                if len > self.max_inline as usize {
                    return Err(PostError::InlineTooLarge {
                        len,
                        max: self.max_inline,
                    });
                }
                if !matches!(
                    wr.opcode,
                    WrOpcode::Send
                        | WrOpcode::SendWithImm
                        | WrOpcode::RdmaWrite
                        | WrOpcode::RdmaWriteWithImm
                ) {
                    return Err(PostError::InvalidOpcode);
                }
                flags.insert(SendFlags::INLINE);
                (0, len as u64)
            }
        };
        if length > MAX_MSG {
            return Err(PostError::MessageTooLong);
        }
        if self.qp_type != qp_type::RC && (wr.opcode == WrOpcode::RdmaRead || wr.opcode.is_atomic())
        {
            return Err(PostError::InvalidOpcode);
        }
        if self.qp_type == qp_type::UD && wr.opcode.is_rdma() {
            return Err(PostError::InvalidOpcode);
        }
        if wr.opcode.is_atomic() && (length != 8 || wr.remote_addr % 8 != 0 || num_sge != 1) {
            return Err(PostError::BadAtomic);
        }
        if matches!(wr.opcode, WrOpcode::LocalInv | WrOpcode::SendWithInv) {
            return Err(PostError::InvalidateUnsupported);
        }
        if self.qp_type == qp_type::UD {
            if !matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm) {
                return Err(PostError::InvalidOpcode);
            }
            // ah_num 0 is how old providers said "the AV is in the WQE".
            if !matches!(wr.ud, Some(d) if d.ah_num != 0) {
                return Err(PostError::MissingAddress);
            }
            if length > self.ud_mtu as u64 {
                return Err(PostError::UdTooLong {
                    len: length,
                    mtu: self.ud_mtu,
                });
            }
        } else if wr.ud.is_some() {
            return Err(PostError::UnexpectedAddress);
        }

        let mut hdr = SendWqe::new_zeroed();
        hdr.wr.wr_id = wr.wr_id;
        hdr.wr.opcode = wr.opcode as u32;
        hdr.wr.send_flags = flags.bits();
        hdr.wr.ex = match wr.opcode {
            WrOpcode::SendWithInv | WrOpcode::LocalInv => wr.imm_data,
            _ => wr.imm_data.to_be(),
        };
        if wr.opcode.is_atomic() {
            let a = hdr.wr.atomic();
            a.remote_addr = wr.remote_addr;
            a.compare_add = wr.compare_add;
            a.swap = wr.swap;
            a.rkey = wr.rkey;
            hdr.iova = wr.remote_addr;
        } else if wr.opcode.is_rdma() {
            let r = hdr.wr.rdma();
            r.remote_addr = wr.remote_addr;
            r.rkey = wr.rkey;
            hdr.iova = wr.remote_addr;
        }
        if let Some(d) = wr.ud {
            let u = hdr.wr.ud();
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

        let slot = self.ring.slot(index);
        // SAFETY: `slot` is a free slot of this ring (between producer and
        // consumer, so the kernel does not read it until we publish it),
        // 8-byte aligned, and `new` checked it holds a SendWqe plus max_sge
        // SGEs or max_inline bytes, which the checks above bound.
        unsafe {
            std::ptr::write(slot.cast::<SendWqe>(), hdr);
            let tail = slot.add(size_of::<SendWqe>());
            match wr.payload {
                Payload::Sge(sges) => {
                    std::ptr::copy_nonoverlapping(sges.as_ptr(), tail.cast::<Sge>(), sges.len())
                }
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
    fn doorbell(&self, fd: BorrowedFd<'_>) -> Result<(), Errno> {
        let cmd = PostSend {
            response: 0,
            qp_handle: self.qp_handle,
            wr_count: 0,
            sge_count: 0,
            wqe_size: UVERBS_SEND_WR_SIZE,
        };
        write_cmd::<_, PostSendResp>(fd, nr::POST_SEND, &cmd, &[], &mut []).map(|_| ())
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
        if ring.elem_size() < size_of::<RecvWqe>() + max_sge as usize * size_of::<Sge>()
            || max_wr > ring.mask()
        {
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
            if wr.sg_list.len() > self.max_sge as usize {
                result = Err((
                    i,
                    PostError::TooManySge {
                        given: wr.sg_list.len(),
                        max: self.max_sge,
                    },
                ));
                break;
            }
            let length: u64 = wr.sg_list.iter().map(|s| s.length as u64).sum();
            if length > MAX_MSG {
                result = Err((i, PostError::MessageTooLong));
                break;
            }
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
                std::ptr::copy_nonoverlapping(
                    wr.sg_list.as_ptr(),
                    slot.add(size_of::<RecvWqe>()).cast::<Sge>(),
                    wr.sg_list.len(),
                );
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
