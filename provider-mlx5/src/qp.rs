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

mod batch;
pub(crate) mod geom;
#[cfg(test)]
mod tests;

use std::borrow::Borrow;
use std::io::IoSlice;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use rverbs_abi::mlx5;
use rverbs_abi::mlx5::prm::{self, DataSeg, DatagramSeg};
use rverbs_abi::mlx5::qdir::kind;
use rverbs_abi::qp::{qp_type, CreateQp, CreateQpResp};
use rverbs_abi::wr::{send_flags, Sge};
use rverbs_abi::Errno;
use rverbs_provider::check::{check_recv_sges, simple_send_ops, SendChecks, MAX_MSG};
use rverbs_provider::wr::{Payload, RecvWr, SendRequest, SendWr, WrOpcode};
use rverbs_provider::QpState;
use zerocopy::network_endian::U32;
use zerocopy::FromZeros;

use crate::cq::CqMemory;
use crate::hw::dbrec::DbRec;
use crate::hw::map::{Mapping, QueueKind};
use crate::hw::qdir::{self, Listing};
use crate::hw::uar::BlueFlame;
use crate::hw::wqe::{wqe_bbs, ChainOp, OneBb, RecvRing, SendRing, SEND_WQE_BB};
use crate::hw::{barrier, cmd};
use crate::srq::Srq;
use crate::uctx::Uctx;
use crate::wq::{QpEntry, RqShared, SqShared, SrqShared};
use crate::{wqe_op, PostError, PostFailed};

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
/// them (see [`SendQueue::set_state`]). The work queues and the doorbell
/// record come from `alloc` where one is given (through it, else the
/// provider's own memory).
pub fn create(
    fd: BorrowedFd<'_>,
    uctx: &Arc<Uctx>,
    cmd: &CreateQp,
    srq: Option<&Srq>,
    send_cq: &CqMemory,
    recv_cq: &CqMemory,
    alloc: Option<&rverbs_provider::SharedAllocator>,
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
    let buf = Arc::new(Mapping::queue_in(g.total(), QueueKind::Qp, alloc)?);
    let db = uctx.alloc_dbrec_in(alloc)?;
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
    // On error `reg` drops here and frees the user index. The queues
    // built below keep `buf` and `db` until they drop, after DESTROY_QP.
    let mut resp = cmd::create_qp(fd, &core, &drv, &mut drv_resp, &buf, &db)?;
    let destroy = |e: Errno| {
        cmd::destroy_qp(fd, resp.qp_handle);
        e
    };
    let bf = uctx.bfreg(drv_resp.bfreg_index).map_err(destroy)?;

    let sq_shared = Arc::new(SqShared::new(g.sq_wqe_cnt));
    let rq_shared = Arc::new(RqShared::new(g.rq_wqe_cnt));
    let rq_ring = match g.rq_wqe_cnt {
        0 => None,
        n => Some(
            RecvRing::new(&buf, n, g.rq_wqe_shift, g.rq_max_gs, &rq_shared)
                .ok_or(Errno::EPROTO)
                .map_err(destroy)?,
        ),
    };
    let sq_ring = SendRing::new(&buf, g.sq_offset(), g.sq_wqe_cnt, &sq_shared)
        .ok_or(Errno::EPROTO)
        .map_err(destroy)?;
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

    // The queue directory: where an outside tool finds the rings.
    let rq = rq_ring.map(|ring| {
        let mut rq = RecvQueue::new(
            ring,
            db.clone(),
            g.rq_wqe_cnt,
            Arc::clone(&rq_shared),
            Some(Arc::clone(&cleaner)),
        );
        let (wrid, retired) = rq_shared.addrs();
        rq.listing = qdir::list(&qdir::Entry {
            kind: kind::RQ,
            num: resp.qpn,
            entries: g.rq_wqe_cnt,
            stride_shift: g.rq_wqe_shift,
            info: g.rq_max_gs,
            buf: buf.addr(),
            dbrec: db.addr(),
            wrid,
            retired,
            ..qdir::Entry::default()
        });
        rq
    });
    let listing = if g.sq_wqe_cnt == 0 {
        Listing::default()
    } else {
        let (wrid, retired, wr_counter) = sq_shared.addrs();
        qdir::list(&qdir::Entry {
            kind: kind::SQ,
            num: resp.qpn,
            entries: g.sq_wqe_cnt,
            stride_shift: SEND_WQE_BB.trailing_zeros(),
            info: u32::from(cmd.qp_type),
            buf: buf.addr() + g.sq_offset() as u64,
            dbrec: db.addr(),
            wrid,
            retired,
            extra: wr_counter,
            ..qdir::Entry::default()
        })
    };
    let sq = SendQueue::new(SqInit {
        listing,
        reg: Some(reg),
        cleaner: Some(cleaner),
        ring: sq_ring,
        db,
        geometry: g,
        shared: sq_shared,
        qpn: resp.qpn,
        qp_type: cmd.qp_type,
        sig_all: cmd.sq_sig_all != 0,
        bf,
        ece_options: drv_resp.ece_options,
    });

    resp.max_send_wr = g.sq_max_post;
    if let Some(inline) = g.max_inline_data {
        resp.max_inline_data = inline;
    }
    resp.max_recv_wr = g.rq_wqe_cnt;
    resp.max_recv_sge = g.rq_max_gs;
    Ok(Created { resp, sq, rq })
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

/// Everything [`SendQueue::new`] needs.
struct SqInit {
    listing: Listing,
    reg: Option<Registration>,
    cleaner: Option<Arc<Cleaner>>,
    ring: SendRing,
    db: DbRec,
    geometry: geom::Geometry,
    shared: Arc<SqShared>,
    qpn: u32,
    qp_type: u8,
    sig_all: bool,
    bf: BlueFlame,
    ece_options: u32,
}

/// A QP's send queue.
#[derive(Debug)]
pub struct SendQueue {
    /// The ring (and the buffer it keeps mapped).
    ring: SendRing,
    /// The doorbell record (send counter: BBs).
    db: DbRec,
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
    /// `qpn << 8` in the device's byte order (the control segment's
    /// `qpn_ds` without the size).
    qpn_be: u32,
    /// The opcodes (bit `1 << opcode`) [`SendQueue::try_fast`] takes:
    /// [`simple_send_ops`] of the QP type, none if the queue takes no SGE.
    /// (A mask: one bit test costs the lone request less than a load of
    /// `chain_ops`, which holds the same opcodes.)
    fast_ops: u32,
    /// What the chain loop takes of an opcode ([`ChainOp`]), by
    /// work-request opcode: an entry for each opcode of `fast_ops`, the
    /// others 0.
    chain_ops: [ChainOp; 16],
    /// The control segment's third word (signature, stream id and
    /// `fm_ce_se`) by the low three send flags, `sig_bits` included.
    flag_words: [u32; 8],
    /// Whether sends may be posted (RTS or later).
    enabled: bool,
    /// The doorbell register.
    bf: BlueFlame,
    /// `wr_id`s and retirement, shared with the CQ.
    shared: Arc<SqShared>,
    /// Removes the QP's CQEs from its CQs on RESET (`None` in unit tests).
    cleaner: Option<Arc<Cleaner>>,
    /// Cleans the CQs and frees the user index on drop.
    _reg: Option<Registration>,
    /// The ring's slot in the queue directory.
    _listing: Listing,
    /// The ECE options CREATE_QP granted (its driver response).
    ece_options: u32,
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
        let fast_ops = if g.sq_max_gs == 0 {
            0
        } else {
            simple_send_ops(init.qp_type)
        };
        let sig_bits = if init.sig_all {
            prm::WQE_CTRL_CQ_UPDATE
        } else {
            0
        };
        SendQueue {
            ring: init.ring,
            db: init.db,
            cur_post: 0,
            head: 0,
            tail: 0,
            max_post: g.sq_max_post,
            checks: SendChecks::new(init.qp_type, g.sq_max_gs, g.max_inline_data.unwrap_or(0)),
            qpn: init.qpn,
            sig_bits,
            qpn_be: (init.qpn << 8).to_be(),
            fast_ops,
            chain_ops: chain_ops(init.qpn, fast_ops),
            flag_words: CTRL_FLAGS.map(|f| u32::from_ne_bytes([0, 0, 0, f | sig_bits])),
            enabled: false,
            bf: init.bf,
            shared: init.shared,
            cleaner: init.cleaner,
            _reg: init.reg,
            _listing: init.listing,
            ece_options: init.ece_options,
        }
    }

    /// The ECE options CREATE_QP granted.
    pub fn ece_options(&self) -> u32 {
        self.ece_options
    }

    /// Posts the chain `wrs`: WQEs built in the ring, one doorbell for the
    /// chain. On error the WRs before the failing index are posted.
    #[inline]
    pub fn post(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostFailed> {
        if !self.enabled {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        if let [wr] = wrs {
            return self.post_one(wr);
        }
        // A short chain takes the per-request loop: its set-up costs
        // less than the chain loop's (callgrind: at 3 requests the two
        // are even).
        if wrs.len() < CHAIN_LOOP_MIN {
            return self.post_chain::<SendWr<'_>, _, _>(wrs.iter());
        }
        self.post_slice(wrs)
    }

    /// Posts one request read in place ([`SendRequest`]), as
    /// [`SendQueue::post`] posts a chain of one.
    #[inline(always)]
    pub fn post_request<R: SendRequest + ?Sized>(&mut self, wr: &R) -> Result<(), PostFailed> {
        if !self.enabled {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        self.post_one(wr)
    }

    /// Posts the requests `reqs` yields as one chain, as
    /// [`SendQueue::post`] posts a slice of them.
    #[inline]
    pub fn post_iter<R: SendRequest, I: Iterator<Item = R>>(
        &mut self,
        reqs: I,
    ) -> Result<(), PostFailed> {
        if !self.enabled {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        self.post_chain::<R, R, I>(reqs)
    }

    /// [`SendQueue::post`] of a chain (or of nothing). Out of line: the
    /// lone request's path keeps a small frame.
    #[inline(never)]
    fn post_chain<R, B, I>(&mut self, wrs: I) -> Result<(), PostFailed>
    where
        R: SendRequest + ?Sized,
        B: Borrow<R>,
        I: Iterator<Item = B>,
    {
        // Work requests of this chain written so far (also the index of
        // the next one: each WR is written or ends the chain).
        let mut nreq: u32 = 0;
        // The last WQE's size in 16-byte units, for the doorbell (which
        // finds the WQE from it and `cur_post`).
        let mut last_ds: u32 = 0;
        // Work requests outstanding before this chain, as last seen.
        let mut used = self.head.wrapping_sub(self.tail);
        // The producer counters, written back after the chain.
        let mut cur_post = self.cur_post;
        let head = self.head;
        let mut result = Ok(());
        for wr in wrs {
            // A slice's `&SendWr` is read as a `SendWr`, not through a
            // second reference.
            let wr: &R = wr.borrow();
            if self.full(&mut used, nreq) {
                result = Err(PostFailed::new(nreq as usize, PostError::QueueFull));
                break;
            }
            if let Some((ds, _)) = self.try_fast(wr, cur_post, head.wrapping_add(nreq)) {
                last_ds = ds;
                cur_post = cur_post.wrapping_add(1);
                nreq += 1;
                continue;
            }
            last_ds = match self.post_checked(wr, cur_post, head.wrapping_add(nreq)) {
                Ok(ds) => ds,
                // Refused at its own index 0: at `nreq` in the chain.
                Err(f) => {
                    result = Err(PostFailed::new(nreq as usize, f.error()));
                    break;
                }
            };
            cur_post = cur_post.wrapping_add(wqe_bbs(last_ds));
            nreq += 1;
        }
        if nreq != 0 {
            self.cur_post = cur_post;
            self.head = head.wrapping_add(nreq);
            self.bf
                .ring(&self.ring, &self.db, self.cur_post, nreq, last_ds);
        }
        result
    }

    /// [`SendQueue::post`] of a chain (or of nothing), in runs: the
    /// common requests (see [`ChainCursor`]) in a tight loop, each other
    /// one checked and written by the general path. The ring's room is
    /// taken once for the whole chain, from the consumer counter as it
    /// stands then (requests past it end with [`PostError::QueueFull`] at
    /// the first of them). Same bytes, same result as
    /// [`SendQueue::post_chain`] (which may see completions retired
    /// during the chain). Out of line: the lone request's path keeps a
    /// small frame.
    #[inline(never)]
    fn post_slice<R: SendRequest>(&mut self, wrs: &[R]) -> Result<(), PostFailed> {
        let (todo, full) = wrs.split_at(self.room(wrs.len()).min(wrs.len()));
        let mut cur = self.ring.chain_cursor(self.cur_post, self.head);
        let mut done = 0usize;
        let mut last_ds = 0;
        let mut result = Ok(());
        while let Some(rest) = todo.get(done..) {
            let (n, ds) = cur.write(rest, &self.chain_ops, &self.flag_words);
            done += n;
            if n != 0 {
                last_ds = ds;
            }
            let Some(wr) = rest.get(n) else {
                break;
            };
            // Not the chain loop's: checked, written by the general path.
            match self.post_checked(wr, cur.cur_post, cur.head) {
                Ok(ds) => {
                    cur.skip(wqe_bbs(ds));
                    last_ds = ds;
                    done += 1;
                }
                // Refused at its own index 0: at `done` in the chain.
                Err(f) => {
                    result = Err(PostFailed::new(done, f.error()));
                    break;
                }
            }
        }
        if result.is_ok() && !full.is_empty() {
            result = Err(PostFailed::new(done, PostError::QueueFull));
        }
        let (cur_post, head) = (cur.cur_post, cur.head);
        if done != 0 {
            self.cur_post = cur_post;
            self.head = head;
            // At most `max_post` (a u32) requests fit.
            self.bf
                .ring(&self.ring, &self.db, cur_post, done as u32, last_ds);
        }
        result
    }

    /// How many more work requests the ring takes, `max_post` being
    /// outstanding at most; the consumer counter is re-read only if the
    /// cached one leaves room for fewer than `want`.
    #[inline(always)]
    fn room(&mut self, want: usize) -> usize {
        let mut room = self
            .max_post
            .saturating_sub(self.head.wrapping_sub(self.tail));
        if (room as usize) < want {
            self.tail = self.shared.retired();
            room = self
                .max_post
                .saturating_sub(self.head.wrapping_sub(self.tail));
        }
        room as usize
    }

    /// [`SendQueue::post`] of a lone request (the common call), in one
    /// straight line: no chain counters to keep across iterations.
    #[inline(always)]
    fn post_one<R: SendRequest + ?Sized>(&mut self, wr: &R) -> Result<(), PostFailed> {
        let mut used = self.head.wrapping_sub(self.tail);
        if self.full(&mut used, 0) {
            return Err(PostFailed::first(PostError::QueueFull));
        }
        let cur_post = self.cur_post;
        let head = self.head;
        if let Some((ds, bb)) = self.try_fast(wr, cur_post, head) {
            let next = cur_post.wrapping_add(1);
            self.cur_post = next;
            self.head = head.wrapping_add(1);
            self.bf.ring_one_bb(&self.db, next, bb, ds);
            return Ok(());
        }
        self.post_one_checked(wr, cur_post, head)
    }

    /// [`SendQueue::post_one`] of a request [`SendQueue::try_fast`] did
    /// not take, at producer counter `cur_post` and WR counter `head`
    /// (the queue has room). Out of line and jumped to: nothing of the
    /// fast path is kept across a call.
    #[inline(never)]
    fn post_one_checked<R: SendRequest + ?Sized>(
        &mut self,
        wr: &R,
        cur_post: u32,
        head: u32,
    ) -> Result<(), PostFailed> {
        let ds = self.post_checked(wr, cur_post, head)?;
        let next = cur_post.wrapping_add(wqe_bbs(ds));
        self.cur_post = next;
        self.head = head.wrapping_add(1);
        self.bf.ring(&self.ring, &self.db, next, 1, ds);
        Ok(())
    }

    /// Whether posting one more request (after `nreq` of this chain)
    /// would overflow the ring: `max_post` work requests may be
    /// outstanding, `used` (this chain's `head - tail`) before it. The
    /// consumer counter is re-read (and `used` with it) only when the
    /// cached one says full.
    #[inline(always)]
    fn full(&mut self, used: &mut u32, nreq: u32) -> bool {
        if used.wrapping_add(nreq) < self.max_post {
            return false;
        }
        self.tail = self.shared.retired();
        *used = self.head.wrapping_sub(self.tail);
        used.wrapping_add(nreq) >= self.max_post
    }

    /// The common request in one straight line: a simple opcode (see
    /// [`simple_send_ops`]) with one SGE and no UD destination, which passes
    /// every check and fits one basic block (control, at most a remote
    /// address and one data segment: no wrap inside it). `None`, with
    /// nothing written, for anything else: [`SendQueue::check`] and
    /// [`SendQueue::write_wqe`] take it. Same bytes as `write_wqe`.
    /// Returns the WQE's size in 16-byte units and its BB.
    #[inline(always)]
    fn try_fast<R: SendRequest + ?Sized>(
        &self,
        wr: &R,
        cur_post: u32,
        head: u32,
    ) -> Option<(u32, OneBb)> {
        // One SGE, no UD destination.
        let sge = wr.lone_sge()?;
        // `is_simple` with the SGE count folded in (`fast_ops`).
        if self.fast_ops & (1 << (wr.opcode() as u32)) == 0 || u64::from(sge.length) > MAX_MSG {
            return None;
        }
        let fast = WQE_OPS[wr.opcode() as usize];
        // The BB is free (`full` said so) and unread by the device until
        // the doorbell record covers it.
        let mut bb = self.ring.bb(cur_post);
        // The WQE's size in 16-byte units, counted as its segments are
        // written (the control segment, then each of these).
        let mut ds: u32 = 1;
        if fast.raddr {
            bb.raddr(wr.remote_addr(), wr.rkey());
            ds = 2;
        }
        if sge.length != 0 {
            bb.data(sge.length, sge.lkey, sge.addr);
            ds += 1;
        }
        bb.ctrl_words([
            ((cur_post & 0xffff) << 8 | fast.op as u32).to_be(),
            self.qpn_be | ds.to_be(),
            self.flag_words[(wr.send_flags().bits() & 7) as usize],
            (wr.imm_data() & fast.imm_mask).to_be(),
        ]);
        Some((ds, bb.finish(wr.wr_id(), head)))
    }

    /// The general path, for what [`SendQueue::try_fast`] does not take:
    /// checks `wr`, then builds its WQE at `cur_post` with WR counter
    /// `head` ([`SendQueue::write_wqe`]) and returns its size in 16-byte
    /// units. Out of line: the fast path's loop stays small.
    #[inline(never)]
    fn post_checked<R: SendRequest + ?Sized>(
        &self,
        wr: &R,
        cur_post: u32,
        head: u32,
    ) -> Result<u32, PostFailed> {
        let data = self.check(wr)?;
        Ok(self.write_wqe(wr, data, cur_post, head))
    }

    /// Every check a send request must pass before a byte of it is
    /// written; returns its data part.
    #[inline(always)]
    fn check<'a, R: SendRequest + ?Sized>(&self, wr: &'a R) -> Result<Data<'a>, PostError> {
        let length = self.checks.check(wr, |d| d.av.is_some())?;
        Ok(match wr.payload() {
            Payload::Sge(sges) => Data::Sges(sges),
            // Inline lengths are at most `max_inline`, a u32.
            Payload::Inline(bufs) => Data::Inline(bufs, length as u32),
        })
    }

    /// Builds the WQE of `wr` (checked) at producer counter `cur_post`
    /// and records its `wr_id` and WR counter `head`. Returns its size in
    /// 16-byte units (the caller advances `cur_post` by its BBs).
    ///
    /// The WQE's BBs are free (`full` allowed at most `max_post`
    /// outstanding requests, and each takes at most `wqe_size` bytes, so
    /// in-flight WQEs never exceed the ring) and the device reads them
    /// only after the doorbell record says so.
    #[inline(always)]
    fn write_wqe<R: SendRequest + ?Sized>(
        &self,
        wr: &R,
        data: Data<'_>,
        cur_post: u32,
        head: u32,
    ) -> u32 {
        let mut w = self.ring.wqe(cur_post);
        let mut ds: u32 = 1;
        // `check` refused the opcodes the table has no WQE opcode for.
        let t = WQE_OPS[wr.opcode() as usize];
        match self.checks.qp_type() {
            qp_type::UD => {
                // `check_send` made sure there is an AV.
                if let Some(d) = wr.ud_dest() {
                    if let Some(av) = d.av {
                        let mut av: prm::Av = zerocopy::transmute!(*av);
                        av.qkey = U32::new(d.remote_qkey);
                        av.dqp_dct = U32::new(d.remote_qpn | prm::EXTENDED_UD_AV);
                        w.datagram(av);
                    }
                }
                ds += (size_of::<DatagramSeg>() / SEG) as u32;
            }
            _ => {
                // RC: RDMA and atomics; UC: writes (`check_send` refused
                // the rest).
                if t.raddr {
                    w.raddr(wr.remote_addr(), wr.rkey());
                    ds += 1;
                }
                if wr.opcode().is_atomic() {
                    let (swap_add, compare) = if wr.opcode() == WrOpcode::AtomicCmpAndSwp {
                        (wr.swap(), wr.compare_add())
                    } else {
                        (wr.compare_add(), 0)
                    };
                    w.atomic(swap_add, compare);
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
                    w.data(if atomic { 8 } else { s.length }, s.lkey, s.addr);
                    ds += 1;
                }
            }
            Data::Inline(_, 0) => {}
            Data::Inline(bufs, len) => {
                w.inline(bufs, len);
                ds += (size_of::<prm::InlineSeg>() as u32 + len).div_ceil(SEG as u32);
            }
        }
        let imm = wr.imm_data() & t.imm_mask;
        let flags = self.sig_bits | CTRL_FLAGS[(wr.send_flags().bits() & 7) as usize];
        w.ctrl(cur_post, t.op, self.qpn, ds, flags, imm);
        w.finish(wr.wr_id(), head);
        ds
    }

    /// Follows the QP's state (after MODIFY_QP succeeded). RESET first
    /// removes the QP's CQEs not yet polled from its CQs (the device
    /// writes no more for it), then starts the ring's counters over, so
    /// that no CQE of the QP's previous life retires work of the next.
    pub fn set_state(&mut self, state: QpState) {
        if state == QpState::Reset {
            if let Some(c) = &self.cleaner {
                c.clean();
            }
            self.cur_post = 0;
            self.head = 0;
            self.tail = 0;
            self.shared.reset();
            self.db.reset_send();
        }
        self.enabled = state.may_post_send();
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
        self.head.wrapping_sub(self.shared.retired())
    }
}

/// What a WQE needs of a work-request opcode: the one translation table,
/// read by the fast path ([`SendQueue::try_fast`]), the general path
/// ([`SendQueue::write_wqe`]) and batches.
#[derive(Clone, Copy)]
pub(crate) struct WqeOp {
    /// The WQE opcode (0 for an opcode this queue refuses before a WQE
    /// is built: memory windows, ATOMIC_WRITE, FLUSH).
    pub(crate) op: u8,
    /// Whether a remote-address segment follows the control segment (RDMA
    /// and atomics; on RC and UC, never on UD).
    pub(crate) raddr: bool,
    /// All ones if the opcode carries immediate data, else 0.
    pub(crate) imm_mask: u32,
}

/// [`WqeOp`] by work-request opcode, every opcode covered (16 entries, so
/// any opcode indexes it without a bounds check).
pub(crate) const WQE_OPS: [WqeOp; 16] = {
    let refused = WqeOp {
        op: 0,
        raddr: false,
        imm_mask: 0,
    };
    let mut t = [refused; 16];
    t[WrOpcode::RdmaWrite as usize] = WqeOp {
        op: wqe_op::RDMA_WRITE,
        raddr: true,
        imm_mask: 0,
    };
    t[WrOpcode::RdmaWriteWithImm as usize] = WqeOp {
        op: wqe_op::RDMA_WRITE_IMM,
        raddr: true,
        imm_mask: !0,
    };
    t[WrOpcode::Send as usize] = WqeOp {
        op: wqe_op::SEND,
        raddr: false,
        imm_mask: 0,
    };
    t[WrOpcode::SendWithImm as usize] = WqeOp {
        op: wqe_op::SEND_IMM,
        raddr: false,
        imm_mask: !0,
    };
    t[WrOpcode::RdmaRead as usize] = WqeOp {
        op: wqe_op::RDMA_READ,
        raddr: true,
        imm_mask: 0,
    };
    t[WrOpcode::AtomicCmpAndSwp as usize] = WqeOp {
        op: wqe_op::ATOMIC_CS,
        raddr: true,
        imm_mask: 0,
    };
    t[WrOpcode::AtomicFetchAndAdd as usize] = WqeOp {
        op: wqe_op::ATOMIC_FA,
        raddr: true,
        imm_mask: 0,
    };
    t
};

/// The shortest chain [`SendQueue::post`] writes with the chain loop
/// ([`SendQueue::post_slice`]); shorter ones take the per-request loop.
const CHAIN_LOOP_MIN: usize = 4;

/// The chain loop's table for QP `qpn` ([`ChainOp`] by work-request
/// opcode): an entry for each opcode of `fast_ops` ([`simple_send_ops`]
/// of the QP type, none if the queue takes no SGE), from [`WQE_OPS`].
fn chain_ops(qpn: u32, fast_ops: u32) -> [ChainOp; 16] {
    let mut t = [ChainOp::default(); 16];
    for (o, e) in t.iter_mut().enumerate() {
        if fast_ops & (1 << o) != 0 {
            let w = WQE_OPS[o];
            *e = ChainOp::new(w.op, w.raddr, w.imm_mask, qpn);
        }
    }
    t
}

/// `fm_ce_se` bits for the low three send flags (FENCE, SIGNALED,
/// SOLICITED), indexed by those bits.
const CTRL_FLAGS: [u8; 8] = {
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
    /// The ring (and the buffer it keeps mapped).
    ring: RecvRing,
    /// The doorbell record (receive counter: WQEs).
    db: DbRec,
    /// Ring size in WQEs (a power of two).
    wqe_cnt: u32,
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
    /// The ring's slot in the queue directory.
    listing: Listing,
}

impl RecvQueue {
    fn new(
        ring: RecvRing,
        db: DbRec,
        wqe_cnt: u32,
        shared: Arc<RqShared>,
        cleaner: Option<Arc<Cleaner>>,
    ) -> Self {
        RecvQueue {
            ring,
            db,
            wqe_cnt,
            head: 0,
            tail: 0,
            enabled: false,
            shared,
            cleaner,
            listing: Listing::default(),
        }
    }

    /// Whether the WQE at producer counter `head` would overflow the
    /// ring. The consumer counter is re-read only when the cached one
    /// says full.
    #[inline(always)]
    fn full(&mut self, head: u32) -> bool {
        if head.wrapping_sub(self.tail) < self.wqe_cnt {
            return false;
        }
        self.tail = self.shared.retired();
        head.wrapping_sub(self.tail) >= self.wqe_cnt
    }

    /// Posts the chain `wrs` (WQEs, then the doorbell record; no UAR
    /// write). On error the WRs before the failing index are posted.
    #[inline]
    pub fn post(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        if !self.enabled {
            return Err(PostFailed::first(PostError::InvalidState));
        }
        if let [wr @ RecvWr { sg_list: [_], .. }] = wrs {
            return self.post_one(wr);
        }
        self.post_chain(wrs)
    }

    /// [`RecvQueue::post`] of a lone request with one SGE (the common
    /// call): no loop over SGEs, whose registers would be saved here.
    #[inline(always)]
    fn post_one(&mut self, wr: &RecvWr<'_>) -> Result<(), PostFailed> {
        let head = self.head;
        if self.full(head) {
            return Err(PostFailed::first(PostError::RecvQueueFull));
        }
        check_recv_sges(wr.sg_list, self.ring.max_gs())?;
        // The WQE is free (fewer than `wqe_cnt` outstanding).
        self.ring.write(head, wr.sg_list, wr.wr_id);
        self.head = head.wrapping_add(1);
        // The WQE is written before the device can see the counter that
        // covers it.
        barrier::to_device();
        self.db.set_recv(self.head);
        Ok(())
    }

    /// [`RecvQueue::post`] of a chain (or of nothing), out of line.
    #[inline(never)]
    fn post_chain(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostFailed> {
        let mut nreq: u32 = 0;
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            let head = self.head.wrapping_add(nreq);
            if self.full(head) {
                result = Err(PostFailed::new(i, PostError::RecvQueueFull));
                break;
            }
            if let Err(e) = check_recv_sges(wr.sg_list, self.ring.max_gs()) {
                result = Err(PostFailed::new(i, e));
                break;
            }
            // The WQE is free (fewer than `wqe_cnt` outstanding).
            self.ring.write(head, wr.sg_list, wr.wr_id);
            nreq += 1;
        }
        if nreq != 0 {
            self.head = self.head.wrapping_add(nreq);
            // The WQEs are written before the device can see the counter
            // that covers them.
            barrier::to_device();
            self.db.set_recv(self.head);
        }
        result
    }

    /// Follows the QP's state (after MODIFY_QP succeeded). RESET first
    /// removes the QP's CQEs not yet polled from its CQs (as the send
    /// queue does: whichever is told first cleans), then starts the
    /// ring's counters over: it then holds exactly its capacity again.
    pub fn set_state(&mut self, state: QpState) {
        if state == QpState::Reset {
            if let Some(c) = &self.cleaner {
                c.clean();
            }
            self.head = 0;
            self.tail = 0;
            self.shared.reset();
            self.db.reset_recv();
        }
        self.enabled = state.may_post_recv();
    }

    /// Work requests the queue holds.
    pub fn capacity(&self) -> u32 {
        self.wqe_cnt
    }

    /// Receives posted and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.head.wrapping_sub(self.shared.retired())
    }
}
