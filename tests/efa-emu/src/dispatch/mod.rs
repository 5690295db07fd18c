//! The uverbs `write()` command channel of the emulated EFA device: the
//! header rules are `emu_core::cmd`'s; this module is the command table
//! and the entry point, the handlers live in one module per kind of
//! object (`context`, `objects` for PDs, MRs and AHs, `queues` for CQs
//! and QPs).
//!
//! The EFA driver data of each command is held to the rules the Linux EFA
//! driver applies (sizes, reserved bytes, comp_mask bits, flags, queue
//! types and sizes), with its errnos; each refusal's log line names the
//! field. The device has no ioctl methods here (every `ioctl` is
//! `ENOTTY`, as on a kernel without the ioctl framework), so libibverbs
//! sends every command with `write()`.

use emu_core::cmd::{self, meth, Method};
use libc::c_int;
use rverbs_abi::cmd::nr;
use rverbs_abi::device::{ExQueryDevice, ExQueryDeviceResp};
use rverbs_abi::Errno;
use zerocopy::FromBytes;

use crate::emu::{self, Emu};
use crate::mem;
use crate::{cdev, log};

mod context;
mod objects;
mod queues;

pub use queues::QPT_DRIVER;

use context::{ex_query_device, get_context, query_device, query_port};
use objects::{alloc_pd, create_ah, dealloc_pd, dereg_mr, destroy_ah, reg_mr};
use queues::{create_cq, create_qp, destroy_cq, destroy_qp, modify_qp, query_qp};

/// The command table: what the EFA driver implements.
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
        nr::CREATE_CQ => meth("CREATE_CQ", 32, 8, true, create_cq),
        nr::DESTROY_CQ => meth("DESTROY_CQ", 16, 8, false, destroy_cq),
        nr::CREATE_QP => meth("CREATE_QP", 56, 32, true, create_qp),
        nr::QUERY_QP => meth("QUERY_QP", 16, 128, false, query_qp),
        nr::MODIFY_QP => meth("MODIFY_QP", 112, 0, true, modify_qp),
        nr::DESTROY_QP => meth("DESTROY_QP", 16, 4, false, destroy_qp),
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
    let has_uctx = emu.contexts.get(&ctx).is_some_and(|c| c.ucontext.is_some());
    let result = cmd::run_write(&mut *emu, method, has_uctx, ctx, fd, bytes);
    drop(emu);
    crate::record::write_command(bytes, result);
    Some(result.map(|()| len))
}

/// `ioctl` on a command fd: the ioctl framework is absent (`ENOTTY`), so
/// libibverbs falls back to `write()` for every command. `None`: the fd
/// is not ours.
///
/// # Safety
/// None beyond `ioctl(2)`'s: the argument is not read.
pub unsafe fn ioctl(
    fd: c_int,
    request: libc::c_ulong,
    _arg: *mut libc::c_void,
) -> Option<Result<c_int, Errno>> {
    let mut emu = emu::lock();
    cdev::context_of(&mut emu, fd)?;
    log::line(format_args!("ioctl {request:#x} -> ENOTTY"));
    Some(Err(Errno::ENOTTY))
}

/// Whether `[0..len)` of `bytes` past the struct are all zero: the
/// driver's check of trailing bytes (`EOPNOTSUPP` otherwise).
fn tail_zero(bytes: &[u8], len: usize) -> bool {
    bytes.get(len..).is_none_or(mem::all_zero)
}

/// The driver data of a command as `T`: `EINVAL` if shorter than `min`
/// bytes (the fields the driver needs), `EOPNOTSUPP` if bytes past `T`
/// are non-zero; zero-extended in between.
fn drv_req<T: FromBytes + zerocopy::IntoBytes>(drv: &[u8], min: usize) -> Result<T, Errno> {
    if drv.len() < min {
        return Err(Errno::EINVAL);
    }
    if !tail_zero(drv, size_of::<T>()) {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(mem::read_padded(drv))
}
