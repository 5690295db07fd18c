//! libefa's C ABI (`infiniband/efadv.h`, `EFA_1.0` to `EFA_1.2`) over our
//! `libibverbs.so.1`: each `efadv_*` function forwards its arguments to
//! the `rverbs_efadv_*` function of `rverbs-ibverbs` (`ffi::efadv`), which
//! does the work on that library's objects. rdma-core splits the two the
//! same way (libefa over libibverbs); here the split is only the name: a
//! program links `-lefa -libverbs` as it would with rdma-core, statically
//! too.
//!
//! The crate has no standard library and nothing that can panic, so its
//! object holds only these six functions: `libefa.a` of it links beside
//! `libibverbs.a` (which brings its own standard library) without a
//! second copy of anything. A `libefa.so.1` of it loaded next to
//! rdma-core's `libibverbs.so.1` fails to load (that library has no
//! `rverbs_efadv_*`, version `RVERBS_IBVERBS_0`), with the loader's
//! message, instead of calling into objects it does not know.
//!
//! The pointers are passed through untouched: `*mut c_void` stands for
//! each C struct, whose layout only `rverbs-ibverbs` reads.

#![no_std]

use core::ffi::{c_int, c_void};

/// A pointer to a C struct this crate only passes on.
type P = *mut c_void;

extern "C" {
    fn rverbs_efadv_query_device(context: P, attr: P, inlen: u32) -> c_int;
    fn rverbs_efadv_query_ah(ah: P, attr: P, inlen: u32) -> c_int;
    fn rverbs_efadv_create_driver_qp(pd: P, attr: P, driver_qp_type: u32) -> P;
    fn rverbs_efadv_create_qp_ex(context: P, attr_ex: P, efa_attr: P, inlen: u32) -> P;
    fn rverbs_efadv_create_cq(context: P, attr_ex: P, efa_attr: P, inlen: u32) -> P;
    fn rverbs_efadv_cq_from_ibv_cq_ex(cq: P) -> P;
}

/// `efadv_query_device` (`EFA_1.1`): the device's EFA limits and
/// capabilities into the `inlen` bytes of `attr`; 0 or an errno.
///
/// # Safety
/// libefa's contract: `context` is a live context of our libibverbs and
/// `attr` points to `inlen` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn efadv_query_device(context: P, attr: P, inlen: u32) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { rverbs_efadv_query_device(context, attr, inlen) }
}

/// `efadv_query_ah` (`EFA_1.1`): the device's number of the AH into the
/// `inlen` bytes of `attr`; 0 or an errno.
///
/// # Safety
/// `ah` is a live AH of our libibverbs; `attr` points to `inlen` writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn efadv_query_ah(ah: P, attr: P, inlen: u32) -> c_int {
    // SAFETY: the same contract as this function's.
    unsafe { rverbs_efadv_query_ah(ah, attr, inlen) }
}

/// `efadv_create_driver_qp` (`EFA_1.0`): an SRD QP; NULL with errno.
///
/// # Safety
/// As `ibv_create_qp`: `pd` a live PD of our libibverbs, `attr` a readable
/// and writable `struct ibv_qp_init_attr` naming its live CQs.
#[no_mangle]
pub unsafe extern "C" fn efadv_create_driver_qp(pd: P, attr: P, driver_qp_type: u32) -> P {
    // SAFETY: the same contract as this function's.
    unsafe { rverbs_efadv_create_driver_qp(pd, attr, driver_qp_type) }
}

/// `efadv_create_qp_ex` (`EFA_1.1`): `ibv_create_qp_ex` of a driver QP;
/// NULL with errno.
///
/// # Safety
/// As `ibv_create_qp_ex` for `attr_ex`; `efa_attr` points to `inlen`
/// readable bytes.
#[no_mangle]
pub unsafe extern "C" fn efadv_create_qp_ex(context: P, attr_ex: P, efa_attr: P, inlen: u32) -> P {
    // SAFETY: the same contract as this function's.
    unsafe { rverbs_efadv_create_qp_ex(context, attr_ex, efa_attr, inlen) }
}

/// `efadv_create_cq` (`EFA_1.2`): `ibv_create_cq_ex`, with the sender's
/// GID if asked; NULL with errno.
///
/// # Safety
/// As `ibv_create_cq_ex` for `attr_ex`; `efa_attr` points to `inlen`
/// readable bytes.
#[no_mangle]
pub unsafe extern "C" fn efadv_create_cq(context: P, attr_ex: P, efa_attr: P, inlen: u32) -> P {
    // SAFETY: the same contract as this function's.
    unsafe { rverbs_efadv_create_cq(context, attr_ex, efa_attr, inlen) }
}

/// `efadv_cq_from_ibv_cq_ex` (`EFA_1.2`): the CQ's `struct efadv_cq`.
///
/// # Safety
/// `cq` is NULL or a live extended CQ of our libibverbs.
#[no_mangle]
pub unsafe extern "C" fn efadv_cq_from_ibv_cq_ex(cq: P) -> P {
    // SAFETY: the same contract as this function's.
    unsafe { rverbs_efadv_cq_from_ibv_cq_ex(cq) }
}
