//! Finding and guarding the objects a command names: a handle of this
//! context or the kernel's errno, the destroy rules (and the test knob that
//! refuses destroys), use counts, event channel socket pairs, and CQ sizes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rverbs_abi::Errno;

use super::Call;
use crate::device;
use crate::emu::{Emu, Owned, Shared};

/// Object `h` of `map` if it belongs to `ctx`; `EINVAL` otherwise (what
/// the kernel answers a command that names a bad handle).
pub(super) fn owned<T: Owned>(map: &BTreeMap<u32, T>, ctx: u64, h: u32) -> Result<&T, Errno> {
    map.get(&h).filter(|o| o.ctx() == ctx).ok_or(Errno::EINVAL)
}

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
pub(super) fn destroy_allowed(call: &mut Call<'_>) -> Result<(), Errno> {
    if REFUSE_DESTROYS.load(Ordering::SeqCst) {
        call.note(format_args!("refused (mlx5_emu_refuse_destroys)"));
        return Err(Errno::EBUSY);
    }
    Ok(())
}

/// [`owned`] for a destroy command, whose errno for a bad handle is
/// [`Emu::destroy_lookup_error`]'s (`ENOENT` or `EINVAL`, as the kernel's).
pub(super) fn owned_for_destroy<'a, T: Owned>(
    emu: &'a Emu,
    map: &'a BTreeMap<u32, T>,
    ctx: u64,
    h: u32,
) -> Result<&'a T, Errno> {
    owned(map, ctx, h).map_err(|_| emu.destroy_lookup_error(ctx, h))
}

/// Adds `delta` to the users of object `h` (gone already: nothing to do).
pub(super) fn add_users<T: Shared>(map: &mut BTreeMap<u32, T>, h: u32, delta: i32) {
    if let Some(o) = map.get_mut(&h) {
        let u = o.users_mut();
        *u = u.saturating_add_signed(delta);
    }
}

pub(super) use emu_core::fdtable::event_pair;

/// Whether `v` is 0 or a power of two.
pub(super) fn zero_or_pow2(v: u32) -> bool {
    v == 0 || v.is_power_of_two()
}

/// `roundup_pow_of_two(cqe + 1)` with the device's CQ size limit.
pub(super) fn cq_entries(cqe: u32) -> Result<u32, Errno> {
    let max = 1u64 << device::LOG_MAX_CQ_SZ;
    if cqe as i32 >= 0 && u64::from(cqe) <= max {
        let entries = (u64::from(cqe) + 1).next_power_of_two();
        if entries <= max {
            return Ok(entries as u32);
        }
    }
    Err(Errno::EINVAL)
}
