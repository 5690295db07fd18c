//! Before a socket exists: the verbs objects prepared for a connection
//! and the sizes negotiated with the peer.

use super::{MAX_CTRL_MSG, QP_CTRL_SIZE, QP_MAX_SIZE, QP_MIN_SIZE, WR_ID_RECV};
use crate::stream::wire::{self, ConnData, RsSge, IOMAP_LEN, SGE_LEN, SGL_SIZE};
use crate::stream::StreamOptions;
use rverbs::mr::PageBuf;
use rverbs::qp::{QpCap, QpInitAttr, QpType};
use rverbs::{AccessFlags, CompChannel, Context, Cq, Mr, Qp, RecvWr};

/// The verbs objects of a connection being set up: created on the route's
/// device, the receives posted, before the CM connects the QP.
pub(in crate::stream) struct Prepared {
    pub(in crate::stream) qp: Qp,
    pub(in crate::stream) parts: Parts,
}

/// A prepared connection's objects other than its QP (which the CM's
/// connect or accept takes).
pub(in crate::stream) struct Parts {
    pub(super) cq: Cq,
    pub(super) chan: CompChannel,
    pub(super) sbuf: Mr<PageBuf>,
    pub(super) rbuf: Mr<PageBuf>,
    pub(super) target: Mr<PageBuf>,
    pub(super) sizes: Sizes,
}

/// The sizes a connection settled on.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sizes {
    pub(super) sq_size: u32,
    pub(super) rq_size: u32,
    pub(super) sq_inline: u32,
    pub(super) sbuf_size: u32,
    pub(super) rbuf_size: u32,
    /// Direct-placement descriptors the peer may write into our target
    /// list's tail.
    pub(super) iomap_size: u32,
}

impl Prepared {
    /// PD, channel, CQ, RC QP and the three MRs on `ctx`, as rsockets
    /// creates them (one CQ for both queues, every send signaled, two
    /// gather entries for a wrapped send buffer).
    pub(in crate::stream) fn new(ctx: &Context, o: &StreamOptions) -> rverbs::Result<Prepared> {
        let max = ctx
            .query_device()?
            .max_qp_wr
            .clamp(QP_MIN_SIZE, QP_MAX_SIZE);
        let sq_size = u32::from(o.sq_size).clamp(QP_MIN_SIZE, max);
        let rq_size = u32::from(o.rq_size).clamp(QP_MIN_SIZE, max);
        let pd = ctx.alloc_pd()?;
        let chan = ctx.create_comp_channel()?;
        let cq = ctx.create_cq_with(sq_size + rq_size, Some(&chan), 0)?;
        let qp = pd.create_qp(
            &QpInitAttr::new(QpType::Rc, &cq)
                .cap(QpCap {
                    max_send_wr: sq_size,
                    max_recv_wr: rq_size,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: u32::from(o.inline),
                })
                .sq_sig_all(true),
        )?;
        let sq_inline = qp.cap().max_inline_data;
        let sbuf_size = o.send_buf;
        let rbuf_size = o.recv_buf;
        // The send buffer, then a slot per control message in flight (for
        // a descriptor that cannot go inline).
        let sbuf = pd.alloc_mr(
            (sbuf_size + MAX_CTRL_MSG * QP_CTRL_SIZE) as usize,
            AccessFlags::LOCAL_WRITE,
        )?;
        let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let rbuf = pd.alloc_mr(rbuf_size as usize, remote)?;
        let iomap_size = o.iomap_size;
        let target = pd.alloc_mr(
            SGE_LEN * SGL_SIZE as usize + IOMAP_LEN * iomap_size as usize,
            remote,
        )?;
        Ok(Prepared {
            qp,
            parts: Parts {
                cq,
                chan,
                sbuf,
                rbuf,
                target,
                sizes: Sizes {
                    sq_size,
                    rq_size,
                    sq_inline,
                    sbuf_size,
                    rbuf_size,
                    iomap_size,
                },
            },
        })
    }

    /// Posts every receive (empty: data lands by RDMA WRITE, the
    /// receive only carries its immediate).
    pub(in crate::stream) fn post_recvs(&mut self) -> rverbs::Result<()> {
        for _ in 0..self.parts.sizes.rq_size {
            self.qp.post_recv(&[RecvWr::new(WR_ID_RECV, &[])])?;
        }
        Ok(())
    }
}

impl Parts {
    /// This side's connection data: its receive queue's depth as the
    /// peer's credits, its target list, the first half of its buffer.
    pub(in crate::stream) fn conn_data(&self) -> ConnData {
        ConnData {
            version: wire::VERSION,
            flags: wire::FLAG_IOMAP
                | if wire::host_is_net() {
                    wire::FLAG_NET
                } else {
                    0
                },
            credits: self.sizes.rq_size as u16,
            target_iomap_size: wire::value_to_scale(self.sizes.iomap_size),
            target_sgl: RsSge {
                addr: self.target.iova(),
                key: self.target.rkey(),
                length: SGL_SIZE,
            },
            data_buf: RsSge {
                addr: self.rbuf.iova(),
                key: self.rbuf.rkey(),
                length: self.sizes.rbuf_size / 2,
            },
        }
    }
}
