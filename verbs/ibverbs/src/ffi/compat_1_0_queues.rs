//! The `IBVERBS_1.0` compatibility versions of the queue verbs (CQs,
//! SRQs, QPs, completion events, multicast) and the five data-path
//! operations of a 1.0 context's operations table, which turn the 1.0
//! work requests (their fields in the old order, a 1.0 AH in a UD send)
//! into this library's and back. See [`super::compat_1_0`] for the
//! scheme: each 1.0 object wraps the real one and each call answers what
//! this library's 1.1 function answers.

use std::ffi::{c_int, c_void};
use std::ptr;

use rverbs::{Sge, Wc};

use super::compat_1_0::{
    field, free, hand_out, is_live, pd_context, real_ah, real_context, real_pd, IbvAh10,
    IbvContext10, IbvPd10, Kind,
};
use super::cq::{IbvCompChannel, IbvCq};
use super::guard;
use super::qp::{
    IbvQp, IbvQpInitAttr, IbvRecvWr, IbvSendWr, IbvSrq, IbvSrqAttr, IbvSrqInitAttr, WrAtomic,
};
use crate::copy::{IbvQpAttr, IbvQpCap};

/// `struct ibv_cq_1_0`.
#[repr(C)]
pub struct IbvCq10 {
    /// The 1.0 context.
    pub context: *mut IbvContext10,
    /// The program's pointer.
    pub cq_context: *mut c_void,
    /// The real CQ's handle.
    pub handle: u32,
    /// The entries asked for at creation (as libibverbs keeps it).
    pub cqe: c_int,
    /// Initialised, unused (libibverbs' own locks are the real CQ's).
    pub mutex: libc::pthread_mutex_t,
    /// Initialised, unused.
    pub cond: libc::pthread_cond_t,
    /// Zero, unused (the real CQ counts).
    pub comp_events_completed: u32,
    /// Zero, unused.
    pub async_events_completed: u32,
    /// The real CQ.
    pub real_cq: *mut IbvCq,
}

/// `struct ibv_srq_1_0`.
#[repr(C)]
pub struct IbvSrq10 {
    /// The 1.0 context.
    pub context: *mut IbvContext10,
    /// The program's pointer.
    pub srq_context: *mut c_void,
    /// The 1.0 PD.
    pub pd: *mut IbvPd10,
    /// The real SRQ's handle.
    pub handle: u32,
    /// Initialised, unused.
    pub mutex: libc::pthread_mutex_t,
    /// Initialised, unused.
    pub cond: libc::pthread_cond_t,
    /// Zero, unused.
    pub events_completed: u32,
    /// The real SRQ.
    pub real_srq: *mut IbvSrq,
}

/// `struct ibv_qp_1_0`.
#[repr(C)]
pub struct IbvQp10 {
    /// The 1.0 context.
    pub context: *mut IbvContext10,
    /// The program's pointer.
    pub qp_context: *mut c_void,
    /// The 1.0 PD.
    pub pd: *mut IbvPd10,
    /// The 1.0 send CQ.
    pub send_cq: *mut IbvCq10,
    /// The 1.0 receive CQ.
    pub recv_cq: *mut IbvCq10,
    /// The 1.0 SRQ, or NULL.
    pub srq: *mut IbvSrq10,
    /// The real QP's handle.
    pub handle: u32,
    /// The QP number.
    pub qp_num: u32,
    /// `enum ibv_qp_state`: the real QP's, as of the last 1.0 create or
    /// modify.
    pub state: c_int,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
    /// Initialised, unused.
    pub mutex: libc::pthread_mutex_t,
    /// Initialised, unused.
    pub cond: libc::pthread_cond_t,
    /// Zero, unused.
    pub events_completed: u32,
    /// The real QP.
    pub real_qp: *mut IbvQp,
}

/// `struct ibv_qp_init_attr_1_0`: `struct ibv_qp_init_attr` with 1.0
/// objects (and no XRC).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpInitAttr10 {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq10,
    pub recv_cq: *mut IbvCq10,
    pub srq: *mut IbvSrq10,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_send_wr_1_0`: `next` before `wr_id`, no XRC or window
/// fields; `wr` is the union of the `rdma`, `atomic` and `ud` arms (read
/// through the largest, `atomic`; a UD send's AH is a 1.0 AH).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSendWr10 {
    pub next: *mut IbvSendWr10,
    pub wr_id: u64,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
    pub imm_data: u32,
    pub wr: WrAtomic,
}

/// `struct ibv_recv_wr_1_0`: `next` before `wr_id`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvRecvWr10 {
    pub next: *mut IbvRecvWr10,
    pub wr_id: u64,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
}

/// `ibv_context_ops_1_0.poll_cq`.
pub type PollCq10Fn = unsafe extern "C" fn(*mut IbvCq10, c_int, *mut Wc) -> c_int;
/// `ibv_context_ops_1_0.req_notify_cq`.
pub type ReqNotifyCq10Fn = unsafe extern "C" fn(*mut IbvCq10, c_int) -> c_int;
/// `ibv_context_ops_1_0.post_srq_recv`.
pub type PostSrqRecv10Fn =
    unsafe extern "C" fn(*mut IbvSrq10, *mut IbvRecvWr10, *mut *mut IbvRecvWr10) -> c_int;
/// `ibv_context_ops_1_0.post_send`.
pub type PostSend10Fn =
    unsafe extern "C" fn(*mut IbvQp10, *mut IbvSendWr10, *mut *mut IbvSendWr10) -> c_int;
/// `ibv_context_ops_1_0.post_recv`.
pub type PostRecv10Fn =
    unsafe extern "C" fn(*mut IbvQp10, *mut IbvRecvWr10, *mut *mut IbvRecvWr10) -> c_int;

/// `IBV_QPT_UD`.
const QPT_UD: c_int = 4;
/// `IBV_QP_STATE`.
const QP_STATE: c_int = 1;

/// The real CQ of a 1.0 CQ, or NULL.
fn real_cq(cq: *mut IbvCq10) -> *mut IbvCq {
    // SAFETY: a live wrapper (checked), read in place.
    field(cq, Kind::Cq, |c| unsafe { (*c).real_cq }).unwrap_or(ptr::null_mut())
}

/// The real SRQ of a 1.0 SRQ, or NULL.
fn real_srq(srq: *mut IbvSrq10) -> *mut IbvSrq {
    // SAFETY: a live wrapper (checked), read in place.
    field(srq, Kind::Srq, |s| unsafe { (*s).real_srq }).unwrap_or(ptr::null_mut())
}

/// The real QP of a 1.0 QP, or NULL.
fn real_qp(qp: *mut IbvQp10) -> *mut IbvQp {
    // SAFETY: a live wrapper (checked), read in place.
    field(qp, Kind::Qp, |q| unsafe { (*q).real_qp }).unwrap_or(ptr::null_mut())
}

/// `ibv_create_cq@IBVERBS_1.0`: a 1.0 CQ (the real CQ's `cq_context` is
/// the wrapper, so that completion events name it), or NULL with the 1.1
/// function's errno.
///
/// # Safety
/// As the 1.1 function: `channel` is NULL or a live channel of this
/// library on the context.
#[export_name = "ibv_create_cq@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_create_cq_1_0(
    context: *mut IbvContext10,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    comp_vector: c_int,
) -> *mut IbvCq10 {
    guard(ptr::null_mut(), || {
        // SAFETY: the 1.1 function checks the context; `channel` as the
        // contract says.
        let real = unsafe {
            super::cq::ibv_create_cq(real_context(context), cqe, cq_context, channel, comp_vector)
        };
        if real.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: a CQ just created, read in place.
        let handle = unsafe { (*real).handle };
        let cq = hand_out(
            IbvCq10 {
                context,
                cq_context,
                handle,
                cqe,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                comp_events_completed: 0,
                async_events_completed: 0,
                real_cq: real,
            },
            Kind::Cq,
        );
        // SAFETY: the live real CQ; its cq_context is the program's to
        // write (libibverbs' 1.0 layer writes it so).
        unsafe { (*real).cq_context = cq.cast() };
        cq
    })
}

/// `ibv_resize_cq@IBVERBS_1.0`: the 1.1 resize of the real CQ (the 1.0
/// `cqe` keeps what was asked at creation, as in libibverbs).
///
/// # Safety
/// As the 1.1 function.
#[export_name = "ibv_resize_cq@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_resize_cq_1_0(cq: *mut IbvCq10, cqe: c_int) -> c_int {
    // SAFETY: NULL or the live real CQ.
    guard(libc::EIO, || unsafe {
        super::cq::ibv_resize_cq(real_cq(cq), cqe)
    })
}

/// `ibv_destroy_cq@IBVERBS_1.0`: destroys the real CQ, then frees the
/// 1.0 one; the 1.1 function's answer.
///
/// # Safety
/// No other call uses the CQ during or after a successful call.
#[export_name = "ibv_destroy_cq@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_destroy_cq_1_0(cq: *mut IbvCq10) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: NULL or the live real CQ.
        let ret = unsafe { super::cq::ibv_destroy_cq(real_cq(cq)) };
        if ret == 0 {
            // SAFETY: a live 1.0 CQ, not used again (the contract).
            unsafe { free(cq) };
        }
        ret
    })
}

/// `ibv_get_cq_event@IBVERBS_1.0`: the 1.1 function's next event of the
/// channel, as the 1.0 CQ and its `cq_context`. 0, or -1 with errno. An
/// event of a CQ not created through the 1.0 call gives that CQ's
/// `cq_context` as the CQ and a NULL context (libibverbs would read the
/// program's pointer as a 1.0 CQ).
///
/// # Safety
/// As the 1.1 function: `cq` and `cq_context` point to writable pointers.
#[export_name = "ibv_get_cq_event@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_get_cq_event_1_0(
    channel: *mut IbvCompChannel,
    cq: *mut *mut IbvCq10,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        if cq.is_null() || cq_context.is_null() {
            super::set_errno(libc::EINVAL);
            return -1;
        }
        let mut real: *mut IbvCq = ptr::null_mut();
        let mut wrapper: *mut c_void = ptr::null_mut();
        // SAFETY: the 1.1 function checks the channel; the out-pointers
        // are on the stack.
        let ret = unsafe { super::cq::ibv_get_cq_event(channel, &mut real, &mut wrapper) };
        if ret != 0 {
            return ret;
        }
        let w = wrapper.cast::<IbvCq10>();
        // SAFETY: a live wrapper (checked), read in place.
        let ctx = field(w, Kind::Cq, |c| unsafe { (*c).cq_context }).unwrap_or(ptr::null_mut());
        // SAFETY: writable (checked non-null; the contract).
        unsafe {
            *cq = w;
            *cq_context = ctx;
        }
        0
    })
}

/// `ibv_ack_cq_events@IBVERBS_1.0`: acknowledges `nevents` events of the
/// real CQ.
///
/// # Safety
/// `cq` is NULL or a live 1.0 CQ (anything else is ignored).
#[export_name = "ibv_ack_cq_events@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_ack_cq_events_1_0(cq: *mut IbvCq10, nevents: u32) {
    // SAFETY: NULL or the live real CQ.
    guard((), || unsafe {
        super::cq::ibv_ack_cq_events(real_cq(cq), nevents)
    })
}

/// `ibv_create_srq@IBVERBS_1.0`: a 1.0 SRQ (the real SRQ's `srq_context`
/// is the wrapper), or NULL with the 1.1 function's errno.
///
/// # Safety
/// As the 1.1 function: `init_attr` points to a readable and writable
/// `struct ibv_srq_init_attr`.
#[export_name = "ibv_create_srq@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_create_srq_1_0(
    pd: *mut IbvPd10,
    init_attr: *mut IbvSrqInitAttr,
) -> *mut IbvSrq10 {
    guard(ptr::null_mut(), || {
        // SAFETY: NULL or a live PD (checked); `init_attr` as the
        // contract says.
        let real = unsafe { super::qp::ibv_create_srq(real_pd(pd), init_attr) };
        if real.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: the 1.1 call succeeded, so `init_attr` was readable;
        // the SRQ was just created; both read in place.
        let (srq_context, handle) = unsafe { ((*init_attr).srq_context, (*real).handle) };
        let srq = hand_out(
            IbvSrq10 {
                context: pd_context(pd),
                srq_context,
                pd,
                handle,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
                real_srq: real,
            },
            Kind::Srq,
        );
        // SAFETY: the live real SRQ; its srq_context is the program's.
        unsafe { (*real).srq_context = srq.cast() };
        srq
    })
}

/// `ibv_modify_srq@IBVERBS_1.0`: the 1.1 modify of the real SRQ.
///
/// # Safety
/// As the 1.1 function.
#[export_name = "ibv_modify_srq@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_modify_srq_1_0(
    srq: *mut IbvSrq10,
    attr: *mut IbvSrqAttr,
    mask: c_int,
) -> c_int {
    // SAFETY: NULL or the live real SRQ; the rest forwarded.
    guard(libc::EIO, || unsafe {
        super::qp::ibv_modify_srq(real_srq(srq), attr, mask)
    })
}

/// `ibv_query_srq@IBVERBS_1.0`: the 1.1 query of the real SRQ.
///
/// # Safety
/// As the 1.1 function.
#[export_name = "ibv_query_srq@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_query_srq_1_0(srq: *mut IbvSrq10, attr: *mut IbvSrqAttr) -> c_int {
    // SAFETY: NULL or the live real SRQ; the rest forwarded.
    guard(libc::EIO, || unsafe {
        super::qp::ibv_query_srq(real_srq(srq), attr)
    })
}

/// `ibv_destroy_srq@IBVERBS_1.0`: destroys the real SRQ, then frees the
/// 1.0 one; the 1.1 function's answer.
///
/// # Safety
/// No other call uses the SRQ during or after a successful call.
#[export_name = "ibv_destroy_srq@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_destroy_srq_1_0(srq: *mut IbvSrq10) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: NULL or the live real SRQ.
        let ret = unsafe { super::qp::ibv_destroy_srq(real_srq(srq)) };
        if ret == 0 {
            // SAFETY: a live 1.0 SRQ, not used again (the contract).
            unsafe { free(srq) };
        }
        ret
    })
}

/// `ibv_create_qp@IBVERBS_1.0`: a 1.0 QP on real CQs (and SRQ), or NULL
/// with the 1.1 function's errno (`EINVAL` for a CQ or SRQ that is no
/// live 1.0 object); `init_attr.cap` is updated to what was granted; the
/// real QP's `qp_context` is the wrapper.
///
/// # Safety
/// `init_attr` is NULL or points to a readable and writable `struct
/// ibv_qp_init_attr_1_0`.
#[export_name = "ibv_create_qp@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_create_qp_1_0(
    pd: *mut IbvPd10,
    init_attr: *mut IbvQpInitAttr10,
) -> *mut IbvQp10 {
    guard(ptr::null_mut(), || {
        // SAFETY: NULL or readable and writable (the contract).
        let Some(a) = (unsafe { init_attr.as_mut() }) else {
            return super::null_with(libc::EINVAL);
        };
        let (send_cq, recv_cq) = (real_cq(a.send_cq), real_cq(a.recv_cq));
        let srq = real_srq(a.srq);
        if send_cq.is_null() || recv_cq.is_null() || (!a.srq.is_null() && srq.is_null()) {
            return super::null_with(libc::EINVAL);
        }
        let mut real_attr = IbvQpInitAttr {
            qp_context: a.qp_context,
            send_cq,
            recv_cq,
            srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        // SAFETY: NULL or a live PD (checked); live real CQs and SRQ.
        let real = unsafe { super::qp::ibv_create_qp(real_pd(pd), &mut real_attr) };
        if real.is_null() {
            return ptr::null_mut();
        }
        a.cap = real_attr.cap;
        // SAFETY: a QP just created, read in place.
        let (handle, qp_num, state) = unsafe { ((*real).handle, (*real).qp_num, (*real).state) };
        let qp = hand_out(
            IbvQp10 {
                context: pd_context(pd),
                qp_context: a.qp_context,
                pd,
                send_cq: a.send_cq,
                recv_cq: a.recv_cq,
                srq: a.srq,
                handle,
                qp_num,
                state,
                qp_type: a.qp_type,
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
                real_qp: real,
            },
            Kind::Qp,
        );
        // SAFETY: the live real QP; its qp_context is the program's.
        unsafe { (*real).qp_context = qp.cast() };
        qp
    })
}

/// The 1.0 object a real CQ's `cq_context` names, if it is one.
fn cq_wrapper(real: *mut IbvCq) -> *mut IbvCq10 {
    if real.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: a live real CQ of this library (a QP's), read in place.
    let w = unsafe { (*real).cq_context }.cast::<IbvCq10>();
    if is_live(w, Kind::Cq) {
        w
    } else {
        ptr::null_mut()
    }
}

/// `ibv_query_qp@IBVERBS_1.0`: the 1.1 query of the real QP, its
/// creation attributes as 1.0 ones (the CQs and SRQ the 1.0 objects; a QP
/// without an SRQ has NULL there, where libibverbs would read through
/// NULL).
///
/// # Safety
/// As the 1.1 function: `attr` and `init_attr` point to writable structs.
#[export_name = "ibv_query_qp@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_query_qp_1_0(
    qp: *mut IbvQp10,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
    init_attr: *mut IbvQpInitAttr10,
) -> c_int {
    guard(libc::EIO, || {
        if init_attr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: zero is a valid value of this struct of pointers and
        // integers.
        let mut real_init: IbvQpInitAttr = unsafe { std::mem::zeroed() };
        // SAFETY: NULL or the live real QP; `attr` forwarded.
        let ret = unsafe { super::qp::ibv_query_qp(real_qp(qp), attr, attr_mask, &mut real_init) };
        if ret != 0 {
            return ret;
        }
        let srq = if real_init.srq.is_null() {
            ptr::null_mut()
        } else {
            // SAFETY: the QP's live real SRQ, read in place.
            let w = unsafe { (*real_init.srq).srq_context }.cast::<IbvSrq10>();
            if is_live(w, Kind::Srq) {
                w
            } else {
                ptr::null_mut()
            }
        };
        // SAFETY: a live wrapper (the 1.1 query succeeded on its real QP),
        // read in place; `init_attr` is writable (the contract).
        unsafe {
            init_attr.write(IbvQpInitAttr10 {
                qp_context: (*qp).qp_context,
                send_cq: cq_wrapper(real_init.send_cq),
                recv_cq: cq_wrapper(real_init.recv_cq),
                srq,
                cap: real_init.cap,
                qp_type: real_init.qp_type,
                sq_sig_all: real_init.sq_sig_all,
            })
        };
        0
    })
}

/// `ibv_modify_qp@IBVERBS_1.0`: the 1.1 modify of the real QP (the 1.0
/// `state` follows it).
///
/// # Safety
/// As the 1.1 function.
#[export_name = "ibv_modify_qp@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_modify_qp_1_0(
    qp: *mut IbvQp10,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        let real = real_qp(qp);
        // SAFETY: NULL or the live real QP; `attr` forwarded.
        let ret = unsafe { super::qp::ibv_modify_qp(real, attr, attr_mask) };
        if ret == 0 && attr_mask & QP_STATE != 0 {
            // SAFETY: a live wrapper and its live real QP, in place.
            unsafe { (*qp).state = (*real).state };
        }
        ret
    })
}

/// `ibv_destroy_qp@IBVERBS_1.0`: destroys the real QP, then frees the
/// 1.0 one; the 1.1 function's answer.
///
/// # Safety
/// No other call uses the QP during or after a successful call.
#[export_name = "ibv_destroy_qp@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_destroy_qp_1_0(qp: *mut IbvQp10) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: NULL or the live real QP.
        let ret = unsafe { super::qp::ibv_destroy_qp(real_qp(qp)) };
        if ret == 0 {
            // SAFETY: a live 1.0 QP, not used again (the contract).
            unsafe { free(qp) };
        }
        ret
    })
}

/// `ibv_attach_mcast@IBVERBS_1.0`: the 1.1 attach of the real QP.
///
/// # Safety
/// As the 1.1 function: `gid` points to a readable 16-byte GID.
#[export_name = "ibv_attach_mcast@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_attach_mcast_1_0(
    qp: *mut IbvQp10,
    gid: *const [u8; 16],
    lid: u16,
) -> c_int {
    // SAFETY: NULL or the live real QP; `gid` forwarded.
    guard(libc::EIO, || unsafe {
        super::mcast::ibv_attach_mcast(real_qp(qp), gid, lid)
    })
}

/// `ibv_detach_mcast@IBVERBS_1.0`: the 1.1 detach of the real QP.
///
/// # Safety
/// As the 1.1 function.
#[export_name = "ibv_detach_mcast@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_detach_mcast_1_0(
    qp: *mut IbvQp10,
    gid: *const [u8; 16],
    lid: u16,
) -> c_int {
    // SAFETY: NULL or the live real QP; `gid` forwarded.
    guard(libc::EIO, || unsafe {
        super::mcast::ibv_detach_mcast(real_qp(qp), gid, lid)
    })
}

/// The 1.0 context's `poll_cq`: the real CQ's poll.
///
/// # Safety
/// As the real operation: `wc` points to `num_entries` writable `struct
/// ibv_wc`.
pub unsafe extern "C" fn poll_cq_1_0(cq: *mut IbvCq10, num_entries: c_int, wc: *mut Wc) -> c_int {
    guard(-1, || {
        let real = real_cq(cq);
        if real.is_null() {
            return -1;
        }
        // SAFETY: the live real CQ; `wc` forwarded.
        unsafe { super::cq::poll_cq(real, num_entries, wc) }
    })
}

/// The 1.0 context's `req_notify_cq`: arms the real CQ.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
pub unsafe extern "C" fn req_notify_cq_1_0(cq: *mut IbvCq10, solicited_only: c_int) -> c_int {
    guard(libc::EIO, || {
        let real = real_cq(cq);
        if real.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the live real CQ.
        unsafe { super::cq::req_notify_cq(real, solicited_only) }
    })
}

/// The 1.0 receive requests from `wr` on, as this library's, in order
/// (linked once the vector is complete, so that their addresses hold),
/// with the 1.0 request each came from.
///
/// # Safety
/// `wr` is NULL or the first of a NULL-terminated chain of readable 1.0
/// receive requests.
unsafe fn recv_chain(wr: *mut IbvRecvWr10) -> (Vec<IbvRecvWr>, Vec<*mut IbvRecvWr10>) {
    let (mut real, mut from) = (Vec::new(), Vec::new());
    let mut at = wr;
    while !at.is_null() {
        // SAFETY: a readable request of the chain (the contract).
        let w = unsafe { &*at };
        real.push(IbvRecvWr {
            wr_id: w.wr_id,
            next: ptr::null_mut(),
            sg_list: w.sg_list,
            num_sge: w.num_sge,
        });
        from.push(at);
        at = w.next;
    }
    for i in 1..real.len() {
        let next: *mut IbvRecvWr = &mut real[i];
        real[i - 1].next = next;
    }
    (real, from)
}

/// The 1.0 request the library's `bad` (an element of `real`) came from.
fn bad_of<R, W>(real: &[R], from: &[*mut W], bad: *mut R) -> *mut W {
    real.iter()
        .position(|r| ptr::eq(r, bad))
        .map_or(ptr::null_mut(), |i| from[i])
}

/// The 1.0 context's `post_recv`: the chain as this library's receive
/// requests on the real QP; on failure, `bad_wr` names the 1.0 request
/// the real post stopped at.
///
/// # Safety
/// As the real operation, with 1.0 requests: `wr` is a readable chain;
/// `bad_wr` points to a writable pointer.
pub unsafe extern "C" fn post_recv_1_0(
    qp: *mut IbvQp10,
    wr: *mut IbvRecvWr10,
    bad_wr: *mut *mut IbvRecvWr10,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (mut real, from) = unsafe { recv_chain(wr) };
        let head = real
            .first_mut()
            .map_or(ptr::null_mut(), |r| r as *mut IbvRecvWr);
        let mut bad: *mut IbvRecvWr = ptr::null_mut();
        // SAFETY: NULL or the live real QP; a chain of live requests.
        let ret = unsafe { super::qp::post_recv(real_qp(qp), head, &mut bad) };
        if ret != 0 && !bad_wr.is_null() {
            // SAFETY: writable (the contract).
            unsafe { *bad_wr = bad_of(&real, &from, bad) };
        }
        ret
    })
}

/// The 1.0 context's `post_srq_recv`: as [`post_recv_1_0`] on the real
/// SRQ.
///
/// # Safety
/// As [`post_recv_1_0`].
pub unsafe extern "C" fn post_srq_recv_1_0(
    srq: *mut IbvSrq10,
    wr: *mut IbvRecvWr10,
    bad_wr: *mut *mut IbvRecvWr10,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (mut real, from) = unsafe { recv_chain(wr) };
        let head = real
            .first_mut()
            .map_or(ptr::null_mut(), |r| r as *mut IbvRecvWr);
        let mut bad: *mut IbvRecvWr = ptr::null_mut();
        // SAFETY: NULL or the live real SRQ; a chain of live requests.
        let ret = unsafe { super::qp::post_srq_recv(real_srq(srq), head, &mut bad) };
        if ret != 0 && !bad_wr.is_null() {
            // SAFETY: writable (the contract).
            unsafe { *bad_wr = bad_of(&real, &from, bad) };
        }
        ret
    })
}

/// The 1.0 context's `post_send`: the chain as this library's send
/// requests (the `wr` union copied as libibverbs copies it, through its
/// `atomic` arm; a UD send's 1.0 AH replaced by the real one) on the real
/// QP; on failure, `bad_wr` names the 1.0 request the real post stopped
/// at.
///
/// # Safety
/// As the real operation, with 1.0 requests: `wr` is a readable chain;
/// `bad_wr` points to a writable pointer.
pub unsafe extern "C" fn post_send_1_0(
    qp: *mut IbvQp10,
    wr: *mut IbvSendWr10,
    bad_wr: *mut *mut IbvSendWr10,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a live wrapper (checked), read in place.
        let Some((real, ud)) = field(qp, Kind::Qp, |q| unsafe {
            ((*q).real_qp, (*q).qp_type == QPT_UD)
        }) else {
            return libc::EINVAL;
        };
        let (mut chain, mut from): (Vec<IbvSendWr>, Vec<*mut IbvSendWr10>) =
            (Vec::new(), Vec::new());
        let mut at = wr;
        while !at.is_null() {
            // SAFETY: a readable request of the chain (the contract).
            let w = unsafe { &*at };
            // SAFETY: zero is a valid value of this struct of integers,
            // pointers and unions of them.
            let mut r: IbvSendWr = unsafe { std::mem::zeroed() };
            r.wr_id = w.wr_id;
            r.sg_list = w.sg_list;
            r.num_sge = w.num_sge;
            r.opcode = w.opcode;
            r.send_flags = w.send_flags;
            r.imm_data = w.imm_data;
            r.wr.atomic = w.wr;
            if ud {
                // SAFETY: the `ud` arm as the program wrote it: its AH a
                // 1.0 AH (checked by real_ah, NULL if it is none).
                unsafe { r.wr.ud.ah = real_ah(r.wr.ud.ah.cast::<IbvAh10>()) };
            }
            chain.push(r);
            from.push(at);
            at = w.next;
        }
        for i in 1..chain.len() {
            let next: *mut IbvSendWr = &mut chain[i];
            chain[i - 1].next = next;
        }
        let head = chain
            .first_mut()
            .map_or(ptr::null_mut(), |r| r as *mut IbvSendWr);
        let mut bad: *mut IbvSendWr = ptr::null_mut();
        // SAFETY: the live real QP; a chain of live requests.
        let ret = unsafe { super::qp::post_send(real, head, &mut bad) };
        if ret != 0 && !bad_wr.is_null() {
            // SAFETY: writable (the contract).
            unsafe { *bad_wr = bad_of(&chain, &from, bad) };
        }
        ret
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn layouts_are_the_1_0_abis() {
        // x86-64 (glibc: a 40-byte mutex, a 48-byte condition variable).
        assert_eq!(offset_of!(IbvCq10, mutex), 24);
        assert_eq!(offset_of!(IbvCq10, real_cq), 120);
        assert_eq!(size_of::<IbvCq10>(), 128);
        assert_eq!(offset_of!(IbvSrq10, mutex), 32);
        assert_eq!(offset_of!(IbvSrq10, real_srq), 128);
        assert_eq!(offset_of!(IbvQp10, state), 56);
        assert_eq!(offset_of!(IbvQp10, real_qp), 160);
        assert_eq!(size_of::<IbvQp10>(), 168);
        assert_eq!(size_of::<IbvQpInitAttr10>(), 64);
        assert_eq!(offset_of!(IbvSendWr10, wr), 40);
        assert_eq!(size_of::<IbvSendWr10>(), 72);
        assert_eq!(size_of::<IbvRecvWr10>(), 32);
    }

    #[test]
    fn foreign_pointers_fail_as_the_1_1_functions_fail_for_null() {
        let mut bogus = [0u64; 64];
        let p = bogus.as_mut_ptr().cast::<c_void>();
        let mut bad: *mut IbvSendWr10 = ptr::null_mut();
        // SAFETY: every object pointer is checked before use; none is
        // followed.
        unsafe {
            assert!(ibv_create_cq_1_0(p.cast(), 1, p, ptr::null_mut(), 0).is_null());
            assert_eq!(ibv_resize_cq_1_0(p.cast(), 4), libc::EINVAL);
            assert_eq!(ibv_destroy_cq_1_0(p.cast()), libc::EINVAL);
            ibv_ack_cq_events_1_0(p.cast(), 1);
            assert!(ibv_create_srq_1_0(p.cast(), p.cast()).is_null());
            assert_eq!(ibv_destroy_srq_1_0(p.cast()), libc::EINVAL);
            assert_eq!(ibv_query_srq_1_0(p.cast(), p.cast()), libc::EINVAL);
            assert_eq!(ibv_modify_srq_1_0(p.cast(), p.cast(), 0), libc::EINVAL);
            let mut attr: IbvQpInitAttr10 = std::mem::zeroed();
            assert!(ibv_create_qp_1_0(p.cast(), &mut attr).is_null());
            assert_eq!(ibv_destroy_qp_1_0(p.cast()), libc::EINVAL);
            assert_eq!(ibv_modify_qp_1_0(p.cast(), p.cast(), 0), libc::EINVAL);
            assert_eq!(
                ibv_query_qp_1_0(p.cast(), p.cast(), 0, &mut attr),
                libc::EINVAL
            );
            assert_eq!(ibv_attach_mcast_1_0(p.cast(), p.cast(), 0), libc::EINVAL);
            assert_eq!(ibv_detach_mcast_1_0(p.cast(), p.cast(), 0), libc::EINVAL);
            assert_eq!(poll_cq_1_0(p.cast(), 1, p.cast()), -1);
            assert_eq!(req_notify_cq_1_0(p.cast(), 0), libc::EINVAL);
            assert_eq!(
                post_send_1_0(p.cast(), ptr::null_mut(), &mut bad),
                libc::EINVAL
            );
        }
        assert!(
            bogus.iter().all(|&w| w == 0),
            "nothing was written through a foreign pointer"
        );
    }

    #[test]
    fn receive_chains_keep_order_and_map_the_bad_request_back() {
        let mut w2 = IbvRecvWr10 {
            next: ptr::null_mut(),
            wr_id: 2,
            sg_list: ptr::null_mut(),
            num_sge: 0,
        };
        let mut w1 = IbvRecvWr10 {
            next: &mut w2,
            wr_id: 1,
            sg_list: ptr::null_mut(),
            num_sge: 1,
        };
        // SAFETY: a NULL-terminated chain of live requests.
        let (mut real, from) = unsafe { recv_chain(&mut w1) };
        assert_eq!(real.len(), 2);
        assert_eq!((real[0].wr_id, real[0].num_sge, real[1].wr_id), (1, 1, 2));
        assert!(ptr::eq(real[0].next, &real[1]) && real[1].next.is_null());
        let second: *mut IbvRecvWr = &mut real[1];
        assert!(ptr::eq(bad_of(&real, &from, second), &w2));
        assert!(bad_of(&real, &from, ptr::null_mut()).is_null());
    }
}
