//! A mapped rxe ring: the shared header (`struct rxe_queue_buf`) and its
//! element array, with the index protocol the kernel follows.
//!
//! Indices are stored already masked. A ring of `mask + 1` slots holds at most
//! `mask` elements: it is empty when producer == consumer and full when
//! `(producer + 1) & mask == consumer`. The producer side writes an element and
//! then publishes it with a release store of the producer index; the consumer
//! reads the producer index with acquire before reading elements and hands
//! slots back with a release store of the consumer index. The kernel is the
//! other side of every ring and uses the same protocol.
//!
//! This module is the crate's only user of raw pointers into the rings;
//! with `cmd`, which issues the uverbs commands, it holds all of the
//! crate's `unsafe`. [`Queue::map`] proves the ring geometry once: every
//! masked slot lies inside the mapping (runs use it through a copied
//! `View`, which borrows the `Queue`). The typed rings prove once, at
//! creation, that a slot holds what is written to or
//! read from it: `SendRing` (a send WQE and its
//! SGEs or inline bytes), `RecvRing` (a receive WQE and its SGEs) and
//! `CqRing` (a completion). The indices move only through the named
//! operations of `Producer` (`full`, `push_*`, which advances the
//! producer, and `publish`) and `Consumer` (`empty`, `pop_into`, which
//! advances the consumer, and `publish`), which pick the orderings, as
//! rdma-core's `providers/rxe/rxe_queue.h` does for its C callers. Each
//! element pushed is checked against the ring's limits by the push itself,
//! with the same checks the provider makes anyway, so the per-request path
//! carries no bounds check beyond those.

use std::marker::PhantomData;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rverbs_abi::rxe::{DmaInfo, MmInfo, QueueBuf, RecvWqe, SendWqe, QUEUE_DATA_OFFSET};
use rverbs_abi::wr::{Sge, Wc};
use rverbs_abi::Errno;
use rverbs_provider::check::{check_recv, SendChecks};
use rverbs_provider::wr::{Payload, SendFlags, SendRequest, UdDest, WrOpcode};

use crate::PostError;

const PRODUCER_OFFSET: usize = std::mem::offset_of!(QueueBuf, producer_index);
const CONSUMER_OFFSET: usize = std::mem::offset_of!(QueueBuf, consumer_index);
// Elements of at least 8 bytes are 8-aligned (see `View::slot`).
const _: () = assert!(QUEUE_DATA_OFFSET % 8 == 0);

/// One mapped ring. Unmapped on drop.
#[derive(Debug)]
pub(crate) struct Queue {
    base: NonNull<u8>,
    len: usize,
    mask: u32,
    log2_elem_size: u32,
}

// SAFETY: the mapping is plain shared memory; all index accesses are atomic,
// and element access is serialised by the `&mut` receivers of the queue types.
unsafe impl Send for Queue {}
// SAFETY: `&Queue` only permits atomic index loads; slots are read and
// written only through a `Producer` or `Consumer`, which the typed rings
// hand out from `&mut self`, so one at a time per ring.
unsafe impl Sync for Queue {}

impl Queue {
    /// Maps the ring the kernel described in `mi` on the command fd `fd`,
    /// and checks that its header describes a ring that fits the mapping.
    pub(crate) fn map(fd: BorrowedFd<'_>, mi: &MmInfo) -> Result<Self, Errno> {
        let len = mi.size as usize;
        if len < QUEUE_DATA_OFFSET {
            return Err(Errno::EINVAL);
        }
        let offset = libc::off_t::try_from(mi.offset).map_err(|_| Errno::EINVAL)?;
        // SAFETY: a fresh shared mapping of the kernel's queue object; no
        // existing Rust memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(Errno::EINVAL)?;
        // The header fields are written once by the kernel at creation time;
        // read them once and validate them against the mapping size.
        // SAFETY: the mapping is at least QUEUE_DATA_OFFSET bytes and page aligned.
        let (log2, mask) = unsafe {
            let hdr = base.as_ptr().cast::<QueueBuf>();
            (
                std::ptr::read_volatile(&raw const (*hdr).log2_elem_size),
                std::ptr::read_volatile(&raw const (*hdr).index_mask),
            )
        };
        let q = Queue {
            base,
            len,
            mask,
            log2_elem_size: log2,
        };
        let slots = (mask as u64) + 1;
        let fits = log2 < 16
            && slots.is_power_of_two()
            && (slots << log2) + QUEUE_DATA_OFFSET as u64 <= len as u64;
        if !fits {
            return Err(Errno::EPROTO); // q unmaps on drop
        }
        Ok(q)
    }

    /// The ring as a copyable view for a producer or consumer run: its
    /// geometry in plain fields, which the compiler keeps in registers
    /// across the slot writes of a run (through `&Queue` it reloads them
    /// after each write, which might alias them as far as it knows).
    #[inline(always)]
    fn view(&self) -> View<'_> {
        View {
            base: self.base,
            mask: self.mask,
            log2_elem_size: self.log2_elem_size,
            _queue: PhantomData,
        }
    }

    #[inline(always)]
    fn producer_index(&self) -> &AtomicU32 {
        self.view().producer_index()
    }

    #[inline(always)]
    fn consumer_index(&self) -> &AtomicU32 {
        self.view().consumer_index()
    }

    /// `index_mask`: slots - 1, which is also the ring's capacity.
    #[inline]
    pub(crate) fn mask(&self) -> u32 {
        self.mask
    }

    /// Bytes per element.
    #[inline]
    pub(crate) fn elem_size(&self) -> usize {
        1 << self.log2_elem_size
    }

    /// The producer index now (acquire: the elements before it are
    /// written).
    pub(crate) fn producer_now(&self) -> u32 {
        self.producer_index().load(Ordering::Acquire)
    }

    /// The consumer index now.
    pub(crate) fn consumer_now(&self) -> u32 {
        self.consumer_index().load(Ordering::Acquire)
    }

    /// Number of elements between consumer and producer right now.
    pub(crate) fn fill(&self) -> u32 {
        let p = self.producer_index().load(Ordering::Acquire);
        let c = self.consumer_index().load(Ordering::Acquire);
        p.wrapping_sub(c) & self.mask
    }
}

/// A [`Queue`]'s mapping and geometry, borrowed from it for `'r` (see
/// [`Queue::view`]).
#[derive(Debug, Clone, Copy)]
struct View<'r> {
    base: NonNull<u8>,
    mask: u32,
    log2_elem_size: u32,
    _queue: PhantomData<&'r Queue>,
}

impl<'r> View<'r> {
    /// The shared index at `offset` in the header.
    #[inline(always)]
    fn index(self, offset: usize) -> &'r AtomicU32 {
        // SAFETY: offset is one of the two index offsets inside the header,
        // 4-byte aligned within a page-aligned mapping that the borrowed
        // Queue keeps for 'r.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    #[inline(always)]
    fn producer_index(self) -> &'r AtomicU32 {
        self.index(PRODUCER_OFFSET)
    }

    #[inline(always)]
    fn consumer_index(self) -> &'r AtomicU32 {
        self.index(CONSUMER_OFFSET)
    }

    /// Address of the element at `index` (masked here, so always inside the
    /// mapping). It is 8-aligned when elements are at least 8 bytes, which
    /// the typed rings below check: the data starts 8-aligned in a
    /// page-aligned mapping.
    #[inline(always)]
    fn slot(self, index: u32) -> *mut u8 {
        let off = QUEUE_DATA_OFFSET + (((index & self.mask) as usize) << self.log2_elem_size);
        // SAFETY: `Queue::map` checked that every masked slot lies inside
        // the mapping, which the borrowed Queue keeps for 'r.
        unsafe { self.base.as_ptr().add(off) }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are exactly the mapping made in `map`, and no
        // reference into it outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

/// `Some(room)` with `max_wr` no deeper than `q`, or `EPROTO`: the sizes
/// come from the kernel.
fn check_geometry(q: &Queue, max_wr: u32, room: Option<usize>) -> Result<(), Errno> {
    if room.is_none_or(|room| q.elem_size() < room) || max_wr > q.mask() {
        return Err(Errno::EPROTO);
    }
    Ok(())
}

/// A QP's send ring: each slot holds a [`SendWqe`] followed by up to
/// `max_sge` SGEs or `max_inline` inline bytes, the limits every request is
/// checked against.
#[derive(Debug)]
pub(crate) struct SendRing {
    q: Queue,
    max_wr: u32,
    checks: SendChecks,
}

impl SendRing {
    /// Wraps a mapped send ring of granted depth `max_wr` for a QP of type
    /// `qp_type` taking `max_sge` SGEs or `max_inline` inline bytes per
    /// request, if its slots hold that much.
    pub(crate) fn new(
        q: Queue,
        qp_type: u8,
        max_wr: u32,
        max_sge: u32,
        max_inline: u32,
    ) -> Result<Self, Errno> {
        let room = (max_sge as usize)
            .checked_mul(size_of::<Sge>())
            .map(|sges| sges.max(max_inline as usize))
            .and_then(|body| body.checked_add(size_of::<SendWqe>()));
        check_geometry(&q, max_wr, room)?;
        // rxe has memory windows (type 1 and type 2B) on every kernel.
        let mut checks = SendChecks::new(qp_type, max_sge, max_inline);
        checks.allow_mw();
        Ok(SendRing { q, max_wr, checks })
    }

    /// The mapped ring.
    pub(crate) fn queue(&self) -> &Queue {
        &self.q
    }

    /// The granted depth.
    pub(crate) fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// The checks every request is run through.
    pub(crate) fn checks(&self) -> &SendChecks {
        &self.checks
    }

    /// Accepts `op` (ATOMIC_WRITE, FLUSH: see [`SendChecks::allow`]) if a
    /// slot can hold it: an ATOMIC_WRITE's 8 bytes follow the header, where
    /// SGEs and inline data go, so its slots must have that much room
    /// after the header whatever `max_sge` and `max_inline` are. Returns
    /// whether `op` is accepted.
    pub(crate) fn allow(&mut self, op: WrOpcode) -> bool {
        let room = match op {
            WrOpcode::AtomicWrite => size_of::<SendWqe>() + 8,
            WrOpcode::Flush => size_of::<SendWqe>(),
            _ => return self.checks.allows(op),
        };
        if self.q.elem_size() < room {
            return false;
        }
        self.checks.allow(op);
        true
    }

    /// See [`SendChecks::set_ud_mtu`] (the slot limits do not change).
    pub(crate) fn set_ud_mtu(&mut self, mtu: u32) {
        self.checks.set_ud_mtu(mtu);
    }

    /// Starts producing into the ring (`&mut`: we are its only producer).
    #[inline(always)]
    pub(crate) fn producer(&mut self) -> Producer<'_, &SendChecks> {
        Producer::new(&self.q, self.max_wr, &self.checks)
    }
}

/// A receive ring (a QP's RQ or an SRQ's): each slot holds a [`RecvWqe`]
/// followed by up to `max_sge` SGEs.
#[derive(Debug)]
pub(crate) struct RecvRing {
    q: Queue,
    max_wr: u32,
    max_sge: u32,
}

/// A receive ring's limit, as [`Producer`] carries it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvLimits {
    max_sge: u32,
}

impl RecvRing {
    /// Wraps a mapped receive ring of granted depth `max_wr` whose elements
    /// hold `max_sge` SGEs, if they do.
    pub(crate) fn new(q: Queue, max_wr: u32, max_sge: u32) -> Result<Self, Errno> {
        let room = (max_sge as usize)
            .checked_mul(size_of::<Sge>())
            .and_then(|sges| sges.checked_add(size_of::<RecvWqe>()));
        check_geometry(&q, max_wr, room)?;
        Ok(RecvRing { q, max_wr, max_sge })
    }

    /// The mapped ring.
    pub(crate) fn queue(&self) -> &Queue {
        &self.q
    }

    /// The granted depth.
    pub(crate) fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// Starts producing into the ring (`&mut`: we are its only producer).
    #[inline(always)]
    pub(crate) fn producer(&mut self) -> Producer<'_, RecvLimits> {
        let limits = RecvLimits {
            max_sge: self.max_sge,
        };
        Producer::new(&self.q, self.max_wr, limits)
    }
}

/// A run of elements produced into a ring whose producer we are, published
/// to the kernel at once by [`Producer::publish`] (not at all if it is
/// dropped instead).
#[derive(Debug)]
pub(crate) struct Producer<'r, L> {
    q: View<'r>,
    /// The ring's limits: its SGE and inline bounds.
    limits: L,
    max_wr: u32,
    /// The producer index when the run started.
    start: u32,
    /// The producer index after the elements pushed so far.
    prod: u32,
    /// The consumer index as last read.
    cons: u32,
}

impl<'r, L> Producer<'r, L> {
    #[inline(always)]
    fn new(q: &'r Queue, max_wr: u32, limits: L) -> Self {
        let q = q.view();
        // Relaxed: we are the only producer, so the index is our own last
        // store. Acquire: slots the kernel released are free to overwrite.
        // The consumer index is read again only when the ring looks full.
        let start = q.producer_index().load(Ordering::Relaxed);
        let cons = q.consumer_index().load(Ordering::Acquire);
        Producer {
            q,
            limits,
            max_wr,
            start,
            prod: start,
            cons,
        }
    }

    /// Whether `max_wr` elements are outstanding: the slot at the producer
    /// index is not free. Refreshes the consumer index (acquire) before
    /// answering yes. `max_wr` is at most the ring's capacity (checked at
    /// creation), so a slot this answers no for is one the kernel neither
    /// reads nor writes until it is published.
    #[inline(always)]
    pub(crate) fn full(&mut self) -> bool {
        let mask = self.q.mask;
        if self.prod.wrapping_sub(self.cons) & mask < self.max_wr {
            return false;
        }
        self.cons = self.q.consumer_index().load(Ordering::Acquire);
        self.prod.wrapping_sub(self.cons) & mask >= self.max_wr
    }

    /// The slot index the next push writes (masked).
    #[inline(always)]
    pub(crate) fn next_slot(&self) -> u32 {
        self.prod & self.q.mask
    }

    /// Elements pushed in this run (fewer than the ring's slots).
    #[inline(always)]
    pub(crate) fn pushed(&self) -> usize {
        (self.prod.wrapping_sub(self.start) & self.q.mask) as usize
    }

    /// Moves past the element just written (not yet visible to the kernel).
    #[inline(always)]
    fn advance_producer(&mut self) {
        self.prod = self.prod.wrapping_add(1) & self.q.mask;
    }

    /// Hands the elements pushed to the kernel: one release store of the
    /// producer index (the element contents happen-before the kernel sees
    /// it), none if nothing was pushed. Returns whether anything was.
    #[inline(always)]
    pub(crate) fn publish(self) -> bool {
        if self.prod == self.start {
            return false;
        }
        self.q.producer_index().store(self.prod, Ordering::Release);
        true
    }
}

/// The bytes of a send WQE's header between `wr.wr_id` and `dma`, which
/// [`Producer::push_send`] zeroes (it writes those two itself).
const ZEROED_FROM: usize = std::mem::offset_of!(SendWqe, wr.reserved);
/// See [`ZEROED_FROM`].
const ZEROED_TO: usize = std::mem::offset_of!(SendWqe, dma);
const _: () = {
    assert!(std::mem::offset_of!(SendWqe, wr.wr_id) == 0 && ZEROED_FROM == 8);
    assert!(ZEROED_TO + size_of::<DmaInfo>() == size_of::<SendWqe>());
};

impl Producer<'_, &SendChecks> {
    /// Pushes the send request `wr` unless the ring is full
    /// ([`PostError::QueueFull`]) or `wr` fails the ring's checks
    /// ([`SendChecks::check`], with `has_dest` for a UD destination): the
    /// SGEs or inline bytes are copied after the header, whose `wr_id`,
    /// `dma` (length, SGE count) and zeroed rest are written here, then
    /// [`crate::wqe::build_wqe`] sets the opcode's fields (called here, not
    /// passed in: a builder passed as a closure or function item was left
    /// out of line in the C ABI's `ibv_post_send`). On error nothing is
    /// pushed.
    #[inline(always)]
    pub(crate) fn push_send<R: SendRequest + ?Sized>(
        &mut self,
        wr: &R,
        has_dest: impl FnOnce(&UdDest<'_>) -> bool,
    ) -> Result<(), PostError> {
        if self.full() {
            return Err(PostError::QueueFull);
        }
        let length = self.limits.check(wr, has_dest)?;
        let slot = self.q.slot(self.prod);
        // SAFETY: `slot` is free (`full` said no: the kernel neither reads
        // nor writes it until it is published), 8-aligned, and
        // `SendRing::new` checked it holds a SendWqe plus max_sge SGEs or
        // max_inline bytes, which `check` just bounded this request's SGEs
        // and inline bytes by (with the same limits), or, for an
        // ATOMIC_WRITE, 8 bytes after the header (`SendRing::allow`, the
        // only way `check` accepts one). The WQE is built in
        // place (no copy through the stack): every byte of the header is
        // written here, `wr_id` and `dma` with their values and what lies
        // between them zeroed, before `build` sets the opcode's fields.
        unsafe {
            std::ptr::write_bytes(slot.add(ZEROED_FROM), 0, ZEROED_TO - ZEROED_FROM);
            let wqe = &mut *slot.cast::<SendWqe>();
            let tail = slot.add(size_of::<SendWqe>());
            let (num_sge, inline_flag) = match wr.payload() {
                Payload::Sge(sges) => {
                    copy_sges(sges, tail.cast::<Sge>());
                    // An ATOMIC_WRITE (no SGEs: `check` refuses others)
                    // carries its 8 bytes where inline data goes (rxe's
                    // `dma.atomic_wr`). `check` accepted it only because
                    // `SendRing::allow` allowed it, which it does only
                    // when a slot holds 8 bytes after the header.
                    if let Some(v) = wr.atomic_write_value() {
                        tail.cast::<[u8; 8]>().write(v);
                    }
                    // At most max_sge (checked), a u32.
                    (sges.len() as u32, 0)
                }
                Payload::Inline(bufs) => {
                    let mut at = tail;
                    for b in bufs {
                        std::ptr::copy_nonoverlapping(b.as_ptr(), at, b.len());
                        at = at.add(b.len());
                    }
                    (0, SendFlags::INLINE.bits())
                }
            };
            wqe.wr.wr_id = wr.wr_id();
            // `check` bounded the length by MAX_MSG, a u32.
            wqe.dma = DmaInfo {
                length: length as u32,
                resid: length as u32,
                cur_sge: 0,
                num_sge,
                sge_offset: 0,
                reserved: 0,
            };
            crate::wqe::build_wqe(wqe, wr, inline_flag);
        }
        self.advance_producer();
        Ok(())
    }
}

impl Producer<'_, RecvLimits> {
    /// Pushes a receive into `sges` unless the ring is full
    /// ([`PostError::RecvQueueFull`]) or `sges` fails [`check_recv`] against
    /// the ring's SGE limit: the header `header` makes of the total length
    /// is written, then the SGEs. On error nothing is pushed.
    #[inline(always)]
    pub(crate) fn push_recv(
        &mut self,
        sges: &[Sge],
        header: impl FnOnce(u64) -> RecvWqe,
    ) -> Result<(), PostError> {
        if self.full() {
            return Err(PostError::RecvQueueFull);
        }
        let length = check_recv(sges, self.limits.max_sge)?;
        let hdr = header(length);
        let slot = self.q.slot(self.prod);
        // SAFETY: a free slot (`full` said no), 8-aligned, which
        // `RecvRing::new` checked holds a RecvWqe plus max_sge SGEs;
        // `check_recv` just bounded `sges` by max_sge.
        unsafe {
            std::ptr::write(slot.cast::<RecvWqe>(), hdr);
            copy_sges(sges, slot.add(size_of::<RecvWqe>()).cast::<Sge>());
        }
        self.advance_producer();
        Ok(())
    }
}

/// Copies `sges` to `dst`. One SGE, the common case, is a single 16-byte
/// store instead of a call to `memcpy`.
///
/// # Safety
/// `dst` must be valid for writing `sges.len()` SGEs, 8-byte aligned, and
/// not overlap `sges`.
#[inline(always)]
unsafe fn copy_sges(sges: &[Sge], dst: *mut Sge) {
    match sges {
        [] => {}
        // SAFETY: the caller guarantees room for one SGE at `dst`.
        [one] => unsafe { dst.write(*one) },
        // SAFETY: the caller guarantees room for all of them at `dst`.
        _ => unsafe { std::ptr::copy_nonoverlapping(sges.as_ptr(), dst, sges.len()) },
    }
}

/// A completion ring: each slot holds a [`Wc`]. The mapping is shared
/// with the CQ's [`crate::stale::CqShared`], which reads its producer
/// index when a QP is reset.
#[derive(Debug)]
pub(crate) struct CqRing {
    q: Arc<Queue>,
}

impl CqRing {
    /// Wraps a mapped completion ring if its slots hold a completion each.
    pub(crate) fn new(q: Queue) -> Result<Self, Errno> {
        if q.elem_size() < size_of::<Wc>() {
            return Err(Errno::EPROTO);
        }
        Ok(CqRing { q: Arc::new(q) })
    }

    /// The mapped ring.
    pub(crate) fn queue(&self) -> &Queue {
        &self.q
    }

    /// The mapped ring, to share.
    pub(crate) fn shared_queue(&self) -> Arc<Queue> {
        Arc::clone(&self.q)
    }

    /// Starts consuming from the ring (`&mut`: we are its only consumer).
    #[inline(always)]
    pub(crate) fn consumer(&mut self) -> Consumer<'_> {
        // Relaxed: we are the only consumer, so the index is our own last
        // store. Acquire: the kernel's CQE writes happen-before its release
        // store of the producer index, so they are visible once we see it.
        let cons = self.q.consumer_index().load(Ordering::Relaxed);
        let prod = self.q.producer_index().load(Ordering::Acquire);
        Consumer {
            q: self.q.view(),
            cons,
            prod,
        }
    }
}

/// A run of completions consumed from a ring whose consumer we are, handed
/// back to the kernel at once by [`Consumer::publish`]. It sees the
/// completions produced when it started.
#[derive(Debug)]
pub(crate) struct Consumer<'r> {
    q: View<'r>,
    cons: u32,
    prod: u32,
}

impl Consumer<'_> {
    /// Whether every completion seen is consumed.
    #[inline(always)]
    pub(crate) fn empty(&self) -> bool {
        self.cons == self.prod
    }

    /// The (masked) index of the next completion to read.
    pub(crate) fn index(&self) -> u32 {
        self.cons
    }

    /// Moves past the completion just read.
    #[inline(always)]
    fn advance_consumer(&mut self) {
        self.cons = self.cons.wrapping_add(1) & self.q.mask;
    }

    /// Copies the completion at the consumer index into `out` and advances
    /// past it; `false` (and `out` untouched) when [`Consumer::empty`].
    /// Written straight into the caller's slot: no `Option<Wc>` copy.
    #[inline(always)]
    pub(crate) fn pop_into(&mut self, out: &mut Wc) -> bool {
        if self.empty() {
            return false;
        }
        // SAFETY: the slot lies inside the ring, holds at least
        // size_of::<Wc>() bytes (checked in `CqRing::new`, so it is also
        // 8-aligned), any bytes are a valid Wc, and the kernel produced it
        // (acquire, in `consumer`) and will not rewrite it until we publish
        // a consumer index past it.
        *out = unsafe { std::ptr::read(self.q.slot(self.cons).cast::<Wc>()) };
        self.advance_consumer();
        true
    }

    /// Hands the slots read back to the kernel: one release store of the
    /// consumer index (our reads complete before the kernel may reuse
    /// them). Worth calling only if something was read.
    #[inline(always)]
    pub(crate) fn publish(self) {
        self.q.consumer_index().store(self.cons, Ordering::Release);
    }
}
