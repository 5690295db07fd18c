//! The emulator's state: open device files, their ucontexts, and every
//! verbs object, in one [`Emu`] behind one mutex ([`EMU`]).
//!
//! Objects live in maps keyed by their handle. Handles come from one
//! counter shared by all object types and contexts and are never reused,
//! so a handle of another context or of a destroyed object is always
//! detected. Each record names its owning context. The records are plain
//! structs whose accessors give what an in-process "HCA" (a future
//! doorbell-watching thread) needs: queue buffers and their geometry,
//! doorbell records, keys, UAR pages, and per-object event counters to bump
//! when it delivers events.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use libc::c_int;
use rverbs_abi::ah::AhAttr;
use rverbs_abi::qp::QpDest;
use rverbs_abi::Errno;

use crate::device;

/// The emulator, shared by every thread of the process.
pub static EMU: Mutex<Emu> = Mutex::new(Emu::new());

/// Locks [`EMU`], ignoring poisoning (a panic in a command handler is
/// reported as `EIO` and must not wedge the device).
pub fn lock() -> MutexGuard<'static, Emu> {
    EMU.lock().unwrap_or_else(|e| e.into_inner())
}

/// An open `/dev/infiniband/uverbs0` (one uverbs "file").
#[derive(Debug)]
pub struct Context {
    /// Unique id, named by every object of this context.
    pub(crate) id: u64,
    /// The command fd (a memfd of ours).
    pub(crate) fd: c_int,
    /// `(st_dev, st_ino)` of that memfd, to detect a reused fd number.
    pub(crate) file_id: (u64, u64),
    /// Set by GET_CONTEXT.
    pub(crate) ucontext: Option<Ucontext>,
}

impl Context {
    /// The context id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The command fd (also the file backing the UAR pages).
    pub fn fd(&self) -> c_int {
        self.fd
    }

    /// The ucontext, once GET_CONTEXT succeeded.
    pub fn ucontext(&self) -> Option<&Ucontext> {
        self.ucontext.as_ref()
    }
}

/// The mlx5 ucontext of a [`Context`].
#[derive(Debug)]
pub struct Ucontext {
    /// The async event channel (see [`Emu::channel`]; gone once the
    /// application closed its end).
    pub(crate) async_channel: u64,
    /// Static bfregs (two per UAR page).
    pub(crate) tot_bfregs: u32,
    /// The dedicated (low-latency) bfregs: the last ones.
    pub(crate) low_lat_bfregs: u32,
    /// CQE format (0 or 1).
    pub(crate) cqe_version: u8,
    /// Whether the provider asked for DEVX (accepted; DEVX ioctls fail).
    pub(crate) devx: bool,
    /// QPs using each bfreg (indexed by the kernel's bfreg number).
    pub(crate) bfreg_users: Vec<u32>,
}

impl Ucontext {
    /// Number of static UAR pages (mmap indices `0..uar_pages()`).
    pub fn uar_pages(&self) -> u32 {
        self.tot_bfregs / device::BFREGS_PER_UAR
    }

    /// CQE format in use.
    pub fn cqe_version(&self) -> u8 {
        self.cqe_version
    }

    /// The async event channel's id: write `ib_uverbs_async_event_desc`
    /// records to [`EventChannel::peer_fd`] of [`Emu::channel`] of it.
    pub fn async_channel(&self) -> u64 {
        self.async_channel
    }

    /// Whether the provider asked for DEVX (accepted; DEVX ioctls fail).
    pub fn devx(&self) -> bool {
        self.devx
    }

    /// Picks a bfreg for a new QP: a free dedicated one first, else the
    /// least used shared one (bfreg 0 is never handed out while others
    /// exist). Returns the kernel bfreg number.
    pub(crate) fn alloc_bfreg(&mut self) -> Result<u32, Errno> {
        let first_low = self.tot_bfregs - self.low_lat_bfregs;
        if let Some(n) = (first_low..self.tot_bfregs).find(|&n| self.bfreg_users[n as usize] == 0) {
            self.bfreg_users[n as usize] += 1;
            return Ok(n);
        }
        let n = (1..first_low)
            .min_by_key(|&n| self.bfreg_users[n as usize])
            .ok_or(Errno::ENOMEM)?;
        self.bfreg_users[n as usize] += 1;
        Ok(n)
    }

    /// Returns a bfreg taken by [`Ucontext::alloc_bfreg`].
    pub(crate) fn free_bfreg(&mut self, n: u32) {
        if let Some(u) = self.bfreg_users.get_mut(n as usize) {
            *u = u.saturating_sub(1);
        }
    }
}

/// Where a kernel bfreg number lives: the index the provider uses
/// (four registers per UAR page, of which the first two are handed out),
/// its UAR page, and the register's offset in that page.
pub fn bfreg_location(n: u32) -> (u32, u32, usize) {
    let index = (n / device::BFREGS_PER_UAR) * 4 + n % device::BFREGS_PER_UAR;
    let page = n / device::BFREGS_PER_UAR;
    let offset = 0x800 + (n % device::BFREGS_PER_UAR) as usize * device::BF_REG_SIZE as usize;
    (index, page, offset)
}

/// Who reads an event channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// The async event fd of a context.
    Async,
    /// A completion channel.
    Comp,
}

/// An event channel: the application reads one end, we write the other.
#[derive(Debug)]
pub struct EventChannel {
    /// Unique id (CQs name their completion channel by it).
    pub(crate) id: u64,
    /// Owning context (0 once that context is gone).
    pub(crate) ctx: u64,
    /// What the channel carries.
    pub(crate) kind: EventKind,
    /// The application's fd.
    pub(crate) user_fd: c_int,
    /// Our end.
    pub(crate) peer_fd: c_int,
}

impl EventChannel {
    /// Our end: write `ib_uverbs_comp_event_desc` (completion channels) or
    /// `ib_uverbs_async_event_desc` (async) records here.
    pub fn peer_fd(&self) -> c_int {
        self.peer_fd
    }

    /// What the channel carries.
    pub fn kind(&self) -> EventKind {
        self.kind
    }

    /// The application's fd.
    pub fn user_fd(&self) -> c_int {
        self.user_fd
    }
}

/// An object that belongs to one context: what every handle lookup checks.
pub(crate) trait Owned {
    /// The owning context.
    fn ctx(&self) -> u64;
}

/// An object others refer to, which may not be destroyed while they do.
pub(crate) trait Shared: Owned {
    /// How many objects use it.
    fn users_mut(&mut self) -> &mut u32;
}

macro_rules! owned {
    ($($t:ident),*) => {$(
        impl Owned for $t {
            fn ctx(&self) -> u64 {
                self.ctx
            }
        }
    )*};
}
owned!(Pd, Mr, Cq, Qp, Srq, Ah);

macro_rules! shared {
    ($($t:ident),*) => {$(
        impl Shared for $t {
            fn users_mut(&mut self) -> &mut u32 {
                &mut self.users
            }
        }
    )*};
}
shared!(Pd, Cq, Srq);

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    pub(crate) ctx: u64,
    pub(crate) pdn: u32,
    /// MRs, QPs, SRQs and AHs using it.
    pub(crate) users: u32,
}

impl Pd {
    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.pdn
    }
}

/// A memory region.
#[derive(Debug)]
pub struct Mr {
    pub(crate) ctx: u64,
    pub(crate) pd: u32,
    pub(crate) start: u64,
    pub(crate) length: u64,
    pub(crate) hca_va: u64,
    pub(crate) access: u32,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    /// For a dmabuf MR (`UVERBS_METHOD_REG_DMABUF_MR`): the emulator's own
    /// mapping of the stand-in dmabuf, which `start` points into; unmapped
    /// when the MR goes. `None` for an MR of user memory. Held for its
    /// drop only.
    #[allow(dead_code)]
    pub(crate) backing: Option<crate::dmabuf::Mapping>,
}

impl Mr {
    /// Owning PD handle.
    pub fn pd(&self) -> u32 {
        self.pd
    }
    /// User address of the first byte.
    pub fn start(&self) -> u64 {
        self.start
    }
    /// Length in bytes.
    pub fn length(&self) -> u64 {
        self.length
    }
    /// The address the HCA sees for `start` (SGEs and RDMA use this space).
    pub fn hca_va(&self) -> u64 {
        self.hca_va
    }
    /// `IB_UVERBS_ACCESS_*` flags.
    pub fn access(&self) -> u32 {
        self.access
    }
    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// Translates an HCA address range to a user address, if it lies in
    /// the region.
    pub fn translate(&self, va: u64, len: u64) -> Option<u64> {
        let off = va.checked_sub(self.hca_va)?;
        (off.checked_add(len)? <= self.length).then(|| self.start + off)
    }
}

/// A CQE ring as user space allocated it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqRing {
    /// User address of entry 0.
    pub buf: u64,
    /// Entries (a power of two).
    pub entries: u32,
    /// Bytes per CQE (64 or 128).
    pub cqe_size: u32,
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    pub(crate) ctx: u64,
    pub(crate) cqn: u32,
    pub(crate) user_handle: u64,
    /// Completion channel id, if bound to one.
    pub(crate) channel: Option<u64>,
    pub(crate) comp_vector: u32,
    pub(crate) ring: CqRing,
    /// The ring before the last RESIZE_CQ, until the RESIZE CQE is in it
    /// and production has moved to the new ring (RESIZE_CQ does both under
    /// the lock, so this is `None` between commands).
    pub(crate) resize_from: Option<CqRing>,
    /// The HCA's producer counter (mirrored by the HCA thread after every
    /// CQE; RESIZE_CQ writes the RESIZE CQE at it and advances it).
    pub(crate) hw_pi: u32,
    /// 8-byte doorbell record: word 0 consumer index, word 1 arm.
    pub(crate) db_addr: u64,
    /// UAR page receiving this CQ's arm doorbells (offset 0x20).
    pub(crate) uar_page: u32,
    /// QPs using it (each of send/recv counts).
    pub(crate) users: u32,
    pub(crate) comp_events_reported: u32,
    pub(crate) async_events_reported: u32,
}

impl Cq {
    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }
    /// The value reported in completion events.
    pub fn user_handle(&self) -> u64 {
        self.user_handle
    }
    /// The completion channel id (see [`Emu::channel`]).
    pub fn channel(&self) -> Option<u64> {
        self.channel
    }
    /// The completion vector.
    pub fn comp_vector(&self) -> u32 {
        self.comp_vector
    }
    /// The current ring.
    pub fn ring(&self) -> CqRing {
        self.ring
    }
    /// The ring being replaced by a resize, if any.
    pub fn resize_from(&self) -> Option<CqRing> {
        self.resize_from
    }
    /// Doorbell record address.
    pub fn db_addr(&self) -> u64 {
        self.db_addr
    }
    /// UAR page of the arm doorbell.
    pub fn uar_page(&self) -> u32 {
        self.uar_page
    }
    /// Counts a completion event delivered to the channel (reported by
    /// DESTROY_CQ; libibverbs waits until the application acked as many).
    pub fn note_comp_event(&mut self) {
        self.comp_events_reported += 1;
    }
    /// Counts an async event delivered for this CQ.
    pub fn note_async_event(&mut self) {
        self.async_events_reported += 1;
    }
}

/// One work queue of a QP or SRQ in user memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WorkQueue {
    /// User address of WQE 0.
    pub buf: u64,
    /// WQEs (send queue: 64-byte basic blocks); a power of two, or 0.
    pub wqe_cnt: u32,
    /// log2 of the WQE (basic block) size.
    pub wqe_shift: u32,
}

impl WorkQueue {
    /// Size in bytes.
    pub fn bytes(&self) -> u64 {
        u64::from(self.wqe_cnt) << self.wqe_shift
    }
}

/// The QP attributes MODIFY_QP sets and QUERY_QP reports; the fields are
/// those of `struct ib_uverbs_modify_qp` (PSNs and QPNs masked to 24 bits).
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct QpAttrs {
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub path_mtu: u8,
    pub path_mig_state: u8,
    pub en_sqd_async_notify: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    /// Primary path (address vector).
    pub dest: QpDest,
    /// Alternate path.
    pub alt_dest: QpDest,
}

/// The capabilities a QP was created with (echoed by CREATE_QP); the
/// fields are those of `struct ib_uverbs_create_qp`.
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct QpCaps {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// A queue pair.
#[derive(Debug)]
pub struct Qp {
    pub(crate) ctx: u64,
    pub(crate) qpn: u32,
    pub(crate) qp_type: u8,
    pub(crate) user_handle: u64,
    pub(crate) pd: u32,
    pub(crate) send_cq: u32,
    pub(crate) recv_cq: u32,
    pub(crate) srq: Option<u32>,
    pub(crate) caps: QpCaps,
    pub(crate) sq_sig_all: bool,
    /// `MLX5_QP_FLAG_*` from creation.
    pub(crate) flags: u32,
    pub(crate) uidx: u32,
    pub(crate) sq: WorkQueue,
    pub(crate) rq: WorkQueue,
    /// 8-byte doorbell record: word 0 RQ counter, word 1 SQ counter.
    pub(crate) db_addr: u64,
    /// Kernel bfreg number (see [`bfreg_location`]).
    pub(crate) bfreg: u32,
    pub(crate) state: u8,
    pub(crate) attrs: QpAttrs,
    pub(crate) events_reported: u32,
    /// Transitions to RESET so far (the HCA restarts its queue counters
    /// when this changes).
    pub(crate) resets: u32,
}

impl Qp {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    /// The value reported in async events.
    pub fn user_handle(&self) -> u64 {
        self.user_handle
    }
    /// `IB_QPT_*`.
    pub fn qp_type(&self) -> u8 {
        self.qp_type
    }
    /// Owning PD handle.
    pub fn pd(&self) -> u32 {
        self.pd
    }
    /// Send CQ handle.
    pub fn send_cq(&self) -> u32 {
        self.send_cq
    }
    /// Receive CQ handle.
    pub fn recv_cq(&self) -> u32 {
        self.recv_cq
    }
    /// SRQ handle, if receives come from an SRQ.
    pub fn srq(&self) -> Option<u32> {
        self.srq
    }
    /// Whether every send WR completes signalled.
    pub fn sq_sig_all(&self) -> bool {
        self.sq_sig_all
    }
    /// `MLX5_QP_FLAG_*` given at creation (signature, scatter-to-CQE).
    pub fn flags(&self) -> u32 {
        self.flags
    }
    /// The user index CQEs carry (CQE version 1).
    pub fn uidx(&self) -> u32 {
        self.uidx
    }
    /// The send queue (64-byte basic blocks, after the receive queue).
    pub fn sq(&self) -> WorkQueue {
        self.sq
    }
    /// The receive queue (at offset 0 of the QP buffer).
    pub fn rq(&self) -> WorkQueue {
        self.rq
    }
    /// Doorbell record address.
    pub fn db_addr(&self) -> u64 {
        self.db_addr
    }
    /// The bfreg's provider index, UAR page, and offset in that page.
    pub fn doorbell(&self) -> (u32, u32, usize) {
        bfreg_location(self.bfreg)
    }
    /// `IB_QPS_*`.
    pub fn state(&self) -> u8 {
        self.state
    }
    /// The attributes set by MODIFY_QP.
    pub fn attrs(&self) -> &QpAttrs {
        &self.attrs
    }
    /// Creation capabilities.
    pub fn caps(&self) -> QpCaps {
        self.caps
    }
    /// Moves the QP to a state on the HCA's own account (e.g. ERR).
    pub fn set_state(&mut self, state: u8) {
        self.state = state;
    }
    /// Counts an async event delivered for this QP.
    pub fn note_async_event(&mut self) {
        self.events_reported += 1;
    }
    /// How many times the QP was moved to RESET.
    pub fn resets(&self) -> u32 {
        self.resets
    }
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    pub(crate) ctx: u64,
    pub(crate) srqn: u32,
    pub(crate) user_handle: u64,
    pub(crate) pd: u32,
    pub(crate) wq: WorkQueue,
    /// Scatter entries per WQE.
    pub(crate) max_gs: u32,
    /// 4-byte doorbell record: WQE counter.
    pub(crate) db_addr: u64,
    pub(crate) flags: u32,
    pub(crate) uidx: u32,
    pub(crate) srq_limit: u32,
    /// QPs attached.
    pub(crate) users: u32,
    pub(crate) events_reported: u32,
}

impl Srq {
    /// The SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }
    /// The WQE ring (linked list of WQEs, 16-byte next segment first).
    pub fn wq(&self) -> WorkQueue {
        self.wq
    }
    /// Scatter entries per WQE.
    pub fn max_gs(&self) -> u32 {
        self.max_gs
    }
    /// Doorbell record address.
    pub fn db_addr(&self) -> u64 {
        self.db_addr
    }
    /// The limit (low watermark) set by MODIFY_SRQ, 0 if disarmed.
    pub fn srq_limit(&self) -> u32 {
        self.srq_limit
    }
    /// The value reported in async events.
    pub fn user_handle(&self) -> u64 {
        self.user_handle
    }
    /// `MLX5_SRQ_FLAG_*` given at creation.
    pub fn flags(&self) -> u32 {
        self.flags
    }
    /// The user index CQEs carry (CQE version 1).
    pub fn uidx(&self) -> u32 {
        self.uidx
    }
    /// Counts an async event delivered for this SRQ.
    pub fn note_async_event(&mut self) {
        self.events_reported += 1;
    }
}

/// An address handle created through the kernel.
#[derive(Debug)]
pub struct Ah {
    pub(crate) ctx: u64,
    pub(crate) pd: u32,
    pub(crate) attr: AhAttr,
}

impl Ah {
    /// The address vector.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }
}

/// A UAR page the application mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UarMap {
    /// Owning context.
    pub ctx: u64,
    /// The static UAR page index.
    pub index: u32,
    /// Mapping length.
    pub len: usize,
}

/// Object kinds, for the handle-type checks of destroy commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum ObjKind {
    Pd,
    Mr,
    Cq,
    Qp,
    Srq,
    Ah,
}

/// All emulator state.
#[derive(Debug)]
pub struct Emu {
    next_ctx: u64,
    next_handle: u32,
    next_qpn: u32,
    next_cqn: u32,
    next_srqn: u32,
    next_pdn: u32,
    next_mkey: u32,
    next_channel: u64,
    /// Device files by context id.
    pub(crate) contexts: BTreeMap<u64, Context>,
    /// Context id by command fd.
    pub(crate) by_fd: BTreeMap<c_int, u64>,
    /// Event channels by the application's fd.
    pub(crate) channels: BTreeMap<c_int, EventChannel>,
    pub(crate) pds: BTreeMap<u32, Pd>,
    pub(crate) mrs: BTreeMap<u32, Mr>,
    pub(crate) cqs: BTreeMap<u32, Cq>,
    pub(crate) qps: BTreeMap<u32, Qp>,
    pub(crate) srqs: BTreeMap<u32, Srq>,
    pub(crate) ahs: BTreeMap<u32, Ah>,
    /// Mapped UAR pages by user address.
    pub(crate) uar_maps: BTreeMap<usize, UarMap>,
}

impl Default for Emu {
    fn default() -> Self {
        Self::new()
    }
}

impl Emu {
    /// An empty emulator.
    pub const fn new() -> Self {
        Emu {
            next_ctx: 1,
            next_handle: 1,
            next_qpn: 0x100,
            next_cqn: 0x80,
            next_srqn: 0x40,
            next_pdn: 1,
            next_mkey: 2,
            next_channel: 1,
            contexts: BTreeMap::new(),
            by_fd: BTreeMap::new(),
            channels: BTreeMap::new(),
            pds: BTreeMap::new(),
            mrs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            srqs: BTreeMap::new(),
            ahs: BTreeMap::new(),
            uar_maps: BTreeMap::new(),
        }
    }

    /// A fresh object handle.
    pub(crate) fn handle(&mut self) -> u32 {
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        h
    }

    /// A fresh 24-bit number from `counter`, skipping 0 and 1 (numbers wrap
    /// after 2^24 allocations; nothing lives that long in a test).
    fn number(counter: &mut u32) -> u32 {
        if *counter & 0xff_ffff < 2 {
            *counter = 2;
        }
        let n = *counter & 0xff_ffff;
        *counter = (n + 1) & 0xff_ffff;
        n
    }

    pub(crate) fn new_qpn(&mut self) -> u32 {
        Self::number(&mut self.next_qpn)
    }
    pub(crate) fn new_cqn(&mut self) -> u32 {
        Self::number(&mut self.next_cqn)
    }
    pub(crate) fn new_srqn(&mut self) -> u32 {
        Self::number(&mut self.next_srqn)
    }
    pub(crate) fn new_pdn(&mut self) -> u32 {
        Self::number(&mut self.next_pdn)
    }

    /// A fresh memory key: mlx5 style `index << 8 | key` with a nonzero
    /// key byte, so never `0x100` (libmlx5's end-of-list lkey).
    pub(crate) fn new_mkey(&mut self) -> u32 {
        let index = Self::number(&mut self.next_mkey);
        let key = ((index.wrapping_mul(0x3b) + 0x5a) & 0xff).max(1);
        (index << 8) | key
    }

    /// Registers a newly opened device file.
    pub(crate) fn add_context(&mut self, fd: c_int, file_id: (u64, u64)) -> u64 {
        let id = self.next_ctx;
        self.next_ctx += 1;
        self.contexts.insert(
            id,
            Context {
                id,
                fd,
                file_id,
                ucontext: None,
            },
        );
        self.by_fd.insert(fd, id);
        id
    }

    /// The context behind command fd `fd`.
    pub fn context_by_fd(&self, fd: c_int) -> Option<&Context> {
        self.contexts.get(self.by_fd.get(&fd)?)
    }

    /// A context by id.
    pub fn context(&self, id: u64) -> Option<&Context> {
        self.contexts.get(&id)
    }

    /// A ucontext by context id (mutable, for bfreg allocation).
    pub(crate) fn ucontext_mut(&mut self, ctx: u64) -> Option<&mut Ucontext> {
        self.contexts.get_mut(&ctx)?.ucontext.as_mut()
    }

    /// Registers an event channel.
    pub(crate) fn add_channel(
        &mut self,
        ctx: u64,
        kind: EventKind,
        user_fd: c_int,
        peer_fd: c_int,
    ) -> u64 {
        let id = self.next_channel;
        self.next_channel += 1;
        self.channels.insert(
            user_fd,
            EventChannel {
                id,
                ctx,
                kind,
                user_fd,
                peer_fd,
            },
        );
        id
    }

    /// An event channel by id.
    pub fn channel(&self, id: u64) -> Option<&EventChannel> {
        self.channels.values().find(|c| c.id == id)
    }

    /// Which kind of object `handle` is in context `ctx`, if any.
    pub(crate) fn kind_of(&self, ctx: u64, handle: u32) -> Option<ObjKind> {
        let own = |c: u64| c == ctx;
        if self.pds.get(&handle).is_some_and(|o| own(o.ctx)) {
            Some(ObjKind::Pd)
        } else if self.mrs.get(&handle).is_some_and(|o| own(o.ctx)) {
            Some(ObjKind::Mr)
        } else if self.cqs.get(&handle).is_some_and(|o| own(o.ctx)) {
            Some(ObjKind::Cq)
        } else if self.qps.get(&handle).is_some_and(|o| own(o.ctx)) {
            Some(ObjKind::Qp)
        } else if self.srqs.get(&handle).is_some_and(|o| own(o.ctx)) {
            Some(ObjKind::Srq)
        } else if self.ahs.get(&handle).is_some_and(|o| own(o.ctx)) {
            Some(ObjKind::Ah)
        } else {
            None
        }
    }

    /// The kernel's errno for a destroy command whose `handle` does not
    /// name an object of the expected type in `ctx`: `ENOENT` if the
    /// context has no such handle, `EINVAL` if it names another kind of
    /// object.
    pub(crate) fn destroy_lookup_error(&self, ctx: u64, handle: u32) -> Errno {
        match self.kind_of(ctx, handle) {
            Some(_) => Errno::EINVAL,
            None => Errno::ENOENT,
        }
    }

    /// A QP by number.
    pub fn qp_by_qpn(&self, qpn: u32) -> Option<(u32, &Qp)> {
        self.qps
            .iter()
            .find(|(_, q)| q.qpn == qpn)
            .map(|(h, q)| (*h, q))
    }

    /// A QP by number, mutable.
    pub fn qp_by_qpn_mut(&mut self, qpn: u32) -> Option<&mut Qp> {
        self.qps.values_mut().find(|q| q.qpn == qpn)
    }

    /// A CQ by handle.
    pub fn cq(&self, handle: u32) -> Option<&Cq> {
        self.cqs.get(&handle)
    }

    /// A CQ by handle, mutable.
    pub fn cq_mut(&mut self, handle: u32) -> Option<&mut Cq> {
        self.cqs.get_mut(&handle)
    }

    /// An SRQ by handle.
    pub fn srq(&self, handle: u32) -> Option<&Srq> {
        self.srqs.get(&handle)
    }

    /// An MR by local or remote key.
    pub fn mr_by_key(&self, key: u32) -> Option<&Mr> {
        self.mrs.values().find(|m| m.lkey == key || m.rkey == key)
    }

    /// Every QP, by handle.
    pub fn qps(&self) -> impl Iterator<Item = (u32, &Qp)> {
        self.qps.iter().map(|(h, q)| (*h, q))
    }

    /// Every mapped UAR page: `(user address, mapping)`.
    pub fn uar_maps(&self) -> impl Iterator<Item = (usize, &UarMap)> {
        self.uar_maps.iter().map(|(a, m)| (*a, m))
    }

    /// Removes a context and everything it owns (the device file was
    /// closed). Event channels stay until the application closes its end;
    /// they are detached from the context.
    pub(crate) fn remove_context(&mut self, ctx: u64) {
        if let Some(c) = self.contexts.remove(&ctx) {
            self.by_fd.remove(&c.fd);
        }
        self.qps.retain(|_, o| o.ctx != ctx);
        self.ahs.retain(|_, o| o.ctx != ctx);
        self.mrs.retain(|_, o| o.ctx != ctx);
        self.srqs.retain(|_, o| o.ctx != ctx);
        self.cqs.retain(|_, o| o.ctx != ctx);
        self.pds.retain(|_, o| o.ctx != ctx);
        for ch in self.channels.values_mut() {
            if ch.ctx == ctx {
                ch.ctx = 0;
            }
        }
        // UAR mappings stay valid (they keep the memfd alive), as the
        // kernel's do; they are forgotten when unmapped.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bfreg_indices_match_the_provider_table() {
        assert_eq!(bfreg_location(0), (0, 0, 0x800));
        assert_eq!(bfreg_location(1), (1, 0, 0xa00));
        assert_eq!(bfreg_location(2), (4, 1, 0x800));
        assert_eq!(bfreg_location(15), (29, 7, 0xa00));
    }

    #[test]
    fn numbers_are_distinct_and_never_0_or_1() {
        let mut e = Emu::new();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..1000 {
            let n = e.new_pdn();
            assert!(n >= 2);
            assert!(seen.insert(n), "{n} handed out twice");
        }
        let mut c = 0xff_ffff;
        assert_eq!(Emu::number(&mut c), 0xff_ffff);
        assert_eq!(Emu::number(&mut c), 2);
    }

    #[test]
    fn mkeys_are_never_the_end_of_list_key() {
        let mut e = Emu::new();
        for _ in 0..100_000 {
            let k = e.new_mkey();
            assert_ne!(k, 0x100);
            assert_ne!(k & 0xff, 0);
        }
    }

    #[test]
    fn bfreg_allocation_prefers_dedicated_then_least_used() {
        let mut u = Ucontext {
            async_channel: 0,
            tot_bfregs: 16,
            low_lat_bfregs: 4,
            cqe_version: 1,
            devx: false,
            bfreg_users: vec![0; 16],
        };
        let got: Vec<u32> = (0..6).map(|_| u.alloc_bfreg().unwrap()).collect();
        assert_eq!(got, [12, 13, 14, 15, 1, 2]);
        u.free_bfreg(13);
        assert_eq!(u.alloc_bfreg().unwrap(), 13);
    }
}
