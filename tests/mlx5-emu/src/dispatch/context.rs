//! Device-level commands: GET_CONTEXT (with mlx5's context response),
//! QUERY_DEVICE, EX_QUERY_DEVICE and QUERY_PORT.

use rverbs_abi::device::{
    ExQueryDevice, ExQueryDeviceResp, GetContext, GetContextResp, QueryDevice, QueryPort,
};
use rverbs_abi::mlx5;
use rverbs_abi::Errno;

use super::lookup::event_pair;
use super::rules::{ucontext_bfregs, ucontext_req};
use super::Call;
use crate::device;
use crate::emu::{self, Emu, EventKind};
use crate::fdtable::{self, FdKind};

pub(super) fn get_context(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
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

pub(super) fn query_device(_emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    call.req::<QueryDevice>()?;
    call.out.put(&device::query_device(), true);
    Ok(())
}

pub(super) fn ex_query_device(_emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
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

pub(super) fn query_port(_emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: QueryPort = call.req()?;
    call.note(format_args!("port {}", req.port_num));
    if !device::port_valid(req.port_num) {
        return Err(Errno::EINVAL);
    }
    call.out.put(&device::query_port(), true);
    Ok(())
}
