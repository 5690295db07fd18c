//! Extended QPs: `ibv_create_qp_ex` (the `verbs_context` operation behind
//! `verbs.h`'s inline function), `ibv_qp_to_qp_ex`, and the work-request
//! builder in `struct ibv_qp_ex` (`ibv_wr_start`, `ibv_wr_send`,
//! `ibv_wr_rdma_write`, ..., `ibv_wr_set_sge`, `ibv_wr_set_ud_addr`,
//! `ibv_wr_complete`, `ibv_wr_abort`).
//!
//! Between `wr_start` and `wr_complete` the requests are recorded in
//! storage sized at creation for the QP's send queue (requests, gather
//! entries and inline bytes), so building allocates nothing;
//! `wr_complete` posts them as a chain and reports the first error of the
//! whole bracket (a `wr_*` call has no return value), and `wr_abort`
//! drops them. The bracket holds the QP for one thread, as libibverbs'
//! providers do.

use std::ffi::{c_int, c_void};
use std::io::IoSlice;
use std::ops::Range;
use std::ptr;
use std::sync::atomic::Ordering;

use rverbs::{opcode, Payload, QpCap, QpCreateFlags, SendFlags, SendWr, Sge};

use super::cq::IbvCq;
use super::pd::IbvPd;
use super::qp::{
    ah_rec, flush_send, new_qp, qp_rec, Batch, IbvAh, IbvQp, IbvQpInitAttr, IbvSendWr, IbvSrq,
    QpRec, BATCH,
};
use super::{guard, null_with, IbvContext, Slot};
use crate::copy::IbvQpCap;

/// `verbs_context.create_qp_ex`.
pub type CreateQpExFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvQpInitAttrEx) -> *mut IbvQp;

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvRxHashConf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpInitAttrEx {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut IbvPd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: IbvRxHashConf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

type Qx = *mut IbvQpEx;

/// `struct ibv_qp_ex`: a `struct ibv_qp`, then the work-request builder.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpEx {
    /// The `struct ibv_qp`.
    pub qp: IbvQp,
    pub comp_mask: u64,
    /// The id of the next request built (the program sets it).
    pub wr_id: u64,
    /// The `IBV_SEND_*` flags of the next request built.
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(Qx, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(Qx, u32, u64, u64)>,
    pub wr_bind_mw: Option<
        unsafe extern "C" fn(Qx, *mut super::mw::IbvMw, u32, *const super::mw::IbvMwBindInfo),
    >,
    pub wr_local_inv: Option<unsafe extern "C" fn(Qx, u32)>,
    pub wr_rdma_read: Option<unsafe extern "C" fn(Qx, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(Qx, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(Qx, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(Qx)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(Qx, u32)>,
    pub wr_send_inv: Option<unsafe extern "C" fn(Qx, u32)>,
    /// `wr_send_tso`: null (raw-packet QPs only).
    pub wr_send_tso: Slot,
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(Qx, *mut IbvAh, u32, u32)>,
    /// `wr_set_xrc_srqn`: null (no XRC).
    pub wr_set_xrc_srqn: Slot,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(Qx, *mut c_void, usize)>,
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(Qx, usize, *const IbvDataBuf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(Qx, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(Qx, usize, *const Sge)>,
    pub wr_start: Option<unsafe extern "C" fn(Qx)>,
    pub wr_complete: Option<unsafe extern "C" fn(Qx) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(Qx)>,
    pub wr_atomic_write: Option<unsafe extern "C" fn(Qx, u32, u64, *const c_void)>,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvDataBuf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `IBV_QP_EX_WITH_*`: the operations a QP's builder is asked for.
mod ops {
    pub const RDMA_WRITE: u64 = 1 << 0;
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    pub const SEND: u64 = 1 << 2;
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    pub const RDMA_READ: u64 = 1 << 4;
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    pub const LOCAL_INV: u64 = 1 << 7;
    pub const BIND_MW: u64 = 1 << 8;
    pub const SEND_WITH_INV: u64 = 1 << 9;
    pub const ATOMIC_WRITE: u64 = 1 << 12;
    /// Every operation above: TSO (1 << 10) is not offered.
    pub const SUPPORTED: u64 = RDMA_WRITE
        | RDMA_WRITE_WITH_IMM
        | SEND
        | SEND_WITH_IMM
        | RDMA_READ
        | ATOMIC_CMP_AND_SWP
        | ATOMIC_FETCH_AND_ADD
        | LOCAL_INV
        | BIND_MW
        | SEND_WITH_INV
        | ATOMIC_WRITE;
}

/// `IBV_QP_INIT_ATTR_*`.
mod mask {
    pub const PD: u32 = 1 << 0;
    pub const CREATE_FLAGS: u32 = 1 << 2;
    pub const SEND_OPS_FLAGS: u32 = 1 << 6;
    /// XRCD, MAX_TSO_HEADER, IND_TABLE, RX_HASH: known, not offered.
    pub const REFUSED: u32 = (1 << 1) | (1 << 3) | (1 << 4) | (1 << 5);
}

/// `IBV_QP_CREATE_SOURCE_QPN`: a userspace-only flag (raw UD), not offered.
const CREATE_SOURCE_QPN: u32 = 1 << 10;

/// A request's operation, as built.
#[derive(Clone, Copy)]
enum Op {
    Send,
    SendImm(u32),
    SendInv(u32),
    Write {
        addr: u64,
        rkey: u32,
    },
    WriteImm {
        addr: u64,
        rkey: u32,
        imm: u32,
    },
    Read {
        addr: u64,
        rkey: u32,
    },
    CmpSwp {
        addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        addr: u64,
        rkey: u32,
        add: u64,
    },
    LocalInv(u32),
    BindMw(rverbs::MwBindWr),
    AtomicWrite {
        addr: u64,
        rkey: u32,
        value: [u8; 8],
    },
}

/// One request built since `wr_start`.
#[derive(Clone)]
struct Built {
    wr_id: u64,
    flags: u32,
    op: Op,
    /// Its gather list: a range of [`Pending::sges`].
    sges: Range<usize>,
    /// Its inline bytes, if any: a range of [`Pending::inline`].
    inline: Option<Range<usize>>,
    /// Its UD destination: (AH, remote QPN, Q_Key).
    ud: Option<(*mut IbvAh, u32, u32)>,
}

/// The requests built since `wr_start`, in storage sized at creation.
pub struct Pending {
    /// The operations the builder was asked for (`send_ops_flags`).
    ops: u64,
    wrs: Vec<Built>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    /// Gather entries one request may have.
    max_sge: usize,
    /// Inline bytes one request may carry.
    max_inline: usize,
    /// The first error of the bracket, reported by `wr_complete`.
    error: c_int,
}

impl Pending {
    /// Storage for a send queue of `cap`, building the operations `ops`.
    pub(super) fn new(ops: u64, cap: &QpCap) -> Pending {
        let wrs = cap.max_send_wr as usize;
        let max_sge = cap.max_send_sge as usize;
        let max_inline = cap.max_inline_data as usize;
        Pending {
            ops,
            wrs: Vec::with_capacity(wrs),
            sges: Vec::with_capacity(wrs.saturating_mul(max_sge)),
            inline: Vec::with_capacity(wrs.saturating_mul(max_inline)),
            max_sge,
            max_inline,
            error: 0,
        }
    }

    fn clear(&mut self) {
        self.wrs.clear();
        self.sges.clear();
        self.inline.clear();
        self.error = 0;
    }

    /// Records `e` unless an earlier error was.
    fn fail(&mut self, e: c_int) {
        if self.error == 0 {
            self.error = e;
        }
    }

    /// The request built last, to attach a payload or address to.
    fn last(&mut self) -> Option<&mut Built> {
        if self.error != 0 {
            return None;
        }
        let last = self.wrs.last_mut();
        if last.is_none() {
            self.error = libc::EINVAL;
        }
        last
    }
}

impl IbvQpEx {
    /// The C struct of a QP whose builder is filled in when `ex`.
    pub(super) fn new(qp: IbvQp, ex: bool) -> IbvQpEx {
        let mut c = IbvQpEx {
            qp,
            comp_mask: 0,
            wr_id: 0,
            wr_flags: 0,
            wr_atomic_cmp_swp: None,
            wr_atomic_fetch_add: None,
            wr_bind_mw: None,
            wr_local_inv: None,
            wr_rdma_read: None,
            wr_rdma_write: None,
            wr_rdma_write_imm: None,
            wr_send: None,
            wr_send_imm: None,
            wr_send_inv: None,
            wr_send_tso: None,
            wr_set_ud_addr: None,
            wr_set_xrc_srqn: None,
            wr_set_inline_data: None,
            wr_set_inline_data_list: None,
            wr_set_sge: None,
            wr_set_sge_list: None,
            wr_start: None,
            wr_complete: None,
            wr_abort: None,
            wr_atomic_write: None,
        };
        if ex {
            c.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
            c.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
            c.wr_local_inv = Some(wr_local_inv);
            c.wr_bind_mw = Some(wr_bind_mw);
            c.wr_rdma_read = Some(wr_rdma_read);
            c.wr_rdma_write = Some(wr_rdma_write);
            c.wr_rdma_write_imm = Some(wr_rdma_write_imm);
            c.wr_send = Some(wr_send);
            c.wr_send_imm = Some(wr_send_imm);
            c.wr_send_inv = Some(wr_send_inv);
            c.wr_set_ud_addr = Some(wr_set_ud_addr);
            c.wr_set_inline_data = Some(wr_set_inline_data);
            c.wr_set_inline_data_list = Some(wr_set_inline_data_list);
            c.wr_set_sge = Some(wr_set_sge);
            c.wr_set_sge_list = Some(wr_set_sge_list);
            c.wr_start = Some(wr_start);
            c.wr_complete = Some(wr_complete);
            c.wr_abort = Some(wr_abort);
            c.wr_atomic_write = Some(wr_atomic_write);
        }
        c
    }
}

/// `verbs_context.create_qp_ex`, behind `verbs.h`'s inline
/// `ibv_create_qp_ex`: a QP (with the work-request builder if
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` asks for it: see [`ibv_qp_to_qp_ex`]),
/// or NULL with errno. A PD is required (`EINVAL`); XRC, RSS, TSO and
/// source-QPN creation are refused with `EOPNOTSUPP`, as are builder
/// operations this library lacks (memory-window binds, TSO, flush).
///
/// # Safety
/// `attr` points to a readable and writable `struct ibv_qp_init_attr_ex`
/// whose PD, CQs and SRQ are NULL or live objects of this library.
pub unsafe extern "C" fn create_qp_ex(
    context: *mut IbvContext,
    attr: *mut IbvQpInitAttrEx,
) -> *mut IbvQp {
    let _ = context;
    // SAFETY: forwarded from this function's contract.
    unsafe { create_qp_ex_of(attr, None) }
}

/// [`create_qp_ex`], of driver QP type `driver` when given
/// (`efadv_create_qp_ex`).
///
/// # Safety
/// As [`create_qp_ex`].
pub(crate) unsafe fn create_qp_ex_of(
    attr: *mut IbvQpInitAttrEx,
    driver: Option<u32>,
) -> *mut IbvQp {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let Some(a) = (unsafe { attr.as_mut() }) else {
            return null_with(libc::EINVAL);
        };
        if a.comp_mask & mask::REFUSED != 0 {
            return null_with(libc::EOPNOTSUPP);
        }
        if a.comp_mask & mask::PD == 0
            || a.comp_mask & !(mask::PD | mask::CREATE_FLAGS | mask::SEND_OPS_FLAGS | mask::REFUSED)
                != 0
        {
            return null_with(libc::EINVAL);
        }
        let flags = if a.comp_mask & mask::CREATE_FLAGS != 0 {
            if a.create_flags & CREATE_SOURCE_QPN != 0 {
                return null_with(libc::EOPNOTSUPP);
            }
            match QpCreateFlags::from_bits(a.create_flags) {
                Some(f) => Some(f),
                None => return null_with(libc::EOPNOTSUPP),
            }
        } else {
            None
        };
        let send_ops = if a.comp_mask & mask::SEND_OPS_FLAGS != 0 {
            if a.send_ops_flags & !ops::SUPPORTED != 0 {
                return null_with(libc::EOPNOTSUPP);
            }
            // BIND_MW is accepted everywhere, as libmlx5 accepts it: a
            // provider without windows has no window to bind (ibv_alloc_mw
            // answers EOPNOTSUPP), and a bind it is asked for fails at
            // ibv_wr_complete.
            let optional = [(ops::ATOMIC_WRITE, rverbs::WrOpcode::AtomicWrite)];
            for (bit, op) in optional {
                if a.send_ops_flags & bit == 0 {
                    continue;
                }
                // SAFETY: forwarded from this function's contract.
                let Some(pd) = (unsafe { super::pd::pd_rec(a.pd) }) else {
                    return null_with(libc::EINVAL);
                };
                // As libibverbs' providers answer for an operation the
                // device (or its provider) lacks: at creation.
                if !pd.pd.context().offers(op) {
                    return null_with(libc::EOPNOTSUPP);
                }
            }
            Some(a.send_ops_flags)
        } else {
            None
        };
        let mut base = IbvQpInitAttr {
            qp_context: a.qp_context,
            send_cq: a.send_cq,
            recv_cq: a.recv_cq,
            srq: a.srq,
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: a.sq_sig_all,
        };
        // The extended command carries the flags; without any, the plain
        // one makes the same QP.
        let flags = flags.filter(|f| !f.is_empty());
        // SAFETY: forwarded from this function's contract.
        match unsafe { new_qp(a.pd, &mut base, flags, send_ops, driver) } {
            Ok(rec) => {
                a.cap = base.cap;
                rec.cast::<IbvQp>()
            }
            Err(e) => null_with(e),
        }
    })
}

/// `ibv_qp_to_qp_ex`: the work-request builder of a QP created with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`; NULL (errno `EOPNOTSUPP`) for any
/// other QP.
///
/// # Safety
/// `qp` is NULL or a live QP of this library.
#[no_mangle]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut IbvQp) -> *mut IbvQpEx {
    guard(ptr::null_mut(), || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { qp_rec(qp) }) else {
            return null_with(libc::EINVAL);
        };
        // SAFETY: `pending` is set at creation and never changed after.
        if unsafe { (*rec.pending.get()).is_some() } {
            rec.c.get()
        } else {
            null_with(libc::EOPNOTSUPP)
        }
    })
}

/// Runs `f` on the QP's pending requests, as built inside its bracket.
///
/// # Safety
/// `qp` is a live QP of this library with the builder, inside this
/// thread's `wr_start` bracket.
unsafe fn with_pending(qp: Qx, f: impl FnOnce(&mut Pending, u64, u32)) {
    guard((), || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { qp_rec(qp.cast::<IbvQp>()) }) else {
            return;
        };
        // SAFETY: `pending` is guarded by the bracket the caller is in;
        // `wr_id` and `wr_flags` are read in place through the cell.
        let (p, wr_id, flags) = unsafe {
            let c = rec.c.get();
            (&mut *rec.pending.get(), (*c).wr_id, (*c).wr_flags)
        };
        if let Some(p) = p {
            f(p, wr_id, flags);
        }
    })
}

/// Starts a request of operation `op` (which needs builder operation
/// `needs`).
///
/// # Safety
/// As [`with_pending`].
unsafe fn start_wr(qp: Qx, needs: u64, op: Op) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        with_pending(qp, |p, wr_id, flags| {
            if p.error != 0 {
                return;
            }
            if p.ops & needs == 0 {
                return p.fail(libc::EOPNOTSUPP);
            }
            if p.wrs.len() == p.wrs.capacity() {
                return p.fail(libc::ENOMEM);
            }
            let at = p.sges.len();
            p.wrs.push(Built {
                wr_id,
                flags,
                op,
                sges: at..at,
                inline: None,
                ud: None,
            });
        })
    }
}

macro_rules! builders {
    ($($(#[$doc:meta])* $name:ident($($arg:ident: $t:ty),*) needs $needs:ident => $op:expr;)*) => {$(
        $(#[$doc])*
        ///
        /// # Safety
        /// `qp` is a live QP of this library with the builder, inside this
        /// thread's `wr_start` bracket.
        unsafe extern "C" fn $name(qp: Qx, $($arg: $t),*) {
            // SAFETY: forwarded from this function's contract.
            unsafe { start_wr(qp, ops::$needs, $op) }
        }
    )*};
}

builders! {
    /// `wr_send`: a SEND.
    wr_send() needs SEND => Op::Send;
    /// `wr_send_imm`: a SEND with immediate data (network order).
    wr_send_imm(imm: u32) needs SEND_WITH_IMM => Op::SendImm(u32::from_be(imm));
    /// `wr_send_inv`: a SEND that invalidates `rkey` at the receiver.
    wr_send_inv(rkey: u32) needs SEND_WITH_INV => Op::SendInv(rkey);
    /// `wr_rdma_write`.
    wr_rdma_write(rkey: u32, addr: u64) needs RDMA_WRITE => Op::Write { addr, rkey };
    /// `wr_rdma_write_imm` (immediate data in network order).
    wr_rdma_write_imm(rkey: u32, addr: u64, imm: u32) needs RDMA_WRITE_WITH_IMM =>
        Op::WriteImm { addr, rkey, imm: u32::from_be(imm) };
    /// `wr_rdma_read`.
    wr_rdma_read(rkey: u32, addr: u64) needs RDMA_READ => Op::Read { addr, rkey };
    /// `wr_atomic_cmp_swp`.
    wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64) needs ATOMIC_CMP_AND_SWP =>
        Op::CmpSwp { addr, rkey, compare, swap };
    /// `wr_atomic_fetch_add`.
    wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64) needs ATOMIC_FETCH_AND_ADD =>
        Op::FetchAdd { addr, rkey, add };
    /// `wr_local_inv`.
    wr_local_inv(rkey: u32) needs LOCAL_INV => Op::LocalInv(rkey);
}

/// `wr_bind_mw`: binds the window `mw` (its current key read now) to
/// `info` under the new key `rkey`, as a type 2 bind on this QP.
///
/// # Safety
/// As the other builders; `mw` is a live window and `info` points to a
/// readable `struct ibv_mw_bind_info` whose MR is NULL or live.
unsafe extern "C" fn wr_bind_mw(
    qp: Qx,
    mw: *mut super::mw::IbvMw,
    rkey: u32,
    info: *const super::mw::IbvMwBindInfo,
) {
    // SAFETY: NULL or readable (the contract), copied now.
    let Some(info) = (unsafe { info.as_ref() }).copied() else {
        // SAFETY: forwarded from this function's contract.
        return unsafe { with_pending(qp, |p, _, _| p.fail(libc::EINVAL)) };
    };
    // SAFETY: forwarded from this function's contract.
    match unsafe { super::mw::bind_parts(mw, rkey, &info) } {
        // SAFETY: forwarded from this function's contract.
        Ok(b) => unsafe { start_wr(qp, ops::BIND_MW, Op::BindMw(b)) },
        // SAFETY: forwarded from this function's contract.
        Err(e) => unsafe { with_pending(qp, |p, _, _| p.fail(e)) },
    }
}

/// `wr_atomic_write`: writes the 8 bytes at `value` to `addr`.
///
/// # Safety
/// As the other builders; `value` points to 8 readable bytes.
unsafe extern "C" fn wr_atomic_write(qp: Qx, rkey: u32, addr: u64, value: *const c_void) {
    if value.is_null() {
        // SAFETY: forwarded from this function's contract.
        return unsafe { with_pending(qp, |p, _, _| p.fail(libc::EINVAL)) };
    }
    // SAFETY: 8 readable bytes (the contract), copied now.
    let value = unsafe { ptr::read_unaligned(value.cast::<[u8; 8]>()) };
    // SAFETY: forwarded from this function's contract.
    unsafe { start_wr(qp, ops::ATOMIC_WRITE, Op::AtomicWrite { addr, rkey, value }) }
}

/// `wr_set_ud_addr`: the destination of the request built last.
///
/// # Safety
/// As the builders; `ah` is a live AH of this library.
unsafe extern "C" fn wr_set_ud_addr(qp: Qx, ah: *mut IbvAh, remote_qpn: u32, remote_qkey: u32) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        with_pending(qp, |p, _, _| {
            if ah.is_null() {
                return p.fail(libc::EINVAL);
            }
            if let Some(w) = p.last() {
                w.ud = Some((ah, remote_qpn, remote_qkey));
            }
        })
    }
}

/// Sets the gather list of the request built last to `sges`.
fn set_sges(p: &mut Pending, sges: &[Sge]) {
    if p.last().is_none() {
        return;
    }
    if sges.len() > p.max_sge {
        return p.fail(libc::EINVAL);
    }
    let at = p.sges.len();
    if p.sges.capacity() - at < sges.len() {
        return p.fail(libc::ENOMEM);
    }
    p.sges.extend_from_slice(sges);
    if let Some(w) = p.wrs.last_mut() {
        w.sges = at..at + sges.len();
        w.inline = None;
    }
}

/// `wr_set_sge`: one gather entry for the request built last.
///
/// # Safety
/// As the builders.
unsafe extern "C" fn wr_set_sge(qp: Qx, lkey: u32, addr: u64, length: u32) {
    // SAFETY: forwarded from this function's contract.
    unsafe { with_pending(qp, |p, _, _| set_sges(p, &[Sge { addr, length, lkey }])) }
}

/// `wr_set_sge_list`: the gather list of the request built last.
///
/// # Safety
/// As the builders; `sg_list` points to `num_sge` readable entries.
unsafe extern "C" fn wr_set_sge_list(qp: Qx, num_sge: usize, sg_list: *const Sge) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        with_pending(qp, |p, _, _| {
            if num_sge > 0 && sg_list.is_null() {
                return p.fail(libc::EINVAL);
            }
            let list = if num_sge == 0 {
                &[][..]
            } else {
                // SAFETY: `num_sge` readable entries (the contract), copied
                // before the call returns.
                std::slice::from_raw_parts(sg_list, num_sge)
            };
            set_sges(p, list)
        })
    }
}

/// Copies the inline payload `bufs` (pointer, length) for the request
/// built last.
///
/// # Safety
/// Each buffer names that many readable bytes.
unsafe fn set_inline(p: &mut Pending, bufs: impl Iterator<Item = (*const u8, usize)> + Clone) {
    if p.last().is_none() {
        return;
    }
    let Some(total) = bufs
        .clone()
        .try_fold(0usize, |acc, (_, n)| acc.checked_add(n))
    else {
        return p.fail(libc::EINVAL);
    };
    if total > p.max_inline {
        return p.fail(libc::EINVAL);
    }
    let at = p.inline.len();
    if p.inline.capacity() - at < total {
        return p.fail(libc::ENOMEM);
    }
    for (addr, n) in bufs {
        if n == 0 {
            continue;
        }
        if addr.is_null() {
            p.inline.truncate(at);
            return p.fail(libc::EINVAL);
        }
        // SAFETY: `n` readable bytes at `addr` (the contract), copied now.
        p.inline
            .extend_from_slice(unsafe { std::slice::from_raw_parts(addr, n) });
    }
    if let Some(w) = p.wrs.last_mut() {
        w.inline = Some(at..at + total);
        w.sges = 0..0;
    }
}

/// `wr_set_inline_data`: `length` bytes at `addr`, copied now, as the
/// payload of the request built last.
///
/// # Safety
/// As the builders; `length` readable bytes at `addr`.
unsafe extern "C" fn wr_set_inline_data(qp: Qx, addr: *mut c_void, length: usize) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        with_pending(qp, |p, _, _| {
            set_inline(p, std::iter::once((addr.cast_const().cast::<u8>(), length)))
        })
    }
}

/// `wr_set_inline_data_list`: the `num_buf` buffers of `buf_list`,
/// copied now, as the payload of the request built last.
///
/// # Safety
/// As the builders; `buf_list` points to `num_buf` readable entries, each
/// naming readable bytes.
unsafe extern "C" fn wr_set_inline_data_list(qp: Qx, num_buf: usize, buf_list: *const IbvDataBuf) {
    // SAFETY: forwarded from this function's contract.
    unsafe {
        with_pending(qp, |p, _, _| {
            if num_buf > 0 && buf_list.is_null() {
                return p.fail(libc::EINVAL);
            }
            let list = if num_buf == 0 {
                &[][..]
            } else {
                // SAFETY: `num_buf` readable entries (the contract).
                std::slice::from_raw_parts(buf_list, num_buf)
            };
            set_inline(
                p,
                list.iter()
                    .map(|b| (b.addr.cast_const().cast::<u8>(), b.length)),
            )
        })
    }
}

/// `wr_start`: takes the QP's builder for this thread (waiting while
/// another thread holds it) and starts an empty list.
///
/// # Safety
/// `qp` is a live QP of this library with the builder.
unsafe extern "C" fn wr_start(qp: Qx) {
    guard((), || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { qp_rec(qp.cast::<IbvQp>()) }) else {
            return;
        };
        while rec
            .building
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        // SAFETY: the bracket is now held by this thread.
        if let Some(p) = unsafe { &mut *rec.pending.get() } {
            p.clear();
        }
    })
}

/// `wr_abort`: drops what was built and gives the builder back.
///
/// # Safety
/// `qp` is a live QP of this library, inside this thread's bracket.
unsafe extern "C" fn wr_abort(qp: Qx) {
    guard((), || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { qp_rec(qp.cast::<IbvQp>()) }) else {
            return;
        };
        // SAFETY: inside the bracket (the contract).
        if let Some(p) = unsafe { &mut *rec.pending.get() } {
            p.clear();
        }
        rec.building.store(false, Ordering::Release);
    })
}

/// The `rverbs` request for `w`, its payload from `p`'s storage (inline
/// bytes through `inline`, a one-entry slice the caller keeps alive).
///
/// # Safety
/// `w`'s AH is live.
unsafe fn to_send_wr<'a>(
    p: &'a Pending,
    w: &Built,
    inline: &'a [IoSlice<'a>],
    ud: bool,
) -> Result<SendWr<'a>, c_int> {
    let sg = &p.sges[w.sges.clone()];
    let payload = if w.inline.is_some() {
        Payload::Inline(inline)
    } else {
        Payload::Sge(sg)
    };
    let one = || match sg {
        [s] => Ok(s),
        _ => Err(libc::EINVAL),
    };
    let wr = match w.op {
        Op::Send => opcode::Send::with_payload(w.wr_id, payload).build(),
        Op::SendImm(imm) => opcode::Send::with_payload(w.wr_id, payload)
            .imm(imm)
            .build(),
        Op::SendInv(rkey) => opcode::Send::with_payload(w.wr_id, payload)
            .invalidate(rkey)
            .build(),
        Op::Write { addr, rkey } => {
            opcode::Write::with_payload(w.wr_id, payload, addr, rkey).build()
        }
        Op::WriteImm { addr, rkey, imm } => {
            opcode::Write::with_payload(w.wr_id, payload, addr, rkey)
                .imm(imm)
                .build()
        }
        Op::Read { addr, rkey } => SendWr::rdma_read(w.wr_id, sg, addr, rkey),
        Op::CmpSwp {
            addr,
            rkey,
            compare,
            swap,
        } => SendWr::cmp_swap(w.wr_id, one()?, addr, rkey, compare, swap),
        Op::FetchAdd { addr, rkey, add } => SendWr::fetch_add(w.wr_id, one()?, addr, rkey, add),
        Op::LocalInv(rkey) => SendWr::local_inv(w.wr_id, rkey),
        Op::BindMw(b) => SendWr::bind_mw_wr(w.wr_id, b),
        Op::AtomicWrite { addr, rkey, value } => SendWr::atomic_write(w.wr_id, addr, rkey, value),
    };
    // FENCE, SIGNALED, SOLICITED (INLINE follows the payload).
    let flags = SendFlags::from_bits(w.flags & 0x7).ok_or(libc::EINVAL)?;
    if w.flags & !0xf != 0 {
        return Err(libc::EINVAL);
    }
    let mut wr = wr.flags(flags);
    if ud {
        let (ah, qpn, qkey) = w.ud.ok_or(libc::EINVAL)?;
        // SAFETY: forwarded from this function's contract.
        let ah = unsafe { ah_rec(ah) }.ok_or(libc::EINVAL)?;
        wr = wr.dest(ah.ah.dest(qpn, qkey));
    }
    Ok(wr)
}

/// Posts what `p` holds to `rec`'s send queue: 0 or the errno.
///
/// # Safety
/// The AHs the requests name are live.
unsafe fn post_pending(rec: &QpRec, p: &Pending) -> c_int {
    if p.error != 0 {
        return p.error;
    }
    let mut q = rec.qp.lock();
    for chunk in p.wrs.chunks(BATCH) {
        let mut inline = [[IoSlice::new(&[])]; BATCH];
        for (slot, w) in inline.iter_mut().zip(chunk) {
            if let Some(r) = &w.inline {
                slot[0] = IoSlice::new(&p.inline[r.clone()]);
            }
        }
        // No program request stands behind these (the builder has none).
        let mut batch = Batch::<_, IbvSendWr>::new();
        for (k, w) in chunk.iter().enumerate() {
            // SAFETY: forwarded from this function's contract.
            match unsafe { to_send_wr(p, w, &inline[k], rec.ud) } {
                Ok(x) => batch.push(x, ptr::null_mut()),
                Err(e) => {
                    // Those before it in the chunk go out first, as a
                    // chain posted up to a bad request would.
                    return match flush_send(&mut q, batch.wrs(), batch.from()) {
                        Ok(()) => e,
                        Err((_, e2)) => e2,
                    };
                }
            }
        }
        if let Err((_, e)) = flush_send(&mut q, batch.wrs(), batch.from()) {
            return e;
        }
    }
    0
}

/// `wr_complete`: posts what was built (one chain per 16 requests) and
/// gives the builder back: 0, or the first error of the bracket.
///
/// # Safety
/// `qp` is a live QP of this library, inside this thread's bracket; the
/// AHs of the requests built are live and their gather lists name
/// registered memory.
unsafe extern "C" fn wr_complete(qp: Qx) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { qp_rec(qp.cast::<IbvQp>()) }) else {
            return libc::EINVAL;
        };
        // SAFETY: inside the bracket (the contract).
        let r = match unsafe { &mut *rec.pending.get() } {
            Some(p) => {
                // SAFETY: forwarded from this function's contract.
                let r = unsafe { post_pending(rec, p) };
                p.clear();
                r
            }
            None => libc::EOPNOTSUPP,
        };
        rec.building.store(false, Ordering::Release);
        r
    })
}
