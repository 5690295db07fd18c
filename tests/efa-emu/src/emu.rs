//! The emulator's state: open device files, their ucontexts and the
//! regions of device memory they may map, and every verbs object, in one
//! [`Emu`] behind one mutex ([`EMU`]).
//!
//! Handles come from one counter shared by all object types and contexts
//! and are never reused, so a handle of another context or of a
//! destroyed object is always detected. What user space maps (CQ rings,
//! receive rings, the LLQ, doorbell pages) lives in the context's command
//! memfd: each region is a page-aligned range of it, and its mmap key is
//! its offset there (as the kernel's `rdma_user_mmap_entry` keys are
//! offsets of the device file).

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use libc::c_int;
use rverbs_abi::Errno;

use crate::{device, real};

/// Unmaps the emulator's own mapping of `r`.
fn unmap(r: &Region) {
    // SAFETY: `host`/`len` are a mapping this module made and nothing
    // else uses once its region is gone (the device thread reaches
    // regions only through the live objects, under the same lock).
    unsafe { real::munmap(r.host as *mut libc::c_void, r.len as usize) };
}

/// The emulator, shared by every thread of the process.
pub static EMU: Mutex<Emu> = Mutex::new(Emu::new());

/// Locks [`EMU`], ignoring poisoning (a panic in a command handler is
/// reported as `EIO` and must not wedge the device).
pub fn lock() -> MutexGuard<'static, Emu> {
    EMU.lock().unwrap_or_else(|e| e.into_inner())
}

/// What a mappable region of a context holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionKind {
    /// A CQ's entries (all sub-CQs), read by user space.
    CqRing,
    /// A QP's receive descriptor ring, written by user space.
    RqRing,
    /// A QP's LLQ: the send descriptor ring in device memory.
    Llq,
    /// A QP's doorbell page (send and receive doorbells).
    Doorbells,
}

/// A page-aligned range of the command memfd user space may map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Bytes (a multiple of the page size): a mapping must be this long.
    pub len: u64,
    /// What it holds.
    pub kind: RegionKind,
    /// The CQ or QP handle it belongs to.
    pub owner: u32,
    /// Where the emulator itself maps it (the device's view), for as long
    /// as the region exists.
    pub host: u64,
}

/// An open `/dev/infiniband/uverbs0`.
#[derive(Debug)]
pub struct Context {
    pub(crate) fd: c_int,
    /// `(st_dev, st_ino)` of the memfd, to detect a reused fd number.
    pub(crate) file_id: (u64, u64),
    pub(crate) ucontext: Option<Ucontext>,
}

/// The EFA ucontext of a [`Context`].
#[derive(Debug)]
pub struct Ucontext {
    /// The async event fd (application end) and ours.
    pub(crate) async_fds: (c_int, c_int),
    /// Bytes of the memfd handed out to regions so far.
    pub(crate) used: u64,
    /// Mappable regions by key (memfd offset).
    pub(crate) regions: BTreeMap<u64, Region>,
}

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    pub(crate) ctx: u64,
    pub(crate) users: u32,
}

/// A memory region.
#[derive(Debug)]
pub struct Mr {
    pub(crate) ctx: u64,
    pub(crate) pd: u32,
    /// User address of the first byte.
    pub start: u64,
    /// Length in bytes.
    pub length: u64,
    /// The address the device sees for `start` (descriptors use it).
    pub iova: u64,
    /// `IB_UVERBS_ACCESS_*` flags.
    pub access: u32,
    /// The key (local and remote).
    pub lkey: u32,
}

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    pub(crate) ctx: u64,
    /// Entries per sub-CQ (a power of two).
    pub entries: u32,
    /// Bytes per entry (16, or 32 with the source GID).
    pub entry_size: u32,
    pub(crate) key: u64,
    pub(crate) users: u32,
}

/// A queue pair (UD or SRD).
#[derive(Debug)]
pub struct Qp {
    pub(crate) ctx: u64,
    /// The QP number.
    pub qpn: u32,
    /// `IB_QPT_UD` or `IB_QPT_DRIVER` (SRD).
    pub(crate) qp_type: u8,
    pub(crate) pd: u32,
    pub(crate) send_cq: u32,
    pub(crate) recv_cq: u32,
    pub(crate) caps: [u32; 5],
    pub(crate) sq_sig_all: bool,
    /// Bytes of the LLQ (64-byte send descriptors).
    pub sq_ring_size: u32,
    /// Bytes of the receive ring (16-byte descriptors).
    pub rq_ring_size: u32,
    /// Every region of the QP (removed with it).
    pub(crate) keys: Vec<u64>,
    /// The doorbell page (send doorbell at [`device::SQ_DB_OFFSET`],
    /// receive doorbell at [`device::RQ_DB_OFFSET`]).
    pub(crate) db_key: u64,
    /// The receive ring, if the QP has one.
    pub(crate) rq_key: Option<u64>,
    /// The LLQ, if the QP has a send queue.
    pub(crate) llq_key: Option<u64>,
    pub(crate) state: u8,
    pub(crate) qkey: u32,
    pub(crate) sq_psn: u32,
    pub(crate) rnr_retry: u8,
    /// Transitions to RESET so far (the device restarts its queue
    /// counters when this changes, as libefa restarts its own).
    pub(crate) resets: u32,
}

/// An address handle.
#[derive(Debug)]
pub struct Ah {
    pub(crate) ctx: u64,
    pub(crate) pd: u32,
    pub(crate) gid: [u8; 16],
    /// The device's address handle number for this destination.
    pub(crate) ah: u16,
}

/// All emulator state.
#[derive(Debug)]
pub struct Emu {
    next_ctx: u64,
    next_handle: u32,
    next_qpn: u32,
    next_cq_idx: u16,
    next_pdn: u16,
    next_key: u32,
    pub(crate) contexts: BTreeMap<u64, Context>,
    pub(crate) by_fd: BTreeMap<c_int, u64>,
    pub(crate) pds: BTreeMap<u32, Pd>,
    pub(crate) mrs: BTreeMap<u32, Mr>,
    pub(crate) cqs: BTreeMap<u32, Cq>,
    pub(crate) qps: BTreeMap<u32, Qp>,
    pub(crate) ahs: BTreeMap<u32, Ah>,
    /// Mappings of regions: user address -> (context, key).
    pub(crate) maps: BTreeMap<usize, (u64, u64)>,
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
            next_qpn: 1,
            next_cq_idx: 1,
            next_pdn: 1,
            next_key: 0x10,
            contexts: BTreeMap::new(),
            by_fd: BTreeMap::new(),
            pds: BTreeMap::new(),
            mrs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            ahs: BTreeMap::new(),
            maps: BTreeMap::new(),
        }
    }

    /// A fresh object handle.
    pub(crate) fn handle(&mut self) -> u32 {
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        h
    }

    /// A fresh QP number (EFA's are small indices; never 0).
    pub(crate) fn new_qpn(&mut self) -> u32 {
        let n = self.next_qpn;
        self.next_qpn = (self.next_qpn + 1) % 0xffff;
        self.next_qpn = self.next_qpn.max(1);
        n
    }

    /// A fresh CQ index.
    pub(crate) fn new_cq_idx(&mut self) -> u16 {
        let n = self.next_cq_idx;
        self.next_cq_idx = self.next_cq_idx.wrapping_add(1).max(1);
        n
    }

    /// A fresh PD number.
    pub(crate) fn new_pdn(&mut self) -> u16 {
        let n = self.next_pdn;
        self.next_pdn = self.next_pdn.wrapping_add(1).max(1);
        n
    }

    /// A fresh memory key (EFA keys are 24 bits wide in descriptors).
    pub(crate) fn new_key(&mut self) -> u32 {
        let n = self.next_key;
        self.next_key = (self.next_key + 1) & 0x00ff_ffff;
        self.next_key = self.next_key.max(0x10);
        n
    }

    /// The device's address handle for `gid`: the one an AH to the same
    /// destination already has, else the lowest free number.
    pub(crate) fn ah_for(&self, ctx: u64, gid: &[u8; 16]) -> Result<u16, Errno> {
        if let Some(a) = self.ahs.values().find(|a| a.ctx == ctx && &a.gid == gid) {
            return Ok(a.ah);
        }
        (0..u16::MAX)
            .find(|n| !self.ahs.values().any(|a| a.ctx == ctx && a.ah == *n))
            .ok_or(Errno::ENOMEM)
    }

    /// Registers a newly opened device file.
    pub(crate) fn add_context(&mut self, fd: c_int, file_id: (u64, u64)) -> u64 {
        let id = self.next_ctx;
        self.next_ctx += 1;
        self.contexts.insert(
            id,
            Context {
                fd,
                file_id,
                ucontext: None,
            },
        );
        self.by_fd.insert(fd, id);
        id
    }

    /// The context id behind command fd `fd`.
    pub(crate) fn context_by_fd(&self, fd: c_int) -> Option<u64> {
        self.by_fd.get(&fd).copied()
    }

    /// The ucontext of `ctx`.
    pub(crate) fn ucontext_mut(&mut self, ctx: u64) -> Option<&mut Ucontext> {
        self.contexts.get_mut(&ctx)?.ucontext.as_mut()
    }

    /// Hands out a new region of `bytes` (rounded up to pages) in the
    /// memfd of `ctx` (grown to hold it); returns its key.
    pub(crate) fn add_region(
        &mut self,
        ctx: u64,
        bytes: u64,
        kind: RegionKind,
        owner: u32,
    ) -> Result<u64, Errno> {
        let fd = self.contexts.get(&ctx).ok_or(Errno::EINVAL)?.fd;
        let u = self.ucontext_mut(ctx).ok_or(Errno::EINVAL)?;
        let len = bytes.checked_add(device::PAGE - 1).ok_or(Errno::EINVAL)? & !(device::PAGE - 1);
        let key = u.used;
        let end = key.checked_add(len).ok_or(Errno::ENOMEM)?;
        let size = libc::off_t::try_from(end).map_err(|_| Errno::ENOMEM)?;
        // SAFETY: ftruncate on our own memfd (only grows it: fresh zero
        // pages past the old end).
        if unsafe { libc::ftruncate(fd, size) } != 0 {
            return Err(Errno::last());
        }
        let map_len = usize::try_from(len).map_err(|_| Errno::ENOMEM)?;
        // SAFETY: a new shared mapping of our own memfd, inside its (just
        // grown) size; nothing else is at the address the kernel picks.
        let host = unsafe {
            real::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                key as libc::off_t,
            )
        };
        if host == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        u.used = end;
        u.regions.insert(
            key,
            Region {
                len,
                kind,
                owner,
                host: host as u64,
            },
        );
        Ok(key)
    }

    /// Drops the regions of `keys` and the emulator's own mappings of them
    /// (the application's stay valid, as the kernel's do until unmapped;
    /// the pages are not reused).
    pub(crate) fn remove_regions(&mut self, ctx: u64, keys: &[u64]) {
        if let Some(u) = self.ucontext_mut(ctx) {
            for k in keys {
                if let Some(r) = u.regions.remove(k) {
                    unmap(&r);
                }
            }
        }
    }

    /// Removes a context and everything it owns (the device file was
    /// closed).
    pub(crate) fn remove_context(&mut self, ctx: u64) {
        if let Some(c) = self.contexts.remove(&ctx) {
            self.by_fd.remove(&c.fd);
            if let Some(u) = c.ucontext {
                crate::real::close(u.async_fds.1);
                u.regions.values().for_each(unmap);
            }
        }
        self.qps.retain(|_, o| o.ctx != ctx);
        self.ahs.retain(|_, o| o.ctx != ctx);
        self.mrs.retain(|_, o| o.ctx != ctx);
        self.cqs.retain(|_, o| o.ctx != ctx);
        self.pds.retain(|_, o| o.ctx != ctx);
    }
}
