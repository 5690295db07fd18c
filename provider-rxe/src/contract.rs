//! rxe's side of the provider contract ([`rverbs_provider::Provider`]):
//! [`Rxe`], the open context (GET_CONTEXT without driver data), creates
//! complete objects (a kernel object whose rings cannot be mapped is
//! destroyed before the error returns) and address handles (kernel AHs,
//! named by number in WQEs); [`SendQueue`], [`Cq`] and [`Srq`] hold the
//! command fd (and handle) their doorbells and commands go to.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rverbs_abi::ah::{CreateAh, DestroyAh};
use rverbs_abi::cmd::{exec, exec_ex_query_device, exec_prefilled, NO_FD};
use rverbs_abi::cq::{CreateCq, DestroyCq, ExCreateCq, ReqNotifyCq};
use rverbs_abi::device::{ExQueryDeviceResp, GetContext, GetContextResp};
use rverbs_abi::pd::AllocPd;
use rverbs_abi::qp::{CreateQp, DestroyQp, ExCreateQp};
use rverbs_abi::srq::CreateSrq;
use rverbs_abi::wr::Wc;
use rverbs_abi::Errno;
use rverbs_provider::batch::{BatchWr, SendBatch};
use rverbs_provider::wr::{RecvWr, SendRequest, SendWr, WrOpcode};
use rverbs_provider::SharedAllocator;
use rverbs_provider::{
    AhCreated, AhNetwork, CmdError, ContextOpened, CqCreated, Feature, OpenError, PostError,
    PostFailed, Provider, QpCreated, QpState, RingLost, SrqCreated, Unshared,
};
use zerocopy::{FromZeros, IntoBytes};

use crate::stale::CqShared;
use crate::{cmd, cq, qp, srq};

/// An open rxe context: the uverbs command fd. rxe keeps no other
/// per-context state (its rings are the kernel's).
#[derive(Debug, Clone)]
pub struct Rxe {
    fd: Arc<OwnedFd>,
}

impl Rxe {
    /// The context of the uverbs command fd `fd` on which GET_CONTEXT has
    /// been sent ([`Provider::open`] sends it).
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
    /// [`QpState::may_post_send`] of the QP's state (rxe's kernel follows
    /// the state itself; this refuses a post it would not run).
    may_post: bool,
    /// The QP's number and its CQs (the receive CQ if it is another): a
    /// reset marks its completions still in them stale.
    qpn: u32,
    cqs: Vec<CqShared>,
}

impl rverbs_provider::SendQueue for SendQueue {
    #[inline]
    fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostFailed> {
        if !self.may_post {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        self.ring.post(self.fd.as_fd(), wrs)
    }
    /// Compiled into its caller (the C ABI's `ibv_post_send` entry
    /// point, whose frame it then shares).
    #[inline(always)]
    fn post_one<R: SendRequest + ?Sized>(&mut self, wr: &R) -> Result<(), PostFailed> {
        if !self.may_post {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        self.ring.post_request(self.fd.as_fd(), wr)
    }
    #[inline]
    fn post_iter<R: SendRequest, I: Iterator<Item = R>>(
        &mut self,
        reqs: I,
    ) -> Result<(), PostFailed> {
        if !self.may_post {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        self.ring.post_iter(self.fd.as_fd(), reqs)
    }
    fn post_batch(&mut self, batch: &SendBatch, wrs: &[BatchWr]) -> Result<(), PostFailed> {
        if !self.may_post {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        self.ring.post_batch(self.fd.as_fd(), batch, wrs)
    }
    /// rxe's rings follow the QP's state in the kernel: "may post"
    /// changes here, and a reset marks the QP's completions still in its
    /// CQs stale (the `stale` module), as libmlx5 removes them.
    fn set_state(&mut self, state: QpState) {
        if state == QpState::Reset {
            for cq in &self.cqs {
                cq.reset_qp(self.qpn);
            }
        }
        self.may_post = state.may_post_send();
    }
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

/// A QP's receive ring.
#[derive(Debug)]
pub struct RecvQueue {
    ring: qp::RecvQueue,
    /// [`QpState::may_post_recv`] of the QP's state.
    may_post: bool,
}

impl rverbs_provider::RecvQueue for RecvQueue {
    #[inline]
    fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        if !self.may_post {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        self.ring.post(wrs)
    }
    /// rxe's rings follow the QP's state in the kernel: only "may post"
    /// changes here.
    fn set_state(&mut self, state: QpState) {
        self.may_post = state.may_post_recv();
    }
    fn capacity(&self) -> u32 {
        self.ring.capacity()
    }
    fn outstanding(&self) -> u32 {
        self.ring.outstanding()
    }
}

/// A CQ's ring, the command fd and the kernel CQ's handle (arming and
/// resizing are commands).
#[derive(Debug)]
pub struct Cq {
    ring: cq::Cq,
    fd: Arc<OwnedFd>,
    handle: u32,
}

impl rverbs_provider::CompletionQueue for Cq {
    #[inline]
    fn poll(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        self.ring.poll(wc)
    }
    /// REQ_NOTIFY_CQ: rxe arms in the kernel.
    fn arm(&self, solicited_only: bool) -> Result<(), Errno> {
        let cmd = ReqNotifyCq {
            cq_handle: self.handle,
            solicited_only: solicited_only as u32,
        };
        cmd::req_notify_cq(self.fd.as_fd(), &cmd)
    }
    fn resize(&mut self, cqe: u32) -> Result<u32, Errno> {
        self.ring.resize(self.fd.as_fd(), self.handle, cqe)
    }
}

/// An SRQ's ring and the command fd its MODIFY_SRQs go to.
#[derive(Debug)]
pub struct Srq {
    ring: srq::Srq,
    fd: Arc<OwnedFd>,
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
    /// MODIFY_SRQ with rxe's driver data.
    fn set_limit(&self, limit: u32) -> Result<(), Errno> {
        self.ring.set_limit(self.fd.as_fd(), limit)
    }
    fn resize(&mut self, max_wr: u32) -> Result<(), Errno> {
        self.ring.resize(self.fd.as_fd(), max_wr)
    }
}

/// CREATE_AH's error when the kernel answers no AH number (its errno,
/// EOPNOTSUPP, alone would not say what to do).
const AH_WITHOUT_NUMBER: &str =
    "create_ah (the kernel returned no AH number; rxe needs Linux 5.10 or later)";

/// The most inline bytes rxe's kernel driver gives a send queue.
pub const RXE_MAX_INLINE_DATA: u32 = 512;

impl Provider for Rxe {
    const NAME: &'static str = "rxe";
    const DRIVER_ABI: std::ops::RangeInclusive<u32> = crate::DRIVER_ABI;
    type Cq = Cq;
    type CqShared = CqShared;
    type SendQueue = SendQueue;
    type RecvQueue = RecvQueue;
    type Srq = Srq;
    type SrqShared = Unshared;

    /// GET_CONTEXT without driver data (rxe takes none and answers none).
    fn open(fd: Arc<OwnedFd>) -> Result<ContextOpened<Self>, OpenError> {
        // The async fd field starts as -1: a response the kernel did not
        // write must not name fd 0.
        let mut resp = GetContextResp {
            async_fd: NO_FD,
            num_comp_vectors: 0,
        };
        exec_prefilled(fd.as_fd(), &GetContext::new_zeroed(), &mut resp, &mut []).map_err(
            |errno| OpenError {
                op: "get_context",
                errno,
                resp: None,
            },
        )?;
        Ok(ContextOpened {
            provider: Rxe { fd },
            resp,
        })
    }

    /// ALLOC_PD: rxe answers no driver data.
    fn alloc_pd(&self) -> Result<u32, Errno> {
        Ok(exec(self.fd(), &AllocPd::new_zeroed(), &mut [])?.pd_handle)
    }

    /// rxe's kernel refuses driver data in the extended QUERY_DEVICE.
    fn query_device_ex(&self) -> Result<ExQueryDeviceResp, Errno> {
        exec_ex_query_device(self.fd(), &mut [])
    }

    /// A kernel AH, which rxe's WQEs name by the number its driver answers
    /// (the network header follows from the source GID in the kernel).
    fn create_ah(&self, cmd: &CreateAh, _network: AhNetwork) -> Result<AhCreated, CmdError> {
        let mut drv = rverbs_abi::rxe::CreateAhResp::new_zeroed();
        let resp = exec(self.fd(), cmd, drv.as_mut_bytes()).map_err(CmdError::of("create_ah"))?;
        if drv.ah_num == 0 {
            // Kernels before 5.10 leave it 0 and expect the address vector
            // in every WQE, which this provider does not build. On failure
            // (device removed) the kernel frees the AH with the context.
            let _ = exec(
                self.fd(),
                &DestroyAh {
                    ah_handle: resp.ah_handle,
                },
                &mut [],
            );
            return Err(CmdError {
                op: AH_WITHOUT_NUMBER,
                errno: Errno::EOPNOTSUPP,
            });
        }
        Ok(AhCreated {
            handle: Some(resp.ah_handle),
            ah_num: drv.ah_num,
            av: None,
            held_by_sends: true,
        })
    }

    /// The kernel's `RXE_MAX_INLINE_DATA`: its largest send WQE holds 32
    /// SGEs of 16 bytes (512 on 6.1, 6.12 and 7.x, for RC, UC and UD).
    fn max_inline_data(&self, qp_type: u8) -> Option<u32> {
        let _ = qp_type;
        Some(RXE_MAX_INLINE_DATA)
    }

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
        // Its kernel driver refuses an SRQ of max_wr 0 (EINVAL). It has no
        // ECE (librxe answers EOPNOTSUPP for both ECE verbs). SRD is EFA's.
        !matches!(
            feature,
            Feature::OdpAdvice
                | Feature::DmabufMr
                | Feature::EmptySrq
                | Feature::Ece
                | Feature::SrdQp
        )
    }

    /// The ring is the kernel's memory: `_alloc` is never called.
    fn create_cq(
        &self,
        cmd: &CreateCq,
        flags: Option<u32>,
        _alloc: Option<&SharedAllocator>,
    ) -> Result<CqCreated<Self>, Errno> {
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
            Ok(ring) => Ok(CqCreated {
                resp: created.resp,
                shared: ring.shared(),
                cq: Cq {
                    ring,
                    fd: Arc::clone(&self.fd),
                    handle: created.resp.cq_handle,
                },
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
        send_cq: &CqShared,
        recv_cq: &CqShared,
        _srq: Option<&Srq>,
        _alloc: Option<&SharedAllocator>,
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
                // A new QP is in RESET.
                sq: SendQueue {
                    ring,
                    fd: Arc::clone(&self.fd),
                    may_post: false,
                    qpn: created.resp.qpn,
                    cqs: if send_cq.same(recv_cq) {
                        vec![send_cq.clone()]
                    } else {
                        vec![send_cq.clone(), recv_cq.clone()]
                    },
                },
                rq: rq.map(|ring| RecvQueue {
                    ring,
                    may_post: false,
                }),
            }),
            (Err(e), _) | (_, Err(e)) => {
                destroy_qp(self.fd(), created.resp.qp_handle);
                Err(e)
            }
        }
    }

    fn create_srq(
        &self,
        cmd: &CreateSrq,
        _alloc: Option<&SharedAllocator>,
    ) -> Result<SrqCreated<Self>, Errno> {
        let created = srq::create(self.fd(), cmd)?;
        match created.srq {
            Ok(ring) => Ok(SrqCreated {
                resp: created.resp,
                srq_num: created.srq_num,
                srq: Srq {
                    ring,
                    fd: Arc::clone(&self.fd),
                },
                shared: Unshared,
            }),
            Err(e) => {
                let _ = srq::destroy(self.fd(), created.resp.srq_handle);
                Err(e)
            }
        }
    }
}
