//! Asynchronous events: `ibv_get_async_event` and `ibv_ack_async_event`,
//! and the table that turns the kernel's element of an event (the
//! [`EventId`] rverbs gave the CQ, QP or SRQ) into the pointer the program
//! holds. As in libibverbs, destroying a CQ, QP or SRQ waits until every
//! event handed out for it was acknowledged, so the pointer in an event
//! stays valid until its `ibv_ack_async_event`.

use std::ffi::c_int;
use std::sync::{Condvar, Mutex};

use rverbs::{AsyncEvent, EventElement, EventId};
use rverbs_abi::cq::AsyncEventDesc;

use super::{context_rec, guard, lock, next_event, set_errno, IbvContext};

/// `struct ibv_async_event`: the element (a union of the CQ, QP, SRQ or WQ
/// pointer and `int port_num`) and `enum ibv_event_type`.
#[repr(C)]
pub struct IbvAsyncEvent {
    /// The union `element`: a pointer, or `port_num` in its low 32 bits.
    pub element: usize,
    /// `enum ibv_event_type` (the kernel's `ib_event_type` values).
    pub event_type: c_int,
}

/// One object events can name: the context it belongs to, its event id,
/// the address the program holds, and its events handed out and
/// acknowledged.
struct Entry {
    context: usize,
    id: u64,
    obj: usize,
    reported: u64,
    acked: u64,
}

/// Every CQ, QP and SRQ of every open context.
static OBJECTS: Mutex<Vec<Entry>> = Mutex::new(Vec::new());
/// Signalled when an event is acknowledged (a destroy may be waiting).
static ACKED: Condvar = Condvar::new();

/// Lists the object at `obj` (the pointer the program holds), of the
/// context at `context`, under its event id.
pub(crate) fn track(context: *const IbvContext, id: EventId, obj: usize) {
    lock(&OBJECTS).push(Entry {
        context: context as usize,
        id: id.raw(),
        obj,
        reported: 0,
        acked: 0,
    });
}

/// Unlists the object at `obj` before it is destroyed, once every event
/// handed out for it was acknowledged (libibverbs' rule: until then the
/// destroy blocks). An event read afterwards names no listed object and
/// is dropped, so its pointer never reaches the program.
pub(crate) fn untrack(obj: usize) {
    let mut list = lock(&OBJECTS);
    loop {
        match list.iter().position(|e| e.obj == obj) {
            Some(i) if list[i].reported > list[i].acked => {
                list = ACKED.wait(list).unwrap_or_else(|e| e.into_inner());
            }
            Some(i) => {
                list.swap_remove(i);
                return;
            }
            None => return,
        }
    }
}

/// Unlists every object of the context at `context` (being closed; the
/// objects the program did not destroy go with it).
pub(crate) fn forget_context(context: *const IbvContext) {
    lock(&OBJECTS).retain(|e| e.context != context as usize);
    ACKED.notify_all();
}

/// What an event's union holds, and whether it names a tracked object.
enum Element {
    /// A listed CQ, QP or SRQ (the address the program holds).
    Object(usize),
    /// A port number, the device (0) or a value this library does not
    /// know, stored as libibverbs stores them: in `port_num`.
    Port(c_int),
    /// An object not (or no longer) listed: the event is dropped.
    Gone,
}

/// The element of `element` on the context at `context`; counts the
/// event as handed out for a listed object.
fn element_of(context: usize, element: EventElement) -> Element {
    let id = match element {
        EventElement::Cq(id) | EventElement::Qp(id) | EventElement::Srq(id) => id.raw(),
        // This library creates no work queues: nothing to name.
        EventElement::Wq(_) => return Element::Gone,
        EventElement::Port(n) => return Element::Port(n as c_int),
        EventElement::Device => return Element::Port(0),
        EventElement::Unknown(raw) => return Element::Port(raw as c_int),
    };
    let mut list = lock(&OBJECTS);
    match list.iter_mut().find(|e| e.context == context && e.id == id) {
        Some(e) => {
            e.reported += 1;
            Element::Object(e.obj)
        }
        None => Element::Gone,
    }
}

/// `ibv_get_async_event`: the next asynchronous event of `context`, its
/// element the program's own CQ, QP or SRQ pointer (or the port number):
/// 0, or -1 with errno. Blocks until one arrives unless the program made
/// `async_fd` non-blocking (then `EAGAIN` when none is pending); the wait
/// is one `read(2)` of `async_fd`, as libibverbs' is, so a signal handler
/// installed without `SA_RESTART` ends it with `EINTR`. Each
/// event for a CQ, QP or SRQ must be acknowledged before that object can
/// be destroyed.
///
/// # Safety
/// `context` is a context of this library not being closed; `event`
/// points to a writable `struct ibv_async_event`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut IbvContext,
    event: *mut IbvAsyncEvent,
) -> c_int {
    guard(-1, || {
        let Some(rec) = context_rec(context) else {
            set_errno(libc::EINVAL);
            return -1;
        };
        if event.is_null() {
            set_errno(libc::EINVAL);
            return -1;
        }
        loop {
            let got = next_event(|| rec.ctx.read_async_event());
            let ev = match got {
                Ok(ev) => ev,
                Err(e) => {
                    set_errno(e);
                    return -1;
                }
            };
            let element = match element_of(context as usize, ev.element) {
                Element::Object(p) => p,
                // The low 32 bits of the union, as a C `int` member.
                Element::Port(n) => n as u32 as usize,
                Element::Gone => continue,
            };
            // SAFETY: `event` is writable (the contract).
            unsafe {
                event.write(IbvAsyncEvent {
                    element,
                    event_type: ev.kind.raw() as c_int,
                })
            };
            return 0;
        }
    })
}

/// `ibv_ack_async_event`: acknowledges an event `ibv_get_async_event`
/// returned; a destroy waiting for it may then go on.
///
/// # Safety
/// `event` is NULL or points to a readable `struct ibv_async_event`.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut IbvAsyncEvent) {
    guard((), || {
        // SAFETY: NULL or readable (the contract); only read.
        let Some(ev) = (unsafe { event.as_ref() }) else {
            return;
        };
        // Which event types name a CQ, QP or SRQ: rverbs' one decoding.
        let kind = AsyncEvent::from_desc(&AsyncEventDesc {
            element: 0,
            event_type: ev.event_type as u32,
            reserved: 0,
        });
        let names_object = matches!(
            kind.element,
            EventElement::Cq(_) | EventElement::Qp(_) | EventElement::Srq(_)
        );
        if !names_object {
            return;
        }
        let mut list = lock(&OBJECTS);
        if let Some(e) = list
            .iter_mut()
            .find(|e| e.obj == ev.element && e.acked < e.reported)
        {
            e.acked += 1;
            ACKED.notify_all();
        }
    })
}
