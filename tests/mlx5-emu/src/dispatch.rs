//! The uverbs `write()` command channel of the emulated device: header
//! validation as the kernel's uverbs layer does it, then one handler per
//! command playing the mlx5 driver (core response + mlx5 driver data).
//!
//! Errors are the kernel's: `EINVAL` for malformed headers, unknown
//! handles in a command that reads an object, and illegal QP transitions;
//! `ENOSPC` for a command or response shorter than the command's core
//! struct; `EFAULT` for unmapped buffers; `EOPNOTSUPP` for unknown commands
//! and non-zero bytes past a known struct; `ENOENT` for destroying a handle
//! the context does not have (`EINVAL` if it names another kind of object);
//! `EBUSY` for destroying an object still in use; `EBADF` for a completion
//! channel fd that is not one of this context's. Every response is written
//! only after the command succeeded, into ranges validated beforehand.
//!
//! The mlx5 driver data of each command is held to the rules the Linux 6.12
//! mlx5 driver applies (sizes, reserved bytes, flags, user indexes, queue
//! sizes and buffer alignment), with its errnos: see the "mlx5 driver-data
//! rules" helpers and tests/mlx5-emu/notes/driver-data-rules.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use libc::c_int;
use rverbs_abi::ah::{CreateAh, CreateAhResp, DestroyAh};
use rverbs_abi::cmd::{nr, CmdHdr, ExCmdHdr, IB_USER_VERBS_CMD_FLAG_EXTENDED};
use rverbs_abi::cq::{
    CreateCompChannel, CreateCompChannelResp, CreateCq, CreateCqResp, DestroyCq, DestroyCqResp,
    ResizeCq, ResizeCqResp,
};
use rverbs_abi::device::{
    ExQueryDevice, ExQueryDeviceResp, GetContext, GetContextResp, QueryDevice, QueryPort,
};
use rverbs_abi::mlx5;
use rverbs_abi::mr::{AccessFlags, DeregMr, RegMr, RegMrResp};
use rverbs_abi::pd::{AllocPd, AllocPdResp, DeallocPd};
use rverbs_abi::qp::{
    attr_mask as am, qp_state, qp_type, CreateQp, CreateQpResp, DestroyQp, DestroyQpResp, ModifyQp,
    QueryQp, QueryQpResp,
};
use rverbs_abi::srq::{
    CreateSrq, CreateSrqResp, DestroySrq, DestroySrqResp, ModifySrq, QuerySrq, QuerySrqResp,
};
use rverbs_abi::Errno;
use zerocopy::{FromBytes, IntoBytes};

use crate::emu::{
    self, Cq, CqRing, Emu, EventKind, Mr, Owned, Pd, Qp, QpAttrs, QpCaps, Shared, Srq, WorkQueue,
};
use crate::fdtable::{self, FdKind};
use crate::mem::{self, all_zero, read_padded, UserBuf};
use crate::{cdev, device, log, qp_fsm, record};

/// `IB_USER_VERBS_CMD_COMMAND_MASK`.
const COMMAND_MASK: u32 = 0xff;
/// Size of the two headers of an extended command.
const EX_HDRS: usize = size_of::<CmdHdr>() + size_of::<ExCmdHdr>();
/// `IB_SRQ_MAX_WR` in MODIFY_SRQ's attribute mask.
const SRQ_MAX_WR: u32 = 1 << 0;
/// `IB_SRQ_LIMIT` in MODIFY_SRQ's attribute mask.
const SRQ_LIMIT: u32 = 1 << 1;
/// Attribute bits the legacy MODIFY_QP accepts (up to `IB_QP_DEST_QPN`).
const LEGACY_QP_ATTR_MASK: u32 = (am::DEST_QPN << 1) - 1;
/// MR access bits the kernel accepts: the defined flags up to `HUGETLB`
/// and the "optional" range (relaxed ordering and friends).
const MR_ACCESS_SUPPORTED: u32 = 0xff | 0x3ff0_0000;

/// One command being executed.
struct Call<'a> {
    /// Owning context.
    ctx: u64,
    /// The command fd.
    fd: c_int,
    /// Core command bytes (without headers).
    core: &'a [u8],
    /// Driver (mlx5) command bytes.
    drv: &'a [u8],
    /// Core response buffer.
    out: UserBuf,
    /// Driver response buffer.
    drv_out: UserBuf,
    /// What the log line says about the command (handles, numbers).
    detail: String,
}

impl Call<'_> {
    /// The core command as `T`; bytes past `T` must be zero (`EOPNOTSUPP`,
    /// as the kernel's check for unknown trailing fields).
    fn req<T: FromBytes + IntoBytes>(&self) -> Result<T, Errno> {
        let n = size_of::<T>();
        if self.core.len() < n {
            return Err(Errno::ENOSPC);
        }
        if !all_zero(&self.core[n..]) {
            return Err(Errno::EOPNOTSUPP);
        }
        Ok(read_padded(&self.core[..n]))
    }

    /// Appends to the log detail (only when logging).
    fn note(&mut self, args: std::fmt::Arguments<'_>) {
        if log::enabled() {
            if !self.detail.is_empty() {
                self.detail.push(' ');
            }
            let _ = self.detail.write_fmt(args);
        }
    }
}

type Handler = fn(&mut Emu, &mut Call<'_>) -> Result<(), Errno>;

/// A command: its name, core request and response sizes (the kernel's
/// minimums), whether driver data follows the core parts, and its handler.
struct Method {
    name: &'static str,
    req: usize,
    resp: usize,
    udata: bool,
    run: Handler,
}

const fn meth(name: &'static str, req: usize, resp: usize, udata: bool, run: Handler) -> Method {
    Method {
        name,
        req,
        resp,
        udata,
        run,
    }
}

/// The command table (legacy commands by number; extended commands: only
/// QUERY_DEVICE).
fn method(extended: bool, number: u32) -> Option<Method> {
    use std::mem::offset_of;
    if extended {
        return match number {
            nr::EX_QUERY_DEVICE => Some(meth(
                "EX_QUERY_DEVICE",
                size_of::<ExQueryDevice>(),
                offset_of!(ExQueryDeviceResp, response_length) + 4,
                true,
                ex_query_device,
            )),
            _ => None,
        };
    }
    Some(match number {
        nr::GET_CONTEXT => meth("GET_CONTEXT", 8, 8, true, get_context),
        nr::QUERY_DEVICE => meth("QUERY_DEVICE", 8, 176, false, query_device),
        nr::QUERY_PORT => meth("QUERY_PORT", 16, 40, false, query_port),
        nr::ALLOC_PD => meth("ALLOC_PD", 8, 4, true, alloc_pd),
        nr::DEALLOC_PD => meth("DEALLOC_PD", 4, 0, false, dealloc_pd),
        nr::CREATE_AH => meth("CREATE_AH", 56, 4, true, create_ah),
        nr::DESTROY_AH => meth("DESTROY_AH", 4, 0, false, destroy_ah),
        nr::REG_MR => meth("REG_MR", 40, 12, true, reg_mr),
        nr::DEREG_MR => meth("DEREG_MR", 4, 0, false, dereg_mr),
        nr::CREATE_COMP_CHANNEL => meth("CREATE_COMP_CHANNEL", 8, 4, false, create_comp_channel),
        nr::CREATE_CQ => meth("CREATE_CQ", 32, 8, true, create_cq),
        nr::RESIZE_CQ => meth("RESIZE_CQ", 16, 8, true, resize_cq),
        nr::DESTROY_CQ => meth("DESTROY_CQ", 16, 8, false, destroy_cq),
        nr::CREATE_QP => meth("CREATE_QP", 56, 32, true, create_qp),
        nr::QUERY_QP => meth("QUERY_QP", 16, 128, false, query_qp),
        nr::MODIFY_QP => meth("MODIFY_QP", 112, 0, true, modify_qp),
        nr::DESTROY_QP => meth("DESTROY_QP", 16, 4, false, destroy_qp),
        nr::CREATE_SRQ => meth("CREATE_SRQ", 32, 16, true, create_srq),
        nr::MODIFY_SRQ => meth("MODIFY_SRQ", 16, 0, true, modify_srq),
        nr::QUERY_SRQ => meth("QUERY_SRQ", 16, 16, false, query_srq),
        nr::DESTROY_SRQ => meth("DESTROY_SRQ", 16, 4, false, destroy_srq),
        _ => return None,
    })
}

/// A command split into its parts, headers validated.
struct Parsed<'a> {
    core: &'a [u8],
    drv: &'a [u8],
    out: UserBuf,
    drv_out: UserBuf,
}

/// The uverbs layer's header checks and the split into core/driver parts.
fn parse(bytes: &[u8]) -> Result<Parsed<'_>, Errno> {
    let len = bytes.len();
    let (hdr, _) = CmdHdr::read_from_prefix(bytes).map_err(|_| Errno::EINVAL)?;
    if hdr.command & !(IB_USER_VERBS_CMD_FLAG_EXTENDED | COMMAND_MASK) != 0 {
        return Err(Errno::EINVAL);
    }
    let extended = hdr.command & IB_USER_VERBS_CMD_FLAG_EXTENDED != 0;
    let method = method(extended, hdr.command & COMMAND_MASK).ok_or(Errno::EOPNOTSUPP)?;
    if extended {
        if len < EX_HDRS {
            return Err(Errno::EINVAL);
        }
        let (ex, _) =
            ExCmdHdr::read_from_prefix(&bytes[size_of::<CmdHdr>()..]).map_err(|_| Errno::EINVAL)?;
        let in_core = usize::from(hdr.in_words) * 8;
        let in_drv = usize::from(ex.provider_in_words) * 8;
        let out_core = usize::from(hdr.out_words) * 8;
        let out_drv = usize::from(ex.provider_out_words) * 8;
        if in_core + in_drv != len - EX_HDRS {
            return Err(Errno::EINVAL);
        }
        if in_core < method.req {
            return Err(Errno::ENOSPC);
        }
        if ex.cmd_hdr_reserved != 0 {
            return Err(Errno::EINVAL);
        }
        let (out, drv_out) = if ex.response != 0 {
            if out_core == 0 && out_drv == 0 {
                return Err(Errno::EINVAL);
            }
            if out_core < method.resp {
                return Err(Errno::ENOSPC);
            }
            mem::check(ex.response, out_core + out_drv)?;
            (
                UserBuf {
                    addr: ex.response,
                    len: out_core,
                },
                UserBuf {
                    addr: ex.response + out_core as u64,
                    len: out_drv,
                },
            )
        } else {
            if out_core != 0 || out_drv != 0 {
                return Err(Errno::EINVAL);
            }
            (UserBuf::default(), UserBuf::default())
        };
        let core = &bytes[EX_HDRS..EX_HDRS + in_core];
        let drv = &bytes[EX_HDRS + in_core..];
        return Ok(Parsed {
            core,
            drv,
            out,
            drv_out,
        });
    }
    if usize::from(hdr.in_words) * 4 != len {
        return Err(Errno::EINVAL);
    }
    if len < method.req + size_of::<CmdHdr>() {
        return Err(Errno::ENOSPC);
    }
    let out_len = usize::from(hdr.out_words) * 4;
    if out_len < method.resp {
        return Err(Errno::ENOSPC);
    }
    let body = &bytes[size_of::<CmdHdr>()..];
    let (core, drv) = if method.udata {
        body.split_at(method.req)
    } else {
        (body, &body[body.len()..])
    };
    let (out, drv_out) = if method.resp > 0 {
        // Every command with a response starts with its `response` pointer.
        let response = u64::from_ne_bytes(core[..8].try_into().map_err(|_| Errno::EINVAL)?);
        mem::check(response, out_len)?;
        if method.udata {
            (
                UserBuf {
                    addr: response,
                    len: method.resp,
                },
                UserBuf {
                    addr: response + method.resp as u64,
                    len: out_len - method.resp,
                },
            )
        } else {
            (
                UserBuf {
                    addr: response,
                    len: out_len,
                },
                UserBuf::default(),
            )
        }
    } else {
        (UserBuf::default(), UserBuf::default())
    };
    Ok(Parsed {
        core,
        drv,
        out,
        drv_out,
    })
}

/// Executes one `write()` on command fd `fd`. `None`: the fd is not (or no
/// longer) ours, pass the call through. Otherwise the byte count or errno.
///
/// # Safety
/// `buf` must be the pointer the application passed to `write()` with
/// `len` (it is range-checked before being read).
pub unsafe fn write(
    fd: c_int,
    buf: *const libc::c_void,
    len: usize,
) -> Option<Result<usize, Errno>> {
    let mut emu = emu::lock();
    let ctx = cdev::context_of(&mut emu, fd)?;
    if len < size_of::<CmdHdr>() {
        return Some(Err(Errno::EINVAL));
    }
    if let Err(e) = mem::check(buf as u64, len) {
        return Some(Err(e));
    }
    // SAFETY: the range was just checked to be mapped user memory; the
    // application handed it to write() and does not change it meanwhile
    // (a racing writer would only garble its own command).
    let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    let command = CmdHdr::read_from_prefix(bytes)
        .map(|(h, _)| h.command)
        .unwrap_or(0);
    let result = match parse(bytes) {
        Ok(p) => execute(
            &mut emu,
            ctx,
            fd,
            command,
            Parts {
                core: p.core,
                drv: p.drv,
                out: p.out,
                drv_out: p.drv_out,
            },
        ),
        Err(e) => {
            log::line(format_args!("command {command:#x} (len {len}) -> {e:?}"));
            Err(e)
        }
    };
    drop(emu);
    record::write_command(bytes, result);
    Some(result.map(|()| len))
}

/// A command's parts: split from the `write()` bytes by the header rules,
/// or given one by one by `UVERBS_METHOD_INVOKE_WRITE`'s attributes
/// ([`crate::ioctl`]).
pub(crate) struct Parts<'a> {
    /// Core command bytes (without headers).
    pub(crate) core: &'a [u8],
    /// Driver (mlx5) command bytes.
    pub(crate) drv: &'a [u8],
    /// Core response buffer (validated).
    pub(crate) out: UserBuf,
    /// Driver response buffer (validated).
    pub(crate) drv_out: UserBuf,
}

/// Looks `command` up as the kernel's `uapi_get_method` does: `EINVAL` for
/// bits outside the command mask, `EOPNOTSUPP` for a command it does not
/// know. Returns the core request and response sizes the command needs at
/// least (shorter ones are `ENOSPC`).
pub(crate) fn command_sizes(command: u32) -> Result<(usize, usize), Errno> {
    if command & !(IB_USER_VERBS_CMD_FLAG_EXTENDED | COMMAND_MASK) != 0 {
        return Err(Errno::EINVAL);
    }
    let extended = command & IB_USER_VERBS_CMD_FLAG_EXTENDED != 0;
    let m = method(extended, command & COMMAND_MASK).ok_or(Errno::EOPNOTSUPP)?;
    Ok((m.req, m.resp))
}

/// Runs `command`, its parts split and sized already, on context `ctx`
/// (command fd `fd`): the one way into the handlers, for `write()` and
/// `INVOKE_WRITE` alike. Logs the outcome; the caller records it.
pub(crate) fn execute(
    emu: &mut Emu,
    ctx: u64,
    fd: c_int,
    command: u32,
    parts: Parts<'_>,
) -> Result<(), Errno> {
    let extended = command & IB_USER_VERBS_CMD_FLAG_EXTENDED != 0;
    let Some(m) = method(extended, command & COMMAND_MASK) else {
        return Err(Errno::EOPNOTSUPP);
    };
    let has_uctx = emu.context(ctx).is_some_and(|c| c.ucontext().is_some());
    let mut call = Call {
        ctx,
        fd,
        core: parts.core,
        drv: parts.drv,
        out: parts.out,
        drv_out: parts.drv_out,
        detail: String::new(),
    };
    let is_get_context = command == nr::GET_CONTEXT;
    let result = if is_get_context == has_uctx {
        // GET_CONTEXT twice, or anything else before it.
        Err(Errno::EINVAL)
    } else {
        (m.run)(emu, &mut call)
    };
    if log::enabled() {
        let sep = if call.detail.is_empty() { "" } else { " " };
        match &result {
            Ok(()) => log::line(format_args!("{}{sep}{} -> ok", m.name, call.detail)),
            Err(e) => log::line(format_args!("{}{sep}{} -> {e:?}", m.name, call.detail)),
        }
    }
    result
}

// ---------------------------------------------------------------------------
// Lookups.

/// Object `h` of `map` if it belongs to `ctx`; `EINVAL` otherwise (what
/// the kernel answers a command that names a bad handle).
fn owned<T: Owned>(map: &BTreeMap<u32, T>, ctx: u64, h: u32) -> Result<&T, Errno> {
    map.get(&h).filter(|o| o.ctx() == ctx).ok_or(Errno::EINVAL)
}

/// [`owned`] for a destroy command, whose errno for a bad handle is
/// [`Emu::destroy_lookup_error`]'s (`ENOENT` or `EINVAL`, as the kernel's).
/// Set by [`mlx5_emu_refuse_destroys`]: DESTROY_CQ, DESTROY_QP and
/// DESTROY_SRQ fail with EBUSY and the object lives on, the HCA still
/// using its rings, as after a firmware command failure.
static REFUSE_DESTROYS: AtomicBool = AtomicBool::new(false);

/// Test knob, found with `dlsym` by the programs that need it (our
/// `mlx5_destroy_refused`): from now on (`on` non-zero) or no longer,
/// the kernel side refuses to destroy CQs, QPs and SRQs (EBUSY) and keeps
/// them, so that a program can check it keeps their memory.
#[no_mangle]
pub extern "C" fn mlx5_emu_refuse_destroys(on: std::ffi::c_int) {
    REFUSE_DESTROYS.store(on != 0, Ordering::SeqCst);
}

/// EBUSY while [`mlx5_emu_refuse_destroys`] is on.
fn destroy_allowed(call: &mut Call<'_>) -> Result<(), Errno> {
    if REFUSE_DESTROYS.load(Ordering::SeqCst) {
        call.note(format_args!("refused (mlx5_emu_refuse_destroys)"));
        return Err(Errno::EBUSY);
    }
    Ok(())
}

fn owned_for_destroy<'a, T: Owned>(
    emu: &'a Emu,
    map: &'a BTreeMap<u32, T>,
    ctx: u64,
    h: u32,
) -> Result<&'a T, Errno> {
    owned(map, ctx, h).map_err(|_| emu.destroy_lookup_error(ctx, h))
}

/// Adds `delta` to the users of object `h` (gone already: nothing to do).
fn add_users<T: Shared>(map: &mut BTreeMap<u32, T>, h: u32, delta: i32) {
    if let Some(o) = map.get_mut(&h) {
        let u = o.users_mut();
        *u = u.saturating_add_signed(delta);
    }
}

/// A `SOCK_SEQPACKET` pair for an event channel: `(application end, ours)`.
fn event_pair() -> Result<(c_int, c_int), Errno> {
    let mut fds = [-1 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(Errno::last());
    }
    Ok((fds[0], fds[1]))
}

/// Whether `v` is 0 or a power of two.
fn zero_or_pow2(v: u32) -> bool {
    v == 0 || v.is_power_of_two()
}

/// `roundup_pow_of_two(cqe + 1)` with the device's CQ size limit.
fn cq_entries(cqe: u32) -> Result<u32, Errno> {
    let max = 1u64 << device::LOG_MAX_CQ_SZ;
    if cqe as i32 >= 0 && u64::from(cqe) <= max {
        let entries = (u64::from(cqe) + 1).next_power_of_two();
        if entries <= max {
            return Ok(entries as u32);
        }
    }
    Err(Errno::EINVAL)
}

// ---------------------------------------------------------------------------
// mlx5 driver-data rules: what the mlx5 kernel driver (Linux 6.12) refuses
// in the driver data of each command, with its errno. Each helper names
// the kernel function whose rule it plays.

/// `MLX5_IB_DEFAULT_UIDX`: "no user index" (CQE version 0).
const DEFAULT_UIDX: u32 = 0xff_ffff;
/// `MLX5_USER_ASSIGNED_UIDX_MASK`: user indexes are 24 bits.
const UIDX_MASK: u32 = 0xff_ffff;
/// The granularity of a queue buffer's offset in its first page: the
/// quantized `page_offset` of the QP, CQ and SRQ contexts counts 64ths of
/// a 4 KiB page.
const BUF_OFFSET_QUANTUM: u64 = 64;
/// `MLX5_QP_FLAG_ALLOW_SCATTER_CQE`.
const QP_FLAG_ALLOW_SCATTER_CQE: u32 = 1 << 8;
/// `sizeof(struct mlx5_ib_modify_qp)`: `comp_mask`, the burst information
/// (`max_burst_sz`, `typical_pkt_sz`, `reserved`) and `ece_options`.
const MODIFY_QP_UDATA: usize = 16;

/// The GET_CONTEXT driver data (`mlx5_ib_alloc_ucontext`): exactly the
/// 8-byte original request, or the v2 request at least up to
/// `max_cqe_version` (`EINVAL` otherwise); whether it is v2. The kernel
/// copies at most the v2 struct: later bytes are not read. Unknown flags
/// (only DEVX exists), a `comp_mask` or non-zero reserved fields:
/// `EOPNOTSUPP`. `lib_caps` is not checked (the kernel does not either).
fn ucontext_req(drv: &[u8]) -> Result<(mlx5::AllocUcontextReqV2, bool), Errno> {
    const V2_MIN: usize = std::mem::offset_of!(mlx5::AllocUcontextReqV2, max_cqe_version);
    let v2 = match drv.len() {
        8 => false,
        n if n >= V2_MIN => true,
        _ => return Err(Errno::EINVAL),
    };
    let req: mlx5::AllocUcontextReqV2 = read_padded(drv);
    if req.flags & !mlx5::MLX5_IB_ALLOC_UCTX_DEVX != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if req.comp_mask != 0 || req.reserved0 != 0 || req.reserved1 != 0 || req.reserved2 != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok((req, v2))
}

/// The static bfregs of a new ucontext (`mlx5_ib_alloc_ucontext` and
/// `calc_total_bfregs`): the count rounds up to whole UARs in 32-bit
/// arithmetic (so `u32::MAX` wraps to 0); more low-latency bfregs than
/// that count less one is `EINVAL` (checked first, with the same wrapping
/// subtraction, so a zero count passes it); then zero is `EINVAL` and more
/// than [`device::MAX_TOTAL_BFREGS`] `ENOMEM`. (A library asking for
/// dynamic UARs, `MLX5_LIB_CAP_DYN_UAR`, skips the last two on the
/// kernel; the emulator has no dynamic UAR object and serves every
/// context from static UARs, as a kernel without that capability does.)
fn ucontext_bfregs(total: u32, low_latency: u32) -> Result<u32, Errno> {
    let per_uar = device::BFREGS_PER_UAR;
    let total = total.wrapping_add(per_uar - 1) & !(per_uar - 1);
    if low_latency > total.wrapping_sub(1) {
        return Err(Errno::EINVAL);
    }
    if total == 0 {
        return Err(Errno::EINVAL);
    }
    if total > device::MAX_TOTAL_BFREGS {
        return Err(Errno::ENOMEM);
    }
    Ok(total)
}

/// A queue buffer's start (`mlx5_umem_find_best_quantized_pgoff`, used by
/// `create_cq_user`, `mlx5_ib_resize_cq`, `_create_user_qp` and the SRQ
/// creation): its offset in the first 4 KiB page must be a whole number
/// of 64-byte quanta, or no page size fits the context and the kernel
/// answers `EINVAL`.
fn check_buf_offset(addr: u64) -> Result<(), Errno> {
    if addr % BUF_OFFSET_QUANTUM != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The CREATE_CQ driver data (`create_cq_user`): at least up to `flags`
/// (`EINVAL`); at most the struct is read, later bytes are ignored (6.12;
/// the 7.x `ib_copy_validate_udata_in` answers `EOPNOTSUPP` to non-zero
/// ones). Unknown flags, a CQE size other than 64 or 128, and non-zero
/// reserved fields: `EINVAL`.
fn create_cq_req(drv: &[u8]) -> Result<mlx5::CreateCq, Errno> {
    const MIN: usize = std::mem::offset_of!(mlx5::CreateCq, flags);
    if drv.len() < MIN {
        return Err(Errno::EINVAL);
    }
    let ucmd: mlx5::CreateCq = read_padded(drv);
    let known = mlx5::MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD
        | mlx5::MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX
        | mlx5::MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS;
    if ucmd.flags & !known != 0 {
        return Err(Errno::EINVAL);
    }
    check_cqe_size(ucmd.cqe_size)?;
    if ucmd.reserved0 != 0 || ucmd.reserved1 != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(ucmd)
}

/// The CQ features CREATE_CQ may ask for beyond the ring
/// (`create_cq_user`), against the emulated device's capabilities:
/// compression (`cqe_comp_en == 1`; other values are ignored), 128-byte
/// padding and real-time stamps are not offered: `EOPNOTSUPP`. A dynamic
/// UAR page for the arm doorbell names an object the emulator has not
/// got: `EINVAL`, the firmware's answer to a foreign UAR.
fn check_cq_features(ucmd: &mlx5::CreateCq) -> Result<(), Errno> {
    if ucmd.cqe_comp_en == 1 {
        return Err(Errno::EOPNOTSUPP);
    }
    if ucmd.flags & mlx5::MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    // The kernel takes the flag here and refuses it when a QP is created
    // on the CQ (get_qp_ts_format); the emulator, keeping no such state,
    // refuses it at once with the same errno.
    if ucmd.flags & mlx5::MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if ucmd.flags & mlx5::MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The RESIZE_CQ driver data (`resize_user`): the whole struct (shorter
/// data is `EINVAL` here; 6.12 reads past it, 7.x refuses it likewise),
/// later bytes ignored; non-zero reserved fields `EINVAL`. The CQE size
/// must be 64 or 128 (`EINVAL`, the firmware's answer to any other).
fn resize_cq_req(drv: &[u8]) -> Result<mlx5::ResizeCq, Errno> {
    if drv.len() < size_of::<mlx5::ResizeCq>() {
        return Err(Errno::EINVAL);
    }
    let ucmd: mlx5::ResizeCq = read_padded(drv);
    if ucmd.reserved0 != 0 || ucmd.reserved1 != 0 {
        return Err(Errno::EINVAL);
    }
    check_cqe_size(u32::from(ucmd.cqe_size))?;
    Ok(ucmd)
}

/// The CREATE_QP driver data (`process_udata_size`, `check_ucmd_data`):
/// at least up to `ece_options` (`EINVAL`); from `reserved` on, every byte
/// sent must be zero (`EINVAL`).
fn create_qp_req(drv: &[u8]) -> Result<mlx5::CreateQp, Errno> {
    const MIN: usize = std::mem::offset_of!(mlx5::CreateQp, ece_options);
    const LAST: usize = std::mem::offset_of!(mlx5::CreateQp, reserved);
    if drv.len() < MIN {
        return Err(Errno::EINVAL);
    }
    if drv.len() > LAST && !all_zero(&drv[LAST..]) {
        return Err(Errno::EINVAL);
    }
    Ok(read_padded(drv))
}

/// The vendor flags of an RC, UC or UD QP (`process_vendor_flags`):
/// signatures are always granted; scatter-to-CQE (either flag) is granted
/// or silently dropped by the device's capability, never refused; a
/// caller-chosen bfreg or UAR page passes here and is refused by
/// [`check_qp_uar`]. Everything else (DC types, DCI streams, raw-packet
/// offloads, packet-based credits, unknown bits) is `EINVAL` on this
/// device.
fn check_qp_flags(flags: u32) -> Result<(), Errno> {
    let granted = mlx5::MLX5_QP_FLAG_SIGNATURE
        | mlx5::MLX5_QP_FLAG_SCATTER_CQE
        | QP_FLAG_ALLOW_SCATTER_CQE
        | mlx5::MLX5_QP_FLAG_BFREG_INDEX
        | mlx5::MLX5_QP_FLAG_UAR_PAGE_INDEX;
    if flags & !granted != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The QP's doorbell register (`_create_user_qp`): with neither flag the
/// kernel allocates a bfreg. Both flags are `EINVAL`; a bfreg index names
/// a dynamic bfreg, of which an emulated context has none, and a UAR page
/// index names a dynamic UAR object the emulator has not got: `EINVAL`.
fn check_qp_uar(flags: u32) -> Result<(), Errno> {
    if flags & (mlx5::MLX5_QP_FLAG_BFREG_INDEX | mlx5::MLX5_QP_FLAG_UAR_PAGE_INDEX) != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The user index of a QP (`get_qp_user_index`, `verify_assign_uidx`).
/// With CQE version 0 the library must send [`DEFAULT_UIDX`] (`EINVAL`
/// otherwise); with version 1 it must send a 24-bit index other than that
/// one (`EINVAL`).
fn qp_user_index(cqe_version: u8, uidx: u32) -> Result<u32, Errno> {
    if cqe_version == 0 {
        return if uidx == DEFAULT_UIDX {
            Ok(DEFAULT_UIDX)
        } else {
            Err(Errno::EINVAL)
        };
    }
    if uidx == DEFAULT_UIDX || uidx & !UIDX_MASK != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(uidx)
}

/// The receive queue a QP's driver data describes (`set_rq_size` with the
/// library's sizes, then `create_user_qp`'s comparison). A QP has one
/// when it has no SRQ and asked for receive WRs; with none, the WQE count
/// and shift must be 0 (`EINVAL`). With one, a shift past 32 and, with
/// signatures, a WQE too small for the signature are `EINVAL`. The
/// emulator also refuses, with the `EINVAL` the firmware gives a context
/// it cannot build, a WQE count that is not 0 or a power of two (the
/// kernel passes its log, rounded down) or above the device limit, and a
/// WQE size outside 16 bytes..`max_rq_desc_sz`.
fn qp_rq(ucmd: &mlx5::CreateQp, has_rq: bool) -> Result<WorkQueue, Errno> {
    if !has_rq {
        if ucmd.rq_wqe_count != 0 || ucmd.rq_wqe_shift != 0 {
            return Err(Errno::EINVAL);
        }
        return Ok(WorkQueue::default());
    }
    if ucmd.rq_wqe_shift > u32::BITS {
        return Err(Errno::EINVAL);
    }
    let sig = ucmd.flags & mlx5::MLX5_QP_FLAG_SIGNATURE != 0;
    if sig && ucmd.rq_wqe_shift < 4 {
        return Err(Errno::EINVAL);
    }
    if !zero_or_pow2(ucmd.rq_wqe_count) || ucmd.rq_wqe_count > device::MAX_QP_WR {
        return Err(Errno::EINVAL);
    }
    let max_shift = u32::from(device::MAX_RQ_DESC_SZ).trailing_zeros();
    if ucmd.rq_wqe_count > 0 && !(4..=max_shift).contains(&ucmd.rq_wqe_shift) {
        return Err(Errno::EINVAL);
    }
    Ok(WorkQueue {
        buf: ucmd.buf_addr,
        wqe_cnt: ucmd.rq_wqe_count,
        wqe_shift: if ucmd.rq_wqe_count > 0 {
            ucmd.rq_wqe_shift
        } else {
            0
        },
    })
}

/// The MODIFY_QP driver data (`mlx5_ib_modify_qp`): none, or at least up
/// to `ece_options` (`EINVAL`); bytes past the struct must be zero
/// (`EOPNOTSUPP`); a `comp_mask` (only out-of-order data placement exists,
/// which the device does not offer) or a non-zero burst `reserved`:
/// `EOPNOTSUPP`. The burst sizes (raw-packet rate limits) and the ECE
/// options (without the firmware's ECE support) are not used.
fn check_modify_qp_udata(drv: &[u8]) -> Result<(), Errno> {
    if drv.is_empty() {
        return Ok(());
    }
    if drv.len() < MODIFY_QP_UDATA {
        return Err(Errno::EINVAL);
    }
    if !all_zero(&drv[MODIFY_QP_UDATA..]) {
        return Err(Errno::EOPNOTSUPP);
    }
    let word = |at: usize| u32::from_ne_bytes([drv[at], drv[at + 1], drv[at + 2], drv[at + 3]]);
    let comp_mask = word(0);
    let burst_reserved = u16::from_ne_bytes([drv[10], drv[11]]);
    if comp_mask != 0 || burst_reserved != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(())
}

/// The CREATE_SRQ driver data of a basic SRQ (`create_srq_user`): fields
/// not sent count as zero (6.12 has no minimum; 7.x wants up to `flags`);
/// non-zero reserved fields and non-zero bytes past the struct are
/// `EINVAL` (7.x: `EOPNOTSUPP` for the latter). The kernel reads only the
/// signature flag and checks the user index only for XRC and
/// tag-matching SRQs, so neither unknown flags nor the index are refused.
fn create_srq_req(drv: &[u8]) -> Result<mlx5::CreateSrq, Errno> {
    let size = size_of::<mlx5::CreateSrq>();
    if drv.len() > size && !all_zero(&drv[size..]) {
        return Err(Errno::EINVAL);
    }
    let ucmd: mlx5::CreateSrq = read_padded(drv);
    if ucmd.reserved0 != 0 || ucmd.reserved1 != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(ucmd)
}

// ---------------------------------------------------------------------------
// Device-level commands.

fn get_context(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    call.req::<GetContext>()?;
    let drv = call.drv;
    let (req, v2) = ucontext_req(drv)?;
    let total = ucontext_bfregs(req.total_num_bfregs, req.num_low_latency_bfregs)?;
    // The response's CQE version: what both the firmware and the library
    // support (mlx5_ib_alloc_ucontext); a request without the field asks
    // for version 0.
    const V2_MIN: usize = std::mem::offset_of!(mlx5::AllocUcontextReqV2, max_cqe_version);
    let cqe_version = if drv.len() > V2_MIN {
        req.max_cqe_version.min(device::MAX_CQE_VERSION)
    } else {
        0
    };
    let pages = total / device::BFREGS_PER_UAR;
    // SAFETY: ftruncate on our own memfd; sizes the UAR page backing.
    if unsafe {
        libc::ftruncate(
            call.fd,
            pages as libc::off_t * device::UAR_SIZE as libc::off_t,
        )
    } != 0
    {
        return Err(Errno::last());
    }
    let (user, peer) = event_pair()?;
    let ctx = call.ctx;
    if !emu.contexts.contains_key(&ctx) {
        crate::real::close(user);
        crate::real::close(peer);
        return Err(Errno::EIO);
    }
    let async_channel = emu.add_channel(ctx, EventKind::Async, user, peer);
    fdtable::set(user, FdKind::Event);
    let uctx = emu::Ucontext {
        async_channel,
        tot_bfregs: total,
        low_lat_bfregs: req.num_low_latency_bfregs,
        cqe_version,
        devx: v2 && req.flags & mlx5::MLX5_IB_ALLOC_UCTX_DEVX != 0,
        bfreg_users: vec![0; total as usize],
    };
    if let Some(c) = emu.contexts.get_mut(&ctx) {
        c.ucontext = Some(uctx);
    }
    call.out.put(
        &GetContextResp {
            async_fd: user as u32,
            num_comp_vectors: device::NUM_COMP_VECTORS,
        },
        true,
    );
    let mut resp = device::ucontext_resp(total, cqe_version);
    resp.response_length = call.drv_out.len.min(size_of::<mlx5::AllocUcontextResp>()) as u32;
    call.drv_out.put(&resp, false);
    call.note(format_args!(
        "context {ctx} bfregs {total}/{} cqe_version {cqe_version} async_fd {user}",
        req.num_low_latency_bfregs
    ));
    Ok(())
}

fn query_device(_emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    call.req::<QueryDevice>()?;
    call.out.put(&device::query_device(), true);
    Ok(())
}

fn ex_query_device(_emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: ExQueryDevice = call.req()?;
    if req.comp_mask != 0 || req.reserved != 0 {
        return Err(Errno::EINVAL);
    }
    let mut resp = device::ex_query_device();
    resp.response_length = call.out.len.min(size_of::<ExQueryDeviceResp>()) as u32;
    call.out.put(&resp, true);
    // The mlx5 part (TSO, RSS, CQE compression, packet pacing, ...): none.
    let zeros = vec![0u8; call.drv_out.len];
    call.drv_out.put_bytes(&zeros, false);
    Ok(())
}

fn query_port(_emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: QueryPort = call.req()?;
    call.note(format_args!("port {}", req.port_num));
    if !device::port_valid(req.port_num) {
        return Err(Errno::EINVAL);
    }
    call.out.put(&device::query_port(), true);
    Ok(())
}

// ---------------------------------------------------------------------------
// PD, MR, AH, completion channel.

fn alloc_pd(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    call.req::<AllocPd>()?;
    let handle = emu.handle();
    let pdn = emu.new_pdn();
    emu.pds.insert(
        handle,
        Pd {
            ctx: call.ctx,
            pdn,
            users: 0,
        },
    );
    call.out.put(&AllocPdResp { pd_handle: handle }, true);
    call.drv_out.put(&mlx5::AllocPdResp { pdn }, false);
    call.note(format_args!("pd {handle} pdn {pdn:#x}"));
    Ok(())
}

fn dealloc_pd(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DeallocPd = call.req()?;
    let h = req.pd_handle;
    call.note(format_args!("pd {h}"));
    let pd = owned_for_destroy(emu, &emu.pds, call.ctx, h)?;
    if pd.users > 0 {
        return Err(Errno::EBUSY);
    }
    emu.pds.remove(&h);
    Ok(())
}

fn reg_mr(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: RegMr = call.req()?;
    call.note(format_args!(
        "pd {} start {:#x} len {:#x} access {:#x}",
        req.pd_handle, req.start, req.length, req.access_flags
    ));
    if (req.start ^ req.hca_va) & (device::UAR_SIZE as u64 - 1) != 0 {
        return Err(Errno::EINVAL);
    }
    let access = req.access_flags;
    if access & !MR_ACCESS_SUPPORTED != 0 {
        return Err(Errno::EINVAL);
    }
    let needs_local_write = (AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC).bits();
    if access & needs_local_write != 0 && access & AccessFlags::LOCAL_WRITE.bits() == 0 {
        return Err(Errno::EINVAL);
    }
    if access & AccessFlags::ON_DEMAND.bits() != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    owned(&emu.pds, call.ctx, req.pd_handle)?;
    if req.length == 0 || req.start.checked_add(req.length).is_none() {
        return Err(Errno::EINVAL);
    }
    let len = usize::try_from(req.length).map_err(|_| Errno::EINVAL)?;
    mem::check(req.start, len)?;
    let handle = emu.handle();
    let key = emu.new_mkey();
    emu.mrs.insert(
        handle,
        Mr {
            ctx: call.ctx,
            pd: req.pd_handle,
            start: req.start,
            length: req.length,
            hca_va: req.hca_va,
            access,
            lkey: key,
            rkey: key,
            backing: None,
        },
    );
    add_users(&mut emu.pds, req.pd_handle, 1);
    call.out.put(
        &RegMrResp {
            mr_handle: handle,
            lkey: key,
            rkey: key,
        },
        true,
    );
    call.note(format_args!("-> mr {handle} key {key:#x}"));
    Ok(())
}

fn dereg_mr(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DeregMr = call.req()?;
    let h = req.mr_handle;
    call.note(format_args!("mr {h}"));
    let pd = owned_for_destroy(emu, &emu.mrs, call.ctx, h)?.pd;
    emu.mrs.remove(&h);
    add_users(&mut emu.pds, pd, -1);
    Ok(())
}

fn create_ah(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateAh = call.req()?;
    let a = req.attr;
    call.note(format_args!(
        "pd {} port {} dlid {:#x} global {}",
        req.pd_handle, a.port_num, a.dlid, a.is_global
    ));
    if !device::port_valid(a.port_num) {
        return Err(Errno::EINVAL);
    }
    owned(&emu.pds, call.ctx, req.pd_handle)?;
    // RoCE: the kernel resolves the destination MAC and mlx5 answers it.
    let dmac = if device::link() == device::Link::Eth {
        let dmac = roce_path(a.is_global, a.grh.sgid_index, &a.grh.dgid)?;
        // mlx5_ib_create_ah: room for the answer up to `dmac`.
        if call.drv_out.len < ROCE_AH_RESP_LEN {
            return Err(Errno::EINVAL);
        }
        Some(dmac)
    } else {
        if a.is_global != 0 && u32::from(a.grh.sgid_index) >= device::GID_TBL_LEN {
            return Err(Errno::EINVAL);
        }
        None
    };
    let handle = emu.handle();
    emu.ahs.insert(
        handle,
        emu::Ah {
            ctx: call.ctx,
            pd: req.pd_handle,
            attr: a,
        },
    );
    add_users(&mut emu.pds, req.pd_handle, 1);
    call.out.put(&CreateAhResp { ah_handle: handle }, true);
    if let Some(dmac) = dmac {
        // The kernel answers `response_length` and `dmac`, nothing past.
        let resp = mlx5::CreateAhResp {
            response_length: ROCE_AH_RESP_LEN as u32,
            dmac,
            ..Default::default()
        };
        call.drv_out
            .put_bytes(&resp.as_bytes()[..ROCE_AH_RESP_LEN], false);
        call.note(format_args!("dmac {dmac:02x?}"));
    } else {
        // InfiniBand link layer: no MAC to resolve.
        let resp = mlx5::CreateAhResp {
            response_length: call.drv_out.len.min(size_of::<mlx5::CreateAhResp>()) as u32,
            ..Default::default()
        };
        call.drv_out.put(&resp, false);
    }
    call.note(format_args!("-> ah {handle}"));
    Ok(())
}

/// Bytes of `struct mlx5_ib_create_ah_resp` the kernel answers on RoCE
/// (up to the end of `dmac`).
const ROCE_AH_RESP_LEN: usize = std::mem::offset_of!(mlx5::CreateAhResp, reserved);

/// The checks and the MAC resolution the kernel applies to a RoCE address
/// vector (CREATE_AH, and MODIFY_QP of a connected QP; the alternate path
/// is checked but not resolved): `rdma_check_ah_attr` refuses one without
/// a GRH (`EINVAL`), `rdma_fill_sgid_attr` one whose source GID index
/// names no valid entry (`rdma_get_gid_attr`: `ENODATA`), and
/// `ib_resolve_eth_dmac` yields the destination MAC or its error (see
/// [`device::resolve_dmac`]).
fn roce_path(is_global: u8, sgid_index: u8, dgid: &[u8; 16]) -> Result<[u8; 6], Errno> {
    if is_global == 0 {
        return Err(Errno::EINVAL);
    }
    let sgid = device::gid_entry(u32::from(sgid_index)).ok_or(Errno::ENODATA)?;
    device::resolve_dmac(&sgid, dgid)
}

fn destroy_ah(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroyAh = call.req()?;
    let h = req.ah_handle;
    call.note(format_args!("ah {h}"));
    let pd = owned_for_destroy(emu, &emu.ahs, call.ctx, h)?.pd;
    emu.ahs.remove(&h);
    add_users(&mut emu.pds, pd, -1);
    Ok(())
}

fn create_comp_channel(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    call.req::<CreateCompChannel>()?;
    let (user, peer) = event_pair()?;
    emu.add_channel(call.ctx, EventKind::Comp, user, peer);
    fdtable::set(user, FdKind::Event);
    call.out
        .put(&CreateCompChannelResp { fd: user as u32 }, true);
    call.note(format_args!("-> fd {user}"));
    Ok(())
}

// ---------------------------------------------------------------------------
// CQ.

fn check_cqe_size(size: u32) -> Result<(), Errno> {
    match size {
        64 | 128 => Ok(()),
        _ => Err(Errno::EINVAL),
    }
}

fn create_cq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateCq = call.req()?;
    call.note(format_args!(
        "cqe {} channel {} vector {}",
        req.cqe, req.comp_channel, req.comp_vector
    ));
    if req.comp_vector >= device::NUM_COMP_VECTORS {
        return Err(Errno::EINVAL);
    }
    let channel = if req.comp_channel >= 0 {
        let ch = emu
            .channels
            .get(&req.comp_channel)
            .filter(|c| c.kind == EventKind::Comp && c.ctx == call.ctx)
            .ok_or(Errno::EBADF)?;
        Some(ch.id)
    } else {
        None
    };
    let entries = cq_entries(req.cqe)?;
    // The kernel's order (create_cq_user): the request, the ring's pages
    // and their offset, the doorbell page, then the features.
    let ucmd = create_cq_req(call.drv)?;
    mem::check(ucmd.buf_addr, entries as usize * ucmd.cqe_size as usize)?;
    check_buf_offset(ucmd.buf_addr)?;
    mem::check(ucmd.db_addr, 8)?;
    check_cq_features(&ucmd)?;
    let handle = emu.handle();
    let cqn = emu.new_cqn();
    emu.cqs.insert(
        handle,
        Cq {
            ctx: call.ctx,
            cqn,
            user_handle: req.user_handle,
            channel,
            comp_vector: req.comp_vector,
            ring: CqRing {
                buf: ucmd.buf_addr,
                entries,
                cqe_size: ucmd.cqe_size,
            },
            resize_from: None,
            hw_pi: 0,
            db_addr: ucmd.db_addr,
            uar_page: 0,
            users: 0,
            comp_events_reported: 0,
            async_events_reported: 0,
        },
    );
    call.out.put(
        &CreateCqResp {
            cq_handle: handle,
            cqe: entries - 1,
        },
        true,
    );
    call.drv_out
        .put(&mlx5::CreateCqResp { cqn, reserved: 0 }, false);
    call.note(format_args!(
        "-> cq {handle} cqn {cqn:#x} entries {entries}"
    ));
    Ok(())
}

fn resize_cq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: ResizeCq = call.req()?;
    let h = req.cq_handle;
    call.note(format_args!("cq {h} cqe {}", req.cqe));
    let cur = owned(&emu.cqs, call.ctx, h)?.ring;
    if req.cqe < 1 {
        return Err(Errno::EINVAL);
    }
    let entries = cq_entries(req.cqe)?;
    // The same size again is done before the driver data is read
    // (mlx5_ib_resize_cq).
    if entries != cur.entries {
        let ucmd = resize_cq_req(call.drv)?;
        mem::check(ucmd.buf_addr, entries as usize * usize::from(ucmd.cqe_size))?;
        check_buf_offset(ucmd.buf_addr)?;
        let cq = emu.cqs.get_mut(&h).ok_or(Errno::EINVAL)?;
        // The HCA's MODIFY_CQ (resize) fails, BAD_PARAM (the kernel's
        // EINVAL), when the CQEs not yet consumed do not fit: they and
        // the RESIZE CQE's counter must fit the new ring, and the RESIZE
        // CQE needs a free entry in the old one (notes, 1.3).
        let outstanding = crate::hca::cq_outstanding(cq);
        if outstanding >= entries.min(cur.entries) {
            call.note(format_args!(
                "{outstanding} CQEs outstanding: {entries} entries cannot hold them"
            ));
            return Err(Errno::EINVAL);
        }
        // Like the HW: the RESIZE CQE ends the old ring at the producer
        // counter and production continues at the next counter in the new
        // ring. The HCA thread writes CQEs only under the emulator lock,
        // which this command holds, so the switch is atomic for it.
        cq.resize_from = Some(cur);
        crate::hca::write_resize_cqe(cur, cq.hw_pi);
        cq.hw_pi = cq.hw_pi.wrapping_add(1);
        cq.ring = CqRing {
            buf: ucmd.buf_addr,
            entries,
            cqe_size: u32::from(ucmd.cqe_size),
        };
        cq.resize_from = None;
    }
    call.out.put(
        &ResizeCqResp {
            cqe: entries - 1,
            reserved: 0,
        },
        true,
    );
    call.note(format_args!("-> entries {entries}"));
    Ok(())
}

fn destroy_cq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroyCq = call.req()?;
    let h = req.cq_handle;
    call.note(format_args!("cq {h}"));
    destroy_allowed(call)?;
    let cq = owned_for_destroy(emu, &emu.cqs, call.ctx, h)?;
    if cq.users > 0 {
        return Err(Errno::EBUSY);
    }
    let resp = DestroyCqResp {
        comp_events_reported: cq.comp_events_reported,
        async_events_reported: cq.async_events_reported,
    };
    emu.cqs.remove(&h);
    call.out.put(&resp, true);
    Ok(())
}

// ---------------------------------------------------------------------------
// QP.

fn create_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateQp = call.req()?;
    call.note(format_args!(
        "type {} pd {} send_cq {} recv_cq {} srq {}",
        req.qp_type,
        req.pd_handle,
        req.send_cq_handle,
        req.recv_cq_handle,
        if req.is_srq != 0 {
            req.srq_handle.to_string()
        } else {
            "-".into()
        }
    ));
    if !matches!(req.qp_type, qp_type::RC | qp_type::UC | qp_type::UD) {
        return Err(Errno::EOPNOTSUPP);
    }
    let ctx = call.ctx;
    owned(&emu.pds, ctx, req.pd_handle)?;
    owned(&emu.cqs, ctx, req.send_cq_handle)?;
    owned(&emu.cqs, ctx, req.recv_cq_handle)?;
    let srq = if req.is_srq != 0 {
        owned(&emu.srqs, ctx, req.srq_handle)?;
        Some(req.srq_handle)
    } else {
        None
    };
    if req.max_send_wr > device::MAX_QP_WR
        || req.max_recv_wr > device::MAX_QP_WR
        || req.max_send_sge > device::MAX_SGE
        || req.max_recv_sge > device::MAX_SGE
        || req.max_inline_data > u32::from(device::MAX_SQ_DESC_SZ)
    {
        return Err(Errno::EINVAL);
    }
    // The mlx5 driver data, in the kernel's order (mlx5_ib_create_qp,
    // create_user_qp, _create_user_qp).
    let ucmd = create_qp_req(call.drv)?;
    check_qp_flags(ucmd.flags)?;
    let cqe_version = emu
        .context(ctx)
        .and_then(|c| c.ucontext())
        .map_or(0, |u| u.cqe_version());
    let uidx = qp_user_index(cqe_version, ucmd.uidx)?;
    let rq = qp_rq(&ucmd, srq.is_none() && req.max_recv_wr != 0)?;
    // The send queue in 64-byte basic blocks (create_user_qp,
    // set_user_buf_size): 0 or a power of two, at most the device's.
    if ucmd.sq_wqe_count > device::MAX_QP_WR {
        return Err(Errno::EINVAL);
    }
    check_qp_uar(ucmd.flags)?;
    if !zero_or_pow2(ucmd.sq_wqe_count) {
        return Err(Errno::EINVAL);
    }
    // The send queue follows the receive queue; a range past the end of
    // the address space is ib_umem_get's EINVAL.
    let sq = WorkQueue {
        buf: ucmd.buf_addr.checked_add(rq.bytes()).ok_or(Errno::EINVAL)?,
        wqe_cnt: ucmd.sq_wqe_count,
        wqe_shift: 6,
    };
    let total = rq.bytes() + sq.bytes();
    if total > 0 {
        mem::check(ucmd.buf_addr, total as usize)?;
        check_buf_offset(ucmd.buf_addr)?;
    }
    mem::check(ucmd.db_addr, 8)?;
    let bfreg = emu.ucontext_mut(ctx).ok_or(Errno::EINVAL)?.alloc_bfreg()?;
    let handle = emu.handle();
    let qpn = emu.new_qpn();
    let caps = QpCaps {
        max_send_wr: req.max_send_wr,
        max_recv_wr: req.max_recv_wr,
        max_send_sge: req.max_send_sge,
        max_recv_sge: req.max_recv_sge,
        max_inline_data: req.max_inline_data,
    };
    crate::hca::start();
    emu.qps.insert(
        handle,
        Qp {
            ctx,
            qpn,
            qp_type: req.qp_type,
            user_handle: req.user_handle,
            pd: req.pd_handle,
            send_cq: req.send_cq_handle,
            recv_cq: req.recv_cq_handle,
            srq,
            caps,
            sq_sig_all: req.sq_sig_all != 0,
            flags: ucmd.flags,
            uidx,
            sq,
            rq,
            db_addr: ucmd.db_addr,
            bfreg,
            state: qp_state::RESET,
            attrs: QpAttrs::default(),
            events_reported: 0,
            resets: 0,
        },
    );
    add_users(&mut emu.pds, req.pd_handle, 1);
    add_users(&mut emu.cqs, req.send_cq_handle, 1);
    add_users(&mut emu.cqs, req.recv_cq_handle, 1);
    if let Some(s) = srq {
        add_users(&mut emu.srqs, s, 1);
    }
    call.out.put(
        &CreateQpResp {
            qp_handle: handle,
            qpn,
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: caps.max_inline_data,
            reserved: 0,
        },
        true,
    );
    let (bfreg_index, page, offset) = emu::bfreg_location(bfreg);
    call.drv_out.put(
        &mlx5::CreateQpResp {
            bfreg_index,
            ..Default::default()
        },
        false,
    );
    call.note(format_args!(
        "-> qp {handle} qpn {qpn:#x} sq {}x64 rq {}x{} uidx {uidx:#x} bfreg {bfreg} \
         (index {bfreg_index}, UAR {page} +{offset:#x})",
        sq.wqe_cnt,
        rq.wqe_cnt,
        if rq.wqe_cnt > 0 {
            1u32 << rq.wqe_shift
        } else {
            0
        }
    ));
    Ok(())
}

/// Scatter entries per receive WQE of a QP (what the kernel reports).
fn rq_max_gs(qp: &Qp) -> u32 {
    if qp.rq.wqe_cnt == 0 {
        return 0;
    }
    let sig = u32::from(qp.flags & mlx5::MLX5_QP_FLAG_SIGNATURE != 0);
    ((1u32 << qp.rq.wqe_shift) / 16).saturating_sub(sig)
}

fn query_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: QueryQp = call.req()?;
    call.note(format_args!("qp {}", req.qp_handle));
    let qp = owned(&emu.qps, call.ctx, req.qp_handle)?;
    let a = &qp.attrs;
    let resp = QueryQpResp {
        dest: a.dest,
        alt_dest: a.alt_dest,
        // Send capabilities of user QPs are the provider's business.
        max_send_wr: 0,
        max_recv_wr: qp.rq.wqe_cnt,
        max_send_sge: 0,
        max_recv_sge: rq_max_gs(qp),
        max_inline_data: 0,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        qp_state: qp.state,
        cur_qp_state: qp.state,
        path_mtu: a.path_mtu,
        path_mig_state: a.path_mig_state,
        sq_draining: 0,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        sq_sig_all: u8::from(qp.sq_sig_all),
        reserved: [0; 5],
    };
    call.note(format_args!("state {}", qp.state));
    call.out.put(&resp, true);
    Ok(())
}

fn modify_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: ModifyQp = call.req()?;
    let mask = req.attr_mask;
    call.note(format_args!(
        "qp {} mask {mask:#x} state {}",
        req.qp_handle,
        if mask & am::STATE != 0 {
            req.qp_state.to_string()
        } else {
            "-".into()
        }
    ));
    let qp = owned(&emu.qps, call.ctx, req.qp_handle)?;
    if mask & !LEGACY_QP_ATTR_MASK != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    check_modify_qp_udata(call.drv)?;
    if (mask & am::STATE != 0 && req.qp_state > qp_state::ERR)
        || (mask & am::CUR_STATE != 0 && req.cur_qp_state > qp_state::ERR)
    {
        return Err(Errno::EINVAL);
    }
    let cur = if mask & am::CUR_STATE != 0 {
        req.cur_qp_state
    } else {
        qp.state
    };
    if cur != qp.state {
        return Err(Errno::EINVAL);
    }
    let next = if mask & am::STATE != 0 {
        req.qp_state
    } else {
        cur
    };
    if !qp_fsm::transition_ok(cur, next, qp.qp_type, mask) {
        return Err(Errno::EINVAL);
    }
    let eth = device::link() == device::Link::Eth;
    let sgid_ok = |d: &rverbs_abi::qp::QpDest| {
        eth || d.is_global == 0 || u32::from(d.sgid_index) < device::GID_TBL_LEN
    };
    if (mask & am::PORT != 0 && !device::port_valid(req.port_num))
        || (mask & am::AV != 0 && (!device::port_valid(req.dest.port_num) || !sgid_ok(&req.dest)))
        || (mask & am::ALT_PATH != 0
            && (!device::port_valid(req.alt_port_num)
                || !device::port_valid(req.alt_dest.port_num)
                || !sgid_ok(&req.alt_dest)))
        || (mask & am::PKEY_INDEX != 0 && req.pkey_index >= device::pkey_tbl_len())
        || (mask & am::ALT_PATH != 0 && req.alt_pkey_index >= device::pkey_tbl_len())
        || (mask & am::PATH_MTU != 0 && !(1..=device::MTU_4096).contains(&req.path_mtu))
        || (mask & am::MAX_QP_RD_ATOMIC != 0
            && u32::from(req.max_rd_atomic) > device::MAX_RD_ATOMIC)
        || (mask & am::MAX_DEST_RD_ATOMIC != 0
            && u32::from(req.max_dest_rd_atomic) > device::MAX_RD_ATOMIC)
    {
        return Err(Errno::EINVAL);
    }
    if eth {
        // _ib_modify_qp: both paths checked, the primary one of a
        // connected QP resolved to a MAC (the emulated HCA routes by QP
        // number, so the MAC itself is not kept).
        let d = &req.dest;
        if mask & am::AV != 0 {
            let dmac = roce_path(d.is_global, d.sgid_index, &d.dgid)?;
            call.note(format_args!("dmac {dmac:02x?}"));
        }
        let alt = &req.alt_dest;
        if mask & am::ALT_PATH != 0 && alt.is_global == 0 {
            return Err(Errno::EINVAL);
        }
        if mask & am::ALT_PATH != 0 && device::gid_entry(u32::from(alt.sgid_index)).is_none() {
            return Err(Errno::ENODATA);
        }
    }
    if cur == qp_state::RESET && next == qp_state::RESET {
        return Ok(());
    }
    let qp = emu.qps.get_mut(&req.qp_handle).ok_or(Errno::EINVAL)?;
    if next == qp_state::RESET {
        qp.attrs = QpAttrs::default();
        qp.resets = qp.resets.wrapping_add(1);
        qp.state = next;
        return Ok(());
    }
    let a = &mut qp.attrs;
    if mask & am::QKEY != 0 {
        a.qkey = req.qkey;
    }
    if mask & am::RQ_PSN != 0 {
        a.rq_psn = req.rq_psn & 0xff_ffff;
    }
    if mask & am::SQ_PSN != 0 {
        a.sq_psn = req.sq_psn & 0xff_ffff;
    }
    if mask & am::DEST_QPN != 0 {
        a.dest_qp_num = req.dest_qp_num & 0xff_ffff;
    }
    if mask & am::ACCESS_FLAGS != 0 {
        a.qp_access_flags = req.qp_access_flags;
    }
    if mask & am::PKEY_INDEX != 0 {
        a.pkey_index = req.pkey_index;
    }
    if mask & am::PORT != 0 {
        a.port_num = req.port_num;
    }
    if mask & am::AV != 0 {
        a.dest = req.dest;
    }
    if mask & am::ALT_PATH != 0 {
        a.alt_dest = req.alt_dest;
        a.alt_pkey_index = req.alt_pkey_index;
        a.alt_port_num = req.alt_port_num;
        a.alt_timeout = req.alt_timeout;
    }
    if mask & am::PATH_MTU != 0 {
        a.path_mtu = req.path_mtu;
    }
    if mask & am::PATH_MIG_STATE != 0 {
        a.path_mig_state = req.path_mig_state;
    }
    if mask & am::EN_SQD_ASYNC_NOTIFY != 0 {
        a.en_sqd_async_notify = req.en_sqd_async_notify;
    }
    if mask & am::MAX_QP_RD_ATOMIC != 0 {
        a.max_rd_atomic = req.max_rd_atomic;
    }
    if mask & am::MAX_DEST_RD_ATOMIC != 0 {
        a.max_dest_rd_atomic = req.max_dest_rd_atomic;
    }
    if mask & am::MIN_RNR_TIMER != 0 {
        a.min_rnr_timer = req.min_rnr_timer;
    }
    if mask & am::TIMEOUT != 0 {
        a.timeout = req.timeout;
    }
    if mask & am::RETRY_CNT != 0 {
        a.retry_cnt = req.retry_cnt;
    }
    if mask & am::RNR_RETRY != 0 {
        a.rnr_retry = req.rnr_retry;
    }
    qp.state = next;
    Ok(())
}

fn destroy_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroyQp = call.req()?;
    let h = req.qp_handle;
    call.note(format_args!("qp {h}"));
    destroy_allowed(call)?;
    owned_for_destroy(emu, &emu.qps, call.ctx, h)?;
    let qp = emu.qps.remove(&h).ok_or(Errno::EINVAL)?;
    if let Some(u) = emu.ucontext_mut(call.ctx) {
        u.free_bfreg(qp.bfreg);
    }
    add_users(&mut emu.pds, qp.pd, -1);
    add_users(&mut emu.cqs, qp.send_cq, -1);
    add_users(&mut emu.cqs, qp.recv_cq, -1);
    if let Some(s) = qp.srq {
        add_users(&mut emu.srqs, s, -1);
    }
    call.out.put(
        &DestroyQpResp {
            events_reported: qp.events_reported,
        },
        true,
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// SRQ.

fn create_srq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateSrq = call.req()?;
    call.note(format_args!(
        "pd {} max_wr {} max_sge {}",
        req.pd_handle, req.max_wr, req.max_sge
    ));
    let ctx = call.ctx;
    owned(&emu.pds, ctx, req.pd_handle)?;
    if req.max_wr >= device::MAX_SRQ_WQES || req.max_sge > device::MAX_SRQ_SGE {
        return Err(Errno::EINVAL);
    }
    let max = (req.max_wr + 1).next_power_of_two();
    let desc = (16 + 16 * req.max_sge).next_power_of_two().max(32);
    if desc > u32::from(device::MAX_RQ_DESC_SZ) {
        return Err(Errno::EINVAL);
    }
    let ucmd = create_srq_req(call.drv)?;
    let wq = WorkQueue {
        buf: ucmd.buf_addr,
        wqe_cnt: max,
        wqe_shift: desc.trailing_zeros(),
    };
    mem::check(ucmd.buf_addr, wq.bytes() as usize)?;
    check_buf_offset(ucmd.buf_addr)?;
    mem::check(ucmd.db_addr, 4)?;
    let handle = emu.handle();
    let srqn = emu.new_srqn();
    let max_gs = (desc - 16) / 16;
    crate::hca::start();
    emu.srqs.insert(
        handle,
        Srq {
            ctx,
            srqn,
            user_handle: req.user_handle,
            pd: req.pd_handle,
            wq,
            max_gs,
            db_addr: ucmd.db_addr,
            // Only the signature flag means anything (create_srq_user).
            flags: ucmd.flags & mlx5::MLX5_SRQ_FLAG_SIGNATURE,
            // A basic SRQ has no user index of its own: its CQEs carry
            // the QP's.
            uidx: DEFAULT_UIDX,
            srq_limit: 0,
            users: 0,
            events_reported: 0,
        },
    );
    add_users(&mut emu.pds, req.pd_handle, 1);
    call.out.put(
        &CreateSrqResp {
            srq_handle: handle,
            max_wr: max - 1,
            max_sge: max_gs,
            // Only XRC SRQs report their number in the core response.
            srqn: 0,
        },
        true,
    );
    call.drv_out
        .put(&mlx5::CreateSrqResp { srqn, reserved: 0 }, false);
    call.note(format_args!(
        "-> srq {handle} srqn {srqn:#x} wqes {max}x{desc}"
    ));
    Ok(())
}

fn modify_srq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: ModifySrq = call.req()?;
    call.note(format_args!(
        "srq {} mask {:#x} limit {}",
        req.srq_handle, req.attr_mask, req.srq_limit
    ));
    let srq = owned(&emu.srqs, call.ctx, req.srq_handle)?;
    // Resizing an SRQ is not supported by mlx5.
    if req.attr_mask & SRQ_MAX_WR != 0 {
        return Err(Errno::EINVAL);
    }
    if req.attr_mask & SRQ_LIMIT != 0 {
        if req.srq_limit >= srq.wq.wqe_cnt {
            return Err(Errno::EINVAL);
        }
        let limit = req.srq_limit;
        if let Some(s) = emu.srqs.get_mut(&req.srq_handle) {
            s.srq_limit = limit;
        }
    }
    Ok(())
}

fn query_srq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: QuerySrq = call.req()?;
    call.note(format_args!("srq {}", req.srq_handle));
    let srq = owned(&emu.srqs, call.ctx, req.srq_handle)?;
    call.out.put(
        &QuerySrqResp {
            max_wr: srq.wq.wqe_cnt - 1,
            max_sge: srq.max_gs,
            srq_limit: srq.srq_limit,
            reserved: 0,
        },
        true,
    );
    Ok(())
}

fn destroy_srq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroySrq = call.req()?;
    let h = req.srq_handle;
    call.note(format_args!("srq {h}"));
    destroy_allowed(call)?;
    let srq = owned_for_destroy(emu, &emu.srqs, call.ctx, h)?;
    if srq.users > 0 {
        return Err(Errno::EBUSY);
    }
    let resp = DestroySrqResp {
        events_reported: srq.events_reported,
    };
    let pd = srq.pd;
    emu.srqs.remove(&h);
    add_users(&mut emu.pds, pd, -1);
    call.out.put(&resp, true);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(command: u32, in_words: u16, out_words: u16, body: &[u8]) -> Vec<u8> {
        let mut v = CmdHdr {
            command,
            in_words,
            out_words,
        }
        .as_bytes()
        .to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn header_rules() {
        let resp = [0u8; 64];
        let rp = (resp.as_ptr() as u64).to_ne_bytes();
        // QUERY_PORT: 24 bytes, 40-byte response.
        let mut body = rp.to_vec();
        body.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        assert!(parse(&cmd(nr::QUERY_PORT, 6, 10, &body)).is_ok());
        // in_words disagreeing with the length.
        assert_eq!(
            parse(&cmd(nr::QUERY_PORT, 5, 10, &body)).err(),
            Some(Errno::EINVAL)
        );
        // Response too short.
        assert_eq!(
            parse(&cmd(nr::QUERY_PORT, 6, 9, &body)).err(),
            Some(Errno::ENOSPC)
        );
        // Command too short.
        assert_eq!(
            parse(&cmd(nr::QUERY_PORT, 4, 10, &body[..8])).err(),
            Some(Errno::ENOSPC)
        );
        // Unknown command, and bits outside the command mask.
        assert_eq!(
            parse(&cmd(200, 6, 10, &body)).err(),
            Some(Errno::EOPNOTSUPP)
        );
        assert_eq!(
            parse(&cmd(0x100 | 2, 6, 10, &body)).err(),
            Some(Errno::EINVAL)
        );
        // Unmapped response pointer.
        let mut bad = 8u64.to_ne_bytes().to_vec();
        bad.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(
            parse(&cmd(nr::QUERY_PORT, 6, 10, &bad)).err(),
            Some(Errno::EFAULT)
        );
    }

    #[test]
    fn extended_header_rules() {
        let resp = [0u8; 512];
        let ex = |in_words: u16, prov_in: u16, out_words: u16, prov_out: u16, response: u64| {
            let mut v = CmdHdr {
                command: IB_USER_VERBS_CMD_FLAG_EXTENDED | nr::EX_QUERY_DEVICE,
                in_words,
                out_words,
            }
            .as_bytes()
            .to_vec();
            v.extend_from_slice(
                ExCmdHdr {
                    response,
                    provider_in_words: prov_in,
                    provider_out_words: prov_out,
                    cmd_hdr_reserved: 0,
                }
                .as_bytes(),
            );
            v.extend_from_slice(&vec![0u8; usize::from(in_words + prov_in) * 8]);
            v
        };
        let r = resp.as_ptr() as u64;
        let good = ex(1, 0, 38, 13, r);
        let ok = parse(&good).expect("valid EX QUERY_DEVICE");
        assert_eq!(ok.out.len, 304);
        assert_eq!(ok.drv_out.len, 104);
        // Core response shorter than up to response_length.
        assert_eq!(parse(&ex(1, 0, 22, 0, r)).err(), Some(Errno::ENOSPC));
        // Response lengths without a response pointer.
        assert_eq!(parse(&ex(1, 0, 38, 0, 0)).err(), Some(Errno::EINVAL));
        // Length disagreeing with the word counts.
        let mut v = ex(1, 0, 38, 0, r);
        v.push(0);
        assert_eq!(parse(&v).err(), Some(Errno::EINVAL));
    }

    /// A legacy command: header, core struct, driver data.
    fn legacy<Q: IntoBytes + zerocopy::Immutable>(
        command: u32,
        req: &Q,
        drv: &[u8],
        out_words: u16,
    ) -> Vec<u8> {
        let len = size_of::<CmdHdr>() + size_of::<Q>() + drv.len();
        let mut v = cmd(command, (len / 4) as u16, out_words, req.as_bytes());
        v.extend_from_slice(drv);
        v
    }

    fn run(fd: c_int, bytes: &[u8]) -> Result<usize, Errno> {
        // SAFETY: a live buffer of that length.
        unsafe { write(fd, bytes.as_ptr().cast(), bytes.len()) }.expect("fd is ours")
    }

    /// Commands through the `write()` entry point on a real emulated fd,
    /// without libibverbs: context set-up, PD/AH lifecycle, the kernel's
    /// errnos for wrong, stale and busy handles, and UAR mmap bounds.
    #[test]
    fn object_lifecycle_through_write() {
        let fd = cdev::open(libc::O_CLOEXEC).expect("open the emulated device");
        let mut resp = [0u32; 32];
        let rp = resp.as_mut_ptr() as u64;

        // Nothing but GET_CONTEXT before GET_CONTEXT.
        let alloc = legacy(nr::ALLOC_PD, &AllocPd { response: rp }, &[], 2);
        assert_eq!(run(fd, &alloc), Err(Errno::EINVAL));
        let ureq = mlx5::AllocUcontextReqV2 {
            total_num_bfregs: 16,
            num_low_latency_bfregs: 4,
            max_cqe_version: 1,
            ..Default::default()
        };
        let gc = legacy(
            nr::GET_CONTEXT,
            &GetContext { response: rp },
            ureq.as_bytes(),
            20,
        );
        assert_eq!(run(fd, &gc), Ok(gc.len()));
        let async_fd = resp[0] as c_int;
        assert_eq!(fdtable::kind(async_fd), FdKind::Event);
        let uresp = mlx5::AllocUcontextResp::read_from_bytes(resp[2..20].as_bytes()).unwrap();
        assert_eq!((uresp.tot_bfregs, uresp.cqe_version), (16, 1));
        assert_eq!(uresp.response_length, 72);
        assert_eq!(run(fd, &gc), Err(Errno::EINVAL), "a second GET_CONTEXT");

        // UAR pages 0..8 map; page 8 and other commands do not.
        // SAFETY: fresh mappings of our memfd, unmapped below.
        unsafe {
            let map = |off: libc::off_t| {
                cdev::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    off,
                )
                .expect("fd is ours")
            };
            let p = map(7 * 4096).expect("UAR page 7");
            p.cast::<u64>().write_volatile(1);
            assert_eq!(map(8 * 4096), Err(Errno::EINVAL));
            assert_eq!(map(5 << 20), Err(Errno::EINVAL), "core clock page");
            cdev::munmap(p, 4096);
            libc::munmap(p, 4096);
        }

        assert_eq!(run(fd, &alloc), Ok(alloc.len()));
        let pd = resp[0];
        let ah = |port: u8, global: u8, sgid: u8| CreateAh {
            response: rp,
            pd_handle: pd,
            attr: rverbs_abi::ah::AhAttr {
                dlid: 1,
                port_num: port,
                is_global: global,
                grh: rverbs_abi::ah::GlobalRoute {
                    sgid_index: sgid,
                    ..Default::default()
                },
                ..Default::default()
            },
            ..Default::default()
        };
        let bad_port = legacy(nr::CREATE_AH, &ah(2, 0, 0), &[], 5);
        assert_eq!(run(fd, &bad_port), Err(Errno::EINVAL));
        let bad_gid = legacy(nr::CREATE_AH, &ah(1, 1, 9), &[], 5);
        assert_eq!(run(fd, &bad_gid), Err(Errno::EINVAL));
        let good = legacy(nr::CREATE_AH, &ah(1, 0, 0), &[], 5);
        assert_eq!(run(fd, &good), Ok(good.len()));
        let ah_handle = resp[0];
        assert_eq!(resp[1], 16, "mlx5 response_length");

        let destroy_ah = |h: u32| legacy(nr::DESTROY_AH, &DestroyAh { ah_handle: h }, &[], 0);
        let dealloc = legacy(nr::DEALLOC_PD, &DeallocPd { pd_handle: pd }, &[], 0);
        assert_eq!(run(fd, &destroy_ah(pd)), Err(Errno::EINVAL), "a PD handle");
        assert_eq!(run(fd, &dealloc), Err(Errno::EBUSY), "PD used by the AH");
        assert_eq!(run(fd, &destroy_ah(ah_handle)), Ok(12));
        assert_eq!(run(fd, &destroy_ah(ah_handle)), Err(Errno::ENOENT), "stale");
        assert_eq!(run(fd, &dealloc), Ok(12));

        // Malformed: unknown command, short response, trailing garbage.
        assert_eq!(
            run(fd, &legacy(99, &DeallocPd::default(), &[], 0)),
            Err(Errno::EOPNOTSUPP)
        );
        let short = legacy(
            nr::QUERY_PORT,
            &QueryPort {
                response: rp,
                port_num: 1,
                ..Default::default()
            },
            &[],
            9,
        );
        assert_eq!(run(fd, &short), Err(Errno::ENOSPC));
        let trailing = legacy(
            nr::DEALLOC_PD,
            &DeallocPd { pd_handle: pd },
            &[1, 0, 0, 0],
            0,
        );
        assert_eq!(run(fd, &trailing), Err(Errno::EOPNOTSUPP));

        cdev::close(async_fd, FdKind::Event);
        crate::real::close(async_fd);
        cdev::close(fd, FdKind::Cmd);
        // Checked before the number is freed: once closed, a test running
        // beside this one may open the device and get the same number.
        assert_eq!(fdtable::kind(fd), FdKind::None);
        crate::real::close(fd);
    }

    // -----------------------------------------------------------------------
    // mlx5 driver-data rules. Each test sends the driver data libmlx5
    // (rdma-core 44) sends, as recorded by `cargo xtask mlx5` in
    // target/mlx5/logs/cmd_seq.rdma-core.cmd (its user addresses replaced
    // by buffers of this process), then malformed variants.

    /// libmlx5's GET_CONTEXT driver data: 16 bfregs, 4 low-latency, DEVX,
    /// CQE version 1, 4K UARs and dynamic UARs in `lib_caps`.
    const LIBMLX5_UCTX: &str = "1000000004000000010000000000000001000000000000000300000000000000";
    /// libmlx5's CREATE_CQ driver data (buffer and doorbell at 0 and 8).
    const LIBMLX5_CQ: &str = "0080b028f955000000b0b028f955000040000000000000000000000000000000";
    /// libmlx5's RESIZE_CQ driver data (buffer at 0).
    const LIBMLX5_RESIZE_CQ: &str = "00e0b328f95500004000000000000000";
    /// libmlx5's CREATE_SRQ driver data (buffer and doorbell at 0 and 8).
    const LIBMLX5_SRQ: &str = "0000b128f955000080b0b028f955000000000000000000000000000000000000";
    /// libmlx5's CREATE_QP driver data for an RC QP with 32 receive WQEs
    /// of 32 bytes and 128 send basic blocks, scatter-to-CQE asked, user
    /// index 0 (buffer and doorbell at 0 and 8).
    const LIBMLX5_QP: &str = concat!(
        "00a0b128f9550000c0b0b028f9550000",
        "8000000020000000050000000200000000000000000000000000000000000000",
        "0000000000000000",
    );

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn set_u32(v: &mut [u8], at: usize, x: u32) {
        v[at..at + 4].copy_from_slice(&x.to_ne_bytes());
    }

    fn set_u64(v: &mut [u8], at: usize, x: u64) {
        v[at..at + 8].copy_from_slice(&x.to_ne_bytes());
    }

    /// A zeroed, page-aligned buffer of `len` bytes that stays mapped for
    /// the rest of the process (objects created in a test may outlive it).
    fn user_mem(len: usize) -> u64 {
        let v = vec![0u8; len + 4096].leak();
        (v.as_mut_ptr() as u64 + 4095) & !4095
    }

    /// An opened device with a user context and a response buffer.
    struct Ctx {
        fd: c_int,
        rp: u64,
    }

    impl Ctx {
        fn resp(&self, i: usize) -> u32 {
            // SAFETY: `rp` is a leaked buffer of 64 words.
            unsafe { (self.rp as *const u32).add(i).read() }
        }
        fn run(&self, bytes: &[u8]) -> Result<usize, Errno> {
            run(self.fd, bytes)
        }
        fn cmd<Q: IntoBytes + zerocopy::Immutable>(
            &self,
            command: u32,
            req: &Q,
            drv: &[u8],
            out_words: u16,
        ) -> Result<usize, Errno> {
            self.run(&legacy(command, req, drv, out_words))
        }
        fn alloc_pd(&self) -> u32 {
            let ok = self.cmd(nr::ALLOC_PD, &AllocPd { response: self.rp }, &[], 3);
            assert!(ok.is_ok());
            self.resp(0)
        }
        fn create_cq(&self, cqe: u32, drv: &[u8]) -> Result<u32, Errno> {
            let req = CreateCq {
                response: self.rp,
                cqe,
                comp_channel: -1,
                ..Default::default()
            };
            self.cmd(nr::CREATE_CQ, &req, drv, 4).map(|_| self.resp(0))
        }
        /// libmlx5's CREATE_CQ driver data with fresh ring and doorbell.
        fn cq_drv(entries: usize) -> Vec<u8> {
            let mut d = unhex(LIBMLX5_CQ);
            set_u64(&mut d, 0, user_mem(entries * 64));
            set_u64(&mut d, 8, user_mem(64));
            d
        }
    }

    /// Opens the device and creates a user context from `drv`.
    fn open_ctx(drv: &[u8]) -> (Ctx, Result<usize, Errno>) {
        let fd = cdev::open(libc::O_CLOEXEC).expect("open the emulated device");
        let rp = vec![0u64; 32].leak().as_mut_ptr() as u64;
        let gc = legacy(nr::GET_CONTEXT, &GetContext { response: rp }, drv, 20);
        let r = run(fd, &gc);
        (Ctx { fd, rp }, r)
    }

    /// A context from libmlx5's own request (CQE version 1).
    fn libmlx5_ctx() -> Ctx {
        let (c, r) = open_ctx(&unhex(LIBMLX5_UCTX));
        assert!(r.is_ok(), "libmlx5's GET_CONTEXT: {r:?}");
        c
    }

    /// mlx5_ib_alloc_ucontext: request sizes, flags, reserved fields and
    /// the bfreg counts.
    #[test]
    fn ucontext_driver_data_rules() {
        let good = unhex(LIBMLX5_UCTX);
        let variant = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut d = good.clone();
            f(&mut d);
            open_ctx(&d).1.map(|_| ())
        };
        assert_eq!(variant(&|_| ()), Ok(()), "libmlx5's request");
        // Between the 8-byte original request and `max_cqe_version`.
        assert_eq!(variant(&|d| d.truncate(12)), Err(Errno::EINVAL));
        // The original request: CQE version 0.
        let (c, r) = open_ctx(&good[..8]);
        assert!(r.is_ok());
        let uresp = mlx5::AllocUcontextResp::read_from_bytes(
            // SAFETY: the leaked response buffer, 72 bytes of driver response.
            unsafe { std::slice::from_raw_parts((c.rp + 8) as *const u8, 72) },
        )
        .unwrap();
        assert_eq!(uresp.cqe_version, 0);
        // Unknown flags, a comp_mask, reserved fields.
        assert_eq!(variant(&|d| d[8] = 2), Err(Errno::EOPNOTSUPP));
        assert_eq!(variant(&|d| d[12] = 1), Err(Errno::EOPNOTSUPP));
        assert_eq!(variant(&|d| d[17] = 1), Err(Errno::EOPNOTSUPP));
        assert_eq!(variant(&|d| d[20] = 1), Err(Errno::EOPNOTSUPP));
        // Bytes past the struct are not read (6.12).
        assert_eq!(variant(&|d| d.extend_from_slice(&[7; 8])), Ok(()));
        // Low-latency bfregs: at most all but one.
        assert_eq!(variant(&|d| set_u32(d, 4, 16)), Err(Errno::EINVAL));
        // No bfregs; too many; too many with too many low-latency ones
        // (that check comes first); a count that wraps when rounded up.
        assert_eq!(variant(&|d| set_u32(d, 0, 0)), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| set_u32(d, 0, 1000)), Err(Errno::ENOMEM));
        assert_eq!(
            variant(&|d| {
                set_u32(d, 0, 1000);
                set_u32(d, 4, 2000);
            }),
            Err(Errno::EINVAL)
        );
        assert_eq!(variant(&|d| set_u32(d, 0, u32::MAX)), Err(Errno::EINVAL));
        assert_eq!(ucontext_bfregs(15, 14), Ok(16));
        assert_eq!(ucontext_bfregs(u32::MAX - 1, 0), Err(Errno::ENOMEM));
    }

    /// create_cq_user and mlx5_ib_resize_cq: sizes, flags, reserved
    /// fields, CQE size, buffer offset and the features not offered.
    #[test]
    fn cq_driver_data_rules() {
        let c = libmlx5_ctx();
        let variant = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut d = Ctx::cq_drv(128);
            f(&mut d);
            c.create_cq(127, &d).map(|_| ())
        };
        assert_eq!(variant(&|_| ()), Ok(()), "libmlx5's request");
        // Shorter than up to `flags`.
        assert_eq!(variant(&|d| d.truncate(20)), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| d.truncate(24)), Ok(()));
        // Bytes past the struct are not read (6.12).
        assert_eq!(variant(&|d| d.extend_from_slice(&[9; 4])), Ok(()));
        // Unknown flag, CQE size, reserved fields.
        assert_eq!(variant(&|d| d[22] = 1 << 3), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| set_u32(d, 16, 32)), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| d[26] = 1), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| d[28] = 1), Err(Errno::EINVAL));
        // A ring not on a 64-byte boundary; an unmapped one.
        assert_eq!(
            variant(&|d| set_u64(d, 0, user_mem(128 * 64 + 64) + 32)),
            Err(Errno::EINVAL)
        );
        assert_eq!(variant(&|d| set_u64(d, 0, 8)), Err(Errno::EFAULT));
        // Compression (only the value 1 asks), padding, real-time stamps,
        // a dynamic UAR page.
        assert_eq!(variant(&|d| d[20] = 1), Err(Errno::EOPNOTSUPP));
        assert_eq!(variant(&|d| d[20] = 2), Ok(()));
        assert_eq!(
            variant(&|d| {
                set_u32(d, 16, 128);
                d[22] = 1;
            }),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(variant(&|d| d[22] = 4), Err(Errno::EOPNOTSUPP));
        assert_eq!(variant(&|d| d[22] = 2), Err(Errno::EINVAL));

        // RESIZE_CQ from 128 to 256 entries.
        let cq = c.create_cq(127, &Ctx::cq_drv(128)).expect("CQ");
        let resize = |cqe: u32, f: &dyn Fn(&mut Vec<u8>)| {
            let mut d = unhex(LIBMLX5_RESIZE_CQ);
            set_u64(&mut d, 0, user_mem(256 * 64));
            f(&mut d);
            let req = ResizeCq {
                response: c.rp,
                cq_handle: cq,
                cqe,
            };
            c.cmd(nr::RESIZE_CQ, &req, &d, 4).map(|_| ())
        };
        // The same size needs no driver data.
        assert_eq!(resize(127, &|d| d.clear()), Ok(()));
        assert_eq!(resize(255, &|d| d.truncate(8)), Err(Errno::EINVAL));
        assert_eq!(resize(255, &|d| d[10] = 1), Err(Errno::EINVAL));
        assert_eq!(resize(255, &|d| d[12] = 1), Err(Errno::EINVAL));
        assert_eq!(resize(255, &|d| d[8] = 32), Err(Errno::EINVAL));
        assert_eq!(
            resize(255, &|d| set_u64(d, 0, user_mem(256 * 64 + 64) + 8)),
            Err(Errno::EINVAL)
        );
        assert_eq!(resize(255, &|_| ()), Ok(()), "libmlx5's request");
    }

    /// RESIZE_CQ against the CQEs outstanding (the producer counter minus
    /// the doorbell record's consumer index): refused (EINVAL) unless
    /// they and the RESIZE CQE fit both rings; the counter advances past
    /// the RESIZE CQE.
    #[test]
    fn cq_resize_checks_outstanding() {
        let c = libmlx5_ctx();
        let mut d = Ctx::cq_drv(128);
        let db = user_mem(64);
        set_u64(&mut d, 8, db);
        let cq = c.create_cq(127, &d).expect("CQ");
        let set = |pi: u32, ci: u32| {
            emu::lock().cqs.get_mut(&cq).expect("the CQ").hw_pi = pi;
            // SAFETY: `db` is a live, aligned 64-byte allocation.
            unsafe { (db as *mut u32).write_volatile(ci.to_be()) };
        };
        let resize = |cqe: u32| {
            let mut d = unhex(LIBMLX5_RESIZE_CQ);
            set_u64(&mut d, 0, user_mem((cqe as usize + 1) * 64));
            let req = ResizeCq {
                response: c.rp,
                cq_handle: cq,
                cqe,
            };
            c.cmd(nr::RESIZE_CQ, &req, &d, 4).map(|_| ())
        };
        // 64 outstanding: not into 64 entries (no counter left for the
        // RESIZE CQE), into 128 (the same size: nothing asked) or 256.
        set(100, 36);
        assert_eq!(resize(63), Err(Errno::EINVAL));
        assert_eq!(emu::lock().cqs[&cq].hw_pi, 100, "refused: nothing written");
        assert_eq!(resize(255), Ok(()));
        assert_eq!(emu::lock().cqs[&cq].hw_pi, 101, "the RESIZE CQE's counter");
        // 63 outstanding (the RESIZE CQE among them) fit 64 entries.
        set(101, 38);
        assert_eq!(resize(63), Ok(()));
        // A full ring has no entry for the RESIZE CQE, even to grow.
        set(102 + 64, 102);
        assert_eq!(resize(127), Err(Errno::EINVAL));
        // Counters compare modulo 2^24.
        set(3, 0xff_fffe);
        assert_eq!(resize(7), Ok(()));
    }

    /// A CREATE_QP of `qp_type` with libmlx5's caps: RC/UC/UD, 16 send WRs
    /// of 3 SGEs and 124 inline bytes, 32 receive WRs of 2 SGEs (none on an
    /// SRQ).
    fn create_qp(c: &Ctx, pd: u32, cq: u32, srq: Option<u32>, drv: &[u8]) -> Result<(), Errno> {
        let req = CreateQp {
            response: c.rp,
            pd_handle: pd,
            send_cq_handle: cq,
            recv_cq_handle: cq,
            srq_handle: srq.unwrap_or(0),
            max_send_wr: 16,
            max_recv_wr: if srq.is_some() { 0 } else { 32 },
            max_send_sge: 3,
            max_recv_sge: if srq.is_some() { 0 } else { 2 },
            max_inline_data: 124,
            qp_type: qp_type::RC,
            is_srq: u8::from(srq.is_some()),
            ..Default::default()
        };
        c.cmd(nr::CREATE_QP, &req, drv, 18).map(|_| ())
    }

    /// libmlx5's CREATE_QP driver data with a fresh buffer and doorbell,
    /// `rq_bytes` of receive queue before 128 send basic blocks.
    fn qp_drv(rq_bytes: usize) -> Vec<u8> {
        let mut d = unhex(LIBMLX5_QP);
        set_u64(&mut d, 0, user_mem(rq_bytes + 128 * 64));
        set_u64(&mut d, 8, user_mem(64));
        d
    }

    /// mlx5_ib_create_qp: udata sizes, reserved bytes, vendor flags, user
    /// indexes (get_qp_user_index), the receive queue against the QP's
    /// (set_rq_size), the send queue, the doorbell register and the buffer.
    #[test]
    fn qp_driver_data_rules() {
        let c = libmlx5_ctx();
        let pd = c.alloc_pd();
        let cq = c.create_cq(127, &Ctx::cq_drv(128)).expect("CQ");
        let variant = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut d = qp_drv(32 * 32);
            f(&mut d);
            create_qp(&c, pd, cq, None, &d)
        };
        assert_eq!(variant(&|_| ()), Ok(()), "libmlx5's request");
        // Shorter than up to `ece_options`; up to it is enough.
        assert_eq!(variant(&|d| d.truncate(44)), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| d.truncate(48)), Ok(()));
        // `reserved` and every byte past the struct must be zero.
        assert_eq!(variant(&|d| d[54] = 1), Err(Errno::EINVAL));
        assert_eq!(
            variant(&|d| d.extend_from_slice(&[0, 0, 0, 1])),
            Err(Errno::EINVAL)
        );
        assert_eq!(variant(&|d| d.extend_from_slice(&[0; 8])), Ok(()));
        // Vendor flags: signatures and both scatter-to-CQE flags are
        // granted; DC, raw-packet and unknown ones are not; a chosen
        // bfreg or UAR page, or both, cannot be served.
        assert_eq!(variant(&|d| set_u32(d, 28, 1 | 2 | 1 << 8)), Ok(()));
        for bad in [1 << 2, 1 << 4, 1 << 5, 1 << 6, 1 << 9, 1 << 11, 1 << 12] {
            assert_eq!(
                variant(&|d| set_u32(d, 28, bad)),
                Err(Errno::EINVAL),
                "{bad:#x}"
            );
        }
        for uar in [1 << 3, 1 << 10, 1 << 3 | 1 << 10] {
            assert_eq!(
                variant(&|d| set_u32(d, 28, uar)),
                Err(Errno::EINVAL),
                "{uar:#x}"
            );
        }
        // CQE version 1: a 24-bit index other than the "none" one.
        assert_eq!(variant(&|d| set_u32(d, 32, 0xff_fffe)), Ok(()));
        assert_eq!(variant(&|d| set_u32(d, 32, 0xff_ffff)), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| set_u32(d, 32, 0x100_0000)), Err(Errno::EINVAL));
        // Receive queue: a shift past 32; with signatures, a WQE smaller
        // than the signature; counts and sizes the device cannot build.
        assert_eq!(variant(&|d| set_u32(d, 24, 33)), Err(Errno::EINVAL));
        assert_eq!(
            variant(&|d| {
                set_u32(d, 20, 0);
                set_u32(d, 24, 3);
                set_u32(d, 28, 1);
            }),
            Err(Errno::EINVAL)
        );
        assert_eq!(variant(&|d| set_u32(d, 20, 48)), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| set_u32(d, 24, 10)), Err(Errno::EINVAL));
        // Send queue: a power of two, at most the device's.
        assert_eq!(variant(&|d| set_u32(d, 16, 96)), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| set_u32(d, 16, 1 << 16)), Err(Errno::EINVAL));
        // The buffer on a 64-byte boundary, mapped; a mapped doorbell.
        assert_eq!(
            variant(&|d| set_u64(d, 0, user_mem(32 * 32 + 128 * 64 + 64) + 16)),
            Err(Errno::EINVAL)
        );
        assert_eq!(variant(&|d| set_u64(d, 0, 16)), Err(Errno::EFAULT));
        assert_eq!(variant(&|d| set_u64(d, 8, 16)), Err(Errno::EFAULT));

        // A QP without a receive queue (on an SRQ, or with no receive WRs)
        // must describe none.
        let mut s = unhex(LIBMLX5_SRQ);
        set_u64(&mut s, 0, user_mem(64 * 64));
        set_u64(&mut s, 8, user_mem(64));
        let srq_req = CreateSrq {
            response: c.rp,
            pd_handle: pd,
            max_wr: 63,
            max_sge: 3,
            ..Default::default()
        };
        assert!(c.cmd(nr::CREATE_SRQ, &srq_req, &s, 6).is_ok());
        let srq = c.resp(0);
        let on_srq = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut d = qp_drv(0);
            set_u32(&mut d, 20, 0);
            set_u32(&mut d, 24, 0);
            f(&mut d);
            create_qp(&c, pd, cq, Some(srq), &d)
        };
        assert_eq!(on_srq(&|_| ()), Ok(()), "libmlx5's request on an SRQ");
        assert_eq!(on_srq(&|d| set_u32(d, 20, 32)), Err(Errno::EINVAL));
        assert_eq!(on_srq(&|d| set_u32(d, 24, 5)), Err(Errno::EINVAL));

        // CQE version 0: the library must send the "none" index.
        let (v0, r) = open_ctx(&unhex(LIBMLX5_UCTX)[..8]);
        assert!(r.is_ok());
        let pd0 = v0.alloc_pd();
        let cq0 = v0.create_cq(127, &Ctx::cq_drv(128)).expect("CQ");
        let v0_qp = |uidx: u32| {
            let mut d = qp_drv(32 * 32);
            set_u32(&mut d, 32, uidx);
            create_qp(&v0, pd0, cq0, None, &d)
        };
        assert_eq!(v0_qp(0), Err(Errno::EINVAL));
        assert_eq!(v0_qp(0xff_ffff), Ok(()));
    }

    /// mlx5_ib_modify_qp: the driver data is absent or at least up to
    /// `ece_options`, zero past the struct, with no `comp_mask` and a zero
    /// burst `reserved`.
    #[test]
    fn modify_qp_driver_data_rules() {
        let c = libmlx5_ctx();
        let pd = c.alloc_pd();
        let cq = c.create_cq(127, &Ctx::cq_drv(128)).expect("CQ");
        create_qp(&c, pd, cq, None, &qp_drv(32 * 32)).expect("QP");
        let qp = c.resp(0);
        // RESET to RESET: accepted and changes nothing, so every variant
        // meets the same QP.
        let modify = |drv: &[u8]| {
            let req = ModifyQp {
                qp_handle: qp,
                attr_mask: am::STATE,
                qp_state: qp_state::RESET,
                ..Default::default()
            };
            c.cmd(nr::MODIFY_QP, &req, drv, 0).map(|_| ())
        };
        let udata = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut d = vec![0u8; 16];
            f(&mut d);
            modify(&d)
        };
        assert_eq!(modify(&[]), Ok(()), "libmlx5's request");
        assert_eq!(modify(&[0; 8]), Err(Errno::EINVAL));
        assert_eq!(udata(&|_| ()), Ok(()));
        // Burst sizes and ECE options are accepted (and not used).
        assert_eq!(udata(&|d| set_u32(d, 4, 4096)), Ok(()));
        assert_eq!(udata(&|d| set_u32(d, 12, 0x1000_0001)), Ok(()));
        assert_eq!(udata(&|d| set_u32(d, 0, 1)), Err(Errno::EOPNOTSUPP));
        assert_eq!(udata(&|d| d[10] = 1), Err(Errno::EOPNOTSUPP));
        assert_eq!(udata(&|d| d.extend_from_slice(&[0; 4])), Ok(()));
        assert_eq!(
            udata(&|d| d.extend_from_slice(&[0, 1, 0, 0])),
            Err(Errno::EOPNOTSUPP)
        );
        // libmlx5's RESET to INIT.
        let init = ModifyQp {
            qp_handle: qp,
            attr_mask: am::STATE | am::PKEY_INDEX | am::PORT | am::ACCESS_FLAGS,
            qp_state: qp_state::INIT,
            port_num: 1,
            qp_access_flags: 0xf,
            ..Default::default()
        };
        assert_eq!(c.cmd(nr::MODIFY_QP, &init, &[], 0).map(|_| ()), Ok(()));
    }

    /// create_srq_user: reserved fields and trailing bytes; the flags and
    /// user index of a basic SRQ are not checked; the buffer offset.
    #[test]
    fn srq_driver_data_rules() {
        let c = libmlx5_ctx();
        let pd = c.alloc_pd();
        let variant = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut d = unhex(LIBMLX5_SRQ);
            set_u64(&mut d, 0, user_mem(64 * 64));
            set_u64(&mut d, 8, user_mem(64));
            f(&mut d);
            let req = CreateSrq {
                response: c.rp,
                pd_handle: pd,
                max_wr: 63,
                max_sge: 3,
                ..Default::default()
            };
            c.cmd(nr::CREATE_SRQ, &req, &d, 6).map(|_| ())
        };
        assert_eq!(variant(&|_| ()), Ok(()), "libmlx5's request");
        assert_eq!(variant(&|d| d[20] = 1), Err(Errno::EINVAL));
        assert_eq!(variant(&|d| d[28] = 1), Err(Errno::EINVAL));
        assert_eq!(
            variant(&|d| d.extend_from_slice(&[0, 0, 1, 0])),
            Err(Errno::EINVAL)
        );
        assert_eq!(variant(&|d| d.extend_from_slice(&[0; 4])), Ok(()));
        // Fields not sent count as zero (6.12 has no minimum).
        assert_eq!(variant(&|d| d.truncate(16)), Ok(()));
        // Neither the flags nor the user index of a basic SRQ are read.
        assert_eq!(variant(&|d| set_u32(d, 16, 1 << 5)), Ok(()));
        assert_eq!(variant(&|d| set_u32(d, 24, 0x100_0000)), Ok(()));
        assert_eq!(
            variant(&|d| set_u64(d, 0, user_mem(64 * 64 + 64) + 48)),
            Err(Errno::EINVAL)
        );
        assert_eq!(variant(&|d| set_u64(d, 8, 16)), Err(Errno::EFAULT));
    }

    #[test]
    fn cq_sizes() {
        assert_eq!(cq_entries(1), Ok(2));
        assert_eq!(cq_entries(0), Ok(1));
        assert_eq!(cq_entries(127), Ok(128));
        assert_eq!(cq_entries(128), Ok(256));
        assert_eq!(cq_entries(device::MAX_CQE), Ok(1 << device::LOG_MAX_CQ_SZ));
        assert_eq!(cq_entries(1 << device::LOG_MAX_CQ_SZ), Err(Errno::EINVAL));
        assert_eq!(cq_entries(u32::MAX), Err(Errno::EINVAL));
    }
}
