//! The error state and the events the HCA raises: affiliated async
//! events, completion events, and accounting for what the application read.

use rverbs_abi::cq::{AsyncEventDesc, CompEventDesc};
use rverbs_abi::qp::qp_state;
use zerocopy::{FromBytes, IntoBytes};

use super::{event, synd};
use crate::emu::{Emu, EventKind};
use crate::real;

/// Moves QP `h` to ERR on the HCA's account.
pub(super) fn set_err(e: &mut Emu, h: u32) {
    if let Some(q) = e.qps.get_mut(&h) {
        q.set_state(qp_state::ERR);
    }
}

/// Moves responder QP `h` to ERR after a class C error (see [`Fail::Nak`])
/// and raises the matching affiliated async event for it.
///
/// [`Fail::Nak`]: super::Fail::Nak
pub(super) fn responder_fatal(e: &mut Emu, h: u32, syndrome: u8) {
    let Some(q) = e.qps.get(&h) else { return };
    if q.state == qp_state::ERR || q.state == qp_state::RESET {
        return;
    }
    let (ctx, user_handle) = (q.ctx, q.user_handle());
    set_err(e, h);
    let kind = if syndrome == synd::REMOTE_ACCESS {
        event::QP_ACCESS_ERR
    } else {
        event::QP_REQ_ERR
    };
    async_event(e, ctx, user_handle, kind);
}

/// Writes an async event (`struct ib_uverbs_async_event_desc`) for the
/// object with `user_handle` to the async event fd of context `ctx`, as
/// the kernel's uverbs async event file queues it (nothing if the context
/// or its channel is gone). The event counts as reported when the
/// application reads it ([`event_read`]).
pub(super) fn async_event(e: &Emu, ctx: u64, user_handle: u64, event_type: u32) {
    let Some(ch) = e
        .context(ctx)
        .and_then(|c| c.ucontext())
        .and_then(|u| e.channel(u.async_channel()))
    else {
        return;
    };
    let desc = AsyncEventDesc {
        element: user_handle,
        event_type,
        reserved: 0,
    };
    crate::log::line(format_args!(
        "async event {event_type} for {user_handle:#x}"
    ));
    real::write_all(ch.peer_fd(), desc.as_bytes());
}

/// Writes a completion event for CQ `h` to its channel, if it has one.
pub(super) fn notify(e: &mut Emu, h: u32) {
    let Some(cq) = e.cqs.get(&h) else { return };
    let Some(fd) = cq.channel().and_then(|c| e.channel(c)).map(|c| c.peer_fd()) else {
        return;
    };
    let desc = CompEventDesc {
        cq_handle: cq.user_handle(),
    };
    real::write_all(fd, desc.as_bytes());
}

/// The application read `bytes` (one event record) from its end `fd` of
/// an event channel: counts the event as reported for its object, as the
/// kernel does when an event is read. False if the object is gone (its
/// event is to be dropped, as the kernel drops an object's queued events
/// when it is destroyed); true for any other read (an event of no object,
/// a short read, an fd no longer known).
pub fn event_read(fd: libc::c_int, bytes: &[u8]) -> bool {
    let mut e = crate::emu::lock();
    let Some(ch) = e.channels.get(&fd) else {
        return true;
    };
    let ctx = ch.ctx;
    // Some(whether the object is still there) for an event of an object.
    let counted = match ch.kind() {
        EventKind::Comp => CompEventDesc::read_from_prefix(bytes).ok().map(|(d, _)| {
            let cq = e.cqs.values_mut().find(|c| c.user_handle() == d.cq_handle);
            cq.map(|c| c.note_comp_event()).is_some()
        }),
        EventKind::Async => AsyncEventDesc::read_from_prefix(bytes)
            .ok()
            .and_then(|(d, _)| match d.event_type {
                event::CQ_ERR => Some(
                    e.cqs
                        .values_mut()
                        .find(|c| c.ctx == ctx && c.user_handle() == d.element)
                        .map(|c| c.note_async_event())
                        .is_some(),
                ),
                event::QP_REQ_ERR | event::QP_ACCESS_ERR => Some(
                    e.qps
                        .values_mut()
                        .find(|q| q.ctx == ctx && q.user_handle() == d.element)
                        .map(|q| q.note_async_event())
                        .is_some(),
                ),
                _ => None,
            }),
    };
    counted.unwrap_or(true)
}
