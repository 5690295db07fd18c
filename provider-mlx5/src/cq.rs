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
/// ([`Mapping::queue_in`](crate::hw::map::Mapping::queue_in)).
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
    pub fn cqe(&self) -> u32 {
        self.cqes.ncqe() - 1
    }

    /// The CQ number (for diagnostics).
    pub fn cqn(&self) -> u32 {
        self.cqn
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
mod tests {
    use super::*;
    use crate::uctx::Limits;
    use crate::wq::{RqShared, SqShared, SrqShared};
    use rverbs_abi::mlx5::prm::Cqe64;

    const QPN: u32 = 0x12_3456;

    /// [`parse`] of a CQE given as bytes.
    fn parse_bytes(c: &[u8; 64], e: &QpEntry) -> Option<Wc> {
        let c: Cqe64 = zerocopy::transmute!(*c);
        let mut w = Wc::default();
        parse(Cqe::of(&c), e, &mut w).then_some(w)
    }
    const UIDX: u32 = 7;

    struct Fixture {
        uctx: Arc<Uctx>,
        sq: Arc<SqShared>,
        rq: Arc<RqShared>,
        cq: Cq,
    }

    fn fixture(ncqe: u32) -> Fixture {
        fixture_fenced(ncqe, crate::hw::membarrier::available())
    }

    /// [`fixture`] with the owner/cleaner handshake on asymmetric fences
    /// (`membarrier`) or on full fences on both sides.
    fn fixture_fenced(ncqe: u32, asymmetric: bool) -> Fixture {
        let uctx = Uctx::for_tests(Limits {
            cqe_version: 1,
            ..Default::default()
        });
        let sq = Arc::new(SqShared::new(8));
        let rq = Arc::new(RqShared::new(4));
        uctx.register_qp(
            UIDX,
            Arc::new(QpEntry::new(QPN, Arc::clone(&sq), Arc::clone(&rq), None)),
        );
        let mem = Mem::new(&uctx, ncqe).unwrap();
        mem.set_asymmetric(asymmetric);
        let cq = Cq::new(&uctx, Arc::new(mem), 0x99);
        Fixture { uctx, sq, rq, cq }
    }

    /// A CQE with the fields the parser reads.
    fn cqe(opcode: u8, wqe_op: u8, wqe_counter: u16, owner: bool) -> [u8; 64] {
        let mut c = [0u8; 64];
        c[32..36].copy_from_slice(&UIDX.to_be_bytes());
        c[56..60].copy_from_slice(&((wqe_op as u32) << 24 | QPN).to_be_bytes());
        c[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
        c[63] = opcode << 4 | owner as u8;
        c
    }

    fn put(cq: &Cq, n: u32, c: &[u8; 64]) {
        cq.cqes.ring().write(n, zerocopy::transmute!(*c));
    }

    fn entry(sq: &Arc<SqShared>, rq: &Arc<RqShared>, srq: Option<Arc<SrqShared>>) -> QpEntry {
        QpEntry::new(QPN, Arc::clone(sq), Arc::clone(rq), srq)
    }

    #[test]
    fn requester_opcodes() {
        let f = fixture(4);
        let e = entry(&f.sq, &f.rq, None);
        let cases = [
            (wqe_op::RDMA_WRITE, wc_opcode::RDMA_WRITE, 0, 0),
            (
                wqe_op::RDMA_WRITE_IMM,
                wc_opcode::RDMA_WRITE,
                wc_flags::WITH_IMM,
                0,
            ),
            (wqe_op::SEND, wc_opcode::SEND, 0, 0),
            (wqe_op::SEND_INVAL, wc_opcode::SEND, 0, 0),
            (wqe_op::SEND_IMM, wc_opcode::SEND, wc_flags::WITH_IMM, 0),
            (wqe_op::RDMA_READ, wc_opcode::RDMA_READ, 0, 4000),
            (wqe_op::ATOMIC_CS, wc_opcode::COMP_SWAP, 0, 8),
            (wqe_op::ATOMIC_FA, wc_opcode::FETCH_ADD, 0, 8),
        ];
        for (i, (wop, op, flags, len)) in cases.into_iter().enumerate() {
            let idx = (i % 8) as u16;
            f.sq.set(idx as usize, 1000 + i as u64, i as u32 * 3);
            let mut c = cqe(cqe_op::REQ, wop, idx + 8, false);
            c[44..48].copy_from_slice(&4000u32.to_be_bytes());
            let w = parse_bytes(&c, &e).unwrap();
            assert_eq!(
                (w.wr_id, w.status, w.opcode, w.wc_flags, w.byte_len, w.qp_num),
                (1000 + i as u64, wc_status::SUCCESS, op, flags, len, QPN),
                "wqe opcode {wop:#x}"
            );
            assert_eq!(f.sq.retired(), i as u32 * 3 + 1);
        }
    }

    #[test]
    fn responder_opcodes_and_fields() {
        let f = fixture(4);
        let e = entry(&f.sq, &f.rq, None);
        for i in 0..4 {
            f.rq.set_wrid(i, 50 + i as u64);
        }
        let mut c = cqe(cqe_op::RESP_WR_IMM, 0, 0, false);
        c[17] = 0x85;
        c[22..24].copy_from_slice(&0x0102u16.to_be_bytes());
        c[24..28].copy_from_slice(&(0x1 << 28 | 0x5 << 24 | 0xABCDEF_u32).to_be_bytes());
        c[36..40].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
        c[44..48].copy_from_slice(&77u32.to_be_bytes());
        let w = parse_bytes(&c, &e).unwrap();
        assert_eq!(w.wr_id, 50);
        assert_eq!(w.opcode, wc_opcode::RECV_RDMA_WITH_IMM);
        assert_eq!(w.wc_flags, wc_flags::WITH_IMM | wc_flags::GRH);
        assert_eq!(u32::from_be(w.ex), 0xdeadbeef);
        assert_eq!(w.byte_len, 77);
        assert_eq!(
            (w.src_qp, w.sl, w.slid, w.dlid_path_bits),
            (0xABCDEF, 5, 0x0102, 5)
        );
        assert_eq!(w.pkey_index, 0xbeef);
        assert_eq!(w.status, wc_status::SUCCESS);

        let w = parse_bytes(&cqe(cqe_op::RESP_SEND, 0, 0, false), &e).unwrap();
        assert_eq!((w.wr_id, w.opcode, w.wc_flags), (51, wc_opcode::RECV, 0));

        c[63] = cqe_op::RESP_SEND_IMM << 4;
        c[24..28].copy_from_slice(&0u32.to_be_bytes());
        let w = parse_bytes(&c, &e).unwrap();
        assert_eq!(
            (w.wr_id, w.opcode, w.wc_flags),
            (52, wc_opcode::RECV, wc_flags::WITH_IMM)
        );
        assert_eq!(u32::from_be(w.ex), 0xdeadbeef);

        c[63] = cqe_op::RESP_SEND_INV << 4;
        let w = parse_bytes(&c, &e).unwrap();
        assert_eq!(
            (w.wr_id, w.opcode, w.wc_flags),
            (53, wc_opcode::RECV, wc_flags::WITH_INVALIDATE)
        );
        assert_eq!(w.ex, 0xdeadbeef);
        assert_eq!(f.rq.retired(), 4);
    }

    #[test]
    fn srq_receive_uses_wqe_counter() {
        let f = fixture(4);
        let srq = Arc::new(SrqShared::new(16));
        srq.post(9, 909);
        let e = entry(&f.sq, &f.rq, Some(Arc::clone(&srq)));
        let w = parse_bytes(&cqe(cqe_op::RESP_SEND, 0, 9, false), &e).unwrap();
        assert_eq!(w.wr_id, 909);
        assert_eq!(srq.freed(0), 1 << 9);
        let mut c = cqe(cqe_op::RESP_ERR, 0, 9, false);
        c[55] = 0x05;
        let w = parse_bytes(&c, &e).unwrap();
        assert_eq!((w.wr_id, w.status), (909, wc_status::WR_FLUSH_ERR));
        // RQ untouched.
        assert_eq!(f.rq.retired(), 0);
    }

    #[test]
    fn error_syndromes() {
        let f = fixture(4);
        let e = entry(&f.sq, &f.rq, None);
        let table = [
            (0x01, wc_status::LOC_LEN_ERR),
            (0x02, wc_status::LOC_QP_OP_ERR),
            (0x04, wc_status::LOC_PROT_ERR),
            (0x05, wc_status::WR_FLUSH_ERR),
            (0x06, wc_status::MW_BIND_ERR),
            (0x10, wc_status::BAD_RESP_ERR),
            (0x11, wc_status::LOC_ACCESS_ERR),
            (0x12, wc_status::REM_INV_REQ_ERR),
            (0x13, wc_status::REM_ACCESS_ERR),
            (0x14, wc_status::REM_OP_ERR),
            (0x15, wc_status::RETRY_EXC_ERR),
            (0x16, wc_status::RNR_RETRY_EXC_ERR),
            (0x22, wc_status::REM_ABORT_ERR),
            (0x03, wc_status::GENERAL_ERR),
            (0xff, wc_status::GENERAL_ERR),
        ];
        f.sq.set(3, 33, 10);
        for i in 0..4 {
            f.rq.set_wrid(i, 44);
        }
        for (syn, status) in table {
            let mut c = cqe(cqe_op::REQ_ERR, wqe_op::SEND, 3, false);
            c[54] = 0x42;
            c[55] = syn;
            let w = parse_bytes(&c, &e).unwrap();
            assert_eq!(
                (w.wr_id, w.status, w.vendor_err, w.qp_num),
                (33, status, 0x42, QPN)
            );
            assert_eq!((w.opcode, w.byte_len, w.wc_flags), (0, 0, 0));
            assert_eq!(f.sq.retired(), 11);
            c[63] = cqe_op::RESP_ERR << 4;
            let w = parse_bytes(&c, &e).unwrap();
            assert_eq!((w.wr_id, w.status, w.vendor_err), (44, status, 0x42));
        }
        // Resize / unknown CQEs report nothing.
        assert!(parse_bytes(&cqe(5, 0, 0, false), &e).is_none());
    }

    #[test]
    fn owner_bit_and_wrap() {
        let mut f = fixture(2);
        for i in 0..8 {
            f.sq.set_wrid(i, i as u64);
        }
        let mut wc = [Wc::default(); 4];
        // Fresh ring: nothing; SET_CI written anyway.
        assert_eq!(f.cq.poll(&mut wc), 0);
        // Lap 0: owner 0.
        put(&f.cq, 0, &cqe(cqe_op::REQ, wqe_op::SEND, 0, false));
        put(&f.cq, 1, &cqe(cqe_op::REQ, wqe_op::SEND, 1, false));
        assert_eq!(f.cq.poll(&mut wc[..1]), 1);
        assert_eq!(wc[0].wr_id, 0);
        assert_eq!(f.cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, 1);
        assert_eq!(f.cq.db.load(0), 2);
        // Entry 0 still holds the lap-0 CQE: with owner 0 it is stale now.
        assert_eq!(f.cq.poll(&mut wc), 0);
        // Lap 1: owner 1.
        put(&f.cq, 2, &cqe(cqe_op::REQ, wqe_op::SEND, 2, true));
        put(&f.cq, 3, &cqe(cqe_op::REQ, wqe_op::SEND, 3, false)); // wrong owner
        assert_eq!(f.cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, 2);
        assert_eq!(f.cq.cons_index(), 3);
        assert_eq!(f.cq.cqe(), 1);
    }

    #[test]
    fn unknown_and_new_qps() {
        let mut f = fixture(8);
        let mut wc = [Wc::default(); 4];
        // A CQE of an index nobody registered: consumed, not reported.
        let mut c = cqe(cqe_op::REQ, wqe_op::SEND, 0, false);
        c[32..36].copy_from_slice(&99u32.to_be_bytes());
        put(&f.cq, 0, &c);
        assert_eq!(f.cq.poll(&mut wc), 0);
        assert_eq!(f.cq.cons_index(), 1);
        // A QP registered after the CQ's snapshot is found on refresh.
        let sq2 = Arc::new(SqShared::new(2));
        sq2.set_wrid(1, 4242);
        f.uctx.register_qp(
            99,
            Arc::new(QpEntry::with_queues(5, Some(Arc::clone(&sq2)), None, None)),
        );
        let mut c = cqe(cqe_op::REQ, wqe_op::SEND, 1, false);
        c[32..36].copy_from_slice(&99u32.to_be_bytes());
        put(&f.cq, 1, &c);
        assert_eq!(f.cq.poll(&mut wc), 1);
        assert_eq!((wc[0].wr_id, wc[0].qp_num), (4242, 5));
        // After unregistering, its CQEs vanish.
        f.uctx.unregister_qp(99);
        put(&f.cq, 2, &c);
        assert_eq!(f.cq.poll(&mut wc), 0);
        assert_eq!(f.cq.cons_index(), 3);
    }

    #[test]
    fn cqes_of_queues_a_qp_lacks_are_consumed_unreported() {
        let mut f = fixture(8);
        let mut wc = [Wc::default(); 4];
        // QP 99 has neither a send nor a receive queue.
        f.uctx
            .register_qp(99, Arc::new(QpEntry::with_queues(5, None, None, None)));
        let of_99 = |op: u8, wqe_op: u8, counter: u16| {
            let mut c = cqe(op, wqe_op, counter, false);
            c[32..36].copy_from_slice(&99u32.to_be_bytes());
            c
        };
        // Each kind first alone (the straight path takes the first CQE),
        // then with the fixture QP's send completion behind it.
        put(&f.cq, 0, &of_99(cqe_op::REQ, wqe_op::SEND, 0));
        assert_eq!(f.cq.poll(&mut wc), 0);
        put(&f.cq, 1, &of_99(cqe_op::RESP_SEND, 0, 0));
        assert_eq!(f.cq.poll(&mut wc), 0);
        assert_eq!(f.cq.cons_index(), 2);
        f.sq.set_wrid(0, 77);
        put(&f.cq, 2, &of_99(cqe_op::REQ, wqe_op::SEND, 1));
        put(&f.cq, 3, &of_99(cqe_op::RESP_SEND, 0, 1));
        put(&f.cq, 4, &cqe(cqe_op::REQ, wqe_op::SEND, 0, false));
        assert_eq!(f.cq.poll(&mut wc), 1);
        assert_eq!((wc[0].wr_id, wc[0].qp_num), (77, QPN));
        assert_eq!(f.cq.cons_index(), 5);
        // A send completion of its own QP, then one of 99: the first
        // reported, the second consumed.
        put(&f.cq, 5, &cqe(cqe_op::REQ, wqe_op::SEND, 0, false));
        put(&f.cq, 6, &of_99(cqe_op::REQ, wqe_op::SEND, 2));
        assert_eq!(f.cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, 77);
        assert_eq!(f.cq.cons_index(), 7);
    }

    #[test]
    fn arm_writes_doorbell_record() {
        let mut f = fixture(4);
        put(&f.cq, 0, &cqe(cqe_op::REQ, wqe_op::SEND, 0, false));
        let mut wc = [Wc::default(); 1];
        assert_eq!(f.cq.poll(&mut wc), 1);
        // Sequence number 0 until an event is read, however often armed.
        f.cq.arm(false);
        assert_eq!(f.cq.db.load(1), 1);
        f.cq.arm(true);
        assert_eq!(f.cq.db.load(1), ARM_SOLICITED | 1);
        f.cq.arm(false);
        assert_eq!(f.cq.db.load(1), 1);
        // Each event read steps it, modulo 4.
        let mem = f.cq.memory();
        mem.completion_event();
        f.cq.arm(false);
        assert_eq!(f.cq.db.load(1), 1 << 28 | 1);
        for _ in 0..3 {
            mem.completion_event();
        }
        f.cq.arm(true);
        assert_eq!(f.cq.db.load(1), ARM_SOLICITED | 1);
    }

    #[test]
    fn resize_moves_unpolled_cqes() {
        let mut f = fixture(4);
        for i in 0..8 {
            f.sq.set_wrid(i, 100 + i as u64);
        }
        for n in 0..3u32 {
            put(&f.cq, n, &cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false));
        }
        put(&f.cq, 3, &cqe(cqe_op::RESIZE_CQ, 0, 0, false));
        let mut wc = [Wc::default(); 4];
        assert_eq!(f.cq.poll(&mut wc[..1]), 1);
        let old = f.cq.cqes.ring().addr();
        f.cq.switch_ring(Arc::new(CqRing::new(8).unwrap()), RESIZE_CQE_WAIT)
            .unwrap();
        assert_ne!(f.cq.cqes.ring().addr(), old);
        assert_eq!((f.cq.cons_index(), f.cq.cqe()), (2, 7));
        // The device continues at counter 4 of the new ring.
        put(&f.cq, 4, &cqe(cqe_op::REQ, wqe_op::SEND, 5, false));
        assert_eq!(f.cq.poll(&mut wc), 3);
        assert_eq!(
            wc[..3].iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            [101, 102, 105]
        );
        assert_eq!(f.cq.poll(&mut wc), 0);
        assert_eq!(f.cq.mem.rings.lock().unwrap().len(), 2);

        // Shrinking across a lap: counters 8 (owner 1 in 8 entries) and
        // the RESIZE CQE at 9.
        for n in 5..8u32 {
            put(&f.cq, n, &cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false));
        }
        put(&f.cq, 8, &cqe(cqe_op::REQ, wqe_op::SEND, 0, true));
        put(&f.cq, 9, &cqe(cqe_op::RESIZE_CQ, 0, 0, true));
        assert_eq!(f.cq.poll(&mut wc[..3]), 3); // counters 5..7
        f.cq.switch_ring(Arc::new(CqRing::new(2).unwrap()), RESIZE_CQE_WAIT)
            .unwrap();
        assert_eq!(f.cq.cons_index(), 9);
        assert_eq!(f.cq.mem.rings.lock().unwrap().len(), 2);
        // Counter 8 moved to counter 9: slot 1, owner (9 & 2 != 0) = 0.
        assert_eq!(f.cq.poll(&mut wc), 1);
        assert_eq!(wc[0].wr_id, 100);
        put(&f.cq, 10, &cqe(cqe_op::REQ, wqe_op::SEND, 1, true));
        assert_eq!(f.cq.poll(&mut wc), 1);
        assert_eq!((wc[0].wr_id, f.cq.cons_index()), (101, 11));
    }

    /// The unpolled count `resize` checks a new size against, from the
    /// owner bits; without a RESIZE CQE the rings are not switched.
    #[test]
    fn resize_counts_pending_and_waits_for_its_cqe() {
        let mut f = fixture(4);
        for i in 0..8 {
            f.sq.set_wrid(i, 100 + i as u64);
        }
        assert_eq!(f.cq.pending(), 0);
        for n in 0..3u32 {
            put(&f.cq, n, &cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false));
        }
        assert_eq!(f.cq.pending(), 3);
        let mut wc = [Wc::default(); 1];
        assert_eq!(f.cq.poll(&mut wc), 1);
        assert_eq!(f.cq.pending(), 2);
        // Counters 3 and 4 (second lap, owner 1): a full ring.
        put(&f.cq, 3, &cqe(cqe_op::REQ, wqe_op::SEND, 3, false));
        put(&f.cq, 4, &cqe(cqe_op::REQ, wqe_op::SEND, 4, true));
        assert_eq!(f.cq.pending(), 4);
        // No RESIZE CQE after them: EIO, the old ring still current and
        // its CQEs all there.
        let old = f.cq.cqes.ring().addr();
        let r = f.cq.switch_ring(
            Arc::new(CqRing::new(8).unwrap()),
            std::time::Duration::from_millis(20),
        );
        assert_eq!(r, Err(Errno::EIO));
        assert_eq!(f.cq.cqes.ring().addr(), old);
        let mut wc = [Wc::default(); 8];
        assert_eq!(f.cq.poll(&mut wc), 4);
        assert_eq!(
            wc[..4].iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            [101, 102, 103, 104]
        );
    }

    #[test]
    fn fresh_ring_is_invalid() {
        let f = fixture(4);
        for i in 0..4 {
            assert_eq!(f.cq.cqes.ring().read(i).op_own, 0xF0);
        }
    }

    /// Threads arming one CQ at once write its UAR doorbell whole: a
    /// reader watching the (fake) register only ever sees one of the
    /// 64-bit values an arm can write, never halves of two.
    #[test]
    fn concurrent_arms_write_whole_doorbells() {
        let mut f = fixture(4);
        let page = Arc::new(crate::hw::map::Mapping::anon(4096).unwrap());
        f.cq.uar = Doorbell::new(&page, 0);
        let reg = f.cq.uar.clone().unwrap();
        let cq = &f.cq;
        let valid = |raw: u64| {
            let v = u64::from_be(raw);
            let (hi, lo) = ((v >> 32) as u32, v as u32);
            v == 0 || (lo == 0x99 && hi & 0x0FFF_FFFF & !ARM_SOLICITED == 0)
        };
        let done = AtomicU32::new(0);
        std::thread::scope(|s| {
            for t in 0..4 {
                let done = &done;
                s.spawn(move || {
                    for _ in 0..20_000 {
                        cq.arm(t % 2 == 1);
                    }
                    done.fetch_add(1, Ordering::Release);
                });
            }
            // Watches until every thread is done (at least one look).
            loop {
                let finished = done.load(Ordering::Acquire) == 4;
                let v = reg.load();
                assert!(valid(v), "torn doorbell {:#018x}", u64::from_be(v));
                if finished {
                    break;
                }
            }
        });
        assert!(valid(reg.load()));
        assert_ne!(reg.load(), 0);
    }

    /// Cleaning one QP's CQEs out of the unpolled part of the ring (across
    /// a lap boundary) removes exactly those, returns the SRQ WQEs of its
    /// receive CQEs, keeps the other QP's CQEs in order with the owner
    /// bits of their new entries, and advances the consumer index and its
    /// doorbell word past the gap.
    #[test]
    fn clean_removes_one_qps_cqes() {
        let mut f = fixture(4);
        let sq2 = Arc::new(SqShared::new(4));
        for i in 0..4 {
            sq2.set_wrid(i, 800 + i as u64);
        }
        f.uctx.register_qp(
            8,
            Arc::new(QpEntry::with_queues(5, Some(Arc::clone(&sq2)), None, None)),
        );
        let other = |n: u16, owner| {
            let mut c = cqe(cqe_op::REQ, wqe_op::SEND, n, owner);
            c[32..36].copy_from_slice(&8u32.to_be_bytes());
            c[56..60].copy_from_slice(&((wqe_op::SEND as u32) << 24 | 5).to_be_bytes());
            c
        };
        let mut wc = [Wc::default(); 4];
        for n in 0..2u32 {
            put(&f.cq, n, &cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false));
        }
        assert_eq!(f.cq.poll(&mut wc), 2);
        put(&f.cq, 2, &other(0, false));
        put(&f.cq, 3, &cqe(cqe_op::RESP_SEND, 0, 5, false));
        put(&f.cq, 4, &other(1, true));
        put(&f.cq, 5, &cqe(cqe_op::REQ_ERR, wqe_op::SEND, 2, true));
        let srq = SrqShared::new(8);
        let mem = f.cq.memory();
        assert_eq!(mem.clean(UIDX, QPN, Some(&srq)), 2);
        assert_eq!(srq.freed(0), 1 << 5);
        assert_eq!(srq.completed(), 1);
        assert_eq!(f.cq.db.load(0), 4);
        // Nothing left of that QP; a second cleaning finds nothing.
        assert_eq!(mem.clean(UIDX, QPN, Some(&srq)), 0);
        // A CQE the device writes later is found after the moved ones.
        put(&f.cq, 6, &other(2, true));
        assert_eq!(f.cq.poll(&mut wc), 3);
        assert_eq!(
            wc[..3]
                .iter()
                .map(|w| (w.wr_id, w.qp_num))
                .collect::<Vec<_>>(),
            [(800, 5), (801, 5), (802, 5)]
        );
        assert_eq!(f.cq.cons_index(), 7);
        assert_eq!(f.cq.poll(&mut wc), 0);
        assert_eq!(f.cq.db.load(0), 7);
    }

    /// CQE version 0 names QPs by number: polling finds each QP by the
    /// number in `sop_drop_qpn` (whatever the order of user indexes and
    /// numbers), and cleaning removes one QP's CQEs by number.
    #[test]
    fn version0_looks_up_by_qpn() {
        let uctx = Uctx::for_tests(Limits {
            cqe_version: 0,
            ..Default::default()
        });
        let sqs: Vec<Arc<SqShared>> = (0..2).map(|_| Arc::new(SqShared::new(2))).collect();
        for (k, (uidx, qpn)) in [(1u32, 0x300u32), (2, 0x200)].into_iter().enumerate() {
            sqs[k].set_wrid(0, 10 + k as u64);
            uctx.register_qp(
                uidx,
                Arc::new(QpEntry::with_queues(
                    qpn,
                    Some(Arc::clone(&sqs[k])),
                    None,
                    None,
                )),
            );
        }
        let mem = Arc::new(Mem::new(&uctx, 4).unwrap());
        let mut cq = Cq::new(&uctx, mem, 1);
        let by = |qpn: u32| {
            let mut c = [0u8; 64];
            c[56..60].copy_from_slice(&((wqe_op::SEND as u32) << 24 | qpn).to_be_bytes());
            c[63] = cqe_op::REQ << 4;
            c
        };
        put(&cq, 0, &by(0x200));
        put(&cq, 1, &by(0x300));
        put(&cq, 2, &by(0x200));
        assert_eq!(cq.memory().clean(2, 0x300, None), 1);
        let mut wc = [Wc::default(); 4];
        assert_eq!(cq.poll(&mut wc), 2);
        assert_eq!(
            wc[..2]
                .iter()
                .map(|w| (w.wr_id, w.qp_num))
                .collect::<Vec<_>>(),
            [(11, 0x200), (11, 0x200)]
        );
        put(&cq, 3, &by(0x300));
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!((wc[0].wr_id, wc[0].qp_num), (10, 0x300));
    }

    /// A QP cleaning its CQEs while another thread polls the CQ: every CQE
    /// of the other QP is reported exactly once and in order, and each of
    /// the cleaned QP's CQEs is either reported (before the cleaning) or
    /// removed, never both. With the handshake on asymmetric fences (where
    /// the kernel has them) and on full fences.
    #[test]
    fn clean_races_with_poll() {
        let modes = [crate::hw::membarrier::available(), false];
        for (round, asymmetric) in (0..20usize).flat_map(|r| modes.map(|m| (r, m))) {
            let mut f = fixture_fenced(64, asymmetric);
            let sq2 = Arc::new(SqShared::new(64));
            for i in 0..64 {
                f.sq.set_wrid(i % 8, 0);
                sq2.set_wrid(i, 1000 + i as u64);
            }
            f.uctx.register_qp(
                8,
                Arc::new(QpEntry::with_queues(5, Some(Arc::clone(&sq2)), None, None)),
            );
            for n in 0..60u32 {
                let mut c = cqe(cqe_op::REQ, wqe_op::SEND, n as u16, false);
                if n % 2 == 1 {
                    c[32..36].copy_from_slice(&8u32.to_be_bytes());
                    c[56..60].copy_from_slice(&((wqe_op::SEND as u32) << 24 | 5).to_be_bytes());
                }
                put(&f.cq, n, &c);
            }
            let mem = f.cq.memory();
            let cq = &mut f.cq;
            let progress = std::sync::atomic::AtomicUsize::new(0);
            let (seen, removed) = std::thread::scope(|s| {
                let progress = &progress;
                let poller = s.spawn(move || {
                    let mut seen = Vec::new();
                    let mut wc = [Wc::default(); 1];
                    while seen.iter().filter(|&&(_, q)| q == 5).count() < 30 {
                        if cq.poll(&mut wc) == 1 {
                            seen.push((wc[0].wr_id, wc[0].qp_num));
                            progress.store(seen.len(), Ordering::Release);
                        }
                    }
                    seen
                });
                // Clean at a different point of the polling each round.
                while progress.load(Ordering::Acquire) < round * 2 {
                    std::hint::spin_loop();
                }
                let removed = mem.clean(UIDX, QPN, None);
                (poller.join().unwrap(), removed)
            });
            let other: Vec<u64> = seen.iter().filter(|w| w.1 == 5).map(|w| w.0).collect();
            assert_eq!(other, (0..30).map(|k| 1001 + 2 * k).collect::<Vec<_>>());
            let mine = seen.iter().filter(|w| w.1 == QPN).count() as u32;
            assert_eq!(
                mine + removed,
                30,
                "reported {mine}, removed {removed}: {seen:?}"
            );
            let mut wc = [Wc::default(); 1];
            assert_eq!(f.cq.poll(&mut wc), 0);
            // Polled or removed, every entry is consumed.
            assert_eq!(f.cq.cons_index(), 60);
        }
    }
}
