//! The uverbs `write()` command channel, device-neutral: the header rules
//! of the kernel's uverbs layer (legacy and extended commands), the split
//! of a command into its core and driver parts, and the one way into a
//! driver's handlers ([`execute`]). Each emulator supplies its command
//! table ([`Table`]) and state type.
//!
//! Errors are the kernel's: `EINVAL` for malformed headers, `ENOSPC` for a
//! command or response shorter than the command's core struct, `EFAULT`
//! for unmapped buffers, `EOPNOTSUPP` for unknown commands and for
//! non-zero bytes past a known struct ([`Call::req`]).

use std::fmt::Write as _;

use libc::c_int;
use rverbs_abi::cmd::{CmdHdr, ExCmdHdr, IB_USER_VERBS_CMD_FLAG_EXTENDED};
use rverbs_abi::Errno;
use zerocopy::{FromBytes, IntoBytes};

use crate::log;
use crate::mem::{self, all_zero, read_padded, UserBuf};

/// `IB_USER_VERBS_CMD_COMMAND_MASK`.
const COMMAND_MASK: u32 = 0xff;
/// Size of the two headers of an extended command.
const EX_HDRS: usize = size_of::<CmdHdr>() + size_of::<ExCmdHdr>();

/// One command being executed.
#[derive(Debug)]
pub struct Call<'a> {
    /// Owning context.
    pub ctx: u64,
    /// The command fd.
    pub fd: c_int,
    /// Core command bytes (without headers).
    pub core: &'a [u8],
    /// Driver command bytes.
    pub drv: &'a [u8],
    /// Core response buffer.
    pub out: UserBuf,
    /// Driver response buffer.
    pub drv_out: UserBuf,
    /// What the log line says about the command (handles, numbers).
    pub detail: String,
}

impl Call<'_> {
    /// The core command as `T`; bytes past `T` must be zero (`EOPNOTSUPP`,
    /// as the kernel's check for unknown trailing fields).
    pub fn req<T: FromBytes + IntoBytes>(&self) -> Result<T, Errno> {
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
    pub fn note(&mut self, args: std::fmt::Arguments<'_>) {
        if log::enabled() {
            if !self.detail.is_empty() {
                self.detail.push(' ');
            }
            let _ = self.detail.write_fmt(args);
        }
    }
}

/// A command handler on emulator state `S`.
pub type Handler<S> = fn(&mut S, &mut Call<'_>) -> Result<(), Errno>;

/// A command: its name, core request and response sizes (the kernel's
/// minimums), whether driver data follows the core parts, and its handler.
#[derive(Debug)]
pub struct Method<S> {
    /// The command's name, for the log.
    pub name: &'static str,
    /// Core request bytes the command needs at least.
    pub req: usize,
    /// Core response bytes the command needs at least.
    pub resp: usize,
    /// Whether driver data follows the core request and response.
    pub udata: bool,
    /// The handler.
    pub run: Handler<S>,
}

/// A driver's command table: the method of a command (extended or not,
/// by number), if the driver has it.
pub type Table<S> = fn(bool, u32) -> Option<Method<S>>;

/// A [`Method`].
pub const fn meth<S>(
    name: &'static str,
    req: usize,
    resp: usize,
    udata: bool,
    run: Handler<S>,
) -> Method<S> {
    Method {
        name,
        req,
        resp,
        udata,
        run,
    }
}

/// The uverbs layer's header checks on the `write()` bytes of a command
/// and the split into core/driver parts, with `table`'s sizes.
pub fn parse<S>(bytes: &[u8], table: Table<S>) -> Result<Parts<'_>, Errno> {
    let len = bytes.len();
    let (hdr, _) = CmdHdr::read_from_prefix(bytes).map_err(|_| Errno::EINVAL)?;
    if hdr.command & !(IB_USER_VERBS_CMD_FLAG_EXTENDED | COMMAND_MASK) != 0 {
        return Err(Errno::EINVAL);
    }
    let extended = hdr.command & IB_USER_VERBS_CMD_FLAG_EXTENDED != 0;
    let method = table(extended, hdr.command & COMMAND_MASK).ok_or(Errno::EOPNOTSUPP)?;
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
        return Ok(Parts {
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
    Ok(Parts {
        core,
        drv,
        out,
        drv_out,
    })
}

/// The bytes of one `write()` on a command fd, checked as the uverbs layer
/// does before reading them: shorter than a header `EINVAL`, not mapped
/// `EFAULT`.
///
/// # Safety
/// `buf` and `len` must be what the application passed to `write()`; the
/// application must not change the bytes while the command runs (a racing
/// writer would only garble its own command, as with the kernel's copy).
pub unsafe fn write_bytes<'a>(buf: *const libc::c_void, len: usize) -> Result<&'a [u8], Errno> {
    if len < size_of::<CmdHdr>() {
        return Err(Errno::EINVAL);
    }
    mem::check(buf as u64, len)?;
    // SAFETY: the range was just checked to be mapped user memory, and by
    // the caller's contract it is the application's command, unchanged
    // while we read it.
    Ok(unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) })
}

/// Runs one `write()` command (its [`write_bytes`]): the header rules of
/// [`parse`], then [`execute`]; a header refused is logged here.
pub fn run_write<S>(
    emu: &mut S,
    table: Table<S>,
    has_uctx: bool,
    ctx: u64,
    fd: c_int,
    bytes: &[u8],
) -> Result<(), Errno> {
    let command = CmdHdr::read_from_prefix(bytes)
        .map(|(h, _)| h.command)
        .unwrap_or(0);
    match parse(bytes, table) {
        Ok(parts) => execute(emu, table, has_uctx, ctx, fd, command, parts),
        Err(e) => {
            log::line(format_args!(
                "command {command:#x} (len {}) -> {e:?}",
                bytes.len()
            ));
            Err(e)
        }
    }
}

/// A command's parts: split from the `write()` bytes by the header rules,
/// or given one by one by `UVERBS_METHOD_INVOKE_WRITE`'s attributes
/// (the emulator's ioctl module).
#[derive(Debug)]
pub struct Parts<'a> {
    /// Core command bytes (without headers).
    pub core: &'a [u8],
    /// Driver command bytes.
    pub drv: &'a [u8],
    /// Core response buffer (validated).
    pub out: UserBuf,
    /// Driver response buffer (validated).
    pub drv_out: UserBuf,
}

/// Looks `command` up as the kernel's `uapi_get_method` does: `EINVAL` for
/// bits outside the command mask, `EOPNOTSUPP` for a command it does not
/// know. Returns the core request and response sizes the command needs at
/// least (shorter ones are `ENOSPC`).
pub fn command_sizes<S>(command: u32, table: Table<S>) -> Result<(usize, usize), Errno> {
    if command & !(IB_USER_VERBS_CMD_FLAG_EXTENDED | COMMAND_MASK) != 0 {
        return Err(Errno::EINVAL);
    }
    let extended = command & IB_USER_VERBS_CMD_FLAG_EXTENDED != 0;
    let m = table(extended, command & COMMAND_MASK).ok_or(Errno::EOPNOTSUPP)?;
    Ok((m.req, m.resp))
}

/// Runs `command`, its parts split and sized already, on context `ctx`
/// (command fd `fd`) whose ucontext exists or not (`has_uctx`): the one
/// way into the handlers, for `write()` and `INVOKE_WRITE` alike.
/// GET_CONTEXT (command 0) is refused once there is a ucontext, and every
/// other command before (`EINVAL`). Logs the outcome; the caller records
/// it.
pub fn execute<S>(
    emu: &mut S,
    table: Table<S>,
    has_uctx: bool,
    ctx: u64,
    fd: c_int,
    command: u32,
    parts: Parts<'_>,
) -> Result<(), Errno> {
    let extended = command & IB_USER_VERBS_CMD_FLAG_EXTENDED != 0;
    let Some(m) = table(extended, command & COMMAND_MASK) else {
        return Err(Errno::EOPNOTSUPP);
    };
    let mut call = Call {
        ctx,
        fd,
        core: parts.core,
        drv: parts.drv,
        out: parts.out,
        drv_out: parts.drv_out,
        detail: String::new(),
    };
    let is_get_context = command == rverbs_abi::cmd::nr::GET_CONTEXT;
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
