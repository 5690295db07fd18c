//! Address handles: `ibv_create_ah`, `ibv_init_ah_from_wc`,
//! `ibv_create_ah_from_wc`, `ibv_destroy_ah`, and the record behind an AH
//! pointer.

use super::*;

/// An AH handed out.
#[repr(C)]
pub(in crate::ffi) struct AhRec {
    c: IbvAh,
    pub(in crate::ffi) ah: Ah,
}

/// The record behind an AH pointer.
///
/// # Safety
/// As [`qp_rec`], for an AH.
pub(in crate::ffi) unsafe fn ah_rec<'a>(ah: *mut IbvAh) -> Option<&'a AhRec> {
    // SAFETY: a non-null `ah` is the first field of a live AhRec.
    unsafe { ah.cast::<AhRec>().as_ref() }
}

/// An AH for `attr` on `pd` (whose record is `pdr`), or NULL with errno.
fn new_ah(pd: *mut IbvPd, pdr: &PdRec, attr: &AhAttr) -> *mut IbvAh {
    let ah = match pdr.pd.create_ah(attr) {
        Ok(ah) => ah,
        Err(e) => {
            let port_ok = pdr
                .pd
                .context()
                .phys_port_cnt()
                .is_ok_and(|n| (1..=n).contains(&attr.port_num));
            return null_with(match e.invalid_kind() {
                // No GID at the source index of an existing port: what
                // libibverbs' GID-type lookup answers (ENODATA).
                Some(rverbs::InvalidKind::NotPresent) if attr.grh.is_some() && port_ok => {
                    libc::ENODATA
                }
                _ => errno_of(&e),
            });
        }
    };
    pdr.hold();
    let rec = Box::new(AhRec {
        c: IbvAh {
            context: pdr.c_context(),
            pd,
            handle: ah.handle(),
        },
        ah,
    });
    Box::into_raw(rec).cast::<IbvAh>()
}

/// `ibv_create_ah`: an address handle, or NULL with errno.
///
/// # Safety
/// `pd` is a live PD of this library; `attr` points to a readable
/// `struct ibv_ah_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut IbvPd, attr: *mut IbvAhAttr) -> *mut IbvAh {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let (Some(pdr), Some(a)) = (unsafe { pd_rec(pd) }, unsafe { attr.as_ref() }) else {
            return null_with(libc::EINVAL);
        };
        new_ah(pd, pdr, &ah_attr_of(a))
    })
}

/// libibverbs' `IBV_WC_GRH`.
const IBV_WC_GRH: u32 = 1 << 0;

/// The address that answers the sender of the UD receive `wc` (whose
/// buffer began with the 40 bytes at `grh`) from port `port_num`:
/// destination the sender's GID, source the GID the datagram was sent to
/// (its index found in the port's table, RoCE v2 preferred), as libibverbs
/// builds it; or the errno.
///
/// # Safety
/// `wc` points to a readable `struct ibv_wc`; `grh` to 40 readable bytes
/// when the completion has a GRH.
unsafe fn ah_attr_from_wc(
    ctx: &rverbs::Context,
    port_num: u8,
    wc: *const rverbs::Wc,
    grh: *const u8,
) -> Result<AhAttr, c_int> {
    // SAFETY: NULL or readable (the contract).
    let wc = unsafe { wc.as_ref() }.ok_or(libc::EINVAL)?;
    let raw = wc.raw();
    let mut attr = if raw.wc_flags & IBV_WC_GRH != 0 {
        if grh.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: 40 readable bytes at `grh` (the contract), only read.
        let bytes = unsafe { std::slice::from_raw_parts(grh, rverbs::Grh::LEN) };
        rverbs::Grh::parse(bytes)
            .and_then(|g| g.reply_attr(ctx, port_num))
            .map_err(|e| errno_of(&e))?
    } else {
        AhAttr {
            port_num,
            ..AhAttr::default()
        }
    };
    attr.dlid = raw.slid;
    attr.sl = raw.sl;
    attr.src_path_bits = raw.dlid_path_bits;
    Ok(attr)
}

/// `ibv_init_ah_from_wc` (`IBVERBS_1.1`): fills `ah_attr` with the address
/// that answers the sender of the UD receive `wc` (see
/// `ibv_create_ah_from_wc`): 0, or -1 with errno.
///
/// # Safety
/// `context` is a context of this library; `wc` points to a readable
/// `struct ibv_wc`, `grh` to 40 readable bytes when the completion has a
/// GRH, `ah_attr` to a writable `struct ibv_ah_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut super::IbvContext,
    port_num: u8,
    wc: *const rverbs::Wc,
    grh: *const u8,
    ah_attr: *mut IbvAhAttr,
) -> c_int {
    guard(-1, || {
        let Some(rec) = crate::ffi::context_rec(context) else {
            crate::ffi::set_errno(libc::EINVAL);
            return -1;
        };
        if ah_attr.is_null() {
            crate::ffi::set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: forwarded from this function's contract.
        match unsafe { ah_attr_from_wc(&rec.ctx, port_num, wc, grh) } {
            Ok(attr) => {
                // SAFETY: writable (the contract).
                unsafe { ah_attr.write(ah_attr_c(&attr)) };
                0
            }
            Err(e) => {
                crate::ffi::set_errno(e);
                -1
            }
        }
    })
}

/// `ibv_create_ah_from_wc`: an address handle to answer the sender of
/// the UD receive `wc` from port `port_num` (see `ibv_init_ah_from_wc`),
/// or NULL with errno.
///
/// # Safety
/// `pd` is a live PD of this library; `wc` points to a readable `struct
/// ibv_wc`; `grh` to 40 readable bytes when the completion has a GRH.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut IbvPd,
    wc: *const rverbs::Wc,
    grh: *const u8,
    port_num: u8,
) -> *mut IbvAh {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let Some(pdr) = (unsafe { pd_rec(pd) }) else {
            return null_with(libc::EINVAL);
        };
        // SAFETY: forwarded from this function's contract.
        match unsafe { ah_attr_from_wc(pdr.pd.context(), port_num, wc, grh) } {
            Ok(attr) => new_ah(pd, pdr, &attr),
            Err(e) => null_with(e),
        }
    })
}

/// `ibv_destroy_ah`: 0, or the errno. A send still in flight to it keeps
/// the kernel's AH until it completes.
///
/// # Safety
/// `ah` is NULL or an AH of this library not yet destroyed; no other
/// call uses it during or after this one.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut IbvAh) -> c_int {
    guard(libc::EIO, || {
        if ah.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: from Box::into_raw in ibv_create_ah; the caller makes no
        // other call on it.
        let rec = unsafe { Box::from_raw(ah.cast::<AhRec>()) };
        // SAFETY: the PD outlives the AH.
        if let Some(p) = unsafe { pd_rec(rec.c.pd) } {
            p.release();
        }
        drop(rec);
        0
    })
}
