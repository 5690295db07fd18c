//! Registration: the checks REG_MR and a moving REREG_MR make before the
//! kernel is asked, and the [`Mr`]s built from the kernel's answer, over
//! the `unsafe` commands of `crate::sys::mr`. Each function that calls
//! one is allowed `unsafe` where it stands, its contract written down.

use rverbs_abi::mr::{RegMrResp, ReregMrResp};

use super::{
    check_access, check_iova, check_offered, with_optional_fallback, AccessFlags, Backing, Mr,
    MrBuf, Raw, Scoped,
};
use crate::error::{Error, InvalidKind, Result};
use crate::pd::Pd;
use crate::sys::mr::{self as cmd, Region};

/// Registers `buf`, which owns its memory, in `pd` (addressed from `iova`
/// if given): [`crate::Pd::register`] and [`crate::Pd::register_at`].
#[allow(unsafe_code)]
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
#[allow(unsafe_code)]
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
#[allow(unsafe_code)]
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
#[allow(unsafe_code)]
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
        // SAFETY: addr..addr+len is what this function's caller keeps
        // valid, and untouched but through the MR, until the MR is
        // deregistered (Drop or into_inner), or forever if deregistration
        // fails: reg_mr's contract.
        unsafe {
            cmd::reg_mr(
                pd.context().fd(),
                pd.handle(),
                addr,
                len,
                iova,
                access.bits(),
            )
        }
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
#[allow(unsafe_code)]
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
        // SAFETY: the new range addr..addr+len is what this function's
        // caller keeps valid and untouched but through the MR until it is
        // deregistered: rereg_trans's contract.
        unsafe {
            cmd::rereg_trans(
                pd.context().fd(),
                mr.handle(),
                flags,
                addr,
                len,
                iova,
                pd.handle(),
                access.bits(),
            )
        }
    });
    let resp: ReregMrResp = resp.map_err(Error::kernel("rereg_mr"))?;
    // SAFETY: this function's contract, which covers the MR's remaining
    // life.
    let region = unsafe { Region::new(addr, len) };
    mr.moved(&resp, region, iova, pd.clone(), access, fork);
    Ok(())
}
