//! Queue geometry: the send and receive WQE sizes, ring sizes and
//! capacities, computed exactly as libmlx5 computes them so that rings,
//! capacities and wrap points are the same as with the C provider.

use rverbs_abi::mlx5::prm::{self, CtrlSeg, DataSeg, DatagramSeg, InlineSeg};
use rverbs_abi::qp::qp_type;
use rverbs_abi::Errno;

use crate::uctx::Limits;

/// A send basic block (BB): the unit of the send ring, 64 bytes.
pub(crate) const SEND_WQE_BB: u32 = prm::SEND_WQE_BB as u32;

/// Size of a data segment, an inline header unit, and a receive scatter
/// entry: 16 bytes.
const SEG: u32 = size_of::<DataSeg>() as u32;

/// Size of the inline-data header (`mlx5_wqe_inl_data_seg`).
const INLINE_HDR: u32 = size_of::<InlineSeg>() as u32;

/// Send WQE overhead of RC and UC QPs: the largest fixed part of any
/// opcode of libmlx5's default operation set, which includes BIND_MW and
/// LOCAL_INV (ctrl 16 + UMR ctrl 48 + mkey context 64 + KLM area 64).
const OVERHEAD_CONNECTED: u32 = size_of::<CtrlSeg>() as u32 + 48 + 64 + 64;

/// Send WQE overhead of UD QPs: ctrl 16 + datagram segment (address
/// vector) 48.
const OVERHEAD_UD: u32 = (size_of::<CtrlSeg>() + size_of::<DatagramSeg>()) as u32;

/// What a QP's creation asks for (the core command's capabilities).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Request {
    /// `IB_QPT_*`.
    pub qp_type: u8,
    /// Send work requests wanted (0: no send queue).
    pub max_send_wr: u32,
    /// Gather entries per send.
    pub max_send_sge: u32,
    /// Inline bytes per send.
    pub max_inline_data: u32,
    /// Receive work requests wanted (0: no receive queue).
    pub max_recv_wr: u32,
    /// Scatter entries per receive.
    pub max_recv_sge: u32,
    /// Whether the QP takes its receives from an SRQ.
    pub srq: bool,
}

/// The layout of a QP's buffer and what its queues hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Bytes of one send WQE slot (a multiple of 64); 0 without an SQ.
    pub sq_wqe_size: u32,
    /// Send ring size in BBs (a power of two); 0 without an SQ.
    pub sq_wqe_cnt: u32,
    /// Send work requests the ring holds (`sq.max_post`).
    pub sq_max_post: u32,
    /// Gather entries per send (`sq.max_gs`).
    pub sq_max_gs: u32,
    /// The inline capacity a send WQE slot really has; `None` without an
    /// SQ (libmlx5 then leaves the request's value alone).
    pub max_inline_data: Option<u32>,
    /// Receive ring size in WQEs (a power of two); 0 without an RQ.
    pub rq_wqe_cnt: u32,
    /// log2 of the receive WQE size; 0 without an RQ.
    pub rq_wqe_shift: u32,
    /// Scatter entries per receive WQE (`rq.max_gs`).
    pub rq_max_gs: u32,
}

impl Geometry {
    /// Bytes of the receive ring, which starts the buffer.
    pub fn rq_bytes(&self) -> usize {
        if self.rq_wqe_cnt == 0 {
            0
        } else {
            (self.rq_wqe_cnt as usize) << self.rq_wqe_shift
        }
    }

    /// Bytes of the send ring, which follows the receive ring.
    pub fn sq_bytes(&self) -> usize {
        self.sq_wqe_cnt as usize * SEND_WQE_BB as usize
    }

    /// Offset of the send ring in the buffer.
    pub fn sq_offset(&self) -> usize {
        self.rq_bytes()
    }

    /// Bytes of the whole buffer (receive ring, then send ring).
    pub fn total(&self) -> usize {
        self.rq_bytes() + self.sq_bytes()
    }
}

/// Computes the geometry for `req` under the context's `limits`, or
/// `EINVAL` for what libmlx5 refuses (the same checks in the same order:
/// send side first, then receive side).
pub(crate) fn geometry(limits: &Limits, req: &Request) -> Result<Geometry, Errno> {
    let mut g = Geometry::default();
    send_side(limits, req, &mut g)?;
    recv_side(limits, req, &mut g)?;
    Ok(g)
}

/// The largest `max_inline_data` [`geometry`] takes for a send queue of
/// `qp_type` (RC, UC, UD): the device's largest send WQE less the type's
/// segments, less the inline header, in whole 16-byte units (of a WQE in
/// whole 64-byte basic blocks). `None` for
/// another type or a device whose WQE holds no inline data at all.
pub(crate) fn max_inline_data(limits: &Limits, qp_type: u8) -> Option<u32> {
    let overhead = match qp_type {
        qp_type::RC | qp_type::UC => OVERHEAD_CONNECTED,
        qp_type::UD => OVERHEAD_UD,
        _ => return None,
    };
    // A WQE is whole basic blocks, none past the device's largest.
    let desc = limits.max_sq_desc_sz / SEND_WQE_BB * SEND_WQE_BB;
    let room = desc.checked_sub(overhead)? / SEG * SEG;
    room.checked_sub(INLINE_HDR)
}

fn send_side(limits: &Limits, req: &Request, g: &mut Geometry) -> Result<(), Errno> {
    let overhead = match req.qp_type {
        qp_type::RC | qp_type::UC => OVERHEAD_CONNECTED,
        qp_type::UD => OVERHEAD_UD,
        _ => return Err(Errno::EINVAL),
    };
    if req.max_send_wr == 0 {
        return Ok(());
    }
    let desc = limits.max_sq_desc_sz;
    if desc < overhead {
        return Err(Errno::EINVAL);
    }
    let inline = if req.max_inline_data != 0 {
        let body = (INLINE_HDR as u64 + req.max_inline_data as u64).next_multiple_of(SEG as u64);
        overhead as u64 + body
    } else {
        0
    };
    let max_gather = (desc - overhead) / SEG;
    if req.max_send_sge > max_gather {
        return Err(Errno::EINVAL);
    }
    let gather = overhead + req.max_send_sge * SEG;
    let total = (gather as u64).max(inline);
    if total > desc as u64 {
        return Err(Errno::EINVAL);
    }
    let wqe_size = total.next_multiple_of(SEND_WQE_BB as u64);
    if wqe_size > desc as u64 {
        return Err(Errno::EINVAL);
    }
    let wqe_size = wqe_size as u32;
    if req.max_send_wr > 0x7fff_ffff / desc {
        return Err(Errno::EINVAL);
    }
    let bytes = (req.max_send_wr as u64 * wqe_size as u64).next_power_of_two();
    let wqe_cnt = bytes / SEND_WQE_BB as u64;
    if wqe_cnt > limits.max_send_wqebb as u64 {
        return Err(Errno::EINVAL);
    }
    g.sq_wqe_size = wqe_size;
    g.sq_wqe_cnt = wqe_cnt as u32;
    g.sq_max_post = (bytes / wqe_size as u64) as u32;
    g.sq_max_gs = req.max_send_sge;
    // libmlx5 computes this in a signed int: a slot with no room beyond
    // the overhead (no SGEs, no inline asked) gives -4, which it sends to
    // the kernel as 0xfffffffc and which refuses every inline send; 0 says
    // the same without the garbage.
    g.max_inline_data = Some((wqe_size - overhead).saturating_sub(INLINE_HDR));
    Ok(())
}

fn recv_side(limits: &Limits, req: &Request, g: &mut Geometry) -> Result<(), Errno> {
    if req.max_recv_wr == 0 {
        return Ok(());
    }
    if req.max_recv_wr > limits.max_recv_wr {
        return Err(Errno::EINVAL);
    }
    if req.srq {
        return Ok(());
    }
    let size = SEG as u64 * req.max_recv_sge.max(1) as u64;
    if size > limits.max_rq_desc_sz as u64 {
        return Err(Errno::EINVAL);
    }
    let wqe_size = size.next_power_of_two();
    if wqe_size > limits.max_rq_desc_sz as u64 {
        return Err(Errno::EINVAL);
    }
    let bytes = (req.max_recv_wr as u64).next_power_of_two() * wqe_size;
    let bytes = bytes.max(SEND_WQE_BB as u64);
    let wqe_cnt = bytes / wqe_size;
    if wqe_cnt > u32::MAX as u64 {
        return Err(Errno::EINVAL);
    }
    g.rq_wqe_cnt = wqe_cnt as u32;
    g.rq_wqe_shift = wqe_size.trailing_zeros();
    g.rq_max_gs = (wqe_size / SEG as u64) as u32;
    Ok(())
}
