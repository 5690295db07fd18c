//! Protection domains, memory regions and address handles: ALLOC_PD,
//! DEALLOC_PD, REG_MR, DEREG_MR, CREATE_AH and DESTROY_AH, and the handle
//! lookups every handler uses.

use std::collections::BTreeMap;

use emu_core::cmd::Call;
use rverbs_abi::ah::{CreateAh, CreateAhResp, DestroyAh};
use rverbs_abi::efa;
use rverbs_abi::mr::{AccessFlags, DeregMr, RegMr, RegMrResp};
use rverbs_abi::pd::{AllocPd, AllocPdResp, DeallocPd};
use rverbs_abi::Errno;

use crate::emu::{Ah, Emu, Mr, Pd};
use crate::mem;

/// Objects of one context, by handle.
pub(super) trait Owned {
    /// The owning context.
    fn ctx(&self) -> u64;
}

macro_rules! owned {
    ($($t:ty),*) => {$(
        impl Owned for $t {
            fn ctx(&self) -> u64 {
                self.ctx
            }
        }
    )*};
}
owned!(Pd, Mr, Ah, crate::emu::Cq, crate::emu::Qp);

/// The object `h` of context `ctx` in `map`: `EINVAL` if there is none
/// (what the kernel answers for a handle a command reads).
pub(super) fn owned<T: Owned>(map: &BTreeMap<u32, T>, ctx: u64, h: u32) -> Result<&T, Errno> {
    map.get(&h).filter(|o| o.ctx() == ctx).ok_or(Errno::EINVAL)
}

/// The object a destroy command names: `ENOENT` if the context has no
/// object of that handle, `EINVAL` if it is another kind of object.
pub(super) fn for_destroy<'a, T: Owned>(
    emu: &Emu,
    map: &'a BTreeMap<u32, T>,
    ctx: u64,
    h: u32,
) -> Result<&'a T, Errno> {
    if let Some(o) = map.get(&h).filter(|o| o.ctx() == ctx) {
        return Ok(o);
    }
    let mine = |c: u64| c == ctx;
    let any = emu.pds.get(&h).is_some_and(|o| mine(o.ctx))
        || emu.mrs.get(&h).is_some_and(|o| mine(o.ctx))
        || emu.ahs.get(&h).is_some_and(|o| mine(o.ctx))
        || emu.cqs.get(&h).is_some_and(|o| mine(o.ctx))
        || emu.qps.get(&h).is_some_and(|o| mine(o.ctx));
    Err(if any { Errno::EINVAL } else { Errno::ENOENT })
}

/// Adds `d` to the user count of PD `h`.
pub(super) fn pd_users(emu: &mut Emu, h: u32, d: i32) {
    if let Some(p) = emu.pds.get_mut(&h) {
        p.users = p.users.saturating_add_signed(d);
    }
}

pub(super) fn alloc_pd(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    call.req::<AllocPd>()?;
    let handle = emu.handle();
    let pdn = emu.new_pdn();
    emu.pds.insert(
        handle,
        Pd {
            ctx: call.ctx,
            users: 0,
        },
    );
    call.out.put(&AllocPdResp { pd_handle: handle }, true);
    call.drv_out.put(
        &efa::AllocPdResp {
            comp_mask: 0,
            pdn,
            reserved_30: [0; 2],
        },
        true,
    );
    call.note(format_args!("pd {handle} pdn {pdn}"));
    Ok(())
}

pub(super) fn dealloc_pd(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DeallocPd = call.req()?;
    let h = req.pd_handle;
    call.note(format_args!("pd {h}"));
    if for_destroy(emu, &emu.pds, call.ctx, h)?.users > 0 {
        return Err(Errno::EBUSY);
    }
    emu.pds.remove(&h);
    Ok(())
}

/// The access bits EFA registers: local write, remote read (with the
/// RDMA read capability), remote write (with RDMA write).
const MR_ACCESS_SUPPORTED: u32 = AccessFlags::LOCAL_WRITE.bits()
    | AccessFlags::REMOTE_READ.bits()
    | AccessFlags::REMOTE_WRITE.bits();

pub(super) fn reg_mr(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: RegMr = call.req()?;
    call.note(format_args!(
        "pd {} start {:#x} len {:#x} access {:#x}",
        req.pd_handle, req.start, req.length, req.access_flags
    ));
    let access = req.access_flags;
    if access & !MR_ACCESS_SUPPORTED != 0 {
        call.note(format_args!(
            "access {:#x} unsupported",
            access & !MR_ACCESS_SUPPORTED
        ));
        return Err(Errno::EOPNOTSUPP);
    }
    if access & AccessFlags::REMOTE_WRITE.bits() != 0
        && access & AccessFlags::LOCAL_WRITE.bits() == 0
    {
        return Err(Errno::EINVAL);
    }
    owned(&emu.pds, call.ctx, req.pd_handle)?;
    if req.length == 0 || req.length > crate::device::MAX_MR_SIZE {
        call.note(format_args!("length out of range"));
        return Err(Errno::EINVAL);
    }
    if req.start.checked_add(req.length).is_none() {
        return Err(Errno::EINVAL);
    }
    let len = usize::try_from(req.length).map_err(|_| Errno::EINVAL)?;
    mem::check(req.start, len)?;
    let handle = emu.handle();
    let lkey = emu.new_key();
    emu.mrs.insert(
        handle,
        Mr {
            ctx: call.ctx,
            pd: req.pd_handle,
            start: req.start,
            length: req.length,
            iova: req.hca_va,
            access,
            lkey,
        },
    );
    pd_users(emu, req.pd_handle, 1);
    call.out.put(
        &RegMrResp {
            mr_handle: handle,
            lkey,
            rkey: lkey,
        },
        true,
    );
    call.note(format_args!("-> mr {handle} key {lkey:#x}"));
    Ok(())
}

pub(super) fn dereg_mr(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DeregMr = call.req()?;
    let h = req.mr_handle;
    call.note(format_args!("mr {h}"));
    let pd = for_destroy(emu, &emu.mrs, call.ctx, h)?.pd;
    emu.mrs.remove(&h);
    pd_users(emu, pd, -1);
    Ok(())
}

pub(super) fn create_ah(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateAh = call.req()?;
    let gid = req.attr.grh.dgid;
    call.note(format_args!(
        "pd {} is_global {}",
        req.pd_handle, req.attr.is_global
    ));
    owned(&emu.pds, call.ctx, req.pd_handle)?;
    // EFA addresses by GID alone: an AH without a GRH names nothing.
    if req.attr.is_global == 0 {
        call.note(format_args!("attr.is_global 0"));
        return Err(Errno::EINVAL);
    }
    if call.drv_out.len < size_of::<efa::CreateAhResp>() {
        call.note(format_args!(
            "driver response too short for efa_address_handle"
        ));
        return Err(Errno::EINVAL);
    }
    let ah = emu.ah_for(call.ctx, &gid)?;
    let handle = emu.handle();
    emu.ahs.insert(
        handle,
        Ah {
            ctx: call.ctx,
            pd: req.pd_handle,
            gid,
            ah,
        },
    );
    pd_users(emu, req.pd_handle, 1);
    call.out.put(&CreateAhResp { ah_handle: handle }, true);
    call.drv_out.put(
        &efa::CreateAhResp {
            comp_mask: 0,
            efa_address_handle: ah,
            reserved_30: [0; 2],
        },
        true,
    );
    call.note(format_args!("-> ah {handle} address handle {ah}"));
    Ok(())
}

pub(super) fn destroy_ah(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroyAh = call.req()?;
    let h = req.ah_handle;
    call.note(format_args!("ah {h}"));
    let pd = for_destroy(emu, &emu.ahs, call.ctx, h)?.pd;
    emu.ahs.remove(&h);
    pd_users(emu, pd, -1);
    Ok(())
}
