//! mlx5 completion queues: the CQE ring and doorbell record we allocate,
//! CREATE_CQ with mlx5's driver data, polling CQEs into `ib_uverbs_wc`
//! entries, and arming through the UAR.
//!
//! The ring holds a power of two of 64-byte CQEs. The device writes the
//! CQE for its producer counter p at entry `p % ncqe`, with the owner bit
//! (bit 0 of the last byte) set to `(p / ncqe) & 1`, that byte last; a
//! fresh ring has opcode 15 (invalid) everywhere. We consume in order and
//! tell the device how far with the consumer index in doorbell word 0.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use rverbs_abi::cq::{CreateCq, CreateCqResp, ResizeCq};
use rverbs_abi::mlx5;
use rverbs_abi::mlx5::prm::{self, cqe_opcode as cqe_op, syndrome};
use rverbs_abi::mlx5::qdir::kind;
use rverbs_abi::wr::{wc_flags, wc_opcode, wc_status, Wc};
use rverbs_abi::Errno;
use rverbs_provider::{RingLost, SharedAllocator, SharedCq};
use zerocopy::FromZeros;

use crate::hw::cmd;
use crate::hw::cqe::{CqReader, CqRing, Cqe, KeyField, CQE_SIZE};
use crate::hw::dbrec::DbRec;
use crate::hw::qdir::{self, Listing};
use crate::hw::uar::Doorbell;
use crate::uctx::Uctx;
use crate::wq::{QpEntry, Row, SrqShared};
use crate::wqe_op;

#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod fuzz;

mod clean;
mod lock;

/// Largest ring (`1 << 24` entries).
const MAX_CQE: u64 = 1 << 24;
/// How long [`Cq::resize`] waits for the RESIZE CQE after the command
/// returned (the device writes it before answering: normally no wait).
pub const RESIZE_CQE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// `MLX5_CQ_DB_REQ_NOT_SOL`: arm for solicited (and error) CQEs only.
const ARM_SOLICITED: u32 = prm::CQ_DB_REQ_NOT_SOL;

/// What CREATE_CQ returned. The ring and doorbell record live as long as
/// the [`Cq`] or any [`CqMemory`] taken from it: keep one until the kernel
/// CQ is destroyed.
#[derive(Debug)]
pub struct Created {
    /// Core response (handle, granted depth).
    pub resp: CreateCqResp,
    /// The CQ.
    pub cq: Cq,
}

/// Issues CREATE_CQ for `cmd` (core fields as the user asked: `cqe` is the
/// minimum depth; the provider rounds it as mlx5 needs and fills in the
/// driver data).
///
/// If the kernel answers with a depth other than the one sent (which the
/// ring depends on), the CQ is destroyed here and EPROTO returned: on
/// `Err` there is nothing to clean.
/// The ring and doorbell record come from `alloc` where one is given
/// (through it, else the provider's own memory).
pub fn create(
    fd: BorrowedFd<'_>,
    uctx: &Arc<Uctx>,
    cmd: &CreateCq,
    alloc: Option<&SharedAllocator>,
) -> Result<Created, Errno> {
    let ncqe = (cmd.cqe as u64 + 1).next_power_of_two();
    if ncqe > MAX_CQE {
        return Err(Errno::EINVAL);
    }
    let ncqe = ncqe as u32;
    let mem = Arc::new(Mem::new_in(uctx, ncqe, alloc)?);
    let ring = mem.current();
    let mut core = *cmd;
    core.cqe = ncqe - 1;
    let drv = mlx5::CreateCq {
        buf_addr: ring.addr(),
        db_addr: mem.db.addr(),
        cqe_size: CQE_SIZE as u32,
        ..Default::default()
    };
    let mut drv_resp = mlx5::CreateCqResp::new_zeroed();
    // The returned Cq and its CqMemory keep the ring and record until
    // DESTROY_CQ.
    let resp = cmd::create_cq(fd, &core, &drv, &mut drv_resp, &ring, &mem.db)?;
    if resp.cqe != ncqe - 1 {
        cmd::destroy_cq(fd, resp.cq_handle);
        return Err(Errno::EPROTO);
    }
    let mut cq = Cq::new(uctx, mem, drv_resp.cqn);
    cq.listing = qdir::list(&cq.dir_entry());
    Ok(Created { resp, cq })
}

/// The CQE ring(s) and doorbell record of a CQ. Normally one ring; during
/// a resize the old and the new one (the `rings` lock is taken on the
/// control path only: creation, resize, cleaning).
///
/// It also holds what a QP needs to remove its CQEs from the CQ
/// ([`CqMemory::clean`]) while the [`Cq`] itself is owned, and polled,
/// elsewhere: the consumer state, guarded by the `busy`/`cleaning` handshake (`lock.rs`).
#[derive(Debug)]
struct Mem {
    /// The current ring is the last.
    rings: Mutex<Vec<Arc<CqRing>>>,
    db: DbRec,
    /// Set while the CQ's owner (a poll, a resize) consumes or moves
    /// CQEs ([`Mem::owner_enter`]).
    busy: AtomicBool,
    /// A QP cleaning its CQEs out wants in or is in
    /// ([`Mem::cleaner_enter`]); and whether the handshake uses full fences
    /// (`lock::FULL_FENCES`). The consumer index and which ring is current
    /// are read and changed only by whoever is in.
    cleaning: AtomicU8,
    /// CQEs consumed.
    cons_index: AtomicU32,
    /// CQE format: 1 = user index in `srqn_uidx`, 0 = look up by QPN.
    cqe_version: u8,
    /// Arm sequence number (the low 2 bits go into arm doorbells): the
    /// completion events the library has read for this CQ
    /// ([`CqMemory`]'s [`SharedCq::completion_event`]), as libmlx5's
    /// `mlx5_cq_event` and the kernel's `mlx5_cq_completion` count them.
    /// The device ignores an arm whose number is not its own count of the
    /// events it raised: one issued before the last event was seen.
    arm_sn: AtomicU32,
}

impl Mem {
    /// A fresh ring of `ncqe` entries and a zeroed doorbell record.
    #[cfg(test)]
    fn new(uctx: &Arc<Uctx>, ncqe: u32) -> Result<Mem, Errno> {
        Mem::new_in(uctx, ncqe, None)
    }

    /// [`Mem::new`], the ring and record from `alloc` where one is given.
    fn new_in(uctx: &Arc<Uctx>, ncqe: u32, alloc: Option<&SharedAllocator>) -> Result<Mem, Errno> {
        let ring = Arc::new(CqRing::new_in(ncqe, alloc)?);
        let db = uctx.alloc_dbrec_in(alloc)?;
        Ok(Mem {
            rings: Mutex::new(vec![ring]),
            db,
            busy: AtomicBool::new(false),
            cleaning: AtomicU8::new(if crate::hw::membarrier::available() {
                0
            } else {
                lock::FULL_FENCES
            }),
            cons_index: AtomicU32::new(0),
            cqe_version: uctx.cqe_version(),
            arm_sn: AtomicU32::new(0),
        })
    }

    /// The current ring.
    fn current(&self) -> Arc<CqRing> {
        let rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        // There is always one: `new` puts it there and resizes only add.
        Arc::clone(rings.last().expect("a CQ has a ring"))
    }
}

/// Copies the context's QP table into `rows` (reusing its allocation),
/// keyed by QP number instead of user index if `by_qpn`, sorted by key;
/// returns the table's generation.
fn snapshot(uctx: &Uctx, by_qpn: bool, rows: &mut Vec<Row>) -> u64 {
    let generation = uctx.table().snapshot_into(rows);
    if by_qpn {
        for r in rows.iter_mut() {
            r.0 = r.1.qpn;
        }
        rows.sort_unstable_by_key(|r| r.0);
    }
    generation
}

/// Keeps a CQ's ring and doorbell record alive (the kernel object may
/// outlive the [`Cq`] value: hold this until it is destroyed), and lets a
/// QP on the CQ remove its CQEs from it.
#[derive(Debug, Clone)]
pub struct CqMemory {
    mem: Arc<Mem>,
}

impl CqMemory {
    /// Removes the CQEs of the QP with user index `uidx` and number `qpn`
    /// not yet polled (see [`Mem::clean`]); returns how many.
    pub(crate) fn clean(&self, uidx: u32, qpn: u32, srq: Option<&SrqShared>) -> u32 {
        self.mem.clean(uidx, qpn, srq)
    }

    /// Whether both name the same CQ.
    pub(crate) fn same(&self, other: &CqMemory) -> bool {
        Arc::ptr_eq(&self.mem, &other.mem)
    }
}

impl SharedCq for CqMemory {
    /// Steps the arm sequence number, as libmlx5's `mlx5_cq_event`: the
    /// next arm carries the number the device expects after this event.
    fn completion_event(&self) {
        self.mem.arm_sn.fetch_add(1, Ordering::Relaxed);
    }
}

/// How a CQ finds the QP a CQE belongs to: a snapshot of the context's QP
/// table, keyed by what its CQEs name a QP by.
#[derive(Debug)]
struct Lookup {
    /// Where a CQE names its QP: `srqn_uidx` (the user index, CQE version
    /// 1) or `sop_drop_qpn` (the QP number, version 0).
    key: KeyField,
    /// Whether `key` is the QP number (CQE version 0).
    by_qpn: bool,
    /// The table rows as of `generation`, keyed (and sorted) by what CQEs
    /// name QPs by.
    rows: Vec<Row>,
    /// The key of the last CQE's QP ([`NO_KEY`] after a refresh), whose
    /// row is `hit`: a CQE of it is resolved without comparing keys in
    /// the table.
    hit_key: u32,
    /// The row of the last CQE's QP: an index, not a clone of the row's
    /// `Arc` (switching QPs then counts no reference: no atomic
    /// read-modify-write in the poll).
    hit: usize,
    generation: u64,
    uctx: Arc<Uctx>,
}

impl Lookup {
    /// Resolves the CQE's QP and parses it.
    #[inline]
    fn complete(&mut self, cqe: Cqe<'_>, out: &mut Wc) -> bool {
        let key = cqe.key(self.key) & 0xFF_FFFF;
        // Most CQs serve one QP, or a few in turn: try the last hit first.
        if key == self.hit_key {
            if let Some(e) = self.hit() {
                return parse(cqe, e, out);
            }
        }
        self.complete_other(cqe, key, out)
    }

    /// [`Lookup::complete`] of a CQE of the last hit's QP that a plain
    /// send completed (its opcode `REQ`), reported. A plain receive's
    /// (one of the responder's opcodes) is left to the caller, and any
    /// other CQE to the general path (also a send's that reports nothing,
    /// after `out` was written: scratch until counted).
    #[inline(always)]
    fn complete_hot(&mut self, cqe: Cqe<'_>, out: &mut Wc) -> Hot1 {
        let key = cqe.key(self.key) & 0xFF_FFFF;
        if key != self.hit_key {
            return Hot1::Other;
        }
        let Some(e) = self.hit() else {
            return Hot1::Other;
        };
        let opcode = cqe.op_own() >> 4;
        if opcode == cqe_op::REQ {
            if parse_req(cqe, e, out) {
                Hot1::Req
            } else {
                Hot1::Other
            }
        } else if opcode <= cqe_op::RESP_SEND_INV {
            Hot1::Resp(opcode)
        } else {
            Hot1::Other
        }
    }

    /// The entry of the last hit's QP (`None` only if `hit_key` is
    /// [`NO_KEY`], which no CQE's key equals).
    #[inline(always)]
    fn hit(&self) -> Option<&QpEntry> {
        self.rows.get(self.hit).map(|r| &*r.1)
    }

    /// [`Lookup::complete`] when the CQE is not of the last hit's QP.
    #[inline(never)]
    fn complete_other(&mut self, cqe: Cqe<'_>, key: u32, out: &mut Wc) -> bool {
        let i = match self.find(key) {
            Some(i) => i,
            None => {
                if self.uctx.table().generation() == self.generation {
                    return false;
                }
                self.refresh();
                match self.find(key) {
                    Some(i) => i,
                    None => return false,
                }
            }
        };
        self.hit_key = key;
        self.hit = i;
        parse(cqe, &self.rows[i].1, out)
    }

    /// The row of `key` (what CQEs name QPs by: see [`Lookup::refresh`]).
    #[inline]
    fn find(&self, key: u32) -> Option<usize> {
        self.rows.binary_search_by_key(&key, |r| r.0).ok()
    }

    /// Takes a new snapshot of the QP table (after a lookup miss), keyed
    /// and sorted by what this CQ's CQEs name a QP by: the user index
    /// (CQE version 1, as the table is) or the QP number (version 0).
    #[cold]
    fn refresh(&mut self) {
        self.generation = snapshot(&self.uctx, self.by_qpn, &mut self.rows);
        // The last hit's QP may be gone, and its key another QP's now.
        self.hit_key = NO_KEY;
    }
}

/// What [`Lookup::complete_hot`] made of a CQE.
enum Hot1 {
    /// A plain send's, parsed and reported.
    Req,
    /// A plain receive's, of this opcode, not parsed.
    Resp(u8),
    /// Anything else, not parsed.
    Other,
}

/// [`Lookup::hit_key`] when no QP is cached: keys are 24 bits.
const NO_KEY: u32 = u32::MAX;

/// Where [`Cq::poll_hot`] stopped.
enum Hot {
    /// The poll is done: this many completions.
    Done(usize),
    /// Nothing done: the general path from the start.
    Start,
    /// The owner in, `n` completions reported, the CQE of `ci` next.
    At { n: usize, ci: u32 },
    /// The owner in, nothing reported, the CQE of `ci` (written, of the
    /// last hit's QP) a responder one of `opcode` ([`Cq::poll_resp`]).
    Resp { ci: u32, opcode: u8 },
}

/// Where [`Cq::hot_end`] left a poll.
enum End {
    /// The poll is done (the owner out): this many completions.
    Done(usize),
    /// The owner in, `n` completions reported, the CQE of `ci` next.
    More { n: usize, ci: u32 },
}

/// An mlx5 CQ: the CQE ring and doorbell record, the consumer index, and
/// a snapshot of the context's QP table.
#[derive(Debug)]
pub struct Cq {
    /// The current ring.
    cqes: CqReader,
    cqn: u32,
    /// The doorbell record: consumer index, arm command.
    db: DbRec,
    /// The UAR's CQ doorbell register (`None` only in unit tests).
    uar: Option<Doorbell>,
    /// The QP table snapshot.
    lookup: Lookup,
    mem: Arc<Mem>,
    /// The ring's slot in the queue directory.
    listing: Listing,
}

impl Cq {
    fn new(uctx: &Arc<Uctx>, mem: Arc<Mem>, cqn: u32) -> Cq {
        let mut rows = Vec::new();
        let by_qpn = uctx.cqe_version() != 1;
        let generation = snapshot(uctx, by_qpn, &mut rows);
        Cq {
            cqes: mem.current().reader(),
            cqn,
            db: mem.db.clone(),
            uar: uctx.cq_doorbell(),
            lookup: Lookup {
                key: if by_qpn {
                    KeyField::QPN
                } else {
                    KeyField::UIDX
                },
                by_qpn,
                rows,
                hit_key: NO_KEY,
                hit: 0,
                generation,
                uctx: Arc::clone(uctx),
            },
            mem,
            listing: Listing::default(),
        }
    }

    /// What the queue directory says about this CQ (its current ring).
    fn dir_entry(&self) -> qdir::Entry {
        qdir::Entry {
            kind: kind::CQ,
            num: self.cqn,
            entries: self.cqes.ncqe(),
            stride_shift: CQE_SIZE.trailing_zeros(),
            info: u32::from(self.mem.cqe_version),
            buf: self.cqes.ring().addr(),
            dbrec: self.db.addr(),
            ..qdir::Entry::default()
        }
    }

    /// Polls up to `wc.len()` completions into `wc`; returns how many.
    ///
    /// CQEs of QPs that no longer exist (and of kinds plain verbs never
    /// asks for) are consumed without being reported.
    #[cfg(any(test, feature = "fuzz"))]
    #[inline]
    pub fn poll(&mut self, wc: &mut [Wc]) -> usize {
        self.poll_wcs(wc).unwrap_or(0)
    }

    /// [`Cq::poll`] as the provider contract returns it (never `Err`:
    /// an mlx5 ring is never lost). The common case (the QP table
    /// unchanged, no cleaner waiting, CQEs of the last QP found that a
    /// plain send or receive completed) runs in [`Cq::poll_hot`], compiled
    /// here and calling nothing; anything else continues in an
    /// out-of-line function that this one ends by jumping to (it returns
    /// the same register pair), not calling: no result is kept across a
    /// call, and the library's dispatch jumps here too.
    #[inline(always)]
    pub(crate) fn poll_wcs(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        match self.poll_hot(wc) {
            Hot::Done(n) => Ok(n),
            Hot::Start => self.poll_start(wc),
            Hot::At { n, ci } => self.poll_from(wc, n, ci),
            Hot::Resp { ci, opcode } => self.poll_resp(wc, ci, opcode),
        }
    }

    /// The common case of [`Cq::poll_wcs`], in one straight line (no
    /// loop, whose carried state would need saved registers): the first
    /// CQE, if it is of the last hit's QP and a plain send completed it.
    /// `Hot::Done` after the whole poll (that CQE and no other written
    /// yet, or room for no more, or none at all); `Hot::Start` with
    /// nothing done (the QP table changed, or a cleaner wants in: the
    /// owner stepped back out); `Hot::Resp` for a plain receive's CQE
    /// (parsed in [`Cq::poll_resp`], whose registers are not saved
    /// here); `Hot::At` with the owner in, `n` completions reported up
    /// to consumer index `ci`, whose CQE (the first one, of another kind,
    /// or the next one) it leaves to the general path.
    #[inline(always)]
    fn poll_hot(&mut self, wc: &mut [Wc]) -> Hot {
        if self.lookup.uctx.table().generation() != self.lookup.generation
            || !self.mem.owner_try_enter()
        {
            return Hot::Start;
        }
        let ci = self.mem.cons_index.load(Ordering::Relaxed);
        let (Some(out), Some(cqe)) = (wc.first_mut(), self.cqes.sw_cqe(ci)) else {
            // Nothing consumed: the consumer index stands.
            self.mem.owner_exit();
            return Hot::Done(0);
        };
        match self.lookup.complete_hot(cqe, out) {
            Hot1::Req => {}
            Hot1::Resp(opcode) => return Hot::Resp { ci, opcode },
            Hot1::Other => return Hot::At { n: 0, ci },
        }
        match self.hot_end(wc, 1, ci.wrapping_add(1)) {
            End::Done(n) => Hot::Done(n),
            End::More { n, ci } => Hot::At { n, ci },
        }
    }

    /// The end of [`Cq::poll_hot`] and [`Cq::poll_resp`], after the first
    /// CQE (`n` completions, 0 or 1, the consumer index `ci` past it):
    /// `End::More` if there is room for more and the next CQE is written,
    /// else the poll's end.
    #[inline(always)]
    fn hot_end(&mut self, wc: &[Wc], n: usize, ci: u32) -> End {
        if n < wc.len() && self.cqes.sw_cqe(ci).is_some() {
            return End::More { n, ci };
        }
        self.finish(ci);
        End::Done(n)
    }

    /// [`Cq::poll_wcs`] when [`Cq::poll_hot`] found the first CQE (at
    /// `ci`, written, of the last hit's QP) to be a plain receive's of
    /// `opcode`: the same straight line as `poll_hot`'s, out of line.
    #[inline(never)]
    fn poll_resp(&mut self, wc: &mut [Wc], ci: u32, opcode: u8) -> Result<usize, RingLost> {
        let (Some(out), Some(e)) = (wc.first_mut(), self.lookup.hit()) else {
            return self.poll_from(wc, 0, ci);
        };
        // One that reports nothing (no queue to retire from: the general
        // path consumes it, parsing it again).
        if !parse_resp(self.cqes.seen_cqe(ci), opcode, e, out) {
            return self.poll_from(wc, 0, ci);
        }
        match self.hot_end(wc, 1, ci.wrapping_add(1)) {
            End::Done(n) => Ok(n),
            End::More { n, ci } => self.poll_from(wc, n, ci),
        }
    }

    /// [`Cq::poll_wcs`] from the start, the general way: refreshes the QP
    /// table snapshot if it changed, waits for a cleaner, then polls.
    #[inline(never)]
    fn poll_start(&mut self, wc: &mut [Wc]) -> Result<usize, RingLost> {
        // QPs created or destroyed since the last poll: CQEs of destroyed
        // QPs must not be reported (one load; a lock only after a change).
        if self.lookup.uctx.table().generation() != self.lookup.generation {
            self.lookup.refresh();
        }
        // A QP may be removing its CQEs (moving the others, advancing the
        // consumer index): wait for it, and keep it out while we consume.
        self.mem.owner_enter();
        let ci = self.mem.cons_index.load(Ordering::Relaxed);
        self.poll_from(wc, 0, ci)
    }

    /// [`Cq::poll_wcs`] as the owner, `n` completions reported and the
    /// CQEs before consumer index `ci` consumed: polls the rest and
    /// finishes.
    #[inline(never)]
    fn poll_from(&mut self, wc: &mut [Wc], mut n: usize, mut ci: u32) -> Result<usize, RingLost> {
        while n < wc.len() {
            let Some(cqe) = self.cqes.sw_cqe(ci) else {
                break;
            };
            ci = ci.wrapping_add(1);
            if self.lookup.complete(cqe, &mut wc[n]) {
                n += 1;
            }
        }
        self.finish(ci);
        Ok(n)
    }

    /// The end of every poll: the consumer index (ours and the device's
    /// doorbell record), then the owner's way out.
    #[inline(always)]
    fn finish(&mut self, ci: u32) {
        self.mem.cons_index.store(ci, Ordering::Relaxed);
        self.db.set_ci(ci);
        self.mem.owner_exit();
    }

    /// Issues RESIZE_CQ for at least `cqe` entries and moves the CQEs not
    /// yet polled to the new ring; returns the new depth. A size that
    /// rounds to the current one sends nothing.
    ///
    /// The device ends the old ring with a RESIZE CQE at its producer
    /// index p and continues at p + 1 in the new ring; the unpolled CQEs
    /// before it move up by one in the new ring, and the consumer index
    /// steps over the RESIZE CQE. So the new ring must hold every unpolled
    /// CQE and the RESIZE CQE's counter (which the device counts as used
    /// until the next poll moves the doorbell's consumer index past it),
    /// and the old ring needs a free entry for the RESIZE CQE itself:
    /// with more unpolled CQEs than that this fails with EINVAL before any
    /// command, keeping them all (as rxe's kernel refuses a size below
    /// its unpolled count, and as the emulated HCA refuses the command).
    ///
    /// The rings are switched only once the RESIZE CQE is found; if the
    /// device has not written it (a device breaking the protocol, which
    /// libmlx5 and the kernel also rely on) within [`RESIZE_CQE_WAIT`],
    /// this fails with EIO and the old ring stays current.
    pub fn resize(&mut self, fd: BorrowedFd<'_>, cq_handle: u32, cqe: u32) -> Result<u32, Errno> {
        if cqe == 0 {
            return Err(Errno::EINVAL);
        }
        let ncqe = (cqe as u64 + 1).next_power_of_two();
        if ncqe > MAX_CQE {
            return Err(Errno::EINVAL);
        }
        let ncqe = ncqe as u32;
        if ncqe == self.cqes.ncqe() {
            return Ok(ncqe - 1);
        }
        // The new ring is the provider's own memory, even for a CQ whose
        // first came from a parent domain's allocator.
        let ring = Arc::new(CqRing::new_in(ncqe, None)?);
        let cmd = ResizeCq {
            response: 0,
            cq_handle,
            cqe: ncqe - 1,
        };
        let drv = mlx5::ResizeCq {
            buf_addr: ring.addr(),
            cqe_size: CQE_SIZE as u16,
            ..Default::default()
        };
        // No QP may clean the old ring while the device switches rings and
        // the unpolled CQEs move.
        self.mem.owner_enter();
        let pending = self.pending();
        let r = if pending >= ncqe.min(self.cqes.ncqe()) {
            Err(Errno::EINVAL)
        } else {
            // switch_ring makes `ring` this CQ's ring, kept until the next
            // resize but one or DESTROY_CQ.
            cmd::resize_cq(fd, &cmd, &drv, &ring)
                .and_then(|_| self.switch_ring(ring, RESIZE_CQE_WAIT))
        };
        self.mem.owner_exit();
        r.map(|_| ncqe - 1)
    }

    /// The CQEs written and not yet consumed: the entries from the
    /// consumer index on whose owner bit says the device wrote them (at
    /// most a ring's worth). Call it as the owner ([`Mem::owner_enter`]).
    fn pending(&self) -> u32 {
        let ci = self.mem.cons_index.load(Ordering::Relaxed);
        let mut n = 0;
        while n < self.cqes.ncqe() && self.cqes.sw_cqe(ci.wrapping_add(n)).is_some() {
            n += 1;
        }
        n
    }

    /// After RESIZE_CQ: finds the RESIZE CQE in the current ring, moves
    /// the unpolled CQEs before it into `new` (a fresh ring) and makes
    /// `new` current, the consumer index past the RESIZE CQE (for
    /// [`CqMemory::clean`] too: call it as the owner, [`Mem::owner_enter`]). The
    /// previous ring stays mapped until the next resize (a late device
    /// write to it must not hit unmapped memory); older ones are released.
    ///
    /// EIO, with nothing switched, if the RESIZE CQE does not appear
    /// within `wait`.
    fn switch_ring(&mut self, new: Arc<CqRing>, wait: std::time::Duration) -> Result<(), Errno> {
        let ncqe = new.ncqe();
        let ci = self.mem.cons_index.load(Ordering::Relaxed);
        // The RESIZE CQE's counter p: the device wrote every entry from
        // the consumer index up to it before answering the command.
        let mut p = ci;
        let mut waited: Option<std::time::Instant> = None;
        loop {
            match self.cqes.sw_cqe(p) {
                Some(c) if c.op_own() >> 4 == cqe_op::RESIZE_CQ => break,
                Some(_) if p.wrapping_sub(ci) < self.cqes.ncqe() => p = p.wrapping_add(1),
                // Not written (yet), or a whole lap without one.
                _ => {
                    let start = *waited.get_or_insert_with(std::time::Instant::now);
                    if start.elapsed() > wait {
                        return Err(Errno::EIO);
                    }
                    std::thread::yield_now();
                }
            }
        }
        // The CQEs ci..p go to counters ci+1..=p of the new ring. More
        // than it holds (a device that accepted a size the unpolled CQEs
        // do not fit) would overwrite each other: the oldest are lost, as
        // in an overrun.
        let n = p.wrapping_sub(ci);
        let lost = n.saturating_sub(ncqe);
        let mut i = ci.wrapping_add(lost);
        while i != p {
            // Seen written above; the device writes it again only after
            // the consumer index passes it.
            let Some(c) = self.cqes.sw_cqe(i) else {
                break;
            };
            let mut c = c.read();
            let to = i.wrapping_add(1);
            c.op_own = (c.op_own & !1) | u8::from(to & ncqe != 0);
            // Nobody else writes the new ring yet (the device starts at
            // p + 1, past every slot written here).
            new.write(to, c);
            i = to;
        }
        self.cqes = new.reader();
        self.listing.update(&self.dir_entry());
        self.mem
            .cons_index
            .store(ci.wrapping_add(lost).wrapping_add(1), Ordering::Relaxed);
        let mut rings = self.mem.rings.lock().unwrap_or_else(|p| p.into_inner());
        rings.push(new);
        let old = rings.len().saturating_sub(2);
        rings.drain(..old);
        Ok(())
    }

    /// Arms the CQ (no system call: doorbell record, then the UAR's CQ
    /// doorbell). The next CQE (with `solicited_only`, the next solicited
    /// or error CQE) raises a completion event.
    ///
    /// The arm carries the sequence number of the events read so far
    /// (stepped by [`SharedCq::completion_event`], not here): arming again
    /// before an event is read repeats it, which the device accepts; an
    /// arm made before an event the device raised but the library has not
    /// read yet carries a stale one, which the device ignores (that event
    /// is there to be read).
    pub fn arm(&self, solicited_only: bool) {
        let sn = self.mem.arm_sn.load(Ordering::Relaxed) & 3;
        // We are the only writer of the consumer index.
        let ci = self.db.ci();
        let cmd = if solicited_only { ARM_SOLICITED } else { 0 };
        let v = sn << 28 | cmd | ci;
        self.db.set_arm(v);
        let Some(uar) = &self.uar else {
            return;
        };
        // CQs arm from `&self`, so from several threads: each doorbell
        // reaches the register whole (`Doorbell::ring`).
        uar.ring((u64::from(v) << 32 | u64::from(self.cqn)).to_be());
    }

    /// Entries in the ring minus one: the depth reported to the user.
    #[cfg(test)]
    pub fn cqe(&self) -> u32 {
        self.cqes.ncqe() - 1
    }

    /// CQEs consumed so far.
    #[cfg(test)]
    fn cons_index(&self) -> u32 {
        self.mem.cons_index.load(Ordering::Relaxed)
    }

    /// Keeps the ring and doorbell record alive after this value drops.
    pub fn memory(&self) -> CqMemory {
        CqMemory {
            mem: Arc::clone(&self.mem),
        }
    }
}

/// The work-completion status for an error CQE's syndrome.
fn status_of(syndrome: u8) -> u32 {
    match syndrome {
        syndrome::LOCAL_LENGTH_ERR => wc_status::LOC_LEN_ERR,
        syndrome::LOCAL_QP_OP_ERR => wc_status::LOC_QP_OP_ERR,
        syndrome::LOCAL_PROT_ERR => wc_status::LOC_PROT_ERR,
        syndrome::WR_FLUSH_ERR => wc_status::WR_FLUSH_ERR,
        syndrome::MW_BIND_ERR => wc_status::MW_BIND_ERR,
        syndrome::BAD_RESP_ERR => wc_status::BAD_RESP_ERR,
        syndrome::LOCAL_ACCESS_ERR => wc_status::LOC_ACCESS_ERR,
        syndrome::REMOTE_INVAL_REQ_ERR => wc_status::REM_INV_REQ_ERR,
        syndrome::REMOTE_ACCESS_ERR => wc_status::REM_ACCESS_ERR,
        syndrome::REMOTE_OP_ERR => wc_status::REM_OP_ERR,
        syndrome::TRANSPORT_RETRY_EXC_ERR => wc_status::RETRY_EXC_ERR,
        syndrome::RNR_RETRY_EXC_ERR => wc_status::RNR_RETRY_EXC_ERR,
        syndrome::REMOTE_ABORTED_ERR => wc_status::REM_ABORT_ERR,
        _ => wc_status::GENERAL_ERR,
    }
}

/// Parses one CQE of QP `e` (retiring its WQE) into `out`; `false` for
/// CQEs that report nothing (resize, tag matching, signature errors, or a
/// queue the QP does not have). A successful send completion, the most
/// common CQE, is parsed inline; the others out of line.
#[inline(always)]
fn parse(c: Cqe<'_>, e: &QpEntry, out: &mut Wc) -> bool {
    let opcode = c.op_own() >> 4;
    if opcode == cqe_op::REQ {
        parse_req(c, e, out)
    } else if opcode <= cqe_op::RESP_SEND_INV {
        parse_resp(c, opcode, e, out)
    } else {
        parse_other(c, e, out)
    }
}

/// [`parse`] of a successful requester CQE.
#[inline(always)]
fn parse_req(c: Cqe<'_>, e: &QpEntry, out: &mut Wc) -> bool {
    // The WQE opcode: bits 31..24.
    let op = c.sop_drop_qpn().to_bytes()[0];
    // The completion prepared for the opcode, copied whole (in vector
    // registers: no general-purpose register held for its words), then
    // what is this CQE's; the `wr_id` last (`out` is scratch until the
    // caller counts it: `false` leaves it unreported).
    let w = out.words_mut();
    *w = REQ_WC[usize::from(op)];
    w[3] = e.qpn_word;
    // RDMA READ reports the bytes read; the others a fixed length.
    if op == wqe_op::RDMA_READ {
        w[2] = Wc::pair(0, c.byte_cnt().get());
    }
    let Some(wr_id) = e.sq.complete(c.wqe_counter().get()) else {
        return false;
    };
    w[0] = wr_id;
    true
}

/// [`parse`] of a successful responder CQE (`opcode` is one of
/// `RESP_WR_IMM..=RESP_SEND_INV`).
#[inline(always)]
fn parse_resp(c: Cqe<'_>, opcode: u8, e: &QpEntry, out: &mut Wc) -> bool {
    let Some(wr_id) = recv_wr_id(e, c.wqe_counter().get()) else {
        return false;
    };
    // Each word or field is stored as soon as it is known (the whole
    // struct at the end would keep every value live at once, and spill
    // some). `opcode >> 4` of a byte: below 16.
    let r = RESP_WC[usize::from(opcode & 0xF)];
    let w = out.words_mut();
    w[0] = wr_id;
    w[1] = Wc::pair(wc_status::SUCCESS, r.opcode);
    w[2] = Wc::pair(0, c.byte_cnt().get());
    out.qp_num = e.qpn;
    // Kept in wire (big-endian) order, as `ib_uverbs_wc` has it.
    let imm = u32::from_ne_bytes(c.imm_inval_pkey().to_bytes());
    // The immediate (wire order) or the invalidated rkey (host order).
    out.ex = (imm & r.imm_mask) | (u32::from_be(imm) & r.rkey_mask);
    out.pkey_index = (u32::from_be(imm) & 0xFFFF) as u16;
    let flags_rqpn = c.flags_rqpn().get();
    out.wc_flags = if (flags_rqpn >> 28) & 3 != 0 {
        r.flags | wc_flags::GRH
    } else {
        r.flags
    };
    out.src_qp = flags_rqpn & 0xFF_FFFF;
    out.sl = ((flags_rqpn >> 24) & 0xF) as u8;
    out.slid = c.slid().get();
    out.dlid_path_bits = c.ml_path() & 0x7F;
    out.port_num = 0;
    out.reserved = 0;
    true
}

/// What a successful responder completion reports for its CQE opcode.
#[derive(Clone, Copy)]
struct RespWc {
    /// The work completion's opcode.
    opcode: u32,
    /// Its flags (GRH comes from the CQE).
    flags: u32,
    /// All ones if `ex` is the immediate data.
    imm_mask: u32,
    /// All ones if `ex` is the invalidated rkey.
    rkey_mask: u32,
}

/// [`RespWc`] by CQE opcode (`RESP_WR_IMM..=RESP_SEND_INV` filled; 16
/// entries, so any 4-bit opcode indexes it).
const RESP_WC: [RespWc; 16] = {
    let recv = RespWc {
        opcode: wc_opcode::RECV,
        flags: 0,
        imm_mask: 0,
        rkey_mask: 0,
    };
    let mut t = [recv; 16];
    t[cqe_op::RESP_WR_IMM as usize] = RespWc {
        opcode: wc_opcode::RECV_RDMA_WITH_IMM,
        flags: wc_flags::WITH_IMM,
        imm_mask: !0,
        rkey_mask: 0,
    };
    t[cqe_op::RESP_SEND_IMM as usize] = RespWc {
        opcode: wc_opcode::RECV,
        flags: wc_flags::WITH_IMM,
        imm_mask: !0,
        rkey_mask: 0,
    };
    t[cqe_op::RESP_SEND_INV as usize] = RespWc {
        opcode: wc_opcode::RECV,
        flags: wc_flags::WITH_INVALIDATE,
        imm_mask: 0,
        rkey_mask: !0,
    };
    t
};

/// The words of a successful requester completion of `opcode` with
/// `flags` and byte count `len` ([`Wc::words_mut`]); `wr_id` and the QP
/// number are the CQE's.
const fn req_wc(opcode: u32, flags: u32, len: u32) -> [u64; 6] {
    [
        0,
        Wc::pair(wc_status::SUCCESS, opcode),
        Wc::pair(0, len),
        0,
        Wc::pair(0, flags),
        0,
    ]
}

/// The successful requester completions ([`req_wc`]) by WQE opcode, all
/// 256 (any byte indexes it): what libmlx5 reports for each, and a SEND
/// for the ones plain verbs never posts. RDMA READ's byte count is the
/// CQE's.
const REQ_WC: [[u64; 6]; 256] = {
    let mut t = [req_wc(wc_opcode::SEND, 0, 0); 256];
    t[wqe_op::RDMA_WRITE as usize] = req_wc(wc_opcode::RDMA_WRITE, 0, 0);
    t[wqe_op::RDMA_WRITE_IMM as usize] = req_wc(wc_opcode::RDMA_WRITE, wc_flags::WITH_IMM, 0);
    t[wqe_op::SEND_IMM as usize] = req_wc(wc_opcode::SEND, wc_flags::WITH_IMM, 0);
    t[wqe_op::RDMA_READ as usize] = req_wc(wc_opcode::RDMA_READ, 0, 0);
    t[wqe_op::ATOMIC_CS as usize] = req_wc(wc_opcode::COMP_SWAP, 0, 8);
    t[wqe_op::ATOMIC_FA as usize] = req_wc(wc_opcode::FETCH_ADD, 0, 8);
    t[wqe_op::UMR as usize] = req_wc(wc_opcode::BIND_MW, 0, 0);
    t[wqe_op::LOCAL_INV_OLD as usize] = req_wc(wc_opcode::LOCAL_INV, 0, 0);
    t
};

/// [`parse`] of every CQE but a successful requester one.
#[inline(never)]
fn parse_other(c: Cqe<'_>, e: &QpEntry, out: &mut Wc) -> bool {
    let opcode = c.op_own() >> 4;
    let wqe_counter = c.wqe_counter().get();
    match opcode {
        // `parse` takes these; kept for callers of this function alone.
        cqe_op::REQ => return parse_req(c, e, out),
        cqe_op::RESP_WR_IMM..=cqe_op::RESP_SEND_INV => return parse_resp(c, opcode, e, out),
        cqe_op::REQ_ERR | cqe_op::RESP_ERR => {
            let wr_id = if opcode == cqe_op::REQ_ERR {
                e.sq.complete(wqe_counter)
            } else {
                recv_wr_id(e, wqe_counter)
            };
            let Some(wr_id) = wr_id else {
                return false;
            };
            *out = Wc {
                wr_id,
                status: status_of(c.syndrome()),
                vendor_err: c.vendor_err_synd().into(),
                qp_num: e.qpn,
                ..Wc::default()
            };
        }
        _ => return false,
    }
    true
}

/// The `wr_id` of a receive completion: from the SRQ by WQE index, or the
/// RQ's oldest.
#[inline]
fn recv_wr_id(e: &QpEntry, wqe_counter: u16) -> Option<u64> {
    match &e.srq {
        Some(s) => s.complete(wqe_counter),
        None => e.rq.complete(),
    }
}

#[cfg(test)]
mod tests;
