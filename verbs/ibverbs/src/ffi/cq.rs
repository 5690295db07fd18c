//! Completion channels and CQs: `ibv_create_comp_channel`,
//! `ibv_destroy_comp_channel`, `ibv_create_cq`, `ibv_destroy_cq`,
//! `ibv_get_cq_event`, `ibv_ack_cq_events`, `ibv_resize_cq`, the context
//! operations behind `verbs.h`'s inline `ibv_poll_cq` and
//! `ibv_req_notify_cq`, and extended CQs (`ibv_create_cq_ex` and the
//! `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` / `ibv_wc_read_*`
//! functions in `struct ibv_cq_ex`).
//!
//! Every CQ is laid out as a `struct ibv_cq_ex` (whose head is a `struct
//! ibv_cq`), so one record serves both kinds.
//!
//! A CQ's ring sits behind a mutex: libibverbs lets several threads poll
//! one CQ, and `rverbs::Cq::poll` takes `&mut`. Uncontended, that is one
//! atomic exchange per poll and no system call. Completions are written
//! straight into the program's `struct ibv_wc` array (the kernel's
//! `ib_uverbs_wc` has the same layout), then only the one flag whose bit
//! differs between the kernel and libibverbs is moved.

use super::lock::Lock;
use super::pd::{pd_rec, IbvPd, PdRec};
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use rverbs::{CompChannel, Cq, CqFlags, CqInitAttr, EventId, Wc};

use super::{
    context_rec, errno_of, guard, hot, next_event, null_with, set_blocking, set_errno, IbvContext,
};

/// `ibv_context_ops.poll_cq`.
pub type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut Wc) -> c_int;
/// `ibv_context_ops.req_notify_cq`.
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int;

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct IbvCompChannel {
    /// The context.
    pub context: *mut IbvContext,
    /// The fd that becomes readable when an armed CQ fires.
    pub fd: c_int,
    /// CQs created on the channel and not destroyed.
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct IbvCq {
    /// The context.
    pub context: *mut IbvContext,
    /// Its completion channel, or NULL.
    pub channel: *mut IbvCompChannel,
    /// The program's pointer, given back by `ibv_get_cq_event`.
    pub cq_context: *mut c_void,
    /// The kernel's handle.
    pub handle: u32,
    /// Entries the CQ holds.
    pub cqe: c_int,
    /// For the program's use (initialised).
    pub mutex: libc::pthread_mutex_t,
    /// For the program's use (initialised).
    pub cond: libc::pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Asynchronous events acknowledged.
    pub async_events_completed: u32,
}

/// `struct ibv_cq_ex`: a `struct ibv_cq`, then the extended polling
/// interface.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvCqEx {
    /// The `struct ibv_cq` fields, in their places.
    pub cq: IbvCq,
    pub comp_mask: u32,
    /// The current completion's `enum ibv_wc_status`.
    pub status: c_int,
    /// The current completion's `wr_id`.
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut IbvCqEx, *mut c_void) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(*mut IbvCqEx) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(*mut IbvCqEx)>,
    pub read_opcode: Option<unsafe extern "C" fn(*mut IbvCqEx) -> c_int>,
    pub read_vendor_err: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_byte_len: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_imm_data: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_qp_num: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_src_qp: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_wc_flags: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_slid: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u32>,
    pub read_sl: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u8>,
    pub read_dlid_path_bits: Option<unsafe extern "C" fn(*mut IbvCqEx) -> u8>,
    /// `read_completion_ts`, `read_cvlan`, `read_flow_tag`,
    /// `read_tm_info`, `read_completion_wallclock_ns`: null (creation
    /// refuses the `wc_flags` that would need them).
    pub read_unsupported: [super::Slot; 5],
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvCqInitAttrEx {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut IbvCompChannel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut c_void,
}

/// `verbs_context.create_cq_ex`.
pub type CreateCqExFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvCqInitAttrEx) -> *mut IbvCqEx;

/// A channel handed out.
#[repr(C)]
struct ChannelRec {
    c: IbvCompChannel,
    chan: CompChannel,
    /// Its CQs by event id: (id, address of the CqRec).
    cqs: Lock<Vec<(EventId, usize)>>,
    /// CQs on it not yet destroyed.
    users: AtomicUsize,
}

/// A CQ handed out.
#[repr(C)]
pub(crate) struct CqRec {
    /// Written through the program's pointer too (`cqe`, the event
    /// counters, the extended interface's current `status` and `wr_id`,
    /// whatever the program keeps in it): never behind a Rust reference.
    c: UnsafeCell<IbvCqEx>,
    /// Its channel (a copy of `c.channel`, which this library never changes).
    channel: *mut IbvCompChannel,
    /// The parent domain it was created on (`IBV_CQ_INIT_ATTR_MASK_PD`),
    /// which counts it, or NULL.
    parent_domain: *mut IbvPd,
    /// Unlocked (`Lock::unlocked`) for a CQ of a thread domain or created
    /// single-threaded: the program's promise, see `ffi::lock`.
    pub(crate) cq: Lock<Cq>,
    /// QPs (and SRQs) using it and not destroyed.
    users: AtomicUsize,
    /// Completion events `ibv_get_cq_event` handed out for it (changed
    /// under its channel's list lock), which `ibv_destroy_cq` waits to see
    /// acknowledged in `comp_events_completed`.
    comp_events_reported: AtomicU32,
    /// Held from a successful `start_poll` to `end_poll`: the extended
    /// interface's bracket, in which `current` is the completion read.
    polling: AtomicBool,
    /// The completion `start_poll`/`next_poll` read last (guarded by
    /// `polling`).
    current: UnsafeCell<Wc>,
    /// The sender's GID of `current`, on a CQ created with source GIDs
    /// (guarded by `polling`).
    current_sgid: UnsafeCell<Option<[u8; 16]>>,
    /// Created with source GIDs: whether a poll reads `current_sgid`.
    source_gid: bool,
    /// The `struct efadv_cq` `efadv_cq_from_ibv_cq_ex` hands out (EFA),
    /// which the program may read (and, being C, write): never behind a
    /// Rust reference. Its function reads `current_sgid`.
    pub(crate) efadv: UnsafeCell<super::efadv::EfadvCq>,
}

impl CqRec {
    /// Counts one more QP using the CQ.
    pub(crate) fn hold(&self) {
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one QP using the CQ destroyed.
    pub(crate) fn release(&self) {
        self.users.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The record behind a CQ pointer.
///
/// # Safety
/// `cq` is null or a CQ of this library not destroyed while the
/// reference lives (libibverbs' contract).
pub(crate) unsafe fn cq_rec<'a>(cq: *mut IbvCq) -> Option<&'a CqRec> {
    // SAFETY: a non-null `cq` is the first field of a live CqRec.
    unsafe { cq.cast::<CqRec>().as_ref() }
}

/// The record behind a channel pointer.
///
/// # Safety
/// As [`cq_rec`], for a completion channel.
unsafe fn channel_rec<'a>(channel: *mut IbvCompChannel) -> Option<&'a ChannelRec> {
    // SAFETY: a non-null `channel` is the first field of a live ChannelRec.
    unsafe { channel.cast::<ChannelRec>().as_ref() }
}

/// `ibv_create_comp_channel`: a channel whose fd blocks in `read` (as
/// libibverbs' does; a program may make it non-blocking), or NULL with
/// errno.
///
/// # Safety
/// None beyond passing any pointer: `context` is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(context: *mut IbvContext) -> *mut IbvCompChannel {
    guard(ptr::null_mut(), || {
        let Some(rec) = context_rec(context) else {
            return null_with(libc::EINVAL);
        };
        let chan = match rec.ctx.create_comp_channel() {
            Ok(c) => c,
            Err(e) => return null_with(errno_of(&e)),
        };
        let fd = chan.as_raw_fd();
        // rverbs makes the fd non-blocking; libibverbs' blocks.
        if let Err(e) = set_blocking(fd) {
            return null_with(e);
        }
        let rec = Box::new(ChannelRec {
            c: IbvCompChannel {
                context,
                fd,
                refcnt: 0,
            },
            chan,
            cqs: Lock::new(Vec::new()),
            users: AtomicUsize::new(0),
        });
        Box::into_raw(rec).cast::<IbvCompChannel>()
    })
}

/// `ibv_destroy_comp_channel`: 0, `EBUSY` while a CQ uses it.
///
/// # Safety
/// `channel` is NULL or a channel of this library not yet destroyed; no
/// other call uses it during or after a successful call.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut IbvCompChannel) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { channel_rec(channel) }) else {
            return libc::EINVAL;
        };
        if rec.users.load(Ordering::Relaxed) != 0 {
            return libc::EBUSY;
        }
        // SAFETY: from Box::into_raw in ibv_create_comp_channel; no CQ
        // refers to it and the caller makes no other call on it.
        drop(unsafe { Box::from_raw(channel.cast::<ChannelRec>()) });
        0
    })
}

/// `ibv_create_cq`: a CQ with room for at least `cqe` completions, on
/// `channel` (or none) and completion vector `comp_vector`; NULL with
/// errno on failure.
///
/// # Safety
/// `channel` is NULL or a live channel of this library on `context`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    comp_vector: c_int,
) -> *mut IbvCq {
    guard(ptr::null_mut(), || {
        let Some(ctx) = context_rec(context) else {
            return null_with(libc::EINVAL);
        };
        let (Ok(cqe), Ok(comp_vector)) = (u32::try_from(cqe), u32::try_from(comp_vector)) else {
            return null_with(libc::EINVAL);
        };
        // SAFETY: forwarded from this function's contract.
        let chan = unsafe { channel_rec(channel) };
        let cq = match ctx
            .ctx
            .create_cq_with(cqe, chan.map(|c| &c.chan), comp_vector)
        {
            Ok(cq) => cq,
            Err(e) => return null_with(errno_of(&e)),
        };
        new_cq(context, cq, cq_context, channel, chan, None).cast::<IbvCq>()
    })
}

/// How a CQ is made: on a parent domain (which counts it), whether the
/// program promised single-threaded use, and whether its completions
/// carry the sender's GID (EFA).
struct CqOn<'a> {
    /// The parent domain's pointer and record.
    parent: Option<(*mut IbvPd, &'a PdRec)>,
    single_threaded: bool,
    source_gid: bool,
}

/// The record of a new CQ `cq` (on `channel`, whose record is `chan`),
/// laid out as a `struct ibv_cq_ex`; `on` as [`CqOn`] says (`None`: a
/// plain, locked CQ).
fn new_cq(
    context: *mut IbvContext,
    cq: Cq,
    cq_context: *mut c_void,
    channel: *mut IbvCompChannel,
    chan: Option<&ChannelRec>,
    on: Option<CqOn<'_>>,
) -> *mut CqRec {
    let id = cq.event_id();
    let (handle, cqe) = (cq.handle(), cq.cqe());
    let single = on.as_ref().is_some_and(|o| o.single_threaded);
    let source_gid = on.as_ref().is_some_and(|o| o.source_gid);
    let parent = on.and_then(|o| o.parent);
    let cq = if single {
        // SAFETY: the program created this CQ single-threaded (on a thread
        // domain, or with IBV_CREATE_CQ_ATTR_SINGLE_THREADED): libibverbs'
        // contract for such a CQ is that it is not used from several
        // threads at once, which this library takes as "no two calls that
        // name it run at once" (see ffi::lock); every guard of this lock
        // is taken inside such a call and dropped before it returns.
        unsafe { Lock::unlocked(cq) }
    } else {
        Lock::new(cq)
    };
    if let Some((_, p)) = parent {
        p.hold();
    }
    let rec = Box::new(CqRec {
        channel,
        parent_domain: parent.map_or(ptr::null_mut(), |(p, _)| p),
        c: UnsafeCell::new(IbvCqEx {
            cq: IbvCq {
                context,
                channel,
                cq_context,
                handle,
                cqe: c_int::try_from(cqe).unwrap_or(c_int::MAX),
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                comp_events_completed: 0,
                async_events_completed: 0,
            },
            comp_mask: 0,
            status: 0,
            wr_id: 0,
            start_poll: Some(start_poll),
            next_poll: Some(next_poll),
            end_poll: Some(end_poll),
            read_opcode: Some(read_opcode),
            read_vendor_err: Some(read_vendor_err),
            read_byte_len: Some(read_byte_len),
            read_imm_data: Some(read_imm_data),
            read_qp_num: Some(read_qp_num),
            read_src_qp: Some(read_src_qp),
            read_wc_flags: Some(read_wc_flags),
            read_slid: Some(read_slid),
            read_sl: Some(read_sl),
            read_dlid_path_bits: Some(read_dlid_path_bits),
            read_unsupported: [None; 5],
        }),
        cq,
        users: AtomicUsize::new(0),
        comp_events_reported: AtomicU32::new(0),
        polling: AtomicBool::new(false),
        current: UnsafeCell::new(Wc::default()),
        current_sgid: UnsafeCell::new(None),
        source_gid,
        efadv: UnsafeCell::new(super::efadv::EfadvCq::new(source_gid)),
    });
    let rec = Box::into_raw(rec);
    super::event::track(context, id, rec as usize);
    if let Some(chan) = chan {
        chan.users.fetch_add(1, Ordering::Relaxed);
        chan.cqs.lock().push((id, rec as usize));
    }
    rec
}

/// `IBV_WC_STANDARD_FLAGS`: the `wc_flags` of an extended CQ this library
/// can report (byte length, immediate, QP number, source QP, SLID, SL,
/// DLID path bits).
const WC_STANDARD_FLAGS: u64 = 0x7f;
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`.
const CQ_INIT_ATTR_MASK_FLAGS: u32 = 1 << 0;
/// `IBV_CQ_INIT_ATTR_MASK_PD`.
const CQ_INIT_ATTR_MASK_PD: u32 = 1 << 1;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`: the program's promise that the
/// CQ is used from one thread, which spares its lock (see `ffi::lock`).
const CREATE_CQ_ATTR_SINGLE_THREADED: u32 = 1 << 0;
/// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`.
const CREATE_CQ_ATTR_IGNORE_OVERRUN: u32 = 1 << 1;

/// `verbs_context.create_cq_ex`, behind `verbs.h`'s inline
/// `ibv_create_cq_ex`: a CQ polled with `ibv_start_poll` and friends (or
/// `ibv_poll_cq` on `ibv_cq_ex_to_cq` of it), or NULL with errno:
/// `EOPNOTSUPP` for `wc_flags` beyond the standard ones (no completion
/// timestamps, VLANs, flow tags or tag matching). With
/// `IBV_CQ_INIT_ATTR_MASK_PD` the CQ is made on the parent domain
/// `parent_domain` (`EINVAL` for a plain PD or NULL, as libmlx5 answers):
/// its ring comes from the parent domain's allocators (mlx5), it counts
/// on the parent domain, and with the parent domain's thread domain it
/// takes no lock, as with `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`.
///
/// # Safety
/// `attr` points to a readable `struct ibv_cq_init_attr_ex` whose channel
/// is NULL or a live channel of this library, and whose `parent_domain`,
/// with `IBV_CQ_INIT_ATTR_MASK_PD`, is NULL or a live PD of this library.
/// A CQ made single-threaded is used by one call at a time (see
/// `ffi::lock`).
pub unsafe extern "C" fn create_cq_ex(
    context: *mut IbvContext,
    attr: *mut IbvCqInitAttrEx,
) -> *mut IbvCqEx {
    // SAFETY: forwarded from this function's contract.
    unsafe { create_cq_ex_of(context, attr, false) }
}

/// [`create_cq_ex`], with completions that carry the sender's GID when
/// `source_gid` (`efadv_create_cq` with `EFADV_WC_EX_WITH_SGID`: not on a
/// parent domain, and `EOPNOTSUPP` where the device lacks it).
///
/// # Safety
/// As [`create_cq_ex`].
pub(crate) unsafe fn create_cq_ex_of(
    context: *mut IbvContext,
    attr: *mut IbvCqInitAttrEx,
    source_gid: bool,
) -> *mut IbvCqEx {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let (Some(ctx), Some(a)) = (context_rec(context), unsafe { attr.as_ref() }) else {
            return null_with(libc::EINVAL);
        };
        if a.comp_mask & !(CQ_INIT_ATTR_MASK_FLAGS | CQ_INIT_ATTR_MASK_PD) != 0 {
            return null_with(libc::EINVAL);
        }
        if a.wc_flags & !WC_STANDARD_FLAGS != 0 {
            return null_with(libc::EOPNOTSUPP);
        }
        let parent = if a.comp_mask & CQ_INIT_ATTR_MASK_PD != 0 {
            let pd = a.parent_domain.cast::<IbvPd>();
            // SAFETY: NULL or a live PD of this library (the contract).
            match unsafe { pd_rec(pd) } {
                Some(p) if p.is_parent_domain() && p.c_context() == context => Some((pd, p)),
                _ => return null_with(libc::EINVAL),
            }
        } else {
            None
        };
        let flags = if a.comp_mask & CQ_INIT_ATTR_MASK_FLAGS != 0 {
            a.flags
        } else {
            0
        };
        if flags & !(CREATE_CQ_ATTR_SINGLE_THREADED | CREATE_CQ_ATTR_IGNORE_OVERRUN) != 0 {
            return null_with(libc::EOPNOTSUPP);
        }
        let mut cq_flags = CqFlags::empty();
        if flags & CREATE_CQ_ATTR_IGNORE_OVERRUN != 0 {
            cq_flags |= CqFlags::IGNORE_OVERRUN;
        }
        // SAFETY: forwarded from this function's contract.
        let chan = unsafe { channel_rec(a.channel) };
        let init = CqInitAttr {
            cqe: a.cqe,
            channel: chan.map(|c| &c.chan),
            comp_vector: a.comp_vector,
            flags: cq_flags,
        };
        let made = match parent {
            Some(_) if source_gid => return null_with(libc::EOPNOTSUPP),
            Some((_, p)) => p.pd.create_cq_ex(&init),
            None if source_gid => ctx.ctx.create_cq_with_source_gid(&init),
            None => ctx.ctx.create_cq_ex(&init),
        };
        let on = CqOn {
            single_threaded: flags & CREATE_CQ_ATTR_SINGLE_THREADED != 0
                || parent.is_some_and(|(_, p)| p.single_threaded()),
            parent,
            source_gid,
        };
        match made {
            Ok(cq) => {
                new_cq(context, cq, a.cq_context, a.channel, chan, Some(on)).cast::<IbvCqEx>()
            }
            Err(e) => null_with(errno_of(&e)),
        }
    })
}

/// `ENOENT`: no completion (the extended interface's "empty").
const ENOENT: c_int = libc::ENOENT;

/// Reads the next completion into `rec.current` and the C struct's
/// `status` and `wr_id`: 0, `ENOENT` if there is none, else an errno.
///
/// # Safety
/// The caller holds `rec.polling`.
unsafe fn read_next(rec: &CqRec) -> c_int {
    let mut w = [Wc::default()];
    let mut cq = rec.cq.lock();
    match cq.poll(&mut w) {
        Ok(1) => {
            let mut wc = w[0];
            fix_flags(&mut wc);
            let sgid = if rec.source_gid {
                cq.last_source_gid().map(|g| g.0)
            } else {
                None
            };
            drop(cq);
            // SAFETY: `current` and `current_sgid` are guarded by
            // `polling`, which the caller holds; the C struct is written in
            // place through its cell.
            unsafe {
                *rec.current.get() = wc;
                *rec.current_sgid.get() = sgid;
                let c = rec.c.get();
                (*c).status = wc.raw().status as c_int;
                (*c).wr_id = wc.wr_id();
            }
            0
        }
        Ok(_) => ENOENT,
        // A lost ring: EIO, as `errno_of` answers for `Error::Unusable`.
        Err(_) => libc::EIO,
    }
}

/// `ibv_cq_ex.start_poll`: takes the CQ for this thread and reads its
/// first completion: 0 (call `end_poll` when done), or `ENOENT` (empty)
/// or an errno, with the CQ given back.
///
/// # Safety
/// `cq` is a live CQ of this library.
unsafe extern "C" fn start_poll(cq: *mut IbvCqEx, attr: *mut c_void) -> c_int {
    let _ = attr;
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { cq_rec(cq.cast::<IbvCq>()) }) else {
            return libc::EINVAL;
        };
        while rec
            .polling
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        // SAFETY: `polling` is held.
        let r = unsafe { read_next(rec) };
        if r != 0 {
            rec.polling.store(false, Ordering::Release);
        }
        r
    })
}

/// `ibv_cq_ex.next_poll`: reads the next completion: 0, `ENOENT` or an
/// errno (the CQ stays taken until `end_poll`).
///
/// # Safety
/// `cq` is a live CQ of this library taken by this thread's `start_poll`.
unsafe extern "C" fn next_poll(cq: *mut IbvCqEx) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        match unsafe { cq_rec(cq.cast::<IbvCq>()) } {
            // SAFETY: the caller holds `polling` (the contract).
            Some(rec) => unsafe { read_next(rec) },
            None => libc::EINVAL,
        }
    })
}

/// `ibv_cq_ex.end_poll`: gives the CQ back.
///
/// # Safety
/// `cq` is a live CQ of this library taken by this thread's `start_poll`.
unsafe extern "C" fn end_poll(cq: *mut IbvCqEx) {
    guard((), || {
        // SAFETY: forwarded from this function's contract.
        if let Some(rec) = unsafe { cq_rec(cq.cast::<IbvCq>()) } {
            rec.polling.store(false, Ordering::Release);
        }
    })
}

/// The sender's GID of the current completion of a CQ taken by
/// `start_poll`, if it carried one.
///
/// # Safety
/// The caller is inside the `polling` bracket of `rec`.
pub(crate) unsafe fn current_sgid(rec: &CqRec) -> Option<[u8; 16]> {
    // SAFETY: guarded by the bracket the caller is in.
    unsafe { *rec.current_sgid.get() }
}

/// The current completion of a CQ taken by `start_poll`.
///
/// # Safety
/// `cq` is a live CQ of this library taken by this thread's `start_poll`.
unsafe fn current<'a>(cq: *mut IbvCqEx) -> Option<&'a rverbs::abi::RawWc> {
    // SAFETY: forwarded; `current` is guarded by the `polling` bracket the
    // caller is in, so nothing writes it while the reference lives.
    unsafe { cq_rec(cq.cast::<IbvCq>()).map(|r| (*r.current.get()).raw()) }
}

/// Defines the `ibv_cq_ex.read_*` functions: each reads one field of the
/// current completion (0 outside a poll bracket's contract).
macro_rules! readers {
    ($($(#[$doc:meta])* $name:ident -> $t:ty = |$w:ident| $e:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `cq` is a live CQ of this library taken by this thread's
        /// `start_poll`.
        unsafe extern "C" fn $name(cq: *mut IbvCqEx) -> $t {
            // SAFETY: forwarded from this function's contract.
            match unsafe { current(cq) } {
                Some($w) => $e,
                None => 0,
            }
        }
    )*};
}

readers! {
    /// `read_opcode`: `enum ibv_wc_opcode`.
    read_opcode -> c_int = |w| w.opcode as c_int;
    /// `read_vendor_err`.
    read_vendor_err -> u32 = |w| w.vendor_err;
    /// `read_byte_len`.
    read_byte_len -> u32 = |w| w.byte_len;
    /// `read_imm_data`: network order, as the completion holds it.
    read_imm_data -> u32 = |w| w.ex;
    /// `read_qp_num`.
    read_qp_num -> u32 = |w| w.qp_num;
    /// `read_src_qp`.
    read_src_qp -> u32 = |w| w.src_qp;
    /// `read_wc_flags`: libibverbs' `IBV_WC_*` bits.
    read_wc_flags -> u32 = |w| w.wc_flags;
    /// `read_slid`.
    read_slid -> u32 = |w| u32::from(w.slid);
    /// `read_sl`.
    read_sl -> u8 = |w| w.sl;
    /// `read_dlid_path_bits`.
    read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}

/// `ibv_destroy_cq`: 0, `EBUSY` while a QP uses it, `EINVAL` for NULL.
/// Its events not yet read from the channel are discarded. As in
/// libibverbs, it first waits until every completion event
/// `ibv_get_cq_event` handed out for it was acknowledged with
/// `ibv_ack_cq_events` (and every async event with `ibv_ack_async_event`),
/// so the CQ pointer an event returned stays valid until then.
///
/// # Safety
/// `cq` is NULL or a CQ of this library not yet destroyed; no other call
/// uses it during or after a successful call.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { cq_rec(cq) }) else {
            return libc::EINVAL;
        };
        if rec.users.load(Ordering::Relaxed) != 0 {
            return libc::EBUSY;
        }
        // Off its channel's list, no more events are handed out for it:
        // the count read after is final.
        // SAFETY: a CQ's channel outlives it (ibv_destroy_comp_channel
        // refuses while this CQ counts).
        if let Some(chan) = unsafe { channel_rec(rec.channel) } {
            chan.cqs.lock().retain(|&(_, r)| r != cq as usize);
            chan.users.fetch_sub(1, Ordering::Relaxed);
        }
        let reported = rec.comp_events_reported.load(Ordering::Relaxed);
        // SAFETY: `cq` is live (the contract).
        unsafe { wait_comp_acks(cq, reported) };
        // Waits until its async events handed out were acknowledged.
        super::event::untrack(cq as usize);
        let parent = rec.parent_domain;
        // SAFETY: from Box::into_raw in ibv_create_cq; nothing refers to
        // it any more and the caller makes no other call on it.
        drop(unsafe { Box::from_raw(cq.cast::<CqRec>()) });
        // SAFETY: the parent domain outlives its CQs (ibv_dealloc_pd
        // refuses while this one counts), and counts it until here.
        if let Some(p) = unsafe { pd_rec(parent) } {
            p.release();
        }
        0
    })
}

/// Waits until `cq->comp_events_completed` has reached `reported`, under
/// the CQ's own mutex, woken by [`ibv_ack_cq_events`]. The counters wrap
/// (libibverbs' are `unsigned int`); a program that acknowledged more than
/// it got is not waited for.
///
/// # Safety
/// `cq` is a live CQ of this library.
unsafe fn wait_comp_acks(cq: *mut IbvCq, reported: u32) {
    // SAFETY: the fields of a live CQ (the contract), reached through raw
    // pointers only; its mutex and condition variable were initialised at
    // creation and never move (the record is boxed); the counter is read
    // under the mutex that guards it.
    unsafe {
        let m = ptr::addr_of_mut!((*cq).mutex);
        let cond = ptr::addr_of_mut!((*cq).cond);
        let done = ptr::addr_of!((*cq).comp_events_completed);
        libc::pthread_mutex_lock(m);
        while (reported.wrapping_sub(done.read()) as i32) > 0 {
            libc::pthread_cond_wait(cond, m);
        }
        libc::pthread_mutex_unlock(m);
    }
}

/// `ibv_get_cq_event`: waits for the next event on `channel` (or, if the
/// program made its fd non-blocking, fails with `EAGAIN` when none is
/// pending) and returns its CQ and that CQ's `cq_context`: 0, or -1 with
/// errno. The wait is one `read(2)` of the channel's fd, as libibverbs'
/// is: a signal handler installed without `SA_RESTART` ends it with
/// `EINTR`. Events of CQs destroyed meanwhile are skipped. Each event
/// handed out must be acknowledged (`ibv_ack_cq_events`) before its CQ
/// can be destroyed.
///
/// # Safety
/// `channel` is a live channel of this library; `cq` and `cq_context`
/// point to writable pointers.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut IbvCompChannel,
    cq: *mut *mut IbvCq,
    cq_context: *mut *mut c_void,
) -> c_int {
    guard(-1, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { channel_rec(channel) }) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if cq.is_null() || cq_context.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        loop {
            let got = next_event(|| rec.chan.read_event());
            let id = match got {
                Ok(id) => id,
                Err(e) => {
                    set_errno(e);
                    return -1;
                }
            };
            let listed = rec.cqs.lock();
            let Some(r) = listed
                .iter()
                .find(|(e, _)| *e == id)
                .map(|&(_, r)| r as *mut CqRec)
            else {
                continue;
            };
            // SAFETY: a CQ listed on its channel is live while the list's
            // lock is held (ibv_destroy_cq unlists it under that lock
            // before freeing it); its C struct is read in place, through
            // the cell.
            let context = unsafe {
                (*r).comp_events_reported.fetch_add(1, Ordering::Relaxed);
                (*(*r).c.get()).cq.cq_context
            };
            drop(listed);
            // SAFETY: the out-pointers are writable (the contract).
            unsafe {
                *cq = r.cast::<IbvCq>();
                *cq_context = context;
            }
            return 0;
        }
    })
}

/// `ibv_ack_cq_events`: counts `nevents` events of `cq` acknowledged;
/// an `ibv_destroy_cq` waiting for them goes on once all are.
///
/// # Safety
/// `cq` is NULL or a live CQ of this library.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut IbvCq, nevents: u32) {
    guard((), || {
        if cq.is_null() {
            return;
        }
        // SAFETY: `cq` is a live CQ (the contract), whose C struct is
        // only ever reached through raw pointers. The counter is guarded, as
        // libibverbs guards it, by the struct's own mutex (initialised at
        // creation, never moved: the record is boxed).
        unsafe {
            let m = ptr::addr_of_mut!((*cq).mutex);
            libc::pthread_mutex_lock(m);
            let c = ptr::addr_of_mut!((*cq).comp_events_completed);
            *c = (*c).wrapping_add(nevents);
            libc::pthread_cond_signal(ptr::addr_of_mut!((*cq).cond));
            libc::pthread_mutex_unlock(m);
        }
    })
}

/// `ibv_context_ops.poll_cq`: up to `num_entries` completions into `wc`;
/// how many, or -1 if the CQ cannot be polled.
///
/// # Safety
/// `cq` is a live CQ of this library; `wc` points to `num_entries`
/// writable `struct ibv_wc`.
pub unsafe extern "C" fn poll_cq(cq: *mut IbvCq, num_entries: c_int, wc: *mut Wc) -> c_int {
    hot(|| {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { cq_rec(cq) }) else {
            return -1;
        };
        let n = usize::try_from(num_entries).unwrap_or(0);
        if n == 0 || wc.is_null() {
            return 0;
        }
        // SAFETY: `wc` holds `n` writable ibv_wc (the contract), which
        // have Wc's size, alignment and layout (tests/layout.rs); Wc has
        // no invalid bit patterns and the program holds no Rust reference.
        let out = unsafe { std::slice::from_raw_parts_mut(wc, n) };
        let polled = match rec.cq.try_lock() {
            Some(mut ring) => ring.poll_inlined(out),
            // Another thread polls: the whole poll out of line, so that the
            // uncontended one calls nothing but in tail position (and
            // saves no register for after a call).
            None => return poll_contended(rec, out),
        };
        polled_count(out, polled)
    })
}

/// [`poll_cq`] once the CQ's lock was found taken: waits for it.
#[cold]
#[inline(never)]
fn poll_contended(rec: &CqRec, out: &mut [Wc]) -> c_int {
    let polled = rec.cq.lock().poll_inlined(out);
    polled_count(out, polled)
}

/// What [`poll_cq`] returns for `polled` completions written to `out`
/// (whose flags it fixes), or for a lost ring.
#[inline(always)]
fn polled_count(out: &mut [Wc], polled: Result<usize, rverbs::RingLost>) -> c_int {
    let Ok(got) = polled else {
        return -1;
    };
    match out {
        // One completion, the common case, in line.
        [w, ..] if got == 1 => {
            fix_flags(w);
            1
        }
        // None (a busy poller's common answer), without a call.
        _ if got == 0 => 0,
        _ => fix_all(out, got),
    }
}

/// The flags of the first `got` of `out`, and `got` as the C count: for
/// several completions, out of line so that the one-completion poll
/// keeps a small frame.
#[inline(never)]
fn fix_all(out: &mut [Wc], got: usize) -> c_int {
    if let Some(ws) = out.get_mut(..got) {
        ws.iter_mut().for_each(fix_flags);
    }
    c_int::try_from(got).unwrap_or(c_int::MAX)
}

/// The kernel's `IB_WC_WITH_INVALIDATE` bit.
const KERN_WITH_INVALIDATE: u32 = 1 << 2;
/// libibverbs' `IBV_WC_WITH_INV` bit.
const IBV_WC_WITH_INV: u32 = 1 << 3;

/// Moves the one `wc_flags` bit whose place differs (with-invalidate);
/// the others (GRH, with-immediate) agree.
#[inline]
fn fix_flags(w: &mut Wc) {
    let raw = w.raw_mut();
    if raw.wc_flags & KERN_WITH_INVALIDATE != 0 {
        raw.wc_flags = (raw.wc_flags & !KERN_WITH_INVALIDATE) | IBV_WC_WITH_INV;
    }
    // The kernel's port_num and reserved bytes are padding in ibv_wc.
    raw.port_num = 0;
}

/// `ibv_context_ops.req_notify_cq`: arms the CQ (for solicited
/// completions only if `solicited_only`); 0 or the errno.
///
/// # Safety
/// `cq` is a live CQ of this library.
pub unsafe extern "C" fn req_notify_cq(cq: *mut IbvCq, solicited_only: c_int) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { cq_rec(cq) }) else {
            return libc::EINVAL;
        };
        match rec.cq.lock().req_notify(solicited_only != 0) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}

/// `ibv_resize_cq`: makes room for at least `cqe` completions; 0, or the
/// errno. `cq->cqe` becomes what the CQ now holds.
///
/// # Safety
/// `cq` is a live CQ of this library, which no other call polls meanwhile
/// (libibverbs' rule for resizing).
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut IbvCq, cqe: c_int) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { cq_rec(cq) }) else {
            return libc::EINVAL;
        };
        let Ok(cqe) = u32::try_from(cqe) else {
            return libc::EINVAL;
        };
        let mut ring = rec.cq.lock();
        match ring.resize(cqe) {
            Ok(()) => {
                let now = c_int::try_from(ring.cqe()).unwrap_or(c_int::MAX);
                // SAFETY: the CQ is live; its C struct sits in an
                // UnsafeCell and `cqe` is written only here, under the
                // CQ's lock.
                unsafe { (*rec.c.get()).cq.cqe = now };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}
