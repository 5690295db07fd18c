//! QPs, SRQs and address handles, and the context operations behind
//! `verbs.h`'s inline `ibv_post_send`, `ibv_post_recv` and
//! `ibv_post_srq_recv`.
//!
//! Posting walks the program's chain of `struct ibv_send_wr` (or
//! `ibv_recv_wr`), turns each into an `rverbs` work request borrowing the
//! program's scatter/gather list in place, and hands them to the provider
//! up to [`BATCH`] at a time (one doorbell per batch): no allocation. A
//! QP's queues sit behind one mutex, since libibverbs lets several
//! threads post to one QP. The first request refused is returned through
//! `bad_wr`, with those before it posted, as libibverbs promises.

use super::lock::Lock;
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::io::IoSlice;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use rverbs::{
    opcode, AccessFlags, Ah, AhAttr, Gid, GlobalRoute, Mtu, Payload, PostError, PostFailed, Qp,
    QpAttr, QpCap, QpCreateFlags, QpInitAttr, QpState, QpType, RecvWr, SendFlags, SendRequest,
    SendWr, Sge, Srq, SrqInitAttr, UdDest, WrOpcode,
};

use super::cq::{cq_rec, IbvCq};
use super::pd::{pd_rec, IbvPd, PdRec};
use super::qp_ex;
pub use super::qp_ex::{create_qp_ex, CreateQpExFn};
use super::{errno_of, guard, hot, null_with, IbvContext};
use crate::copy::{IbvAhAttr, IbvGlobalRoute, IbvQpAttr, IbvQpCap};

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
pub(super) struct Batch<W, C> {
    wrs: [MaybeUninit<W>; BATCH],
    from: [MaybeUninit<*mut C>; BATCH],
    /// How many are written (at most BATCH).
    n: usize,
}

impl<W, C> Batch<W, C> {
    pub(super) fn new() -> Self {
        Batch {
            wrs: [const { MaybeUninit::uninit() }; BATCH],
            from: [const { MaybeUninit::uninit() }; BATCH],
            n: 0,
        }
    }

    /// Adds `wr`, built from the program's request `from`. The caller
    /// flushes and clears a full batch before the next push (a push to a
    /// full one panics on the bounds check: caught at the C boundary).
    pub(super) fn push(&mut self, wr: W, from: *mut C) {
        self.wrs[self.n].write(wr);
        self.from[self.n].write(from);
        self.n += 1;
    }

    /// The next slot, for a request to be built in place (then
    /// [`Batch::commit`]); a full batch panics on the bounds check, as
    /// [`Batch::push`].
    pub(super) fn slot(&mut self) -> &mut MaybeUninit<W> {
        &mut self.wrs[self.n]
    }

    /// Counts the request just written into [`Batch::slot`], built from
    /// the program's request `from`.
    ///
    /// # Safety
    /// The slot was written since the last push, commit or clear.
    pub(super) unsafe fn commit(&mut self, from: *mut C) {
        self.from[self.n].write(from);
        self.n += 1;
    }

    pub(super) fn is_full(&self) -> bool {
        self.n == BATCH
    }

    /// The requests pushed since the last clear.
    pub(super) fn wrs(&self) -> &[W] {
        // SAFETY: the first `n` slots were written (by `push`, or `slot`
        // then `commit`); MaybeUninit<W> has W's layout.
        unsafe { std::slice::from_raw_parts(self.wrs.as_ptr().cast::<W>(), self.n) }
    }

    /// The program's requests they came from, in the same order.
    pub(super) fn from(&self) -> &[*mut C] {
        // SAFETY: as in `wrs`.
        unsafe { std::slice::from_raw_parts(self.from.as_ptr().cast::<*mut C>(), self.n) }
    }

    pub(super) fn clear(&mut self) {
        self.n = 0;
    }
}
/// Most gather entries of one inline send.
const INLINE_SGES: usize = 16;

/// `struct ibv_qp`.
#[repr(C)]
pub struct IbvQp {
    /// The context.
    pub context: *mut IbvContext,
    /// The program's pointer.
    pub qp_context: *mut c_void,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// Where sends complete.
    pub send_cq: *mut IbvCq,
    /// Where receives complete.
    pub recv_cq: *mut IbvCq,
    /// Its SRQ, or NULL.
    pub srq: *mut IbvSrq,
    /// The kernel's handle.
    pub handle: u32,
    /// The QP number.
    pub qp_num: u32,
    /// `enum ibv_qp_state`, as last set by `ibv_modify_qp`.
    pub state: c_int,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
    /// For the program's use (initialised).
    pub mutex: libc::pthread_mutex_t,
    /// For the program's use (initialised).
    pub cond: libc::pthread_cond_t,
    /// Asynchronous events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct IbvSrq {
    /// The context.
    pub context: *mut IbvContext,
    /// The program's pointer.
    pub srq_context: *mut c_void,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// The kernel's handle.
    pub handle: u32,
    /// For the program's use (initialised).
    pub mutex: libc::pthread_mutex_t,
    /// For the program's use (initialised).
    pub cond: libc::pthread_cond_t,
    /// Asynchronous events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

/// `struct ibv_ah`.
#[repr(C)]
pub struct IbvAh {
    /// The context.
    pub context: *mut IbvContext,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// The kernel's handle.
    pub handle: u32,
}

/// The `rdma` arm of `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct WrRdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// The `atomic` arm of `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct WrAtomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// The `ud` arm of `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct WrUd {
    pub ah: *mut IbvAh,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `ibv_send_wr.wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub union WrUnion {
    pub rdma: WrRdma,
    pub atomic: WrAtomic,
    pub ud: WrUd,
}

/// `struct ibv_send_wr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
    pub opcode: c_int,
    pub send_flags: u32,
    /// `imm_data` (network order) or `invalidate_rkey`.
    pub imm_data: u32,
    pub wr: WrUnion,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    /// `bind_mw` (the union's other member, `tso`, is not used here).
    pub bind_mw: super::mw::IbvSendWrBindMw,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut Sge,
    pub num_sge: c_int,
}

/// A QP handed out.
#[repr(C)]
pub(super) struct QpRec {
    /// A `struct ibv_qp_ex` (whose head is the `struct ibv_qp`), written
    /// by `ibv_modify_qp` (`state`) and readable and writable by the
    /// program (`wr_id`, `wr_flags`, ...): never behind a Rust reference.
    pub(super) c: UnsafeCell<qp_ex::IbvQpEx>,
    /// What this library reads of `c`, which it never changes after
    /// creation: `qp_type`, `pd`, `send_cq`, `recv_cq`, `srq`.
    pub(super) ud: bool,
    pd: *mut IbvPd,
    send_cq: *mut IbvCq,
    recv_cq: *mut IbvCq,
    srq: *mut IbvSrq,
    /// Held from `wr_start` to `wr_complete`/`wr_abort`: the extended
    /// interface's bracket, which guards `pending`.
    pub(super) building: std::sync::atomic::AtomicBool,
    /// The work requests built since `wr_start`, for a QP created with
    /// the extended interface (`None` otherwise).
    pub(super) pending: UnsafeCell<Option<qp_ex::Pending>>,
    /// The QP: never dropped with the record, only taken out by
    /// `ibv_destroy_qp` (and put back if the kernel refuses).
    pub(super) qp: Lock<ManuallyDrop<Qp>>,
}

/// An SRQ handed out.
#[repr(C)]
struct SrqRec {
    c: IbvSrq,
    srq: Lock<Srq>,
    /// QPs on it not destroyed.
    users: AtomicUsize,
}

/// An AH handed out.
#[repr(C)]
pub(super) struct AhRec {
    c: IbvAh,
    pub(super) ah: Ah,
}

/// The record behind a QP pointer.
///
/// # Safety
/// `qp` is null or a QP of this library not destroyed while the
/// reference lives (libibverbs' contract).
pub(super) unsafe fn qp_rec<'a>(qp: *mut IbvQp) -> Option<&'a QpRec> {
    // SAFETY: a non-null `qp` is the first field of a live QpRec.
    unsafe { qp.cast::<QpRec>().as_ref() }
}

/// The record behind an SRQ pointer.
///
/// # Safety
/// As [`qp_rec`], for an SRQ.
unsafe fn srq_rec<'a>(srq: *mut IbvSrq) -> Option<&'a SrqRec> {
    // SAFETY: a non-null `srq` is the first field of a live SrqRec.
    unsafe { srq.cast::<SrqRec>().as_ref() }
}

/// The record behind an AH pointer.
///
/// # Safety
/// As [`qp_rec`], for an AH.
pub(super) unsafe fn ah_rec<'a>(ah: *mut IbvAh) -> Option<&'a AhRec> {
    // SAFETY: a non-null `ah` is the first field of a live AhRec.
    unsafe { ah.cast::<AhRec>().as_ref() }
}

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
pub(super) fn post_errno(e: &PostError) -> c_int {
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
pub(super) fn flush_send(
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
            super::mw::bind_request(w.wr_id, b.mw, b.rkey, &b.bind_info)?
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

/// `IBV_QPT_RC`.
const IBV_QPT_RC: c_int = 2;
/// `IBV_QPT_UC`.
const IBV_QPT_UC: c_int = 3;
/// `IBV_QPT_UD`.
const IBV_QPT_UD: c_int = 4;

fn cap_c(c: QpCap) -> IbvQpCap {
    IbvQpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `ibv_create_qp`: a QP in RESET, or NULL with errno; `init_attr.cap`
/// is updated to what was granted.
///
/// # Safety
/// `pd` is a live PD of this library; `init_attr` points to a readable
/// and writable `struct ibv_qp_init_attr` whose CQs (and SRQ) are live
/// objects of this library.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut IbvPd,
    init_attr: *mut IbvQpInitAttr,
) -> *mut IbvQp {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let Some(attr) = (unsafe { init_attr.as_mut() }) else {
            return null_with(libc::EINVAL);
        };
        // SAFETY: forwarded from this function's contract.
        match unsafe { new_qp(pd, attr, None, None) } {
            Ok(rec) => rec.cast::<IbvQp>(),
            Err(e) => null_with(e),
        }
    })
}

/// Creates the QP `attr` describes on `pd` (with kernel creation flags
/// `flags` when given, through the extended command; with the extended
/// work-request interface for the operations `send_ops` when given) and
/// returns its record; `attr.cap` is updated to what was granted.
///
/// # Safety
/// `pd` is NULL or a live PD of this library; the CQs and SRQ `attr`
/// names are NULL or live objects of this library.
pub(super) unsafe fn new_qp(
    pd: *mut IbvPd,
    attr: &mut IbvQpInitAttr,
    flags: Option<QpCreateFlags>,
    send_ops: Option<u64>,
) -> Result<*mut QpRec, c_int> {
    // SAFETY: forwarded from this function's contract.
    let pdr = unsafe { pd_rec(pd) }.ok_or(libc::EINVAL)?;
    let qp_type = match attr.qp_type {
        IBV_QPT_RC => QpType::Rc,
        IBV_QPT_UC => QpType::Uc,
        IBV_QPT_UD => QpType::Ud,
        // RAW_PACKET, XRC_SEND, XRC_RECV, DRIVER.
        8..=10 | 0xff => return Err(libc::EOPNOTSUPP),
        _ => return Err(libc::EINVAL),
    };
    // SAFETY: the CQs and SRQ are live (the contract).
    let (scq, rcq, srq) = unsafe {
        (
            cq_rec(attr.send_cq),
            cq_rec(attr.recv_cq),
            srq_rec(attr.srq),
        )
    };
    let (Some(scq), Some(rcq)) = (scq, rcq) else {
        return Err(libc::EINVAL);
    };
    let cap = QpCap {
        max_send_wr: attr.cap.max_send_wr,
        max_recv_wr: attr.cap.max_recv_wr,
        max_send_sge: attr.cap.max_send_sge,
        max_recv_sge: attr.cap.max_recv_sge,
        max_inline_data: attr.cap.max_inline_data,
    };
    let made = {
        let sguard = scq.cq.lock();
        let same = ptr::eq(scq, rcq);
        let rguard = if same { None } else { Some(rcq.cq.lock()) };
        let recv_cq = rguard.as_deref().unwrap_or(&*sguard);
        let init = QpInitAttr::new(qp_type, &sguard)
            .recv_cq(recv_cq)
            .cap(cap)
            .sq_sig_all(attr.sq_sig_all != 0);
        let srq_guard = srq.map(|s| s.srq.lock());
        match (flags, srq_guard.as_deref()) {
            (Some(f), s) => pdr.pd.create_qp_ex(&init, f, s),
            (None, Some(s)) => pdr.pd.create_qp_with_srq(&init, s),
            (None, None) => pdr.pd.create_qp(&init),
        }
    };
    let qp = made.map_err(|e| errno_of(&e))?;
    let id = qp.event_id();
    let granted = qp.cap();
    attr.cap = cap_c(QpCap {
        // With an SRQ the QP has no receive queue of its own.
        max_recv_wr: if srq.is_some() {
            0
        } else {
            granted.max_recv_wr
        },
        max_recv_sge: if srq.is_some() {
            0
        } else {
            granted.max_recv_sge
        },
        ..granted
    });
    let pending = send_ops.map(|ops| qp_ex::Pending::new(ops, &granted));
    pdr.hold();
    scq.hold();
    rcq.hold();
    if let Some(s) = srq {
        s.users.fetch_add(1, Ordering::Relaxed);
    }
    let base = IbvQp {
        context: pdr.c_context(),
        qp_context: attr.qp_context,
        pd,
        send_cq: attr.send_cq,
        recv_cq: attr.recv_cq,
        srq: attr.srq,
        handle: qp.handle(),
        qp_num: qp.qp_num(),
        state: 0,
        qp_type: attr.qp_type,
        mutex: libc::PTHREAD_MUTEX_INITIALIZER,
        cond: libc::PTHREAD_COND_INITIALIZER,
        events_completed: 0,
    };
    let rec = Box::new(QpRec {
        ud: qp_type == QpType::Ud,
        pd,
        send_cq: attr.send_cq,
        recv_cq: attr.recv_cq,
        srq: attr.srq,
        c: UnsafeCell::new(qp_ex::IbvQpEx::new(base, pending.is_some())),
        building: std::sync::atomic::AtomicBool::new(false),
        pending: UnsafeCell::new(pending),
        qp: if pdr.single_threaded() {
            // SAFETY: the QP is created on a parent domain with a thread
            // domain: libibverbs' contract (ibv_alloc_td(3)) is that the
            // program does not use it from several threads at once, which
            // this library takes as "no two calls that name the QP run at
            // once" (see ffi::lock); every guard of this lock is taken
            // inside such a call and dropped before it returns.
            unsafe { Lock::unlocked(ManuallyDrop::new(qp)) }
        } else {
            Lock::new(ManuallyDrop::new(qp))
        },
    });
    let rec = Box::into_raw(rec);
    super::event::track(pdr.c_context(), id, rec as usize);
    Ok(rec)
}

/// `ibv_destroy_qp`: 0, or the errno with the QP left as it was (the
/// kernel refuses, `EBUSY`, while the QP is attached to a multicast
/// group). The PD, CQs and SRQ stop counting it only once it is gone.
///
/// # Safety
/// `qp` is NULL or a QP of this library not yet destroyed; no other call
/// uses it during or after a successful call.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
    guard(libc::EIO, || {
        if qp.is_null() {
            return libc::EINVAL;
        }
        let rec_ptr = qp.cast::<QpRec>();
        // SAFETY: a live QpRec from ibv_create_qp (the contract), which no
        // other call uses during this one.
        let rec = unsafe { &mut *rec_ptr };
        let slot = rec.qp.get_mut();
        // A panic between taking the QP and putting it back (or freeing
        // the record) would leave the program a record without its QP.
        let _abort = AbortOnUnwind;
        // SAFETY: the QP is taken once, here, and then either put back
        // (the kernel refused) or its record freed without dropping it.
        let taken = unsafe { ManuallyDrop::take(slot) };
        if let Err(refused) = taken.destroy() {
            // Still alive: the program's pointer stays valid, and the
            // PD, CQs and SRQ keep counting it (libibverbs' answer too).
            let errno = errno_of(&refused.error);
            *slot = ManuallyDrop::new(refused.qp);
            return errno;
        }
        // Destroyed: waits until its async events handed out were
        // acknowledged, as libibverbs waits after the command.
        super::event::untrack(qp as usize);
        // SAFETY: the PD, CQs and SRQ outlive the QP (their destroy
        // refuses while it is counted).
        unsafe {
            if let Some(p) = pd_rec(rec.pd) {
                p.release();
            }
            if let Some(q) = cq_rec(rec.send_cq) {
                q.release();
            }
            if let Some(q) = cq_rec(rec.recv_cq) {
                q.release();
            }
            if let Some(s) = srq_rec(rec.srq) {
                s.users.fetch_sub(1, Ordering::Relaxed);
            }
        }
        // SAFETY: from Box::into_raw in ibv_create_qp; freed once, here,
        // its QP already taken (ManuallyDrop: not dropped again); the
        // caller makes no other call on it.
        drop(unsafe { Box::from_raw(rec_ptr) });
        0
    })
}

/// Aborts the process if dropped while a panic unwinds: for a step that
/// must not be left half done.
struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            std::process::abort();
        }
    }
}

/// `enum ibv_qp_attr_mask` bits this library applies.
mod mask {
    pub const STATE: c_int = 1 << 0;
    pub const CUR_STATE: c_int = 1 << 1;
    pub const ACCESS_FLAGS: c_int = 1 << 3;
    pub const PKEY_INDEX: c_int = 1 << 4;
    pub const PORT: c_int = 1 << 5;
    pub const QKEY: c_int = 1 << 6;
    pub const AV: c_int = 1 << 7;
    pub const PATH_MTU: c_int = 1 << 8;
    pub const TIMEOUT: c_int = 1 << 9;
    pub const RETRY_CNT: c_int = 1 << 10;
    pub const RNR_RETRY: c_int = 1 << 11;
    pub const RQ_PSN: c_int = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: c_int = 1 << 13;
    pub const MIN_RNR_TIMER: c_int = 1 << 15;
    pub const SQ_PSN: c_int = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
    pub const DEST_QPN: c_int = 1 << 20;
    /// Every bit above.
    pub const APPLIED: c_int = STATE
        | CUR_STATE
        | ACCESS_FLAGS
        | PKEY_INDEX
        | PORT
        | QKEY
        | AV
        | PATH_MTU
        | TIMEOUT
        | RETRY_CNT
        | RNR_RETRY
        | RQ_PSN
        | MAX_QP_RD_ATOMIC
        | MIN_RNR_TIMER
        | SQ_PSN
        | MAX_DEST_RD_ATOMIC
        | DEST_QPN;
    /// EN_SQD_ASYNC_NOTIFY, ALT_PATH, PATH_MIG_STATE, CAP, RATE_LIMIT:
    /// known, not applied here.
    pub const REFUSED: c_int = (1 << 2) | (1 << 14) | (1 << 18) | (1 << 19) | (1 << 25);
    use std::ffi::c_int;
}

fn ah_attr_of(a: &IbvAhAttr) -> AhAttr {
    AhAttr {
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        port_num: a.port_num,
        grh: (a.is_global != 0).then_some(GlobalRoute {
            dgid: Gid(a.grh.dgid),
            flow_label: a.grh.flow_label,
            sgid_index: a.grh.sgid_index,
            hop_limit: a.grh.hop_limit,
            traffic_class: a.grh.traffic_class,
        }),
    }
}

fn ah_attr_c(a: &AhAttr) -> IbvAhAttr {
    let g = a.grh.unwrap_or_default();
    IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: g.dgid.0,
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        },
        dlid: a.dlid,
        sl: a.sl,
        src_path_bits: a.src_path_bits,
        static_rate: a.static_rate,
        is_global: a.grh.is_some() as u8,
        port_num: a.port_num,
    }
}

fn state_of(v: c_int) -> Result<QpState, c_int> {
    u8::try_from(v)
        .ok()
        .and_then(QpState::from_raw)
        .ok_or(libc::EINVAL)
}

/// The `rverbs` attributes `mask` selects from `a`.
fn qp_attr_of(a: &IbvQpAttr, m: c_int) -> Result<QpAttr, c_int> {
    if m & mask::REFUSED != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if m & !mask::APPLIED != 0 {
        return Err(libc::EINVAL);
    }
    let on = |bit: c_int| m & bit != 0;
    let mtu = if on(mask::PATH_MTU) {
        let v = u8::try_from(a.path_mtu).map_err(|_| libc::EINVAL)?;
        Some(Mtu::from_raw(v).ok_or(libc::EINVAL)?)
    } else {
        None
    };
    Ok(QpAttr {
        qp_state: on(mask::STATE).then(|| state_of(a.qp_state)).transpose()?,
        cur_qp_state: on(mask::CUR_STATE)
            .then(|| state_of(a.cur_qp_state))
            .transpose()?,
        path_mtu: mtu,
        qkey: on(mask::QKEY).then_some(a.qkey),
        rq_psn: on(mask::RQ_PSN).then_some(a.rq_psn),
        sq_psn: on(mask::SQ_PSN).then_some(a.sq_psn),
        dest_qp_num: on(mask::DEST_QPN).then_some(a.dest_qp_num),
        qp_access_flags: on(mask::ACCESS_FLAGS)
            .then(|| AccessFlags::from_bits(a.qp_access_flags).ok_or(libc::EINVAL))
            .transpose()?,
        pkey_index: on(mask::PKEY_INDEX).then_some(a.pkey_index),
        port_num: on(mask::PORT).then_some(a.port_num),
        ah_attr: on(mask::AV).then(|| ah_attr_of(&a.ah_attr)),
        max_rd_atomic: on(mask::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        max_dest_rd_atomic: on(mask::MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        min_rnr_timer: on(mask::MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        timeout: on(mask::TIMEOUT).then_some(a.timeout),
        retry_cnt: on(mask::RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: on(mask::RNR_RETRY).then_some(a.rnr_retry),
    })
}

/// `ibv_modify_qp`: applies the attributes `attr_mask` selects; 0, or
/// the errno (`EOPNOTSUPP` for alternate paths, path migration, SQD
/// notification, capacity changes and rate limits).
///
/// # Safety
/// `qp` is a live QP of this library; `attr` points to a readable
/// `struct ibv_qp_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(a)) = (unsafe { qp_rec(qp) }, unsafe { attr.as_ref() }) else {
            return libc::EINVAL;
        };
        let wanted = match qp_attr_of(a, attr_mask) {
            Ok(w) => w,
            Err(e) => return e,
        };
        let mut q = rec.qp.lock();
        match q.modify(&wanted) {
            Ok(()) => {
                if let Some(s) = wanted.qp_state {
                    // SAFETY: the QP is live, its C struct sits in an
                    // UnsafeCell, and `state` is written only here, under
                    // the QP's lock (programs read it as libibverbs lets
                    // them).
                    unsafe { (*rec.c.get()).qp.state = c_int::from(s.raw()) };
                }
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// `ibv_query_qp`: the QP's attributes (all of them, whatever
/// `attr_mask` asks) and its creation attributes; 0, or the errno.
///
/// # Safety
/// `qp` is a live QP of this library; `attr` and `init_attr` point to
/// writable structs.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
    init_attr: *mut IbvQpInitAttr,
) -> c_int {
    let _ = attr_mask;
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(out), Some(init)) =
            (unsafe { qp_rec(qp) }, unsafe { attr.as_mut() }, unsafe {
                init_attr.as_mut()
            })
        else {
            return libc::EINVAL;
        };
        let (a, cap, sig_all) = match rec.qp.lock().query() {
            Ok(r) => r,
            Err(e) => return errno_of(&e),
        };
        let state = |s: Option<QpState>| s.map_or(7, |s| c_int::from(s.raw()));
        *out = IbvQpAttr {
            qp_state: state(a.qp_state),
            cur_qp_state: state(a.cur_qp_state),
            path_mtu: a.path_mtu.map_or(0, |m| m as c_int),
            qkey: a.qkey.unwrap_or(0),
            rq_psn: a.rq_psn.unwrap_or(0),
            sq_psn: a.sq_psn.unwrap_or(0),
            dest_qp_num: a.dest_qp_num.unwrap_or(0),
            qp_access_flags: a.qp_access_flags.map_or(0, |f| f.bits()),
            cap: cap_c(cap),
            ah_attr: a.ah_attr.as_ref().map(ah_attr_c).unwrap_or_default(),
            pkey_index: a.pkey_index.unwrap_or(0),
            max_rd_atomic: a.max_rd_atomic.unwrap_or(0),
            max_dest_rd_atomic: a.max_dest_rd_atomic.unwrap_or(0),
            min_rnr_timer: a.min_rnr_timer.unwrap_or(0),
            port_num: a.port_num.unwrap_or(0),
            timeout: a.timeout.unwrap_or(0),
            retry_cnt: a.retry_cnt.unwrap_or(0),
            rnr_retry: a.rnr_retry.unwrap_or(0),
            ..IbvQpAttr::default()
        };
        // SAFETY: the QP is live; its C struct is read in place through
        // the cell (no reference to it is made).
        let (qp_context, qp_type) =
            unsafe { ((*rec.c.get()).qp.qp_context, (*rec.c.get()).qp.qp_type) };
        *init = IbvQpInitAttr {
            qp_context,
            send_cq: rec.send_cq,
            recv_cq: rec.recv_cq,
            srq: rec.srq,
            cap: cap_c(cap),
            qp_type,
            sq_sig_all: c_int::from(sig_all),
        };
        0
    })
}

/// `ibv_create_srq`: an SRQ, or NULL with errno; `init_attr.attr` is
/// updated to what was granted.
///
/// # Safety
/// `pd` is a live PD of this library; `init_attr` points to a readable
/// and writable `struct ibv_srq_init_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut IbvPd,
    init_attr: *mut IbvSrqInitAttr,
) -> *mut IbvSrq {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let (Some(pdr), Some(attr)) = (unsafe { pd_rec(pd) }, unsafe { init_attr.as_mut() }) else {
            return null_with(libc::EINVAL);
        };
        let srq = match pdr.pd.create_srq(&SrqInitAttr {
            max_wr: attr.attr.max_wr,
            max_sge: attr.attr.max_sge,
            srq_limit: attr.attr.srq_limit,
        }) {
            Ok(s) => s,
            Err(e) => return null_with(errno_of(&e)),
        };
        attr.attr.max_wr = srq.max_wr();
        attr.attr.max_sge = srq.max_sge();
        let id = srq.event_id();
        pdr.hold();
        let rec = Box::new(SrqRec {
            c: IbvSrq {
                context: pdr.c_context(),
                srq_context: attr.srq_context,
                pd,
                handle: srq.handle(),
                mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                cond: libc::PTHREAD_COND_INITIALIZER,
                events_completed: 0,
            },
            srq: Lock::new(srq),
            users: AtomicUsize::new(0),
        });
        let rec = Box::into_raw(rec);
        super::event::track(pdr.c_context(), id, rec as usize);
        rec.cast::<IbvSrq>()
    })
}

/// `ibv_destroy_srq`: 0, `EBUSY` while a QP uses it.
///
/// # Safety
/// `srq` is NULL or an SRQ of this library not yet destroyed; no other
/// call uses it during or after a successful call.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut IbvSrq) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { srq_rec(srq) }) else {
            return libc::EINVAL;
        };
        if rec.users.load(Ordering::Relaxed) != 0 {
            return libc::EBUSY;
        }
        // Waits until its async events handed out were acknowledged.
        super::event::untrack(srq as usize);
        // SAFETY: the PD outlives the SRQ.
        if let Some(p) = unsafe { pd_rec(rec.c.pd) } {
            p.release();
        }
        // SAFETY: from Box::into_raw in ibv_create_srq; no QP uses it and
        // the caller makes no other call on it.
        drop(unsafe { Box::from_raw(srq.cast::<SrqRec>()) });
        0
    })
}

/// `IBV_SRQ_MAX_WR`.
const SRQ_MAX_WR: c_int = 1 << 0;
/// `IBV_SRQ_LIMIT`.
const SRQ_LIMIT: c_int = 1 << 1;

/// `ibv_modify_srq`: resizes (`IBV_SRQ_MAX_WR`) and arms the limit
/// (`IBV_SRQ_LIMIT`); 0, or the errno.
///
/// # Safety
/// `srq` is a live SRQ of this library; `attr` points to a readable
/// `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut IbvSrq,
    attr: *mut IbvSrqAttr,
    attr_mask: c_int,
) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(a)) = (unsafe { srq_rec(srq) }, unsafe { attr.as_ref() }) else {
            return libc::EINVAL;
        };
        if attr_mask & !(SRQ_MAX_WR | SRQ_LIMIT) != 0 {
            return libc::EINVAL;
        }
        let mut s = rec.srq.lock();
        if attr_mask & SRQ_MAX_WR != 0 {
            if let Err(e) = s.resize(a.max_wr) {
                return errno_of(&e);
            }
        }
        if attr_mask & SRQ_LIMIT != 0 {
            if let Err(e) = s.modify_limit(a.srq_limit) {
                return errno_of(&e);
            }
        }
        0
    })
}

/// `ibv_query_srq`: 0, or the errno.
///
/// # Safety
/// `srq` is a live SRQ of this library; `attr` points to a writable
/// `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut IbvSrq, attr: *mut IbvSrqAttr) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let (Some(rec), Some(out)) = (unsafe { srq_rec(srq) }, unsafe { attr.as_mut() }) else {
            return libc::EINVAL;
        };
        match rec.srq.lock().query() {
            Ok(a) => {
                *out = IbvSrqAttr {
                    max_wr: a.max_wr,
                    max_sge: a.max_sge,
                    srq_limit: a.srq_limit,
                };
                0
            }
            Err(e) => errno_of(&e),
        }
    })
}

/// An AH for `attr` on `pd` (whose record is `pdr`), or NULL with errno.
fn new_ah(pd: *mut IbvPd, pdr: &PdRec, attr: &AhAttr) -> *mut IbvAh {
    let ah = match pdr.pd.create_ah(attr) {
        Ok(ah) => ah,
        Err(e) => {
            let port_ok = pdr
                .pd
                .context()
                .phys_port_cnt()
                .is_ok_and(|n| (1..=n).contains(&attr.port_num));
            return null_with(match e.invalid_kind() {
                // No GID at the source index of an existing port: what
                // libibverbs' GID-type lookup answers (ENODATA).
                Some(rverbs::InvalidKind::NotPresent) if attr.grh.is_some() && port_ok => {
                    libc::ENODATA
                }
                _ => errno_of(&e),
            });
        }
    };
    pdr.hold();
    let rec = Box::new(AhRec {
        c: IbvAh {
            context: pdr.c_context(),
            pd,
            handle: ah.handle(),
        },
        ah,
    });
    Box::into_raw(rec).cast::<IbvAh>()
}

/// `ibv_create_ah`: an address handle, or NULL with errno.
///
/// # Safety
/// `pd` is a live PD of this library; `attr` points to a readable
/// `struct ibv_ah_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut IbvPd, attr: *mut IbvAhAttr) -> *mut IbvAh {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let (Some(pdr), Some(a)) = (unsafe { pd_rec(pd) }, unsafe { attr.as_ref() }) else {
            return null_with(libc::EINVAL);
        };
        new_ah(pd, pdr, &ah_attr_of(a))
    })
}

/// libibverbs' `IBV_WC_GRH`.
const IBV_WC_GRH: u32 = 1 << 0;

/// The address that answers the sender of the UD receive `wc` (whose
/// buffer began with the 40 bytes at `grh`) from port `port_num`:
/// destination the sender's GID, source the GID the datagram was sent to
/// (its index found in the port's table, RoCE v2 preferred), as libibverbs
/// builds it; or the errno.
///
/// # Safety
/// `wc` points to a readable `struct ibv_wc`; `grh` to 40 readable bytes
/// when the completion has a GRH.
unsafe fn ah_attr_from_wc(
    ctx: &rverbs::Context,
    port_num: u8,
    wc: *const rverbs::Wc,
    grh: *const u8,
) -> Result<AhAttr, c_int> {
    // SAFETY: NULL or readable (the contract).
    let wc = unsafe { wc.as_ref() }.ok_or(libc::EINVAL)?;
    let raw = wc.raw();
    let mut attr = if raw.wc_flags & IBV_WC_GRH != 0 {
        if grh.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: 40 readable bytes at `grh` (the contract), only read.
        let bytes = unsafe { std::slice::from_raw_parts(grh, rverbs::Grh::LEN) };
        rverbs::Grh::parse(bytes)
            .and_then(|g| g.reply_attr(ctx, port_num))
            .map_err(|e| errno_of(&e))?
    } else {
        AhAttr {
            port_num,
            ..AhAttr::default()
        }
    };
    attr.dlid = raw.slid;
    attr.sl = raw.sl;
    attr.src_path_bits = raw.dlid_path_bits;
    Ok(attr)
}

/// `ibv_init_ah_from_wc` (`IBVERBS_1.1`): fills `ah_attr` with the address
/// that answers the sender of the UD receive `wc` (see
/// `ibv_create_ah_from_wc`): 0, or -1 with errno.
///
/// # Safety
/// `context` is a context of this library; `wc` points to a readable
/// `struct ibv_wc`, `grh` to 40 readable bytes when the completion has a
/// GRH, `ah_attr` to a writable `struct ibv_ah_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut super::IbvContext,
    port_num: u8,
    wc: *const rverbs::Wc,
    grh: *const u8,
    ah_attr: *mut IbvAhAttr,
) -> c_int {
    guard(-1, || {
        let Some(rec) = super::context_rec(context) else {
            super::set_errno(libc::EINVAL);
            return -1;
        };
        if ah_attr.is_null() {
            super::set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: forwarded from this function's contract.
        match unsafe { ah_attr_from_wc(&rec.ctx, port_num, wc, grh) } {
            Ok(attr) => {
                // SAFETY: writable (the contract).
                unsafe { ah_attr.write(ah_attr_c(&attr)) };
                0
            }
            Err(e) => {
                super::set_errno(e);
                -1
            }
        }
    })
}

/// `ibv_create_ah_from_wc`: an address handle to answer the sender of
/// the UD receive `wc` from port `port_num` (see `ibv_init_ah_from_wc`),
/// or NULL with errno.
///
/// # Safety
/// `pd` is a live PD of this library; `wc` points to a readable `struct
/// ibv_wc`; `grh` to 40 readable bytes when the completion has a GRH.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut IbvPd,
    wc: *const rverbs::Wc,
    grh: *const u8,
    port_num: u8,
) -> *mut IbvAh {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let Some(pdr) = (unsafe { pd_rec(pd) }) else {
            return null_with(libc::EINVAL);
        };
        // SAFETY: forwarded from this function's contract.
        match unsafe { ah_attr_from_wc(pdr.pd.context(), port_num, wc, grh) } {
            Ok(attr) => new_ah(pd, pdr, &attr),
            Err(e) => null_with(e),
        }
    })
}

/// `ibv_destroy_ah`: 0, or the errno. A send still in flight to it keeps
/// the kernel's AH until it completes.
///
/// # Safety
/// `ah` is NULL or an AH of this library not yet destroyed; no other
/// call uses it during or after this one.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut IbvAh) -> c_int {
    guard(libc::EIO, || {
        if ah.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: from Box::into_raw in ibv_create_ah; the caller makes no
        // other call on it.
        let rec = unsafe { Box::from_raw(ah.cast::<AhRec>()) };
        // SAFETY: the PD outlives the AH.
        if let Some(p) = unsafe { pd_rec(rec.c.pd) } {
            p.release();
        }
        drop(rec);
        0
    })
}

impl std::fmt::Debug for IbvSendWr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IbvSendWr")
            .field("wr_id", &self.wr_id)
            .field("opcode", &self.opcode)
            .field("num_sge", &self.num_sge)
            .finish()
    }
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
