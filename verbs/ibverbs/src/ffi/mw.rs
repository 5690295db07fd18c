//! Memory windows: the context operations behind `verbs.h`'s inline
//! `ibv_alloc_mw`, `ibv_dealloc_mw` and `ibv_bind_mw`, and the BIND_MW
//! request that `ibv_post_send` and the builder's `ibv_wr_bind_mw` post.
//!
//! As in libibverbs, the program owns the window's key: `mw->rkey` is
//! what a bind reads as the window's current key, `ibv_bind_mw` (type 1)
//! sets it to the key the bind asks for once the request is posted (the
//! program puts the old one back if the bind completes in error), and a
//! type 2 bind posts the key the program chose (`ibv_inc_rkey`). MRs a
//! window is bound to are the program's (`ibv_reg_mr` with
//! `IBV_ACCESS_MW_BIND`); while a window is bound, `ibv_dereg_mr` fails
//! with the kernel's errno (rxe: `EINVAL`). On a provider without windows (mlx5 here,
//! which needs UMR requests) `ibv_alloc_mw` answers `EOPNOTSUPP`.

use std::cell::UnsafeCell;
use std::ffi::c_int;
use std::ptr;

use rverbs::{AccessFlags, Mw, MwBindWr, MwType, SendFlags, SendWr};

use super::pd::{mr_lkey, pd_rec, IbvMr, IbvPd};
use super::qp::{flush_send, qp_rec, IbvQp, IbvSendWr};
use super::{errno_of, errno_with, guard, null_with, IbvContext};

/// `IBV_MW_TYPE_1`.
const MW_TYPE_1: c_int = 1;
/// `IBV_MW_TYPE_2`.
const MW_TYPE_2: c_int = 2;
/// `IBV_ACCESS_ZERO_BASED`: a window addressed from 0, which rxe refuses.
const ACCESS_ZERO_BASED: u32 = 1 << 5;

/// `struct ibv_mw`.
#[repr(C)]
pub struct IbvMw {
    /// The context.
    pub context: *mut IbvContext,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// The window's current key (the program's to read and write).
    pub rkey: u32,
    /// The kernel's handle.
    pub handle: u32,
    /// `enum ibv_mw_type`.
    pub mw_type: c_int,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvMwBindInfo {
    /// The MR the range is in (NULL with a zero length: unbind).
    pub mr: *mut IbvMr,
    /// Start of the range.
    pub addr: u64,
    /// Bytes in the range.
    pub length: u64,
    /// `IBV_ACCESS_REMOTE_*` rights granted.
    pub mw_access_flags: u32,
}

/// `struct ibv_mw_bind`: what `ibv_bind_mw` takes.
#[repr(C)]
pub struct IbvMwBind {
    /// The request's id.
    pub wr_id: u64,
    /// `IBV_SEND_*` flags.
    pub send_flags: u32,
    /// The range and rights.
    pub bind_info: IbvMwBindInfo,
}

/// The `bind_mw` member of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvSendWrBindMw {
    /// The window.
    pub mw: *mut IbvMw,
    /// The key the window gets.
    pub rkey: u32,
    /// The range and rights.
    pub bind_info: IbvMwBindInfo,
}

/// `ibv_context_ops.alloc_mw`.
pub type AllocMwFn = unsafe extern "C" fn(*mut IbvPd, c_int) -> *mut IbvMw;
/// `ibv_context_ops.bind_mw`.
pub type BindMwFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvMw, *mut IbvMwBind) -> c_int;
/// `ibv_context_ops.dealloc_mw`.
pub type DeallocMwFn = unsafe extern "C" fn(*mut IbvMw) -> c_int;

/// A window handed out.
#[repr(C)]
struct MwRec {
    /// Read and written by the program (`rkey`): never behind a Rust
    /// reference.
    c: UnsafeCell<IbvMw>,
    /// Its PD's pointer (a copy of `c.pd`, which this library never
    /// changes).
    pd: *mut IbvPd,
    /// Dropping it deallocates the window.
    mw: Mw,
}

/// `ibv_context_ops.alloc_mw`: a window of `mw_type` on `pd`, or NULL
/// with errno (`EINVAL` for another type, `EOPNOTSUPP` on a provider
/// without windows).
///
/// # Safety
/// `pd` is NULL or a live PD of this library.
pub unsafe extern "C" fn alloc_mw(pd: *mut IbvPd, mw_type: c_int) -> *mut IbvMw {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { pd_rec(pd) }) else {
            return null_with(libc::EINVAL);
        };
        let ty = match mw_type {
            MW_TYPE_1 => MwType::Type1,
            MW_TYPE_2 => MwType::Type2,
            _ => return null_with(libc::EINVAL),
        };
        let mw = match rec.pd.alloc_mw(ty) {
            Ok(mw) => mw,
            Err(e) => return null_with(errno_of(&e)),
        };
        rec.hold();
        let c = IbvMw {
            context: rec.c_context(),
            pd,
            rkey: mw.rkey(),
            handle: mw.handle(),
            mw_type,
        };
        Box::into_raw(Box::new(MwRec {
            c: UnsafeCell::new(c),
            pd,
            mw,
        }))
        .cast::<IbvMw>()
    })
}

/// `ibv_context_ops.dealloc_mw`: deallocates the window (revoking its
/// key); 0, or `EINVAL` for NULL.
///
/// # Safety
/// `mw` is NULL or a window of this library not yet deallocated; no other
/// call uses it during or after the call.
pub unsafe extern "C" fn dealloc_mw(mw: *mut IbvMw) -> c_int {
    guard(libc::EIO, || {
        if mw.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: from Box::into_raw in alloc_mw (the contract); freed
        // once, here. Dropping its Mw deallocates the window.
        let rec = unsafe { Box::from_raw(mw.cast::<MwRec>()) };
        // SAFETY: a PD outlives its windows (it counted this one).
        if let Some(pd) = unsafe { pd_rec(rec.pd) } {
            pd.release();
        }
        drop(rec);
        0
    })
}

/// The BIND_MW request binding the window `mw` (its current key read
/// from the program's struct) to `info` under the new key `rkey`; or the
/// errno of what rxe's provider refuses before posting (a zero-based
/// window, access bits libibverbs does not define).
///
/// # Safety
/// `mw` is a live window of this library; `info.mr` is NULL or a live MR
/// of this library.
pub(super) unsafe fn bind_request(
    wr_id: u64,
    mw: *mut IbvMw,
    rkey: u32,
    info: &IbvMwBindInfo,
) -> Result<SendWr<'static>, c_int> {
    // SAFETY: forwarded from this function's contract.
    Ok(SendWr::bind_mw_wr(wr_id, unsafe {
        bind_parts(mw, rkey, info)
    }?))
}

/// What [`bind_request`] binds: the window's current key, the new one, the
/// MR's lkey and the range and rights.
///
/// # Safety
/// As [`bind_request`].
pub(super) unsafe fn bind_parts(
    mw: *mut IbvMw,
    rkey: u32,
    info: &IbvMwBindInfo,
) -> Result<MwBindWr, c_int> {
    if mw.is_null() || info.mw_access_flags & ACCESS_ZERO_BASED != 0 {
        return Err(libc::EINVAL);
    }
    let access = AccessFlags::from_bits(info.mw_access_flags).ok_or(libc::EINVAL)?;
    // SAFETY: a live window (the contract), its key read in place.
    let mw_rkey = unsafe { ptr::addr_of!((*mw).rkey).read() };
    // SAFETY: NULL or a live MR (the contract); an unbind names none.
    let mr_lkey = unsafe { mr_lkey(info.mr) }.unwrap_or(0);
    Ok(MwBindWr {
        mw_rkey,
        rkey,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access,
    })
}

/// The key after `rkey` (`ibv_inc_rkey`): the same index, the low byte
/// stepped.
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// `ibv_context_ops.bind_mw`, behind `verbs.h`'s inline `ibv_bind_mw`:
/// binds the type 1 window `mw` through `qp` (RC or UC, in RTS) with the
/// next key, and sets `mw->rkey` to it once the request is posted (put the
/// old key back if the bind completes in error); 0, or the errno (also
/// set).
///
/// # Safety
/// `qp` and `mw` are live objects of this library, `mw_bind` points to a
/// readable `struct ibv_mw_bind` whose MR is NULL or a live MR of this
/// library.
pub unsafe extern "C" fn bind_mw(qp: *mut IbvQp, mw: *mut IbvMw, mw_bind: *mut IbvMwBind) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(b)) = (unsafe { qp_rec(qp) }, unsafe { mw_bind.as_ref() }) else {
            return errno_with(libc::EINVAL);
        };
        if mw.is_null() {
            return errno_with(libc::EINVAL);
        }
        // SAFETY: a live window (the contract).
        let rkey = inc_rkey(unsafe { ptr::addr_of!((*mw).rkey).read() });
        // SAFETY: forwarded from this function's contract.
        let wr = match unsafe { bind_request(b.wr_id, mw, rkey, &b.bind_info) } {
            Ok(wr) => wr,
            Err(e) => return errno_with(e),
        };
        let Some(flags) = SendFlags::from_bits(b.send_flags & 0x7) else {
            return errno_with(libc::EINVAL);
        };
        if b.send_flags & !0x7 != 0 {
            return errno_with(libc::EINVAL);
        }
        let wrs = [wr.flags(flags)];
        let from: [*mut IbvSendWr; 1] = [ptr::null_mut()];
        let posted = flush_send(&mut rec.qp.lock(), &wrs, &from);
        if let Err((_, e)) = posted {
            return errno_with(e);
        }
        // SAFETY: a live window; its key is written in place, as
        // libibverbs' providers write it.
        unsafe { ptr::addr_of_mut!((*mw).rkey).write(rkey) };
        0
    })
}
