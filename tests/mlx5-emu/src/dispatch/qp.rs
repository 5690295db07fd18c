//! Queue pairs: CREATE_QP, QUERY_QP, MODIFY_QP (through the state machine
//! of `qp_fsm`) and DESTROY_QP.

use rverbs_abi::mlx5;
use rverbs_abi::qp::{
    attr_mask as am, qp_state, qp_type, CreateQp, CreateQpResp, DestroyQp, DestroyQpResp, ModifyQp,
    QueryQp, QueryQpResp,
};
use rverbs_abi::Errno;

use super::ah::roce_path;
use super::lookup::{add_users, destroy_allowed, owned, owned_for_destroy, zero_or_pow2};
use super::rules::{
    check_buf_offset, check_modify_qp_udata, check_qp_flags, check_qp_uar, create_qp_req, qp_rq,
    qp_user_index,
};
use super::Call;
use crate::emu::{self, Emu, Qp, QpAttrs, QpCaps, WorkQueue};
use crate::mem::{self};
use crate::{device, qp_fsm};

/// Attribute bits the legacy MODIFY_QP accepts (up to `IB_QP_DEST_QPN`).
const LEGACY_QP_ATTR_MASK: u32 = (am::DEST_QPN << 1) - 1;

pub(super) fn create_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: CreateQp = call.req()?;
    call.note(format_args!(
        "type {} pd {} send_cq {} recv_cq {} srq {}",
        req.qp_type,
        req.pd_handle,
        req.send_cq_handle,
        req.recv_cq_handle,
        if req.is_srq != 0 {
            req.srq_handle.to_string()
        } else {
            "-".into()
        }
    ));
    if !matches!(req.qp_type, qp_type::RC | qp_type::UC | qp_type::UD) {
        return Err(Errno::EOPNOTSUPP);
    }
    let ctx = call.ctx;
    owned(&emu.pds, ctx, req.pd_handle)?;
    owned(&emu.cqs, ctx, req.send_cq_handle)?;
    owned(&emu.cqs, ctx, req.recv_cq_handle)?;
    let srq = if req.is_srq != 0 {
        owned(&emu.srqs, ctx, req.srq_handle)?;
        Some(req.srq_handle)
    } else {
        None
    };
    if req.max_send_wr > device::MAX_QP_WR
        || req.max_recv_wr > device::MAX_QP_WR
        || req.max_send_sge > device::MAX_SGE
        || req.max_recv_sge > device::MAX_SGE
        || req.max_inline_data > u32::from(device::MAX_SQ_DESC_SZ)
    {
        return Err(Errno::EINVAL);
    }
    // The mlx5 driver data, in the kernel's order (mlx5_ib_create_qp,
    // create_user_qp, _create_user_qp).
    let ucmd = create_qp_req(call.drv)?;
    check_qp_flags(ucmd.flags)?;
    let cqe_version = emu
        .context(ctx)
        .and_then(|c| c.ucontext())
        .map_or(0, |u| u.cqe_version());
    let uidx = qp_user_index(cqe_version, ucmd.uidx)?;
    let rq = qp_rq(&ucmd, srq.is_none() && req.max_recv_wr != 0)?;
    // The send queue in 64-byte basic blocks (create_user_qp,
    // set_user_buf_size): 0 or a power of two, at most the device's.
    if ucmd.sq_wqe_count > device::MAX_QP_WR {
        return Err(Errno::EINVAL);
    }
    check_qp_uar(ucmd.flags)?;
    if !zero_or_pow2(ucmd.sq_wqe_count) {
        return Err(Errno::EINVAL);
    }
    // The send queue follows the receive queue; a range past the end of
    // the address space is ib_umem_get's EINVAL.
    let sq = WorkQueue {
        buf: ucmd.buf_addr.checked_add(rq.bytes()).ok_or(Errno::EINVAL)?,
        wqe_cnt: ucmd.sq_wqe_count,
        wqe_shift: 6,
    };
    let total = rq.bytes() + sq.bytes();
    if total > 0 {
        mem::check(ucmd.buf_addr, total as usize)?;
        check_buf_offset(ucmd.buf_addr)?;
    }
    mem::check(ucmd.db_addr, 8)?;
    let bfreg = emu.ucontext_mut(ctx).ok_or(Errno::EINVAL)?.alloc_bfreg()?;
    let handle = emu.handle();
    let qpn = emu.new_qpn();
    let caps = QpCaps {
        max_send_wr: req.max_send_wr,
        max_recv_wr: req.max_recv_wr,
        max_send_sge: req.max_send_sge,
        max_recv_sge: req.max_recv_sge,
        max_inline_data: req.max_inline_data,
    };
    crate::hca::start();
    emu.qps.insert(
        handle,
        Qp {
            ctx,
            qpn,
            qp_type: req.qp_type,
            user_handle: req.user_handle,
            pd: req.pd_handle,
            send_cq: req.send_cq_handle,
            recv_cq: req.recv_cq_handle,
            srq,
            caps,
            sq_sig_all: req.sq_sig_all != 0,
            flags: ucmd.flags,
            uidx,
            sq,
            rq,
            db_addr: ucmd.db_addr,
            bfreg,
            state: qp_state::RESET,
            attrs: QpAttrs::default(),
            events_reported: 0,
            resets: 0,
        },
    );
    add_users(&mut emu.pds, req.pd_handle, 1);
    add_users(&mut emu.cqs, req.send_cq_handle, 1);
    add_users(&mut emu.cqs, req.recv_cq_handle, 1);
    if let Some(s) = srq {
        add_users(&mut emu.srqs, s, 1);
    }
    call.out.put(
        &CreateQpResp {
            qp_handle: handle,
            qpn,
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: caps.max_recv_sge,
            max_inline_data: caps.max_inline_data,
            reserved: 0,
        },
        true,
    );
    let (bfreg_index, page, offset) = emu::bfreg_location(bfreg);
    call.drv_out.put(
        &mlx5::CreateQpResp {
            bfreg_index,
            ..Default::default()
        },
        false,
    );
    call.note(format_args!(
        "-> qp {handle} qpn {qpn:#x} sq {}x64 rq {}x{} uidx {uidx:#x} bfreg {bfreg} \
         (index {bfreg_index}, UAR {page} +{offset:#x})",
        sq.wqe_cnt,
        rq.wqe_cnt,
        if rq.wqe_cnt > 0 {
            1u32 << rq.wqe_shift
        } else {
            0
        }
    ));
    Ok(())
}

/// Scatter entries per receive WQE of a QP (what the kernel reports).
pub(super) fn rq_max_gs(qp: &Qp) -> u32 {
    if qp.rq.wqe_cnt == 0 {
        return 0;
    }
    let sig = u32::from(qp.flags & mlx5::MLX5_QP_FLAG_SIGNATURE != 0);
    ((1u32 << qp.rq.wqe_shift) / 16).saturating_sub(sig)
}

pub(super) fn query_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: QueryQp = call.req()?;
    call.note(format_args!("qp {}", req.qp_handle));
    let qp = owned(&emu.qps, call.ctx, req.qp_handle)?;
    let a = &qp.attrs;
    let resp = QueryQpResp {
        dest: a.dest,
        alt_dest: a.alt_dest,
        // Send capabilities of user QPs are the provider's business.
        max_send_wr: 0,
        max_recv_wr: qp.rq.wqe_cnt,
        max_send_sge: 0,
        max_recv_sge: rq_max_gs(qp),
        max_inline_data: 0,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        pkey_index: a.pkey_index,
        alt_pkey_index: a.alt_pkey_index,
        qp_state: qp.state,
        cur_qp_state: qp.state,
        path_mtu: a.path_mtu,
        path_mig_state: a.path_mig_state,
        sq_draining: 0,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: a.alt_port_num,
        alt_timeout: a.alt_timeout,
        sq_sig_all: u8::from(qp.sq_sig_all),
        reserved: [0; 5],
    };
    call.note(format_args!("state {}", qp.state));
    call.out.put(&resp, true);
    Ok(())
}

pub(super) fn modify_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: ModifyQp = call.req()?;
    let mask = req.attr_mask;
    call.note(format_args!(
        "qp {} mask {mask:#x} state {}",
        req.qp_handle,
        if mask & am::STATE != 0 {
            req.qp_state.to_string()
        } else {
            "-".into()
        }
    ));
    let qp = owned(&emu.qps, call.ctx, req.qp_handle)?;
    if mask & !LEGACY_QP_ATTR_MASK != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    check_modify_qp_udata(call.drv)?;
    if (mask & am::STATE != 0 && req.qp_state > qp_state::ERR)
        || (mask & am::CUR_STATE != 0 && req.cur_qp_state > qp_state::ERR)
    {
        return Err(Errno::EINVAL);
    }
    let cur = if mask & am::CUR_STATE != 0 {
        req.cur_qp_state
    } else {
        qp.state
    };
    if cur != qp.state {
        return Err(Errno::EINVAL);
    }
    let next = if mask & am::STATE != 0 {
        req.qp_state
    } else {
        cur
    };
    if !qp_fsm::transition_ok(cur, next, qp.qp_type, mask) {
        return Err(Errno::EINVAL);
    }
    let eth = device::link() == device::Link::Eth;
    let sgid_ok = |d: &rverbs_abi::qp::QpDest| {
        eth || d.is_global == 0 || u32::from(d.sgid_index) < device::GID_TBL_LEN
    };
    if (mask & am::PORT != 0 && !device::port_valid(req.port_num))
        || (mask & am::AV != 0 && (!device::port_valid(req.dest.port_num) || !sgid_ok(&req.dest)))
        || (mask & am::ALT_PATH != 0
            && (!device::port_valid(req.alt_port_num)
                || !device::port_valid(req.alt_dest.port_num)
                || !sgid_ok(&req.alt_dest)))
        || (mask & am::PKEY_INDEX != 0 && req.pkey_index >= device::pkey_tbl_len())
        || (mask & am::ALT_PATH != 0 && req.alt_pkey_index >= device::pkey_tbl_len())
        || (mask & am::PATH_MTU != 0 && !(1..=device::MTU_4096).contains(&req.path_mtu))
        || (mask & am::MAX_QP_RD_ATOMIC != 0
            && u32::from(req.max_rd_atomic) > device::MAX_RD_ATOMIC)
        || (mask & am::MAX_DEST_RD_ATOMIC != 0
            && u32::from(req.max_dest_rd_atomic) > device::MAX_RD_ATOMIC)
    {
        return Err(Errno::EINVAL);
    }
    if eth {
        // _ib_modify_qp: both paths checked, the primary one of a
        // connected QP resolved to a MAC (the emulated HCA routes by QP
        // number, so the MAC itself is not kept).
        let d = &req.dest;
        if mask & am::AV != 0 {
            let dmac = roce_path(d.is_global, d.sgid_index, &d.dgid)?;
            call.note(format_args!("dmac {dmac:02x?}"));
        }
        let alt = &req.alt_dest;
        if mask & am::ALT_PATH != 0 && alt.is_global == 0 {
            return Err(Errno::EINVAL);
        }
        if mask & am::ALT_PATH != 0 && device::gid_entry(u32::from(alt.sgid_index)).is_none() {
            return Err(Errno::ENODATA);
        }
    }
    if cur == qp_state::RESET && next == qp_state::RESET {
        return Ok(());
    }
    let qp = emu.qps.get_mut(&req.qp_handle).ok_or(Errno::EINVAL)?;
    if next == qp_state::RESET {
        qp.attrs = QpAttrs::default();
        qp.resets = qp.resets.wrapping_add(1);
        qp.state = next;
        return Ok(());
    }
    let a = &mut qp.attrs;
    if mask & am::QKEY != 0 {
        a.qkey = req.qkey;
    }
    if mask & am::RQ_PSN != 0 {
        a.rq_psn = req.rq_psn & 0xff_ffff;
    }
    if mask & am::SQ_PSN != 0 {
        a.sq_psn = req.sq_psn & 0xff_ffff;
    }
    if mask & am::DEST_QPN != 0 {
        a.dest_qp_num = req.dest_qp_num & 0xff_ffff;
    }
    if mask & am::ACCESS_FLAGS != 0 {
        a.qp_access_flags = req.qp_access_flags;
    }
    if mask & am::PKEY_INDEX != 0 {
        a.pkey_index = req.pkey_index;
    }
    if mask & am::PORT != 0 {
        a.port_num = req.port_num;
    }
    if mask & am::AV != 0 {
        a.dest = req.dest;
    }
    if mask & am::ALT_PATH != 0 {
        a.alt_dest = req.alt_dest;
        a.alt_pkey_index = req.alt_pkey_index;
        a.alt_port_num = req.alt_port_num;
        a.alt_timeout = req.alt_timeout;
    }
    if mask & am::PATH_MTU != 0 {
        a.path_mtu = req.path_mtu;
    }
    if mask & am::PATH_MIG_STATE != 0 {
        a.path_mig_state = req.path_mig_state;
    }
    if mask & am::EN_SQD_ASYNC_NOTIFY != 0 {
        a.en_sqd_async_notify = req.en_sqd_async_notify;
    }
    if mask & am::MAX_QP_RD_ATOMIC != 0 {
        a.max_rd_atomic = req.max_rd_atomic;
    }
    if mask & am::MAX_DEST_RD_ATOMIC != 0 {
        a.max_dest_rd_atomic = req.max_dest_rd_atomic;
    }
    if mask & am::MIN_RNR_TIMER != 0 {
        a.min_rnr_timer = req.min_rnr_timer;
    }
    if mask & am::TIMEOUT != 0 {
        a.timeout = req.timeout;
    }
    if mask & am::RETRY_CNT != 0 {
        a.retry_cnt = req.retry_cnt;
    }
    if mask & am::RNR_RETRY != 0 {
        a.rnr_retry = req.rnr_retry;
    }
    qp.state = next;
    Ok(())
}

pub(super) fn destroy_qp(emu: &mut Emu, call: &mut Call<'_>) -> Result<(), Errno> {
    let req: DestroyQp = call.req()?;
    let h = req.qp_handle;
    call.note(format_args!("qp {h}"));
    destroy_allowed(call)?;
    owned_for_destroy(emu, &emu.qps, call.ctx, h)?;
    let qp = emu.qps.remove(&h).ok_or(Errno::EINVAL)?;
    if let Some(u) = emu.ucontext_mut(call.ctx) {
        u.free_bfreg(qp.bfreg);
    }
    add_users(&mut emu.pds, qp.pd, -1);
    add_users(&mut emu.cqs, qp.send_cq, -1);
    add_users(&mut emu.cqs, qp.recv_cq, -1);
    if let Some(s) = qp.srq {
        add_users(&mut emu.srqs, s, -1);
    }
    call.out.put(
        &DestroyQpResp {
            events_reported: qp.events_reported,
        },
        true,
    );
    Ok(())
}
