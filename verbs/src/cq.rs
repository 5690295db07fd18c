//! Completion queues and work completions, plus completion channels (the fd
//! that signals an armed CQ, pollable with `poll`/`epoll`).

use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use rverbs_abi::cmd::exec;
use rverbs_abi::cq::{CompEventDesc, CreateCq, DestroyCq};
use rverbs_abi::wr::{wc_flags, wc_opcode, wc_status};
use zerocopy::{FromBytes, IntoBytes, KnownLayout};

use crate::context::Context;
use crate::error::{Error, InvalidKind, Result};
use crate::event::{EventId, ObjectKind};
use crate::gid::Gid;
use crate::sys::mem::Leakable;
use crate::RingLost;
use rverbs_provider::SharedAllocator;

pub(crate) struct CqInner {
    /// What outlives the ring (mlx5: the ring and doorbell record the
    /// device writes CQEs to for as long as the kernel CQ exists, which QPs
    /// on it keep after the [`Cq`] handle may be gone), freed only after
    /// DESTROY_CQ: declared first, it drops first, right after
    /// [`Drop::drop`]'s body (leaked if the kernel refused). QPs on the CQ
    /// also clean their CQEs out of it through this.
    pub(crate) shared: Leakable<crate::provider::CqShared>,
    pub(crate) ctx: Context,
    pub(crate) handle: u32,
    /// The `user_handle` events name this CQ by.
    pub(crate) event_id: EventId,
    /// The completion channel the CQ signals, if any (it knows the CQ
    /// from creation until DESTROY_CQ, to tell the provider of its
    /// events).
    channel: Option<CompChannel>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let cmd = DestroyCq {
            response: 0,
            cq_handle: self.handle,
            reserved: 0,
        };
        // Every QP of ours using the CQ is gone (they hold this Arc). The
        // ring and doorbell record are freed only once the kernel has
        // destroyed the CQ (or the device is gone): a refused destroy
        // leaves them the device's, so they are leaked.
        if !crate::event::destroyed(exec(self.ctx.fd(), &cmd, &mut [])) {
            self.shared.leak();
        }
        // The kernel discarded its events still queued on the channel.
        if let Some(chan) = &self.channel {
            chan.forget(self.event_id);
        }
    }
}

/// A completion queue. Polling needs `&mut`: one consumer at a time, no
/// lock on the data path. QPs created on it keep the kernel object alive.
///
/// **Order.** Each work queue completes in order: a QP's send requests
/// come back in the order they were posted, its receives likewise. Between
/// queues there is no order: when one CQ serves a QP's send and receive
/// queues (or several QPs), a receive may complete before a send posted
/// earlier, and the two sides of one exchange on a CQ both QPs use (a
/// SEND's completion at the requester, its receive at the responder) come
/// in either order. Match completions by [`Wc::qp_num`], [`Wc::opcode`]
/// and [`Wc::wr_id`], never by their position.
pub struct Cq {
    inner: Arc<CqInner>,
    ring: crate::provider::Cq,
    cqe: u32,
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq")
            .field("handle", &self.inner.handle)
            .field("cqe", &self.cqe)
            .finish()
    }
}

/// A completion channel: reports, through a readable fd, that an armed CQ
/// got a completion. Cheap to clone.
///
/// The fd is non-blocking and becomes readable when a CQ armed with
/// [`Cq::req_notify`] fires, so it can be registered with `poll`, `epoll`
/// or an async runtime ([`AsFd`]). Each event names the CQ by its
/// [`Cq::event_id`] and disarms it: re-arm, then poll the CQ (in that
/// order, or a completion arriving in between is missed).
///
/// Acknowledging events: libibverbs' `ibv_ack_cq_events` exists because its
/// events carry a pointer to the CQ, which `ibv_destroy_cq` must not free
/// while another thread still holds an unacknowledged event. Here an event
/// carries only an [`EventId`], which stays harmless after the CQ is gone,
/// and the kernel needs no acknowledgement (its DESTROY_CQ answer merely
/// counts the events it delivered), so there is nothing to acknowledge.
/// Destroying a CQ discards its events still queued on the channel.
///
/// Every way of reading an event ([`CompChannel::get_event`] and its
/// variants, [`Cq::poll_blocking`], `rverbs::tokio::AsyncCq`) tells the
/// CQ's provider that it was read, as `ibv_get_cq_event` does: mlx5 arms
/// with a sequence number the device checks, which counts those events.
#[derive(Clone, Debug)]
pub struct CompChannel {
    inner: Arc<ChannelInner>,
}

// SAFETY: a CompChannel is an Arc of the channel's state, which owns its
// OwnedFd and never replaces it; as_raw_fd returns that fd.
#[cfg(feature = "tokio")]
#[allow(unsafe_code)]
unsafe impl crate::sys::tokio::OwnsFd for CompChannel {}

/// A completion channel's fd and the CQs it signals.
#[derive(Debug)]
struct ChannelInner {
    fd: OwnedFd,
    /// The CQs created on this channel and not destroyed, by event id:
    /// what their providers keep of them (a short list, searched once per
    /// event read: the control path).
    cqs: Mutex<Vec<(EventId, crate::provider::CqShared)>>,
}

impl Context {
    /// Creates a completion channel.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        let fd = crate::sys::cmd::create_comp_channel(self.fd())?;
        rverbs_abi::fd::set_nonblocking(fd.as_fd())
            .map_err(Error::kernel("comp channel O_NONBLOCK"))?;
        Ok(CompChannel {
            inner: Arc::new(ChannelInner {
                fd,
                cqs: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Creates a CQ with room for at least `cqe` completions.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq> {
        self.create_cq_with(cqe, None, 0)
    }

    /// Creates a CQ bound to a completion channel on `comp_vector`.
    pub fn create_cq_with(
        &self,
        cqe: u32,
        channel: Option<&CompChannel>,
        comp_vector: u32,
    ) -> Result<Cq> {
        let attr = CqInitAttr {
            cqe,
            channel,
            comp_vector,
            flags: CqFlags::empty(),
        };
        self.create_cq_impl(&attr, false, None, false)
    }

    /// Creates a CQ whose receive completions carry the sender's GID when
    /// the sender has no address handle on this device (EFA's
    /// `CQ_WITH_SGID`, libefa's `efadv_create_cq` with
    /// `EFADV_WC_EX_WITH_SGID`): read it with [`Cq::last_source_gid`]
    /// after each poll. [`Error::NotOffered`] on any other device, on an
    /// EFA device without that capability, and with creation flags.
    pub fn create_cq_with_source_gid(&self, attr: &CqInitAttr<'_>) -> Result<Cq> {
        if !attr.flags.is_empty() {
            return Err(Error::NotOffered {
                what: "creation flags on a CQ with the sender's GID",
            });
        }
        self.create_cq_impl(attr, false, None, true)
    }

    /// Creates a CQ with the kernel's extended CREATE_CQ command, which
    /// carries creation flags (what `ibv_create_cq_ex` uses).
    ///
    /// rxe supports no creation flag: it has no completion clock (its
    /// `timestamp_mask` is 0, so [`CqFlags::TIMESTAMP_COMPLETION`] is refused
    /// here with a clear error) and its kernel driver refuses every flag,
    /// [`CqFlags::IGNORE_OVERRUN`] included, with `EOPNOTSUPP`.
    ///
    /// On mlx5 the provider does not implement creation flags yet: any flag
    /// is refused with [`Error::Unsupported`] before the kernel is asked;
    /// without flags the CQ is the same as [`Context::create_cq`]'s.
    pub fn create_cq_ex(&self, attr: &CqInitAttr<'_>) -> Result<Cq> {
        self.create_cq_ex_in(attr, None)
    }

    /// [`Context::create_cq_ex`] with the ring from `alloc`.
    pub(crate) fn create_cq_ex_in(
        &self,
        attr: &CqInitAttr<'_>,
        alloc: Option<&SharedAllocator>,
    ) -> Result<Cq> {
        if attr.flags.contains(CqFlags::TIMESTAMP_COMPLETION) {
            let dev = self.query_device()?;
            if dev.ex().is_none_or(|ex| ex.timestamp_mask == 0) {
                return Err(Error::invalid_as(
                    InvalidKind::NotPresent,
                    format!(
                        "{} has no completion timestamps (its timestamp_mask is 0)",
                        self.device().name()
                    ),
                ));
            }
        }
        self.create_cq_impl(attr, true, alloc, false)
    }

    fn create_cq_impl(
        &self,
        attr: &CqInitAttr<'_>,
        extended: bool,
        alloc: Option<&SharedAllocator>,
        source_gid: bool,
    ) -> Result<Cq> {
        let CqInitAttr {
            cqe,
            channel,
            comp_vector,
            flags,
        } = *attr;
        if cqe == 0 {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "a CQ needs at least one entry",
            ));
        }
        if comp_vector >= self.num_comp_vectors().max(1) {
            return Err(Error::invalid_as(
                InvalidKind::TooLarge,
                format!(
                    "completion vector {comp_vector} >= the device's {}",
                    self.num_comp_vectors()
                ),
            ));
        }
        let event_id = EventId::new(ObjectKind::Cq);
        let comp_channel = channel.map_or(-1, |c| c.as_raw_fd());
        let cmd = CreateCq {
            response: 0,
            user_handle: event_id.raw(),
            cqe,
            comp_vector,
            comp_channel,
            reserved: 0,
        };
        // Complete or nothing: the provider destroys what it created on
        // the way if it fails.
        let (resp, ring, shared) = if source_gid {
            self.provider().create_cq_with_sgid(&cmd)?
        } else {
            self.provider()
                .create_cq(&cmd, extended.then_some(flags.bits()), alloc)?
        };
        if let Some(c) = channel {
            c.register(event_id, shared.clone());
        }
        Ok(Cq {
            inner: Arc::new(CqInner {
                ctx: self.clone(),
                handle: resp.cq_handle,
                event_id,
                channel: channel.cloned(),
                shared: Leakable::new(shared),
            }),
            ring,
            cqe: resp.cqe,
        })
    }
}

bitflags::bitflags! {
    /// CQ creation flags (`enum ib_uverbs_ex_create_cq_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct CqFlags: u32 {
        /// Completions carry the device's timestamp.
        const TIMESTAMP_COMPLETION = 1 << 0;
        /// The device may overwrite unpolled completions instead of
        /// reporting an overrun.
        const IGNORE_OVERRUN = 1 << 1;
    }
}

/// What [`Context::create_cq_ex`] needs.
#[derive(Debug, Clone, Copy)]
pub struct CqInitAttr<'a> {
    /// Minimum number of entries.
    pub cqe: u32,
    /// Completion channel to signal, if any.
    pub channel: Option<&'a CompChannel>,
    /// Completion vector.
    pub comp_vector: u32,
    /// Creation flags.
    pub flags: CqFlags,
}

impl Cq {
    pub(crate) fn inner(&self) -> &Arc<CqInner> {
        &self.inner
    }

    /// The number of entries the kernel granted.
    pub fn cqe(&self) -> u32 {
        self.cqe
    }

    /// What completion-channel and async events name this CQ by.
    pub fn event_id(&self) -> EventId {
        self.inner.event_id
    }

    /// The kernel's handle for the CQ (`ibv_cq.handle`).
    pub fn handle(&self) -> u32 {
        self.inner.handle
    }

    /// Polls up to `wc.len()` completions into `wc`; returns how many.
    /// Never blocks and never allocates. A completion the CQ had no room
    /// for is not here: the kernel reports that loss only as an
    /// [`crate::AsyncEventKind::CqErr`] async event naming this CQ.
    ///
    /// Fails with [`RingLost`] after a failed rxe resize lost the ring
    /// (see [`Cq::resize`]), for good; `?` turns it into
    /// [`Error::Unusable`]. Its own error type, not [`Error`], so that the
    /// result comes back in two registers (no 72-byte result written
    /// through memory on every poll).
    #[inline]
    pub fn poll(&mut self, wc: &mut [Wc]) -> std::result::Result<usize, RingLost> {
        self.ring.poll_wcs(as_raw_wcs(wc))
    }

    /// [`Cq::poll`], with rxe's poll compiled into the caller instead of
    /// called (mlx5's loop is called either way): for an adapter's entry
    /// point that does little else (the C ABI's `ibv_poll_cq`), which then
    /// costs one function instead of two on rxe. The same completions as
    /// [`Cq::poll`]; prefer that one elsewhere (it keeps each provider's
    /// loop in one place).
    #[inline(always)]
    pub fn poll_inlined(&mut self, wc: &mut [Wc]) -> std::result::Result<usize, RingLost> {
        self.ring.poll_wcs_inline(as_raw_wcs(wc))
    }

    /// The sender's GID of the last completion [`Cq::poll`] returned, on a
    /// CQ made by [`Context::create_cq_with_source_gid`]: present for a
    /// receive from a sender with no address handle on this device (with
    /// one, its [`Wc`] names the sender: `src_qp` and the AH), `None` for
    /// every other completion and on every other CQ. Poll one completion
    /// at a time to read each one's.
    pub fn last_source_gid(&self) -> Option<Gid> {
        self.ring.last_source_gid().map(Gid)
    }

    /// Whether the CQ was made by [`Context::create_cq_with_source_gid`].
    pub fn has_source_gid(&self) -> bool {
        self.ring.with_source_gid()
    }

    /// The completion channel this CQ signals, if it was created with one.
    pub fn channel(&self) -> Option<CompChannel> {
        self.inner.channel.clone()
    }

    /// Waits, without spinning, until the CQ holds a completion, then
    /// polls up to `wc.len()` of them into `wc` and returns how many (at
    /// least one). Fails with [`Error::Timeout`] if none arrived within
    /// `timeout`, and with [`Error::InvalidArgument`] if the CQ has no
    /// completion channel (create it with [`Context::create_cq_with`]) or
    /// `wc` is empty. The blocking counterpart of [`Cq::poll_until`]'s busy
    /// loop, and what `rverbs::tokio::AsyncCq` (the `tokio` feature) does
    /// on a runtime.
    ///
    /// The protocol, which loses no wake-up: poll; if empty, arm
    /// ([`Cq::req_notify`]) and poll again (a completion that landed
    /// between the first poll and the arm raises no event, the second
    /// poll finds it); only if that is empty too, sleep on the channel,
    /// drain every event queued there, and start over. An event left over
    /// from an earlier arm only costs one extra round.
    ///
    /// The channel should serve this CQ alone: the events of other CQs
    /// sharing it are read and discarded here, and their own waiters would
    /// sleep until their timeout. No event needs acknowledging (see
    /// [`CompChannel`]).
    pub fn poll_blocking(&mut self, wc: &mut [Wc], timeout: std::time::Duration) -> Result<usize> {
        if wc.is_empty() {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "poll_blocking with no room for a completion",
            ));
        }
        let Cq { inner, ring, .. } = self;
        let Some(chan) = inner.channel.as_ref() else {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "poll_blocking needs a CQ with a completion channel (Context::create_cq_with)",
            ));
        };
        let deadline = std::time::Instant::now().checked_add(timeout);
        let mut w = BlockingWaiter {
            ring,
            chan,
            wc,
            deadline,
        };
        match await_completions(&mut w)? {
            Some(n) => Ok(n),
            None => Err(Error::Timeout(timeout)),
        }
    }

    /// Busy-polls until `wc` holds at least `min` completions (at most
    /// `wc.len()`), or fails with [`Error::Timeout`] after `timeout`.
    pub fn poll_until(
        &mut self,
        wc: &mut [Wc],
        min: usize,
        timeout: std::time::Duration,
    ) -> Result<usize> {
        let min = min.min(wc.len());
        let start = std::time::Instant::now();
        let mut got = 0;
        while got < min {
            got += self.poll(&mut wc[got..])?;
            if got < min {
                if start.elapsed() > timeout {
                    return Err(Error::Timeout(timeout));
                }
                std::hint::spin_loop();
            }
        }
        Ok(got)
    }

    /// Arms the CQ: the next completion (or, with `solicited_only`, the next
    /// solicited one) raises an event on its channel. A receive completion is
    /// solicited when the sender set [`crate::SendFlags::SOLICITED`]; rxe
    /// treats send completions as unsolicited. Completions already in the
    /// CQ do not fire: poll after arming.
    ///
    /// On mlx5 this is no system call: the provider writes the CQ's
    /// doorbell record and UAR register.
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.ring.arm(solicited_only)
    }

    /// Resizes the CQ to at least `cqe` entries; unpolled completions are kept.
    /// A size that cannot hold the unpolled completions is refused
    /// ([`Error::Kernel`] with EINVAL) and they all stay: poll some first.
    ///
    /// On mlx5 the provider allocates a new ring and moves the unpolled
    /// CQEs into it; the previous ring stays mapped (owned by the CQ's
    /// shared memory) until the next resize or the CQ's destruction. The
    /// new ring must hold the unpolled CQEs plus one (the device's RESIZE
    /// CQE), and a full ring cannot be resized (the device has no entry
    /// for its RESIZE CQE): poll at least one completion first.
    ///
    /// On rxe the kernel replaces the ring and this maps the new one. If
    /// the kernel resized but the new ring cannot be mapped, the error is
    /// returned and the CQ is unusable: every later [`Cq::poll`] fails
    /// with [`Error::Unusable`] (the old ring is no longer filled, so
    /// polling it would lose completions silently).
    pub fn resize(&mut self, cqe: u32) -> Result<()> {
        if cqe == 0 {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "a CQ needs at least one entry",
            ));
        }
        self.cqe = self.ring.resize(cqe)?;
        Ok(())
    }
}

/// `wc` as the kernel's completions the providers write.
#[inline(always)]
fn as_raw_wcs(wc: &mut [Wc]) -> &mut [rverbs_abi::wr::Wc] {
    // A `[Wc]` is a `[RawWc]`: Wc is repr(transparent) over it and both are
    // plain bytes of one size and alignment, which zerocopy proves at
    // compile time (no run-time alignment check on the data path).
    zerocopy::transmute_mut!(wc)
}

/// The three steps of waiting for completions through a channel.
pub(crate) trait Waiter {
    /// Polls the CQ (never blocks).
    fn poll(&mut self) -> Result<usize>;
    /// Arms the CQ for the next completion.
    fn arm(&mut self) -> Result<()>;
    /// Sleeps until the channel has an event, and drains it: `false` when
    /// the time allowed ran out first.
    fn wait(&mut self) -> Result<bool>;
}

/// Poll, arm, poll again, and only then sleep: a completion that arrives
/// between the first poll and the arm raises no event (the CQ was not
/// armed yet), so without the second poll it would be found only at the
/// timeout. `Ok(None)`: the time ran out with the CQ still empty.
pub(crate) fn await_completions<W: Waiter>(w: &mut W) -> Result<Option<usize>> {
    loop {
        let n = w.poll()?;
        if n > 0 {
            return Ok(Some(n));
        }
        w.arm()?;
        let n = w.poll()?;
        if n > 0 {
            return Ok(Some(n));
        }
        if !w.wait()? {
            let n = w.poll()?;
            return Ok((n > 0).then_some(n));
        }
    }
}

struct BlockingWaiter<'a, 'w> {
    ring: &'a mut crate::provider::Cq,
    chan: &'a CompChannel,
    wc: &'w mut [Wc],
    deadline: Option<std::time::Instant>,
}

impl Waiter for BlockingWaiter<'_, '_> {
    fn poll(&mut self) -> Result<usize> {
        Ok(self.ring.poll_wcs(as_raw_wcs(self.wc))?)
    }
    fn arm(&mut self) -> Result<()> {
        self.ring.arm(false)
    }
    fn wait(&mut self) -> Result<bool> {
        let left = self
            .deadline
            .map(|d| d.saturating_duration_since(std::time::Instant::now()));
        let got = self.chan.get_event_timeout_inner(left)?.is_some();
        if got {
            while self.chan.try_get_event()?.is_some() {}
        }
        Ok(got)
    }
}

impl CompChannel {
    /// Waits until an armed CQ fires and returns its [`Cq::event_id`].
    /// Re-arm with [`Cq::req_notify`] and poll the CQ after. A signal
    /// restarts the wait (see [`CompChannel::read_event`] for one that
    /// ends it). Fails instead of sleeping on if the kernel closes the
    /// channel.
    pub fn get_event(&self) -> Result<EventId> {
        loop {
            if let Some(id) = self.get_event_timeout_inner(None)? {
                return Ok(id);
            }
        }
    }

    /// The next pending event's CQ, or `Ok(None)` if none is pending. Never
    /// blocks.
    pub fn try_get_event(&self) -> Result<Option<EventId>> {
        Ok(
            crate::event::read_event::<CompEventDesc>(self.as_fd(), "get_cq_event")?
                .map(|d| self.read(d)),
        )
    }

    /// Reads one event with a single `read(2)` on the channel's fd, in
    /// whatever mode the fd is, as libibverbs' `ibv_get_cq_event` does: on
    /// a non-blocking fd (the default here) `Ok(None)` when none is
    /// pending; on a blocking one (the C library's, or after you cleared
    /// `O_NONBLOCK`) the kernel waits for one, and a signal handler
    /// installed without `SA_RESTART` ends the wait with
    /// [`Error::Kernel`] carrying `EINTR`. The CQ's provider learns of
    /// the event as with [`CompChannel::get_event`].
    pub fn read_event(&self) -> Result<Option<EventId>> {
        Ok(
            crate::event::read_once::<CompEventDesc>(self.as_fd(), "get_cq_event")?
                .map(|d| self.read(d)),
        )
    }

    /// Waits up to `timeout` for an event; `Ok(None)` if none arrived.
    pub fn get_event_timeout(&self, timeout: std::time::Duration) -> Result<Option<EventId>> {
        self.get_event_timeout_inner(Some(timeout))
    }

    fn get_event_timeout_inner(
        &self,
        timeout: Option<std::time::Duration>,
    ) -> Result<Option<EventId>> {
        Ok(crate::event::wait_event::<CompEventDesc>(
            self.as_fd(),
            "get_cq_event",
            timeout,
            crate::event::read_event,
        )?
        .map(|d| self.read(d)))
    }

    /// An event read from the channel: its CQ's provider learns of it
    /// (the `cq_event` step of `ibv_get_cq_event`); returns the CQ's id.
    fn read(&self, d: CompEventDesc) -> EventId {
        let id = EventId::from_raw(d.cq_handle);
        let cqs = self.inner.cqs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, shared)) = cqs.iter().find(|(e, _)| *e == id) {
            shared.completion_event();
        }
        id
    }

    /// Starts telling CQ `id`'s provider (through `shared`) of its events.
    fn register(&self, id: EventId, shared: crate::provider::CqShared) {
        let mut cqs = self.inner.cqs.lock().unwrap_or_else(|p| p.into_inner());
        cqs.push((id, shared));
    }

    /// Forgets CQ `id` (destroyed).
    fn forget(&self, id: EventId) {
        let mut cqs = self.inner.cqs.lock().unwrap_or_else(|p| p.into_inner());
        cqs.retain(|(e, _)| *e != id);
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd.as_fd()
    }
}

impl AsRawFd for CompChannel {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.inner.fd.as_raw_fd()
    }
}

/// A work completion: the 48-byte `ib_uverbs_wc` the device wrote
/// ([`abi::RawWc`](crate::abi::RawWc)), with typed accessors.
#[repr(transparent)]
#[derive(Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout)]
pub struct Wc(rverbs_abi::wr::Wc);

impl Wc {
    /// A completion from its raw form (for tests and replay tools).
    pub fn from_raw(raw: crate::abi::RawWc) -> Wc {
        Wc(raw)
    }
    /// The raw `ib_uverbs_wc`.
    pub fn raw(&self) -> &crate::abi::RawWc {
        &self.0
    }
    /// The raw completion, to adjust in place (a C-ABI layer translating
    /// flags).
    pub fn raw_mut(&mut self) -> &mut crate::abi::RawWc {
        &mut self.0
    }
    /// The completed request's `wr_id`.
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    /// Status.
    pub fn status(&self) -> WcStatus {
        WcStatus(self.0.status)
    }
    /// Whether the request succeeded.
    pub fn is_success(&self) -> bool {
        self.0.status == wc_status::SUCCESS
    }
    /// Opcode (valid only on success, as in libibverbs).
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode(self.0.opcode)
    }
    /// Bytes received (receives) or read (RDMA READ).
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// Immediate data, in host order, if the completion carries it.
    pub fn imm_data(&self) -> Option<u32> {
        (self.0.wc_flags & wc_flags::WITH_IMM != 0).then(|| u32::from_be(self.0.ex))
    }
    /// The rkey the sender invalidated, if any.
    pub fn invalidated_rkey(&self) -> Option<u32> {
        (self.0.wc_flags & wc_flags::WITH_INVALIDATE != 0).then_some(self.0.ex)
    }
    /// Whether a GRH precedes the data (UD receives).
    pub fn has_grh(&self) -> bool {
        self.0.wc_flags & wc_flags::GRH != 0
    }
    /// Local QP number.
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
    /// Source QP number (UD).
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }
    /// Raw `wc_flags`.
    pub fn wc_flags(&self) -> u32 {
        self.0.wc_flags
    }
    /// Vendor error detail.
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }
    /// Source LID.
    pub fn slid(&self) -> u16 {
        self.0.slid
    }
    /// Service level.
    pub fn sl(&self) -> u8 {
        self.0.sl
    }
    /// P_Key index.
    pub fn pkey_index(&self) -> u16 {
        self.0.pkey_index
    }
    /// Builds a completion from its 48 raw bytes.
    pub fn from_bytes(b: &[u8; 48]) -> Wc {
        Wc(rverbs_abi::wr::Wc::read_from_bytes(b).unwrap_or_default())
    }
}

impl fmt::Debug for Wc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wc")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("byte_len", &self.byte_len())
            .field("qp_num", &self.qp_num())
            .field("wc_flags", &self.wc_flags())
            .finish()
    }
}

/// A completion status (`enum ib_wc_status`); unknown values are kept.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcStatus(pub u32);

#[allow(missing_docs)]
impl WcStatus {
    pub const SUCCESS: WcStatus = WcStatus(wc_status::SUCCESS);
    pub const LOC_LEN_ERR: WcStatus = WcStatus(wc_status::LOC_LEN_ERR);
    pub const LOC_QP_OP_ERR: WcStatus = WcStatus(wc_status::LOC_QP_OP_ERR);
    pub const LOC_PROT_ERR: WcStatus = WcStatus(wc_status::LOC_PROT_ERR);
    pub const WR_FLUSH_ERR: WcStatus = WcStatus(wc_status::WR_FLUSH_ERR);
    pub const MW_BIND_ERR: WcStatus = WcStatus(wc_status::MW_BIND_ERR);
    pub const BAD_RESP_ERR: WcStatus = WcStatus(wc_status::BAD_RESP_ERR);
    pub const LOC_ACCESS_ERR: WcStatus = WcStatus(wc_status::LOC_ACCESS_ERR);
    pub const REM_INV_REQ_ERR: WcStatus = WcStatus(wc_status::REM_INV_REQ_ERR);
    pub const REM_ACCESS_ERR: WcStatus = WcStatus(wc_status::REM_ACCESS_ERR);
    pub const REM_OP_ERR: WcStatus = WcStatus(wc_status::REM_OP_ERR);
    pub const RETRY_EXC_ERR: WcStatus = WcStatus(wc_status::RETRY_EXC_ERR);
    pub const RNR_RETRY_EXC_ERR: WcStatus = WcStatus(wc_status::RNR_RETRY_EXC_ERR);
    pub const REM_ABORT_ERR: WcStatus = WcStatus(wc_status::REM_ABORT_ERR);
    pub const FATAL_ERR: WcStatus = WcStatus(wc_status::FATAL_ERR);
    pub const RESP_TIMEOUT_ERR: WcStatus = WcStatus(wc_status::RESP_TIMEOUT_ERR);
    pub const GENERAL_ERR: WcStatus = WcStatus(wc_status::GENERAL_ERR);
}

impl WcStatus {
    /// The libibverbs-style description (`ibv_wc_status_str`).
    pub fn as_str(self) -> &'static str {
        const NAMES: [&str; 22] = [
            "success",
            "local length error",
            "local QP operation error",
            "local EE context operation error",
            "local protection error",
            "Work Request Flushed Error",
            "memory management operation error",
            "bad response error",
            "local access error",
            "remote invalid request error",
            "remote access error",
            "remote operation error",
            "transport retry counter exceeded",
            "RNR retry counter exceeded",
            "local RDD violation error",
            "remote invalid RD request",
            "operation aborted",
            "invalid EE context number",
            "invalid EE context state",
            "fatal error",
            "response timeout error",
            "general error",
        ];
        NAMES.get(self.0 as usize).copied().unwrap_or("unknown")
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), self.0)
    }
}

impl fmt::Debug for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A completion opcode (`enum ib_wc_opcode`); unknown values are kept.
/// `Debug` and `Display` print its name (`RECV`, `RDMA_WRITE`, ...).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct WcOpcode(pub u32);

#[allow(missing_docs)]
impl WcOpcode {
    pub const SEND: WcOpcode = WcOpcode(wc_opcode::SEND);
    pub const RDMA_WRITE: WcOpcode = WcOpcode(wc_opcode::RDMA_WRITE);
    pub const RDMA_READ: WcOpcode = WcOpcode(wc_opcode::RDMA_READ);
    pub const COMP_SWAP: WcOpcode = WcOpcode(wc_opcode::COMP_SWAP);
    pub const FETCH_ADD: WcOpcode = WcOpcode(wc_opcode::FETCH_ADD);
    pub const BIND_MW: WcOpcode = WcOpcode(wc_opcode::BIND_MW);
    pub const LOCAL_INV: WcOpcode = WcOpcode(wc_opcode::LOCAL_INV);
    pub const FLUSH: WcOpcode = WcOpcode(wc_opcode::FLUSH);
    pub const ATOMIC_WRITE: WcOpcode = WcOpcode(wc_opcode::ATOMIC_WRITE);
    pub const RECV: WcOpcode = WcOpcode(wc_opcode::RECV);
    pub const RECV_RDMA_WITH_IMM: WcOpcode = WcOpcode(wc_opcode::RECV_RDMA_WITH_IMM);
}

impl WcOpcode {
    /// The opcode's name as in `enum ib_wc_opcode` without its prefix
    /// (`"SEND"`, `"RECV_RDMA_WITH_IMM"`), or `None` for an unknown value.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            wc_opcode::SEND => "SEND",
            wc_opcode::RDMA_WRITE => "RDMA_WRITE",
            wc_opcode::RDMA_READ => "RDMA_READ",
            wc_opcode::COMP_SWAP => "COMP_SWAP",
            wc_opcode::FETCH_ADD => "FETCH_ADD",
            wc_opcode::BIND_MW => "BIND_MW",
            wc_opcode::LOCAL_INV => "LOCAL_INV",
            wc_opcode::FLUSH => "FLUSH",
            wc_opcode::ATOMIC_WRITE => "ATOMIC_WRITE",
            wc_opcode::RECV => "RECV",
            wc_opcode::RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM",
            _ => return None,
        })
    }
}

impl fmt::Display for WcOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "unknown opcode {}", self.0),
        }
    }
}

impl fmt::Debug for WcOpcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_and_statuses_print_their_names() {
        assert_eq!(format!("{:?}", WcOpcode::RECV), "RECV");
        assert_eq!(format!("{}", WcOpcode::RDMA_WRITE), "RDMA_WRITE");
        assert_eq!(format!("{:?}", WcOpcode(77)), "unknown opcode 77");
        assert_eq!(
            format!("{:?}", WcStatus::WR_FLUSH_ERR),
            "Work Request Flushed Error (5)"
        );
        let mut wc = Wc::default();
        wc.0.opcode = wc_opcode::RECV_RDMA_WITH_IMM;
        assert!(format!("{wc:?}").contains("opcode: RECV_RDMA_WITH_IMM"));
    }

    /// A simulated CQ and channel: one completion arrives at step `arrive`
    /// of the waiter's calls; the channel gets an event only if the CQ was
    /// armed before the arrival (as on a device).
    struct Sim {
        step: u32,
        arrive: u32,
        arrived: bool,
        armed: bool,
        polled: bool,
        event: bool,
        waits: u32,
        timeouts: u32,
    }

    impl Sim {
        fn new(arrive: u32) -> Sim {
            Sim {
                step: 0,
                arrive,
                arrived: false,
                armed: false,
                polled: false,
                event: false,
                waits: 0,
                timeouts: 0,
            }
        }
        fn tick(&mut self) {
            if self.step == self.arrive {
                self.arrived = true;
                if std::mem::take(&mut self.armed) {
                    self.event = true;
                }
            }
            self.step += 1;
        }
    }

    impl Waiter for Sim {
        fn poll(&mut self) -> Result<usize> {
            self.tick();
            let n = usize::from(self.arrived && !self.polled);
            if n == 1 {
                self.polled = true;
            }
            Ok(n)
        }
        fn arm(&mut self) -> Result<()> {
            self.tick();
            self.armed = true;
            Ok(())
        }
        fn wait(&mut self) -> Result<bool> {
            self.waits += 1;
            // Time passes while asleep: the completion may land now.
            self.tick();
            let woke = std::mem::take(&mut self.event);
            self.timeouts += u32::from(!woke);
            Ok(woke)
        }
    }

    #[test]
    fn a_completion_arriving_at_any_point_is_found_without_a_timeout() {
        // Step 0: before the first poll; 1: between the poll and the arm
        // (the race: no event will ever come); 2: between the arm and the
        // second poll; 3: while asleep.
        for arrive in 0..4 {
            let mut sim = Sim::new(arrive);
            assert_eq!(
                await_completions(&mut sim).unwrap(),
                Some(1),
                "arrival at step {arrive}"
            );
            assert!(
                sim.waits <= 1,
                "arrival at step {arrive}: {} waits",
                sim.waits
            );
            // Found without sleeping through the timeout: the race between
            // the first poll and the arm costs nothing.
            assert_eq!(
                sim.timeouts, 0,
                "arrival at step {arrive}: slept until the timeout"
            );
        }
    }

    #[test]
    fn without_the_second_poll_the_race_sleeps_until_the_timeout() {
        // The naive order (poll, arm, sleep) on an arrival between the
        // poll and the arm: the sleep sees no event. This is what the
        // protocol's second poll exists for.
        let mut sim = Sim::new(1);
        assert_eq!(sim.poll().unwrap(), 0);
        sim.arm().unwrap();
        assert!(!sim.wait().unwrap(), "an event despite arming late");
    }

    #[test]
    fn nothing_arriving_times_out() {
        let mut sim = Sim::new(u32::MAX);
        assert_eq!(await_completions(&mut sim).unwrap(), None);
    }
}
