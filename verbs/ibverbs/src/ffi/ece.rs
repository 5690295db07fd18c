//! Enhanced connection establishment: `ibv_query_ece` and `ibv_set_ece`,
//! answered by the QP's provider as libibverbs' providers answer them
//! (mlx5: NVIDIA's vendor id and the options CREATE_QP granted; rxe:
//! `EOPNOTSUPP`, as for a provider without the operations).

use std::ffi::c_int;

use rverbs::Ece;

use super::qp::{qp_rec, IbvQp};
use super::{errno_of, errno_with, guard};

/// `struct ibv_ece`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct IbvEce {
    /// PCI vendor whose numbering `options` uses.
    pub vendor_id: u32,
    /// The vendor's option bits.
    pub options: u32,
    /// Extensions: 0.
    pub comp_mask: u32,
}

/// `ibv_query_ece`: the QP's options into `*ece`; 0, or the errno (also
/// set): `EOPNOTSUPP` where the provider has no ECE, `EINVAL` for NULL.
///
/// # Safety
/// `qp` is NULL or a live QP of this library; `ece` is NULL or points to a
/// writable `struct ibv_ece`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_ece(qp: *mut IbvQp, ece: *mut IbvEce) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { qp_rec(qp) }) else {
            return errno_with(libc::EINVAL);
        };
        if ece.is_null() {
            return errno_with(libc::EINVAL);
        }
        let got = rec.qp.lock().query_ece();
        match got {
            Ok(e) => {
                let c = IbvEce {
                    vendor_id: e.vendor_id,
                    options: e.options,
                    comp_mask: e.comp_mask,
                };
                // SAFETY: non-null and writable (the contract).
                unsafe { ece.write(c) };
                0
            }
            Err(e) => errno_with(errno_of(&e)),
        }
    })
}

/// `ibv_set_ece`: asks for `*ece` on the QP's next connection; 0, or the
/// errno (also set): `EOPNOTSUPP` for a vendor id of 0 and where the
/// provider does not negotiate ECE, `EINVAL` for another vendor's options.
///
/// # Safety
/// `qp` is NULL or a live QP of this library; `ece` is NULL or points to a
/// readable `struct ibv_ece`.
#[no_mangle]
pub unsafe extern "C" fn ibv_set_ece(qp: *mut IbvQp, ece: *mut IbvEce) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(c)) = (unsafe { qp_rec(qp) }, unsafe { ece.as_ref() }) else {
            return errno_with(libc::EINVAL);
        };
        let asked = Ece {
            vendor_id: c.vendor_id,
            options: c.options,
            comp_mask: c.comp_mask,
        };
        let done = rec.qp.lock().set_ece(asked);
        match done {
            Ok(()) => 0,
            Err(e) => errno_with(errno_of(&e)),
        }
    })
}
