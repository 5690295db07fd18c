//! EFA's side of the provider contract ([`rverbs_provider::Provider`]):
//! [`Efa`], the open context (GET_CONTEXT with EFA's driver data, then
//! the extended device query for the limits, as libefa opens a device),
//! address handles (the kernel's, whose EFA answer is the number send
//! descriptors name), and the contract's queue traits on this crate's
//! queues. What EFA has not (RC and UC, SRQs, atomics, memory windows,
//! CQ and QP creation flags, completion events without the device's
//! notifications) is refused before any command.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rverbs_abi::ah::CreateAh;
use rverbs_abi::cq::CreateCq;
use rverbs_abi::device::ExQueryDeviceResp;
use rverbs_abi::efa::{self, alloc_ucontext_comp, supp_udata};
use rverbs_abi::qp::CreateQp;
use rverbs_abi::srq::CreateSrq;
use rverbs_abi::wr::Wc;
use rverbs_abi::Errno;
use rverbs_provider::batch::{BatchWr, SendBatch};
use rverbs_provider::table::Table;
use rverbs_provider::wr::{RecvWr, SendRequest, SendWr, WrOpcode};
use rverbs_provider::SharedAllocator;
use rverbs_provider::{
    AhCreated, AhNetwork, CmdError, ContextOpened, CqCreated, Feature, OpenError, PostError,
    PostFailed, Provider, QpCreated, QpState, RingLost, SrqCreated, Unshared,
};

use crate::ctx::{Limits, Uctx};
use crate::{cq, qp, QPT_DRIVER};

/// An open EFA context.
#[derive(Debug, Clone)]
pub struct Efa {
    fd: Arc<OwnedFd>,
    uctx: Arc<Uctx>,
}

/// What an EFA device offers beyond the core device query (libefa's
/// `efadv_query_device`): from GET_CONTEXT's answer and the extended
/// device query's EFA part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Send queue entries a QP may have.
    pub max_sq_wr: u32,
    /// Receive queue entries a QP may have.
    pub max_rq_wr: u32,
    /// SGEs of a send.
    pub max_sq_sge: u16,
    /// SGEs of a receive.
    pub max_rq_sge: u16,
    /// Inline bytes a send holds.
    pub inline_buf_size: u16,
    /// The largest RDMA READ or WRITE, in bytes (0: no RDMA).
    pub max_rdma_size: u32,
    /// The device does RDMA READ (on SRD QPs).
    pub rdma_read: bool,
    /// The device does RDMA WRITE (on SRD QPs).
    pub rdma_write: bool,
    /// SRD QPs take an RNR retry count.
    pub rnr_retry: bool,
    /// CQs can report the source GID of a receive.
    pub cq_with_sgid: bool,
    /// CQs deliver completion events.
    pub cq_notifications: bool,
    /// WRITE with immediate data may arrive without a posted receive.
    pub unsolicited_write_recv: bool,
    /// 64-byte blocks one send doorbell may announce (0: no limit).
    pub max_tx_batch: u16,
    /// The smallest send queue the device takes.
    pub min_sq_wr: u16,
    /// Sub-CQs per CQ.
    pub sub_cqs_per_cq: u16,
}

impl Efa {
    /// [`Provider::create_cq`] for a CQ whose receive completions carry the
    /// sender's GID when the sender has no address handle on this device
    /// (32-byte entries; libefa's `efadv_create_cq` with
    /// `EFADV_WC_EX_WITH_SGID`): `EOPNOTSUPP` unless the device has
    /// `CQ_WITH_SGID`, or for creation flags. Read the GID with
    /// [`cq::Cq::last_source_gid`] after each poll.
    pub fn create_cq_with_sgid(&self, cmd: &CreateCq) -> Result<CqCreated<Self>, Errno> {
        let (resp, ring) = cq::create(&self.fd, &self.uctx, cmd, true)?;
        Ok(CqCreated {
            resp,
            cq: ring,
            shared: Unshared,
        })
    }

    /// The device's EFA attributes, as the context was opened with.
    pub fn device_attr(&self) -> DeviceAttr {
        use rverbs_abi::efa::device_caps as c;
        let l = &self.uctx.limits;
        DeviceAttr {
            max_sq_wr: l.max_sq_wr,
            max_rq_wr: l.max_rq_wr,
            max_sq_sge: l.max_sq_sge,
            max_rq_sge: l.max_rq_sge,
            inline_buf_size: l.inline_buf_size,
            max_rdma_size: l.max_rdma_size,
            rdma_read: l.has(c::RDMA_READ),
            rdma_write: l.has(c::RDMA_WRITE),
            rnr_retry: l.has(c::RNR_RETRY),
            cq_with_sgid: l.has(c::CQ_WITH_SGID),
            cq_notifications: l.has(c::CQ_NOTIFICATIONS),
            unsolicited_write_recv: l.has(c::UNSOLICITED_WRITE_RECV),
            max_tx_batch: l.max_tx_batch,
            min_sq_wr: l.min_sq_wr,
            sub_cqs_per_cq: l.sub_cqs_per_cq,
        }
    }
}

/// EFA has no SRQ: the type of one, which no value has.
#[derive(Debug)]
pub enum NoSrq {}

impl rverbs_provider::SharedRecvQueue for NoSrq {
    fn post(&mut self, _: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        match *self {}
    }
    fn capacity(&self) -> u32 {
        match *self {}
    }
    fn outstanding(&self) -> u32 {
        match *self {}
    }
    fn set_limit(&self, _: u32) -> Result<(), Errno> {
        match *self {}
    }
    fn resize(&mut self, _: u32) -> Result<(), Errno> {
        match *self {}
    }
}

impl rverbs_provider::CompletionQueue for cq::Cq {
    #[inline]
    fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        cq::Cq::poll(self, wc)
    }
    /// No completion events without the device's CQ notifications.
    fn arm(&self, _solicited_only: bool) -> Result<(), Errno> {
        Err(Errno::EOPNOTSUPP)
    }
    /// EFA's kernel driver does not resize CQs.
    fn resize(&mut self, _cqe: u32) -> Result<u32, Errno> {
        Err(Errno::EOPNOTSUPP)
    }
}

impl rverbs_provider::SendQueue for qp::SendQueue {
    #[inline]
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostFailed> {
        self.post_reqs(wrs.iter())
    }
    #[inline]
    fn post_one<R: SendRequest + ?Sized>(&mut self, wr: &R) -> Result<(), PostFailed> {
        self.post_reqs(std::iter::once(wr))
    }
    #[inline]
    fn post_iter<R: SendRequest, I: Iterator<Item = R>>(
        &mut self,
        reqs: I,
    ) -> Result<(), PostFailed> {
        self.post_reqs(reqs)
    }
    /// A batch names no destination, which every EFA request needs.
    fn post_batch(&mut self, _batch: &SendBatch, wrs: &[BatchWr]) -> Result<(), PostFailed> {
        if wrs.is_empty() {
            return Ok(());
        }
        Err(PostFailed::new(0, PostError::MissingAddress))
    }
    fn set_state(&mut self, state: QpState) {
        qp::SendQueue::set_state(self, state);
    }
    /// EFA's SENDs are bounded by the device's MTU (8928 bytes on current
    /// devices), above the port's active MTU: the device checks them.
    fn set_ud_mtu(&mut self, _mtu: u32) {}
    fn allow(&mut self, op: WrOpcode) -> bool {
        qp::SendQueue::allow(self, op)
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
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        qp::RecvQueue::post(self, wrs)
    }
    fn set_state(&mut self, state: QpState) {
        qp::RecvQueue::set_state(self, state);
    }
    fn capacity(&self) -> u32 {
        qp::RecvQueue::capacity(self)
    }
    fn outstanding(&self) -> u32 {
        qp::RecvQueue::outstanding(self)
    }
}

impl Provider for Efa {
    const NAME: &'static str = "efa";
    const DRIVER_ABI: std::ops::RangeInclusive<u32> =
        efa::EFA_UVERBS_ABI_VERSION..=efa::EFA_UVERBS_ABI_VERSION;
    type Cq = cq::Cq;
    type CqShared = Unshared;
    type SendQueue = qp::SendQueue;
    type RecvQueue = qp::RecvQueue;
    type Srq = NoSrq;
    type SrqShared = Unshared;

    fn serves_pci(vendor: u16, device: u16) -> bool {
        vendor == crate::PCI_VENDOR_AMAZON && crate::is_efa_pci_device(device)
    }

    /// GET_CONTEXT asking for `max_tx_batch` and `min_sq_wr`, then the
    /// extended device query with EFA's answer (where the kernel says it
    /// gives one). A kernel that does not answer CREATE_AH's driver data
    /// cannot name AHs in descriptors: `EOPNOTSUPP`, as libefa refuses it.
    fn open(fd: Arc<OwnedFd>) -> Result<ContextOpened<Self>, OpenError> {
        let req = efa::AllocUcontextCmd {
            comp_mask: alloc_ucontext_comp::TX_BATCH | alloc_ucontext_comp::MIN_SQ_WR,
            reserved_20: [0; 4],
        };
        let (resp, drv) = efa::cmd::get_context(fd.as_fd(), &req).map_err(|errno| OpenError {
            op: "get_context",
            errno,
            resp: None,
        })?;
        let fail = |op, errno| OpenError {
            op,
            errno,
            resp: Some(resp),
        };
        if drv.cmds_supp_udata_mask & supp_udata::CREATE_AH == 0 {
            return Err(fail(
                "get_context (the kernel gives no address handle numbers)",
                Errno::EOPNOTSUPP,
            ));
        }
        let limits = if drv.cmds_supp_udata_mask & supp_udata::QUERY_DEVICE != 0 {
            let (core, dev) =
                efa::cmd::ex_query_device(fd.as_fd()).map_err(|e| fail("ex_query_device", e))?;
            Limits::new(
                &drv,
                Some(&dev),
                core.base.max_qp_wr,
                core.base.max_sge,
                core.base.max_sge_rd,
            )
        } else {
            let core = rverbs_abi::cmd::exec(
                fd.as_fd(),
                &rverbs_abi::device::QueryDevice { response: 0 },
                &mut [],
            )
            .map_err(|e| fail("query_device", e))?;
            Limits::new(&drv, None, core.max_qp_wr, core.max_sge, core.max_sge_rd)
        };
        let uctx = Arc::new(Uctx {
            limits,
            table: Table::default(),
        });
        Ok(ContextOpened {
            provider: Efa { fd, uctx },
            resp,
        })
    }

    /// ALLOC_PD with EFA's answer (the PD number), as libefa asks.
    fn alloc_pd(&self) -> Result<u32, Errno> {
        Ok(efa::cmd::alloc_pd(self.fd.as_fd())?.0.pd_handle)
    }

    /// The extended device query with EFA's answer, as libefa asks.
    fn query_device_ex(&self) -> Result<ExQueryDeviceResp, Errno> {
        Ok(efa::cmd::ex_query_device(self.fd.as_fd())?.0)
    }

    /// The kernel's AH; send descriptors name EFA's number for it.
    fn create_ah(&self, cmd: &CreateAh, _network: AhNetwork) -> Result<AhCreated, CmdError> {
        let (resp, drv) =
            efa::cmd::create_ah(self.fd.as_fd(), cmd).map_err(CmdError::of("create_ah"))?;
        Ok(AhCreated {
            handle: Some(resp.ah_handle),
            ah_num: u32::from(drv.efa_address_handle),
            av: None,
            held_by_sends: false,
        })
    }

    fn max_inline_data(&self, qp_type: u8) -> Option<u32> {
        (qp_type == rverbs_abi::qp::qp_type::UD || qp_type == QPT_DRIVER)
            .then_some(u32::from(self.uctx.limits.inline_buf_size))
    }

    fn supports(&self, feature: Feature) -> bool {
        match feature {
            // A kernel method of the EFA driver (efa_reg_user_mr_dmabuf).
            Feature::DmabufMr => true,
            // EFA's own transport.
            Feature::SrdQp => true,
            // Address handles by GID: there is no Ethernet port to speak of.
            Feature::RoceAddressHandle => false,
            // No SRQs, windows, atomics, creation flags, ECE or ODP.
            _ => false,
        }
    }

    fn create_cq(
        &self,
        cmd: &CreateCq,
        flags: Option<u32>,
        _alloc: Option<&SharedAllocator>,
    ) -> Result<CqCreated<Self>, Errno> {
        if flags.is_some_and(|f| f != 0) {
            return Err(Errno::EOPNOTSUPP);
        }
        // The kernel allocates EFA's rings: no allocator is used.
        let (resp, ring) = cq::create(&self.fd, &self.uctx, cmd, false)?;
        Ok(CqCreated {
            resp,
            cq: ring,
            shared: Unshared,
        })
    }

    fn create_qp(
        &self,
        cmd: &CreateQp,
        flags: Option<u32>,
        _send_cq: &Unshared,
        _recv_cq: &Unshared,
        srq: Option<&NoSrq>,
        _alloc: Option<&SharedAllocator>,
    ) -> Result<QpCreated<Self>, Errno> {
        if flags.is_some_and(|f| f != 0) || srq.is_some() {
            return Err(Errno::EOPNOTSUPP);
        }
        let (resp, sq, rq) = qp::create(&self.fd, &self.uctx, cmd)?;
        Ok(QpCreated {
            resp,
            sq,
            rq: Some(rq),
        })
    }

    /// EFA has no SRQ.
    fn create_srq(
        &self,
        _cmd: &CreateSrq,
        _alloc: Option<&SharedAllocator>,
    ) -> Result<SrqCreated<Self>, Errno> {
        Err(Errno::EOPNOTSUPP)
    }
}
