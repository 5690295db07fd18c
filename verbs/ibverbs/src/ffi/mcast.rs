//! Multicast: `ibv_attach_mcast` and `ibv_detach_mcast`, which attach a UD
//! QP to a multicast group (its GID and, on InfiniBand, its LID) and
//! detach it. librdmacm's `rdma_join_multicast` calls them once the group
//! is joined. A QP still attached cannot be destroyed (`EBUSY`, the
//! kernel's answer).

use std::ffi::c_int;

use rverbs::Gid;

use super::qp::{qp_rec, IbvQp};
use super::{errno_of, guard};

/// `ibv_attach_mcast`: attaches the UD QP `qp` to the group `gid`
/// (`lid` on InfiniBand; 0 on RoCE); 0, or the errno (`EINVAL` for a QP
/// that is not UD or a GID outside the multicast ranges, as the kernel
/// answers).
///
/// # Safety
/// `qp` is NULL or a live QP of this library; `gid` is NULL or points to
/// a readable 16-byte `union ibv_gid`.
#[no_mangle]
pub unsafe extern "C" fn ibv_attach_mcast(qp: *mut IbvQp, gid: *const [u8; 16], lid: u16) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe { with_group(qp, gid, |q, g| q.attach_mcast(g, lid)) }
}

/// `ibv_detach_mcast`: detaches the UD QP `qp` from the group `gid`; 0,
/// or the errno (`EINVAL` as for attaching; the kernel's answer for a
/// group the QP is not attached to).
///
/// # Safety
/// As [`ibv_attach_mcast`].
#[no_mangle]
pub unsafe extern "C" fn ibv_detach_mcast(qp: *mut IbvQp, gid: *const [u8; 16], lid: u16) -> c_int {
    // SAFETY: forwarded from this function's contract.
    unsafe { with_group(qp, gid, |q, g| q.detach_mcast(g, lid)) }
}

/// Runs `op` on the QP and group the C arguments name: 0, or the errno.
///
/// # Safety
/// As [`ibv_attach_mcast`].
unsafe fn with_group(
    qp: *mut IbvQp,
    gid: *const [u8; 16],
    op: impl FnOnce(&rverbs::Qp, &Gid) -> rverbs::Result<()>,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: NULL or a live QP, NULL or a readable GID (the contract);
        // the GID is copied out (no alignment is assumed: a byte array).
        let (Some(rec), Some(g)) = (unsafe { qp_rec(qp) }, unsafe { gid.as_ref() }) else {
            return libc::EINVAL;
        };
        let g = Gid(*g);
        let q = rec.qp.lock();
        match op(&q, &g) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}
