//! EFA direct verbs (`infiniband/efadv.h`) on this library's objects:
//! the device query, SRD QPs (`IBV_QPT_DRIVER` of driver type SRD), the
//! device's number of an AH, and CQs whose completions carry the sender's
//! GID. Each is exported as `rverbs_efadv_*` (a private version of this
//! library): our `libefa.so.1` and `libefa.a` (the `rverbs-efadv`
//! package) define the public `efadv_*` names over them, as rdma-core's
//! libefa is a library of its own over its libibverbs.
//!
//! The rules are libefa's (rdma-core 44, `EFA_1.0` to `EFA_1.2`): the
//! `int` functions return an errno (not -1), the pointer ones NULL with
//! errno; a device that is not EFA answers `EOPNOTSUPP`; an `inlen` too
//! short for the fields the function needs, a non-zero `comp_mask` or
//! reserved byte, or non-zero bytes past the struct this library knows
//! answer `EINVAL`; the query functions zero the caller's `inlen` bytes
//! and fill the fields that fit.

use std::ffi::c_int;
use std::mem::{offset_of, size_of};
use std::ptr;

use super::cq::{current_sgid, CqRec, IbvCqEx, IbvCqInitAttrEx};
use super::pd::{pd_rec, IbvPd};
use super::qp::{new_qp, IbvAh, IbvQp, IbvQpInitAttr, IBV_QPT_DRIVER};
use super::qp_ex::{create_qp_ex_of, IbvQpInitAttrEx};
use super::{context_rec, guard, null_with, IbvContext};

/// `EFADV_DEVICE_ATTR_CAPS_*`.
mod caps {
    pub(super) const RDMA_READ: u32 = 1 << 0;
    pub(super) const RNR_RETRY: u32 = 1 << 1;
    pub(super) const CQ_WITH_SGID: u32 = 1 << 2;
    pub(super) const RDMA_WRITE: u32 = 1 << 3;
    pub(super) const UNSOLICITED_WRITE_RECV: u32 = 1 << 4;
}

/// `EFADV_WC_EX_WITH_SGID`.
const WC_EX_WITH_SGID: u64 = 1 << 0;

/// `struct efadv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct DeviceAttr {
    comp_mask: u64,
    max_sq_wr: u32,
    max_rq_wr: u32,
    max_sq_sge: u16,
    max_rq_sge: u16,
    inline_buf_size: u16,
    reserved: [u8; 2],
    device_caps: u32,
    max_rdma_size: u32,
}

/// `struct efadv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct AhAttr {
    comp_mask: u64,
    ahn: u16,
    reserved: [u8; 6],
}

/// `struct efadv_qp_init_attr`.
#[repr(C)]
struct QpInitAttr {
    comp_mask: u64,
    driver_qp_type: u32,
    reserved: [u8; 4],
}

/// `struct efadv_cq_init_attr`.
#[repr(C)]
struct CqInitAttr {
    comp_mask: u64,
    wc_flags: u64,
}

/// `struct efadv_cq`: what `efadv_cq_from_ibv_cq_ex` returns, inside the
/// CQ's record. `wc_read_sgid` is set only on a CQ created with
/// `EFADV_WC_EX_WITH_SGID`, as libefa sets it.
#[repr(C)]
pub struct EfadvCq {
    comp_mask: u64,
    wc_read_sgid: Option<unsafe extern "C" fn(*mut EfadvCq, *mut [u8; 16]) -> c_int>,
}

impl EfadvCq {
    /// The `struct efadv_cq` of a CQ created with source GIDs or not.
    pub(super) fn new(source_gid: bool) -> EfadvCq {
        EfadvCq {
            comp_mask: 0,
            wc_read_sgid: if source_gid { Some(wc_read_sgid) } else { None },
        }
    }
}

/// `efadv_cq.wc_read_sgid`: the sender's GID of the current completion
/// (in a `start_poll` bracket): 0 with it written to `sgid`, `-ENOENT`
/// when the completion has none (the receiver has an AH for the sender,
/// or it is a send's), as libefa answers.
///
/// # Safety
/// `dv` is what `efadv_cq_from_ibv_cq_ex` returned for a live CQ of this
/// library taken by this thread's `start_poll`; `sgid` points to 16
/// writable bytes.
unsafe extern "C" fn wc_read_sgid(dv: *mut EfadvCq, sgid: *mut [u8; 16]) -> c_int {
    guard(-libc::EIO, || {
        if dv.is_null() || sgid.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: `dv` is the `efadv` field of a live CqRec (the
        // contract; an UnsafeCell has its value's address), so stepping
        // back by the field's offset gives the record.
        let rec = unsafe { &*dv.byte_sub(offset_of!(CqRec, efadv)).cast::<CqRec>() };
        // SAFETY: the caller is in the record's poll bracket (the contract).
        match unsafe { current_sgid(rec) } {
            Some(g) => {
                // SAFETY: 16 writable bytes (the contract).
                unsafe { sgid.write_unaligned(g) };
                0
            }
            None => -libc::ENOENT,
        }
    })
}

/// The first `N` bytes (the struct this library knows) of the caller's
/// `len`-byte struct at `p`, zero past `len`; `None` if a byte past the
/// first `N` is not zero (libefa's check that a caller's newer struct asks
/// for nothing more).
///
/// # Safety
/// `p` points to `len` readable bytes.
unsafe fn read_known<const N: usize>(p: *const u8, len: usize) -> Option<[u8; N]> {
    let mut known = [0u8; N];
    // SAFETY: `len` readable bytes at `p` (the contract); at most `N`
    // written into `known`.
    unsafe { ptr::copy_nonoverlapping(p, known.as_mut_ptr(), len.min(N)) };
    if len > N {
        // SAFETY: `len` readable bytes at `p` (the contract), `N < len`.
        let tail = unsafe { std::slice::from_raw_parts(p.add(N), len - N) };
        if tail.iter().any(|&b| b != 0) {
            return None;
        }
    }
    Some(known)
}

/// The native-endian `u64` at `at` of `bytes` (0 past its end).
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let b = bytes.get(at..at + 8).and_then(|b| b.try_into().ok());
    u64::from_ne_bytes(b.unwrap_or_default())
}

/// Zeroes the caller's `inlen` bytes at `out` and writes the first
/// `min(inlen, size_of::<T>())` bytes of `v` there.
///
/// # Safety
/// `out` points to `inlen` writable bytes.
unsafe fn write_prefix<T: Copy>(out: *mut u8, inlen: usize, v: &T) {
    // SAFETY: `inlen` writable bytes at `out` (the contract); `v` is a
    // plain `repr(C)` value of `size_of::<T>()` readable bytes.
    unsafe {
        ptr::write_bytes(out, 0, inlen);
        ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), out, inlen.min(size_of::<T>()));
    }
}

/// `efadv_query_device`: the device's EFA limits and capabilities in the
/// `inlen` bytes of `attr`; 0 or an errno (`EOPNOTSUPP`: not EFA;
/// `EINVAL`: `inlen` does not reach `inline_buf_size`). `device_caps`
/// and `max_rdma_size` are written when `inlen` reaches them.
///
/// # Safety
/// `context` is a live context of this library; `attr` points to `inlen`
/// writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rverbs_efadv_query_device(
    context: *mut IbvContext,
    attr: *mut u8,
    inlen: u32,
) -> c_int {
    guard(libc::EIO, || {
        let Some(a) = context_rec(context).and_then(|c| c.ctx.efa_attr()) else {
            return libc::EOPNOTSUPP;
        };
        let inlen = inlen as usize;
        if attr.is_null() || inlen <= offset_of!(DeviceAttr, inline_buf_size) {
            return libc::EINVAL;
        }
        let mut out = DeviceAttr {
            max_sq_wr: a.max_sq_wr,
            max_rq_wr: a.max_rq_wr,
            max_sq_sge: a.max_sq_sge,
            max_rq_sge: a.max_rq_sge,
            inline_buf_size: a.inline_buf_size,
            ..DeviceAttr::default()
        };
        if inlen > offset_of!(DeviceAttr, device_caps) {
            for (on, bit) in [
                (a.rnr_retry, caps::RNR_RETRY),
                (a.cq_with_sgid, caps::CQ_WITH_SGID),
                (a.rdma_write, caps::RDMA_WRITE),
                (a.unsolicited_write_recv, caps::UNSOLICITED_WRITE_RECV),
            ] {
                if on {
                    out.device_caps |= bit;
                }
            }
        }
        if inlen > offset_of!(DeviceAttr, max_rdma_size) {
            out.max_rdma_size = a.max_rdma_size;
            if a.rdma_read {
                out.device_caps |= caps::RDMA_READ;
            }
        }
        // SAFETY: `inlen` writable bytes at `attr` (the contract).
        unsafe { write_prefix(attr, inlen, &out) };
        0
    })
}

/// `efadv_query_ah`: the device's number of the AH (`ahn`) in the `inlen`
/// bytes of `attr`; 0 or an errno (`EOPNOTSUPP`: not EFA; `EINVAL`:
/// `inlen` does not reach `ahn`).
///
/// # Safety
/// `ah` is a live AH of this library; `attr` points to `inlen` writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn rverbs_efadv_query_ah(ah: *mut IbvAh, attr: *mut u8, inlen: u32) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a live AH of this library (the contract).
        let Some(rec) = (unsafe { super::qp::ah_rec(ah) }) else {
            return libc::EINVAL;
        };
        // SAFETY: the AH's `struct ibv_ah`, which this library wrote.
        let context = unsafe { (*ah).context };
        if context_rec(context)
            .and_then(|c| c.ctx.efa_attr())
            .is_none()
        {
            return libc::EOPNOTSUPP;
        }
        let inlen = inlen as usize;
        if attr.is_null() || inlen <= offset_of!(AhAttr, ahn) {
            return libc::EINVAL;
        }
        let Ok(ahn) = u16::try_from(rec.ah.ah_num()) else {
            return libc::EINVAL;
        };
        let out = AhAttr {
            ahn,
            ..AhAttr::default()
        };
        // SAFETY: `inlen` writable bytes at `attr` (the contract).
        unsafe { write_prefix(attr, inlen, &out) };
        0
    })
}

/// Whether `context` is an open EFA context of this library.
fn is_efa(context: *mut IbvContext) -> bool {
    context_rec(context).is_some_and(|c| c.ctx.efa_attr().is_some())
}

/// `efadv_create_driver_qp`: an SRD QP (`driver_qp_type` 0) in RESET as
/// `ibv_create_qp` makes one, `attr.cap` updated; NULL with errno
/// (`EOPNOTSUPP`: not EFA; `EINVAL`: `attr.qp_type` is not
/// `IBV_QPT_DRIVER`, or another driver type).
///
/// # Safety
/// As `ibv_create_qp`: `pd` a live PD of this library, `attr` a readable
/// and writable `struct ibv_qp_init_attr` whose CQs are live objects of
/// this library.
#[no_mangle]
pub unsafe extern "C" fn rverbs_efadv_create_driver_qp(
    pd: *mut IbvPd,
    attr: *mut IbvQpInitAttr,
    driver_qp_type: u32,
) -> *mut IbvQp {
    guard(ptr::null_mut(), || {
        // SAFETY: NULL or a live PD (the contract).
        let Some(p) = (unsafe { pd_rec(pd) }) else {
            return null_with(libc::EINVAL);
        };
        if !is_efa(p.c_context()) {
            return null_with(libc::EOPNOTSUPP);
        }
        // SAFETY: forwarded from this function's contract.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            return null_with(libc::EINVAL);
        };
        if a.qp_type != IBV_QPT_DRIVER {
            return null_with(libc::EINVAL);
        }
        // SAFETY: forwarded from this function's contract.
        match unsafe { new_qp(pd, a, None, None, Some(driver_qp_type)) } {
            Ok(rec) => rec.cast::<IbvQp>(),
            Err(e) => null_with(e),
        }
    })
}

/// `efadv_create_qp_ex`: `ibv_create_qp_ex` of an `IBV_QPT_DRIVER` QP of
/// `efa_attr.driver_qp_type` (SRD); NULL with errno (`EOPNOTSUPP`: not
/// EFA; `EINVAL`: another QP type, an `inlen` short of `driver_qp_type`, a
/// non-zero `comp_mask`, reserved byte or byte past the struct).
///
/// # Safety
/// As `ibv_create_qp_ex` for `attr_ex`; `efa_attr` points to `inlen`
/// readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rverbs_efadv_create_qp_ex(
    context: *mut IbvContext,
    attr_ex: *mut IbvQpInitAttrEx,
    efa_attr: *const u8,
    inlen: u32,
) -> *mut IbvQp {
    guard(ptr::null_mut(), || {
        if !is_efa(context) {
            return null_with(libc::EOPNOTSUPP);
        }
        let inlen = inlen as usize;
        // SAFETY: forwarded from this function's contract.
        let Some(a) = (unsafe { attr_ex.as_ref() }) else {
            return null_with(libc::EINVAL);
        };
        if a.qp_type != IBV_QPT_DRIVER
            || efa_attr.is_null()
            || inlen <= offset_of!(QpInitAttr, driver_qp_type)
        {
            return null_with(libc::EINVAL);
        }
        // SAFETY: `inlen` readable bytes at `efa_attr` (the contract).
        let Some(e) = (unsafe { read_known::<{ size_of::<QpInitAttr>() }>(efa_attr, inlen) })
        else {
            return null_with(libc::EINVAL);
        };
        let reserved = &e[offset_of!(QpInitAttr, reserved)..];
        if u64_at(&e, 0) != 0 || reserved.iter().any(|&b| b != 0) {
            return null_with(libc::EINVAL);
        }
        let at = offset_of!(QpInitAttr, driver_qp_type);
        let driver = u32::from_ne_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]]);
        // SAFETY: forwarded from this function's contract.
        unsafe { create_qp_ex_of(attr_ex, Some(driver)) }
    })
}

/// `efadv_create_cq`: `ibv_create_cq_ex`, with the sender's GID in
/// receive completions when `efa_attr.wc_flags` has
/// `EFADV_WC_EX_WITH_SGID`; NULL with errno (`EOPNOTSUPP`: not EFA, or a
/// `wc_flags` bit the device lacks; `EINVAL`: an `inlen` short of
/// `wc_flags`, a non-zero `comp_mask` or byte past the struct).
///
/// # Safety
/// As `ibv_create_cq_ex` for `attr_ex`; `efa_attr` points to `inlen`
/// readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rverbs_efadv_create_cq(
    context: *mut IbvContext,
    attr_ex: *mut IbvCqInitAttrEx,
    efa_attr: *const u8,
    inlen: u32,
) -> *mut IbvCqEx {
    guard(ptr::null_mut(), || {
        let Some(a) = context_rec(context).and_then(|c| c.ctx.efa_attr()) else {
            return null_with(libc::EOPNOTSUPP);
        };
        let inlen = inlen as usize;
        if efa_attr.is_null() || inlen <= offset_of!(CqInitAttr, wc_flags) {
            return null_with(libc::EINVAL);
        }
        // SAFETY: `inlen` readable bytes at `efa_attr` (the contract).
        let Some(e) = (unsafe { read_known::<{ size_of::<CqInitAttr>() }>(efa_attr, inlen) })
        else {
            return null_with(libc::EINVAL);
        };
        if u64_at(&e, 0) != 0 {
            return null_with(libc::EINVAL);
        }
        let wc_flags = u64_at(&e, offset_of!(CqInitAttr, wc_flags));
        let supported = if a.cq_with_sgid { WC_EX_WITH_SGID } else { 0 };
        if wc_flags & !supported != 0 {
            return null_with(libc::EOPNOTSUPP);
        }
        // SAFETY: forwarded from this function's contract.
        unsafe { super::cq::create_cq_ex_of(context, attr_ex, wc_flags & WC_EX_WITH_SGID != 0) }
    })
}

/// `efadv_cq_from_ibv_cq_ex`: the CQ's `struct efadv_cq` (whose
/// `wc_read_sgid` is set only on a CQ created with
/// `EFADV_WC_EX_WITH_SGID`); NULL for NULL.
///
/// # Safety
/// `cq` is NULL or a live extended CQ of this library.
#[no_mangle]
pub unsafe extern "C" fn rverbs_efadv_cq_from_ibv_cq_ex(cq: *mut IbvCqEx) -> *mut EfadvCq {
    guard(ptr::null_mut(), || {
        // SAFETY: NULL or a live CQ of this library (the contract).
        match unsafe { super::cq::cq_rec(cq.cast()) } {
            Some(rec) => rec.efadv.get(),
            None => ptr::null_mut(),
        }
    })
}
