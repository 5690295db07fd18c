//! Device-level commands: GET_CONTEXT (with EFA's context response),
//! QUERY_DEVICE, EX_QUERY_DEVICE (with EFA's device attributes) and
//! QUERY_PORT.

use std::collections::BTreeMap;

use emu_core::cmd::Call;
use rverbs_abi::device::{
    ExQueryDevice, ExQueryDeviceResp, GetContext, GetContextResp, QueryDevice, QueryPort,
};
use rverbs_abi::efa::{self, alloc_ucontext_comp as comp, supp_udata};
use rverbs_abi::Errno;

use super::drv_req;
use crate::device;
use crate::emu::{Emu, Ucontext};
use crate::fdtable::{self, FdKind};

pub(super) fn get_context(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    call.req::<GetContext>()?;
    let req: efa::AllocUcontextCmd = drv_req(call.drv, 0)?;
    if req.reserved_20 != [0; 4] {
        call.note(format_args!("reserved_20 not zero"));
        return Err(Errno::EINVAL);
    }
    if req.comp_mask & !(comp::TX_BATCH | comp::MIN_SQ_WR) != 0 {
        call.note(format_args!("comp_mask {:#x} unknown", req.comp_mask));
        return Err(Errno::EOPNOTSUPP);
    }
    let (user, peer) = fdtable::event_pair()?;
    let ctx = call.ctx;
    let Some(c) = emu.contexts.get_mut(&ctx) else {
        crate::real::close(user);
        crate::real::close(peer);
        return Err(Errno::EIO);
    };
    c.ucontext = Some(Ucontext {
        async_fds: (user, peer),
        used: 0,
        regions: BTreeMap::new(),
    });
    fdtable::set(user, FdKind::Event);
    call.out.put(
        &GetContextResp {
            async_fd: user as u32,
            num_comp_vectors: 1,
        },
        true,
    );
    let resp = efa::AllocUcontextResp {
        comp_mask: 0,
        cmds_supp_udata_mask: supp_udata::QUERY_DEVICE | supp_udata::CREATE_AH,
        sub_cqs_per_cq: device::SUB_CQS_PER_CQ,
        inline_buf_size: device::INLINE_BUF_SIZE,
        max_llq_size: device::MAX_LLQ_SIZE,
        max_tx_batch: if req.comp_mask & comp::TX_BATCH != 0 {
            device::MAX_TX_BATCH
        } else {
            0
        },
        min_sq_wr: if req.comp_mask & comp::MIN_SQ_WR != 0 {
            device::MIN_SQ_WR
        } else {
            0
        },
        reserved_a0: [0; 4],
    };
    call.drv_out.put(&resp, false);
    call.note(format_args!(
        "context {ctx} comp_mask {:#x} async_fd {user}",
        req.comp_mask
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
    call.drv_out.put(&device::efa_query_device(), true);
    Ok(())
}

pub(super) fn query_port(_emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: QueryPort = call.req()?;
    call.note(format_args!("port {}", req.port_num));
    if req.port_num != 1 {
        return Err(Errno::EINVAL);
    }
    call.out.put(&device::query_port(), true);
    Ok(())
}
