//! Memory regions: registering a caller's buffer (borrowed for the MR's
//! lifetime, so the MR cannot outlive it) or a buffer the MR allocates and
//! owns; SGEs and remote descriptors derived from it with bounds checks.
//!
//! While memory is registered the device may write it at any time, so an MR
//! never hands out a plain `&[u8]`/`&mut [u8]` to it: data moves in and out
//! through [`Mr::write_at`] and [`Mr::read_at`] (or the `unsafe` slice views,
//! for callers who know no work request is outstanding on the range).

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

use memmap2::MmapMut;
use uverbs_abi::cmd::{nr, write_cmd, NoResp};
pub use uverbs_abi::mr::AccessFlags;
use uverbs_abi::mr::{DeregMr, RegMr, RegMrResp, ReregMr, ReregMrResp};
use uverbs_abi::wr::Sge;

use crate::error::{Errno, Error, Result};
use crate::pd::Pd;

/// A registered memory region over memory of lifetime `'a` (`'static` when
/// the MR owns its buffer). Dropping it deregisters it.
pub struct Mr<'a> {
    pd: Pd,
    handle: u32,
    lkey: u32,
    rkey: u32,
    addr: *mut u8,
    len: usize,
    access: AccessFlags,
    // Dropped after DEREG_MR (in Drop) and before the owned mapping goes.
    _fork: crate::fork::Guard,
    _owned: Option<MmapMut>,
    _borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: the MR's memory is only reached through `&self` reads and `&mut
// self` writes (or unsafe views whose contract covers sharing); the raw
// pointer is not tied to any thread.
unsafe impl Send for Mr<'_> {}
// SAFETY: `&Mr` only allows reads of the memory and of plain fields.
unsafe impl Sync for Mr<'_> {}

impl fmt::Debug for Mr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &self.addr)
            .field("len", &self.len)
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .field("access", &self.access)
            .finish()
    }
}

/// What a peer needs to reach an MR with RDMA: exchange it out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteMr {
    /// Start address in the peer's MR.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The peer MR's rkey.
    pub rkey: u32,
}

impl RemoteMr {
    /// Encodes as 20 bytes (addr, len, rkey; big-endian).
    pub fn to_bytes(&self) -> [u8; 20] {
        let mut b = [0u8; 20];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..16].copy_from_slice(&self.len.to_be_bytes());
        b[16..].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }

    /// Decodes [`RemoteMr::to_bytes`]'s form.
    pub fn from_bytes(b: &[u8; 20]) -> RemoteMr {
        let (a, rest) = b.split_at(8);
        let (l, k) = rest.split_at(8);
        RemoteMr {
            addr: u64::from_be_bytes(a.try_into().unwrap_or_default()),
            len: u64::from_be_bytes(l.try_into().unwrap_or_default()),
            rkey: u32::from_be_bytes(k.try_into().unwrap_or_default()),
        }
    }

    /// The address `offset` bytes in, checked against the length.
    pub fn at(&self, offset: u64, len: u64) -> Result<u64> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(self.addr + offset),
            _ => Err(Error::invalid(format!(
                "remote range {offset}+{len} outside the peer's {}-byte MR",
                self.len
            ))),
        }
    }
}

/// `IB_MR_REREG_PD`: REREG_MR changes the PD.
const REREG_PD: u32 = 1 << 1;
/// `IB_MR_REREG_ACCESS`: REREG_MR changes the access flags.
const REREG_ACCESS: u32 = 1 << 2;

/// The default huge page size (`Hugepagesize` in /proc/meminfo).
fn default_huge_page_size() -> Result<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").map_err(|source| Error::Io {
        what: "/proc/meminfo".into(),
        source,
    })?;
    info.lines()
        .find_map(|l| l.strip_prefix("Hugepagesize:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<usize>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| Error::invalid("this kernel reports no huge page size"))
}

fn check_access(access: AccessFlags) -> Result<()> {
    let needs_local_write = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    if access.intersects(needs_local_write) && !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(Error::invalid(
            "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE",
        ));
    }
    Ok(())
}

impl Pd {
    /// Registers the caller's `buf`, which stays borrowed until the MR is
    /// dropped. A zero-length buffer is refused.
    pub fn register<'a>(&self, buf: &'a mut [u8], access: AccessFlags) -> Result<Mr<'a>> {
        // SAFETY: `buf` is valid for its length and exclusively borrowed for 'a.
        unsafe { self.reg(buf.as_mut_ptr(), buf.len(), access, None) }
    }

    /// Allocates `len` zeroed, page-aligned bytes and registers them.
    pub fn alloc_mr(&self, len: usize, access: AccessFlags) -> Result<Mr<'static>> {
        if len == 0 {
            return Err(Error::invalid(
                "cannot register a zero-length memory region",
            ));
        }
        let mut map = MmapMut::map_anon(len).map_err(|source| Error::Io {
            what: "anonymous mmap".into(),
            source,
        })?;
        let ptr = map.as_mut_ptr();
        // SAFETY: the mapping is owned by the MR and outlives the registration.
        unsafe { self.reg(ptr, len, access, Some(map)) }
    }

    /// Allocates `len` zeroed bytes backed by huge pages (`MAP_HUGETLB`, the
    /// system's default huge page size) and registers them. Fails with a
    /// clear error (ENOMEM) when the system has no free huge pages: reserve
    /// them with `vm.nr_hugepages`.
    pub fn alloc_mr_huge(&self, len: usize, access: AccessFlags) -> Result<Mr<'static>> {
        if len == 0 {
            return Err(Error::invalid(
                "cannot register a zero-length memory region",
            ));
        }
        let huge = default_huge_page_size()?;
        // hugetlb mappings are made and unmapped in whole huge pages.
        let map_len = len
            .checked_next_multiple_of(huge)
            .ok_or_else(|| Error::invalid("length overflows when rounded to huge pages"))?;
        let mut map = memmap2::MmapOptions::new()
            .len(map_len)
            .huge(None)
            .map_anon()
            .map_err(|source| Error::Io {
                what: format!("mapping {map_len} bytes of huge pages ({huge}-byte pages)"),
                source,
            })?;
        let ptr = map.as_mut_ptr();
        // SAFETY: the mapping is owned by the MR and outlives the registration.
        unsafe { self.reg(ptr, len, access, Some(map)) }
    }

    /// # Safety
    /// `addr..addr+len` must stay valid, and untouched except through the MR,
    /// for the MR's lifetime.
    unsafe fn reg<'a>(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
        owned: Option<MmapMut>,
    ) -> Result<Mr<'a>> {
        if len == 0 {
            return Err(Error::invalid(
                "cannot register a zero-length memory region",
            ));
        }
        check_access(access)?;
        // Marked before pinning (see crate::fork); unmarked if this fails.
        let fork = crate::fork::protect(addr, len)?;
        let cmd = RegMr {
            response: 0,
            start: addr as u64,
            length: len as u64,
            hca_va: addr as u64,
            pd_handle: self.inner.handle,
            access_flags: access.bits(),
        };
        // SAFETY: REG_MR's start..start+length is addr..addr+len, which this
        // function's caller keeps valid, and untouched but through the MR,
        // for the MR's life (ended by DEREG_MR in Drop); the response
        // pointer is write_cmd's own.
        let resp: RegMrResp =
            unsafe { write_cmd(self.context().fd(), nr::REG_MR, &cmd, &[], &mut []) }
                .map_err(Error::kernel("reg_mr"))?;
        Ok(Mr {
            pd: self.clone(),
            handle: resp.mr_handle,
            lkey: resp.lkey,
            rkey: resp.rkey,
            addr,
            len,
            access,
            _fork: fork,
            _owned: owned,
            _borrow: PhantomData,
        })
    }
}

impl Mr<'_> {
    /// Local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key, for peers.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Always false: zero-length MRs are refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Access flags it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// The PD it belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    fn bounds(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        if start > end || end > self.len {
            return Err(Error::invalid(format!(
                "range {start}..{end} outside the {}-byte memory region",
                self.len
            )));
        }
        Ok((start, end))
    }

    /// An SGE covering `range` of the MR (bounds-checked; at most 4 GiB - 1).
    pub fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge> {
        let (s, e) = self.bounds(range)?;
        let length =
            u32::try_from(e - s).map_err(|_| Error::invalid("an SGE covers at most 4 GiB - 1"))?;
        Ok(Sge {
            addr: self.addr as u64 + s as u64,
            length,
            lkey: self.lkey,
        })
    }

    /// Changes the MR's access flags in place (REREG_MR); the keys may
    /// change, so send peers the new [`Mr::remote`]. Refused by the kernel
    /// with `EOPNOTSUPP` where the driver cannot re-register (rxe before
    /// Linux 6.4 or so has no re-registration at all).
    pub fn rereg_access(&mut self, access: AccessFlags) -> Result<()> {
        check_access(access)?;
        self.rereg(REREG_ACCESS, self.pd.clone(), access)
    }

    /// Moves the MR to another PD of the same context (REREG_MR).
    pub fn rereg_pd(&mut self, pd: &Pd) -> Result<()> {
        if !pd.context().same(self.pd.context()) {
            return Err(Error::invalid("the PD belongs to another device context"));
        }
        self.rereg(REREG_PD, pd.clone(), self.access)
    }

    fn rereg(&mut self, flags: u32, pd: Pd, access: AccessFlags) -> Result<()> {
        let cmd = ReregMr {
            response: 0,
            mr_handle: self.handle,
            flags,
            start: self.addr as u64,
            length: self.len as u64,
            hca_va: self.addr as u64,
            pd_handle: pd.handle(),
            access_flags: access.bits(),
        };
        // SAFETY: REREG_MR's start..start+length is the MR's own memory,
        // already registered and held by `self` until DEREG_MR; the
        // response pointer is write_cmd's own.
        let resp: ReregMrResp =
            unsafe { write_cmd(self.pd.context().fd(), nr::REREG_MR, &cmd, &[], &mut []) }
                .map_err(Error::kernel("rereg_mr"))?;
        self.lkey = resp.lkey;
        self.rkey = resp.rkey;
        self.access = access;
        self.pd = pd;
        Ok(())
    }

    /// The descriptor a peer needs for RDMA on the whole MR.
    pub fn remote(&self) -> RemoteMr {
        RemoteMr {
            addr: self.addr as u64,
            len: self.len as u64,
            rkey: self.rkey,
        }
    }

    /// Copies `data` into the MR at `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        let (s, _) = self.bounds(offset..offset.saturating_add(data.len()))?;
        // SAFETY: bounds checked; the MR memory is valid and not referenced
        // by any Rust reference (see the module docs).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.addr.add(s), data.len()) };
        Ok(())
    }

    /// Copies from the MR at `offset` into `out`.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let (s, _) = self.bounds(offset..offset.saturating_add(out.len()))?;
        // SAFETY: bounds checked; `out` is a distinct Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(self.addr.add(s), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Fills `range` with `byte`.
    pub fn fill(&mut self, range: impl RangeBounds<usize>, byte: u8) -> Result<()> {
        let (s, e) = self.bounds(range)?;
        // SAFETY: bounds checked.
        unsafe { std::ptr::write_bytes(self.addr.add(s), byte, e - s) };
        Ok(())
    }

    /// Copies the whole MR out.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.len];
        // read_at cannot fail on the MR's own length.
        let _ = self.read_at(0, &mut v);
        v
    }

    /// The MR's memory as a slice.
    ///
    /// # Safety
    /// No work request that writes this memory (receive, RDMA READ target,
    /// remote WRITE or atomic) may be outstanding while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: valid for len bytes; the caller excludes concurrent writes.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }

    /// The MR's memory as a mutable slice.
    ///
    /// # Safety
    /// No work request that reads or writes this memory may be outstanding
    /// while the slice lives.
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: valid for len bytes; the caller excludes concurrent access.
        unsafe { std::slice::from_raw_parts_mut(self.addr, self.len) }
    }
}

impl Drop for Mr<'_> {
    fn drop(&mut self) {
        let cmd = DeregMr {
            mr_handle: self.handle,
        };
        // After DEREG_MR returns the device no longer touches the memory, so
        // the borrow (or owned mapping) may end. EIO/ENODEV mean the device
        // is gone and the kernel already tore the registration down.
        // SAFETY: DEREG_MR carries no user address.
        match unsafe {
            write_cmd::<_, NoResp>(self.pd.context().fd(), nr::DEREG_MR, &cmd, &[], &mut [])
        } {
            Ok(_) | Err(Errno::EIO | Errno::ENODEV) => {}
            Err(_) => {
                // The registration may still be live (e.g. EBUSY): never
                // hand memory the device may still write back to the
                // allocator, and keep its pages out of forked children.
                // A caller's borrowed buffer cannot be kept.
                self._fork.keep();
                if let Some(map) = self._owned.take() {
                    std::mem::forget(map);
                }
            }
        }
    }
}
