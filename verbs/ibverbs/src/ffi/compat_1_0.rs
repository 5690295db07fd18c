//! libibverbs' `IBVERBS_1.0` compatibility versions of its core verbs:
//! what a program linked against libibverbs 1.0 (2006; the ABI before
//! `struct ibv_device` and friends grew) binds, `ibv_get_device_list@IBVERBS_1.0`
//! and 32 more. rdma-core still exports them; so does this library, each a
//! symbol named `name@IBVERBS_1.0` that the linker exports as that
//! compatibility version (a program linked today binds the default,
//! `IBVERBS_1.1`).
//!
//! The 1.0 ABI has its own structs: each 1.0 object is a small struct of
//! the old layout that this library allocates and that points to the real
//! (1.1) object it wraps (`real_*`), as libibverbs does it. The layouts
//! are not in any installed header: they are defined here from
//! rdma-core's `libibverbs/compat-1_0.c` (read to learn the ABI, nothing
//! copied) and checked, field by field, by `tests/layout.rs` against the
//! same members declared in C with the system's types. Each 1.0 function
//! calls this library's 1.1 function on the real object and answers what
//! that answers (its return value, and its errno), then fills or frees the
//! wrapper; the 1.1 object's `cq_context`, `qp_context` or `srq_context`
//! is the 1.0 wrapper, so that completion and asynchronous events name
//! the 1.0 objects, as libibverbs arranges it. A 1.0 context's operations
//! table has the five data-path operations the 1.0 `verbs.h` inline
//! functions call (`poll_cq`, `req_notify_cq`, `post_send`, `post_recv`,
//! `post_srq_recv`, in [`super::compat_1_0_queues`]); the others are null,
//! as in libibverbs.
//!
//! Unlike libibverbs, which follows any pointer it is given, every
//! wrapper this module hands out is recorded, and a 1.0 call given a
//! pointer that is not a live wrapper of the right kind calls the 1.1
//! function with NULL, so it fails as that function fails for NULL
//! (`EINVAL`) instead of reading foreign memory. Where libibverbs leaves a
//! wrapper field unset (a `handle`, the context's fds), it is filled from
//! the real object; everything libibverbs sets is set the same way.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::ptr;
use std::sync::Mutex;

use super::compat_1_0_queues as queues;
use super::cq::IbvCq;
use super::event::IbvAsyncEvent;
use super::pd::{IbvMr, IbvPd};
use super::qp::{IbvAh, IbvQp, IbvSrq};
use super::{guard, lock, IbvContext, IbvDevice, IbvDeviceAttr, IbvPortAttrCompat};
use crate::copy::IbvAhAttr;

/// `struct ibv_device_1_0`: the 1.0 device, two obsolete sysfs pointers
/// (null), the real device where the driver pointer was, and the two
/// device operations of `struct ibv_device` (null).
#[repr(C)]
pub struct IbvDevice10 {
    /// `obsolete_sysfs_dev`: null.
    pub obsolete_sysfs_dev: *mut c_void,
    /// `obsolete_sysfs_ibdev`: null.
    pub obsolete_sysfs_ibdev: *mut c_void,
    /// The real device.
    pub real_device: *mut IbvDevice,
    /// `_ops` (`struct _ibv_device_ops`): null.
    pub ops: [usize; 2],
}

/// `struct ibv_context_ops_1_0`: 27 operations, of which a 1.0 program's
/// inline functions call the five filled in; the other 22 stay null, as
/// libibverbs leaves them.
#[repr(C)]
pub struct IbvContextOps10 {
    /// `query_device` ... `create_cq`: null.
    pub before_poll_cq: [super::Slot; 7],
    /// `poll_cq`.
    pub poll_cq: Option<queues::PollCq10Fn>,
    /// `req_notify_cq`.
    pub req_notify_cq: Option<queues::ReqNotifyCq10Fn>,
    /// `cq_event` ... `destroy_srq`: null.
    pub before_post_srq_recv: [super::Slot; 7],
    /// `post_srq_recv`.
    pub post_srq_recv: Option<queues::PostSrqRecv10Fn>,
    /// `create_qp` ... `destroy_qp`: null.
    pub before_post_send: [super::Slot; 4],
    /// `post_send`.
    pub post_send: Option<queues::PostSend10Fn>,
    /// `post_recv`.
    pub post_recv: Option<queues::PostRecv10Fn>,
    /// `create_ah` ... `detach_mcast`: null.
    pub after_post_recv: [super::Slot; 4],
}

/// Operations in `struct ibv_context_ops_1_0`.
pub const CONTEXT_OPS_1_0: usize = 27;

const _: () = assert!(size_of::<IbvContextOps10>() == CONTEXT_OPS_1_0 * size_of::<usize>());

/// `struct ibv_context_1_0`.
#[repr(C)]
pub struct IbvContext10 {
    /// The 1.0 device it was opened on.
    pub device: *mut IbvDevice10,
    /// The operations a 1.0 program's inline functions call.
    pub ops: IbvContextOps10,
    /// The real context's command fd.
    pub cmd_fd: c_int,
    /// The real context's asynchronous event fd.
    pub async_fd: c_int,
    /// The real context's completion vectors.
    pub num_comp_vectors: c_int,
    /// The real context (where 1.0 had `abi_compat`).
    pub real_context: *mut IbvContext,
}

/// `struct ibv_pd_1_0`.
#[repr(C)]
pub struct IbvPd10 {
    /// The 1.0 context.
    pub context: *mut IbvContext10,
    /// The real PD's handle.
    pub handle: u32,
    /// The real PD.
    pub real_pd: *mut IbvPd,
}

/// `struct ibv_mr_1_0`.
#[repr(C)]
pub struct IbvMr10 {
    /// The 1.0 context.
    pub context: *mut IbvContext10,
    /// The 1.0 PD.
    pub pd: *mut IbvPd10,
    /// The real MR's handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
    /// The real MR.
    pub real_mr: *mut IbvMr,
}

/// `struct ibv_ah_1_0`.
#[repr(C)]
pub struct IbvAh10 {
    /// The 1.0 context.
    pub context: *mut IbvContext10,
    /// The 1.0 PD.
    pub pd: *mut IbvPd10,
    /// The real AH's handle.
    pub handle: u32,
    /// The real AH.
    pub real_ah: *mut IbvAh,
}

/// What a recorded wrapper is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A device list (the address programs hold, one past its hidden
    /// first slot).
    List,
    Device,
    Context,
    Pd,
    Mr,
    Ah,
    Cq,
    Srq,
    Qp,
}

/// Every wrapper handed out and not freed, by address.
static LIVE: Mutex<BTreeMap<usize, Kind>> = Mutex::new(BTreeMap::new());

/// Records a wrapper.
pub(crate) fn record<T>(p: *mut T, kind: Kind) {
    lock(&LIVE).insert(p as usize, kind);
}

/// Forgets a wrapper (before it is freed).
pub(crate) fn forget<T>(p: *mut T) {
    lock(&LIVE).remove(&(p as usize));
}

/// Whether `p` is a live wrapper of `kind`.
pub(crate) fn is_live<T>(p: *const T, kind: Kind) -> bool {
    !p.is_null() && lock(&LIVE).get(&(p as usize)) == Some(&kind)
}

/// A wrapper handed out: boxed, recorded, and returned as the pointer
/// programs hold.
pub(crate) fn hand_out<T>(value: T, kind: Kind) -> *mut T {
    let p = Box::into_raw(Box::new(value));
    record(p, kind);
    p
}

/// Frees a wrapper from [`hand_out`].
///
/// # Safety
/// `p` came from [`hand_out`] and is not used again.
pub(crate) unsafe fn free<T>(p: *mut T) {
    forget(p);
    // SAFETY: from Box::into_raw in hand_out (the contract), freed once.
    drop(unsafe { Box::from_raw(p) });
}

/// Reads a field of a live wrapper of `kind` (`get` reads it from the
/// wrapper's pointer); `None` for any other pointer.
pub(crate) fn field<T, R>(p: *mut T, kind: Kind, get: impl FnOnce(*mut T) -> R) -> Option<R> {
    is_live(p, kind).then(|| get(p))
}

/// The real context of a 1.0 context, or NULL.
pub(crate) fn real_context(c: *mut IbvContext10) -> *mut IbvContext {
    // SAFETY: a live wrapper (checked), read in place.
    field(c, Kind::Context, |c| unsafe { (*c).real_context }).unwrap_or(ptr::null_mut())
}

/// The real PD of a 1.0 PD, or NULL.
pub(crate) fn real_pd(p: *mut IbvPd10) -> *mut IbvPd {
    // SAFETY: a live wrapper (checked), read in place.
    field(p, Kind::Pd, |p| unsafe { (*p).real_pd }).unwrap_or(ptr::null_mut())
}

/// The 1.0 context a 1.0 PD was allocated on, or NULL.
pub(crate) fn pd_context(p: *mut IbvPd10) -> *mut IbvContext10 {
    // SAFETY: a live wrapper (checked), read in place.
    field(p, Kind::Pd, |p| unsafe { (*p).context }).unwrap_or(ptr::null_mut())
}

/// `ibv_get_device_list@IBVERBS_1.0`: the devices as 1.0 devices, a
/// NULL-terminated array (free it with the 1.0 `ibv_free_device_list`);
/// NULL with the 1.1 function's errno if it fails, or `ENOMEM`.
/// `num_devices` is written only on success, as libibverbs writes it.
///
/// # Safety
/// `num_devices` is null or points to a writable `int`.
#[export_name = "ibv_get_device_list@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_get_device_list_1_0(num_devices: *mut c_int) -> *mut *mut IbvDevice10 {
    guard(ptr::null_mut(), || {
        let mut n: c_int = 0;
        // SAFETY: `n` is a writable int.
        let real = unsafe { super::ibv_get_device_list(&mut n) };
        if real.is_null() {
            return ptr::null_mut();
        }
        let count = usize::try_from(n).unwrap_or(0);
        // The real list first, then the 1.0 devices, then NULL.
        // SAFETY: calloc of count + 2 pointers; checked for null below.
        let slots =
            unsafe { libc::calloc(count + 2, size_of::<*mut c_void>()) }.cast::<*mut c_void>();
        if slots.is_null() {
            // SAFETY: the list just returned, freed once.
            unsafe { super::ibv_free_device_list(real) };
            super::set_errno(libc::ENOMEM);
            return ptr::null_mut();
        }
        // SAFETY: `slots` holds count + 2 pointers (zeroed: the last
        // stays NULL); `real` holds `count` devices then NULL.
        unsafe {
            *slots = real.cast();
            for i in 0..count {
                let dev = hand_out(
                    IbvDevice10 {
                        obsolete_sysfs_dev: ptr::null_mut(),
                        obsolete_sysfs_ibdev: ptr::null_mut(),
                        real_device: *real.add(i),
                        ops: [0; 2],
                    },
                    Kind::Device,
                );
                *slots.add(i + 1) = dev.cast();
            }
        }
        // SAFETY: within the allocation (count + 2 >= 2 slots).
        let list = unsafe { slots.add(1) }.cast::<*mut IbvDevice10>();
        record(list, Kind::List);
        if !num_devices.is_null() {
            // SAFETY: the caller passes null or a writable int.
            unsafe { *num_devices = n };
        }
        list
    })
}

/// `ibv_free_device_list@IBVERBS_1.0`: frees a 1.0 list, its 1.0 devices
/// and the real list behind it. Anything but a live 1.0 list is left
/// alone.
///
/// # Safety
/// `list` is not used again after a successful call.
#[export_name = "ibv_free_device_list@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_free_device_list_1_0(list: *mut *mut IbvDevice10) {
    guard((), || {
        if !is_live(list, Kind::List) {
            return;
        }
        forget(list);
        // SAFETY: a live list from ibv_get_device_list_1_0: its devices,
        // each from hand_out, end at NULL; the slot before it holds the
        // real list; the allocation starts there.
        unsafe {
            let mut at = list;
            while !(*at).is_null() {
                free(*at);
                at = at.add(1);
            }
            let slots = list.sub(1).cast::<*mut c_void>();
            super::ibv_free_device_list((*slots).cast());
            libc::free(slots.cast());
        }
    })
}

/// The real device of a 1.0 device, or NULL.
fn real_device(d: *mut IbvDevice10) -> *mut IbvDevice {
    // SAFETY: a live wrapper (checked), read in place.
    field(d, Kind::Device, |d| unsafe { (*d).real_device }).unwrap_or(ptr::null_mut())
}

/// `ibv_get_device_name@IBVERBS_1.0`: the real device's name (NULL with
/// `EINVAL` for anything but a live 1.0 device).
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[export_name = "ibv_get_device_name@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_get_device_name_1_0(device: *mut IbvDevice10) -> *const c_char {
    // SAFETY: the 1.1 function checks the pointer it is given.
    guard(ptr::null(), || unsafe {
        super::ibv_get_device_name(real_device(device))
    })
}

/// `ibv_get_device_guid@IBVERBS_1.0`: the real device's node GUID
/// (network order), 0 for anything but a live 1.0 device.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[export_name = "ibv_get_device_guid@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_get_device_guid_1_0(device: *mut IbvDevice10) -> u64 {
    // SAFETY: the 1.1 function checks the pointer it is given.
    guard(0, || unsafe {
        super::ibv_get_device_guid(real_device(device))
    })
}

/// `ibv_open_device@IBVERBS_1.0`: a 1.0 context on the real device, or
/// NULL with the 1.1 function's errno.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[export_name = "ibv_open_device@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_open_device_1_0(device: *mut IbvDevice10) -> *mut IbvContext10 {
    guard(ptr::null_mut(), || {
        // SAFETY: the 1.1 function checks the pointer it is given.
        let real = unsafe { super::ibv_open_device(real_device(device)) };
        if real.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: a context just opened, read in place.
        let (cmd_fd, async_fd, num_comp_vectors) =
            unsafe { ((*real).cmd_fd, (*real).async_fd, (*real).num_comp_vectors) };
        hand_out(
            IbvContext10 {
                device,
                ops: IbvContextOps10 {
                    before_poll_cq: [None; 7],
                    poll_cq: Some(queues::poll_cq_1_0),
                    req_notify_cq: Some(queues::req_notify_cq_1_0),
                    before_post_srq_recv: [None; 7],
                    post_srq_recv: Some(queues::post_srq_recv_1_0),
                    before_post_send: [None; 4],
                    post_send: Some(queues::post_send_1_0),
                    post_recv: Some(queues::post_recv_1_0),
                    after_post_recv: [None; 4],
                },
                cmd_fd,
                async_fd,
                num_comp_vectors,
                real_context: real,
            },
            Kind::Context,
        )
    })
}

/// `ibv_close_device@IBVERBS_1.0`: closes the real context and frees the
/// 1.0 one; the 1.1 function's answer (-1 with `EINVAL` for anything but
/// a live 1.0 context).
///
/// # Safety
/// No other call on the context runs during or after this one.
#[export_name = "ibv_close_device@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_close_device_1_0(context: *mut IbvContext10) -> c_int {
    guard(-1, || {
        // SAFETY: the 1.1 function checks the pointer it is given.
        let ret = unsafe { super::ibv_close_device(real_context(context)) };
        if ret == 0 {
            // SAFETY: a live 1.0 context (the 1.1 call succeeded on its
            // real context), not used again (the contract).
            unsafe { free(context) };
        }
        ret
    })
}

/// `IBV_EVENT_CQ_ERR`.
const EVENT_CQ_ERR: c_int = 0;
/// The event types whose element is a QP: `IBV_EVENT_QP_FATAL` ...
/// `IBV_EVENT_PATH_MIG_ERR` and `IBV_EVENT_QP_LAST_WQE_REACHED`.
const QP_EVENTS: [c_int; 8] = [1, 2, 3, 4, 5, 6, 7, 16];
/// `IBV_EVENT_SRQ_ERR`, `IBV_EVENT_SRQ_LIMIT_REACHED`.
const SRQ_EVENTS: [c_int; 2] = [14, 15];

/// `ibv_get_async_event@IBVERBS_1.0`: the 1.1 function's next event of
/// the real context, its element the 1.0 CQ, QP or SRQ (the real object's
/// `cq_context`, `qp_context` or `srq_context`, which the 1.0 creation
/// set to its wrapper). 0, or -1 with errno.
///
/// # Safety
/// As the 1.1 function: `event` points to a writable `struct
/// ibv_async_event`.
#[export_name = "ibv_get_async_event@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_get_async_event_1_0(
    context: *mut IbvContext10,
    event: *mut IbvAsyncEvent,
) -> c_int {
    guard(-1, || {
        // SAFETY: the 1.1 function checks the context; `event` is
        // writable (the contract).
        let ret = unsafe { super::event::ibv_get_async_event(real_context(context), event) };
        if ret != 0 {
            return ret;
        }
        // SAFETY: the event just written; its element, for these types,
        // a live real object of this library whose context pointer sits
        // in its struct (the object cannot be destroyed before the event
        // is acknowledged).
        unsafe {
            let ev = &mut *event;
            let obj = ev.element;
            if ev.event_type == EVENT_CQ_ERR {
                ev.element = (*(obj as *mut IbvCq)).cq_context as usize;
            } else if QP_EVENTS.contains(&ev.event_type) {
                ev.element = (*(obj as *mut IbvQp)).qp_context as usize;
            } else if SRQ_EVENTS.contains(&ev.event_type) {
                ev.element = (*(obj as *mut IbvSrq)).srq_context as usize;
            }
        }
        0
    })
}

/// `ibv_ack_async_event@IBVERBS_1.0`: acknowledges an event of the 1.0
/// `ibv_get_async_event`, its 1.0 element turned back into the real
/// object (an element that is no live 1.0 wrapper is passed on as it is).
///
/// # Safety
/// `event` is NULL or points to a readable `struct ibv_async_event`.
#[export_name = "ibv_ack_async_event@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_ack_async_event_1_0(event: *mut IbvAsyncEvent) {
    guard((), || {
        // SAFETY: NULL or readable (the contract); only read.
        let Some(ev) = (unsafe { event.as_ref() }) else {
            return;
        };
        let obj = ev.element as *mut c_void;
        // SAFETY: each field read only from a live wrapper of its kind.
        let real = unsafe {
            if ev.event_type == EVENT_CQ_ERR {
                field(obj.cast::<queues::IbvCq10>(), Kind::Cq, |c| {
                    (*c).real_cq as usize
                })
            } else if QP_EVENTS.contains(&ev.event_type) {
                field(obj.cast::<queues::IbvQp10>(), Kind::Qp, |q| {
                    (*q).real_qp as usize
                })
            } else if SRQ_EVENTS.contains(&ev.event_type) {
                field(obj.cast::<queues::IbvSrq10>(), Kind::Srq, |s| {
                    (*s).real_srq as usize
                })
            } else {
                None
            }
        };
        let mut real_event = IbvAsyncEvent {
            element: real.unwrap_or(ev.element),
            event_type: ev.event_type,
        };
        // SAFETY: a readable event, on the stack.
        unsafe { super::event::ibv_ack_async_event(&mut real_event) };
    })
}

/// `ibv_query_device@IBVERBS_1.0`: the 1.1 query on the real context.
///
/// # Safety
/// As the 1.1 function.
#[export_name = "ibv_query_device@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_query_device_1_0(
    context: *mut IbvContext10,
    attr: *mut IbvDeviceAttr,
) -> c_int {
    // SAFETY: the 1.1 function checks the context; the rest is forwarded.
    guard(libc::EIO, || unsafe {
        super::ibv_query_device(real_context(context), attr)
    })
}

/// `ibv_query_port@IBVERBS_1.0`: the 1.1 query on the real context.
///
/// # Safety
/// As the 1.1 function.
#[export_name = "ibv_query_port@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_query_port_1_0(
    context: *mut IbvContext10,
    port_num: u8,
    attr: *mut IbvPortAttrCompat,
) -> c_int {
    // SAFETY: as in ibv_query_device_1_0.
    guard(libc::EIO, || unsafe {
        super::ibv_query_port(real_context(context), port_num, attr)
    })
}

/// `ibv_query_gid@IBVERBS_1.0`: the 1.1 query on the real context.
///
/// # Safety
/// As the 1.1 function.
#[export_name = "ibv_query_gid@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_query_gid_1_0(
    context: *mut IbvContext10,
    port_num: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    // SAFETY: as in ibv_query_device_1_0.
    guard(-1, || unsafe {
        super::ibv_query_gid(real_context(context), port_num, index, gid)
    })
}

/// `ibv_query_pkey@IBVERBS_1.0`: the 1.1 query on the real context.
///
/// # Safety
/// As the 1.1 function.
#[export_name = "ibv_query_pkey@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_query_pkey_1_0(
    context: *mut IbvContext10,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: as in ibv_query_device_1_0.
    guard(-1, || unsafe {
        super::ibv_query_pkey(real_context(context), port_num, index, pkey)
    })
}

/// `ibv_alloc_pd@IBVERBS_1.0`: a 1.0 PD, or NULL with the 1.1 function's
/// errno.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[export_name = "ibv_alloc_pd@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_alloc_pd_1_0(context: *mut IbvContext10) -> *mut IbvPd10 {
    guard(ptr::null_mut(), || {
        // SAFETY: the 1.1 function checks the context.
        let real = unsafe { super::pd::ibv_alloc_pd(real_context(context)) };
        if real.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: a PD just allocated, read in place.
        let handle = unsafe { (*real).handle };
        hand_out(
            IbvPd10 {
                context,
                handle,
                real_pd: real,
            },
            Kind::Pd,
        )
    })
}

/// `ibv_dealloc_pd@IBVERBS_1.0`: deallocates the real PD, then frees the
/// 1.0 one; the 1.1 function's answer (`EBUSY` while objects remain on
/// it, `EINVAL` for anything but a live 1.0 PD).
///
/// # Safety
/// No other call uses the PD during or after a successful call.
#[export_name = "ibv_dealloc_pd@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_dealloc_pd_1_0(pd: *mut IbvPd10) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: NULL or a live PD (checked by real_pd).
        let ret = unsafe { super::pd::ibv_dealloc_pd(real_pd(pd)) };
        if ret == 0 {
            // SAFETY: a live 1.0 PD, not used again (the contract).
            unsafe { free(pd) };
        }
        ret
    })
}

/// `ibv_reg_mr@IBVERBS_1.0`: a 1.0 MR (its keys copied from the real
/// one), or NULL with the 1.1 function's errno.
///
/// # Safety
/// As the 1.1 function: `length` bytes from `addr` are the program's
/// memory for as long as the MR is registered.
#[export_name = "ibv_reg_mr@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_reg_mr_1_0(
    pd: *mut IbvPd10,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut IbvMr10 {
    guard(ptr::null_mut(), || {
        // SAFETY: NULL or a live PD (checked by real_pd); the memory is
        // the caller's (the contract).
        let real = unsafe { super::pd::ibv_reg_mr(real_pd(pd), addr, length, access) };
        if real.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: an MR just registered, read in place.
        let (handle, lkey, rkey) = unsafe { ((*real).handle, (*real).lkey, (*real).rkey) };
        hand_out(
            IbvMr10 {
                context: pd_context(pd),
                pd,
                handle,
                lkey,
                rkey,
                real_mr: real,
            },
            Kind::Mr,
        )
    })
}

/// `ibv_dereg_mr@IBVERBS_1.0`: deregisters the real MR, then frees the
/// 1.0 one; the 1.1 function's answer.
///
/// # Safety
/// No other call uses the MR during or after a successful call.
#[export_name = "ibv_dereg_mr@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_dereg_mr_1_0(mr: *mut IbvMr10) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: a live wrapper (checked), read in place.
        let real = field(mr, Kind::Mr, |m| unsafe { (*m).real_mr }).unwrap_or(ptr::null_mut());
        // SAFETY: NULL or the live real MR.
        let ret = unsafe { super::pd::ibv_dereg_mr(real) };
        if ret == 0 {
            // SAFETY: a live 1.0 MR, not used again (the contract).
            unsafe { free(mr) };
        }
        ret
    })
}

/// `ibv_create_ah@IBVERBS_1.0`: a 1.0 AH, or NULL with the 1.1
/// function's errno.
///
/// # Safety
/// As the 1.1 function: `attr` points to a readable `struct ibv_ah_attr`.
#[export_name = "ibv_create_ah@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_create_ah_1_0(pd: *mut IbvPd10, attr: *mut IbvAhAttr) -> *mut IbvAh10 {
    guard(ptr::null_mut(), || {
        // SAFETY: NULL or a live PD (checked by real_pd); `attr` as the
        // contract says.
        let real = unsafe { super::qp::ibv_create_ah(real_pd(pd), attr) };
        if real.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: an AH just created, read in place.
        let handle = unsafe { (*real).handle };
        hand_out(
            IbvAh10 {
                context: pd_context(pd),
                pd,
                handle,
                real_ah: real,
            },
            Kind::Ah,
        )
    })
}

/// The real AH of a 1.0 AH, or NULL.
pub(crate) fn real_ah(ah: *mut IbvAh10) -> *mut IbvAh {
    // SAFETY: a live wrapper (checked), read in place.
    field(ah, Kind::Ah, |a| unsafe { (*a).real_ah }).unwrap_or(ptr::null_mut())
}

/// `ibv_destroy_ah@IBVERBS_1.0`: destroys the real AH, then frees the
/// 1.0 one; the 1.1 function's answer.
///
/// # Safety
/// No other call uses the AH during or after a successful call.
#[export_name = "ibv_destroy_ah@IBVERBS_1.0"]
pub unsafe extern "C" fn ibv_destroy_ah_1_0(ah: *mut IbvAh10) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: NULL or the live real AH.
        let ret = unsafe { super::qp::ibv_destroy_ah(real_ah(ah)) };
        if ret == 0 {
            // SAFETY: a live 1.0 AH, not used again (the contract).
            unsafe { free(ah) };
        }
        ret
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_are_the_1_0_abis() {
        use std::mem::offset_of;
        // x86-64 and AArch64 (LP64).
        assert_eq!(size_of::<IbvDevice10>(), 40);
        assert_eq!(offset_of!(IbvDevice10, real_device), 16);
        assert_eq!(offset_of!(IbvContext10, ops), 8);
        assert_eq!(offset_of!(IbvContextOps10, poll_cq), 7 * 8);
        assert_eq!(offset_of!(IbvContextOps10, req_notify_cq), 8 * 8);
        assert_eq!(offset_of!(IbvContextOps10, post_srq_recv), 16 * 8);
        assert_eq!(offset_of!(IbvContextOps10, post_send), 21 * 8);
        assert_eq!(offset_of!(IbvContextOps10, post_recv), 22 * 8);
        assert_eq!(offset_of!(IbvContext10, cmd_fd), 224);
        assert_eq!(offset_of!(IbvContext10, real_context), 240);
        assert_eq!(size_of::<IbvContext10>(), 248);
        assert_eq!(
            (offset_of!(IbvPd10, real_pd), size_of::<IbvPd10>()),
            (16, 24)
        );
        assert_eq!(
            (offset_of!(IbvMr10, lkey), offset_of!(IbvMr10, real_mr)),
            (20, 32)
        );
        assert_eq!(
            (offset_of!(IbvAh10, real_ah), size_of::<IbvAh10>()),
            (24, 32)
        );
    }

    #[test]
    fn foreign_pointers_fail_as_the_1_1_functions_fail_for_null() {
        let mut bogus = [0u64; 64];
        let p = bogus.as_mut_ptr().cast::<c_void>();
        // SAFETY: every pointer is checked before use; none is followed.
        unsafe {
            assert!(ibv_get_device_name_1_0(p.cast()).is_null());
            assert_eq!(ibv_get_device_guid_1_0(p.cast()), 0);
            assert!(ibv_open_device_1_0(p.cast()).is_null());
            assert_eq!(ibv_close_device_1_0(p.cast()), -1);
            assert_eq!(ibv_query_device_1_0(p.cast(), p.cast()), libc::EINVAL);
            assert_eq!(ibv_query_port_1_0(p.cast(), 1, p.cast()), libc::EINVAL);
            assert_eq!(ibv_query_gid_1_0(p.cast(), 1, 0, p.cast()), -1);
            assert_eq!(ibv_query_pkey_1_0(p.cast(), 1, 0, p.cast()), -1);
            assert!(ibv_alloc_pd_1_0(p.cast()).is_null());
            assert_eq!(ibv_dealloc_pd_1_0(p.cast()), libc::EINVAL);
            assert!(ibv_reg_mr_1_0(p.cast(), p, 8, 0).is_null());
            assert_eq!(ibv_dereg_mr_1_0(p.cast()), libc::EINVAL);
            assert!(ibv_create_ah_1_0(p.cast(), p.cast()).is_null());
            assert_eq!(ibv_destroy_ah_1_0(p.cast()), libc::EINVAL);
            assert_eq!(ibv_get_async_event_1_0(p.cast(), p.cast()), -1);
            ibv_free_device_list_1_0(p.cast());
            ibv_ack_async_event_1_0(ptr::null_mut());
        }
        assert!(
            bogus.iter().all(|&w| w == 0),
            "nothing was written through a foreign pointer"
        );
    }
}
