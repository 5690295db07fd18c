//! Completion channels and CQs: `ibv_create_comp_channel`,
//! `ibv_destroy_comp_channel`, `ibv_create_cq`, `ibv_destroy_cq`,
//! `ibv_get_cq_event`, `ibv_ack_cq_events`, and the context operations
//! behind `verbs.h`'s inline `ibv_poll_cq` and `ibv_req_notify_cq`.
//!
//! A CQ's ring sits behind a mutex: libibverbs lets several threads poll
//! one CQ, and `rverbs::Cq::poll` takes `&mut`. Uncontended, that is one
//! atomic exchange per poll and no system call. Completions are written
//! straight into the program's `struct ibv_wc` array (the kernel's
//! `ib_uverbs_wc` has the same layout), then only the one flag whose bit
//! differs between the kernel and libibverbs is moved.

use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rverbs::{CompChannel, Cq, EventId, Wc};

use super::{context_rec, errno_of, guard, lock, set_errno, IbvContext};

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

/// A channel handed out.
#[repr(C)]
struct ChannelRec {
    c: IbvCompChannel,
    chan: CompChannel,
    /// Its CQs by event id: (id, address of the CqRec).
    cqs: Mutex<Vec<(EventId, usize)>>,
    /// CQs on it not yet destroyed.
    users: AtomicUsize,
}

/// A CQ handed out.
#[repr(C)]
pub(crate) struct CqRec {
    c: IbvCq,
    pub(crate) cq: Mutex<Cq>,
    /// QPs (and SRQs) using it and not destroyed.
    users: AtomicUsize,
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

/// NULL with `e` as errno.
fn null_with<T>(e: c_int) -> *mut T {
    set_errno(e);
    ptr::null_mut()
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
            cqs: Mutex::new(Vec::new()),
            users: AtomicUsize::new(0),
        });
        Box::into_raw(rec).cast::<IbvCompChannel>()
    })
}

/// Clears `O_NONBLOCK` on `fd`.
fn set_blocking(fd: c_int) -> Result<(), c_int> {
    // SAFETY: F_GETFL/F_SETFL on the channel's own fd, open for the call;
    // they touch only its status flags.
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
        let id = cq.event_id();
        let rec = Box::new(CqRec {
            c: IbvCq {
                context,
                channel,
                cq_context,
                handle: cq.handle(),
                cqe: c_int::try_from(cq.cqe()).unwrap_or(c_int::MAX),
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                comp_events_completed: 0,
                async_events_completed: 0,
            },
            cq: Mutex::new(cq),
            users: AtomicUsize::new(0),
        });
        let rec = Box::into_raw(rec);
        if let Some(chan) = chan {
            chan.users.fetch_add(1, Ordering::Relaxed);
            lock(&chan.cqs).push((id, rec as usize));
        }
        rec.cast::<IbvCq>()
    })
}

/// `ibv_destroy_cq`: 0, `EBUSY` while a QP uses it, `EINVAL` for NULL.
/// Its events not yet read from the channel are discarded.
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
        // SAFETY: a CQ's channel outlives it (ibv_destroy_comp_channel
        // refuses while this CQ counts).
        if let Some(chan) = unsafe { channel_rec(rec.c.channel) } {
            lock(&chan.cqs).retain(|&(_, r)| r != cq as usize);
            chan.users.fetch_sub(1, Ordering::Relaxed);
        }
        // SAFETY: from Box::into_raw in ibv_create_cq; nothing refers to
        // it any more and the caller makes no other call on it.
        drop(unsafe { Box::from_raw(cq.cast::<CqRec>()) });
        0
    })
}

/// `ibv_get_cq_event`: waits for the next event on `channel` (or, if the
/// program made its fd non-blocking, fails with `EAGAIN` when none is
/// pending) and returns its CQ and that CQ's `cq_context`: 0, or -1 with
/// errno. Events of CQs destroyed meanwhile are skipped.
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
        let nonblocking = is_nonblocking(rec.c.fd);
        loop {
            let got = if nonblocking {
                rec.chan.try_get_event()
            } else {
                rec.chan.get_event().map(Some)
            };
            let id = match got {
                Ok(Some(id)) => id,
                Ok(None) => {
                    set_errno(libc::EAGAIN);
                    return -1;
                }
                Err(e) => {
                    set_errno(errno_of(&e));
                    return -1;
                }
            };
            let found = lock(&rec.cqs)
                .iter()
                .find(|(e, _)| *e == id)
                .map(|&(_, r)| r as *mut CqRec);
            if let Some(r) = found {
                // SAFETY: a CQ listed on its channel is live (destroy
                // unlists it first); the out-pointers are writable (the
                // contract).
                unsafe {
                    *cq = r.cast::<IbvCq>();
                    *cq_context = (*r).c.cq_context;
                }
                return 0;
            }
        }
    })
}

/// Whether `fd` has `O_NONBLOCK`.
fn is_nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL reads only the flags of the (open) channel fd.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// `ibv_ack_cq_events`: counts `nevents` events of `cq` acknowledged.
/// Destroying a CQ does not wait for its events here (they carry no
/// reference the kernel counts), so this only keeps the count.
///
/// # Safety
/// `cq` is NULL or a live CQ of this library.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut IbvCq, nevents: u32) {
    guard((), || {
        if cq.is_null() {
            return;
        }
        // SAFETY: a live CqRec (the contract); the counter is a plain
        // field libibverbs also updates under the CQ's own mutex, which
        // this library never holds, so the program's own locking covers it.
        unsafe {
            let c = ptr::addr_of_mut!((*cq).comp_events_completed);
            *c = (*c).wrapping_add(nevents);
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
    guard(-1, || {
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
        let got = match lock(&rec.cq).poll(out) {
            Ok(k) => k,
            Err(_) => return -1,
        };
        for w in &mut out[..got] {
            fix_flags(w);
        }
        c_int::try_from(got).unwrap_or(c_int::MAX)
    })
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
        match lock(&rec.cq).req_notify(solicited_only != 0) {
            Ok(()) => 0,
            Err(e) => errno_of(&e),
        }
    })
}
