//! Protection domains and memory regions: ALLOC_PD, DEALLOC_PD, REG_MR and
//! DEREG_MR.

use rverbs_abi::mlx5;
use rverbs_abi::mr::{AccessFlags, DeregMr, RegMr, RegMrResp};
use rverbs_abi::pd::{AllocPd, AllocPdResp, DeallocPd};
use rverbs_abi::Errno;

use super::lookup::{add_users, owned, owned_for_destroy};
use super::Call;
use crate::device;
use crate::emu::{Emu, Mr, Pd};
use crate::mem::{self};

/// MR access bits the kernel accepts: the defined flags up to `HUGETLB`
/// and the "optional" range (relaxed ordering and friends).
const MR_ACCESS_SUPPORTED: u32 = 0xff | 0x3ff0_0000;

pub(super) fn alloc_pd(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
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

pub(super) fn dealloc_pd(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
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

pub(super) fn reg_mr(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
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

pub(super) fn dereg_mr(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DeregMr = call.req()?;
    let h = req.mr_handle;
    call.note(format_args!("mr {h}"));
    let pd = owned_for_destroy(emu, &emu.mrs, call.ctx, h)?.pd;
    emu.mrs.remove(&h);
    add_users(&mut emu.pds, pd, -1);
    Ok(())
}
