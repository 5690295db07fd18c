//! A registered region's memory ([`Region`]), and the commands that
//! register it (REG_MR, REREG_MR) with the contracts that make them sound.

use std::os::fd::BorrowedFd;

use rverbs_abi::cmd::{nr, write_cmd_fixed};
use rverbs_abi::mr::{RegMr, RegMrResp, ReregMr, ReregMrResp};
use rverbs_abi::Errno;

use crate::error::{Error, InvalidKind, Result};
use crate::mr::{
    check_access, check_iova, check_offered, with_optional_fallback, AccessFlags, Backing, Mr,
    MrBuf, Raw, Scoped,
};
use crate::pd::Pd;

/// `IB_MR_REREG_TRANS`: REREG_MR moves the MR to a new address range.
pub(crate) const REREG_TRANS: u32 = 1 << 0;
/// `IB_MR_REREG_PD`: REREG_MR changes the PD.
pub(crate) const REREG_PD: u32 = 1 << 1;
/// `IB_MR_REREG_ACCESS`: REREG_MR changes the access flags.
pub(crate) const REREG_ACCESS: u32 = 1 << 2;

/// `len` bytes at `addr` that the device may read and write at any time:
/// the memory of an [`Mr`]. The CPU reaches it only through copies
/// ([`Region::write`], [`Region::read`], [`Region::fill`]) and the
/// `unsafe` views, never through a reference it could invalidate.
///
/// Made only here, by [`register`], whose contract is the one of
/// [`Region::new`].
pub(crate) struct Region {
    addr: *mut u8,
    len: usize,
}

impl Region {
    /// # Safety
    ///
    /// `addr..addr + len` must stay valid for reads and writes for as
    /// long as the region lives, and no Rust reference to any of it may be
    /// live meanwhile but those the region's own `unsafe` views hand out.
    unsafe fn new(addr: *mut u8, len: usize) -> Region {
        Region { addr, len }
    }

    /// Start address.
    pub(crate) fn addr(&self) -> *mut u8 {
        self.addr
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Panics unless `offset..offset + n` lies in the region (the callers
    /// checked it already, with an error of their own).
    #[inline]
    fn check(&self, offset: usize, n: usize) {
        assert!(
            offset <= self.len && n <= self.len - offset,
            "range {offset}+{n} outside the {}-byte region",
            self.len
        );
    }

    /// Copies `data` in at `offset`.
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        // SAFETY: in bounds (checked); the memory is valid for writes and
        // no Rust reference to it is live (Region::new's contract), and
        // `data`, a live Rust borrow, cannot overlap it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.addr.add(offset), data.len()) };
    }

    /// Copies out from `offset` into `out`.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: in bounds (checked); the memory is valid for reads, and
        // `out` is a distinct, exclusively borrowed Rust buffer.
        unsafe {
            std::ptr::copy_nonoverlapping(self.addr.add(offset), out.as_mut_ptr(), out.len())
        };
    }

    /// Sets `start..end` to `byte`.
    pub(crate) fn fill(&mut self, start: usize, end: usize, byte: u8) {
        assert!(start <= end, "range {start}..{end} is reversed");
        self.check(start, end - start);
        // SAFETY: in bounds (checked); valid for writes, no reference live.
        unsafe { std::ptr::write_bytes(self.addr.add(start), byte, end - start) };
    }

    /// The memory as a slice.
    ///
    /// # Safety
    ///
    /// Nothing may write the memory while the slice lives: no work
    /// request that writes it (receive, RDMA READ target, remote WRITE or
    /// atomic) may be outstanding.
    pub(crate) unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: valid for `len` bytes (Region::new's contract); the
        // caller excludes writes while the slice lives.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }

    /// The memory as a mutable slice.
    ///
    /// # Safety
    ///
    /// Nothing else may read or write the memory while the slice lives:
    /// no work request on it may be outstanding.
    pub(crate) unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: valid for `len` bytes (Region::new's contract); the
        // caller excludes any other access while the slice lives, and
        // `&mut self` any other view.
        unsafe { std::slice::from_raw_parts_mut(self.addr, self.len) }
    }
}

/// Registers `buf`, which owns its memory, in `pd` (addressed from `iova`
/// if given): [`crate::Pd::register`] and [`crate::Pd::register_at`].
pub(crate) fn register_owned<B: MrBuf>(
    pd: &Pd,
    mut buf: B,
    access: AccessFlags,
    iova: Option<u64>,
) -> std::result::Result<Mr<B>, (Error, B)> {
    let (addr, len) = (buf.mr_ptr(), buf.mr_len());
    // SAFETY: by `MrBuf`'s contract `addr..addr+len` is valid, owned by
    // `buf` alone and stable while `buf` lives; the MR keeps `buf` until
    // DEREG_MR succeeded, and leaks it otherwise. An IOVA is a number the
    // device translates through this registration, not a user address.
    unsafe { register(pd, addr, len, access, iova, buf, Backing::Owned) }
}

/// Registers `buf` in `pd` for the call of `f` only:
/// [`crate::Pd::register_scoped`] (which checked `access` for a borrowed
/// registration): [`register_scoped_all`] of one buffer.
pub(crate) fn register_scoped<R>(
    pd: &Pd,
    buf: &mut [u8],
    access: AccessFlags,
    f: impl for<'s> FnOnce(&mut Mr<Scoped<'s>>) -> R,
) -> Result<R> {
    register_scoped_all(pd, [buf], access, |[mr]| Ok::<_, Error>(f(mr)))
}

/// Registers each of `bufs` in `pd` for the call of `f` only:
/// [`crate::Pd::register_scoped_all`] (which checked `access`).
pub(crate) fn register_scoped_all<const N: usize, R, E: From<Error>>(
    pd: &Pd,
    bufs: [&mut [u8]; N],
    access: AccessFlags,
    f: impl for<'s> FnOnce(&mut [Mr<Scoped<'s>>; N]) -> std::result::Result<R, E>,
) -> std::result::Result<R, E> {
    let mut mrs = Vec::with_capacity(N);
    for buf in bufs {
        // SAFETY: each `buf` is valid and exclusively borrowed for this
        // whole call (the `&mut`s cannot overlap); every MR is owned by
        // this frame (`mrs`, then the array), which `f` only borrows, so
        // each is dropped (DEREG_MR, or abort if that fails) before the
        // borrows end, on return, on an error part-way (the ones
        // registered so far) and on unwinding alike.
        let mr = unsafe {
            register(
                pd,
                buf.as_mut_ptr(),
                buf.len(),
                access,
                None,
                Scoped::new(),
                Backing::Scoped,
            )
        }
        .map_err(|(e, _)| e)?;
        mrs.push(mr);
    }
    let mut mrs: [Mr<Scoped<'_>>; N] = mrs.try_into().map_err(|_| {
        Error::invalid_as(
            crate::error::InvalidKind::Other,
            "register_scoped_all: a registration went missing",
        )
    })?;
    f(&mut mrs)
}

/// Registers `len` bytes at `addr` in `pd`: [`crate::Pd::register_raw`]
/// (which checked `access` for a borrowed registration).
///
/// # Safety
///
/// [`crate::Pd::register_raw`]'s: until the returned MR has been
/// dropped, `addr..addr+len` must stay mapped and valid for reads and
/// writes, and no Rust reference to it may be live while the device can
/// write it; if the MR is forgotten, the memory must never be freed or
/// reused.
pub(crate) unsafe fn register_raw(
    pd: &Pd,
    addr: *mut u8,
    len: usize,
    access: AccessFlags,
) -> Result<Mr<Raw>> {
    // SAFETY: forwarded from this function's contract; a borrowed MR
    // aborts rather than return from a failed deregistration.
    unsafe { register(pd, addr, len, access, None, Raw::new(), Backing::Raw) }.map_err(|(e, _)| e)
}

/// REG_MR of `addr..addr+len` in `pd`, checked first (length, access,
/// capabilities, IOVA), with the fork protection of its pages; the MR
/// owns `buf` (or, `backing` not owned, stands for a borrow of the memory).
///
/// # Safety
///
/// `addr..addr+len` must stay valid, and untouched except through the MR,
/// until the MR is dropped or unwrapped by `into_inner` (`buf` owning it,
/// or, for a borrow, the caller guaranteeing it), and forever if the MR
/// is forgotten or its deregistration fails and it leaks `buf`.
unsafe fn register<B>(
    pd: &Pd,
    addr: *mut u8,
    len: usize,
    access: AccessFlags,
    iova: Option<u64>,
    buf: B,
    backing: Backing,
) -> std::result::Result<Mr<B>, (Error, B)> {
    let (iova, fork) = match checked_range(
        pd,
        addr,
        len,
        access,
        iova,
        "cannot register a zero-length memory region",
    ) {
        Ok(v) => v,
        Err(e) => return Err((e, buf)),
    };
    let (resp, access) = with_optional_fallback(access, |access| {
        let cmd = RegMr {
            response: 0,
            start: addr as u64,
            length: len as u64,
            hca_va: iova,
            pd_handle: pd.handle(),
            access_flags: access.bits(),
        };
        // SAFETY: REG_MR's start..start+length is addr..addr+len, which
        // this function's caller keeps valid, and untouched but through
        // the MR, until the MR is deregistered (Drop or into_inner), or
        // forever if deregistration fails; the response pointer is
        // write_cmd_fixed's own (REG_MR starts with it).
        unsafe { write_cmd_fixed(pd.context().fd(), nr::REG_MR, &cmd) }
    });
    let resp: RegMrResp = match resp {
        Ok(resp) => resp,
        Err(errno) => return Err((Error::kernel("reg_mr")(errno), buf)),
    };
    // SAFETY: this function's contract, which covers the MR's whole life.
    let region = unsafe { Region::new(addr, len) };
    Ok(Mr::from_registration(
        pd.clone(),
        &resp,
        region,
        iova,
        access,
        fork,
        buf,
        backing,
    ))
}

/// What REG_MR and a moving REREG_MR check before the kernel is asked
/// (a non-empty range, `empty` the error's text otherwise; access bits the
/// device offers; the IOVA, `addr` unless given), and the fork marking of
/// `addr..addr+len`, made before the kernel pins the pages and undone when
/// the returned guard drops (if the command fails).
fn checked_range(
    pd: &Pd,
    addr: *mut u8,
    len: usize,
    access: AccessFlags,
    iova: Option<u64>,
    empty: &'static str,
) -> Result<(u64, crate::fork::Guard)> {
    if len == 0 {
        return Err(Error::invalid_as(InvalidKind::Empty, empty));
    }
    check_access(access)?;
    check_offered(access, || pd.context().caps())?;
    let iova = check_iova(addr as u64, len, iova)?;
    Ok((iova, crate::fork::protect(addr, len)?))
}

/// REREG_MR of the raw MR `mr`, moving it to `len` bytes at `addr` (the
/// device knowing them by the same address), on `pd` with `access`, and
/// then the MR's region and fork marking to the new range. Checked first
/// as REG_MR is; the MR is unchanged unless this returns `Ok` (the kernel
/// checks the command whole before it changes the MR).
///
/// # Safety
///
/// `addr..addr+len` must be valid, and untouched except through the MR,
/// from this call until the MR is deregistered (or forever if it is
/// forgotten or its deregistration fails), as for [`register_raw`]; the
/// old range is the caller's again once this returns `Ok`.
pub(crate) unsafe fn rereg_translation(
    mr: &mut Mr<Raw>,
    addr: *mut u8,
    len: usize,
    pd: &Pd,
    access: AccessFlags,
    flags: u32,
) -> Result<()> {
    // The marks count, so the old range's stay if the kernel refuses.
    let (iova, fork) = checked_range(
        pd,
        addr,
        len,
        access,
        None,
        "cannot re-register a memory region over zero bytes",
    )?;
    let (resp, access) = with_optional_fallback(access, |access| {
        let cmd = ReregMr {
            response: 0,
            mr_handle: mr.handle(),
            flags: flags | REREG_TRANS,
            start: addr as u64,
            length: len as u64,
            hca_va: iova,
            pd_handle: pd.handle(),
            access_flags: access.bits(),
        };
        // SAFETY: the new start..start+length is addr..addr+len, which
        // this function's caller keeps valid and untouched but through the
        // MR until it is deregistered; the kernel releases the old pages
        // only once it has moved the MR. The response pointer is
        // write_cmd_fixed's own (REREG_MR starts with it).
        unsafe { write_cmd_fixed(pd.context().fd(), nr::REREG_MR, &cmd) }
    });
    let resp: ReregMrResp = resp.map_err(Error::kernel("rereg_mr"))?;
    // SAFETY: this function's contract, which covers the MR's remaining
    // life.
    let region = unsafe { Region::new(addr, len) };
    mr.moved(&resp, region, iova, pd.clone(), access, fork);
    Ok(())
}

/// REREG_MR of the MR `mr_handle`, whose memory is `region`, changing its
/// PD and/or its access flags (`flags`: [`REREG_PD`], [`REREG_ACCESS`],
/// nothing else).
pub(crate) fn rereg_mr(
    fd: BorrowedFd<'_>,
    region: &Region,
    mr_handle: u32,
    flags: u32,
    iova: u64,
    pd_handle: u32,
    access: AccessFlags,
) -> std::result::Result<ReregMrResp, Errno> {
    assert_eq!(
        flags & !(REREG_PD | REREG_ACCESS),
        0,
        "REREG_MR here changes the PD or the access flags only"
    );
    let cmd = ReregMr {
        response: 0,
        mr_handle,
        flags,
        start: region.addr() as u64,
        length: region.len() as u64,
        hca_va: iova,
        pd_handle,
        access_flags: access.bits(),
    };
    // SAFETY: without IB_MR_REREG_TRANS (refused above) the kernel keeps
    // the MR's pages as they are: the start..start+length it carries is
    // the MR's own memory (`region`), already registered and held until
    // DEREG_MR, and no new range is pinned. The response pointer is
    // write_cmd_fixed's own (REREG_MR starts with it).
    unsafe { write_cmd_fixed(fd, nr::REREG_MR, &cmd) }
}
