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
//! sizes and buffer alignment), with its errnos: see the `rules` module and
//! tests/mlx5-emu/notes/driver-data-rules.md.
//!
//! This module is the uverbs request/response plumbing (header parsing,
//! the command table, `execute`); the handlers live in one module per
//! kernel object (`context`, `pd`, `ah`, `cq`, `qp`, `srq`), the handle
//! lookups and destroy rules in `lookup`, the tests in `tests`.

use std::fmt::Write as _;

use libc::c_int;
use rverbs_abi::cmd::{nr, CmdHdr, ExCmdHdr, IB_USER_VERBS_CMD_FLAG_EXTENDED};
use rverbs_abi::device::{ExQueryDevice, ExQueryDeviceResp};
use rverbs_abi::Errno;
use zerocopy::{FromBytes, IntoBytes};

use crate::emu::{self, Emu};
use crate::mem::{self, all_zero, read_padded, UserBuf};
use crate::{cdev, log, record};

mod ah;
mod context;
mod cq;
mod lookup;
mod pd;
mod qp;
mod rules;
mod srq;

use ah::{create_ah, destroy_ah};
use context::{ex_query_device, get_context, query_device, query_port};
use cq::{create_comp_channel, create_cq, destroy_cq, resize_cq};
use pd::{alloc_pd, dealloc_pd, dereg_mr, reg_mr};
use qp::{create_qp, destroy_qp, modify_qp, query_qp};
use srq::{create_srq, destroy_srq, modify_srq, query_srq};

/// `IB_USER_VERBS_CMD_COMMAND_MASK`.
const COMMAND_MASK: u32 = 0xff;
/// Size of the two headers of an extended command.
const EX_HDRS: usize = size_of::<CmdHdr>() + size_of::<ExCmdHdr>();

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

#[cfg(test)]
mod tests;
