//! rxe's side of the provider contract ([`rverbs_provider::Provider`]):
//! [`Rxe`], the open context, creates complete objects (a kernel object
//! whose rings cannot be mapped is destroyed before the error returns), and
//! [`SendQueue`] holds the command fd its doorbell is written to.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rverbs_abi::cq::{CreateCq, DestroyCq, ExCreateCq, ReqNotifyCq};
use rverbs_abi::qp::{CreateQp, DestroyQp, ExCreateQp};
use rverbs_abi::srq::CreateSrq;
use rverbs_abi::wr::Wc;
use rverbs_abi::Errno;
use rverbs_provider::batch::{BatchWr, SendBatch};
use rverbs_provider::wr::{RecvWr, SendWr, WrOpcode};
use rverbs_provider::{
    CqCreated, Feature, PostError, Provider, QpCreated, QpState, RingLost, SrqCreated, Unshared,
};

use crate::{cmd, cq, qp, srq};

/// An open rxe context: the uverbs command fd. rxe keeps no other
/// per-context state (its rings are the kernel's).
#[derive(Debug, Clone)]
pub struct Rxe {
    fd: Arc<OwnedFd>,
}

impl Rxe {
    /// The context of the uverbs command fd `fd` (after GET_CONTEXT).
    pub fn new(fd: Arc<OwnedFd>) -> Self {
        Rxe { fd }
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Destroys the kernel CQ `handle` (cleanup after a failed creation).
fn destroy_cq(fd: BorrowedFd<'_>, handle: u32) {
    let cmd = DestroyCq {
        response: 0,
        cq_handle: handle,
        reserved: 0,
    };
    let _ = cmd::destroy_cq(fd, &cmd);
}

/// Destroys the kernel QP `handle` (cleanup after a failed creation).
fn destroy_qp(fd: BorrowedFd<'_>, handle: u32) {
    let cmd = DestroyQp {
        response: 0,
        qp_handle: handle,
        reserved: 0,
    };
    let _ = cmd::destroy_qp(fd, &cmd);
}

/// A QP's send ring and the fd its doorbell (an empty POST_SEND) goes to.
#[derive(Debug)]
pub struct SendQueue {
    ring: qp::SendQueue,
    fd: Arc<OwnedFd>,
}

impl rverbs_provider::SendQueue for SendQueue {
    #[inline]
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, PostError)> {
        self.ring.post(self.fd.as_fd(), wrs)
    }
    fn post_batch(&mut self, batch: &SendBatch, wrs: &[BatchWr]) -> Result<(), (usize, PostError)> {
        self.ring.post_batch(self.fd.as_fd(), batch, wrs)
    }
    /// rxe's rings follow the QP's state in the kernel: nothing to do.
    fn set_state(&mut self, _state: QpState) {}
    fn set_ud_mtu(&mut self, mtu: u32) {
        self.ring.set_ud_mtu(mtu);
    }
    fn allow(&mut self, op: WrOpcode) -> bool {
        self.ring.allow(op)
    }
    fn capacity(&self) -> u32 {
        self.ring.capacity()
    }
    fn outstanding(&self) -> u32 {
        self.ring.outstanding()
    }
}

impl rverbs_provider::RecvQueue for qp::RecvQueue {
    #[inline]
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), (usize, PostError)> {
        qp::RecvQueue::post(self, wrs)
    }
    /// rxe's rings follow the QP's state in the kernel: nothing to do.
    fn set_state(&mut self, _state: QpState) {}
    fn capacity(&self) -> u32 {
        qp::RecvQueue::capacity(self)
    }
    fn outstanding(&self) -> u32 {
        qp::RecvQueue::outstanding(self)
    }
}

impl rverbs_provider::CompletionQueue for cq::Cq {
    #[inline]
    fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        cq::Cq::poll(self, wc)
    }
    /// REQ_NOTIFY_CQ: rxe arms in the kernel.
    fn arm(&self, fd: BorrowedFd<'_>, cq_handle: u32, solicited_only: bool) -> Result<(), Errno> {
        let cmd = ReqNotifyCq {
            cq_handle,
            solicited_only: solicited_only as u32,
        };
        cmd::req_notify_cq(fd, &cmd)
    }
    fn resize(&mut self, fd: BorrowedFd<'_>, cq_handle: u32, cqe: u32) -> Result<u32, Errno> {
        cq::Cq::resize(self, fd, cq_handle, cqe)
    }
}

impl rverbs_provider::SharedRecvQueue for srq::Srq {
    #[inline]
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), (usize, PostError)> {
        srq::Srq::post(self, wrs)
    }
    fn capacity(&self) -> u32 {
        srq::Srq::capacity(self)
    }
    fn outstanding(&self) -> u32 {
        srq::Srq::outstanding(self)
    }
    /// MODIFY_SRQ with rxe's driver data.
    fn set_limit(&self, fd: BorrowedFd<'_>, _srq_handle: u32, limit: u32) -> Result<(), Errno> {
        srq::Srq::set_limit(self, fd, limit)
    }
    fn resize(&mut self, fd: BorrowedFd<'_>, _srq_handle: u32, max_wr: u32) -> Result<(), Errno> {
        srq::Srq::resize(self, fd, max_wr)
    }
}

impl Provider for Rxe {
    const NAME: &'static str = "rxe";
    type Cq = cq::Cq;
    type CqShared = Unshared;
    type SendQueue = SendQueue;
    type RecvQueue = qp::RecvQueue;
    type Srq = srq::Srq;
    type SrqShared = Unshared;

    /// rxe implements every optional feature of the contract; what its
    /// kernel driver refuses (e.g. any QP creation flag) it refuses with
    /// its errno.
    fn supports(&self, feature: Feature) -> bool {
        // rxe's prefetch (Linux 6.16 on) oopses the 7.3 kernel on a valid
        // on-demand MR (in ib_umem_odp_map_dma_and_lock, found by our
        // suite); rdma-core's rxe provider never calls it. Refused until
        // a kernel where it works can be told apart.
        // rxe has no dmabuf registration (no reg_user_mr_dmabuf: the
        // kernel answers EOPNOTSUPP); refused before the kernel is asked.
        !matches!(feature, Feature::OdpAdvice | Feature::DmabufMr)
    }

    fn create_cq(&self, cmd: &CreateCq, flags: Option<u32>) -> Result<CqCreated<Self>, Errno> {
        let created = match flags {
            None => cq::create(self.fd(), cmd)?,
            Some(flags) => cq::create_ex(
                self.fd(),
                &ExCreateCq {
                    user_handle: cmd.user_handle,
                    cqe: cmd.cqe,
                    comp_vector: cmd.comp_vector,
                    comp_channel: cmd.comp_channel,
                    comp_mask: 0,
                    flags,
                    reserved: 0,
                },
            )?,
        };
        match created.cq {
            Ok(cq) => Ok(CqCreated {
                resp: created.resp,
                cq,
                shared: Unshared,
            }),
            Err(e) => {
                destroy_cq(self.fd(), created.resp.cq_handle);
                Err(e)
            }
        }
    }

    fn create_qp(
        &self,
        cmd: &CreateQp,
        flags: Option<u32>,
        _send_cq: &Unshared,
        _recv_cq: &Unshared,
        _srq: Option<&srq::Srq>,
    ) -> Result<QpCreated<Self>, Errno> {
        let created = match flags {
            None => qp::create(self.fd(), cmd)?,
            Some(flags) => qp::create_ex(
                self.fd(),
                &ExCreateQp {
                    user_handle: cmd.user_handle,
                    pd_handle: cmd.pd_handle,
                    send_cq_handle: cmd.send_cq_handle,
                    recv_cq_handle: cmd.recv_cq_handle,
                    srq_handle: cmd.srq_handle,
                    max_send_wr: cmd.max_send_wr,
                    max_recv_wr: cmd.max_recv_wr,
                    max_send_sge: cmd.max_send_sge,
                    max_recv_sge: cmd.max_recv_sge,
                    max_inline_data: cmd.max_inline_data,
                    sq_sig_all: cmd.sq_sig_all,
                    qp_type: cmd.qp_type,
                    is_srq: cmd.is_srq,
                    reserved: 0,
                    comp_mask: 0,
                    create_flags: flags,
                    rwq_ind_tbl_handle: 0,
                    source_qpn: 0,
                },
            )?,
        };
        match (created.sq, created.rq) {
            (Ok(ring), Ok(rq)) => Ok(QpCreated {
                resp: created.resp,
                sq: SendQueue {
                    ring,
                    fd: Arc::clone(&self.fd),
                },
                rq,
            }),
            (Err(e), _) | (_, Err(e)) => {
                destroy_qp(self.fd(), created.resp.qp_handle);
                Err(e)
            }
        }
    }

    fn create_srq(&self, cmd: &CreateSrq) -> Result<SrqCreated<Self>, Errno> {
        let created = srq::create(self.fd(), cmd)?;
        match created.srq {
            Ok(srq) => Ok(SrqCreated {
                resp: created.resp,
                srq_num: created.srq_num,
                srq,
                shared: Unshared,
            }),
            Err(e) => {
                let _ = srq::destroy(self.fd(), created.resp.srq_handle);
                Err(e)
            }
        }
    }
}
