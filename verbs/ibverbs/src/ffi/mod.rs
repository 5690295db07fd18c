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
pub mod ece;
pub mod enums;
pub mod event;
mod lock;
pub mod mcast;
pub mod mw;
pub mod pd;
pub mod provider;
pub mod qp;
pub mod qp_ex;

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

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: u32,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_int,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// The part of `struct ibv_port_attr` that the exported `ibv_query_port`
/// writes: everything up to `flags`. `verbs.h`'s inline wrapper zeroes
/// the whole (newer, larger) struct and passes it here; programs built
/// against older headers pass this smaller one, so nothing past it may be
/// written.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvPortAttrCompat {
    pub state: c_int,
    pub max_mtu: c_int,
    pub active_mtu: c_int,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
}

/// `struct ibv_port_attr` as `verbs.h` (rdma-core 44) has it: the compat
/// part and `port_cap_flags2`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvPortAttr {
    /// Everything up to `flags`.
    pub compat: IbvPortAttrCompat,
    /// The second capability word.
    pub port_cap_flags2: u16,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct OdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_tso_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct TsoCaps {
    pub max_tso: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct RssCaps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_packet_pacing_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct PacketPacingCaps {
    pub qp_rate_limit_min: u32,
    pub qp_rate_limit_max: u32,
    pub supported_qpts: u32,
}

/// `struct ibv_tm_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct TmCaps {
    pub max_rndv_hdr_size: u32,
    pub max_num_tags: u32,
    pub flags: u32,
    pub max_ops: u32,
    pub max_sge: u32,
}

/// `struct ibv_cq_moderation_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct CqModerationCaps {
    pub max_cq_count: u16,
    pub max_cq_period: u16,
}

/// `struct ibv_pci_atomic_caps`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct PciAtomicCaps {
    pub fetch_add: u16,
    pub swap: u16,
    pub compare_swap: u16,
}

/// `struct ibv_device_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvDeviceAttrEx {
    pub orig_attr: IbvDeviceAttr,
    pub comp_mask: u32,
    pub odp_caps: OdpCaps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    pub tso_caps: TsoCaps,
    pub rss_caps: RssCaps,
    pub max_wq_type_rq: u32,
    pub packet_pacing_caps: PacketPacingCaps,
    pub raw_packet_caps: u32,
    pub tm_caps: TmCaps,
    pub cq_mod_caps: CqModerationCaps,
    pub max_dm_size: u64,
    pub pci_atomic_caps: PciAtomicCaps,
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

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

/// `ibv_get_device_list`: a NULL-terminated array (free it with
/// `ibv_free_device_list`) of the rxe and mlx5 devices; NULL with errno
/// if the devices cannot be listed.
///
/// # Safety
/// `num_devices` is null or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut IbvDevice {
    guard(ptr::null_mut(), || {
        let found = match rverbs::devices() {
            Ok(d) => d,
            Err(e) => {
                set_errno(errno_of(&e));
                return ptr::null_mut();
            }
        };
        let mut devices = lock(&DEVICES);
        let mut list: Vec<*mut IbvDevice> = Vec::with_capacity(found.len() + 1);
        for dev in found {
            let same = |r: &DeviceRec| {
                r.dev.name() == dev.name()
                    && r.dev.uverbs() == dev.uverbs()
                    && r.dev.node_guid() == dev.node_guid()
            };
            let i = match devices.iter().position(|r| same(r)) {
                Some(i) => i,
                None => {
                    devices.push(Box::new(DeviceRec {
                        c: device_struct(&dev),
                        dev,
                    }));
                    devices.len() - 1
                }
            };
            list.push(&mut devices[i].c);
        }
        list.push(ptr::null_mut());
        let bytes = list.len() * size_of::<*mut IbvDevice>();
        // SAFETY: malloc of a non-zero size; checked for null below.
        let arr = unsafe { libc::malloc(bytes) } as *mut *mut IbvDevice;
        if arr.is_null() {
            set_errno(libc::ENOMEM);
            return ptr::null_mut();
        }
        // SAFETY: `arr` holds `list.len()` pointers (just allocated), and
        // does not overlap `list`.
        unsafe { ptr::copy_nonoverlapping(list.as_ptr(), arr, list.len()) };
        if !num_devices.is_null() {
            // SAFETY: the caller passes null or a writable int.
            unsafe { *num_devices = c_int::try_from(list.len() - 1).unwrap_or(c_int::MAX) };
        }
        arr
    })
}

/// `ibv_free_device_list`: frees the array (the devices stay valid).
///
/// # Safety
/// `list` is null or was returned by `ibv_get_device_list` and not freed.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut IbvDevice) {
    // SAFETY: the caller passes an array from ibv_get_device_list, which
    // malloc allocated, or null (free(NULL) does nothing).
    unsafe { libc::free(list as *mut c_void) }
}

/// `ibv_get_device_name`: the device's name, or NULL (errno `EINVAL`) for a
/// pointer this library did not hand out.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut IbvDevice) -> *const c_char {
    guard(ptr::null(), || {
        let devices = lock(&DEVICES);
        match device_rec(&devices, device) {
            // The record is never freed, so the name outlives the guard.
            Some(r) => r.c.name.as_ptr(),
            None => {
                set_errno(libc::EINVAL);
                ptr::null()
            }
        }
    })
}

/// `ibv_get_device_guid`: the node GUID in network byte order (as
/// `__be64`), 0 for a pointer this library did not hand out.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut IbvDevice) -> u64 {
    guard(0, || {
        let devices = lock(&DEVICES);
        match device_rec(&devices, device) {
            Some(r) => u64::from_ne_bytes(r.dev.node_guid().0),
            None => {
                set_errno(libc::EINVAL);
                0
            }
        }
    })
}

/// `ibv_open_device`: a context on the device, or NULL with errno.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut IbvDevice) -> *mut IbvContext {
    guard(ptr::null_mut(), || {
        let opened = {
            let devices = lock(&DEVICES);
            let Some(r) = device_rec(&devices, device) else {
                set_errno(libc::EINVAL);
                return ptr::null_mut();
            };
            r.dev.open()
        };
        let ctx = match opened {
            Ok(c) => c,
            Err(e) => {
                set_errno(errno_of(&e));
                return ptr::null_mut();
            }
        };
        use std::os::fd::AsRawFd;
        // rverbs makes the async fd non-blocking; libibverbs' blocks (a
        // program's event thread sleeps in ibv_get_async_event).
        if let Err(e) = set_blocking(ctx.async_fd().as_raw_fd()) {
            set_errno(e);
            return ptr::null_mut();
        }
        let rec = Box::new(ContextRec {
            v: VerbsContext {
                query_port: Some(query_port_ex),
                before_alloc_parent_domain: [None; 13],
                alloc_parent_domain: Some(pd::alloc_parent_domain),
                dealloc_td: Some(pd::dealloc_td),
                alloc_td: Some(pd::alloc_td),
                before_create_cq_ex: [None; 8],
                create_cq_ex: Some(cq::create_cq_ex),
                priv_: ptr::null_mut(),
                query_device_ex: Some(query_device_ex),
                before_create_qp_ex: [None; 5],
                create_qp_ex: Some(qp::create_qp_ex),
                after_create_qp_ex: [None; 5],
                sz: size_of::<VerbsContext>(),
                context: IbvContext {
                    device,
                    ops: IbvContextOps {
                        before_alloc_mw: [None; 7],
                        alloc_mw: Some(mw::alloc_mw),
                        bind_mw: Some(mw::bind_mw),
                        dealloc_mw: Some(mw::dealloc_mw),
                        before_poll_cq: None,
                        poll_cq: Some(cq::poll_cq),
                        req_notify_cq: Some(cq::req_notify_cq),
                        before_post_srq_recv: [None; 7],
                        post_srq_recv: Some(qp::post_srq_recv),
                        before_post_send: [None; 4],
                        post_send: Some(qp::post_send),
                        post_recv: Some(qp::post_recv),
                        after_post_recv: [None; 5],
                    },
                    cmd_fd: ctx.cmd_fd().as_raw_fd(),
                    async_fd: ctx.async_fd().as_raw_fd(),
                    num_comp_vectors: c_int::try_from(ctx.num_comp_vectors()).unwrap_or(c_int::MAX),
                    mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                    abi_compat: VERBS_ABI_IS_EXTENDED,
                },
            },
            ctx,
        });
        let rec = Box::into_raw(rec);
        // SAFETY: `rec` was just allocated; the field's address is taken
        // without a reference (addr_of_mut), and stays valid while the
        // box lives.
        let c = unsafe { ptr::addr_of_mut!((*rec).v.context) };
        lock(&CONTEXTS).push((c as usize, rec as usize));
        c
    })
}

/// `ibv_close_device`: 0, or -1 with errno `EINVAL` for a context that is
/// not open.
///
/// # Safety
/// No other call on the context runs during or after this one.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut IbvContext) -> c_int {
    guard(-1, || {
        let mut open = lock(&CONTEXTS);
        let Some(i) = open.iter().position(|&(c, _)| c == context as usize) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        let (_, rec) = open.swap_remove(i);
        drop(open);
        event::forget_context(context);
        // SAFETY: `rec` came from Box::into_raw in ibv_open_device and was
        // still open (now removed, so it is freed once); the caller makes
        // no other call on it (the function's contract).
        drop(unsafe { Box::from_raw(rec as *mut ContextRec) });
        0
    })
}

/// The device attributes of `ctx`, as `struct ibv_device_attr`.
fn device_attr_of(ctx: &Context) -> Result<IbvDeviceAttr, c_int> {
    let a = ctx.query_device().map_err(|e| errno_of(&e))?;
    Ok(orig_attr(&a))
}

/// `struct ibv_device_attr` of an answer of the device query.
fn orig_attr(a: &rverbs::DeviceAttr) -> IbvDeviceAttr {
    let i = |v: u32| c_int::try_from(v).unwrap_or(c_int::MAX);
    let mut out = IbvDeviceAttr {
        fw_ver: [0; 64],
        node_guid: a.node_guid,
        sys_image_guid: a.sys_image_guid,
        max_mr_size: a.max_mr_size,
        page_size_cap: a.page_size_cap,
        vendor_id: a.vendor_id,
        vendor_part_id: a.vendor_part_id,
        hw_ver: a.hw_ver,
        max_qp: i(a.max_qp),
        max_qp_wr: i(a.max_qp_wr),
        device_cap_flags: a.device_cap_flags,
        max_sge: i(a.max_sge),
        max_sge_rd: i(a.max_sge_rd),
        max_cq: i(a.max_cq),
        max_cqe: i(a.max_cqe),
        max_mr: i(a.max_mr),
        max_pd: i(a.max_pd),
        max_qp_rd_atom: i(a.max_qp_rd_atom),
        max_ee_rd_atom: i(a.max_ee_rd_atom),
        max_res_rd_atom: i(a.max_res_rd_atom),
        max_qp_init_rd_atom: i(a.max_qp_init_rd_atom),
        max_ee_init_rd_atom: i(a.max_ee_init_rd_atom),
        atomic_cap: i(a.atomic_cap),
        max_ee: i(a.max_ee),
        max_rdd: i(a.max_rdd),
        max_mw: i(a.max_mw),
        max_raw_ipv6_qp: i(a.max_raw_ipv6_qp),
        max_raw_ethy_qp: i(a.max_raw_ethy_qp),
        max_mcast_grp: i(a.max_mcast_grp),
        max_mcast_qp_attach: i(a.max_mcast_qp_attach),
        max_total_mcast_qp_attach: i(a.max_total_mcast_qp_attach),
        max_ah: i(a.max_ah),
        max_fmr: i(a.max_fmr),
        max_map_per_fmr: i(a.max_map_per_fmr),
        max_srq: i(a.max_srq),
        max_srq_wr: i(a.max_srq_wr),
        max_srq_sge: i(a.max_srq_sge),
        max_pkeys: a.max_pkeys,
        local_ca_ack_delay: a.local_ca_ack_delay,
        phys_port_cnt: a.phys_port_cnt,
    };
    copy_str(&mut out.fw_ver, &a.fw_ver());
    out
}

/// The extended device attributes of `ctx`: the kernel's extended answer
/// where it gave one (zero past what it filled), the provider-only
/// capabilities (TSO, RSS hashing, packet pacing, PCI atomics) zero, and
/// the port count from sysfs.
fn device_attr_ex(ctx: &Context) -> Result<IbvDeviceAttrEx, c_int> {
    let a = ctx.query_device().map_err(|e| errno_of(&e))?;
    let orig_attr = orig_attr(&a);
    let ex = a.ex().copied().unwrap_or_default();
    let ports = std::fs::read_dir(ctx.device().sysfs_dir().join("ports"))
        .map(|d| d.count())
        .unwrap_or(0);
    Ok(IbvDeviceAttrEx {
        orig_attr,
        comp_mask: 0,
        odp_caps: OdpCaps {
            general_caps: ex.odp_caps.general_caps,
            rc_odp_caps: ex.odp_caps.rc_odp_caps,
            uc_odp_caps: ex.odp_caps.uc_odp_caps,
            ud_odp_caps: ex.odp_caps.ud_odp_caps,
        },
        completion_timestamp_mask: ex.timestamp_mask,
        hca_core_clock: ex.hca_core_clock,
        device_cap_flags_ex: ex.device_cap_flags_ex,
        tso_caps: TsoCaps::default(),
        rss_caps: RssCaps {
            supported_qpts: ex.rss_caps.supported_qpts,
            max_rwq_indirection_tables: ex.rss_caps.max_rwq_indirection_tables,
            max_rwq_indirection_table_size: ex.rss_caps.max_rwq_indirection_table_size,
            rx_hash_fields_mask: 0,
            rx_hash_function: 0,
        },
        max_wq_type_rq: ex.max_wq_type_rq,
        packet_pacing_caps: PacketPacingCaps::default(),
        raw_packet_caps: ex.raw_packet_caps,
        tm_caps: TmCaps {
            max_rndv_hdr_size: ex.tm_caps.max_rndv_hdr_size,
            max_num_tags: ex.tm_caps.max_num_tags,
            flags: ex.tm_caps.flags,
            max_ops: ex.tm_caps.max_ops,
            max_sge: ex.tm_caps.max_sge,
        },
        cq_mod_caps: CqModerationCaps {
            max_cq_count: ex.cq_moderation_caps.max_cq_moderation_count,
            max_cq_period: ex.cq_moderation_caps.max_cq_moderation_period,
        },
        max_dm_size: ex.max_dm_size,
        pci_atomic_caps: PciAtomicCaps::default(),
        xrc_odp_caps: ex.xrc_odp_caps,
        phys_port_cnt_ex: if ports > 0 {
            u32::try_from(ports).unwrap_or(u32::MAX)
        } else {
            u32::from(orig_attr.phys_port_cnt)
        },
    })
}

/// The attributes of `port`, as `struct ibv_port_attr`.
fn port_attr_of(ctx: &Context, port: u8) -> Result<IbvPortAttr, c_int> {
    let p = ctx.query_port(port).map_err(|e| errno_of(&e))?;
    Ok(IbvPortAttr {
        compat: IbvPortAttrCompat {
            state: c_int::from(p.state),
            max_mtu: c_int::from(p.max_mtu),
            active_mtu: c_int::from(p.active_mtu),
            gid_tbl_len: c_int::try_from(p.gid_tbl_len).unwrap_or(c_int::MAX),
            port_cap_flags: p.port_cap_flags,
            max_msg_sz: p.max_msg_sz,
            bad_pkey_cntr: p.bad_pkey_cntr,
            qkey_viol_cntr: p.qkey_viol_cntr,
            pkey_tbl_len: p.pkey_tbl_len,
            lid: p.lid,
            sm_lid: p.sm_lid,
            lmc: p.lmc,
            max_vl_num: p.max_vl_num,
            sm_sl: p.sm_sl,
            subnet_timeout: p.subnet_timeout,
            init_type_reply: p.init_type_reply,
            active_width: p.active_width,
            active_speed: p.active_speed,
            phys_state: p.phys_state,
            link_layer: p.link_layer,
            flags: p.flags,
        },
        // 0 where the kernel lacks the ioctl, as libibverbs leaves it.
        port_cap_flags2: p.port_cap_flags2(),
    })
}

/// Writes `value` over the first `len` bytes at `dst` (all of it if `len`
/// is larger, zeroing the rest of `len`).
///
/// # Safety
/// `dst` points to `len` writable bytes.
unsafe fn write_sized<T: Copy>(dst: *mut u8, len: usize, value: &T) {
    let n = len.min(size_of::<T>());
    // SAFETY: the caller passes `len` writable bytes at `dst`; `value` is
    // a live T of size_of::<T>() >= n bytes; they do not overlap (value is
    // ours). Padding bytes are copied as bytes, never read as values.
    unsafe {
        ptr::write_bytes(dst, 0, len);
        ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), dst, n);
    }
}

/// A value of `T` with every byte zero, padding included, so that what
/// [`write_sized`] copies holds no stale bytes.
fn zeroed<T: Copy>(v: T) -> T {
    let mut out = std::mem::MaybeUninit::<T>::zeroed();
    // SAFETY: `out` is valid for a write of T; writing a T over the
    // zeroed bytes keeps padding zero in practice, and `v` is a valid T.
    unsafe {
        out.as_mut_ptr().write(v);
        out.assume_init()
    }
}

/// `ibv_query_device`: 0, or the errno (as libibverbs returns it).
///
/// # Safety
/// `device_attr` points to a writable `struct ibv_device_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut IbvContext,
    device_attr: *mut IbvDeviceAttr,
) -> c_int {
    errno_verb(context, !device_attr.is_null(), |ctx| {
        let a = zeroed(device_attr_of(ctx)?);
        // SAFETY: the caller passes a writable ibv_device_attr (non-null).
        unsafe { write_sized(device_attr.cast(), size_of::<IbvDeviceAttr>(), &a) };
        Ok(())
    })
}

/// `verbs_context.query_device_ex`, which `verbs.h`'s inline
/// `ibv_query_device_ex` calls: fills `attr_size` bytes of `attr`; 0, or
/// the errno (`EINVAL` for a non-zero input `comp_mask` or an `attr_size`
/// below `struct ibv_device_attr`).
///
/// # Safety
/// `input` is null or points to a `struct ibv_query_device_ex_input`;
/// `attr` points to `attr_size` writable bytes.
unsafe extern "C" fn query_device_ex(
    context: *mut IbvContext,
    input: *const QueryDeviceExInput,
    attr: *mut IbvDeviceAttrEx,
    attr_size: usize,
) -> c_int {
    // SAFETY: the caller passes null or a readable input struct.
    let input_ok = input.is_null() || unsafe { (*input).comp_mask } == 0;
    let args_ok = input_ok && !attr.is_null() && attr_size >= size_of::<IbvDeviceAttr>();
    errno_verb(context, args_ok, |ctx| {
        let a = zeroed(device_attr_ex(ctx)?);
        // SAFETY: the caller passes `attr_size` writable bytes (non-null).
        unsafe { write_sized(attr.cast(), attr_size, &a) };
        Ok(())
    })
}

/// `ibv_query_port` (the exported function `verbs.h`'s inline wrapper
/// calls for a legacy context): fills the fields up to `flags`; 0, or the
/// errno.
///
/// # Safety
/// `port_attr` points to a writable struct of at least
/// `size_of::<IbvPortAttrCompat>()` bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut IbvContext,
    port_num: u8,
    port_attr: *mut IbvPortAttrCompat,
) -> c_int {
    errno_verb(context, !port_attr.is_null(), |ctx| {
        let p = zeroed(port_attr_of(ctx, port_num)?.compat);
        let len = size_of::<IbvPortAttrCompat>();
        // SAFETY: the caller passes a writable struct this large (non-null).
        unsafe { write_sized(port_attr.cast(), len, &p) };
        Ok(())
    })
}

/// `verbs_context.query_port`, which `verbs.h`'s inline `ibv_query_port`
/// calls for an extended context: fills `port_attr_len` bytes; 0, or the
/// errno.
///
/// # Safety
/// `port_attr` points to `port_attr_len` writable bytes.
unsafe extern "C" fn query_port_ex(
    context: *mut IbvContext,
    port_num: u8,
    port_attr: *mut IbvPortAttr,
    port_attr_len: usize,
) -> c_int {
    errno_verb(context, !port_attr.is_null(), |ctx| {
        let p = zeroed(port_attr_of(ctx, port_num)?);
        // SAFETY: the caller passes `port_attr_len` writable bytes (non-null).
        unsafe { write_sized(port_attr.cast(), port_attr_len, &p) };
        Ok(())
    })
}

/// What a GID slot holds, libibverbs' way: a missing entry in a slot that
/// exists is the zero GID of type IB/RoCE v1; a slot past the table or a
/// port the device lacks is an error.
fn gid_slot(ctx: &Context, port: u8, index: c_int) -> Result<Option<rverbs::GidEntry>, c_int> {
    let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
    let len = ctx.query_port(port).map_err(|e| errno_of(&e))?.gid_tbl_len;
    if index >= len {
        return Err(libc::EINVAL);
    }
    match ctx.query_gid_entry(port, index) {
        Ok(e) => Ok(Some(e)),
        Err(e) if e.invalid_kind() == Some(rverbs::InvalidKind::NotPresent) => Ok(None),
        Err(e) => Err(errno_of(&e)),
    }
}

/// `ibv_query_gid`: the GID at `index` of `port` (zero for an empty
/// slot); 0, or -1 with errno.
///
/// # Safety
/// `gid` points to 16 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut IbvContext,
    port_num: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    minus_one_verb(context, !gid.is_null(), |ctx| {
        let raw = gid_slot(ctx, port_num, index)?.map_or([0; 16], |e| e.gid.0);
        // SAFETY: the caller passes 16 writable bytes (non-null).
        unsafe { ptr::write_unaligned(gid, raw) };
        Ok(0)
    })
}

/// `ibv_query_gid_type` (rdma-core's private symbol that `ibv_devinfo`
/// imports): 0 (IB or RoCE v1, and empty slots) or 1 (RoCE v2) into
/// `type_`; 0, or -1 with errno.
///
/// # Safety
/// `type_` points to a writable `int`-sized enum.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut IbvContext,
    port_num: u8,
    index: u32,
    type_: *mut c_int,
) -> c_int {
    minus_one_verb(context, !type_.is_null(), |ctx| {
        let index = c_int::try_from(index).unwrap_or(c_int::MAX);
        let e = gid_slot(ctx, port_num, index)?;
        let v2 = e.is_some_and(|e| e.gid_type == rverbs::GidType::RoceV2);
        // SAFETY: the caller passes a writable int (non-null).
        unsafe { ptr::write_unaligned(type_, c_int::from(v2)) };
        Ok(0)
    })
}

/// `ibv_query_pkey`: the P_Key at `index` of `port` in network byte
/// order; 0, or -1 with errno.
///
/// # Safety
/// `pkey` points to a writable `__be16`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut IbvContext,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    minus_one_verb(context, !pkey.is_null(), |ctx| {
        let v = crate::sysfs::pkey(&ctx.device().sysfs_dir(), port_num, index)?;
        // SAFETY: the caller passes a writable __be16 (non-null).
        unsafe { ptr::write_unaligned(pkey, v.to_be()) };
        Ok(0)
    })
}

/// `ibv_get_pkey_index`: the index of `pkey` (network order) in `port`'s
/// table, or -1 with errno if it is not there.
///
/// # Safety
/// None beyond passing any pointer: it is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut IbvContext,
    port_num: u8,
    pkey: u16,
) -> c_int {
    minus_one_verb(context, true, |ctx| {
        let dir = ctx.device().sysfs_dir();
        let mut i: c_int = 0;
        loop {
            if crate::sysfs::pkey(&dir, port_num, i)?.to_be() == pkey {
                return Ok(i);
            }
            i = i.checked_add(1).ok_or(libc::ENOENT)?;
        }
    })
}

/// `ibv_read_sysfs_file`: reads `dir/file` into `buf` (`size` bytes), the
/// trailing newline replaced by a NUL; the length, or -1 with errno.
///
/// # Safety
/// `dir` and `file` are NUL-terminated strings; `buf` has `size` writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    guard(-1, || {
        if dir.is_null() || file.is_null() || (buf.is_null() && size > 0) {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: the caller passes NUL-terminated strings (non-null).
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        use std::os::unix::ffi::OsStrExt;
        let path = Path::new(std::ffi::OsStr::from_bytes(d.to_bytes()))
            .join(std::ffi::OsStr::from_bytes(f.to_bytes()));
        let out: &mut [u8] = if size == 0 {
            &mut []
        } else {
            // SAFETY: the caller passes `size` writable bytes at `buf`
            // (non-null), which nothing else accesses during the call.
            unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, size) }
        };
        match crate::sysfs::read_into(&path, out) {
            Ok(n) => c_int::try_from(n).unwrap_or(c_int::MAX),
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}

/// `struct ibv_gid_entry` (the kernel's `struct ib_uverbs_gid_entry`;
/// 8-aligned by its `union ibv_gid`).
#[repr(C, align(8))]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvGidEntry {
    pub gid: [u8; 16],
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`: 0 IB, 1 RoCE v1, 2 RoCE v2.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

fn gid_entry_c(e: &rverbs::GidEntry) -> IbvGidEntry {
    IbvGidEntry {
        gid: e.gid.0,
        gid_index: e.index,
        port_num: e.port,
        gid_type: match e.gid_type {
            rverbs::GidType::Ib => 0,
            rverbs::GidType::RoceV1 => 1,
            rverbs::GidType::RoceV2 => 2,
            rverbs::GidType::Other(v) => v,
        },
        ndev_ifindex: e.netdev_ifindex,
    }
}

/// `_ibv_query_gid_ex` (behind `verbs.h`'s inline `ibv_query_gid_ex`):
/// the entry at `gid_index` of `port_num` into `entry_size` bytes; 0, or
/// the errno (`ENODATA` for an empty slot, `EINVAL` for flags, a short
/// entry or a slot past the table).
///
/// # Safety
/// `entry` points to `entry_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut IbvContext,
    port_num: u32,
    gid_index: u32,
    entry: *mut IbvGidEntry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    let args_ok = flags == 0 && !entry.is_null() && entry_size >= size_of::<IbvGidEntry>();
    errno_verb(context, args_ok, |ctx| {
        let port = u8::try_from(port_num).map_err(|_| libc::EINVAL)?;
        let index = c_int::try_from(gid_index).map_err(|_| libc::EINVAL)?;
        let e = gid_slot(ctx, port, index)?.ok_or(libc::ENODATA)?;
        // SAFETY: the caller passes `entry_size` writable bytes (non-null).
        unsafe { write_sized(entry.cast(), entry_size, &gid_entry_c(&e)) };
        Ok(())
    })
}

/// `_ibv_query_gid_table` (behind `ibv_query_gid_table`): every valid GID
/// of every port into `entries` (`max_entries` of `entry_size` bytes);
/// the count, or a negative errno (`-EINVAL` if they do not fit).
///
/// # Safety
/// `entries` points to `max_entries * entry_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut IbvContext,
    entries: *mut IbvGidEntry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    guard(-(libc::EIO as isize), || {
        let einval = -(libc::EINVAL as isize);
        let Some(rec) = context_rec(context) else {
            return einval;
        };
        if flags != 0 || entries.is_null() || entry_size < size_of::<IbvGidEntry>() {
            return einval;
        }
        let table = match rec.ctx.query_gid_table() {
            Ok(t) => t,
            Err(e) => return -(errno_of(&e) as isize),
        };
        if table.len() > max_entries || max_entries.checked_mul(entry_size).is_none() {
            return einval;
        }
        for (i, e) in table.iter().enumerate() {
            // SAFETY: i < table.len() <= max_entries, so entry i lies
            // within the caller's max_entries * entry_size bytes (the
            // product does not overflow, checked above).
            unsafe {
                let dst = entries.cast::<u8>().add(i * entry_size);
                write_sized(dst, entry_size, &gid_entry_c(e));
            }
        }
        isize::try_from(table.len()).unwrap_or(isize::MAX)
    })
}

/// `ibv_get_device_index`: the kernel's index of the device; -1 (as
/// libibverbs answers when it does not know it): not known here yet.
#[no_mangle]
pub extern "C" fn ibv_get_device_index(device: *mut IbvDevice) -> c_int {
    let _ = device;
    -1
}

/// `ibv_get_sysfs_path`: the sysfs root (`$SYSFS_PATH` when set, as in
/// libibverbs, else `/sys`), a string that lives as long as the process.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    guard(c"/sys".as_ptr(), || {
        PATH.get_or_init(|| {
            std::env::var("SYSFS_PATH")
                .ok()
                .and_then(|p| CString::new(p.trim_end_matches('/')).ok())
                .filter(|p| !p.as_bytes().is_empty())
                .unwrap_or_else(|| c"/sys".to_owned())
        })
        .as_ptr()
    })
}

/// `ibv_fork_init`: 0 once registered memory is protected across
/// `fork()` (by the kernel, or by `MADV_DONTFORK`), else the errno.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    guard(libc::EIO, || match rverbs::fork_safety() {
        rverbs::ForkSafety::KernelCopiesOnFork => 0,
        _ => match rverbs::fork::enable_dontfork() {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        },
    })
}

/// `ibv_is_fork_initialized`: 2 (`IBV_FORK_UNNEEDED`) when the kernel
/// copies pinned pages on fork, 1 (`IBV_FORK_ENABLED`) when registrations
/// are marked `MADV_DONTFORK`, 0 (`IBV_FORK_DISABLED`) otherwise.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    guard(0, || match rverbs::fork_safety() {
        rverbs::ForkSafety::KernelCopiesOnFork => 2,
        rverbs::ForkSafety::MadviseDontfork => 1,
        _ => 0,
    })
}

/// `madvise(advice)` over the pages spanning `[base, base + size)`.
fn advise_range(base: *mut c_void, size: usize, advice: c_int) -> c_int {
    if rverbs::fork_safety() == rverbs::ForkSafety::KernelCopiesOnFork || size == 0 {
        return 0;
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|p| p.is_power_of_two())
        .unwrap_or(4096);
    let start = (base as usize) & !(page - 1);
    let Some(end) = (base as usize)
        .checked_add(size)
        .and_then(|e| e.checked_add(page - 1))
        .map(|e| e & !(page - 1))
    else {
        return libc::EINVAL;
    };
    // SAFETY: MADV_DONTFORK / MADV_DOFORK change only what fork() copies
    // for a child, never this process's memory or mappings; the kernel
    // checks the range (ENOMEM for unmapped pages).
    let r = unsafe { libc::madvise(start as *mut c_void, end - start, advice) };
    if r == 0 {
        0
    } else {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    }
}

/// `ibv_dontfork_range`: marks the pages of the range `MADV_DONTFORK`
/// (nothing to do where the kernel copies pinned pages on fork); 0, or
/// the errno.
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
    guard(libc::EIO, || advise_range(base, size, libc::MADV_DONTFORK))
}

/// `ibv_dofork_range`: undoes [`ibv_dontfork_range`]; 0, or the errno.
#[no_mangle]
pub extern "C" fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
    guard(libc::EIO, || advise_range(base, size, libc::MADV_DOFORK))
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

/// The `ibv_wc_status_str` strings, NUL-terminated, built once.
fn wc_status_strings() -> &'static [CString] {
    static S: OnceLock<Vec<CString>> = OnceLock::new();
    S.get_or_init(|| {
        (0..=22u32)
            .map(|s| CString::new(WcStatus(s).as_str()).unwrap_or_default())
            .collect()
    })
}

/// `ibv_wc_status_str`: a static description of a completion status
/// ("unknown" for a value libibverbs does not name).
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    guard(c"unknown".as_ptr(), || {
        let all = wc_status_strings();
        let last = all.len() - 1;
        let i = usize::try_from(status).map_or(last, |i| i.min(last));
        all[i].as_ptr()
    })
}

/// The string at index `v` of `table`, or "unknown".
fn str_at(table: &'static [&'static CStr], v: c_int) -> *const c_char {
    usize::try_from(v)
        .ok()
        .and_then(|i| table.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

/// `ibv_event_type_str`: a static description of an async event type
/// ("unknown" for a value libibverbs does not name).
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"CQ error (overrun or failure)",
        c"QP fatal error",
        c"QP invalid request error",
        c"QP access violation",
        c"communication established",
        c"send queue drained",
        c"path migration done",
        c"path migration failed",
        c"device fatal error",
        c"port became active",
        c"port error",
        c"LID changed",
        c"P_Key table changed",
        c"subnet manager changed",
        c"SRQ error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client re-registration requested",
        c"GID table changed",
        c"WQ fatal error",
    ];
    str_at(T, event)
}

/// `ibv_node_type_str`: a static description of a node type.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    // IBV_NODE_CA is 1; -1 (IBV_NODE_UNKNOWN) and 0 are not named.
    const T: &[&CStr] = &[
        c"unknown",
        c"InfiniBand channel adapter (CA)",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP RNIC",
        c"usNIC",
        c"usNIC over UDP",
        c"unspecified",
    ];
    str_at(T, node_type)
}

/// `ibv_port_state_str`: a static description of a port state.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"no change (NOP)",
        c"down",
        c"initializing",
        c"armed",
        c"active",
        c"active, deferred",
    ];
    str_at(T, port_state)
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
