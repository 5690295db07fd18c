//! Completion queues and completion channels: CREATE_COMP_CHANNEL,
//! CREATE_CQ, RESIZE_CQ and DESTROY_CQ.

use rverbs_abi::cq::{
    CreateCompChannel, CreateCompChannelResp, CreateCq, CreateCqResp, DestroyCq, DestroyCqResp,
    ResizeCq, ResizeCqResp,
};
use rverbs_abi::mlx5;
use rverbs_abi::Errno;

use super::lookup::{cq_entries, destroy_allowed, event_pair, owned, owned_for_destroy};
use super::rules::{check_buf_offset, check_cq_features, create_cq_req, resize_cq_req};
use super::Call;
use crate::device;
use crate::emu::{Cq, CqRing, Emu, EventKind};
use crate::fdtable::{self, FdKind};
use crate::mem::{self};

pub(super) fn create_comp_channel(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    call.req::<CreateCompChannel>()?;
    let (user, peer) = event_pair()?;
    emu.add_channel(call.ctx, EventKind::Comp, user, peer);
    fdtable::set(user, FdKind::Event);
    call.out
        .put(&CreateCompChannelResp { fd: user as u32 }, true);
    call.note(format_args!("-> fd {user}"));
    Ok(())
}

pub(super) fn create_cq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateCq = call.req()?;
    call.note(format_args!(
        "cqe {} channel {} vector {}",
        req.cqe, req.comp_channel, req.comp_vector
    ));
    if req.comp_vector >= device::NUM_COMP_VECTORS {
        return Err(Errno::EINVAL);
    }
    let channel = if req.comp_channel >= 0 {
        let ch = emu
            .channels
            .get(&req.comp_channel)
            .filter(|c| c.kind == EventKind::Comp && c.ctx == call.ctx)
            .ok_or(Errno::EBADF)?;
        Some(ch.id)
    } else {
        None
    };
    let entries = cq_entries(req.cqe)?;
    // The kernel's order (create_cq_user): the request, the ring's pages
    // and their offset, the doorbell page, then the features.
    let ucmd = create_cq_req(call.drv)?;
    mem::check(ucmd.buf_addr, entries as usize * ucmd.cqe_size as usize)?;
    check_buf_offset(ucmd.buf_addr)?;
    mem::check(ucmd.db_addr, 8)?;
    check_cq_features(&ucmd)?;
    let handle = emu.handle();
    let cqn = emu.new_cqn();
    emu.cqs.insert(
        handle,
        Cq {
            ctx: call.ctx,
            cqn,
            user_handle: req.user_handle,
            channel,
            comp_vector: req.comp_vector,
            ring: CqRing {
                buf: ucmd.buf_addr,
                entries,
                cqe_size: ucmd.cqe_size,
            },
            resize_from: None,
            hw_pi: 0,
            db_addr: ucmd.db_addr,
            uar_page: 0,
            users: 0,
            comp_events_reported: 0,
            async_events_reported: 0,
        },
    );
    call.out.put(
        &CreateCqResp {
            cq_handle: handle,
            cqe: entries - 1,
        },
        true,
    );
    call.drv_out
        .put(&mlx5::CreateCqResp { cqn, reserved: 0 }, false);
    call.note(format_args!(
        "-> cq {handle} cqn {cqn:#x} entries {entries}"
    ));
    Ok(())
}

pub(super) fn resize_cq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: ResizeCq = call.req()?;
    let h = req.cq_handle;
    call.note(format_args!("cq {h} cqe {}", req.cqe));
    let cur = owned(&emu.cqs, call.ctx, h)?.ring;
    if req.cqe < 1 {
        return Err(Errno::EINVAL);
    }
    let entries = cq_entries(req.cqe)?;
    // The same size again is done before the driver data is read
    // (mlx5_ib_resize_cq).
    if entries != cur.entries {
        let ucmd = resize_cq_req(call.drv)?;
        mem::check(ucmd.buf_addr, entries as usize * usize::from(ucmd.cqe_size))?;
        check_buf_offset(ucmd.buf_addr)?;
        let cq = emu.cqs.get_mut(&h).ok_or(Errno::EINVAL)?;
        // The HCA's MODIFY_CQ (resize) fails, BAD_PARAM (the kernel's
        // EINVAL), when the CQEs not yet consumed do not fit: they and
        // the RESIZE CQE's counter must fit the new ring, and the RESIZE
        // CQE needs a free entry in the old one (notes, 1.3).
        let outstanding = crate::hca::cq_outstanding(cq);
        if outstanding >= entries.min(cur.entries) {
            call.note(format_args!(
                "{outstanding} CQEs outstanding: {entries} entries cannot hold them"
            ));
            return Err(Errno::EINVAL);
        }
        // Like the HW: the RESIZE CQE ends the old ring at the producer
        // counter and production continues at the next counter in the new
        // ring. The HCA thread writes CQEs only under the emulator lock,
        // which this command holds, so the switch is atomic for it.
        cq.resize_from = Some(cur);
        crate::hca::write_resize_cqe(cur, cq.hw_pi);
        cq.hw_pi = cq.hw_pi.wrapping_add(1);
        cq.ring = CqRing {
            buf: ucmd.buf_addr,
            entries,
            cqe_size: u32::from(ucmd.cqe_size),
        };
        cq.resize_from = None;
    }
    call.out.put(
        &ResizeCqResp {
            cqe: entries - 1,
            reserved: 0,
        },
        true,
    );
    call.note(format_args!("-> entries {entries}"));
    Ok(())
}

pub(super) fn destroy_cq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroyCq = call.req()?;
    let h = req.cq_handle;
    call.note(format_args!("cq {h}"));
    destroy_allowed(call)?;
    let cq = owned_for_destroy(emu, &emu.cqs, call.ctx, h)?;
    if cq.users > 0 {
        return Err(Errno::EBUSY);
    }
    let resp = DestroyCqResp {
        comp_events_reported: cq.comp_events_reported,
        async_events_reported: cq.async_events_reported,
    };
    emu.cqs.remove(&h);
    call.out.put(&resp, true);
    Ok(())
}
