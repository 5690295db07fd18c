//! mlx5's side of the provider contract ([`rverbs_provider::Provider`]):
//! [`Mlx5`], the open context (the command fd and the user context with its
//! UAR pages), and the contract's queue traits on this crate's queues.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rverbs_abi::ah::CreateAh;
use rverbs_abi::cq::CreateCq;
use rverbs_abi::qp::CreateQp;
use rverbs_abi::srq::CreateSrq;
use rverbs_abi::wr::Wc;
use rverbs_abi::Errno;
use rverbs_provider::batch::{BatchWr, SendBatch};
use rverbs_provider::wr::{RecvWr, SendWr, WrOpcode};
use rverbs_provider::{
    CqCreated, Feature, PostError, Provider, QpCreated, QpState, RingLost, SrqCreated,
};

use crate::qp::State;
use crate::uctx::Uctx;
use crate::{cq, qp, srq};

/// An open mlx5 context: the uverbs command fd and the user context
/// (UAR pages, doorbell records, the QP table) every object uses.
#[derive(Debug, Clone)]
pub struct Mlx5 {
    fd: Arc<OwnedFd>,
    uctx: Arc<Uctx>,
}

impl Mlx5 {
    /// The context of the command fd `fd` whose GET_CONTEXT answered `uctx`.
    pub fn new(fd: Arc<OwnedFd>, uctx: Uctx) -> Self {
        Mlx5 {
            fd,
            uctx: Arc::new(uctx),
        }
    }

    /// The user context.
    pub fn uctx(&self) -> &Arc<Uctx> {
        &self.uctx
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Creates the kernel's address handle for RoCE address vector `av`
    /// (built by [`crate::ah::av`] from `cmd`'s attributes) and stores the
    /// destination MAC the kernel resolved in it. Returns the AH's handle.
    /// `EOPNOTSUPP` if the kernel does not answer the MAC
    /// ([`crate::uctx::Uctx::create_ah_answers_dmac`]), `EPROTO` if its
    /// answer stops short of it.
    pub fn create_roce_ah(&self, cmd: &CreateAh, av: &mut [u8; 48]) -> Result<u32, Errno> {
        crate::ah::create_roce_ah(self.fd(), &self.uctx, cmd, av)
    }
}

/// What the queues need to know of a QP state.
fn state(s: QpState) -> State {
    match s {
        QpState::Reset => State::Reset,
        QpState::Init | QpState::Rtr => State::Init,
        QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => State::Rts,
    }
}

impl rverbs_provider::SendQueue for qp::SendQueue {
    #[inline]
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, PostError)> {
        qp::SendQueue::post(self, wrs)
    }
    #[inline]
    fn post_batch(&mut self, batch: &SendBatch, wrs: &[BatchWr]) -> Result<(), (usize, PostError)> {
        qp::SendQueue::post_batch(self, batch, wrs)
    }
    fn set_state(&mut self, s: QpState) {
        qp::SendQueue::set_state(self, state(s));
    }
    fn set_ud_mtu(&mut self, mtu: u32) {
        qp::SendQueue::set_ud_mtu(self, mtu);
    }
    /// ATOMIC_WRITE and FLUSH are not built here yet (mlx5 has them only
    /// on ConnectX-7 and later, through its own opcodes).
    fn allow(&mut self, _op: WrOpcode) -> bool {
        false
    }
    fn capacity(&self) -> u32 {
        qp::SendQueue::capacity(self)
    }
    fn outstanding(&self) -> u32 {
        qp::SendQueue::outstanding(self)
    }
}

impl rverbs_provider::RecvQueue for qp::RecvQueue {
    #[inline]
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), (usize, PostError)> {
        qp::RecvQueue::post(self, wrs)
    }
    fn set_state(&mut self, s: QpState) {
        qp::RecvQueue::set_state(self, state(s));
    }
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
        Ok(cq::Cq::poll(self, wc))
    }
    /// No system call: the doorbell record, then the UAR's CQ doorbell.
    fn arm(&self, _fd: BorrowedFd<'_>, _cq_handle: u32, solicited_only: bool) -> Result<(), Errno> {
        cq::Cq::arm(self, solicited_only);
        Ok(())
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
    /// MODIFY_SRQ without driver data (mlx5 takes none).
    fn set_limit(&self, fd: BorrowedFd<'_>, srq_handle: u32, limit: u32) -> Result<(), Errno> {
        crate::hw::cmd::modify_srq_limit(fd, srq_handle, limit)
    }
    /// The kernel driver cannot resize an mlx5 SRQ
    /// ([`Feature::SrqResize`] is unsupported).
    fn resize(&mut self, _fd: BorrowedFd<'_>, _srq_handle: u32, _max_wr: u32) -> Result<(), Errno> {
        Err(Errno::EOPNOTSUPP)
    }
}

impl Provider for Mlx5 {
    const NAME: &'static str = "mlx5";
    type Cq = cq::Cq;
    type CqShared = cq::CqMemory;
    type SendQueue = qp::SendQueue;
    type RecvQueue = qp::RecvQueue;
    type Srq = srq::Srq;
    type SrqShared = srq::SrqMemory;

    fn supports(&self, feature: Feature) -> bool {
        match feature {
            // No creation flag is implemented yet.
            Feature::CqCreateFlags | Feature::QpCreateFlags => false,
            // The kernel driver cannot resize an mlx5 SRQ.
            Feature::SrqResize => false,
            // RoCE needs the destination MAC in the address vector: taken
            // from CREATE_AH's mlx5 answer where the kernel gives it.
            Feature::RoceAddressHandle => self.uctx.create_ah_answers_dmac(),
            // mlx5 binds windows with UMR work requests, not built yet.
            Feature::MemoryWindows => false,
            // Not built yet (ConnectX-7 has them, through its own opcodes).
            Feature::AtomicWrite | Feature::Flush => false,
            // A kernel method of the mlx5 driver: nothing of ours.
            Feature::OdpAdvice => true,
            // A kernel method too (mlx5_ib_reg_user_mr_dmabuf).
            Feature::DmabufMr => true,
            // A feature the contract gains is unsupported until done here.
            _ => false,
        }
    }

    fn create_cq(&self, cmd: &CreateCq, flags: Option<u32>) -> Result<CqCreated<Self>, Errno> {
        if flags.is_some_and(|f| f != 0) {
            return Err(Errno::EOPNOTSUPP);
        }
        let created = cq::create(self.fd(), &self.uctx, cmd)?;
        Ok(CqCreated {
            resp: created.resp,
            shared: created.cq.memory(),
            cq: created.cq,
        })
    }

    fn create_qp(
        &self,
        cmd: &CreateQp,
        flags: Option<u32>,
        send_cq: &cq::CqMemory,
        recv_cq: &cq::CqMemory,
        srq: Option<&srq::Srq>,
    ) -> Result<QpCreated<Self>, Errno> {
        if flags.is_some_and(|f| f != 0) {
            return Err(Errno::EOPNOTSUPP);
        }
        let created = qp::create(self.fd(), &self.uctx, cmd, srq, send_cq, recv_cq)?;
        Ok(QpCreated {
            resp: created.resp,
            sq: created.sq,
            rq: created.rq,
        })
    }

    fn create_srq(&self, cmd: &CreateSrq) -> Result<SrqCreated<Self>, Errno> {
        let created = srq::create(self.fd(), &self.uctx, cmd)?;
        Ok(SrqCreated {
            resp: created.resp,
            srq_num: created.srqn,
            shared: created.srq.memory(),
            srq: created.srq,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every QP state maps to what the queues act on.
    #[test]
    fn queues_follow_the_state() {
        let cases = [
            (QpState::Reset, State::Reset),
            (QpState::Init, State::Init),
            (QpState::Rtr, State::Init),
            (QpState::Rts, State::Rts),
            (QpState::Sqd, State::Rts),
            (QpState::Sqe, State::Rts),
            (QpState::Err, State::Rts),
        ];
        for (s, want) in cases {
            assert_eq!(state(s), want, "{s:?}");
        }
    }
}
