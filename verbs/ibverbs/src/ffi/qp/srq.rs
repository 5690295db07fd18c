//! Shared receive queues: `ibv_create_srq`, `ibv_destroy_srq`,
//! `ibv_modify_srq`, `ibv_query_srq`, and the record behind an SRQ
//! pointer.

use super::*;

/// An SRQ handed out.
#[repr(C)]
pub(super) struct SrqRec {
    pub(super) c: IbvSrq,
    pub(super) srq: Lock<Srq>,
    /// QPs on it not destroyed.
    pub(super) users: AtomicUsize,
}

/// The record behind an SRQ pointer.
///
/// # Safety
/// As [`qp_rec`], for an SRQ.
pub(super) unsafe fn srq_rec<'a>(srq: *mut IbvSrq) -> Option<&'a SrqRec> {
    // SAFETY: a non-null `srq` is the first field of a live SrqRec.
    unsafe { srq.cast::<SrqRec>().as_ref() }
}

/// `ibv_create_srq`: an SRQ, or NULL with errno; `init_attr.attr` is
/// updated to what was granted.
///
/// # Safety
/// `pd` is a live PD of this library; `init_attr` points to a readable
/// and writable `struct ibv_srq_init_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut IbvPd,
    init_attr: *mut IbvSrqInitAttr,
) -> *mut IbvSrq {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let (Some(pdr), Some(attr)) = (unsafe { pd_rec(pd) }, unsafe { init_attr.as_mut() }) else {
            return null_with(libc::EINVAL);
        };
        let srq = match pdr.pd.create_srq(&SrqInitAttr {
            max_wr: attr.attr.max_wr,
            max_sge: attr.attr.max_sge,
            srq_limit: attr.attr.srq_limit,
        }) {
            Ok(s) => s,
            Err(e) => return null_with(errno_of(&e)),
        };
        attr.attr.max_wr = srq.max_wr();
        attr.attr.max_sge = srq.max_sge();
        let id = srq.event_id();
        pdr.hold();
        let rec = Box::new(SrqRec {
            c: IbvSrq {
                context: pdr.c_context(),
                srq_context: attr.srq_context,
                pd,
                handle: srq.handle(),
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            srq: Lock::new(srq),
            users: AtomicUsize::new(0),
        });
        let rec = Box::into_raw(rec);
        crate::ffi::event::track(pdr.c_context(), id, rec as usize);
        rec.cast::<IbvSrq>()
    })
}

/// `ibv_destroy_srq`: 0, `EBUSY` while a QP uses it.
///
/// # Safety
/// `srq` is NULL or an SRQ of this library not yet destroyed; no other
/// call uses it during or after a successful call.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut IbvSrq) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { srq_rec(srq) }) else {
            return libc::EINVAL;
        };
        if rec.users.load(Ordering::Relaxed) != 0 {
            return libc::EBUSY;
        }
        // Waits until its async events handed out were acknowledged.
        crate::ffi::event::untrack(srq as usize);
        // SAFETY: the PD outlives the SRQ.
        if let Some(p) = unsafe { pd_rec(rec.c.pd) } {
            p.release();
        }
        // SAFETY: from Box::into_raw in ibv_create_srq; no QP uses it and
        // the caller makes no other call on it.
        drop(unsafe { Box::from_raw(srq.cast::<SrqRec>()) });
        0
    })
}

/// `IBV_SRQ_MAX_WR`.
const SRQ_MAX_WR: c_int = 1 << 0;
/// `IBV_SRQ_LIMIT`.
const SRQ_LIMIT: c_int = 1 << 1;

/// `ibv_modify_srq`: resizes (`IBV_SRQ_MAX_WR`) and arms the limit
/// (`IBV_SRQ_LIMIT`); 0, or the errno.
///
/// # Safety
/// `srq` is a live SRQ of this library; `attr` points to a readable
/// `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut IbvSrq,
    attr: *mut IbvSrqAttr,
    attr_mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(a)) = (unsafe { srq_rec(srq) }, unsafe { attr.as_ref() }) else {
            return libc::EINVAL;
        };
        if attr_mask & !(SRQ_MAX_WR | SRQ_LIMIT) != 0 {
            return libc::EINVAL;
        }
        let mut s = rec.srq.lock();
        if attr_mask & SRQ_MAX_WR != 0 {
            if let Err(e) = s.resize(a.max_wr) {
                return errno_of(&e);
            }
        }
        if attr_mask & SRQ_LIMIT != 0 {
            if let Err(e) = s.modify_limit(a.srq_limit) {
                return errno_of(&e);
            }
        }
        0
    })
}

/// `ibv_query_srq`: 0, or the errno.
///
/// # Safety
/// `srq` is a live SRQ of this library; `attr` points to a writable
/// `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut IbvSrq, attr: *mut IbvSrqAttr) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(out)) = (unsafe { srq_rec(srq) }, unsafe { attr.as_mut() }) else {
            return libc::EINVAL;
        };
        match rec.srq.lock().query() {
            Ok(a) => {
                *out = IbvSrqAttr {
                    max_wr: a.max_wr,
                    max_sge: a.max_sge,
                    srq_limit: a.srq_limit,
                };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}
