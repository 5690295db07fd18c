//! The in-process "HCA": a daemon thread that executes the work requests
//! libmlx5 posts, by watching the doorbell records in the process's own
//! memory, and writes CQEs (version 0 or 1) and completion events.
//!
//! What executes: RC (SEND, SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM,
//! RDMA_READ, CMP_SWP, FETCH_ADD), UC (SEND and WRITE families) and UD
//! (SEND, SEND_WITH_IMM) between QPs of this process; receives from QP
//! receive queues and SRQs; key, range and access checks with the PRM
//! error syndromes; RNR (immediate error with `rnr_retry` 0, retried
//! otherwise); the error state with flush CQEs; CQ arming and completion
//! events; the RC responder's class C errors (a remote access violation or
//! an invalid request moves the responder to the error state too, with an
//! affiliated async event: see `Fail::Nak`); CQ overrun (the CQ stops in
//! an error state and a CQ_ERR async event is raised: see `Hw::push`).
//! The HCA never waits for room in a CQ: like the hardware, it writes the
//! CQE and an application that let its CQ fill up loses it. UD receives
//! start with the 40-byte GRH area: written (and the CQE's GRH bits set)
//! when the address vector carries a GRH, else left untouched but counted
//! in the byte count. On a RoCE port (`device::Link::Eth`) every UD
//! datagram carries a network header built from its address vector and
//! source GID type (IB GRH, IPv6 or IPv4; see `roce_header`), the port
//! takes only datagrams to its MAC and its own GIDs, and the CQE says
//! which header it was. Not executed: SEND_WITH_INV,
//! LOCAL_INV/BIND_MW (UMR), TSO (they complete with a local QP operation
//! error), scatter-to-CQE. CQ resize is done by the RESIZE_CQ command
//! itself, under the lock (`write_resize_cqe`).
//!
//! WQE segments and CQEs are read and built through the layouts declared
//! in `rverbs_abi::mlx5::prm`: pure declarations, checked against
//! rdma-core's `mlx5dv.h` by rverbs-abi's layout test, so the layout is
//! verified independently of both libmlx5 and our provider. Everything
//! the emulator does with them (what it executes, which CQE it writes) is
//! its own; it shares no code with the provider.
//!
//! The thread is `emu_core::worker`'s. Locking: each pass takes the [`crate::emu::EMU`] lock, checks that
//! every object it touches still exists, executes a bounded number of WQEs,
//! and releases the lock; libmlx5 frees queue buffers only after their
//! destroy command, which needs the same lock, so memory is never touched
//! after it was freed.

mod cqe;
mod decode;
mod events;
mod exec;
mod pass;
mod roce;
mod user;

pub use cqe::Cqe;
pub(crate) use cqe::{cq_outstanding, write_resize_cqe};
pub use decode::{decode_recv, decode_send, Data, Seg, SendWqe, ZERO_BYTE_COUNT};
pub use events::event_read;
pub use roce::RoceL3;

use std::collections::BTreeMap;
use std::sync::Once;
use std::time::Instant;

use crate::emu::{self, Emu, WorkQueue};

/// `IB_ACCESS_LOCAL_WRITE`.
const LOCAL_WRITE: u32 = 1;
/// `IB_ACCESS_REMOTE_WRITE`.
const REMOTE_WRITE: u32 = 2;
/// `IB_ACCESS_REMOTE_READ`.
const REMOTE_READ: u32 = 4;
/// `IB_ACCESS_REMOTE_ATOMIC`.
const REMOTE_ATOMIC: u32 = 8;

/// `enum ib_event_type` values the HCA raises on the async event fd.
pub mod event {
    /// `IB_EVENT_CQ_ERR`: a CQ overrun.
    pub const CQ_ERR: u32 = 0;
    /// `IB_EVENT_QP_REQ_ERR`: invalid request local work queue error.
    pub const QP_REQ_ERR: u32 = 2;
    /// `IB_EVENT_QP_ACCESS_ERR`: local access violation work queue error.
    pub const QP_ACCESS_ERR: u32 = 3;
}

/// Send WQE opcodes (ctrl segment byte 3).
pub mod op {
    /// RDMA write.
    pub const RDMA_WRITE: u8 = 0x08;
    /// RDMA write with immediate.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// Send.
    pub const SEND: u8 = 0x0a;
    /// Send with immediate.
    pub const SEND_IMM: u8 = 0x0b;
    /// RDMA read.
    pub const RDMA_READ: u8 = 0x10;
    /// Compare and swap.
    pub const ATOMIC_CS: u8 = 0x11;
    /// Fetch and add.
    pub const ATOMIC_FA: u8 = 0x12;
}

/// CQE opcodes (op_own bits 7..4).
pub mod cqe_op {
    /// Requester completion.
    pub const REQ: u8 = 0;
    /// Responder: RDMA write with immediate.
    pub const RESP_WR_IMM: u8 = 1;
    /// Responder: send.
    pub const RESP_SEND: u8 = 2;
    /// Responder: send with immediate.
    pub const RESP_SEND_IMM: u8 = 3;
    /// Requester error.
    pub const REQ_ERR: u8 = 13;
    /// Responder error.
    pub const RESP_ERR: u8 = 14;
}

/// Error CQE syndromes (`mlx5_err_cqe.syndrome`) as libmlx5 maps them to `ibv_wc_status`.
pub mod synd {
    /// IBV_WC_LOC_LEN_ERR.
    pub const LOCAL_LENGTH: u8 = 0x01;
    /// IBV_WC_LOC_QP_OP_ERR.
    pub const LOCAL_QP_OP: u8 = 0x02;
    /// IBV_WC_LOC_PROT_ERR.
    pub const LOCAL_PROT: u8 = 0x04;
    /// IBV_WC_WR_FLUSH_ERR.
    pub const WR_FLUSH: u8 = 0x05;
    /// IBV_WC_REM_INV_REQ_ERR.
    pub const REMOTE_INVAL_REQ: u8 = 0x12;
    /// IBV_WC_REM_ACCESS_ERR.
    pub const REMOTE_ACCESS: u8 = 0x13;
    /// IBV_WC_REM_OP_ERR.
    pub const REMOTE_OP: u8 = 0x14;
    /// IBV_WC_RETRY_EXC_ERR.
    pub const TRANSPORT_RETRY: u8 = 0x15;
    /// IBV_WC_RNR_RETRY_EXC_ERR.
    pub const RNR_RETRY: u8 = 0x16;
}

static START: Once = Once::new();

/// Starts the HCA thread once per process (called on the first QP or SRQ
/// creation). The thread is detached and never keeps the process alive.
pub fn start() {
    // Unit tests drive commands with fake buffer addresses: no HCA there.
    if cfg!(test) {
        return;
    }
    emu_core::worker::start(&START, "mlx5-emu-hca", {
        let mut hw = Hw::default();
        move || {
            let mut e = emu::lock();
            hw.step(&mut e)
        }
    });
}

/// What the HCA keeps per QP.
#[derive(Debug, Clone, Copy, Default)]
struct QpHw {
    /// SQ consumer counter in 64-byte basic blocks.
    sq_pc: u32,
    /// RQ WQEs consumed.
    rq_cons: u32,
    /// RNR back-off: retry time and retries left (7 = forever).
    rnr: Option<(Instant, u8)>,
    /// [`crate::emu::Qp::resets`] these counters belong to.
    resets: u32,
}

/// What the HCA keeps per SRQ.
#[derive(Debug, Clone, Copy, Default)]
struct SrqHw {
    head: u16,
    consumed: u32,
}

/// What the HCA keeps per CQ.
#[derive(Debug, Clone, Copy, Default)]
struct CqHw {
    /// Producer counter.
    pi: u32,
    /// Last ARM dbrec word seen.
    arm_word: u32,
    /// Whether any arm was seen.
    ever_armed: bool,
    /// Armed: solicited-only flag.
    armed: Option<bool>,
    /// Completion events raised: the arm sequence number the CQ expects
    /// (its low 2 bits; see [`Hw::arms`]).
    sn: u32,
    /// Overrun: the CQ is in the error state and takes no more CQEs.
    error: bool,
}

/// A copy of the QP fields a pass needs.
#[derive(Debug, Clone, Copy)]
struct QpView {
    h: u32,
    ctx: u64,
    qpn: u32,
    ty: u8,
    pd: u32,
    send_cq: u32,
    recv_cq: u32,
    srq: Option<u32>,
    /// The SRQ's number (0 without an SRQ).
    srqn: u32,
    sq_sig_all: bool,
    sig: bool,
    uidx: u32,
    v1: bool,
    sq: WorkQueue,
    rq: WorkQueue,
    db: u64,
    state: u8,
    dest: u32,
    access: u32,
    rnr_retry: u8,
    qkey: u32,
    resets: u32,
}

fn view(e: &Emu, h: u32) -> Option<QpView> {
    let q = e.qps.get(&h)?;
    let v1 = e
        .context(q.ctx)
        .and_then(|c| c.ucontext())
        .is_some_and(|u| u.cqe_version() == 1);
    Some(QpView {
        h,
        ctx: q.ctx,
        qpn: q.qpn,
        ty: q.qp_type,
        pd: q.pd,
        send_cq: q.send_cq,
        recv_cq: q.recv_cq,
        srq: q.srq,
        srqn: q.srq.and_then(|s| e.srq(s)).map_or(0, |s| s.srqn()),
        sq_sig_all: q.sq_sig_all,
        sig: q.flags & 1 != 0,
        uidx: q.uidx,
        v1,
        sq: q.sq,
        rq: q.rq,
        db: q.db_addr,
        state: q.state,
        dest: q.attrs.dest_qp_num,
        access: q.attrs.qp_access_flags,
        rnr_retry: q.attrs.rnr_retry,
        qkey: q.attrs.qkey,
        resets: q.resets(),
    })
}

/// A receive WQE taken by the responder.
struct Recv {
    segs: Vec<Seg>,
    /// SRQ WQE index, or the RQ counter.
    counter: u16,
}

/// Why a WQE could not complete.
enum Fail {
    /// Try again later (CQ full, RNR back-off).
    Stall,
    /// Requester error syndrome; with `Some`, the responder also gets an
    /// error CQE with that syndrome (and goes to ERR).
    Err(u8, Option<Box<(QpView, Recv, u8)>>),
    /// An RC responder's class C error on a request that consumes no
    /// receive WQE (RDMA WRITE, RDMA READ, atomics): a remote access
    /// violation (bad rkey, range or rights; the QP not granting the
    /// access) or an invalid request (a misaligned atomic).
    ///
    /// InfiniBand Architecture Specification vol 1 (release 1.2.1
    /// numbering): the responder answers with a NAK, Remote Access Error
    /// or Invalid Request (the AETH NAK codes of 9.7.5.2.4 / 9.7.5.2.3),
    /// and per the responder error behaviour of 9.9.3 (class C) it puts
    /// its QP in the Error state; since no WQE of its own carries the
    /// error, the responder's consumer learns it from an affiliated
    /// asynchronous error (11.6.3.1: Local Access Violation / Invalid
    /// Request Local Work Queue Error, `IB_EVENT_QP_ACCESS_ERR` /
    /// `IB_EVENT_QP_REQ_ERR`, mlx5's WQ_ACCESS_ERROR /
    /// WQ_INVAL_REQ_ERROR events). The requester completes its WQE with
    /// the matching error (9.9.2: REM_ACCESS_ERR / REM_INV_REQ_ERR) and
    /// moves to the Error state, flushing what follows. Fields: the
    /// requester's syndrome, the responder QP's handle.
    Nak(u8, u32),
}

/// All HCA state (owned by the thread).
#[derive(Debug, Default)]
struct Hw {
    qps: BTreeMap<u32, QpHw>,
    srqs: BTreeMap<u32, SrqHw>,
    cqs: BTreeMap<u32, CqHw>,
}

#[cfg(test)]
mod tests;
