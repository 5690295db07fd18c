//! Completion queues and queue pairs: CREATE_CQ and DESTROY_CQ (EFA's CQ
//! driver data: entry size, sub-CQs, flags), CREATE_QP (UD, and SRD as
//! the driver QP type; ring sizes in the driver data, the rings and
//! doorbells handed out as mappable regions), MODIFY_QP (the UD state
//! machine, plus SRD's RNR retry), QUERY_QP and DESTROY_QP.

use emu_core::cmd::Call;
use rverbs_abi::cq::{CreateCq, CreateCqResp, DestroyCq, DestroyCqResp};
use rverbs_abi::efa::{self, create_cq_flags as cqf, device_caps as caps};
use rverbs_abi::qp::{
    attr_mask as m, qp_state, qp_type, CreateQp, CreateQpResp, DestroyQp, DestroyQpResp, ModifyQp,
    QueryQp, QueryQpResp,
};
use rverbs_abi::Errno;

use super::drv_req;
use super::objects::{for_destroy, owned, pd_users};
use crate::device;
use crate::emu::{Cq, Emu, Qp, RegionKind};
use crate::qp_fsm;

/// `IB_QPT_DRIVER`: the QP type of SRD queue pairs.
pub const QPT_DRIVER: u8 = 0xff;
/// Bytes of a send descriptor.
const TX_WQE: u32 = 64;
/// Bytes of a receive descriptor.
const RX_DESC: u32 = 16;

pub(super) fn create_cq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateCq = call.req()?;
    let drv: efa::CreateCq = drv_req(call.drv, 12)?;
    call.note(format_args!(
        "cqe {} entry_size {} sub_cqs {} flags {:#x}",
        req.cqe, drv.cq_entry_size, drv.num_sub_cqs, drv.flags
    ));
    // The uverbs layer's rule, before the driver's.
    if req.comp_vector >= 1 {
        call.note(format_args!(
            "comp_vector {} >= num_comp_vectors 1",
            req.comp_vector
        ));
        return Err(Errno::EINVAL);
    }
    if drv.comp_mask != 0 {
        call.note(format_args!("comp_mask not zero"));
        return Err(Errno::EINVAL);
    }
    if drv.reserved_58 != [0; 5] {
        call.note(format_args!("reserved_58 not zero"));
        return Err(Errno::EINVAL);
    }
    if drv.num_sub_cqs != device::SUB_CQS_PER_CQ {
        call.note(format_args!(
            "num_sub_cqs is not the device's {}",
            device::SUB_CQS_PER_CQ
        ));
        return Err(Errno::EINVAL);
    }
    let known = cqf::WITH_COMPLETION_CHANNEL | cqf::WITH_SGID;
    if drv.flags & !known != 0 {
        call.note(format_args!("flags {:#x} unknown", drv.flags & !known));
        return Err(Errno::EOPNOTSUPP);
    }
    let with_sgid = drv.flags & cqf::WITH_SGID != 0;
    if with_sgid && device::DEVICE_CAPS & caps::CQ_WITH_SGID == 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if drv.flags & cqf::WITH_COMPLETION_CHANNEL != 0 || req.comp_channel >= 0 {
        // No CQ_NOTIFICATIONS capability: no completion events.
        call.note(format_args!("completion channel without CQ_NOTIFICATIONS"));
        return Err(Errno::EOPNOTSUPP);
    }
    let want_size = if with_sgid { 32 } else { 16 };
    if drv.cq_entry_size != want_size {
        call.note(format_args!("cq_entry_size is not {want_size}"));
        return Err(Errno::EINVAL);
    }
    if req.cqe == 0 || req.cqe > device::MAX_CQE {
        call.note(format_args!("cqe out of range"));
        return Err(Errno::EINVAL);
    }
    let entries = req.cqe;
    let bytes = u64::from(entries) * u64::from(drv.cq_entry_size) * u64::from(drv.num_sub_cqs);
    let handle = emu.handle();
    let key = emu.add_region(call.ctx, bytes, RegionKind::CqRing, handle)?;
    let size = emu
        .ucontext_mut(call.ctx)
        .and_then(|u| u.regions.get(&key))
        .map_or(0, |r| r.len);
    let cq_idx = emu.new_cq_idx();
    emu.cqs.insert(
        handle,
        Cq {
            ctx: call.ctx,
            entries,
            entry_size: drv.cq_entry_size,
            key,
            users: 0,
        },
    );
    call.out.put(
        &CreateCqResp {
            cq_handle: handle,
            cqe: entries,
        },
        true,
    );
    call.drv_out.put(
        &efa::CreateCqResp {
            q_mmap_key: key,
            q_mmap_size: size,
            cq_idx,
            ..Default::default()
        },
        true,
    );
    call.note(format_args!(
        "-> cq {handle} idx {cq_idx} key {key:#x} size {size:#x}"
    ));
    Ok(())
}

pub(super) fn destroy_cq(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroyCq = call.req()?;
    let h = req.cq_handle;
    call.note(format_args!("cq {h}"));
    let cq = for_destroy(emu, &emu.cqs, call.ctx, h)?;
    if cq.users > 0 {
        return Err(Errno::EBUSY);
    }
    let key = cq.key;
    emu.cqs.remove(&h);
    emu.remove_regions(call.ctx, &[key]);
    call.out.put(&DestroyCqResp::default(), true);
    Ok(())
}

pub(super) fn create_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateQp = call.req()?;
    let drv: efa::CreateQp = drv_req(call.drv, size_of::<efa::CreateQp>())?;
    call.note(format_args!(
        "type {} driver_type {} send {}x{} recv {}x{} inline {} sq_ring {} rq_ring {}",
        req.qp_type,
        drv.driver_qp_type,
        req.max_send_wr,
        req.max_send_sge,
        req.max_recv_wr,
        req.max_recv_sge,
        req.max_inline_data,
        drv.sq_ring_size,
        drv.rq_ring_size
    ));
    if drv.comp_mask != 0 {
        call.note(format_args!("comp_mask not zero"));
        return Err(Errno::EOPNOTSUPP);
    }
    match req.qp_type {
        qp_type::UD => {}
        QPT_DRIVER if drv.driver_qp_type == efa::EFA_QP_DRIVER_TYPE_SRD => {}
        QPT_DRIVER => {
            call.note(format_args!("driver_qp_type is not SRD"));
            return Err(Errno::EOPNOTSUPP);
        }
        _ => {
            call.note(format_args!("qp_type {} (EFA has UD and SRD)", req.qp_type));
            return Err(Errno::EOPNOTSUPP);
        }
    }
    if req.is_srq != 0 {
        call.note(format_args!("is_srq (EFA has no SRQ)"));
        return Err(Errno::EOPNOTSUPP);
    }
    let limits = [
        ("max_send_wr", req.max_send_wr, device::MAX_SQ_WR),
        ("max_recv_wr", req.max_recv_wr, device::MAX_RQ_WR),
        (
            "max_send_sge",
            req.max_send_sge,
            u32::from(device::MAX_SQ_SGE),
        ),
        (
            "max_recv_sge",
            req.max_recv_sge,
            u32::from(device::MAX_RQ_SGE),
        ),
        (
            "max_inline_data",
            req.max_inline_data,
            u32::from(device::INLINE_BUF_SIZE),
        ),
        ("sq_ring_size", drv.sq_ring_size, device::MAX_LLQ_SIZE),
        (
            "rq_ring_size",
            drv.rq_ring_size,
            device::MAX_RQ_WR * RX_DESC,
        ),
    ];
    for (name, v, max) in limits {
        if v > max {
            call.note(format_args!("{name} {v} > {max}"));
            return Err(Errno::EINVAL);
        }
    }
    if drv.sq_ring_size % TX_WQE != 0 || drv.sq_ring_size / TX_WQE < req.max_send_wr {
        call.note(format_args!(
            "sq_ring_size does not hold max_send_wr descriptors"
        ));
        return Err(Errno::EINVAL);
    }
    if drv.rq_ring_size % RX_DESC != 0 || drv.rq_ring_size / RX_DESC < req.max_recv_wr {
        call.note(format_args!(
            "rq_ring_size does not hold max_recv_wr descriptors"
        ));
        return Err(Errno::EINVAL);
    }
    owned(&emu.pds, call.ctx, req.pd_handle)?;
    owned(&emu.cqs, call.ctx, req.send_cq_handle)?;
    owned(&emu.cqs, call.ctx, req.recv_cq_handle)?;
    let handle = emu.handle();
    let db = emu.add_region(call.ctx, device::PAGE, RegionKind::Doorbells, handle)?;
    let mut keys = vec![db];
    let rq_key = if drv.rq_ring_size > 0 {
        let k = emu.add_region(
            call.ctx,
            u64::from(drv.rq_ring_size),
            RegionKind::RqRing,
            handle,
        )?;
        keys.push(k);
        Some(k)
    } else {
        None
    };
    let llq_key = if drv.sq_ring_size > 0 {
        let k = emu.add_region(
            call.ctx,
            u64::from(drv.sq_ring_size),
            RegionKind::Llq,
            handle,
        )?;
        keys.push(k);
        Some(k)
    } else {
        None
    };
    let rq_size = rq_key
        .and_then(|k| emu.ucontext_mut(call.ctx)?.regions.get(&k).map(|r| r.len))
        .unwrap_or(0);
    let qpn = emu.new_qpn();
    let caps = [
        req.max_send_wr,
        req.max_recv_wr,
        req.max_send_sge,
        req.max_recv_sge,
        req.max_inline_data,
    ];
    emu.qps.insert(
        handle,
        Qp {
            ctx: call.ctx,
            qpn,
            qp_type: req.qp_type,
            pd: req.pd_handle,
            send_cq: req.send_cq_handle,
            recv_cq: req.recv_cq_handle,
            caps,
            sq_sig_all: req.sq_sig_all != 0,
            sq_ring_size: drv.sq_ring_size,
            rq_ring_size: drv.rq_ring_size,
            keys,
            db_key: db,
            rq_key,
            llq_key,
            state: qp_state::RESET,
            qkey: 0,
            sq_psn: 0,
            rnr_retry: 0,
            resets: 0,
        },
    );
    pd_users(emu, req.pd_handle, 1);
    crate::hw::start();
    for cq in [req.send_cq_handle, req.recv_cq_handle] {
        if let Some(c) = emu.cqs.get_mut(&cq) {
            c.users += 1;
        }
    }
    call.out.put(
        &CreateQpResp {
            qp_handle: handle,
            qpn,
            max_send_wr: req.max_send_wr,
            max_recv_wr: req.max_recv_wr,
            max_send_sge: req.max_send_sge,
            max_recv_sge: req.max_recv_sge,
            max_inline_data: req.max_inline_data,
            reserved: 0,
        },
        true,
    );
    call.drv_out.put(
        &efa::CreateQpResp {
            comp_mask: 0,
            rq_db_offset: device::RQ_DB_OFFSET,
            sq_db_offset: device::SQ_DB_OFFSET,
            llq_desc_offset: 0,
            rq_mmap_key: rq_key.unwrap_or(0),
            rq_mmap_size: rq_size,
            rq_db_mmap_key: db,
            sq_db_mmap_key: db,
            llq_desc_mmap_key: llq_key.unwrap_or(0),
            send_sub_cq_idx: 0,
            recv_sub_cq_idx: 0,
            reserved_1e0: [0; 4],
        },
        true,
    );
    call.note(format_args!("-> qp {handle} qpn {qpn}"));
    Ok(())
}

/// The MODIFY_QP attributes EFA takes.
const MODIFY_SUPPORTED: u32 = m::STATE
    | m::CUR_STATE
    | m::EN_SQD_ASYNC_NOTIFY
    | m::PKEY_INDEX
    | m::PORT
    | m::QKEY
    | m::SQ_PSN
    | m::RNR_RETRY;

pub(super) fn modify_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: ModifyQp = call.req()?;
    if !crate::mem::all_zero(call.drv) {
        return Err(Errno::EOPNOTSUPP);
    }
    let mask = req.attr_mask;
    call.note(format_args!(
        "qp {} mask {mask:#x} state {}",
        req.qp_handle, req.qp_state
    ));
    let qp = owned(&emu.qps, call.ctx, req.qp_handle)?;
    if mask & !MODIFY_SUPPORTED != 0 {
        call.note(format_args!(
            "attr_mask {:#x} unsupported",
            mask & !MODIFY_SUPPORTED
        ));
        return Err(Errno::EOPNOTSUPP);
    }
    if mask & m::RNR_RETRY != 0
        && (qp.qp_type != QPT_DRIVER || device::DEVICE_CAPS & caps::RNR_RETRY == 0)
    {
        call.note(format_args!("rnr_retry on a QP without it"));
        return Err(Errno::EOPNOTSUPP);
    }
    let cur = if mask & m::CUR_STATE != 0 {
        req.cur_qp_state
    } else {
        qp.state
    };
    let next = if mask & m::STATE != 0 {
        req.qp_state
    } else {
        cur
    };
    if !qp_fsm::transition_ok(
        cur,
        next,
        qp_type::UD,
        mask & !(m::RNR_RETRY | m::CUR_STATE),
    ) {
        call.note(format_args!(
            "transition {cur} -> {next} with mask {mask:#x} refused"
        ));
        return Err(Errno::EINVAL);
    }
    if mask & m::PORT != 0 && req.port_num != 1 {
        return Err(Errno::EINVAL);
    }
    if mask & m::PKEY_INDEX != 0 && req.pkey_index != 0 {
        return Err(Errno::EINVAL);
    }
    let Some(qp) = emu.qps.get_mut(&req.qp_handle) else {
        return Err(Errno::EINVAL);
    };
    if next == qp_state::RESET && qp.state != qp_state::RESET {
        qp.resets += 1;
    }
    qp.state = next;
    if mask & m::QKEY != 0 {
        qp.qkey = req.qkey;
    }
    if mask & m::SQ_PSN != 0 {
        qp.sq_psn = req.sq_psn & 0x00ff_ffff;
    }
    if mask & m::RNR_RETRY != 0 {
        qp.rnr_retry = req.rnr_retry;
    }
    Ok(())
}

pub(super) fn query_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: QueryQp = call.req()?;
    call.note(format_args!("qp {}", req.qp_handle));
    let qp = owned(&emu.qps, call.ctx, req.qp_handle)?;
    let resp = QueryQpResp {
        max_send_wr: qp.caps[0],
        max_recv_wr: qp.caps[1],
        max_send_sge: qp.caps[2],
        max_recv_sge: qp.caps[3],
        max_inline_data: qp.caps[4],
        qkey: qp.qkey,
        sq_psn: qp.sq_psn,
        qp_state: qp.state,
        cur_qp_state: qp.state,
        port_num: 1,
        rnr_retry: qp.rnr_retry,
        sq_sig_all: u8::from(qp.sq_sig_all),
        ..Default::default()
    };
    call.out.put(&resp, true);
    Ok(())
}

pub(super) fn destroy_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroyQp = call.req()?;
    let h = req.qp_handle;
    call.note(format_args!("qp {h}"));
    for_destroy(emu, &emu.qps, call.ctx, h)?;
    let Some(qp) = emu.qps.remove(&h) else {
        return Err(Errno::EINVAL);
    };
    emu.remove_regions(call.ctx, &qp.keys);
    pd_users(emu, qp.pd, -1);
    for cq in [qp.send_cq, qp.recv_cq] {
        if let Some(c) = emu.cqs.get_mut(&cq) {
            c.users = c.users.saturating_sub(1);
        }
    }
    call.out.put(&DestroyQpResp { events_reported: 0 }, true);
    Ok(())
}
