//! mlx5 queue pairs: queue geometry, CREATE_QP with mlx5's driver data,
//! send WQE building and doorbells (BlueFlame for small single WQEs), and
//! receive WQEs.
//!
//! One page-aligned buffer holds both rings, the receive ring first; an
//! 8-byte doorbell record holds the receive counter (word 0) and the send
//! counter (word 1). A send WQE is a control segment followed by the
//! segments its opcode and transport need, built in 64-byte basic blocks
//! (BBs) that wrap at the end of the ring at segment granularity; a
//! receive WQE is a list of 16-byte scatter entries. Posting writes the
//! WQEs, publishes the counter in the doorbell record (release), then, for
//! sends, writes the UAR doorbell register (or a BlueFlame copy of a lone
//! small WQE). The layouts and every value follow libmlx5 byte for byte
//! (see `tests/mlx5-emu/notes/objects-and-datapath.md`).

mod geom;
#[cfg(test)]
mod tests;

use std::io::IoSlice;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use rverbs_abi::cmd::{nr, write_cmd};
use rverbs_abi::mlx5;
use rverbs_abi::mlx5::prm::{self, AtomicSeg, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg};
use rverbs_abi::qp::{qp_type, CreateQp, CreateQpResp, DestroyQp, DestroyQpResp};
use rverbs_abi::wr::{send_flags, Sge};
use rverbs_abi::Errno;
use rverbs_provider::check::{check_recv_sges, SendChecks, MAX_MSG};
use rverbs_provider::wr::{Payload, RecvWr, SendFlags, SendWr, WrOpcode};
use zerocopy::network_endian::{U16, U32, U64};
use zerocopy::{FromZeros, IntoBytes};

use crate::buf::{Buf, DbRec};
use crate::cq::CqMemory;
use crate::srq::Srq;
use crate::uctx::Uctx;
use crate::wq::{QpEntry, RqShared, SqShared, SrqShared};
use crate::{mmio, wqe_op, PostError};

use geom::SEND_WQE_BB;

/// Writes the control segment of the WQE at producer counter `cur_post`
/// (its low 16 bits are the WQE index) at `p`: WQE opcode `opcode`, QP
/// `qpn`, `ds` 16-byte units, `fm_ce_se` flags and immediate `imm`; no
/// signature. A macro, so that each value is computed right before its
/// store (see `put_seg!`); the same safety requirements.
macro_rules! put_ctrl {
    ($p:expr, $cur_post:expr, $opcode:expr, $qpn:expr, $ds:expr, $fm_ce_se:expr, $imm:expr) => {
        put_seg!(
            $p,
            CtrlSeg {
                opmod_idx_opcode: U32::new(($cur_post & 0xffff) << 8 | $opcode as u32),
                qpn_ds: U32::new($qpn << 8 | $ds),
                signature: 0,
                dci_stream_channel_id: U16::ZERO,
                fm_ce_se: $fm_ce_se,
                imm: U32::new($imm),
            }
        )
    };
}

/// Writes a remote-address segment at `p` (as `put_ctrl!`).
macro_rules! put_raddr {
    ($p:expr, $raddr:expr, $rkey:expr) => {
        put_seg!(
            $p,
            RaddrSeg {
                raddr: U64::new($raddr),
                rkey: U32::new($rkey),
                reserved: U32::ZERO,
            }
        )
    };
}

/// The unit of WQE sizes (`ds`): 16 bytes, the size of the control,
/// remote-address, atomic and data segments.
const SEG: usize = size_of::<DataSeg>();

/// The user index CREATE_QP carries with CQE version 0 ("none").
const UIDX_NONE: u32 = 0xFF_FFFF;

/// What CREATE_QP returned and the queues built for it. The caller must
/// destroy `resp.qp_handle` if it cannot use them.
#[derive(Debug)]
pub struct Created {
    /// Core response, with the capacities rewritten to what the queues
    /// really hold (as libmlx5 reports them): `max_send_wr`,
    /// `max_inline_data`, `max_recv_wr`, `max_recv_sge`.
    pub resp: CreateQpResp,
    /// The send queue.
    pub sq: SendQueue,
    /// The receive queue; `None` with an SRQ or `max_recv_wr == 0`.
    pub rq: Option<RecvQueue>,
}

/// Computes the queue geometry for `cmd` (rewriting its capacities the
/// way the device needs them), allocates the buffer and doorbell record,
/// issues CREATE_QP with the driver data and registers the QP with the
/// context's table, through which its CQs (whichever they are: the core
/// command names them) resolve its CQEs.
///
/// If anything fails after the kernel created the QP, the QP is destroyed
/// here before the error is returned: on `Err` there is nothing to clean.
/// `send_cq` and `recv_cq` are the CQs the command names (by handle): on
/// RESET and on destruction the QP removes its CQEs not yet polled from
/// them (see [`SendQueue::set_state`]).
pub fn create(
    fd: BorrowedFd<'_>,
    uctx: &Arc<Uctx>,
    cmd: &CreateQp,
    srq: Option<&Srq>,
    send_cq: &CqMemory,
    recv_cq: &CqMemory,
) -> Result<Created, Errno> {
    if (cmd.is_srq != 0) != srq.is_some() {
        return Err(Errno::EINVAL);
    }
    let req = geom::Request {
        qp_type: cmd.qp_type,
        max_send_wr: cmd.max_send_wr,
        max_send_sge: cmd.max_send_sge,
        max_inline_data: cmd.max_inline_data,
        max_recv_wr: cmd.max_recv_wr,
        max_recv_sge: cmd.max_recv_sge,
        srq: srq.is_some(),
    };
    let g = geom::geometry(&uctx.limits(), &req)?;
    // At least one page, so a QP with neither ring still hands the kernel
    // a valid buffer.
    let buf = Buf::new(g.total())?;
    let db = uctx.alloc_dbrec()?;
    db.word(0).store(0, Ordering::Relaxed);
    db.word(1).store(0, Ordering::Relaxed);
    // The table key. The kernel is told it only with CQE version 1; with
    // version 0 it wants the invalid index and CQEs name the QP by number.
    let uidx = uctx.alloc_uidx()?;
    let drv_uidx = if uctx.cqe_version() == 1 {
        uidx
    } else {
        UIDX_NONE
    };
    let mut reg = Registration {
        uctx: Arc::clone(uctx),
        uidx,
        cleaner: None,
    };

    let mut core = *cmd;
    if let Some(inline) = g.max_inline_data {
        core.max_inline_data = inline;
    }
    let drv = mlx5::CreateQp {
        buf_addr: buf.addr(),
        db_addr: db.addr(),
        sq_wqe_count: g.sq_wqe_cnt,
        rq_wqe_count: g.rq_wqe_cnt,
        rq_wqe_shift: g.rq_wqe_shift,
        // No scatter-to-CQE (our CQ does not parse it), no signatures.
        flags: 0,
        uidx: drv_uidx,
        bfreg_index: 0,
        sq_buf_addr: 0,
        ece_options: 0,
        dci_log_num_concurent: 0,
        dci_log_num_errored: 0,
        reserved: 0,
    };
    let mut drv_resp = mlx5::CreateQpResp::new_zeroed();
    // On error `reg` drops here and frees the user index.
    // SAFETY: the user addresses are the driver data's `buf_addr` and
    // `db_addr` (`sq_buf_addr` is 0): the QP's work queue buffer and
    // doorbell record, mappings of our own that no Rust reference covers
    // (accessed through raw pointers only), owned by the returned queues'
    // shared `mem`, which the caller keeps until DESTROY_QP; the kernel
    // pins their pages for the QP's life. The core command carries only
    // its response pointer, which write_cmd supplies.
    let mut resp: CreateQpResp = unsafe {
        write_cmd(
            fd,
            nr::CREATE_QP,
            &core,
            drv.as_bytes(),
            drv_resp.as_mut_bytes(),
        )?
    };
    let destroy = |e: Errno| {
        destroy_qp(fd, resp.qp_handle);
        e
    };
    let bf = uctx.bfreg(drv_resp.bfreg_index).map_err(destroy)?;

    let sq_shared = Arc::new(SqShared::new(g.sq_wqe_cnt));
    let rq_shared = Arc::new(RqShared::new(g.rq_wqe_cnt));
    // An absent ring has empty bookkeeping, which completes nothing.
    let entry = QpEntry::new(
        resp.qpn,
        Arc::clone(&sq_shared),
        Arc::clone(&rq_shared),
        srq.map(|s| s.shared()),
    );
    uctx.register_qp(uidx, Arc::new(entry));
    let mut cqs = vec![send_cq.clone()];
    if !recv_cq.same(send_cq) {
        cqs.push(recv_cq.clone());
    }
    let cleaner = Arc::new(Cleaner {
        uidx,
        qpn: resp.qpn,
        cqs,
        srq: srq.map(|s| s.shared()),
    });
    reg.cleaner = Some(Arc::clone(&cleaner));

    let mem = Arc::new(Backing::Device { buf, db });
    let base = mem.base();
    let rq = (g.rq_wqe_cnt != 0).then(|| {
        RecvQueue::new(
            Arc::clone(&mem),
            base,
            mem.db_word(0),
            &g,
            Arc::clone(&rq_shared),
            Some(Arc::clone(&cleaner)),
        )
    });
    // SAFETY: the SQ starts `sq_offset` bytes into the buffer, which is
    // at least `total()` bytes long.
    let sq_start = unsafe { base.add(g.sq_offset()) };
    let sq = SendQueue::new(SqInit {
        mem: Arc::clone(&mem),
        reg: Some(reg),
        cleaner: Some(cleaner),
        start: sq_start,
        db: mem.db_word(1),
        geometry: g,
        shared: sq_shared,
        qpn: resp.qpn,
        qp_type: cmd.qp_type,
        sig_all: cmd.sq_sig_all != 0,
        bf: BlueFlame {
            reg: bf.reg,
            buf_size: bf.buf_size,
            dedicated: bf.dedicated,
        },
    });

    resp.max_send_wr = g.sq_max_post;
    if let Some(inline) = g.max_inline_data {
        resp.max_inline_data = inline;
    }
    resp.max_recv_wr = g.rq_wqe_cnt;
    resp.max_recv_sge = g.rq_max_gs;
    Ok(Created { resp, sq, rq })
}

/// Destroys the kernel QP `handle` after a failure that follows its
/// creation (best effort: the error being reported is the first one).
fn destroy_qp(fd: BorrowedFd<'_>, handle: u32) {
    let cmd = DestroyQp {
        response: 0,
        qp_handle: handle,
        reserved: 0,
    };
    // SAFETY: DESTROY_QP carries no user address but its response pointer,
    // which write_cmd supplies.
    let _ = unsafe { write_cmd::<_, DestroyQpResp>(fd, nr::DESTROY_QP, &cmd, &[], &mut []) };
}

/// The QP's slot in the context's user-index table; dropping it removes
/// the QP's CQEs still in its CQs (returning their SRQ WQEs) and frees
/// the slot (after the kernel QP is gone: the verbs layer destroys it
/// before the queues drop).
#[derive(Debug)]
struct Registration {
    uctx: Arc<Uctx>,
    uidx: u32,
    /// Set once the kernel QP exists.
    cleaner: Option<Arc<Cleaner>>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(c) = &self.cleaner {
            c.clean();
        }
        self.uctx.unregister_qp(self.uidx);
    }
}

/// What removes a QP's CQEs from its CQs, as libmlx5 does on RESET and on
/// destruction: CQEs the device wrote for the QP's previous life must not
/// complete the work of its next one (a flushed receive reported for the
/// receive that got the data, its ring retired past what is posted), and
/// the SRQ WQEs they consumed must go back to the SRQ.
#[derive(Debug)]
pub(crate) struct Cleaner {
    /// The QP's user index (how CQE version 1 names it).
    uidx: u32,
    /// The QP number (how CQE version 0 names it).
    qpn: u32,
    /// Its send CQ, and its receive CQ if that is another.
    cqs: Vec<CqMemory>,
    /// The SRQ it receives from.
    srq: Option<Arc<SrqShared>>,
}

impl Cleaner {
    /// Removes the QP's CQEs not yet polled from its CQs. Only once the
    /// device writes none for it any more (in RESET, or destroyed).
    fn clean(&self) {
        for cq in &self.cqs {
            cq.clean(self.uidx, self.qpn, self.srq.as_deref());
        }
    }
}

/// The memory the device reads and writes for one QP, shared by its two
/// queues and kept alive until both have dropped.
#[derive(Debug)]
enum Backing {
    /// The buffer and doorbell record handed to the kernel.
    Device {
        /// Receive ring, then send ring.
        buf: Buf,
        /// Word 0: receive counter; word 1: send counter.
        db: DbRec,
    },
    /// Plain memory standing in for the device's, for unit tests.
    #[cfg(test)]
    Test(tests::TestMem),
}

impl Backing {
    /// Start of the buffer.
    fn base(&self) -> *mut u8 {
        match self {
            Backing::Device { buf, .. } => buf.as_ptr(),
            #[cfg(test)]
            Backing::Test(m) => m.ring.as_ptr(),
        }
    }

    /// Doorbell word `i` (0 = receive, 1 = send).
    fn db_word(&self, i: usize) -> *const AtomicU32 {
        match self {
            Backing::Device { db, .. } => db.word(i),
            #[cfg(test)]
            Backing::Test(m) => &m.db[i],
        }
    }
}

/// Where a send queue rings: its doorbell/BlueFlame register.
#[derive(Debug, Clone, Copy)]
struct BlueFlame {
    /// The register (in a mapped UAR page).
    reg: *mut u8,
    /// Bytes of each BlueFlame half; 0 = never BlueFlame.
    buf_size: u32,
    /// Whether only this QP uses the register (BlueFlame and the
    /// half toggle need it: shared registers take single 8-byte
    /// doorbells at offset 0).
    dedicated: bool,
}

/// Everything [`SendQueue::new`] needs.
struct SqInit {
    mem: Arc<Backing>,
    reg: Option<Registration>,
    cleaner: Option<Arc<Cleaner>>,
    start: *mut u8,
    db: *const AtomicU32,
    geometry: geom::Geometry,
    shared: Arc<SqShared>,
    qpn: u32,
    qp_type: u8,
    sig_all: bool,
    bf: BlueFlame,
}

/// A QP's send queue.
#[derive(Debug)]
pub struct SendQueue {
    /// First BB of the ring.
    start: *mut u8,
    /// One past the last BB: segments starting here wrap to `start`.
    qend: *mut u8,
    /// Ring size in BBs (a power of two; 0 = no send queue).
    wqe_cnt: u32,
    /// The send word of the doorbell record (BE counter of BBs).
    db: *const AtomicU32,
    /// Producer counter of BBs (`sq.cur_post`).
    cur_post: u32,
    /// Producer counter of work requests (`sq.head`).
    head: u32,
    /// Last seen consumer counter of work requests (the CQ's `tail`).
    tail: u32,
    /// Work requests the ring holds.
    max_post: u32,
    /// The limits every request is checked against (gather entries and
    /// inline bytes per send, the QP type, the UD message bound).
    checks: SendChecks,
    /// QP number (in every control segment).
    qpn: u32,
    /// `CQ_UPDATE` when the QP signals every send.
    sig_bits: u8,
    /// Whether sends may be posted (RTS or later).
    enabled: bool,
    /// The doorbell register.
    bf: BlueFlame,
    /// Which BlueFlame half the next doorbell uses (dedicated registers).
    bf_offset: u32,
    /// `shared.wrid`'s first entry (`wqe_cnt` of them).
    wrid: *const AtomicU64,
    /// `shared.wqe_head`'s first entry (`wqe_cnt` of them).
    wqe_head: *const AtomicU32,
    /// `wr_id`s and retirement, shared with the CQ.
    shared: Arc<SqShared>,
    /// Removes the QP's CQEs from its CQs on RESET (`None` in unit tests).
    cleaner: Option<Arc<Cleaner>>,
    /// Cleans the CQs and frees the user index on drop (before `mem`).
    _reg: Option<Registration>,
    /// Keeps the ring and doorbell record alive.
    _mem: Arc<Backing>,
}

// SAFETY: the raw pointers point into `_mem` (buffer and doorbell record,
// owned through the Arc and freed only when both queues are gone) and into
// a UAR page the context maps for its whole life (`_reg` holds the
// context). Everything that writes through them takes `&mut self`; the
// `&self` methods only load atomics.
unsafe impl Send for SendQueue {}
// SAFETY: as above: shared references only read atomics.
unsafe impl Sync for SendQueue {}

/// The QP states the queues care about (the caller tells them after each
/// successful MODIFY_QP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// RESET: nothing may be posted; counters start over.
    Reset,
    /// INIT or RTR: receives may be posted.
    Init,
    /// RTS, SQD, SQE or ERR: sends may be posted too (in ERR they flush).
    Rts,
}

/// A send request's data part, checked.
#[derive(Clone, Copy)]
enum Data<'a> {
    /// Data segments for these SGEs (zero-length ones are skipped); for
    /// atomics each segment's byte count is 8.
    Sges(&'a [Sge]),
    /// Inline payload of this many bytes.
    Inline(&'a [IoSlice<'a>], u32),
}

impl SendQueue {
    fn new(init: SqInit) -> Self {
        let g = init.geometry;
        // SAFETY: the ring is `sq_bytes` long from `start` (the caller
        // allocated it so); this is its one-past-the-end pointer.
        let qend = unsafe { init.start.add(g.sq_bytes()) };
        SendQueue {
            start: init.start,
            qend,
            wqe_cnt: g.sq_wqe_cnt,
            db: init.db,
            cur_post: 0,
            head: 0,
            tail: 0,
            max_post: g.sq_max_post,
            checks: SendChecks::new(init.qp_type, g.sq_max_gs, g.max_inline_data.unwrap_or(0)),
            qpn: init.qpn,
            sig_bits: if init.sig_all {
                prm::WQE_CTRL_CQ_UPDATE
            } else {
                0
            },
            enabled: false,
            bf: init.bf,
            bf_offset: 0,
            wrid: init.shared.wrid.as_ptr(),
            wqe_head: init.shared.wqe_head.as_ptr(),
            shared: init.shared,
            cleaner: init.cleaner,
            _reg: init.reg,
            _mem: init.mem,
        }
    }

    /// Posts the chain `wrs`: WQEs built in the ring, one doorbell for the
    /// chain. On error the WRs before the failing index are posted.
    #[inline]
    pub fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<(), (usize, PostError)> {
        if !self.enabled {
            return Err((0, PostError::InvalidState));
        }
        let mut nreq: u32 = 0;
        // The last WQE built: its control segment and size in 16-byte
        // units, for the doorbell.
        let mut last: (*const u8, u32) = (std::ptr::null(), 0);
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if self.full(nreq) {
                result = Err((i, PostError::QueueFull));
                break;
            }
            if let Some(l) = self.try_fast(wr, nreq) {
                last = l;
                nreq += 1;
                continue;
            }
            let data = match self.check(wr) {
                Ok(d) => d,
                Err(e) => {
                    result = Err((i, e));
                    break;
                }
            };
            last = self.write_wqe(wr, data, nreq);
            nreq += 1;
        }
        if nreq != 0 {
            self.ring(nreq, last.0, last.1);
        }
        result
    }

    /// Whether posting one more request (after `nreq` of this chain)
    /// would overflow the ring: `max_post` work requests may be
    /// outstanding. The consumer counter is re-read only when the cached
    /// one says full.
    #[inline(always)]
    fn full(&mut self, nreq: u32) -> bool {
        let used = |tail: u32| self.head.wrapping_sub(tail).wrapping_add(nreq);
        if used(self.tail) < self.max_post {
            return false;
        }
        // Acquire: the CQ retired the WQEs before it published `tail`.
        self.tail = self.shared.tail.load(Ordering::Acquire);
        used(self.tail) >= self.max_post
    }

    /// The common request in one straight line: a simple opcode (see
    /// [`simple_send_ops`]) with one SGE and no UD destination, which passes
    /// every check and fits one basic block (control, at most a remote
    /// address and one data segment: no wrap inside it). `None`, with
    /// nothing written, for anything else: [`SendQueue::check`] and
    /// [`SendQueue::write_wqe`] take it. Same bytes as `write_wqe`.
    #[inline(always)]
    fn try_fast(&mut self, wr: &SendWr<'_>, nreq: u32) -> Option<(*const u8, u32)> {
        let op = wr.opcode() as u32;
        let Payload::Sge([sge]) = wr.payload() else {
            return None;
        };
        if !self.checks.is_simple(wr)
            || self.checks.max_sge() == 0
            || u64::from(sge.length) > MAX_MSG
        {
            return None;
        }
        // Simple opcodes are 0..=4 (`simple_send_ops`).
        let (mop, raddr) = FAST_OPS[op as usize];
        let idx = self.cur_post & (self.wqe_cnt - 1);
        let imm = if op == WrOpcode::RdmaWriteWithImm as u32 || op == WrOpcode::SendWithImm as u32 {
            wr.imm_data()
        } else {
            0
        };
        let flags = self.sig_bits | FAST_FLAGS[(wr.send_flags().bits() & 7) as usize];
        let mut ds = 1;
        // SAFETY: `idx < wqe_cnt`, so the BB is inside the ring, free
        // (`full` said so) and unread by the device until the doorbell
        // record covers it; the at most 48 bytes of segments after the
        // 16-byte control segment stay inside this one 64-byte BB, each
        // at a 16-byte multiple of the page-aligned ring (aligned for
        // its type).
        let ctrl = unsafe {
            let ctrl = self.start.add(idx as usize * SEND_WQE_BB as usize);
            let mut seg = ctrl.add(size_of::<CtrlSeg>());
            if raddr {
                put_raddr!(seg, wr.remote_addr(), wr.rkey());
                seg = seg.add(size_of::<RaddrSeg>());
                ds = 2;
            }
            if sge.length != 0 {
                put_seg!(
                    seg,
                    DataSeg {
                        byte_count: U32::new(sge.length),
                        lkey: U32::new(sge.lkey),
                        addr: U64::new(sge.addr),
                    }
                );
                ds += 1;
            }
            put_ctrl!(ctrl, self.cur_post, mop, self.qpn, ds, flags, imm);
            ctrl
        };
        // SAFETY: `idx < wqe_cnt`, the length of both arrays, which
        // `shared` keeps alive.
        let (wrid, head) = unsafe {
            (
                &*self.wrid.add(idx as usize),
                &*self.wqe_head.add(idx as usize),
            )
        };
        wrid.store(wr.wr_id(), Ordering::Relaxed);
        head.store(self.head.wrapping_add(nreq), Ordering::Relaxed);
        self.cur_post = self.cur_post.wrapping_add(1);
        Some((ctrl, ds))
    }

    /// Every check a send request must pass before a byte of it is
    /// written; returns its data part.
    #[inline(always)]
    fn check<'a>(&self, wr: &SendWr<'a>) -> Result<Data<'a>, PostError> {
        let length = self.checks.check(wr, |d| d.av.is_some())?;
        Ok(match wr.payload() {
            Payload::Sge(sges) => Data::Sges(sges),
            // Inline lengths are at most `max_inline`, a u32.
            Payload::Inline(bufs) => Data::Inline(bufs, length as u32),
        })
    }

    /// Builds the WQE of `wr` (checked, the `nreq`-th of its chain) at
    /// `cur_post`, records its `wr_id` and advances `cur_post`. Returns
    /// the control segment and the WQE's size in 16-byte units.
    #[inline(always)]
    fn write_wqe(&mut self, wr: &SendWr<'_>, data: Data<'_>, nreq: u32) -> (*const u8, u32) {
        let idx = self.cur_post & (self.wqe_cnt - 1);
        // SAFETY: `idx` is below `wqe_cnt`, so the BB is inside the ring.
        let ctrl = unsafe { self.start.add(idx as usize * SEND_WQE_BB as usize) };
        let mut ds: u32 = 1;
        // SAFETY: the WQE's BBs are free (`full` allowed at most
        // `max_post` outstanding requests, and each takes at most
        // `wqe_size` bytes, so in-flight WQEs never exceed the ring) and
        // the device reads them only after the doorbell record says so.
        // Every segment is written inside the ring: `seg` starts 16 bytes
        // into a BB and `wrap` brings it back to `start` at `qend`; the
        // checks bound the WQE to `wqe_size` bytes, within the ring.
        // Segments are 16-byte aligned in a page-aligned buffer.
        unsafe {
            let mut seg = ctrl.add(size_of::<CtrlSeg>());
            let op = match wr.opcode() {
                WrOpcode::Send => wqe_op::SEND,
                WrOpcode::SendWithImm => wqe_op::SEND_IMM,
                WrOpcode::RdmaWrite => wqe_op::RDMA_WRITE,
                WrOpcode::RdmaWriteWithImm => wqe_op::RDMA_WRITE_IMM,
                WrOpcode::RdmaRead => wqe_op::RDMA_READ,
                WrOpcode::AtomicCmpAndSwp => wqe_op::ATOMIC_CS,
                WrOpcode::AtomicFetchAndAdd => wqe_op::ATOMIC_FA,
                // Refused by `check_send`.
                WrOpcode::LocalInv | WrOpcode::SendWithInv => 0,
            };
            match self.checks.qp_type() {
                qp_type::UD => {
                    // `check_send` made sure there is an AV.
                    if let Some(d) = wr.ud_dest() {
                        if let Some(av) = d.av {
                            let mut av: prm::Av = zerocopy::transmute!(*av);
                            av.qkey = U32::new(d.remote_qkey);
                            av.dqp_dct = U32::new(d.remote_qpn | prm::EXTENDED_UD_AV);
                            put(seg, DatagramSeg { av });
                        }
                    }
                    seg = self.wrap(seg.add(size_of::<DatagramSeg>()));
                    ds += (size_of::<DatagramSeg>() / SEG) as u32;
                }
                _ => {
                    // RC: RDMA and atomics; UC: writes (`check_send`
                    // refused the rest).
                    if wr.opcode().is_rdma() || wr.opcode().is_atomic() {
                        put_raddr!(seg, wr.remote_addr(), wr.rkey());
                        seg = seg.add(size_of::<RaddrSeg>());
                        ds += 1;
                    }
                    if wr.opcode().is_atomic() {
                        let (swap_add, compare) = if wr.opcode() == WrOpcode::AtomicCmpAndSwp {
                            (wr.swap(), wr.compare_add())
                        } else {
                            (wr.compare_add(), 0)
                        };
                        put(
                            seg,
                            AtomicSeg {
                                swap_add: U64::new(swap_add),
                                compare: U64::new(compare),
                            },
                        );
                        seg = seg.add(size_of::<AtomicSeg>());
                        ds += 1;
                    }
                }
            }
            match data {
                Data::Sges(sges) => {
                    let atomic = wr.opcode().is_atomic();
                    for s in sges {
                        if s.length == 0 {
                            continue;
                        }
                        seg = self.wrap(seg);
                        put_seg!(
                            seg,
                            DataSeg {
                                byte_count: U32::new(if atomic { 8 } else { s.length }),
                                lkey: U32::new(s.lkey),
                                addr: U64::new(s.addr),
                            }
                        );
                        seg = seg.add(size_of::<DataSeg>());
                        ds += 1;
                    }
                }
                Data::Inline(_, 0) => {}
                Data::Inline(bufs, len) => {
                    seg = self.wrap(seg);
                    let hdr = size_of::<InlineSeg>();
                    put(
                        seg,
                        InlineSeg {
                            byte_count: U32::new(len | prm::INLINE_SEG),
                        },
                    );
                    self.copy_inline(seg.add(hdr), bufs);
                    ds += (hdr as u32 + len).div_ceil(SEG as u32);
                }
            }
            let imm = if wr.opcode().has_imm() {
                wr.imm_data()
            } else {
                0
            };
            let mut flags = self.sig_bits;
            if wr.send_flags().contains(SendFlags::SIGNALED) {
                flags |= prm::WQE_CTRL_CQ_UPDATE;
            }
            if wr.send_flags().contains(SendFlags::SOLICITED) {
                flags |= prm::WQE_CTRL_SOLICITED;
            }
            if wr.send_flags().contains(SendFlags::FENCE) {
                flags |= prm::WQE_CTRL_FENCE;
            }
            put_ctrl!(ctrl, self.cur_post, op, self.qpn, ds, flags, imm);
        }
        let slot = idx as usize;
        // SAFETY: `slot < wqe_cnt`, the length of both arrays, which
        // `shared` keeps alive.
        let (wrid, head) = unsafe { (&*self.wrid.add(slot), &*self.wqe_head.add(slot)) };
        wrid.store(wr.wr_id(), Ordering::Relaxed);
        head.store(self.head.wrapping_add(nreq), Ordering::Relaxed);
        self.cur_post = self
            .cur_post
            .wrapping_add(ds.div_ceil(SEND_WQE_BB / SEG as u32));
        (ctrl, ds)
    }

    /// `seg`, or the ring's start if `seg` is its end.
    #[inline(always)]
    fn wrap(&self, seg: *mut u8) -> *mut u8 {
        if seg == self.qend {
            self.start
        } else {
            seg
        }
    }

    /// Copies inline payload `bufs` to `dst`, continuing at the ring's
    /// start where it reaches the end (byte-exact split).
    ///
    /// # Safety
    /// `dst` is inside the ring (or at its end) and the ring has room for
    /// the payload from there, wrapping once.
    #[inline(always)]
    unsafe fn copy_inline(&self, mut dst: *mut u8, bufs: &[IoSlice<'_>]) {
        for b in bufs {
            let mut src = b.as_ptr();
            let mut len = b.len();
            // SAFETY: `dst` and `qend` are in (or one past)
            // the ring; the caller guarantees room; `src` is a live
            // borrowed slice that does not overlap the ring (it is a
            // shared borrow while we own the ring's memory mutably).
            unsafe {
                let room = self.qend.offset_from(dst) as usize;
                if len > room {
                    std::ptr::copy_nonoverlapping(src, dst, room);
                    src = src.add(room);
                    len -= room;
                    dst = self.start;
                }
                std::ptr::copy_nonoverlapping(src, dst, len);
                dst = dst.add(len);
            }
        }
    }

    /// Publishes `nreq` new requests: the doorbell record, then the UAR
    /// register. `ctrl` and `ds` are the last WQE's (BlueFlame copies it
    /// when it is the only one and small enough).
    #[inline(always)]
    fn ring(&mut self, nreq: u32, ctrl: *const u8, ds: u32) {
        self.head = self.head.wrapping_add(nreq);
        // SAFETY: `db` is this QP's doorbell send word, alive with `_mem`.
        let db = unsafe { &*self.db };
        // The WQEs are written before the device can see the counter that
        // covers them.
        mmio::to_device();
        db.store((self.cur_post & 0xffff).to_be(), Ordering::Relaxed);
        // The doorbell record reaches memory before the UAR write.
        mmio::wc_start();
        let bf = self.bf;
        // SAFETY: `reg + bf_offset` is this QP's register (offset 0, or
        // the second half of a dedicated BlueFlame register, which is
        // `buf_size` bytes into it), 8-byte aligned, in a UAR page mapped
        // for the context's life; every write to it goes through
        // `mmio::write64` (atomic 64-bit stores: QPs sharing a bfreg write
        // its doorbell from several threads). BlueFlame copies at most
        // `buf_size` bytes. The source BBs are the WQE just built, inside
        // the ring (wrapping at `qend`), initialised memory (the buffer
        // starts zeroed).
        unsafe {
            let mut dst = bf.reg.add(self.bf_offset as usize).cast::<u64>();
            if nreq == 1 && bf.dedicated && bf.buf_size != 0 && ds > 1 && ds * 16 <= bf.buf_size {
                let mut src = ctrl.cast::<u64>();
                let mut left = (ds * 16).next_multiple_of(SEND_WQE_BB);
                loop {
                    for i in 0..8 {
                        mmio::write64(dst.add(i), src.add(i).read());
                    }
                    left -= SEND_WQE_BB;
                    dst = dst.add(8);
                    src = src.add(8);
                    if src.cast::<u8>() == self.qend.cast_const() {
                        src = self.start.cast_const().cast();
                    }
                    if left == 0 {
                        break;
                    }
                }
            } else {
                mmio::write64(dst, ctrl.cast::<u64>().read());
            }
        }
        // Flush the write-combining buffer before another doorbell.
        mmio::flush_writes();
        if bf.dedicated {
            self.bf_offset ^= bf.buf_size;
        }
    }

    /// Follows the QP's state (after MODIFY_QP succeeded). RESET first
    /// removes the QP's CQEs not yet polled from its CQs (the device
    /// writes no more for it), then starts the ring's counters over, so
    /// that no CQE of the QP's previous life retires work of the next.
    pub fn set_state(&mut self, state: State) {
        match state {
            State::Reset => {
                if let Some(c) = &self.cleaner {
                    c.clean();
                }
                self.enabled = false;
                self.cur_post = 0;
                self.head = 0;
                self.tail = 0;
                self.shared.tail.store(0, Ordering::Release);
                // SAFETY: our doorbell send word, alive with `_mem`.
                unsafe { &*self.db }.store(0, Ordering::Release);
            }
            State::Init => {}
            State::Rts => self.enabled = true,
        }
    }

    /// Sets the largest UD message (the port's active MTU).
    pub fn set_ud_mtu(&mut self, mtu: u32) {
        self.checks.set_ud_mtu(mtu);
    }

    /// Work requests the queue holds.
    pub fn capacity(&self) -> u32 {
        self.max_post
    }

    /// Work requests posted and not yet retired by a polled completion.
    pub fn outstanding(&self) -> u32 {
        self.head
            .wrapping_sub(self.shared.tail.load(Ordering::Acquire))
    }
}

/// Writes the segment `v` at `p`, in a work queue ring, whole and through
/// the raw pointer (no reference to ring memory is made).
///
/// # Safety
/// `p` is valid for a write of `size_of::<T>()` bytes and aligned for `T`
/// (segments sit at 16-byte multiples of a page-aligned ring), and the
/// device does not read those bytes before a doorbell record covers them.
#[inline(always)]
unsafe fn put<T>(p: *mut u8, v: T) {
    // SAFETY: as the caller guarantees.
    unsafe { p.cast::<T>().write(v) }
}

/// For the simple opcodes (work-request opcodes 0..=4): the WQE opcode,
/// and whether a remote-address segment follows the control segment.
const FAST_OPS: [(u8, bool); 5] = [
    (wqe_op::RDMA_WRITE, true),
    (wqe_op::RDMA_WRITE_IMM, true),
    (wqe_op::SEND, false),
    (wqe_op::SEND_IMM, false),
    (wqe_op::RDMA_READ, true),
];

/// `fm_ce_se` bits for the low three send flags (FENCE, SIGNALED,
/// SOLICITED), indexed by those bits.
const FAST_FLAGS: [u8; 8] = {
    let mut t = [0u8; 8];
    let mut f = 0;
    while f < 8 {
        let mut v = 0;
        if f & send_flags::FENCE as usize != 0 {
            v |= prm::WQE_CTRL_FENCE;
        }
        if f & send_flags::SIGNALED as usize != 0 {
            v |= prm::WQE_CTRL_CQ_UPDATE;
        }
        if f & send_flags::SOLICITED as usize != 0 {
            v |= prm::WQE_CTRL_SOLICITED;
        }
        t[f] = v;
        f += 1;
    }
    t
};

/// A QP's receive queue.
#[derive(Debug)]
pub struct RecvQueue {
    /// First WQE of the ring.
    start: *mut u8,
    /// Ring size in WQEs (a power of two).
    wqe_cnt: u32,
    /// log2 of the WQE size.
    wqe_shift: u32,
    /// Scatter entries per WQE.
    max_gs: u32,
    /// The receive word of the doorbell record (BE counter of WQEs).
    db: *const AtomicU32,
    /// Producer counter of WQEs (`rq.head`).
    head: u32,
    /// Last seen consumer counter (the CQ's `tail`).
    tail: u32,
    /// Whether receives may be posted (INIT or later).
    enabled: bool,
    /// `wr_id`s and retirement, shared with the CQ.
    shared: Arc<RqShared>,
    /// Removes the QP's CQEs from its CQs on RESET (`None` in unit tests).
    cleaner: Option<Arc<Cleaner>>,
    /// Keeps the ring and doorbell record alive.
    _mem: Arc<Backing>,
}

// SAFETY: as for `SendQueue`: the pointers point into `_mem`, written only
// through `&mut self`; `&self` methods only load atomics.
unsafe impl Send for RecvQueue {}
// SAFETY: as above.
unsafe impl Sync for RecvQueue {}

impl RecvQueue {
    fn new(
        mem: Arc<Backing>,
        start: *mut u8,
        db: *const AtomicU32,
        g: &geom::Geometry,
        shared: Arc<RqShared>,
        cleaner: Option<Arc<Cleaner>>,
    ) -> Self {
        RecvQueue {
            start,
            wqe_cnt: g.rq_wqe_cnt,
            wqe_shift: g.rq_wqe_shift,
            max_gs: g.rq_max_gs,
            db,
            head: 0,
            tail: 0,
            enabled: false,
            shared,
            cleaner,
            _mem: mem,
        }
    }

    /// Posts the chain `wrs` (WQEs, then the doorbell record; no UAR
    /// write). On error the WRs before the failing index are posted.
    #[inline]
    pub fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), (usize, PostError)> {
        if !self.enabled {
            return Err((0, PostError::InvalidState));
        }
        let mut nreq: u32 = 0;
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            let head = self.head.wrapping_add(nreq);
            if head.wrapping_sub(self.tail) >= self.wqe_cnt {
                // Acquire: the CQ consumed the WQEs before publishing `tail`.
                self.tail = self.shared.tail.load(Ordering::Acquire);
                if head.wrapping_sub(self.tail) >= self.wqe_cnt {
                    result = Err((i, PostError::QueueFull));
                    break;
                }
            }
            if let Err(e) = check_recv_sges(wr.sg_list, self.max_gs) {
                result = Err((i, e));
                break;
            }
            let idx = head & (self.wqe_cnt - 1);
            // SAFETY: `idx < wqe_cnt`, so the WQE (1 << wqe_shift bytes,
            // room for `max_gs` 16-byte entries) is inside the ring; it is
            // free (fewer than `wqe_cnt` outstanding) and 16-byte aligned.
            // At most `max_gs` entries are written (checked above), the
            // terminator only when fewer.
            unsafe {
                let mut seg = self.start.add((idx as usize) << self.wqe_shift);
                let mut n = 0;
                for s in wr.sg_list.iter().filter(|s| s.length != 0) {
                    put_seg!(
                        seg,
                        DataSeg {
                            byte_count: U32::new(s.length),
                            lkey: U32::new(s.lkey),
                            addr: U64::new(s.addr),
                        }
                    );
                    seg = seg.add(size_of::<DataSeg>());
                    n += 1;
                }
                if n < self.max_gs {
                    put_seg!(
                        seg,
                        DataSeg {
                            byte_count: U32::ZERO,
                            lkey: U32::new(prm::INVALID_LKEY),
                            addr: U64::ZERO,
                        }
                    );
                }
            }
            self.shared.wrid[idx as usize].store(wr.wr_id, Ordering::Relaxed);
            nreq += 1;
        }
        if nreq != 0 {
            self.head = self.head.wrapping_add(nreq);
            // SAFETY: this QP's doorbell receive word, alive with `_mem`.
            let db = unsafe { &*self.db };
            // The WQEs are written before the device can see the counter
            // that covers them.
            mmio::to_device();
            db.store((self.head & 0xffff).to_be(), Ordering::Relaxed);
        }
        result
    }

    /// Follows the QP's state (after MODIFY_QP succeeded). RESET first
    /// removes the QP's CQEs not yet polled from its CQs (as the send
    /// queue does: whichever is told first cleans), then starts the
    /// ring's counters over: it then holds exactly its capacity again.
    pub fn set_state(&mut self, state: State) {
        match state {
            State::Reset => {
                if let Some(c) = &self.cleaner {
                    c.clean();
                }
                self.enabled = false;
                self.head = 0;
                self.tail = 0;
                self.shared.tail.store(0, Ordering::Release);
                // SAFETY: our doorbell receive word, alive with `_mem`.
                unsafe { &*self.db }.store(0, Ordering::Release);
            }
            State::Init | State::Rts => self.enabled = true,
        }
    }

    /// Work requests the queue holds.
    pub fn capacity(&self) -> u32 {
        self.wqe_cnt
    }

    /// Receives posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.head
            .wrapping_sub(self.shared.tail.load(Ordering::Acquire))
    }
}
