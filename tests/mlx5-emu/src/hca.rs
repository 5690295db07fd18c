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
//! Locking: each pass takes the [`crate::emu::EMU`] lock, checks that
//! every object it touches still exists, executes a bounded number of WQEs,
//! and releases the lock; libmlx5 frees queue buffers only after their
//! destroy command, which needs the same lock, so memory is never touched
//! after it was freed.

use std::collections::BTreeMap;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use rverbs_abi::cq::{AsyncEventDesc, CompEventDesc};
use rverbs_abi::mlx5::prm::{self, Av, Cqe64, CtrlSeg, DataSeg, ErrCqe, SrqNextSeg};
use rverbs_abi::mlx5::wqe::{self, DataItem, SendLayout};
use rverbs_abi::qp::{qp_state, qp_type};
use zerocopy::network_endian::{U16, U32};
use zerocopy::{FromBytes, IntoBytes};

use crate::emu::{self, Emu, EventKind, WorkQueue};
use crate::real;

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
    START.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("mlx5-emu-hca".into())
            .spawn(run);
    });
}

/// The thread body: passes with bounded back-off when idle (yield, then
/// sleep 50 us, 100 us, and after about a second without work 500 us).
fn run() {
    let mut hw = Hw::default();
    let mut idle = 0u32;
    loop {
        let busy = {
            let mut e = emu::lock();
            hw.step(&mut e)
        };
        if busy {
            idle = 0;
        } else if idle < 64 {
            idle += 1;
            std::thread::yield_now();
        } else if idle < 2048 {
            idle += 1;
            std::thread::sleep(Duration::from_micros(50));
        } else if idle < 12_288 {
            idle += 1;
            std::thread::sleep(Duration::from_micros(100));
        } else {
            // Idle for about a second: poll slower still.
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

/// A 64-byte CQE being built (`struct mlx5_cqe64`; its layout is declared
/// in `rverbs_abi::mlx5::prm` and checked against rdma-core's `mlx5dv.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe(pub Cqe64);

impl Cqe {
    /// A CQE with everything zero but the opcode.
    pub fn new(opcode: u8) -> Self {
        Cqe(Cqe64 {
            op_own: opcode << 4,
            ..Cqe64::default()
        })
    }
    /// The same bytes as an error CQE (`struct mlx5_err_cqe`).
    fn err(&mut self) -> &mut ErrCqe {
        zerocopy::transmute_mut!(&mut self.0)
    }
    /// Source QP (bits 23..0 of flags_rqpn).
    pub fn rqpn(&mut self, qpn: u32) -> &mut Self {
        self.0.flags_rqpn = U32::new(qpn & 0xff_ffff);
        self
    }
    /// SRQ number (v0) or user index (v1).
    pub fn srqn_uidx(&mut self, v: u32) -> &mut Self {
        self.0.srqn_uidx = U32::new(v & 0xff_ffff);
        self
    }
    /// Immediate data, stored as posted (already in network order).
    pub fn imm(&mut self, imm: [u8; 4]) -> &mut Self {
        self.0.imm_inval_pkey = U32::from_bytes(imm);
        self
    }
    /// Byte count.
    pub fn byte_cnt(&mut self, n: u32) -> &mut Self {
        self.0.byte_cnt = U32::new(n);
        self
    }
    /// WQE opcode (requester) and local QPN.
    pub fn sop_qpn(&mut self, opcode: u8, qpn: u32) -> &mut Self {
        self.0.sop_drop_qpn = U32::new((u32::from(opcode) << 24) | (qpn & 0xff_ffff));
        self
    }
    /// WQE counter.
    pub fn wqe_counter(&mut self, n: u16) -> &mut Self {
        self.0.wqe_counter = U16::new(n);
        self
    }
    /// Error syndrome (and a vendor syndrome).
    pub fn syndrome(&mut self, s: u8) -> &mut Self {
        let e = self.err();
        e.vendor_err_synd = if s == synd::WR_FLUSH { 0xf9 } else { 0x80 };
        e.syndrome = s;
        self
    }
    /// Sets the solicited-event bit.
    pub fn solicited(&mut self) -> &mut Self {
        self.0.op_own |= 2;
        self
    }
    /// Marks a received GRH (flags_rqpn bits 29..28).
    pub fn grh(&mut self) -> &mut Self {
        self.0.flags_rqpn = U32::new(self.0.flags_rqpn.get() | 1 << 28);
        self
    }
    /// The network header of a RoCE receive (flags_rqpn bits 25..24: 0 an
    /// IB GRH, RoCE v1; 1 IPv6; 2 IPv4), what the kernel's mlx5
    /// `handle_responder` reads as `roce_packet_type` on an Ethernet port
    /// (`MLX5_CQE_ROCE_L3_HEADER_TYPE_*`).
    pub fn roce_l3(&mut self, l3: RoceL3) -> &mut Self {
        let t = match l3 {
            RoceL3::Grh => 0,
            RoceL3::Ipv6 => 1,
            RoceL3::Ipv4 => 2,
        };
        self.0.flags_rqpn = U32::new(self.0.flags_rqpn.get() | t << 24);
        self
    }
    /// The source LID.
    pub fn slid(&mut self, lid: u16) -> &mut Self {
        self.0.slid = U16::new(lid);
        self
    }
}

/// Writes `cqe` into the CQE slot at `addr` as the device does: every
/// byte but `op_own`, then (release) `op_own` with the `owner` bit.
fn write_cqe(addr: u64, cqe: &Cqe, owner: u8) {
    let own = std::mem::offset_of!(Cqe64, op_own);
    write_user(addr, &cqe.0.as_bytes()[..own]);
    fence(Ordering::Release);
    // SAFETY: `addr + own` is the op_own byte of a CQE inside a live ring
    // (the callers' ranges are checked when the ring was installed and
    // they hold the emulator lock); the application reads it
    // concurrently, hence the atomic store.
    unsafe {
        (*((addr + own as u64) as *const AtomicU8)).store(cqe.0.op_own | owner, Ordering::Release)
    };
}

/// Reads a big-endian doorbell word with an atomic load and orders later
/// reads (of the WQEs it announces) after it.
fn read_dbrec(addr: u64) -> u32 {
    let v = if addr % 4 == 0 {
        // SAFETY: `addr` is an aligned doorbell record of a live object
        // (its range was checked at creation; the caller holds the EMU lock
        // and saw the object); the application writes it concurrently,
        // hence the atomic access.
        unsafe { (*(addr as *const AtomicU32)).load(Ordering::Acquire) }
    } else {
        // SAFETY: as above, for a record the application misaligned
        // (libmlx5 never does); a torn read only confuses that application.
        unsafe { std::ptr::read_unaligned(addr as *const u32) }
    };
    fence(Ordering::Acquire);
    u32::from_be(v)
}

/// Copies `len` user bytes at `addr`.
fn read_user(addr: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    if len > 0 {
        // SAFETY: the caller checked the range lies in a live queue buffer
        // or registered memory region of this process.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), len) };
    }
    v
}

/// Writes `bytes` to user memory at `addr`.
fn write_user(addr: u64, bytes: &[u8]) {
    if !bytes.is_empty() {
        // SAFETY: the caller checked the range lies in a live registered
        // memory region of this process with local write access.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
    }
}

/// The CQEs of CQ `cq` its application has not consumed: the producer
/// counter minus the consumer index it last wrote to the doorbell record,
/// modulo 2^24 as the HCA compares them (called under the lock).
pub(crate) fn cq_outstanding(cq: &emu::Cq) -> u32 {
    // The record's range was checked mapped when the CQ was created.
    let ci = read_dbrec(cq.db_addr) & 0xff_ffff;
    cq.hw_pi.wrapping_sub(ci) & 0xff_ffff
}

/// Writes the RESIZE CQE (opcode 5, owner bit of counter `pi`) that ends
/// `ring` at producer counter `pi` (called by RESIZE_CQ under the lock).
pub(crate) fn write_resize_cqe(ring: emu::CqRing, pi: u32) {
    // Unit tests drive commands with fake buffer addresses.
    if cfg!(test) || ring.entries == 0 || ring.cqe_size < 64 {
        return;
    }
    let idx = u64::from(pi & (ring.entries - 1));
    let addr = ring.buf + idx * u64::from(ring.cqe_size) + u64::from(ring.cqe_size - 64);
    let cqe = Cqe::new(5);
    let owner = u8::from(pi & ring.entries != 0);
    // The ring being replaced was checked when it was installed; the
    // application keeps it mapped until RESIZE_CQ returns (it copies CQEs
    // out of it after), and the caller holds the emulator lock.
    write_cqe(addr, &cqe, owner);
}

/// Reads `len` bytes of a work queue from byte offset `off`, wrapping at
/// its end.
fn read_ring(wq: &WorkQueue, off: u64, len: usize) -> Vec<u8> {
    let size = wq.bytes();
    let mut out = Vec::with_capacity(len);
    let mut pos = off % size;
    let mut left = len as u64;
    while left > 0 {
        let n = left.min(size - pos);
        out.extend_from_slice(&read_user(wq.buf + pos, n as usize));
        left -= n;
        pos = 0;
    }
    out
}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// The `T` at byte `off` of `b` (copied out; `None` if `b` is too short).
fn seg<T: FromBytes>(b: &[u8], off: usize) -> Option<T> {
    T::read_from_prefix(b.get(off..)?).ok().map(|(t, _)| t)
}

/// One scatter/gather entry of a WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seg {
    /// Byte count.
    pub len: u32,
    /// Memory key.
    pub lkey: u32,
    /// HCA address.
    pub addr: u64,
}

/// What a data segment's byte count of 0 means to the HCA: 2 GiB (0
/// stands for 2^31, the largest segment; libmlx5's
/// `mlx5_wr_memcpy` relies on it: "2 Gbyte is represented as 0 in data
/// segment byte count"). libmlx5 therefore leaves zero-length SGEs out of
/// send and RQ WQEs (its SRQ path writes them, see notes 3.2).
pub const ZERO_BYTE_COUNT: u32 = 1 << 31;

impl Seg {
    /// The bytes the HCA may gather or scatter through this entry: its
    /// byte count, [`ZERO_BYTE_COUNT`] for 0.
    pub fn bytes(&self) -> u32 {
        if self.len == 0 {
            ZERO_BYTE_COUNT
        } else {
            self.len
        }
    }
}

/// The data part of a send WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Data {
    /// Gather entries.
    Segs(Vec<Seg>),
    /// Inline payload.
    Inline(Vec<u8>),
}

/// A decoded send WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWqe {
    /// Opcode (see [`op`]).
    pub opcode: u8,
    /// The WQE index (ctrl pi).
    pub pi: u16,
    /// QPN in the ctrl segment.
    pub qpn: u32,
    /// Size in 16-byte units.
    pub ds: u8,
    /// fm_ce_se byte.
    pub fm_ce_se: u8,
    /// Immediate bytes as posted.
    pub imm: [u8; 4],
    /// Remote address and rkey.
    pub raddr: Option<(u64, u32)>,
    /// Swap/add and compare operands.
    pub atomic: Option<(u64, u64)>,
    /// UD destination: QPN and qkey.
    pub ud: Option<(u32, u32)>,
    /// UD: the address vector.
    pub av: Option<Av>,
    /// Data.
    pub data: Data,
}

/// Decodes a send WQE of `ds * 16` bytes for a QP of type `ty`. `None` if
/// it is malformed.
pub fn decode_send(bytes: &[u8], ty: u8) -> Option<SendWqe> {
    let ctrl: CtrlSeg = seg(bytes, 0)?;
    let w0 = ctrl.opmod_idx_opcode.get();
    let ds = (ctrl.qpn_ds.get() & 0x3f) as u8;
    let end = usize::from(ds) * 16;
    if ds == 0 || end > bytes.len() {
        return None;
    }
    let bytes = &bytes[..end];
    let opcode = (w0 & 0xff) as u8;
    let mut w = SendWqe {
        opcode,
        pi: ((w0 >> 8) & 0xffff) as u16,
        qpn: ctrl.qpn_ds.get() >> 8,
        ds,
        fm_ce_se: ctrl.fm_ce_se,
        imm: ctrl.imm.to_bytes(),
        raddr: None,
        atomic: None,
        ud: None,
        av: None,
        data: Data::Segs(Vec::new()),
    };
    // Where each segment is: the PRM's layout, read by rverbs-abi's one
    // reader of it (also used by the WQE comparison and `rverbs inspect`).
    let layout = SendLayout::of(ty, opcode);
    if layout.datagram.is_some() {
        let dg = layout.datagram_seg(bytes)?;
        w.ud = Some((dg.av.dqp_dct.get() & 0xff_ffff, dg.av.qkey.get()));
        w.av = Some(dg.av);
    }
    if layout.raddr.is_some() {
        let r = layout.raddr_seg(bytes)?;
        w.raddr = Some((r.raddr.get(), r.rkey.get()));
    }
    if layout.atomic.is_some() {
        let a = layout.atomic_seg(bytes)?;
        w.atomic = Some((a.swap_add.get(), a.compare.get()));
    }
    let mut items = wqe::data_items(bytes, layout.data, bytes.len()).peekable();
    if let Some(DataItem::Inline { len, bytes: b, .. }) = items.peek() {
        // One inline payload, whole.
        if b.len() != *len as usize {
            return None;
        }
        w.data = Data::Inline(b.to_vec());
    } else {
        let mut segs = Vec::new();
        for item in items {
            match item {
                DataItem::Seg { seg, .. } => segs.push(Seg::from(seg)),
                // Inline data after gather entries: not a WQE anyone builds.
                DataItem::Inline { .. } => return None,
                // A partial segment at the end is not read.
                DataItem::Trailing { .. } => break,
            }
        }
        w.data = Data::Segs(segs);
    }
    Some(w)
}

impl From<DataSeg> for Seg {
    fn from(d: DataSeg) -> Seg {
        Seg {
            len: d.byte_count.get(),
            lkey: d.lkey.get(),
            addr: d.addr.get(),
        }
    }
}

/// Decodes the scatter list of a receive WQE: at most `max` data
/// segments, ending at the first with lkey `MLX5_INVALID_LKEY`.
pub fn decode_recv(bytes: &[u8], max: usize) -> Vec<Seg> {
    bytes
        .chunks_exact(size_of::<DataSeg>())
        .take(max)
        .filter_map(|c| DataSeg::read_from_bytes(c).ok())
        .map(Seg::from)
        .take_while(|s| s.lkey != prm::INVALID_LKEY)
        .collect()
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

impl Hw {
    /// One pass over every object; true if anything happened.
    fn step(&mut self, e: &mut Emu) -> bool {
        self.qps.retain(|h, _| e.qps.contains_key(h));
        self.srqs.retain(|h, _| e.srqs.contains_key(h));
        self.cqs.retain(|h, _| e.cqs.contains_key(h));
        // RESIZE_CQ may have advanced a producer counter.
        for (h, cq) in &e.cqs {
            self.cqs.entry(*h).or_default().pi = cq.hw_pi;
        }
        crate::record::note_objects(e);
        let mut busy = self.arms(e);
        let handles: Vec<u32> = e.qps.keys().copied().collect();
        for h in handles {
            busy |= self.run_qp(e, h);
        }
        busy
    }

    /// Detects CQ arm doorbells.
    fn arms(&mut self, e: &mut Emu) -> bool {
        let mut busy = false;
        let cqs: Vec<u32> = e.cqs.keys().copied().collect();
        for h in cqs {
            let Some(cq) = e.cqs.get(&h) else { continue };
            let word = read_dbrec(cq.db_addr + 4);
            let slot = e
                .uar_maps()
                .find(|(_, m)| m.ctx == cq.ctx && m.index == cq.uar_page && m.len >= 0x28)
                .map(|(a, _)| a as u64 + 0x20);
            let cqn = cq.cqn;
            let st = self.cqs.entry(h).or_default();
            let mut arm = None;
            if word != st.arm_word {
                st.arm_word = word;
                st.ever_armed = true;
                arm = Some(word);
            }
            if let Some(slot) = slot {
                // SAFETY: the UAR page is mapped (recorded in `uar_maps`
                // under the lock) and the 8-byte slot at 0x20 is aligned;
                // the application stores to it with 64-bit writes.
                let a = unsafe { &*(slot as *const AtomicU64) };
                let v = a.load(Ordering::Acquire);
                let b = v.to_ne_bytes();
                if be32(&b, 4) == cqn
                    && a.compare_exchange(v, 0, Ordering::AcqRel, Ordering::Relaxed)
                        .is_ok()
                    && !st.ever_armed
                {
                    st.ever_armed = true;
                    arm = Some(be32(&b, 0));
                }
            }
            if let Some(w) = arm {
                busy = true;
                let sol = w & (1 << 24) != 0;
                let ci = w & 0xff_ffff;
                // The arm's sequence number (bits 29..28) must be the
                // count of events this CQ raised: one made before the
                // latest event was read (libmlx5 steps its number in
                // mlx5_cq_event, for each event read) is stale, and
                // ignored (notes, 4.8).
                if (w >> 28) & 3 != st.sn & 3 {
                    crate::log::line(format_args!(
                        "cq {h}: stale arm ignored (sn {}, expected {})",
                        (w >> 28) & 3,
                        st.sn & 3
                    ));
                    continue;
                }
                if !sol && st.pi.wrapping_sub(ci) & 0xff_ffff != 0 {
                    st.armed = None;
                    st.sn = st.sn.wrapping_add(1);
                    notify(e, h);
                } else {
                    st.armed = Some(sol);
                }
            }
        }
        busy
    }

    /// Free CQE slots in CQ `h`.
    fn cq_room(&self, e: &Emu, h: u32) -> u32 {
        let Some(cq) = e.cqs.get(&h) else { return 0 };
        let pi = self.cqs.get(&h).map_or(0, |s| s.pi);
        let ci = read_dbrec(cq.db_addr) & 0xff_ffff;
        let used = pi.wrapping_sub(ci) & 0xff_ffff;
        cq.ring.entries.saturating_sub(used)
    }

    /// Writes a CQE to CQ `h`; `event` says whether it may fire a
    /// solicited-only arm.
    ///
    /// A CQE that finds the CQ full (the consumer index, as the
    /// application last wrote it to the doorbell record, a whole ring
    /// behind) is not written: the CQ enters the error state and a CQ_ERR
    /// async event names it, once; from then on the CQ takes no CQE
    /// (those already in the ring stay). This is the CQ Error affiliated
    /// asynchronous error of the InfiniBand specification (vol 1, 11.6.3.1
    /// in release 1.2.1 numbering: "CQ overrun", after which no more CQEs
    /// are posted to the CQ), what mlx5 raises as its CQ_ERROR event
    /// (syndrome CQ overrun) and the kernel forwards as
    /// `IB_EVENT_CQ_ERR`. The QP whose completion was lost is not moved
    /// to an error state here (the specification's Local Work Queue
    /// Catastrophic Error for later users of the CQ is not modelled).
    fn push(&mut self, e: &mut Emu, h: u32, cqe: &Cqe, event: bool) {
        let Some(cq) = e.cqs.get(&h) else { return };
        let (ring, ctx, user_handle) = (cq.ring, cq.ctx, cq.user_handle());
        if self.cqs.get(&h).is_some_and(|s| s.error) {
            return;
        }
        if self.cq_room(e, h) == 0 {
            self.cqs.entry(h).or_default().error = true;
            crate::log::line(format_args!("cq {h}: overrun, CQ in error"));
            async_event(e, ctx, user_handle, event::CQ_ERR);
            return;
        }
        let st = self.cqs.entry(h).or_default();
        let idx = u64::from(st.pi & (ring.entries - 1));
        let addr = ring.buf + idx * u64::from(ring.cqe_size) + u64::from(ring.cqe_size - 64);
        let owner = u8::from(st.pi & ring.entries != 0);
        // A CQE in the live ring of CQ `h` (checked to exist under the lock).
        write_cqe(addr, cqe, owner);
        st.pi = st.pi.wrapping_add(1);
        if let Some(c) = e.cqs.get_mut(&h) {
            c.hw_pi = st.pi;
        }
        if let Some(sol) = st.armed {
            if !sol || event {
                st.armed = None;
                st.sn = st.sn.wrapping_add(1);
                notify(e, h);
            }
        }
    }

    /// The counters of QP `q`, restarted if it was reset since.
    fn qp_hw(&mut self, q: &QpView) -> &mut QpHw {
        let fresh = QpHw {
            resets: q.resets,
            ..QpHw::default()
        };
        let st = self.qps.entry(q.h).or_insert(fresh);
        if q.state == qp_state::RESET || st.resets != q.resets {
            *st = fresh;
        }
        st
    }

    /// Runs the send queue of QP `h` (and flushes it in ERR).
    fn run_qp(&mut self, e: &mut Emu, h: u32) -> bool {
        let Some(q) = view(e, h) else { return false };
        self.qp_hw(&q);
        if q.state == qp_state::RESET {
            return false;
        }
        if q.state == qp_state::ERR {
            return self.flush(e, &q);
        }
        if q.state != qp_state::RTS || q.sq.wqe_cnt == 0 {
            return false;
        }
        let mut busy = false;
        for _ in 0..32 {
            let st = self.qps.get(&h).copied().unwrap_or_default();
            let db = read_dbrec(q.db + 4) & 0xffff;
            if st.sq_pc & 0xffff == db {
                break;
            }
            if st.rnr.is_some_and(|(t, _)| Instant::now() < t) {
                break;
            }
            let off = u64::from(st.sq_pc & (q.sq.wqe_cnt - 1)) * 64;
            let ctrl = read_ring(&q.sq, off, size_of::<CtrlSeg>());
            let ds = seg::<CtrlSeg>(&ctrl, 0).map_or(0, |c| (c.qpn_ds.get() & 0x3f) as usize);
            let bbs = (ds.max(1) as u32).div_ceil(4);
            let bytes = read_ring(&q.sq, off, ds * 16);
            let wqe = decode_send(&bytes, q.ty)
                .filter(|w| u32::from(w.pi) == st.sq_pc & 0xffff && w.qpn == q.qpn);
            let result = match &wqe {
                Some(w) => self.execute(e, &q, w),
                None => Err(Fail::Err(synd::LOCAL_QP_OP, None)),
            };
            let pi = (st.sq_pc & 0xffff) as u16;
            let opcode = wqe.as_ref().map_or(0, |w| w.opcode);
            if !matches!(result, Err(Fail::Stall)) {
                crate::record::wqe(crate::record::Kind::Sq, h, u32::from(pi), db, &bytes);
            }
            match result {
                Err(Fail::Stall) => break,
                Ok(byte_cnt) => {
                    let signaled = q.sq_sig_all
                        || wqe
                            .as_ref()
                            .is_some_and(|w| w.fm_ce_se & prm::WQE_CTRL_CQ_UPDATE != 0);
                    if signaled {
                        let mut c = Cqe::new(cqe_op::REQ);
                        c.sop_qpn(opcode, q.qpn)
                            .wqe_counter(pi)
                            .srqn_uidx(if q.v1 { q.uidx } else { 0 })
                            .byte_cnt(byte_cnt);
                        self.push(e, q.send_cq, &c, false);
                    }
                }
                Err(Fail::Err(s, _) | Fail::Nak(s, _)) => {
                    let mut c = Cqe::new(cqe_op::REQ_ERR);
                    c.sop_qpn(opcode, q.qpn)
                        .wqe_counter(pi)
                        .srqn_uidx(if q.v1 { q.uidx } else { 0 })
                        .syndrome(s);
                    self.push(e, q.send_cq, &c, true);
                    set_err(e, h);
                    match result {
                        Err(Fail::Err(_, Some(b))) => {
                            let (d, r, rs) = *b;
                            self.resp_err(e, &d, &r, rs);
                        }
                        Err(Fail::Nak(s, dh)) => responder_fatal(e, dh, s),
                        _ => {}
                    }
                }
            }
            busy = true;
            let st = self.qps.entry(h).or_default();
            st.sq_pc = st.sq_pc.wrapping_add(bbs);
            st.rnr = None;
            if view(e, h).is_none_or(|v| v.state != qp_state::RTS) {
                break;
            }
        }
        busy
    }

    /// Flushes the outstanding send and receive WQEs of a QP in ERR.
    fn flush(&mut self, e: &mut Emu, q: &QpView) -> bool {
        let mut busy = false;
        let mut st = *self.qp_hw(q);
        let uidx = if q.v1 { q.uidx } else { 0 };
        if q.sq.wqe_cnt > 0 {
            for _ in 0..64 {
                let db = read_dbrec(q.db + 4) & 0xffff;
                if st.sq_pc & 0xffff == db {
                    break;
                }
                let off = u64::from(st.sq_pc & (q.sq.wqe_cnt - 1)) * 64;
                let ctrl = read_ring(&q.sq, off, size_of::<CtrlSeg>());
                let ctrl: CtrlSeg = seg(&ctrl, 0).unwrap_or_default();
                let ds = ctrl.qpn_ds.get() & 0x3f;
                let mut c = Cqe::new(cqe_op::REQ_ERR);
                c.sop_qpn(ctrl.opmod_idx_opcode.get() as u8, q.qpn)
                    .wqe_counter((st.sq_pc & 0xffff) as u16)
                    .srqn_uidx(uidx)
                    .syndrome(synd::WR_FLUSH);
                self.push(e, q.send_cq, &c, true);
                st.sq_pc = st.sq_pc.wrapping_add(ds.max(1).div_ceil(4));
                busy = true;
            }
        }
        if q.srq.is_none() && q.rq.wqe_cnt > 0 {
            for _ in 0..64 {
                let db = read_dbrec(q.db) & 0xffff;
                if st.rq_cons & 0xffff == db {
                    break;
                }
                let mut c = Cqe::new(cqe_op::RESP_ERR);
                c.sop_qpn(0, q.qpn)
                    .wqe_counter((st.rq_cons & 0xffff) as u16)
                    .srqn_uidx(uidx)
                    .syndrome(synd::WR_FLUSH);
                self.push(e, q.recv_cq, &c, true);
                st.rq_cons = st.rq_cons.wrapping_add(1);
                busy = true;
            }
        }
        self.qps.insert(q.h, st);
        busy
    }

    /// Executes one WQE; returns the requester byte count.
    fn execute(&mut self, e: &mut Emu, q: &QpView, w: &SendWqe) -> Result<u32, Fail> {
        let local_err = |s| Fail::Err(s, None);
        let rdma = matches!(w.opcode, op::RDMA_WRITE | op::RDMA_WRITE_IMM);
        let send = matches!(w.opcode, op::SEND | op::SEND_IMM);
        let ok = match q.ty {
            qp_type::RC => {
                send || rdma || matches!(w.opcode, op::RDMA_READ | op::ATOMIC_CS | op::ATOMIC_FA)
            }
            qp_type::UC => send || rdma,
            qp_type::UD => send,
            _ => false,
        };
        if !ok {
            return Err(local_err(synd::LOCAL_QP_OP));
        }
        let reads_into_local = matches!(w.opcode, op::RDMA_READ | op::ATOMIC_CS | op::ATOMIC_FA);
        // Local side: gather (or validate the scatter targets).
        let (payload, locals) = match &w.data {
            Data::Inline(b) => {
                if reads_into_local {
                    return Err(local_err(synd::LOCAL_QP_OP));
                }
                (b.clone(), Vec::new())
            }
            Data::Segs(segs) => {
                let need = if reads_into_local { LOCAL_WRITE } else { 0 };
                let mut locals = Vec::with_capacity(segs.len());
                for s in segs {
                    let user = translate(e, q.ctx, q.pd, s.lkey, s.addr, s.bytes(), need, false)
                        .ok_or(local_err(synd::LOCAL_PROT))?;
                    locals.push((user, s.bytes()));
                }
                let mut payload = Vec::new();
                if !reads_into_local {
                    for &(a, l) in &locals {
                        payload.extend_from_slice(&read_user(a, l as usize));
                    }
                }
                (payload, locals)
            }
        };
        if payload.len() as u64 > u64::from(crate::device::MAX_MSG_SZ) {
            return Err(local_err(synd::LOCAL_LENGTH));
        }
        // The destination.
        let dqpn = match w.ud {
            Some((n, _)) => n,
            None => q.dest,
        };
        let reliable = q.ty == qp_type::RC;
        let lost = if reliable {
            Err(local_err(synd::TRANSPORT_RETRY))
        } else {
            Ok(0)
        };
        let Some(d) = e.qp_by_qpn(dqpn).map(|(h, _)| h).and_then(|h| view(e, h)) else {
            return lost;
        };
        if d.ty != q.ty || !(d.state == qp_state::RTR || d.state == qp_state::RTS) {
            return lost;
        }
        if let Some((_, qkey)) = w.ud {
            if qkey != d.qkey {
                return Ok(0);
            }
        }
        // A class C error at an RC responder (see [`Fail::Nak`]); UC drops
        // the request silently.
        let nak = |s| Fail::Nak(s, d.h);
        let remote_err = |s| if reliable { Err(nak(s)) } else { Ok(0) };
        let len = payload.len() as u32;
        match w.opcode {
            op::RDMA_WRITE | op::RDMA_WRITE_IMM => {
                let (va, rkey) = w.raddr.unwrap_or_default();
                if d.access & REMOTE_WRITE == 0 {
                    return remote_err(synd::REMOTE_ACCESS);
                }
                let Some(user) = translate(e, d.ctx, d.pd, rkey, va, len, REMOTE_WRITE, true)
                else {
                    return remote_err(synd::REMOTE_ACCESS);
                };
                if w.opcode == op::RDMA_WRITE {
                    write_user(user, &payload);
                    return Ok(len);
                }
                let r = match self.take_recv(e, &d) {
                    Some(r) => r,
                    None => return self.rnr(q),
                };
                write_user(user, &payload);
                let mut c = Cqe::new(cqe_op::RESP_WR_IMM);
                c.byte_cnt(len)
                    .imm(w.imm)
                    .rqpn(q.qpn)
                    .slid(crate::device::lid())
                    .srqn_uidx(resp_uidx(&d))
                    .sop_qpn(0, d.qpn)
                    .wqe_counter(r.counter);
                if w.fm_ce_se & prm::WQE_CTRL_SOLICITED != 0 {
                    c.solicited();
                }
                self.push(e, d.recv_cq, &c, w.fm_ce_se & prm::WQE_CTRL_SOLICITED != 0);
                Ok(len)
            }
            op::SEND | op::SEND_IMM => {
                // The network header a UD receive starts with: on an
                // InfiniBand port a GRH if the address vector has one
                // (otherwise the 40-byte area is consumed but not
                // written); on a RoCE port always one, and a datagram the
                // port does not take is dropped before it consumes a
                // receive (see `roce_header`).
                let data = len + if w.opcode == op::SEND_IMM { 4 } else { 0 };
                let net = match w.av.as_ref() {
                    Some(av) if crate::device::link() == crate::device::Link::Eth => {
                        match roce_header(av, data) {
                            Ok(Some(h)) => Some(h),
                            Ok(None) => return Ok(0),
                            Err(s) => return Err(local_err(s)),
                        }
                    }
                    Some(av) => grh_of(av, data).map(|bytes| Net {
                        bytes,
                        from: 0,
                        roce: None,
                    }),
                    None => None,
                };
                let r = match self.take_recv(e, &d) {
                    Some(r) => r,
                    None if q.ty == qp_type::RC => return self.rnr(q),
                    None => return Ok(0),
                };
                let grh = if q.ty == qp_type::UD { 40u32 } else { 0 };
                // Scatter: skip the GRH area for UD, then the payload.
                let mut targets = Vec::new();
                for s in &r.segs {
                    match translate(
                        e,
                        d.ctx,
                        d.pd,
                        s.lkey,
                        s.addr,
                        s.bytes(),
                        LOCAL_WRITE,
                        false,
                    ) {
                        Some(u) => targets.push((u, s.bytes())),
                        None if reliable => {
                            return Err(Fail::Err(
                                synd::REMOTE_OP,
                                Some(Box::new((d, r, synd::LOCAL_PROT))),
                            ))
                        }
                        None => {
                            self.resp_err(e, &d, &r, synd::LOCAL_PROT);
                            return Ok(0);
                        }
                    }
                }
                let cap: u64 = targets.iter().map(|t| u64::from(t.1)).sum();
                if cap < u64::from(len + grh) {
                    if reliable {
                        return Err(Fail::Err(
                            synd::REMOTE_INVAL_REQ,
                            Some(Box::new((d, r, synd::LOCAL_LENGTH))),
                        ));
                    }
                    self.resp_err(e, &d, &r, synd::LOCAL_LENGTH);
                    return Ok(0);
                }
                let message;
                let (mut skip, mut src) = match &net {
                    Some(n) => {
                        message = [&n.bytes[n.from..], &payload[..]].concat();
                        (n.from, &message[..])
                    }
                    None => (grh as usize, &payload[..]),
                };
                for (a, l) in targets {
                    let l = l as usize;
                    let s = skip.min(l);
                    skip -= s;
                    let n = (l - s).min(src.len());
                    write_user(a + s as u64, &src[..n]);
                    src = &src[n..];
                }
                let opc = if w.opcode == op::SEND {
                    cqe_op::RESP_SEND
                } else {
                    cqe_op::RESP_SEND_IMM
                };
                let mut c = Cqe::new(opc);
                c.byte_cnt(len + grh)
                    .rqpn(q.qpn)
                    .slid(crate::device::lid())
                    .srqn_uidx(resp_uidx(&d))
                    .sop_qpn(0, d.qpn)
                    .wqe_counter(r.counter);
                if w.opcode == op::SEND_IMM {
                    c.imm(w.imm);
                }
                if let Some(n) = &net {
                    c.grh();
                    if let Some(l3) = n.roce {
                        c.roce_l3(l3);
                    }
                }
                if w.fm_ce_se & prm::WQE_CTRL_SOLICITED != 0 {
                    c.solicited();
                }
                self.push(e, d.recv_cq, &c, w.fm_ce_se & prm::WQE_CTRL_SOLICITED != 0);
                Ok(len)
            }
            op::RDMA_READ => {
                let (va, rkey) = w.raddr.unwrap_or_default();
                let total: u64 = locals.iter().map(|l| u64::from(l.1)).sum();
                if d.access & REMOTE_READ == 0 {
                    return Err(nak(synd::REMOTE_ACCESS));
                }
                let Some(user) =
                    translate(e, d.ctx, d.pd, rkey, va, total as u32, REMOTE_READ, true)
                else {
                    return Err(nak(synd::REMOTE_ACCESS));
                };
                let data = read_user(user, total as usize);
                let mut src = &data[..];
                for (a, l) in locals {
                    write_user(a, &src[..l as usize]);
                    src = &src[l as usize..];
                }
                Ok(total as u32)
            }
            _ => {
                // Atomics.
                let (va, rkey) = w.raddr.unwrap_or_default();
                let (swap_add, compare) = w.atomic.unwrap_or_default();
                if locals.len() != 1 || locals[0].1 != 8 {
                    return Err(local_err(synd::LOCAL_LENGTH));
                }
                if d.access & REMOTE_ATOMIC == 0 {
                    return Err(nak(synd::REMOTE_ACCESS));
                }
                if va % 8 != 0 {
                    return Err(nak(synd::REMOTE_INVAL_REQ));
                }
                let Some(user) = translate(e, d.ctx, d.pd, rkey, va, 8, REMOTE_ATOMIC, true) else {
                    return Err(nak(synd::REMOTE_ACCESS));
                };
                if user % 8 != 0 {
                    return Err(nak(synd::REMOTE_INVAL_REQ));
                }
                // SAFETY: `user` is an 8-byte aligned address inside a live
                // MR with remote atomic access (checked above).
                let a = unsafe { &*(user as *const AtomicU64) };
                let old = if w.opcode == op::ATOMIC_CS {
                    match a.compare_exchange(compare, swap_add, Ordering::AcqRel, Ordering::Acquire)
                    {
                        Ok(v) | Err(v) => v,
                    }
                } else {
                    a.fetch_add(swap_add, Ordering::AcqRel)
                };
                write_user(locals[0].0, &old.to_ne_bytes());
                Ok(8)
            }
        }
    }

    /// Completes receive `r` of QP `d` in error and moves `d` to ERR.
    fn resp_err(&mut self, e: &mut Emu, d: &QpView, r: &Recv, s: u8) {
        let mut c = Cqe::new(cqe_op::RESP_ERR);
        c.sop_qpn(0, d.qpn)
            .wqe_counter(r.counter)
            .srqn_uidx(resp_uidx(d))
            .syndrome(s);
        self.push(e, d.recv_cq, &c, true);
        set_err(e, d.h);
    }

    /// No receive posted on an RC responder: retry later or give up.
    fn rnr(&mut self, q: &QpView) -> Result<u32, Fail> {
        let st = self.qp_hw(q);
        let left = match st.rnr {
            Some((_, n)) => n,
            None => q.rnr_retry,
        };
        if left == 0 {
            return Err(Fail::Err(synd::RNR_RETRY, None));
        }
        let next = if left == 7 { 7 } else { left - 1 };
        st.rnr = Some((Instant::now() + Duration::from_micros(500), next));
        Err(Fail::Stall)
    }

    /// Takes the next posted receive of QP `d` (its RQ or SRQ).
    fn take_recv(&mut self, e: &Emu, d: &QpView) -> Option<Recv> {
        if let Some(sh) = d.srq {
            let srq = e.srqs.get(&sh)?;
            let wq = srq.wq();
            let max_gs = srq.max_gs() as usize;
            let count = read_dbrec(srq.db_addr()) & 0xffff;
            let st = self.srqs.entry(sh).or_default();
            if st.consumed & 0xffff == count || wq.wqe_cnt == 0 {
                return None;
            }
            let idx = u32::from(st.head) & (wq.wqe_cnt - 1);
            let bytes = read_user(wq.buf + (u64::from(idx) << wq.wqe_shift), 1 << wq.wqe_shift);
            let next = size_of::<SrqNextSeg>();
            let segs = decode_recv(bytes.get(next..).unwrap_or_default(), max_gs);
            let used = (next
                + (segs.len() + usize::from(segs.len() < max_gs)) * size_of::<DataSeg>())
            .min(bytes.len());
            crate::record::wqe(crate::record::Kind::Srq, sh, idx, count, &bytes[..used]);
            st.head = seg::<SrqNextSeg>(&bytes, 0).map_or(0, |n| n.next_wqe_index.get());
            st.consumed = st.consumed.wrapping_add(1);
            return Some(Recv {
                segs,
                counter: idx as u16,
            });
        }
        if d.rq.wqe_cnt == 0 {
            return None;
        }
        let count = read_dbrec(d.db) & 0xffff;
        let st = self.qp_hw(d);
        if st.rq_cons & 0xffff == count {
            return None;
        }
        let idx = st.rq_cons & (d.rq.wqe_cnt - 1);
        let size = 1usize << d.rq.wqe_shift;
        let bytes = read_user(d.rq.buf + (u64::from(idx) << d.rq.wqe_shift), size);
        // With signatures, the WQE starts with a next segment.
        let skip = if d.sig { size_of::<SrqNextSeg>() } else { 0 };
        let dseg = size_of::<DataSeg>();
        let segs = decode_recv(bytes.get(skip..).unwrap_or_default(), (size - skip) / dseg);
        let counter = (st.rq_cons & 0xffff) as u16;
        let used = (skip + (segs.len() + 1) * dseg).min(bytes.len());
        crate::record::wqe(crate::record::Kind::Rq, d.h, idx, count, &bytes[..used]);
        st.rq_cons = st.rq_cons.wrapping_add(1);
        Some(Recv { segs, counter })
    }
}

/// The srqn_uidx field of a responder CQE for QP `d`.
fn resp_uidx(d: &QpView) -> u32 {
    if d.v1 {
        d.uidx
    } else {
        d.srqn
    }
}

/// The network header a RoCE datagram carries, by the type of the GID
/// entry it is sent from (the HCA's GID table records it: the kernel's
/// mlx5 `set_roce_addr` programs each entry with its RoCE version and, for
/// v2, its L3 type, IPv4 for an IPv4-mapped GID).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoceL3 {
    /// RoCE v1: an InfiniBand GRH (IPv6 layout, next header 0x1B).
    Grh,
    /// RoCE v2 over IPv6 (next header UDP).
    Ipv6,
    /// RoCE v2 over IPv4 (protocol UDP).
    Ipv4,
}

/// The network header a UD receive starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Net {
    /// The 40-byte GRH area.
    bytes: [u8; 40],
    /// Where the written part of it starts: 0, or 20 for an IPv4 header
    /// (the 20 bytes before it are left as they were: "garbled" in the
    /// kernel's words, `ib_get_rdma_header_version`).
    from: usize,
    /// On a RoCE port, which header it is (for the CQE).
    roce: Option<RoceL3>,
}

/// Bytes a UD packet carries after its network header for `data` bytes
/// of payload (immediate included): BTH, DETH, the payload padded to 4
/// bytes, ICRC.
fn transport_len(data: u32) -> u32 {
    (12 + 8 + 4u32).saturating_add(data.saturating_add(3) & !3)
}

/// An IPv6 header (also the IB GRH's layout): version 6, `tclass`, flow
/// label `fl`, `paylen` bytes after it, next header `nh`, `hop_limit`.
fn ipv6_header(tclass: u8, fl: u32, paylen: u32, nh: u8, hop_limit: u8) -> [u8; 40] {
    let mut g = [0u8; 40];
    let w0 = (6u32 << 28) | (u32::from(tclass) << 20) | (fl & 0xf_ffff);
    g[0..4].copy_from_slice(&w0.to_be_bytes());
    g[4..6].copy_from_slice(&(paylen.min(0xffff) as u16).to_be_bytes());
    g[6] = nh;
    g[7] = hop_limit;
    g
}

/// The 40-byte GRH a UD receiver on an InfiniBand port gets for address
/// vector `av` (if it carries a GRH), for a packet with `data` bytes after
/// the headers.
fn grh_of(av: &Av, data: u32) -> Option<[u8; 40]> {
    let fl = av.grh_gid_fl.get();
    if fl & (1 << 30) == 0 {
        return None;
    }
    let mut g = ipv6_header(av.tclass, fl, transport_len(data), 0x1b, av.hop_limit);
    let sgid = crate::device::gid((fl >> 20) & 0xff).unwrap_or_default();
    g[8..24].copy_from_slice(&sgid);
    g[24..40].copy_from_slice(&av.rgid);
    Some(g)
}

/// The RoCE port's handling of a UD datagram sent with address vector
/// `av` and `data` bytes after the headers (immediate included):
///
/// - `Err(syndrome)`: the source GID index names no valid entry of the
///   GID table, so the HCA cannot build the packet's network header: the
///   send completes in error (local QP operation error; an emulator
///   choice, the PRM is not public on this point).
/// - `Ok(None)`: the datagram goes out but this port does not take it:
///   its destination MAC is not the port's, or its destination address
///   is not one of the port's GIDs of the same RoCE version and address
///   family (the receiver's header validation: IBA vol 1 9.6.1.1 for the
///   GRH's DGID, applied to the IP destination on RoCE v2). On a real
///   network it would reach another host or none; here there is none.
/// - `Ok(Some(net))`: the header the receive buffer gets. RoCE packets
///   always carry a network header (libmlx5 `mlx5_create_ah` leaves the
///   address vector's GRH bit clear on Ethernet for that reason), built
///   from the address vector: traffic class, flow label, hop limit, the
///   source GID entry's address and type, the destination GID. RoCE v1:
///   an IB GRH (next header 0x1B); RoCE v2 over IPv6: an IPv6 header
///   with next header UDP (17), the payload length counting the 8-byte
///   UDP header; RoCE v2 over IPv4: a 20-byte IPv4 header (no options,
///   don't-fragment, TTL = hop limit, protocol UDP, a valid header
///   checksum) at offset 20 of the area, as the kernel's
///   `union rdma_network_hdr` and libibverbs' `ibv_init_ah_from_wc` read
///   it. The UDP source port the address vector carries (`rlid`) is not
///   part of what a receive buffer gets.
fn roce_header(av: &Av, data: u32) -> Result<Option<Net>, u8> {
    use crate::device::{self, GidKind};
    let fl = av.grh_gid_fl.get();
    let Some(sgid) = device::roce_gid((fl >> 20) & 0xff) else {
        return Err(synd::LOCAL_QP_OP);
    };
    let l3 = match sgid.kind {
        GidKind::RoceV2 if sgid.is_ipv4() => RoceL3::Ipv4,
        GidKind::RoceV2 => RoceL3::Ipv6,
        GidKind::RoceV1 | GidKind::Ib => RoceL3::Grh,
    };
    if av.rmac != device::PORT_MAC {
        return Ok(None);
    }
    let taken = (0..device::ROCE_GID_TBL_LEN)
        .filter_map(device::roce_gid)
        .filter(|e| e.kind == sgid.kind)
        .any(|e| match l3 {
            RoceL3::Ipv4 => e.is_ipv4() && e.gid[12..] == av.rgid[12..],
            RoceL3::Ipv6 => !e.is_ipv4() && e.gid == av.rgid,
            RoceL3::Grh => e.gid == av.rgid,
        });
    if !taken || (l3 == RoceL3::Ipv4 && !device::is_ipv4_mapped(&av.rgid)) {
        return Ok(None);
    }
    let transport = transport_len(data);
    let bytes = match l3 {
        RoceL3::Ipv4 => {
            let mut g = [0u8; 40];
            let h = &mut g[20..];
            let total = (20u32 + 8).saturating_add(transport).min(0xffff) as u16;
            h[0] = 0x45;
            h[1] = av.tclass;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
            h[8] = av.hop_limit;
            h[9] = 17;
            h[12..16].copy_from_slice(&sgid.gid[12..]);
            h[16..20].copy_from_slice(&av.rgid[12..]);
            let sum = ipv4_checksum(h);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
            g
        }
        RoceL3::Ipv6 | RoceL3::Grh => {
            let (paylen, nh) = if l3 == RoceL3::Ipv6 {
                (transport.saturating_add(8), 17)
            } else {
                (transport, 0x1b)
            };
            let mut g = ipv6_header(av.tclass, fl, paylen, nh, av.hop_limit);
            g[8..24].copy_from_slice(&sgid.gid);
            g[24..40].copy_from_slice(&av.rgid);
            g
        }
    };
    Ok(Some(Net {
        bytes,
        from: if l3 == RoceL3::Ipv4 { 20 } else { 0 },
        roce: Some(l3),
    }))
}

/// The IPv4 header checksum of the 20-byte header `h` (its checksum
/// field taken as zero): the ones' complement of the ones' complement sum
/// of its 16-bit words (RFC 791).
fn ipv4_checksum(h: &[u8]) -> u16 {
    let mut sum: u32 = h
        .chunks_exact(2)
        .enumerate()
        .filter(|(i, _)| *i != 5)
        .map(|(_, w)| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Moves QP `h` to ERR on the HCA's account.
fn set_err(e: &mut Emu, h: u32) {
    if let Some(q) = e.qps.get_mut(&h) {
        q.set_state(qp_state::ERR);
    }
}

/// Looks a key up in context `ctx` and PD `pd` and translates
/// `[va, va + len)` to a user address, if the MR grants `need`.
#[allow(clippy::too_many_arguments)]
fn translate(
    e: &Emu,
    ctx: u64,
    pd: u32,
    key: u32,
    va: u64,
    len: u32,
    need: u32,
    remote: bool,
) -> Option<u64> {
    let mr = e
        .mrs
        .values()
        .find(|m| m.ctx == ctx && (if remote { m.rkey } else { m.lkey }) == key)?;
    if mr.pd() != pd || mr.access() & need != need {
        return None;
    }
    mr.translate(va, u64::from(len))
}

/// Moves responder QP `h` to ERR after a class C error (see [`Fail::Nak`])
/// and raises the matching affiliated async event for it.
fn responder_fatal(e: &mut Emu, h: u32, syndrome: u8) {
    let Some(q) = e.qps.get(&h) else { return };
    if q.state == qp_state::ERR || q.state == qp_state::RESET {
        return;
    }
    let (ctx, user_handle) = (q.ctx, q.user_handle());
    set_err(e, h);
    let kind = if syndrome == synd::REMOTE_ACCESS {
        event::QP_ACCESS_ERR
    } else {
        event::QP_REQ_ERR
    };
    async_event(e, ctx, user_handle, kind);
}

/// Writes an async event (`struct ib_uverbs_async_event_desc`) for the
/// object with `user_handle` to the async event fd of context `ctx`, as
/// the kernel's uverbs async event file queues it (nothing if the context
/// or its channel is gone). The event counts as reported when the
/// application reads it ([`event_read`]).
fn async_event(e: &Emu, ctx: u64, user_handle: u64, event_type: u32) {
    let Some(ch) = e
        .context(ctx)
        .and_then(|c| c.ucontext())
        .and_then(|u| e.channel(u.async_channel()))
    else {
        return;
    };
    let desc = AsyncEventDesc {
        element: user_handle,
        event_type,
        reserved: 0,
    };
    crate::log::line(format_args!(
        "async event {event_type} for {user_handle:#x}"
    ));
    real::write_all(ch.peer_fd(), desc.as_bytes());
}

/// Writes a completion event for CQ `h` to its channel, if it has one.
fn notify(e: &mut Emu, h: u32) {
    let Some(cq) = e.cqs.get(&h) else { return };
    let Some(fd) = cq.channel().and_then(|c| e.channel(c)).map(|c| c.peer_fd()) else {
        return;
    };
    let desc = CompEventDesc {
        cq_handle: cq.user_handle(),
    };
    real::write_all(fd, desc.as_bytes());
}

/// The application read `bytes` (one event record) from its end `fd` of
/// an event channel: counts the event as reported for its object, as the
/// kernel does when an event is read. False if the object is gone (its
/// event is to be dropped, as the kernel drops an object's queued events
/// when it is destroyed); true for any other read (an event of no object,
/// a short read, an fd no longer known).
pub fn event_read(fd: libc::c_int, bytes: &[u8]) -> bool {
    let mut e = crate::emu::lock();
    let Some(ch) = e.channels.get(&fd) else {
        return true;
    };
    let ctx = ch.ctx;
    // Some(whether the object is still there) for an event of an object.
    let counted = match ch.kind() {
        EventKind::Comp => CompEventDesc::read_from_prefix(bytes).ok().map(|(d, _)| {
            let cq = e.cqs.values_mut().find(|c| c.user_handle() == d.cq_handle);
            cq.map(|c| c.note_comp_event()).is_some()
        }),
        EventKind::Async => AsyncEventDesc::read_from_prefix(bytes)
            .ok()
            .and_then(|(d, _)| match d.event_type {
                event::CQ_ERR => Some(
                    e.cqs
                        .values_mut()
                        .find(|c| c.ctx == ctx && c.user_handle() == d.element)
                        .map(|c| c.note_async_event())
                        .is_some(),
                ),
                event::QP_REQ_ERR | event::QP_ACCESS_ERR => Some(
                    e.qps
                        .values_mut()
                        .find(|q| q.ctx == ctx && q.user_handle() == d.element)
                        .map(|q| q.note_async_event())
                        .is_some(),
                ),
                _ => None,
            }),
    };
    counted.unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_an_rc_send_wqe() {
        // The worked example of the notes (section 2.8).
        let b = [
            0x00, 0x00, 0x05, 0x0a, 0x00, 0x01, 0x23, 0x02, 0, 0, 0, 0x08, 0, 0, 0, 0, 0x00, 0x00,
            0x00, 0x40, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x00,
        ];
        let w = decode_send(&b, qp_type::RC).unwrap();
        assert_eq!(
            (w.opcode, w.pi, w.qpn, w.ds, w.fm_ce_se),
            (op::SEND, 5, 0x123, 2, 8)
        );
        assert_eq!(
            w.data,
            Data::Segs(vec![Seg {
                len: 64,
                lkey: 0x1234,
                addr: 0x7f00_0000_1000
            }])
        );
    }

    #[test]
    fn decodes_inline_and_atomic() {
        let mut b = vec![0u8; 64];
        b[3] = op::ATOMIC_CS;
        b[4..8].copy_from_slice(&((7u32 << 8) | 4).to_be_bytes());
        b[16..24].copy_from_slice(&0x1000u64.to_be_bytes());
        b[24..28].copy_from_slice(&0xabcdu32.to_be_bytes());
        b[32..40].copy_from_slice(&5u64.to_be_bytes());
        b[40..48].copy_from_slice(&6u64.to_be_bytes());
        b[48..52].copy_from_slice(&8u32.to_be_bytes());
        let w = decode_send(&b, qp_type::RC).unwrap();
        assert_eq!(w.raddr, Some((0x1000, 0xabcd)));
        assert_eq!(w.atomic, Some((5, 6)));
        let mut i = vec![0u8; 32];
        i[3] = op::SEND;
        i[4..8].copy_from_slice(&2u32.to_be_bytes());
        i[16..20].copy_from_slice(&(0x8000_0003u32).to_be_bytes());
        i[20..23].copy_from_slice(b"abc");
        let w = decode_send(&i, qp_type::RC).unwrap();
        assert_eq!(w.data, Data::Inline(b"abc".to_vec()));
        assert!(decode_send(&i[..16], qp_type::RC).is_none());
    }

    #[test]
    fn receive_lists_stop_at_the_terminator() {
        let mut b = vec![0u8; 48];
        b[0..4].copy_from_slice(&16u32.to_be_bytes());
        b[4..8].copy_from_slice(&0x205u32.to_be_bytes());
        b[20..24].copy_from_slice(&0x100u32.to_be_bytes());
        let s = decode_recv(&b, 3);
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].len, s[0].lkey), (16, 0x205));
        assert_eq!(decode_recv(&b, 1).len(), 1);
    }

    #[test]
    fn grh_only_for_global_address_vectors() {
        let mut av = [0u8; 48];
        let parse = |b: &[u8; 48]| Av::read_from_bytes(b).unwrap();
        assert!(grh_of(&parse(&av), 10).is_none());
        av[26] = 3;
        av[27] = 64;
        av[28..32].copy_from_slice(&((1u32 << 30) | 0x12345).to_be_bytes());
        av[32..48].copy_from_slice(&[9; 16]);
        let g = grh_of(&parse(&av), 10).unwrap();
        assert_eq!(
            &g[0..4],
            &((6u32 << 28) | (3 << 20) | 0x12345).to_be_bytes()
        );
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 12 + 8 + 12 + 4);
        assert_eq!((g[6], g[7]), (0x1b, 64));
        assert_eq!(&g[8..24], &crate::device::gid(0).unwrap());
        assert_eq!(&g[24..40], &[9; 16]);
    }

    /// A RoCE address vector from GID entry `sgid` to `dgid`.
    fn roce_av(sgid: u32, dgid: [u8; 16], rmac: [u8; 6]) -> Av {
        let mut av = Av::read_from_bytes(&[0u8; 48]).unwrap();
        av.tclass = 0x20;
        av.hop_limit = 9;
        av.grh_gid_fl = U32::new((sgid << 20) | 0x12345);
        av.rgid = dgid;
        av.rmac = rmac;
        av
    }

    #[test]
    fn roce_headers_by_gid_type() {
        use crate::device::{roce_gid, PORT_MAC};
        let g = |i| roce_gid(i).unwrap().gid;
        // RoCE v2 over IPv4: the header at 20, checksum valid.
        let n = roce_header(&roce_av(3, g(3), PORT_MAC), 100)
            .unwrap()
            .unwrap();
        assert_eq!((n.from, n.roce), (20, Some(RoceL3::Ipv4)));
        let h = &n.bytes[20..];
        assert_eq!(&h[..4], &[0x45, 0x20, 0, 20 + 8 + 12 + 8 + 100 + 4]);
        assert_eq!((h[6], h[8], h[9]), (0x40, 9, 17));
        assert_eq!(&h[12..16], &[192, 0, 2, 1]);
        assert_eq!(&h[16..20], &[192, 0, 2, 1]);
        let folded = h
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        assert_eq!((folded & 0xffff) + (folded >> 16), 0xffff, "checksum");
        // RoCE v2 over IPv6: UDP follows; v1: an IB GRH.
        let n = roce_header(&roce_av(5, g(5), PORT_MAC), 5)
            .unwrap()
            .unwrap();
        assert_eq!((n.from, n.roce), (0, Some(RoceL3::Ipv6)));
        assert_eq!(
            &n.bytes[..4],
            &((6u32 << 28) | (0x20 << 20) | 0x12345).to_be_bytes()
        );
        assert_eq!(
            u16::from_be_bytes([n.bytes[4], n.bytes[5]]),
            8 + 12 + 8 + 8 + 4
        );
        assert_eq!((n.bytes[6], n.bytes[7]), (17, 9));
        assert_eq!((&n.bytes[8..24], &n.bytes[24..40]), (&g(5)[..], &g(5)[..]));
        let n = roce_header(&roce_av(0, g(0), PORT_MAC), 5)
            .unwrap()
            .unwrap();
        assert_eq!((n.roce, n.bytes[6]), (Some(RoceL3::Grh), 0x1b));
        assert_eq!(u16::from_be_bytes([n.bytes[4], n.bytes[5]]), 12 + 8 + 8 + 4);
    }

    #[test]
    fn roce_datagrams_the_port_does_not_take() {
        use crate::device::{roce_gid, PORT_MAC};
        let g = |i| roce_gid(i).unwrap().gid;
        let mut other_mac = PORT_MAC;
        other_mac[0] ^= 0x80;
        assert_eq!(roce_header(&roce_av(3, g(3), other_mac), 1), Ok(None));
        let mut stranger = g(3);
        stranger[15] = 7;
        assert_eq!(roce_header(&roce_av(3, stranger, PORT_MAC), 1), Ok(None));
        // An IPv4 source towards an IPv6 destination, and the reverse.
        assert_eq!(roce_header(&roce_av(3, g(5), PORT_MAC), 1), Ok(None));
        assert_eq!(roce_header(&roce_av(5, g(3), PORT_MAC), 1), Ok(None));
        // An empty source entry: the send fails.
        assert_eq!(
            roce_header(&roce_av(6, g(3), PORT_MAC), 1),
            Err(synd::LOCAL_QP_OP)
        );
    }

    #[test]
    fn cqe_fields_land_where_libmlx5_reads_them() {
        let mut c = Cqe::new(cqe_op::REQ_ERR);
        c.sop_qpn(op::SEND, 0x123)
            .wqe_counter(0x0102)
            .syndrome(synd::REMOTE_ACCESS)
            .byte_cnt(9)
            .srqn_uidx(3);
        // Offsets spelled out: an independent check of the shared layout.
        let c = c.0.as_bytes();
        assert_eq!(c[63], 0xd0);
        assert_eq!(&c[56..62], &[0x0a, 0x00, 0x01, 0x23, 0x01, 0x02]);
        assert_eq!(c[55], 0x13);
        assert_eq!(&c[44..48], &[0, 0, 0, 9]);
        assert_eq!(&c[32..36], &[0, 0, 0, 3]);
    }
}
