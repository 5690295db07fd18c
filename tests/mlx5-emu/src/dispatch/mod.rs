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
//! This module is the command table and the entry points (`write`,
//! `execute`; the header rules are `emu_core::cmd`'s); the handlers live in one module per
//! kernel object (`context`, `pd`, `ah`, `cq`, `qp`, `srq`), the handle
//! lookups and destroy rules in `lookup`, the tests in `tests`.

use emu_core::cmd::{self, meth, Method};
use libc::c_int;
use rverbs_abi::cmd::nr;
use rverbs_abi::device::{ExQueryDevice, ExQueryDeviceResp};
use rverbs_abi::Errno;

use crate::emu::{self, Emu};
use crate::{cdev, record};

pub(crate) use emu_core::cmd::{Call, Parts};

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

/// The command table (legacy commands by number; extended commands: only
/// QUERY_DEVICE).
fn method(extended: bool, number: u32) -> Option<Method<Emu>> {
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
    // SAFETY: `buf`/`len` are the application's write() arguments (this
    // function's contract).
    let bytes = match unsafe { cmd::write_bytes(buf, len) } {
        Ok(b) => b,
        Err(e) => return Some(Err(e)),
    };
    let has_uctx = emu.context(ctx).is_some_and(|c| c.ucontext().is_some());
    let result = cmd::run_write(&mut *emu, method, has_uctx, ctx, fd, bytes);
    drop(emu);
    record::write_command(bytes, result);
    Some(result.map(|()| len))
}

/// Looks `command` up as the kernel's `uapi_get_method` does (see
/// `emu_core::cmd::command_sizes`): the core request and response sizes
/// the command needs at least.
pub(crate) fn command_sizes(command: u32) -> Result<(usize, usize), Errno> {
    cmd::command_sizes(command, method)
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
    let has_uctx = emu.context(ctx).is_some_and(|c| c.ucontext().is_some());
    cmd::execute(emu, method, has_uctx, ctx, fd, command, parts)
}

/// The header rules with this table (for the tests).
#[cfg(test)]
fn parse(bytes: &[u8]) -> Result<Parts<'_>, Errno> {
    cmd::parse(bytes, method)
}

#[cfg(test)]
mod tests;
