//! The open EFA context: what GET_CONTEXT and the extended device query
//! answered (the queue limits every creation is checked against before
//! its command, as libefa checks them), and the QP table CQs find the
//! queue of a completion in.

use rverbs_abi::efa;
use rverbs_provider::table::Table;

use crate::wq::QpEntry;

/// The device's limits and capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Sub-CQs per CQ.
    pub(crate) sub_cqs_per_cq: u16,
    /// Inline bytes a send descriptor holds.
    pub(crate) inline_buf_size: u16,
    /// Bytes of LLQ per send queue.
    pub(crate) max_llq_size: u32,
    /// 64-byte blocks between two send doorbells (0: no limit).
    pub(crate) max_tx_batch: u16,
    /// The smallest send queue the device takes.
    pub(crate) min_sq_wr: u16,
    /// Send queue entries.
    pub(crate) max_sq_wr: u32,
    /// Receive queue entries.
    pub(crate) max_rq_wr: u32,
    /// SGEs of a send.
    pub(crate) max_sq_sge: u16,
    /// SGEs of a receive.
    pub(crate) max_rq_sge: u16,
    /// SGEs of an RDMA request (the core query's `max_sge_rd`).
    pub(crate) max_sge_rd: u32,
    /// The largest RDMA READ or WRITE.
    pub(crate) max_rdma_size: u32,
    /// `EFA_QUERY_DEVICE_CAPS_*`.
    pub(crate) device_caps: u32,
}

impl Limits {
    /// Whether the device has capability `cap`.
    pub(crate) fn has(&self, cap: u32) -> bool {
        self.device_caps & cap != 0
    }

    /// The limits of a context whose GET_CONTEXT answered `uctx` and whose
    /// device query answered `dev` (`None`: a kernel without EFA's query
    /// answer, whose defaults are the core query's and no capability).
    pub(crate) fn new(
        uctx: &efa::AllocUcontextResp,
        dev: Option<&efa::ExQueryDeviceResp>,
        core_max_qp_wr: u32,
        core_max_sge: u32,
        max_sge_rd: u32,
    ) -> Limits {
        let narrow = |v: u32| u16::try_from(v).unwrap_or(u16::MAX);
        let (max_sq_wr, max_rq_wr, max_sq_sge, max_rq_sge, max_rdma_size, device_caps) = match dev {
            Some(d) => (
                d.max_sq_wr,
                d.max_rq_wr,
                d.max_sq_sge,
                d.max_rq_sge,
                d.max_rdma_size,
                d.device_caps,
            ),
            None => (
                core_max_qp_wr,
                core_max_qp_wr,
                narrow(core_max_sge),
                narrow(core_max_sge),
                0,
                0,
            ),
        };
        Limits {
            sub_cqs_per_cq: uctx.sub_cqs_per_cq.max(1),
            inline_buf_size: uctx.inline_buf_size,
            max_llq_size: uctx.max_llq_size,
            max_tx_batch: uctx.max_tx_batch,
            min_sq_wr: uctx.min_sq_wr,
            max_sq_wr,
            max_rq_wr,
            max_sq_sge,
            max_rq_sge,
            max_sge_rd,
            max_rdma_size,
            device_caps,
        }
    }
}

/// What every object of an open context shares.
#[derive(Debug)]
pub(crate) struct Uctx {
    pub(crate) limits: Limits,
    /// The QPs, by QP number (what completion entries name).
    pub(crate) table: Table<QpEntry>,
}
