//! mlx5's side of the provider contract ([`rverbs_provider::Provider`]):
//! [`Mlx5`], the open context (the command fd and the user context with its
//! UAR pages, from GET_CONTEXT with mlx5's driver data), address handles
//! (an address vector, and on RoCE the kernel AH that resolves the MAC),
//! and the contract's queue traits on this crate's queues ([`Cq`] and
//! [`Srq`] keep the command fd and handle their commands name).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rverbs_abi::ah::CreateAh;
use rverbs_abi::cmd::{exec, exec_ex_query_device, NO_FD};
use rverbs_abi::cq::CreateCq;
use rverbs_abi::device::{ExQueryDeviceResp, GetContextResp};
use rverbs_abi::mlx5::{AllocPdResp, AllocUcontextResp, QueryDeviceResp};
use rverbs_abi::pd::AllocPd;
use rverbs_abi::qp::CreateQp;
use rverbs_abi::srq::CreateSrq;
use rverbs_abi::wr::Wc;
use rverbs_abi::Errno;
use rverbs_provider::batch::{BatchWr, SendBatch};
use rverbs_provider::wr::{RecvWr, SendRequest, SendWr, WrOpcode};
use rverbs_provider::SharedAllocator;
use rverbs_provider::{
    AhCreated, AhNetwork, CmdError, ContextOpened, CqCreated, Ece, Feature, OpenError, PostFailed,
    Provider, QpCreated, QpState, RingLost, SrqCreated,
};
use zerocopy::{FromZeros, IntoBytes};

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
    /// The context of the command fd `fd` whose GET_CONTEXT answered `uctx`
    /// ([`Provider::open`] sends it and builds the context).
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
}

impl rverbs_provider::SendQueue for qp::SendQueue {
    #[inline]
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostFailed> {
        qp::SendQueue::post(self, wrs)
    }
    #[inline(always)]
    fn post_one<R: SendRequest + ?Sized>(&mut self, wr: &R) -> Result<(), PostFailed> {
        qp::SendQueue::post_request(self, wr)
    }
    #[inline]
    fn post_iter<R: SendRequest, I: Iterator<Item = R>>(
        &mut self,
        reqs: I,
    ) -> Result<(), PostFailed> {
        qp::SendQueue::post_iter(self, reqs)
    }
    #[inline]
    fn post_batch(&mut self, batch: &SendBatch, wrs: &[BatchWr]) -> Result<(), PostFailed> {
        qp::SendQueue::post_batch(self, batch, wrs)
    }
    fn set_state(&mut self, s: QpState) {
        qp::SendQueue::set_state(self, s);
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
    /// NVIDIA's vendor id and the options CREATE_QP granted, as libmlx5
    /// reports them.
    fn query_ece(&self) -> Option<Ece> {
        Some(Ece {
            vendor_id: u32::from(crate::PCI_VENDOR_MELLANOX),
            options: self.ece_options(),
            comp_mask: 0,
        })
    }
    /// libmlx5's checks (no extension, NVIDIA's numbering); options are not
    /// sent at MODIFY_QP yet, so a valid request is `EOPNOTSUPP`, which is
    /// also libmlx5's answer where the device lacks ECE (the emulator).
    fn set_ece(&mut self, ece: &Ece) -> Result<(), Errno> {
        if ece.comp_mask != 0 || ece.vendor_id != u32::from(crate::PCI_VENDOR_MELLANOX) {
            return Err(Errno::EINVAL);
        }
        Err(Errno::EOPNOTSUPP)
    }
}

impl rverbs_provider::RecvQueue for qp::RecvQueue {
    #[inline]
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        qp::RecvQueue::post(self, wrs)
    }
    fn set_state(&mut self, s: QpState) {
        qp::RecvQueue::set_state(self, s);
    }
    fn capacity(&self) -> u32 {
        qp::RecvQueue::capacity(self)
    }
    fn outstanding(&self) -> u32 {
        qp::RecvQueue::outstanding(self)
    }
}

/// A CQ's ring, the command fd and the kernel CQ's handle (a resize is a
/// command).
#[derive(Debug)]
pub struct Cq {
    ring: cq::Cq,
    fd: Arc<OwnedFd>,
    handle: u32,
}

impl rverbs_provider::CompletionQueue for Cq {
    #[inline]
    fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        self.ring.poll_wcs(wc)
    }
    /// No system call: the doorbell record, then the UAR's CQ doorbell.
    fn arm(&self, solicited_only: bool) -> Result<(), Errno> {
        self.ring.arm(solicited_only);
        Ok(())
    }
    fn resize(&mut self, cqe: u32) -> Result<u32, Errno> {
        self.ring.resize(self.fd.as_fd(), self.handle, cqe)
    }
}

/// An SRQ's ring, the command fd and the kernel SRQ's handle.
#[derive(Debug)]
pub struct Srq {
    ring: srq::Srq,
    fd: Arc<OwnedFd>,
    handle: u32,
}

impl Srq {
    /// The ring.
    pub fn ring(&self) -> &srq::Srq {
        &self.ring
    }
}

impl rverbs_provider::SharedRecvQueue for Srq {
    #[inline]
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        self.ring.post(wrs)
    }
    fn capacity(&self) -> u32 {
        self.ring.capacity()
    }
    fn outstanding(&self) -> u32 {
        self.ring.outstanding()
    }
    /// MODIFY_SRQ without driver data (mlx5 takes none).
    fn set_limit(&self, limit: u32) -> Result<(), Errno> {
        crate::hw::cmd::modify_srq_limit(self.fd.as_fd(), self.handle, limit)
    }
    /// The kernel driver cannot resize an mlx5 SRQ
    /// ([`Feature::SrqResize`] is unsupported).
    fn resize(&mut self, _max_wr: u32) -> Result<(), Errno> {
        Err(Errno::EOPNOTSUPP)
    }
}

impl Provider for Mlx5 {
    const NAME: &'static str = "mlx5";
    const DRIVER_ABI: std::ops::RangeInclusive<u32> = crate::DRIVER_ABI;
    type Cq = Cq;
    type CqShared = cq::CqMemory;
    type SendQueue = qp::SendQueue;
    type RecvQueue = qp::RecvQueue;
    type Srq = Srq;
    type SrqShared = srq::SrqMemory;

    fn serves_pci(vendor: u16, device: u16) -> bool {
        vendor == crate::PCI_VENDOR_MELLANOX && crate::is_mlx5_pci_device(device)
    }

    /// GET_CONTEXT with `crate::uctx::alloc_ucontext_req`'s driver data;
    /// the answer's UAR pages are mapped (`Uctx::from_resp`).
    fn open(fd: Arc<OwnedFd>) -> Result<ContextOpened<Self>, OpenError> {
        let req = crate::uctx::alloc_ucontext_req();
        // The async fd field starts as -1: a response the kernel did not
        // write must not name fd 0.
        let mut resp = GetContextResp {
            async_fd: NO_FD,
            num_comp_vectors: 0,
        };
        let mut drv = AllocUcontextResp::new_zeroed();
        crate::hw::cmd::get_context(fd.as_fd(), &req, &mut resp, &mut drv).map_err(|errno| {
            OpenError {
                op: "get_context",
                errno,
                resp: None,
            }
        })?;
        let uctx = Uctx::from_resp(fd.as_fd(), &drv).map_err(|errno| OpenError {
            op: "get_context (mlx5's answer)",
            errno,
            resp: Some(resp),
        })?;
        Ok(ContextOpened {
            provider: Mlx5::new(fd, uctx),
            resp,
        })
    }

    /// ALLOC_PD, asking for mlx5's answer (the PD number) as libmlx5 does,
    /// so the kernel sees the same command; the number is not used.
    fn alloc_pd(&self) -> Result<u32, Errno> {
        let mut drv = AllocPdResp::new_zeroed();
        Ok(exec(self.fd(), &AllocPd::new_zeroed(), drv.as_mut_bytes())?.pd_handle)
    }

    /// The extended QUERY_DEVICE, asking for mlx5's answer (its offload
    /// capabilities) as libmlx5 does; not used.
    fn query_device_ex(&self) -> Result<ExQueryDeviceResp, Errno> {
        let mut drv = QueryDeviceResp::new_zeroed();
        exec_ex_query_device(self.fd(), drv.as_mut_bytes())
    }

    /// The address vector, built here; on RoCE also the kernel's AH, for
    /// the destination MAC it resolves (no kernel object on InfiniBand, as
    /// libmlx5 creates none).
    fn create_ah(&self, cmd: &CreateAh, network: AhNetwork) -> Result<AhCreated, CmdError> {
        let mut av = crate::ah::av(&cmd.attr, network);
        let handle = match network {
            AhNetwork::Ib => None,
            AhNetwork::RoceV1 | AhNetwork::RoceV2 => Some(
                crate::ah::create_roce_ah(self.fd(), &self.uctx, cmd, &mut av)
                    .map_err(CmdError::of("create_ah"))?,
            ),
        };
        Ok(AhCreated {
            handle,
            ah_num: 0,
            av: Some(av),
            held_by_sends: false,
        })
    }

    /// What the largest send WQE the device takes leaves for inline data
    /// after the QP type's segments (the QP geometry's rule, libmlx5's).
    fn max_inline_data(&self, qp_type: u8) -> Option<u32> {
        crate::qp::geom::max_inline_data(&self.uctx.limits(), qp_type)
    }

    fn supports(&self, feature: Feature) -> bool {
        match feature {
            // No creation flag is implemented yet.
            Feature::CqCreateFlags | Feature::QpCreateFlags => false,
            // The kernel driver cannot resize an mlx5 SRQ.
            Feature::SrqResize => false,
            // Queried always (what CREATE_QP granted); set: see set_ece.
            Feature::Ece => true,
            // max_wr 0 sizes a one-entry SRQ (srq.rs's geometry), as
            // libmlx5 does.
            Feature::EmptySrq => true,
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

    fn create_cq(
        &self,
        cmd: &CreateCq,
        flags: Option<u32>,
        alloc: Option<&SharedAllocator>,
    ) -> Result<CqCreated<Self>, Errno> {
        if flags.is_some_and(|f| f != 0) {
            return Err(Errno::EOPNOTSUPP);
        }
        let created = cq::create(self.fd(), &self.uctx, cmd, alloc)?;
        Ok(CqCreated {
            resp: created.resp,
            shared: created.cq.memory(),
            cq: Cq {
                ring: created.cq,
                fd: Arc::clone(&self.fd),
                handle: created.resp.cq_handle,
            },
        })
    }

    fn create_qp(
        &self,
        cmd: &CreateQp,
        flags: Option<u32>,
        send_cq: &cq::CqMemory,
        recv_cq: &cq::CqMemory,
        srq: Option<&Srq>,
        alloc: Option<&SharedAllocator>,
    ) -> Result<QpCreated<Self>, Errno> {
        if flags.is_some_and(|f| f != 0) {
            return Err(Errno::EOPNOTSUPP);
        }
        let srq = srq.map(Srq::ring);
        let created = qp::create(self.fd(), &self.uctx, cmd, srq, send_cq, recv_cq, alloc)?;
        Ok(QpCreated {
            resp: created.resp,
            sq: created.sq,
            rq: created.rq,
        })
    }

    fn create_srq(
        &self,
        cmd: &CreateSrq,
        alloc: Option<&SharedAllocator>,
    ) -> Result<SrqCreated<Self>, Errno> {
        let created = srq::create(self.fd(), &self.uctx, cmd, alloc)?;
        Ok(SrqCreated {
            resp: created.resp,
            srq_num: created.srqn,
            shared: created.srq.memory(),
            srq: Srq {
                ring: created.srq,
                fd: Arc::clone(&self.fd),
                handle: created.resp.srq_handle,
            },
        })
    }
}
