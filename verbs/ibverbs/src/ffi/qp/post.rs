//! The data path of the C library: the context operations behind
//! `verbs.h`'s inline `ibv_post_send`, `ibv_post_recv` and
//! `ibv_post_srq_recv`, and how a program's chain of requests becomes
//! `rverbs` work requests (borrowing its scatter/gather lists in place, up
//! to [`BATCH`] per doorbell).

use super::*;

/// `ibv_context_ops.post_send`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
/// `ibv_context_ops.post_recv`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
/// `ibv_context_ops.post_srq_recv`.
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut IbvSrq, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;

/// Work requests handed to the provider at once (one doorbell).
pub const BATCH: usize = 16;

/// Up to [`BATCH`] work requests built in place for one doorbell, each
/// with the program's request it came from. Nothing is initialised until
/// pushed, so posting one request builds one, not sixteen.
pub(in crate::ffi) struct Batch<W, C> {
    wrs: [MaybeUninit<W>; BATCH],
    from: [MaybeUninit<*mut C>; BATCH],
    /// How many are written (at most BATCH).
    n: usize,
}

impl<W, C> Batch<W, C> {
    pub(in crate::ffi) fn new() -> Self {
        Batch {
            wrs: [const { MaybeUninit::uninit() }; BATCH],
            from: [const { MaybeUninit::uninit() }; BATCH],
            n: 0,
        }
    }

    /// Adds `wr`, built from the program's request `from`. The caller
    /// flushes and clears a full batch before the next push (a push to a
    /// full one panics on the bounds check: caught at the C boundary).
    pub(in crate::ffi) fn push(&mut self, wr: W, from: *mut C) {
        self.wrs[self.n].write(wr);
        self.from[self.n].write(from);
        self.n += 1;
    }

    /// The next slot, for a request to be built in place (then
    /// [`Batch::commit`]); a full batch panics on the bounds check, as
    /// [`Batch::push`].
    pub(in crate::ffi) fn slot(&mut self) -> &mut MaybeUninit<W> {
        &mut self.wrs[self.n]
    }

    /// Counts the request just written into [`Batch::slot`], built from
    /// the program's request `from`.
    ///
    /// # Safety
    /// The slot was written since the last push, commit or clear.
    pub(in crate::ffi) unsafe fn commit(&mut self, from: *mut C) {
        self.from[self.n].write(from);
        self.n += 1;
    }

    pub(in crate::ffi) fn is_full(&self) -> bool {
        self.n == BATCH
    }

    /// The requests pushed since the last clear.
    pub(in crate::ffi) fn wrs(&self) -> &[W] {
        // SAFETY: the first `n` slots were written (by `push`, or `slot`
        // then `commit`); MaybeUninit<W> has W's layout.
        unsafe { std::slice::from_raw_parts(self.wrs.as_ptr().cast::<W>(), self.n) }
    }

    /// The program's requests they came from, in the same order.
    pub(in crate::ffi) fn from(&self) -> &[*mut C] {
        // SAFETY: as in `wrs`.
        unsafe { std::slice::from_raw_parts(self.from.as_ptr().cast::<*mut C>(), self.n) }
    }

    pub(in crate::ffi) fn clear(&mut self) {
        self.n = 0;
    }
}
/// Most gather entries of one inline send.
const INLINE_SGES: usize = 16;

/// The scatter/gather list of a work request, borrowed in place.
///
/// # Safety
/// `sg_list` points to `num_sge` readable `struct ibv_sge` that stay
/// unchanged while the slice lives (the caller of a post function
/// passes them so).
unsafe fn sges<'a>(sg_list: *const Sge, num_sge: c_int) -> Result<&'a [Sge], c_int> {
    let n = usize::try_from(num_sge).map_err(|_| libc::EINVAL)?;
    if n == 0 {
        return Ok(&[]);
    }
    if sg_list.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: per the contract; ibv_sge and Sge have one layout
    // (tests/layout.rs) and any bits are a valid Sge.
    Ok(unsafe { std::slice::from_raw_parts(sg_list, n) })
}

/// The errno a refused post reports (libibverbs' providers: `ENOMEM`
/// for a full queue, `EINVAL` for a malformed request).
pub(in crate::ffi) fn post_errno(e: &PostError) -> c_int {
    match e {
        PostError::QueueFull | PostError::RecvQueueFull | PostError::SrqFull => libc::ENOMEM,
        PostError::Doorbell(errno) => errno.raw(),
        PostError::OpcodeUnsupported(_) => libc::EOPNOTSUPP,
        _ => libc::EINVAL,
    }
}

/// The errno of a refused post.
#[cold]
#[inline(never)]
fn post_error_errno(f: &PostFailed) -> c_int {
    post_errno(&f.error())
}

/// Posts `wrs` (their C requests in `from`) to the send queue; on
/// refusal the C request to report and the errno.
#[inline(always)]
pub(in crate::ffi) fn flush_send(
    qp: &mut Qp,
    wrs: &[SendWr<'_>],
    from: &[*mut IbvSendWr],
) -> Result<(), (*mut IbvSendWr, c_int)> {
    if wrs.is_empty() {
        return Ok(());
    }
    qp.post_send(wrs).map_err(|f| {
        (
            from.get(f.index()).copied().unwrap_or(from[0]),
            post_error_errno(&f),
        )
    })
}

/// The flags of `IBV_SEND_*` this library takes.
const SEND_FLAGS: u32 = 0xf;
/// `IBV_SEND_INLINE`.
const IBV_SEND_INLINE: u32 = 1 << 3;

/// Writes into `out` the `rverbs` work request for the C one `w` with
/// payload `payload` (its gather list, or its bytes inline); `out` is
/// written only on success.
///
/// # Safety
/// `w.wr.ud.ah` is a live AH of this library when the QP is UD; for a
/// BIND_MW, `w.bind_mw.mw` is a live window and `w.bind_mw.bind_info.mr`
/// NULL or a live MR of this library.
unsafe fn send_wr<'a>(
    w: &'a IbvSendWr,
    sg: &'a [Sge],
    payload: Payload<'a>,
    ud: bool,
    out: &mut MaybeUninit<SendWr<'a>>,
) -> Result<(), c_int> {
    const RDMA_WRITE: c_int = 0;
    const RDMA_WRITE_WITH_IMM: c_int = 1;
    const SEND: c_int = 2;
    const SEND_WITH_IMM: c_int = 3;
    const RDMA_READ: c_int = 4;
    const ATOMIC_CMP_AND_SWP: c_int = 5;
    const ATOMIC_FETCH_AND_ADD: c_int = 6;
    const LOCAL_INV: c_int = 7;
    const BIND_MW: c_int = 8;
    const SEND_WITH_INV: c_int = 9;
    let flags =
        SendFlags::from_bits(w.send_flags & SEND_FLAGS & !IBV_SEND_INLINE).ok_or(libc::EINVAL)?;
    if w.send_flags & !SEND_FLAGS != 0 {
        // IBV_SEND_IP_CSUM: raw-packet QPs only, which this library lacks.
        return Err(libc::EINVAL);
    }
    let imm = u32::from_be(w.imm_data);
    // SAFETY: every arm of the union is plain integers (and, for UD, a
    // pointer read as a value); any bits are valid for each.
    let (rdma, atomic) = unsafe { (w.wr.rdma, w.wr.atomic) };
    let one_sge = || match sg {
        [s] => Ok(s),
        _ => Err(libc::EINVAL),
    };
    let wr = match w.opcode {
        SEND => opcode::Send::with_payload(w.wr_id, payload).build(),
        SEND_WITH_IMM => opcode::Send::with_payload(w.wr_id, payload)
            .imm(imm)
            .build(),
        SEND_WITH_INV => opcode::Send::with_payload(w.wr_id, payload)
            .invalidate(w.imm_data)
            .build(),
        RDMA_WRITE => {
            opcode::Write::with_payload(w.wr_id, payload, rdma.remote_addr, rdma.rkey).build()
        }
        RDMA_WRITE_WITH_IMM => {
            opcode::Write::with_payload(w.wr_id, payload, rdma.remote_addr, rdma.rkey)
                .imm(imm)
                .build()
        }
        RDMA_READ => SendWr::rdma_read(w.wr_id, sg, rdma.remote_addr, rdma.rkey),
        ATOMIC_CMP_AND_SWP => SendWr::cmp_swap(
            w.wr_id,
            one_sge()?,
            atomic.remote_addr,
            atomic.rkey,
            atomic.compare_add,
            atomic.swap,
        ),
        ATOMIC_FETCH_AND_ADD => SendWr::fetch_add(
            w.wr_id,
            one_sge()?,
            atomic.remote_addr,
            atomic.rkey,
            atomic.compare_add,
        ),
        LOCAL_INV => SendWr::local_inv(w.wr_id, w.imm_data),
        // SAFETY: the union's bind_mw member, plain values and pointers
        // read as values; the window and MR are live (ibv_post_send's
        // contract, as libibverbs trusts them).
        BIND_MW => unsafe {
            let b = w.bind_mw;
            crate::ffi::mw::bind_request(w.wr_id, b.mw, b.rkey, &b.bind_info)?
        },
        // TSO, ATOMIC_WRITE and the driver opcodes.
        10 | 11 | 15 => return Err(libc::EOPNOTSUPP),
        _ => return Err(libc::EINVAL),
    };
    let mut wr = wr.flags(flags);
    if ud {
        // SAFETY: union read as above.
        let u = unsafe { w.wr.ud };
        // SAFETY: forwarded from this function's contract.
        let ah = unsafe { ah_rec(u.ah) }.ok_or(libc::EINVAL)?;
        wr = wr.dest(ah.ah.dest(u.remote_qpn, u.remote_qkey));
    }
    // Written in place: a work request is 112 bytes, and moving it out
    // through a Result and into the batch cost more than building it.
    out.write(wr);
    Ok(())
}

/// A C send request that the provider reads in place ([`SendRequest`]):
/// a lone request of one of the common opcodes (RDMA WRITE and SEND, with
/// or without immediate, RDMA READ, the two atomics) with a gather list,
/// its opcode, gather list and UD destination decoded once. Everything
/// else goes through [`send_wr`].
struct CSendWr<'a> {
    w: &'a IbvSendWr,
    opcode: WrOpcode,
    sg: &'a [Sge],
    /// The UD destination's AH (UD QPs only), checked live at decoding;
    /// the destination itself is read when asked for (most QPs have none,
    /// and a smaller view stays in registers).
    ah: Option<&'a AhRec>,
}

/// The `IBV_SEND_*` flags a [`CSendWr`] may carry: FENCE, SIGNALED,
/// SOLICITED (not INLINE, whose bytes are copied through [`send_wr`]).
const PLAIN_SEND_FLAGS: u32 = 0x7;

impl<'a> CSendWr<'a> {
    /// The view of `w` with gather list `sg`, if it is a request this view
    /// takes (else `None`: [`send_wr`] decodes it, and reports its errors).
    ///
    /// # Safety
    /// `w.wr.ud.ah` is a live AH of this library when `ud`.
    #[inline(always)]
    unsafe fn new(w: &'a IbvSendWr, sg: &'a [Sge], ud: bool) -> Option<Self> {
        if w.send_flags & !PLAIN_SEND_FLAGS != 0 {
            return None;
        }
        // libibverbs' IBV_WR_* numbers of these opcodes are the kernel's,
        // which WrOpcode's discriminants are.
        let opcode = match w.opcode {
            0 => WrOpcode::RdmaWrite,
            1 => WrOpcode::RdmaWriteWithImm,
            2 => WrOpcode::Send,
            3 => WrOpcode::SendWithImm,
            4 => WrOpcode::RdmaRead,
            5 => WrOpcode::AtomicCmpAndSwp,
            6 => WrOpcode::AtomicFetchAndAdd,
            _ => return None,
        };
        let ah = if ud {
            // SAFETY: every arm of the union is plain integers or a
            // pointer read as a value; the AH is live (this function's
            // contract).
            Some(unsafe { ah_rec(w.wr.ud.ah) }?)
        } else {
            None
        };
        Some(CSendWr { w, opcode, sg, ah })
    }
}

// SAFETY: the opcode, gather list and AH were decoded once and are used
// as stored; the other fields are read from the C request,
// which the caller of ibv_post_send leaves unchanged during the call (its
// contract).
unsafe impl SendRequest for CSendWr<'_> {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.w.wr_id
    }
    #[inline(always)]
    fn opcode(&self) -> WrOpcode {
        self.opcode
    }
    #[inline(always)]
    fn send_flags(&self) -> SendFlags {
        SendFlags::from_bits_truncate(self.w.send_flags & PLAIN_SEND_FLAGS)
    }
    #[inline(always)]
    fn imm_data(&self) -> u32 {
        if self.opcode.has_imm() {
            u32::from_be(self.w.imm_data)
        } else {
            0
        }
    }
    #[inline(always)]
    fn payload(&self) -> Payload<'_> {
        Payload::Sge(self.sg)
    }
    #[inline(always)]
    fn remote_addr(&self) -> u64 {
        if self.opcode.is_rdma() || self.opcode.is_atomic() {
            // SAFETY: plain integers in every arm; `remote_addr` leads the
            // rdma and atomic arms alike.
            unsafe { self.w.wr.rdma.remote_addr }
        } else {
            0
        }
    }
    #[inline(always)]
    fn rkey(&self) -> u32 {
        // SAFETY: plain integers in every arm.
        unsafe {
            if self.opcode.is_atomic() {
                self.w.wr.atomic.rkey
            } else if self.opcode.is_rdma() {
                self.w.wr.rdma.rkey
            } else {
                0
            }
        }
    }
    #[inline(always)]
    fn compare_add(&self) -> u64 {
        if self.opcode.is_atomic() {
            // SAFETY: plain integers in every arm.
            unsafe { self.w.wr.atomic.compare_add }
        } else {
            0
        }
    }
    #[inline(always)]
    fn swap(&self) -> u64 {
        if self.opcode == WrOpcode::AtomicCmpAndSwp {
            // SAFETY: plain integers in every arm.
            unsafe { self.w.wr.atomic.swap }
        } else {
            0
        }
    }
    #[inline(always)]
    fn ud_dest(&self) -> Option<UdDest<'_>> {
        let ah = self.ah?;
        // SAFETY: plain integers (and a pointer read as a value) in every
        // arm; `ah` was decoded from this same arm.
        let u = unsafe { self.w.wr.ud };
        Some(ah.ah.dest(u.remote_qpn, u.remote_qkey))
    }
}

/// The requests of a C chain, from its head, as [`CSendWr`]s, up to the
/// first that is not one (or whose gather list is malformed): `cur` is
/// then that request, which the caller posts the general way.
struct CChain<'a> {
    cur: *mut IbvSendWr,
    ud: bool,
    _chain: std::marker::PhantomData<&'a IbvSendWr>,
}

impl CChain<'_> {
    /// The chain starting at `wr`.
    ///
    /// # Safety
    /// `wr` is null or a chain of readable requests with readable gather
    /// lists and (when `ud`) live AHs of this library, unchanged while the
    /// walk lives (the contract of `ibv_post_send`).
    unsafe fn new(wr: *mut IbvSendWr, ud: bool) -> Self {
        CChain {
            cur: wr,
            ud,
            _chain: std::marker::PhantomData,
        }
    }
}

impl<'a> Iterator for CChain<'a> {
    type Item = CSendWr<'a>;

    #[inline(always)]
    fn next(&mut self) -> Option<CSendWr<'a>> {
        // SAFETY: a readable request of the chain, if not null (`new`).
        let w: &'a IbvSendWr = unsafe { self.cur.as_ref() }?;
        // SAFETY: its gather list is readable (`new`).
        let sg = unsafe { sges(w.sg_list, w.num_sge) }.ok()?;
        // SAFETY: its AH is live (`new`).
        let view = unsafe { CSendWr::new(w, sg, self.ud) }?;
        self.cur = w.next;
        Some(view)
    }
}

/// The request `index` links after `wr` (or the last one, if the chain is
/// shorter): the one a refused post names.
///
/// # Safety
/// `wr` is a chain of readable requests.
#[cold]
#[inline(never)]
unsafe fn nth_wr(wr: *mut IbvSendWr, index: usize) -> *mut IbvSendWr {
    let mut at = wr;
    for _ in 0..index {
        // SAFETY: a readable request of the chain (the contract).
        match unsafe { at.as_ref() } {
            Some(w) if !w.next.is_null() => at = w.next,
            _ => break,
        }
    }
    at
}

/// `ibv_context_ops.post_send`: posts the chain `wr`; 0, or the errno
/// with `*bad_wr` the first request not posted.
///
/// # Safety
/// `qp` is a live QP of this library; `wr` is a chain of readable
/// requests whose gather lists (and inline bytes) are readable and whose
/// AHs are live; `bad_wr` points to a writable pointer.
pub unsafe extern "C" fn post_send(
    qp: *mut IbvQp,
    wr: *mut IbvSendWr,
    bad_wr: *mut *mut IbvSendWr,
) -> c_int {
    hot(|| {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { qp_rec(qp) }) else {
            return libc::EINVAL;
        };
        let ud = rec.ud;
        let mut q = rec.qp.lock();
        let fail = |at: *mut IbvSendWr, e: c_int| {
            if !bad_wr.is_null() {
                // SAFETY: writable per the contract.
                unsafe { *bad_wr = at };
            }
            e
        };
        // SAFETY: a readable request of the chain (the contract), if any.
        if let Some(w) = unsafe { wr.as_ref() } {
            if w.next.is_null() {
                // One request, the common case: read in place by the
                // provider when it is a plain one.
                // SAFETY: its gather list is readable (the contract).
                let sg = match unsafe { sges(w.sg_list, w.num_sge) } {
                    Ok(s) => s,
                    Err(e) => return fail(wr, e),
                };
                // SAFETY: its AH is live (the contract).
                if let Some(view) = unsafe { CSendWr::new(w, sg, ud) } {
                    return match q.post_send_request(&view) {
                        Ok(()) => 0,
                        Err(e) => fail(wr, post_error_errno(&e)),
                    };
                }
            }
        }
        // A chain: its plain requests read in place, as one chain...
        // SAFETY: forwarded from this function's contract.
        let mut chain = unsafe { CChain::new(wr, ud) };
        let mut cur = match q.post_send_iter(&mut chain) {
            Ok(()) => chain.cur,
            // Nothing posted: the general way posts from the head again
            // and reports what it finds there (an opcode it refuses as
            // such even on a QP that may not post yet).
            Err(f) if f.index() == 0 => wr,
            Err(f) => {
                // SAFETY: a chain of readable requests (the contract).
                return fail(unsafe { nth_wr(wr, f.index()) }, post_error_errno(&f));
            }
        };
        // ...then, from the first request that is not plain (inline, a
        // memory-window operation, malformed), the general way.
        let mut batch = Batch::new();
        while !cur.is_null() {
            // SAFETY: a readable request of the chain (the contract).
            let w = unsafe { &*cur };
            // SAFETY: its gather list is readable (the contract).
            let sg = match unsafe { sges(w.sg_list, w.num_sge) } {
                Ok(s) => s,
                Err(e) => {
                    if let Err((at, e2)) = flush_send(&mut q, batch.wrs(), batch.from()) {
                        return fail(at, e2);
                    }
                    return fail(cur, e);
                }
            };
            if w.send_flags & IBV_SEND_INLINE != 0 {
                // Inline bytes are copied at post time: post what is
                // batched, then this one on its own.
                if let Err((at, e)) = flush_send(&mut q, batch.wrs(), batch.from()) {
                    return fail(at, e);
                }
                batch.clear();
                if sg.len() > INLINE_SGES {
                    return fail(cur, libc::EINVAL);
                }
                let mut bufs = [IoSlice::new(&[]); INLINE_SGES];
                for (b, s) in bufs.iter_mut().zip(sg) {
                    let Ok(len) = usize::try_from(s.length) else {
                        return fail(cur, libc::EINVAL);
                    };
                    if len > 0 {
                        // SAFETY: an inline request's gather entries name
                        // readable bytes of the program's (the contract);
                        // they are only read, during this call.
                        *b = IoSlice::new(unsafe {
                            std::slice::from_raw_parts(s.addr as usize as *const u8, len)
                        });
                    }
                }
                let payload = Payload::Inline(&bufs[..sg.len()]);
                // SAFETY: its AH is live (the contract).
                let mut one = MaybeUninit::uninit();
                // SAFETY: its AH is live (the contract).
                if let Err(e) = unsafe { send_wr(w, sg, payload, ud, &mut one) } {
                    return fail(cur, e);
                }
                // SAFETY: send_wr wrote it (it returned Ok).
                let one = unsafe { one.assume_init() };
                if let Err((_, e)) = flush_send(&mut q, &[one], &[cur]) {
                    return fail(cur, e);
                }
            } else {
                // SAFETY: its AH is live (the contract).
                match unsafe { send_wr(w, sg, Payload::Sge(sg), ud, batch.slot()) } {
                    // SAFETY: send_wr wrote the slot (it returned Ok).
                    Ok(()) => unsafe { batch.commit(cur) },
                    Err(e) => {
                        if let Err((at, e2)) = flush_send(&mut q, batch.wrs(), batch.from()) {
                            return fail(at, e2);
                        }
                        return fail(cur, e);
                    }
                }
                if batch.is_full() {
                    if let Err((at, e)) = flush_send(&mut q, batch.wrs(), batch.from()) {
                        return fail(at, e);
                    }
                    batch.clear();
                }
            }
            cur = w.next;
        }
        match flush_send(&mut q, batch.wrs(), batch.from()) {
            Ok(()) => 0,
            Err((at, e)) => fail(at, e),
        }
    })
}

/// Posts `batch` (their C requests in `from`) with `post`; on refusal the
/// C request to report and the errno.
#[inline(always)]
fn flush_recv(
    post: &mut impl FnMut(&[RecvWr<'_>]) -> Result<(), PostFailed>,
    batch: &[RecvWr<'_>],
    from: &[*mut IbvRecvWr],
) -> Result<(), (*mut IbvRecvWr, c_int)> {
    if batch.is_empty() {
        return Ok(());
    }
    post(batch).map_err(|f| {
        (
            from.get(f.index()).copied().unwrap_or(from[0]),
            post_error_errno(&f),
        )
    })
}

/// Walks a receive chain, posting up to [`BATCH`] at a time with `post`;
/// 0, or the errno with `*bad_wr` set.
///
/// # Safety
/// `wr` is a chain of readable requests with readable gather lists;
/// `bad_wr` is null or writable.
#[inline(always)]
unsafe fn post_recv_chain<T>(
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
    to: &mut T,
    one: impl FnOnce(&mut T, &RecvWr<'_>) -> Result<(), PostFailed>,
    mut post_to: impl FnMut(&mut T, &[RecvWr<'_>]) -> Result<(), PostFailed>,
) -> c_int {
    let mut post = |b: &[RecvWr<'_>]| post_to(to, b);
    let fail = |at: *mut IbvRecvWr, e: c_int| {
        if !bad_wr.is_null() {
            // SAFETY: writable per the contract.
            unsafe { *bad_wr = at };
        }
        e
    };
    // SAFETY: a readable request of the chain (the contract), if any.
    if let Some(w) = unsafe { wr.as_ref() } {
        if w.next.is_null() {
            // One request, the common case: posted without the batch.
            // SAFETY: its gather list is readable (the contract).
            return match unsafe { sges(w.sg_list, w.num_sge) } {
                Ok(sg) => match one(to, &RecvWr::new(w.wr_id, sg)) {
                    Ok(()) => 0,
                    Err(e) => fail(wr, post_error_errno(&e)),
                },
                Err(e) => fail(wr, e),
            };
        }
    }
    let mut batch = Batch::new();
    let mut cur = wr;
    let mut flush =
        |batch: &[RecvWr<'_>], from: &[*mut IbvRecvWr]| flush_recv(&mut post, batch, from);
    while !cur.is_null() {
        // SAFETY: a readable request of the chain (the contract).
        let w = unsafe { &*cur };
        // SAFETY: its gather list is readable (the contract).
        match unsafe { sges(w.sg_list, w.num_sge) } {
            Ok(sg) => batch.push(RecvWr::new(w.wr_id, sg), cur),
            Err(e) => {
                if let Err((at, e2)) = flush(batch.wrs(), batch.from()) {
                    return fail(at, e2);
                }
                return fail(cur, e);
            }
        }
        if batch.is_full() {
            if let Err((at, e)) = flush(batch.wrs(), batch.from()) {
                return fail(at, e);
            }
            batch.clear();
        }
        cur = w.next;
    }
    match flush(batch.wrs(), batch.from()) {
        Ok(()) => 0,
        Err((at, e)) => fail(at, e),
    }
}

/// `ibv_context_ops.post_recv`: posts the receive chain `wr`; 0, or the
/// errno with `*bad_wr` the first request not posted.
///
/// # Safety
/// `qp` is a live QP of this library; `wr` a chain of readable requests
/// whose gather lists are readable; `bad_wr` points to a writable pointer.
pub unsafe extern "C" fn post_recv(
    qp: *mut IbvQp,
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
) -> c_int {
    hot(|| {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { qp_rec(qp) }) else {
            return libc::EINVAL;
        };
        let mut q = rec.qp.lock();
        // SAFETY: forwarded from this function's contract.
        unsafe {
            post_recv_chain(
                wr,
                bad_wr,
                &mut *q,
                |q, w| q.post_recv_inlined(w),
                |q, b| q.post_recv(b),
            )
        }
    })
}

/// `ibv_context_ops.post_srq_recv`: as [`post_recv`], to an SRQ.
///
/// # Safety
/// As [`post_recv`], with `srq` a live SRQ of this library.
pub unsafe extern "C" fn post_srq_recv(
    srq: *mut IbvSrq,
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
) -> c_int {
    hot(|| {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { srq_rec(srq) }) else {
            return libc::EINVAL;
        };
        let mut s = rec.srq.lock();
        // SAFETY: forwarded from this function's contract.
        unsafe {
            post_recv_chain(
                wr,
                bad_wr,
                &mut *s,
                |s, w| s.post_srq_recv_inlined(w),
                |s, b| s.post_srq_recv(b),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A C request of `opcode` with `send_flags`, its union filled with
    /// distinct values, `sg` as its gather list.
    fn c_wr(opcode: c_int, send_flags: u32, sg: &mut [Sge]) -> IbvSendWr {
        IbvSendWr {
            wr_id: 0x1122_3344_5566_7788,
            next: ptr::null_mut(),
            sg_list: sg.as_mut_ptr(),
            num_sge: sg.len() as c_int,
            opcode,
            send_flags,
            imm_data: 0xdead_beefu32.to_be(),
            wr: WrUnion {
                atomic: WrAtomic {
                    remote_addr: 0xaaaa_0000_0000_0008,
                    compare_add: 0xbbbb,
                    swap: 0xcccc,
                    rkey: 0x1234,
                },
            },
            remote_srqn: 0,
            bind_mw: crate::ffi::mw::IbvSendWrBindMw {
                mw: ptr::null_mut(),
                rkey: 0,
                bind_info: crate::ffi::mw::IbvMwBindInfo {
                    mr: ptr::null_mut(),
                    addr: 0,
                    length: 0,
                    mw_access_flags: 0,
                },
            },
        }
    }

    /// The view the provider reads in place says of every C request it
    /// takes exactly what the general decoding ([`send_wr`]) builds, field
    /// by field; it takes no inline request, no other opcode and no
    /// unknown flag, which the general decoding handles (or refuses).
    #[test]
    fn view_reads_as_the_general_decoding_builds() {
        let mut sg = [Sge {
            addr: 0x1000,
            length: 8,
            lkey: 7,
        }];
        let mut taken = 0;
        for opcode in 0..16 {
            for flags in [0, 1, 2, 4, 7, IBV_SEND_INLINE, 0x10] {
                let w = c_wr(opcode, flags, &mut sg);
                // SAFETY: `w`'s gather list is `sg`, alive and unchanged.
                let list = unsafe { sges(w.sg_list, w.num_sge) }.unwrap();
                // SAFETY: an RC request: no AH is read.
                let view = unsafe { CSendWr::new(&w, list, false) };
                let plain = (0..=6).contains(&opcode) && flags & !PLAIN_SEND_FLAGS == 0;
                assert_eq!(view.is_some(), plain, "opcode {opcode} flags {flags:#x}");
                let Some(view) = view else { continue };
                taken += 1;
                let mut out = MaybeUninit::uninit();
                // SAFETY: an RC request: no AH is read.
                unsafe { send_wr(&w, list, Payload::Sge(list), false, &mut out) }.unwrap();
                // SAFETY: send_wr returned Ok, so it wrote `out`.
                let wr = unsafe { out.assume_init() };
                assert_eq!(view.wr_id(), wr.wr_id());
                assert_eq!(view.opcode(), wr.opcode());
                assert_eq!(view.send_flags(), wr.send_flags());
                assert_eq!(view.imm_data(), wr.imm_data(), "opcode {opcode}");
                assert_eq!(view.remote_addr(), wr.remote_addr(), "opcode {opcode}");
                assert_eq!(view.rkey(), wr.rkey(), "opcode {opcode}");
                assert_eq!(view.compare_add(), wr.compare_add(), "opcode {opcode}");
                assert_eq!(view.swap(), wr.swap(), "opcode {opcode}");
                assert_eq!(view.invalidate_rkey(), wr.invalidate_rkey());
                assert!(view.ud_dest().is_none() && wr.ud_dest().is_none());
                match (view.payload(), wr.payload()) {
                    (Payload::Sge(a), Payload::Sge(b)) => {
                        assert_eq!((a.as_ptr(), a.len()), (b.as_ptr(), b.len()))
                    }
                    _ => panic!("both gather lists"),
                }
            }
        }
        assert_eq!(taken, 7 * 5);
    }
}
