//! QPs: the C structs of QPs, SRQs, AHs and work requests, the records
//! behind a QP pointer, and `ibv_create_qp`, `ibv_modify_qp`,
//! `ibv_query_qp` and `ibv_destroy_qp`. The data path is `post`'s, SRQs
//! `srq`'s and address handles `ah`'s.
//!
//! Posting walks the program's chain of `struct ibv_send_wr` (or
//! `ibv_recv_wr`), turns each into an `rverbs` work request borrowing the
//! program's scatter/gather list in place, and hands them to the provider
//! up to [`BATCH`] at a time (one doorbell per batch): no allocation. A
//! QP's queues sit behind one lock, since libibverbs lets several
//! threads post to one QP (none for a thread domain's QP). The first
//! request refused is returned through `bad_wr`, with those before it
//! posted, as libibverbs promises.

use super::lock::Lock;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::io::IoSlice;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use rverbs::{
    opcode, AccessFlags, Ah, AhAttr, Gid, GlobalRoute, Mtu, Payload, PostError, PostFailed, Qp,
    QpAttr, QpCap, QpCreateFlags, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendRequest,
    SendWr, Sge, Srq, SrqInitAttr, UdDest, WrOpcode,
};

use super::cq::{cq_rec, IbvCq};
use super::pd::{pd_rec, IbvPd, PdRec};
use super::qp_ex;
pub use super::qp_ex::{create_qp_ex, CreateQpExFn};

mod ah;
mod post;
mod srq;

use super::{errno_of, guard, hot, null_with, IbvContext};
use crate::copy::{IbvAhAttr, IbvGlobalRoute, IbvQpAttr, IbvQpCap};
pub(super) use ah::{ah_rec, AhRec};
pub use ah::{ibv_create_ah, ibv_create_ah_from_wc, ibv_destroy_ah, ibv_init_ah_from_wc};
pub(super) use post::{flush_send, Batch};
pub use post::{post_recv, post_send, post_srq_recv, PostRecvFn, PostSendFn, PostSrqRecvFn, BATCH};
use srq::srq_rec;
pub use srq::{ibv_create_srq, ibv_destroy_srq, ibv_modify_srq, ibv_query_srq};

/// `struct ibv_qp`.
#[repr(C)]
pub struct IbvQp {
    /// The context.
    pub context: *mut IbvContext,
    /// The program's pointer.
    pub qp_context: *mut c_void,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// Where sends complete.
    pub send_cq: *mut IbvCq,
    /// Where receives complete.
    pub recv_cq: *mut IbvCq,
    /// Its SRQ, or NULL.
    pub srq: *mut IbvSrq,
    /// The kernel's handle.
    pub handle: u32,
    /// The QP number.
    pub qp_num: u32,
    /// `enum ibv_qp_state`, as last set by `ibv_modify_qp`.
    pub state: c_int,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
    /// For the program's use (initialised).
    pub mutex: libc::pthread_mutex_t,
    /// For the program's use (initialised).
    pub cond: libc::pthread_cond_t,
    /// Asynchronous events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct IbvSrq {
    /// The context.
    pub context: *mut IbvContext,
    /// The program's pointer.
    pub srq_context: *mut c_void,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// The kernel's handle.
    pub handle: u32,
    /// For the program's use (initialised).
    pub mutex: libc::pthread_mutex_t,
    /// For the program's use (initialised).
    pub cond: libc::pthread_cond_t,
    /// Asynchronous events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct IbvAh {
    /// The context.
    pub context: *mut IbvContext,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// The kernel's handle.
    pub handle: u32,
}

/// The `rdma` arm of `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct WrRdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// The `atomic` arm of `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct WrAtomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// The `ud` arm of `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct WrUd {
    pub ah: *mut IbvAh,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub union WrUnion {
    pub rdma: WrRdma,
    pub atomic: WrAtomic,
    pub ud: WrUd,
}

/// `struct ibv_send_wr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
    /// `imm_data` (network order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: WrUnion,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    /// `bind_mw` (the union's other member, `tso`, is not used here).
    pub bind_mw: super::mw::IbvSendWrBindMw,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
}

/// A QP handed out.
#[repr(C)]
pub(super) struct QpRec {
    /// A `struct ibv_qp_ex` (whose head is the `struct ibv_qp`), written
    /// by `ibv_modify_qp` (`state`) and readable and writable by the
    /// program (`wr_id`, `wr_flags`, ...): never behind a Rust reference.
    pub(super) c: UnsafeCell<qp_ex::IbvQpEx>,
    /// What this library reads of `c`, which it never changes after
    /// creation: `qp_type`, `pd`, `send_cq`, `recv_cq`, `srq`.
    pub(super) ud: bool,
    pd: *mut IbvPd,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut IbvSrq,
    /// Held from `wr_start` to `wr_complete`/`wr_abort`: the extended
    /// interface's bracket, which guards `pending`.
    pub(super) building: std::sync::atomic::AtomicBool,
    /// The work requests built since `wr_start`, for a QP created with
    /// the extended interface (`None` otherwise).
    pub(super) pending: UnsafeCell<Option<qp_ex::Pending>>,
    /// The QP: never dropped with the record, only taken out by
    /// `ibv_destroy_qp` (and put back if the kernel refuses).
    pub(super) qp: Lock<ManuallyDrop<Qp>>,
}

/// The record behind a QP pointer.
///
/// # Safety
/// `qp` is null or a QP of this library not destroyed while the
/// reference lives (libibverbs' contract).
pub(super) unsafe fn qp_rec<'a>(qp: *mut IbvQp) -> Option<&'a QpRec> {
    // SAFETY: a non-null `qp` is the first field of a live QpRec.
    unsafe { qp.cast::<QpRec>().as_ref() }
}

/// `IBV_QPT_RC`.
const IBV_QPT_RC: c_int = 2;
/// `IBV_QPT_UC`.
const IBV_QPT_UC: c_int = 3;
/// `IBV_QPT_UD`.
const IBV_QPT_UD: c_int = 4;
/// `IBV_QPT_DRIVER`.
pub(crate) const IBV_QPT_DRIVER: c_int = 0xff;
/// `EFADV_QP_DRIVER_TYPE_SRD`: EFA's driver QP type.
pub(crate) const EFADV_QP_DRIVER_TYPE_SRD: u32 = 0;

fn cap_c(c: QpCap) -> IbvQpCap {
    IbvQpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_create_qp`: a QP in RESET, or NULL with errno; `init_attr.cap`
/// is updated to what was granted.
///
/// # Safety
/// `pd` is a live PD of this library; `init_attr` points to a readable
/// and writable `struct ibv_qp_init_attr` whose CQs (and SRQ) are live
/// objects of this library.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut IbvPd,
    init_attr: *mut IbvQpInitAttr,
) -> *mut IbvQp {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let Some(attr) = (unsafe { init_attr.as_mut() }) else {
            return null_with(libc::EINVAL);
        };
        // SAFETY: forwarded from this function's contract.
        match unsafe { new_qp(pd, attr, None, None, None) } {
            Ok(rec) => rec.cast::<IbvQp>(),
            Err(e) => null_with(e),
        }
    })
}

/// Creates the QP `attr` describes on `pd` (with kernel creation flags
/// `flags` when given, through the extended command; with the extended
/// work-request interface for the operations `send_ops` when given; an
/// `IBV_QPT_DRIVER` QP of driver type `driver` when given, which only
/// EFA's SRD is) and returns its record; `attr.cap` is updated to what was
/// granted.
///
/// # Safety
/// `pd` is NULL or a live PD of this library; the CQs and SRQ `attr`
/// names are NULL or live objects of this library.
pub(in crate::ffi) unsafe fn new_qp(
    pd: *mut IbvPd,
    attr: &mut IbvQpInitAttr,
    flags: Option<QpCreateFlags>,
    send_ops: Option<u64>,
    driver: Option<u32>,
) -> Result<*mut QpRec, c_int> {
    // SAFETY: forwarded from this function's contract.
    let pdr = unsafe { pd_rec(pd) }.ok_or(libc::EINVAL)?;
    let qp_type = match (attr.qp_type, driver) {
        (IBV_QPT_RC, None) => QpType::Rc,
        (IBV_QPT_UC, None) => QpType::Uc,
        (IBV_QPT_UD, None) => QpType::Ud,
        (IBV_QPT_DRIVER, Some(EFADV_QP_DRIVER_TYPE_SRD)) => QpType::Srd,
        // A driver type no provider here has.
        (IBV_QPT_DRIVER, Some(_)) => return Err(libc::EINVAL),
        // RAW_PACKET, XRC_SEND, XRC_RECV, DRIVER (without a driver type:
        // what a provider answers for ibv_create_qp of it).
        (8..=10 | IBV_QPT_DRIVER, None) => return Err(libc::EOPNOTSUPP),
        _ => return Err(libc::EINVAL),
    };
    // SAFETY: the CQs and SRQ are live (the contract).
    let (scq, rcq, srq) = unsafe {
        (
            cq_rec(attr.send_cq),
            cq_rec(attr.recv_cq),
            srq_rec(attr.srq),
        )
    };
    let (Some(scq), Some(rcq)) = (scq, rcq) else {
        return Err(libc::EINVAL);
    };
    let cap = QpCap {
        max_send_wr: attr.cap.max_send_wr,
        max_recv_wr: attr.cap.max_recv_wr,
        max_send_sge: attr.cap.max_send_sge,
        max_recv_sge: attr.cap.max_recv_sge,
        max_inline_data: attr.cap.max_inline_data,
    };
    let made = {
        let sguard = scq.cq.lock();
        let same = ptr::eq(scq, rcq);
        let rguard = if same { None } else { Some(rcq.cq.lock()) };
        let recv_cq = rguard.as_deref().unwrap_or(&*sguard);
        let init = QpInitAttr::new(qp_type, &sguard)
            .recv_cq(recv_cq)
            .cap(cap)
            .sq_sig_all(attr.sq_sig_all != 0);
        let srq_guard = srq.map(|s| s.srq.lock());
        match (flags, srq_guard.as_deref()) {
            (Some(f), s) => pdr.pd.create_qp_ex(&init, f, s),
            (None, Some(s)) => pdr.pd.create_qp_with_srq(&init, s),
            (None, None) => pdr.pd.create_qp(&init),
        }
    };
    let qp = made.map_err(|e| errno_of(&e))?;
    let id = qp.event_id();
    let granted = qp.cap();
    attr.cap = cap_c(QpCap {
        // With an SRQ the QP has no receive queue of its own.
        max_recv_wr: if srq.is_some() {
            0
        } else {
            granted.max_recv_wr
        },
        max_recv_sge: if srq.is_some() {
            0
        } else {
            granted.max_recv_sge
        },
        ..granted
    });
    let pending = send_ops.map(|ops| qp_ex::Pending::new(ops, &granted));
    pdr.hold();
    scq.hold();
    rcq.hold();
    if let Some(s) = srq {
        s.users.fetch_add(1, Ordering::Relaxed);
    }
    let base = IbvQp {
        context: pdr.c_context(),
        qp_context: attr.qp_context,
        pd,
        send_cq: attr.send_cq,
        recv_cq: attr.recv_cq,
        srq: attr.srq,
        handle: qp.handle(),
        qp_num: qp.qp_num(),
        state: 0,
        qp_type: attr.qp_type,
        mutex: libc::PTHREAD_MUTEX_INITIALIZER,
        cond: libc::PTHREAD_COND_INITIALIZER,
        events_completed: 0,
    };
    let rec = Box::new(QpRec {
        ud: qp_type.is_datagram(),
        pd,
        send_cq: attr.send_cq,
        recv_cq: attr.recv_cq,
        srq: attr.srq,
        c: UnsafeCell::new(qp_ex::IbvQpEx::new(base, pending.is_some())),
        building: std::sync::atomic::AtomicBool::new(false),
        pending: UnsafeCell::new(pending),
        qp: if pdr.single_threaded() {
            // SAFETY: the QP is created on a parent domain with a thread
            // domain: libibverbs' contract (ibv_alloc_td(3)) is that the
            // program does not use it from several threads at once, which
            // this library takes as "no two calls that name the QP run at
            // once" (see ffi::lock); every guard of this lock is taken
            // inside such a call and dropped before it returns.
            unsafe { Lock::unlocked(ManuallyDrop::new(qp)) }
        } else {
            Lock::new(ManuallyDrop::new(qp))
        },
    });
    let rec = Box::into_raw(rec);
    super::event::track(pdr.c_context(), id, rec as usize);
    Ok(rec)
}

/// `ibv_destroy_qp`: 0, or the errno with the QP left as it was (the
/// kernel refuses, `EBUSY`, while the QP is attached to a multicast
/// group). The PD, CQs and SRQ stop counting it only once it is gone.
///
/// # Safety
/// `qp` is NULL or a QP of this library not yet destroyed; no other call
/// uses it during or after a successful call.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
    guard(libc::EIO, || {
        if qp.is_null() {
            return libc::EINVAL;
        }
        let rec_ptr = qp.cast::<QpRec>();
        // SAFETY: a live QpRec from ibv_create_qp (the contract), which no
        // other call uses during this one.
        let rec = unsafe { &mut *rec_ptr };
        let slot = rec.qp.get_mut();
        // A panic between taking the QP and putting it back (or freeing
        // the record) would leave the program a record without its QP.
        let _abort = AbortOnUnwind;
        // SAFETY: the QP is taken once, here, and then either put back
        // (the kernel refused) or its record freed without dropping it.
        let taken = unsafe { ManuallyDrop::take(slot) };
        if let Err(refused) = taken.destroy() {
            // Still alive: the program's pointer stays valid, and the
            // PD, CQs and SRQ keep counting it (libibverbs' answer too).
            let errno = errno_of(&refused.error);
            *slot = ManuallyDrop::new(refused.qp);
            return errno;
        }
        // Destroyed: waits until its async events handed out were
        // acknowledged, as libibverbs waits after the command.
        super::event::untrack(qp as usize);
        // SAFETY: the PD, CQs and SRQ outlive the QP (their destroy
        // refuses while it is counted).
        unsafe {
            if let Some(p) = pd_rec(rec.pd) {
                p.release();
            }
            if let Some(q) = cq_rec(rec.send_cq) {
                q.release();
            }
            if let Some(q) = cq_rec(rec.recv_cq) {
                q.release();
            }
            if let Some(s) = srq_rec(rec.srq) {
                s.users.fetch_sub(1, Ordering::Relaxed);
            }
        }
        // SAFETY: from Box::into_raw in ibv_create_qp; freed once, here,
        // its QP already taken (ManuallyDrop: not dropped again); the
        // caller makes no other call on it.
        drop(unsafe { Box::from_raw(rec_ptr) });
        0
    })
}

/// Aborts the process if dropped while a panic unwinds: for a step that
/// must not be left half done.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::process::abort();
        }
    }
}

/// `enum ibv_qp_attr_mask` bits this library applies.
mod mask {
    pub const STATE: c_int = 1 << 0;
    pub const CUR_STATE: c_int = 1 << 1;
    pub const ACCESS_FLAGS: c_int = 1 << 3;
    pub const PKEY_INDEX: c_int = 1 << 4;
    pub const PORT: c_int = 1 << 5;
    pub const QKEY: c_int = 1 << 6;
    pub const AV: c_int = 1 << 7;
    pub const PATH_MTU: c_int = 1 << 8;
    pub const TIMEOUT: c_int = 1 << 9;
    pub const RETRY_CNT: c_int = 1 << 10;
    pub const RNR_RETRY: c_int = 1 << 11;
    pub const RQ_PSN: c_int = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: c_int = 1 << 13;
    pub const MIN_RNR_TIMER: c_int = 1 << 15;
    pub const SQ_PSN: c_int = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
    pub const DEST_QPN: c_int = 1 << 20;
    /// Every bit above.
    pub const APPLIED: c_int = STATE
        | CUR_STATE
        | ACCESS_FLAGS
        | PKEY_INDEX
        | PORT
        | QKEY
        | AV
        | PATH_MTU
        | TIMEOUT
        | RETRY_CNT
        | RNR_RETRY
        | RQ_PSN
        | MAX_QP_RD_ATOMIC
        | MIN_RNR_TIMER
        | SQ_PSN
        | MAX_DEST_RD_ATOMIC
        | DEST_QPN;
    /// EN_SQD_ASYNC_NOTIFY, ALT_PATH, PATH_MIG_STATE, CAP, RATE_LIMIT:
    /// known, not applied here.
    pub const REFUSED: c_int = (1 << 2) | (1 << 14) | (1 << 18) | (1 << 19) | (1 << 25);
    use std::ffi::c_int;
}

fn ah_attr_of(a: &IbvAhAttr) -> AhAttr {
    AhAttr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
        grh: (a.is_global != 0).then_some(GlobalRoute {
            dgid: Gid(a.grh.dgid),
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        }),
    }
}

fn ah_attr_c(a: &AhAttr) -> IbvAhAttr {
    let g = a.grh.unwrap_or_default();
    IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: g.dgid.0,
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.grh.is_some() as u8,
        port_num: a.port_num,
    }
}

fn state_of(v: c_int) -> Result<QpState, c_int> {
    u8::try_from(v)
        .ok()
        .and_then(QpState::from_raw)
        .ok_or(libc::EINVAL)
}

/// The `rverbs` attributes `mask` selects from `a`.
fn qp_attr_of(a: &IbvQpAttr, m: c_int) -> Result<QpAttr, c_int> {
    if m & mask::REFUSED != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if m & !mask::APPLIED != 0 {
        return Err(libc::EINVAL);
    }
    let on = |bit: c_int| m & bit != 0;
    let mtu = if on(mask::PATH_MTU) {
        let v = u8::try_from(a.path_mtu).map_err(|_| libc::EINVAL)?;
        Some(Mtu::from_raw(v).ok_or(libc::EINVAL)?)
    } else {
        None
    };
    Ok(QpAttr {
        qp_state: on(mask::STATE).then(|| state_of(a.qp_state)).transpose()?,
        cur_qp_state: on(mask::CUR_STATE)
            .then(|| state_of(a.cur_qp_state))
            .transpose()?,
        path_mtu: mtu,
        qkey: on(mask::QKEY).then_some(a.qkey),
        rq_psn: on(mask::RQ_PSN).then_some(a.rq_psn),
        sq_psn: on(mask::SQ_PSN).then_some(a.sq_psn),
        dest_qp_num: on(mask::DEST_QPN).then_some(a.dest_qp_num),
        qp_access_flags: on(mask::ACCESS_FLAGS)
            .then(|| AccessFlags::from_bits(a.qp_access_flags).ok_or(libc::EINVAL))
            .transpose()?,
        pkey_index: on(mask::PKEY_INDEX).then_some(a.pkey_index),
        port_num: on(mask::PORT).then_some(a.port_num),
        ah_attr: on(mask::AV).then(|| ah_attr_of(&a.ah_attr)),
        max_rd_atomic: on(mask::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        max_dest_rd_atomic: on(mask::MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        min_rnr_timer: on(mask::MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        timeout: on(mask::TIMEOUT).then_some(a.timeout),
        retry_cnt: on(mask::RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: on(mask::RNR_RETRY).then_some(a.rnr_retry),
    })
}

/// `ibv_modify_qp`: applies the attributes `attr_mask` selects; 0, or
/// the errno (`EOPNOTSUPP` for alternate paths, path migration, SQD
/// notification, capacity changes and rate limits).
///
/// # Safety
/// `qp` is a live QP of this library; `attr` points to a readable
/// `struct ibv_qp_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(a)) = (unsafe { qp_rec(qp) }, unsafe { attr.as_ref() }) else {
            return libc::EINVAL;
        };
        let wanted = match qp_attr_of(a, attr_mask) {
            Ok(w) => w,
            Err(e) => return e,
        };
        let mut q = rec.qp.lock();
        match q.modify(&wanted) {
            Ok(()) => {
                if let Some(s) = wanted.qp_state {
                    // SAFETY: the QP is live, its C struct sits in an
                    // UnsafeCell, and `state` is written only here, under
                    // the QP's lock (programs read it as libibverbs lets
                    // them).
                    unsafe { (*rec.c.get()).qp.state = c_int::from(s.raw()) };
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `ibv_query_qp`: the QP's attributes (all of them, whatever
/// `attr_mask` asks) and its creation attributes; 0, or the errno.
///
/// # Safety
/// `qp` is a live QP of this library; `attr` and `init_attr` point to
/// writable structs.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
    init_attr: *mut IbvQpInitAttr,
) -> c_int {
    let _ = attr_mask;
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(out), Some(init)) =
            (unsafe { qp_rec(qp) }, unsafe { attr.as_mut() }, unsafe {
                init_attr.as_mut()
            })
        else {
            return libc::EINVAL;
        };
        let (a, cap, sig_all) = match rec.qp.lock().query() {
            Ok(r) => r,
            Err(e) => return errno_of(&e),
        };
        let state = |s: Option<QpState>| s.map_or(7, |s| c_int::from(s.raw()));
        *out = IbvQpAttr {
            qp_state: state(a.qp_state),
            cur_qp_state: state(a.cur_qp_state),
            path_mtu: a.path_mtu.map_or(0, |m| m as c_int),
            qkey: a.qkey.unwrap_or(0),
            rq_psn: a.rq_psn.unwrap_or(0),
            sq_psn: a.sq_psn.unwrap_or(0),
            dest_qp_num: a.dest_qp_num.unwrap_or(0),
            qp_access_flags: a.qp_access_flags.map_or(0, |f| f.bits()),
            cap: cap_c(cap),
            ah_attr: a.ah_attr.as_ref().map(ah_attr_c).unwrap_or_default(),
            pkey_index: a.pkey_index.unwrap_or(0),
            max_rd_atomic: a.max_rd_atomic.unwrap_or(0),
            max_dest_rd_atomic: a.max_dest_rd_atomic.unwrap_or(0),
            min_rnr_timer: a.min_rnr_timer.unwrap_or(0),
            port_num: a.port_num.unwrap_or(0),
            timeout: a.timeout.unwrap_or(0),
            retry_cnt: a.retry_cnt.unwrap_or(0),
            rnr_retry: a.rnr_retry.unwrap_or(0),
            ..IbvQpAttr::default()
        };
        // SAFETY: the QP is live; its C struct is read in place through
        // the cell (no reference to it is made).
        let (qp_context, qp_type) =
            unsafe { ((*rec.c.get()).qp.qp_context, (*rec.c.get()).qp.qp_type) };
        *init = IbvQpInitAttr {
            qp_context,
            send_cq: rec.send_cq,
            recv_cq: rec.recv_cq,
            srq: rec.srq,
            cap: cap_c(cap),
            qp_type,
            sq_sig_all: c_int::from(sig_all),
        };
        0
    })
}

impl std::fmt::Debug for IbvSendWr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IbvSendWr")
            .field("wr_id", &self.wr_id)
            .field("opcode", &self.opcode)
            .field("num_sge", &self.num_sge)
            .finish()
    }
}
