//! The C side: libibverbs' structs laid out as `<infiniband/verbs.h>`
//! says (checked against the system header by `tests/layout.rs`), and the
//! exported functions. This is the only module with `unsafe`: each block
//! states what the C caller must have upheld, which is libibverbs' own
//! contract (pointers this library handed out, buffers of the size the
//! prototype says). Device and context pointers are also checked against
//! the ones this library handed out, so a stale or foreign one fails with
//! `EINVAL` instead of being dereferenced.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::ptr;
use std::sync::{Mutex, MutexGuard, OnceLock};

use rverbs::{Context, Device, WcStatus};

pub mod compat_1_0;
pub mod compat_1_0_queues;
pub mod cq;
mod device;
pub mod ece;
pub mod efadv;
pub mod enums;
pub mod event;
mod fork;
mod lock;
pub mod mcast;
pub mod mw;
pub mod pd;
pub mod provider;
pub mod qp;
pub mod qp_ex;
mod query;
mod strings;

pub use device::*;
pub use fork::*;
pub use query::*;
use query::{query_device_ex, query_port_ex};
pub use strings::*;

/// `IBV_SYSFS_NAME_MAX`.
pub const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const SYSFS_PATH_MAX: usize = 256;
/// Function pointers in `struct ibv_context_ops`.
pub const CONTEXT_OPS: usize = 32;

/// `struct ibv_device`.
#[repr(C)]
pub struct IbvDevice {
    /// `_ops` (two pointers only rdma-core's providers use): zero.
    pub ops: [usize; 2],
    /// `enum ibv_node_type`.
    pub node_type: c_int,
    /// `enum ibv_transport_type`.
    pub transport_type: c_int,
    /// The ibdev name (`rxe0`).
    pub name: [c_char; SYSFS_NAME_MAX],
    /// The uverbs node (`uverbs0`).
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    /// Its sysfs directory (`/sys/class/infiniband_verbs/uverbs0`).
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    /// The device's sysfs directory (`/sys/class/infiniband/rxe0`).
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

/// `struct ibv_context_ops`: the five operations `verbs.h`'s inline
/// data-path functions call (`ibv_poll_cq`, `ibv_req_notify_cq`,
/// `ibv_post_srq_recv`, `ibv_post_send`, `ibv_post_recv`) filled in; the
/// memory-window ones and the `_compat_*` slots stay null (the inline
/// `ibv_alloc_mw`/`ibv_bind_mw` report a null slot as `EOPNOTSUPP`).
#[repr(C)]
pub struct IbvContextOps {
    /// `_compat_query_device` ... `_compat_dereg_mr`: null.
    pub before_alloc_mw: [Slot; 7],
    /// `alloc_mw`.
    pub alloc_mw: Option<mw::AllocMwFn>,
    /// `bind_mw`.
    pub bind_mw: Option<mw::BindMwFn>,
    /// `dealloc_mw`.
    pub dealloc_mw: Option<mw::DeallocMwFn>,
    /// `_compat_create_cq`: null.
    pub before_poll_cq: Slot,
    /// `poll_cq`.
    pub poll_cq: Option<cq::PollCqFn>,
    /// `req_notify_cq`.
    pub req_notify_cq: Option<cq::ReqNotifyCqFn>,
    /// `_compat_cq_event` ... `_compat_destroy_srq`: null.
    pub before_post_srq_recv: [Slot; 7],
    /// `post_srq_recv`.
    pub post_srq_recv: Option<qp::PostSrqRecvFn>,
    /// `_compat_create_qp` ... `_compat_destroy_qp`: null.
    pub before_post_send: [Slot; 4],
    /// `post_send`.
    pub post_send: Option<qp::PostSendFn>,
    /// `post_recv`.
    pub post_recv: Option<qp::PostRecvFn>,
    /// `_compat_create_ah` ... `_compat_async_event`: null.
    pub after_post_recv: [Slot; 5],
}

const _: () = assert!(size_of::<IbvContextOps>() == CONTEXT_OPS * size_of::<usize>());

/// `struct ibv_context`.
#[repr(C)]
pub struct IbvContext {
    /// The device it was opened on.
    pub device: *mut IbvDevice,
    /// The legacy operations.
    pub ops: IbvContextOps,
    /// The uverbs command fd.
    pub cmd_fd: c_int,
    /// The asynchronous event fd.
    pub async_fd: c_int,
    /// Completion vectors.
    pub num_comp_vectors: c_int,
    /// A mutex for the application's use (libibverbs initialises it).
    pub mutex: libc::pthread_mutex_t,
    /// libibverbs' marker of an extended context; null here: not extended.
    pub abi_compat: *mut c_void,
}

/// A C function pointer slot this library leaves empty (null): the
/// inline function that would call it fails with `EOPNOTSUPP` (or
/// `ENOSYS`) for a provider without the operation.
pub type Slot = Option<unsafe extern "C" fn()>;

/// `verbs_context.query_port`.
pub type QueryPortFn = unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr, usize) -> c_int;
/// `verbs_context.query_device_ex`.
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut IbvContext,
    *const QueryDeviceExInput,
    *mut IbvDeviceAttrEx,
    usize,
) -> c_int;

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
pub struct QueryDeviceExInput {
    /// Must be zero.
    pub comp_mask: u32,
}

/// `struct verbs_context`: the extended operations, laid out before the
/// `struct ibv_context` that programs hold, which `verbs.h` finds by
/// subtracting the offset of `context` once `abi_compat` says
/// [`VERBS_ABI_IS_EXTENDED`].
#[repr(C)]
pub struct VerbsContext {
    /// `query_port`: the whole `ibv_port_attr`.
    pub query_port: Option<QueryPortFn>,
    /// `advise_mr` ... `modify_qp_rate_limit`: empty.
    pub before_alloc_parent_domain: [Slot; 13],
    /// `alloc_parent_domain`.
    pub alloc_parent_domain: Option<pd::AllocParentDomainFn>,
    /// `dealloc_td`.
    pub dealloc_td: Option<pd::DeallocTdFn>,
    /// `alloc_td`.
    pub alloc_td: Option<pd::AllocTdFn>,
    /// `modify_cq` ... `query_rt_values`: empty.
    pub before_create_cq_ex: [Slot; 8],
    /// `create_cq_ex`.
    pub create_cq_ex: Option<cq::CreateCqExFn>,
    /// `priv`: null.
    pub priv_: *mut c_void,
    /// `query_device_ex`.
    pub query_device_ex: Option<QueryDeviceExFn>,
    /// `ibv_destroy_flow` ... `open_qp`: empty.
    pub before_create_qp_ex: [Slot; 5],
    /// `create_qp_ex`.
    pub create_qp_ex: Option<qp::CreateQpExFn>,
    /// `get_srq_num` ... `_ABI_placeholder3`: empty.
    pub after_create_qp_ex: [Slot; 5],
    /// The size of this struct (`verbs.h` counts an operation present if
    /// it lies within it).
    pub sz: usize,
    /// What programs hold.
    pub context: IbvContext,
}

/// `__VERBS_ABI_IS_EXTENDED`, the `abi_compat` of an extended context.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// A device this library listed: the C struct first, so a pointer to it
/// is a pointer to the record.
#[repr(C)]
struct DeviceRec {
    c: IbvDevice,
    dev: Device,
}

/// An open context: the C structs first (programs hold a pointer to
/// `v.context`, inside them).
#[repr(C)]
pub(crate) struct ContextRec {
    v: VerbsContext,
    pub(crate) ctx: Context,
}

/// Every device ever listed. Records are never freed: a device pointer
/// stays valid for the life of the process, as libibverbs' stay valid
/// while anything refers to them, and listing again reuses them.
/// Boxed: the C side holds pointers into the records, which must not
/// move when the vector grows.
#[allow(clippy::vec_box)]
static DEVICES: Mutex<Vec<Box<DeviceRec>>> = Mutex::new(Vec::new());
/// The open contexts: (address of the `ibv_context` programs hold,
/// address of its record).
static CONTEXTS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets this thread's errno.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid.
    unsafe { *libc::__errno_location() = e };
}

/// `e`, also set as this thread's errno: how a verb that returns its
/// errno fails.
pub(crate) fn errno_with(e: c_int) -> c_int {
    set_errno(e);
    e
}

/// NULL with `e` as this thread's errno: how a constructor fails.
pub(crate) fn null_with<T>(e: c_int) -> *mut T {
    set_errno(e);
    ptr::null_mut()
}

/// Runs `f`; a panic is caught (it must not unwind into C) and reported
/// as `EIO` with the value `failed`.
pub(crate) fn guard<T>(failed: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EIO);
        failed
    })
}

/// The data path's entries (`post_send`, `post_recv`, `post_srq_recv`,
/// `poll_cq`) run their body through this instead of [`guard`]: no
/// `catch_unwind`, which cost a post + poll about 70 instructions (the
/// body could not be inlined into the entry, nor the provider's call into
/// it). No panic crosses into C all the same: the entries are `extern
/// "C"`, so a panic there, which no input should cause (every size and
/// index is checked arithmetic), aborts the process instead of unwinding.
#[inline(always)]
pub(crate) fn hot<T>(f: impl FnOnce() -> T) -> T {
    f()
}

/// The errno an `rverbs` error stands for.
pub(crate) fn errno_of(e: &rverbs::Error) -> c_int {
    match e.errno() {
        Some(n) => n.raw(),
        None if e.invalid_kind().is_some() => libc::EINVAL,
        // What the provider does not build: as libibverbs answers for a
        // provider without the verb.
        None if matches!(e, rverbs::Error::Unsupported { .. }) => libc::EOPNOTSUPP,
        None => libc::EIO,
    }
}

/// Clears `O_NONBLOCK` on `fd`: libibverbs' event fds (a channel's, the
/// context's async one) block in `read` until the program changes that;
/// rverbs makes them non-blocking.
pub(crate) fn set_blocking(fd: c_int) -> Result<(), c_int> {
    // SAFETY: F_GETFL/F_SETFL on a fd of this library's, open for the
    // call; they touch only its status flags.
    let r = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 {
            -1
        } else {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK)
        }
    };
    if r < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    Ok(())
}

/// The next event of an event fd (a completion channel's, the context's
/// async one) from `read_once`, one `read(2)` of the fd in the mode the
/// program left it, as libibverbs reads it: blocking by default, and then
/// a signal handler installed without `SA_RESTART` ends the wait with
/// `EINTR`; `EAGAIN` when the program made the fd non-blocking and none is
/// pending; or the errno.
pub(crate) fn next_event<T>(
    read_once: impl FnOnce() -> rverbs::Result<Option<T>>,
) -> Result<T, c_int> {
    match read_once() {
        Ok(Some(ev)) => Ok(ev),
        Ok(None) => Err(libc::EAGAIN),
        Err(e) => Err(errno_of(&e)),
    }
}

/// Copies `s` into a C char array, truncated to leave its NUL.
fn copy_str<const N: usize>(dst: &mut [c_char; N], s: &str) {
    *dst = [0; N];
    for (d, b) in dst.iter_mut().zip(s.bytes().take(N - 1)) {
        *d = b as c_char;
    }
}

fn device_struct(dev: &Device) -> IbvDevice {
    let mut c = IbvDevice {
        ops: [0; 2],
        node_type: dev
            .node_type()
            .and_then(|n| c_int::try_from(n).ok())
            .unwrap_or(-1),
        transport_type: dev.transport_type(),
        name: [0; SYSFS_NAME_MAX],
        dev_name: [0; SYSFS_NAME_MAX],
        dev_path: [0; SYSFS_PATH_MAX],
        ibdev_path: [0; SYSFS_PATH_MAX],
    };
    copy_str(&mut c.name, dev.name());
    copy_str(&mut c.dev_name, dev.uverbs());
    let root = std::env::var("SYSFS_PATH").unwrap_or_else(|_| "/sys".into());
    copy_str(
        &mut c.dev_path,
        &format!("{root}/class/infiniband_verbs/{}", dev.uverbs()),
    );
    copy_str(&mut c.ibdev_path, &dev.sysfs_dir().to_string_lossy());
    c
}

/// The record of `p` if this library handed it out.
fn device_rec(devices: &[Box<DeviceRec>], p: *const IbvDevice) -> Option<&DeviceRec> {
    devices.iter().map(|b| &**b).find(|r| ptr::eq(&r.c, p))
}

/// The context record of `p` if it is open.
pub(crate) fn context_rec<'a>(p: *const IbvContext) -> Option<&'a ContextRec> {
    let rec = lock(&CONTEXTS)
        .iter()
        .find(|(c, _)| *c == p as usize)
        .map(|&(_, r)| r)?;
    // SAFETY: `rec` is the address of a live ContextRec (Box::into_raw in
    // ibv_open_device, removed from CONTEXTS before it is freed); the
    // caller does not close it while using it (libibverbs' contract: no
    // call on a context during or after its ibv_close_device).
    Some(unsafe { &*(rec as *const ContextRec) })
}

/// A verb of libibverbs' "0, or the errno" convention: `f` on the open
/// context `context`; `EINVAL` for a context that is not open or when
/// `args_ok` is false (a null output pointer); `EIO` if `f` panics.
fn errno_verb(
    context: *const IbvContext,
    args_ok: bool,
    f: impl FnOnce(&Context) -> Result<(), c_int>,
) -> c_int {
    guard(libc::EIO, || match context_rec(context) {
        Some(rec) if args_ok => f(&rec.ctx).err().unwrap_or(0),
        _ => libc::EINVAL,
    })
}

/// A verb of libibverbs' "a value, or -1 with errno" convention: as
/// [`errno_verb`], the errno set and -1 returned on failure.
fn minus_one_verb(
    context: *const IbvContext,
    args_ok: bool,
    f: impl FnOnce(&Context) -> Result<c_int, c_int>,
) -> c_int {
    guard(-1, || {
        let r = match context_rec(context) {
            Some(rec) if args_ok => f(&rec.ctx),
            _ => Err(libc::EINVAL),
        };
        r.unwrap_or_else(|e| {
            set_errno(e);
            -1
        })
    })
}

/// `rverbs_ibverbs_version`: which build of this library is loaded (a
/// static string such as `rverbs-ibverbs 0.1.0`). It is also how the
/// workspace's linkage check tells our `libibverbs.so.1` from rdma-core's:
/// ours defines this symbol, theirs cannot.
#[no_mangle]
pub extern "C" fn rverbs_ibverbs_version() -> *const c_char {
    static V: &CStr = match CStr::from_bytes_with_nul(
        concat!("rverbs-ibverbs ", env!("CARGO_PKG_VERSION"), "\0").as_bytes(),
    ) {
        Ok(v) => v,
        Err(_) => c"rverbs-ibverbs",
    };
    V.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_helpers_name_known_values_and_say_unknown_otherwise() {
        // SAFETY: the helpers return static NUL-terminated strings.
        let s = |p: *const c_char| unsafe { CStr::from_ptr(p) }.to_str().unwrap();
        assert_eq!(s(ibv_event_type_str(4)), "communication established");
        assert_eq!(s(ibv_event_type_str(19)), "WQ fatal error");
        assert_eq!(s(ibv_event_type_str(20)), "unknown");
        assert_eq!(s(ibv_event_type_str(-1)), "unknown");
        assert_eq!(s(ibv_node_type_str(1)), "InfiniBand channel adapter (CA)");
        assert_eq!(s(ibv_node_type_str(-1)), "unknown");
        assert_eq!(s(ibv_node_type_str(8)), "unknown");
        assert_eq!(s(ibv_port_state_str(4)), "active");
        assert_eq!(s(ibv_port_state_str(6)), "unknown");
    }

    #[test]
    fn foreign_pointers_are_refused_not_followed() {
        let mut fake = [0u8; 1024];
        let p = fake.as_mut_ptr() as *mut IbvDevice;
        // SAFETY: the functions check the pointer before any use.
        unsafe {
            assert!(ibv_get_device_name(p).is_null());
            assert!(ibv_open_device(p).is_null());
            assert_eq!(ibv_close_device(p as *mut IbvContext), -1);
            assert_eq!(
                ibv_query_device(p as *mut IbvContext, ptr::null_mut()),
                libc::EINVAL
            );
            assert_eq!(ibv_close_device(ptr::null_mut()), -1);
        }
    }

    #[test]
    fn status_strings_match_the_library() {
        let s = |v| {
            // SAFETY: the returned pointers are static NUL-terminated strings.
            let c = unsafe { CStr::from_ptr(ibv_wc_status_str(v)) };
            c.to_str().unwrap()
        };
        assert_eq!(s(0), "success");
        assert_eq!(s(12), "transport retry counter exceeded");
        assert_eq!(s(99), "unknown");
        assert_eq!(s(-1), "unknown");
    }

    #[test]
    fn device_strings_are_truncated_with_their_nul() {
        let mut a = [1 as c_char; 4];
        copy_str(&mut a, "abcdef");
        assert_eq!(a, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
    }
}
