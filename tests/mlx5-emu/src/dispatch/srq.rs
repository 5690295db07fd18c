//! Shared receive queues: CREATE_SRQ, MODIFY_SRQ, QUERY_SRQ and
//! DESTROY_SRQ.

use rverbs_abi::mlx5;
use rverbs_abi::srq::{
    CreateSrq, CreateSrqResp, DestroySrq, DestroySrqResp, ModifySrq, QuerySrq, QuerySrqResp,
};
use rverbs_abi::Errno;

use super::lookup::{add_users, destroy_allowed, owned, owned_for_destroy};
use super::rules::{check_buf_offset, create_srq_req, DEFAULT_UIDX};
use super::Call;
use crate::device;
use crate::emu::{Emu, Srq, WorkQueue};
use crate::mem::{self};

/// `IB_SRQ_MAX_WR` in MODIFY_SRQ's attribute mask.
const SRQ_MAX_WR: u32 = 1 << 0;
/// `IB_SRQ_LIMIT` in MODIFY_SRQ's attribute mask.
const SRQ_LIMIT: u32 = 1 << 1;

pub(super) fn create_srq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
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

pub(super) fn modify_srq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
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

pub(super) fn query_srq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
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

pub(super) fn destroy_srq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
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
