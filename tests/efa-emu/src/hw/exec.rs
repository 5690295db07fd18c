//! What one send descriptor does: its checks, the destination it names,
//! the bytes it gathers, and the SEND, RDMA READ or RDMA WRITE it carries
//! out (see the module above for the rules).

use std::fmt;

use rverbs_abi::efa::device_caps as caps;
use rverbs_abi::efa::io::{self, cdesc_flags, comp_status as st, tx_ctrl1, tx_ctrl2, RxCdescEx};
use rverbs_abi::mr::AccessFlags;
use rverbs_abi::qp::qp_state;
use zerocopy::FromBytes;

use super::Hw;
use crate::device;
use crate::dispatch::QPT_DRIVER;
use crate::emu::{Emu, Qp};
use crate::{log, mem};

/// How a send descriptor ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Done {
    /// Executed (or refused) with this completion status.
    Completed(u8),
    /// Not executed yet: SRD with RNR retry 7 and no receive at the
    /// destination; tried again on the next pass.
    Wait,
}

/// Logs why descriptor of QP `qpn` fails, and its status.
fn fail(qpn: u32, why: fmt::Arguments<'_>, status: u8) -> Done {
    log::line(format_args!(
        "qp {qpn}: send descriptor: {why} -> status {status}"
    ));
    Done::Completed(status)
}

/// The user address of `[addr, addr + len)` in the device's address space
/// of MR key `key` of context `ctx` and PD `pd`, if the MR has `access`
/// and holds the whole range, and the memory is mapped.
fn mr_range(e: &Emu, ctx: u64, pd: u32, key: u32, addr: u64, len: u64, access: u32) -> Option<u64> {
    let mr = e
        .mrs
        .values()
        .find(|m| m.ctx == ctx && m.pd == pd && m.lkey & io::LKEY_MASK == key & io::LKEY_MASK)?;
    if mr.access & access != access {
        return None;
    }
    let off = addr.checked_sub(mr.iova)?;
    if off.checked_add(len)? > mr.length {
        return None;
    }
    let user = mr.start + off;
    mem::mapped(user, usize::try_from(len).ok()?).then_some(user)
}

/// Copies `len` bytes of user memory out.
fn read_user(addr: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: `mr_range` found the range inside a registered region and
    // mapped; the application owns it and may race only with itself.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), len) };
    v
}

/// Copies `bytes` into user memory.
fn write_user(addr: u64, bytes: &[u8]) {
    // SAFETY: as in `read_user`, for a region registered with write access.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
}

/// The bytes a SEND carries: inline, or gathered from its buffers.
fn gather(e: &Emu, qp: &Qp, wqe: &io::TxWqe) -> Result<Vec<u8>, Done> {
    let m = &wqe.meta;
    let n = usize::from(m.length.get());
    if m.ctrl1 & tx_ctrl1::INLINE_MSG != 0 {
        if n > io::TX_DESC_INLINE_MAX_SIZE {
            return Err(fail(
                qp.qpn,
                format_args!("inline length {n} > 32"),
                st::LOCAL_ERROR_BAD_LENGTH,
            ));
        }
        return Ok(wqe.data[..n].to_vec());
    }
    if n > io::TX_DESC_NUM_BUFS {
        return Err(fail(
            qp.qpn,
            format_args!("length {n} buffers > {}", io::TX_DESC_NUM_BUFS),
            st::LOCAL_ERROR_BAD_LENGTH,
        ));
    }
    let bufs = <[io::TxBufDesc; io::TX_DESC_NUM_BUFS]>::read_from_bytes(&wqe.data)
        .map_err(|_| Done::Completed(st::LOCAL_ERROR_QP_INTERNAL_ERROR))?;
    let mut out = Vec::new();
    for (i, b) in bufs.iter().take(n).enumerate() {
        let addr = u64::from(b.buf_addr_hi.get()) << 32 | u64::from(b.buf_addr_lo.get());
        let len = u64::from(b.length.get());
        let Some(user) = mr_range(e, qp.ctx, qp.pd, b.lkey.get(), addr, len, 0) else {
            return Err(fail(
                qp.qpn,
                format_args!(
                    "buffer {i}: lkey {:#x} does not cover {addr:#x}+{len}",
                    b.lkey.get()
                ),
                st::LOCAL_ERROR_INVALID_LKEY,
            ));
        };
        out.extend_from_slice(&read_user(user, len as usize));
    }
    if out.len() > device::MTU as usize {
        return Err(fail(
            qp.qpn,
            format_args!("message of {} bytes > the MTU {}", out.len(), device::MTU),
            st::LOCAL_ERROR_BAD_LENGTH,
        ));
    }
    Ok(out)
}

/// Executes send descriptor `wqe` of QP `h`, which the ring position says
/// has phase `phase`.
pub(super) fn send(e: &Emu, hw: &mut Hw, h: u32, wqe: &io::TxWqe, phase: u8) -> Done {
    let Some(qp) = e.qps.get(&h) else {
        return Done::Completed(st::LOCAL_ERROR_QP_INTERNAL_ERROR);
    };
    let m = &wqe.meta;
    let qpn = qp.qpn;
    if m.ctrl1 & tx_ctrl1::META_DESC == 0 {
        return fail(
            qpn,
            format_args!("ctrl1.meta_desc clear"),
            st::LOCAL_ERROR_QP_INTERNAL_ERROR,
        );
    }
    if m.ctrl2 & (tx_ctrl2::FIRST | tx_ctrl2::LAST) != tx_ctrl2::FIRST | tx_ctrl2::LAST {
        return fail(
            qpn,
            format_args!("ctrl2.first/last not both set"),
            st::LOCAL_ERROR_QP_INTERNAL_ERROR,
        );
    }
    if m.ctrl2 & tx_ctrl2::PHASE != phase {
        return fail(
            qpn,
            format_args!(
                "ctrl2.phase {} where the ring is at phase {phase}",
                m.ctrl2 & tx_ctrl2::PHASE
            ),
            st::LOCAL_ERROR_QP_INTERNAL_ERROR,
        );
    }
    if m.ctrl1 & tx_ctrl1::META_EXTENSION != 0 {
        return fail(
            qpn,
            format_args!("ctrl1.meta_extension set"),
            st::LOCAL_ERROR_UNSUPPORTED_OP,
        );
    }
    let op = m.ctrl1 & tx_ctrl1::OP_TYPE;
    let srd = qp.qp_type == QPT_DRIVER;
    let Some(ah) = e
        .ahs
        .values()
        .find(|a| a.ctx == qp.ctx && a.ah == m.ah.get())
    else {
        return fail(
            qpn,
            format_args!("ah {} unknown", m.ah.get()),
            st::LOCAL_ERROR_INVALID_AH,
        );
    };
    if ah.gid != device::gid() {
        // One device: no other node to reach.
        return fail(
            qpn,
            format_args!("ah {}: no such peer", m.ah.get()),
            st::LOCAL_ERROR_UNREACH_REMOTE,
        );
    }
    let dest = e
        .qps
        .iter()
        .find(|(_, d)| {
            d.qpn == u32::from(m.dest_qp_num.get())
                && d.qp_type == qp.qp_type
                && matches!(d.state, qp_state::RTR | qp_state::RTS)
                && d.qkey == m.qkey.get()
        })
        .map(|(dh, _)| *dh);
    match op {
        io::send_op::SEND => message(e, hw, h, wqe, dest),
        io::send_op::RDMA_READ | io::send_op::RDMA_WRITE => {
            let cap = if op == io::send_op::RDMA_READ {
                caps::RDMA_READ
            } else {
                caps::RDMA_WRITE
            };
            if !srd || device::DEVICE_CAPS & cap == 0 {
                return fail(
                    qpn,
                    format_args!("RDMA on a UD QP"),
                    st::LOCAL_ERROR_UNSUPPORTED_OP,
                );
            }
            rdma(e, hw, h, wqe, op, dest)
        }
        _ => fail(
            qpn,
            format_args!("ctrl1.op_type {op} unknown"),
            st::LOCAL_ERROR_UNSUPPORTED_OP,
        ),
    }
}

/// What an SRD sender meets at a destination without a receive: wait
/// (RNR retry 7) or fail; UD drops the datagram.
fn no_receive(qp: &Qp) -> Done {
    if qp.qp_type != QPT_DRIVER {
        Done::Completed(st::OK)
    } else if qp.rnr_retry == 7 {
        Done::Wait
    } else {
        fail(
            qp.qpn,
            format_args!("no receive posted (rnr_retry {})", qp.rnr_retry),
            st::REMOTE_ERROR_RNR,
        )
    }
}

/// A receive completion from QP `qp` (the source) carrying `length`
/// bytes and the immediate data of `m` if it has one.
fn recv_cqe(
    e: &Emu,
    dest_ctx: u64,
    qp: &Qp,
    m: &io::TxMetaDesc,
    req_id: u16,
    length: usize,
) -> (RxCdescEx, u8) {
    let mut c = RxCdescEx::default();
    c.base.common.req_id = req_id.into();
    c.base.common.length = (length as u16).into();
    c.base.src_qp_num = (qp.qpn as u16).into();
    let gid = device::gid();
    let ah = e
        .ahs
        .values()
        .find(|a| a.ctx == dest_ctx && a.gid == gid)
        .map_or(io::UNKNOWN_AH, |a| a.ah);
    c.base.ah = ah.into();
    c.src_addr = gid;
    let mut flags = 0;
    if m.ctrl1 & tx_ctrl1::HAS_IMM != 0 {
        c.base.imm = m.immediate_data;
        flags |= cdesc_flags::HAS_IMM;
    }
    (c, flags)
}

/// A SEND (with or without immediate data) to QP handle `dest`.
fn message(e: &Emu, hw: &mut Hw, h: u32, wqe: &io::TxWqe, dest: Option<u32>) -> Done {
    let Some(qp) = e.qps.get(&h) else {
        return Done::Completed(st::LOCAL_ERROR_QP_INTERNAL_ERROR);
    };
    let data = match gather(e, qp, wqe) {
        Ok(d) => d,
        Err(done) => return done,
    };
    let srd = qp.qp_type == QPT_DRIVER;
    let Some((dh, d)) = dest.and_then(|dh| Some((dh, e.qps.get(&dh)?))) else {
        if srd {
            return fail(
                qp.qpn,
                format_args!(
                    "dest_qp_num {} with qkey {:#x}: no such QP ready",
                    wqe.meta.dest_qp_num.get(),
                    wqe.meta.qkey.get()
                ),
                st::REMOTE_ERROR_BAD_DEST_QPN,
            );
        }
        return Done::Completed(st::OK);
    };
    let Some(rx) = hw.take_recv(e, dh) else {
        return no_receive(qp);
    };
    let (mut c, flags) = recv_cqe(e, d.ctx, qp, &wqe.meta, rx.req_id.get(), data.len());
    let ctrl = rx.lkey_ctrl.get();
    let addr = u64::from(rx.buf_addr_hi.get()) << 32 | u64::from(rx.buf_addr_lo.get());
    let len = u64::from(rx.length.get());
    let status = if ctrl & (io::rx_ctrl::FIRST | io::rx_ctrl::LAST)
        != io::rx_ctrl::FIRST | io::rx_ctrl::LAST
    {
        log::line(format_args!(
            "qp {}: receive descriptor without first/last",
            d.qpn
        ));
        (st::LOCAL_ERROR_QP_INTERNAL_ERROR, st::REMOTE_ERROR_ABORT)
    } else if data.len() as u64 > len {
        log::line(format_args!(
            "qp {}: receive of {} bytes into a buffer of {len}",
            d.qpn,
            data.len()
        ));
        (st::LOCAL_ERROR_BAD_LENGTH, st::REMOTE_ERROR_BAD_LENGTH)
    } else {
        let write = AccessFlags::LOCAL_WRITE.bits();
        match mr_range(
            e,
            d.ctx,
            d.pd,
            ctrl & io::LKEY_MASK,
            addr,
            data.len() as u64,
            write,
        ) {
            Some(user) => {
                write_user(user, &data);
                (st::OK, st::OK)
            }
            None => {
                log::line(format_args!(
                    "qp {}: receive lkey {:#x} does not cover {addr:#x}+{} for writing",
                    d.qpn,
                    ctrl & io::LKEY_MASK,
                    data.len()
                ));
                (st::LOCAL_ERROR_INVALID_LKEY, st::REMOTE_ERROR_BAD_ADDRESS)
            }
        }
    };
    c.base.common.status = status.0;
    hw.push_recv_cqe(
        e,
        dh,
        c,
        flags | (io::send_op::SEND << cdesc_flags::OP_TYPE_SHIFT),
    );
    Done::Completed(if srd { status.1 } else { st::OK })
}

/// An RDMA READ or WRITE (SRD) on the memory of QP handle `dest`.
fn rdma(e: &Emu, hw: &mut Hw, h: u32, wqe: &io::TxWqe, op: u8, dest: Option<u32>) -> Done {
    let Some(qp) = e.qps.get(&h) else {
        return Done::Completed(st::LOCAL_ERROR_QP_INTERNAL_ERROR);
    };
    let qpn = qp.qpn;
    let Ok(req) = io::RdmaReq::read_from_bytes(&wqe.data) else {
        return Done::Completed(st::LOCAL_ERROR_QP_INTERNAL_ERROR);
    };
    if usize::from(wqe.meta.length.get()) != io::TX_DESC_NUM_RDMA_BUFS {
        return fail(
            qpn,
            format_args!(
                "length {} local buffers, RDMA takes 1",
                wqe.meta.length.get()
            ),
            st::LOCAL_ERROR_BAD_LENGTH,
        );
    }
    let local = req.local_mem[0];
    let remote = req.remote_mem;
    let len = u64::from(remote.length.get());
    if u64::from(local.length.get()) != len {
        return fail(
            qpn,
            format_args!(
                "remote_mem.length {len} != local length {}",
                local.length.get()
            ),
            st::LOCAL_ERROR_BAD_LENGTH,
        );
    }
    if len > u64::from(device::MAX_RDMA_SIZE) {
        return fail(
            qpn,
            format_args!("RDMA of {len} bytes > max_rdma_size"),
            st::LOCAL_ERROR_BAD_LENGTH,
        );
    }
    let Some((dh, d)) = dest.and_then(|dh| Some((dh, e.qps.get(&dh)?))) else {
        return fail(
            qpn,
            format_args!(
                "dest_qp_num {}: no such QP ready",
                wqe.meta.dest_qp_num.get()
            ),
            st::REMOTE_ERROR_BAD_DEST_QPN,
        );
    };
    let read = op == io::send_op::RDMA_READ;
    let (local_access, remote_access) = if read {
        (
            AccessFlags::LOCAL_WRITE.bits(),
            AccessFlags::REMOTE_READ.bits(),
        )
    } else {
        (0, AccessFlags::REMOTE_WRITE.bits())
    };
    let laddr = u64::from(local.buf_addr_hi.get()) << 32 | u64::from(local.buf_addr_lo.get());
    let Some(luser) = mr_range(e, qp.ctx, qp.pd, local.lkey.get(), laddr, len, local_access) else {
        return fail(
            qpn,
            format_args!(
                "local lkey {:#x} does not cover {laddr:#x}+{len}",
                local.lkey.get()
            ),
            st::LOCAL_ERROR_INVALID_LKEY,
        );
    };
    let raddr = u64::from(remote.buf_addr_hi.get()) << 32 | u64::from(remote.buf_addr_lo.get());
    let Some(ruser) = mr_range(e, d.ctx, d.pd, remote.rkey.get(), raddr, len, remote_access) else {
        return fail(
            qpn,
            format_args!(
                "rkey {:#x} does not cover {raddr:#x}+{len}",
                remote.rkey.get()
            ),
            st::REMOTE_ERROR_BAD_ADDRESS,
        );
    };
    let has_imm = wqe.meta.ctrl1 & tx_ctrl1::HAS_IMM != 0;
    if read {
        write_user(luser, &read_user(ruser, len as usize));
        return Done::Completed(st::OK);
    }
    // A write with immediate data consumes a receive at the target.
    let rx = if has_imm {
        match hw.take_recv(e, dh) {
            Some(rx) => Some(rx),
            None => return no_receive(qp),
        }
    } else {
        None
    };
    write_user(ruser, &read_user(luser, len as usize));
    if let Some(rx) = rx {
        let (c, flags) = recv_cqe(e, d.ctx, qp, &wqe.meta, rx.req_id.get(), len as usize);
        hw.push_recv_cqe(
            e,
            dh,
            c,
            flags | (io::send_op::RDMA_WRITE << cdesc_flags::OP_TYPE_SHIFT),
        );
    }
    Done::Completed(st::OK)
}
