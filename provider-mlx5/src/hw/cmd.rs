//! The commands that hand this provider's memory to the kernel: CREATE_QP,
//! CREATE_CQ, RESIZE_CQ and CREATE_SRQ name a queue buffer and a doorbell
//! record by user address, which the kernel pins and the device reads and
//! writes until the object is destroyed. Each wrapper takes the memory
//! itself and checks that the addresses and sizes the driver data names
//! are inside it, so no other memory is ever handed over; the callers keep
//! the memory (through the queues' and the `*Memory` handles' Arcs) until
//! the object is destroyed. Plus the destroys that undo a creation, and
//! GET_CONTEXT with mlx5's driver data.

use std::os::fd::BorrowedFd;

use rverbs_abi::cmd::{nr, write_cmd, write_cmd_prefilled, NoResp};
use rverbs_abi::cq::{CreateCq, CreateCqResp, DestroyCq, DestroyCqResp, ResizeCq, ResizeCqResp};
use rverbs_abi::device::{GetContext, GetContextResp};
use rverbs_abi::mlx5;
use rverbs_abi::qp::{CreateQp, CreateQpResp, DestroyQp, DestroyQpResp};
use rverbs_abi::srq::{CreateSrq, CreateSrqResp, ModifySrq};
use rverbs_abi::Errno;
use zerocopy::{FromZeros, IntoBytes};

use super::cqe::{CqRing, CQE_SIZE};
use super::dbrec::DbRec;
use super::map::Mapping;
use super::wqe::SEND_WQE_BB;

/// GET_CONTEXT on `fd` with the driver data `req`; `resp` starts as given
/// (its async fd field prefilled with `NO_FD`), the driver's answer lands
/// in `drv`.
pub(crate) fn get_context(
    fd: BorrowedFd<'_>,
    req: &mlx5::AllocUcontextReqV2,
    resp: &mut GetContextResp,
    drv: &mut mlx5::AllocUcontextResp,
) -> Result<(), Errno> {
    // SAFETY: GET_CONTEXT carries no user address but its response
    // pointer, which write_cmd_prefilled supplies; mlx5's driver data
    // (alloc_ucontext_req_v2) holds counts and flags only.
    unsafe {
        write_cmd_prefilled(
            fd,
            nr::GET_CONTEXT,
            &GetContext::new_zeroed(),
            resp,
            req.as_bytes(),
            drv.as_mut_bytes(),
        )
    }
}

/// Whether `bytes` bytes fit in `buf`.
fn fits(buf: &Mapping, bytes: Option<u64>) -> bool {
    bytes.is_some_and(|b| b <= buf.len() as u64)
}

/// CREATE_QP with the driver data `drv`, whose `buf_addr` must be `buf`
/// (room for both rings it describes), `db_addr` `db`, and no separate
/// send buffer. `EINVAL` if not.
pub(crate) fn create_qp(
    fd: BorrowedFd<'_>,
    core: &CreateQp,
    drv: &mlx5::CreateQp,
    drv_resp: &mut mlx5::CreateQpResp,
    buf: &Mapping,
    db: &DbRec,
) -> Result<CreateQpResp, Errno> {
    let rq = u64::from(drv.rq_wqe_count).checked_shl(drv.rq_wqe_shift);
    let sq = u64::from(drv.sq_wqe_count) * u64::from(SEND_WQE_BB);
    if drv.buf_addr != buf.addr()
        || drv.db_addr != db.addr()
        || drv.sq_buf_addr != 0
        || !fits(buf, rq.and_then(|r| r.checked_add(sq)))
    {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the user addresses are the driver data's `buf_addr` and
    // `db_addr` (`sq_buf_addr` is 0): `buf`, with room for the rings
    // described (checked), and `db`, a 64-byte doorbell record; mappings
    // of our own that no Rust reference covers (accessed through raw
    // pointers and atomics only), which the queues built on them keep
    // until DESTROY_QP. The core command carries only its response
    // pointer, which write_cmd supplies.
    unsafe {
        write_cmd(
            fd,
            nr::CREATE_QP,
            core,
            drv.as_bytes(),
            drv_resp.as_mut_bytes(),
        )
    }
}

/// DESTROY_QP of `handle` (after a failure that follows its creation:
/// best effort, the error being reported is the first one).
pub(crate) fn destroy_qp(fd: BorrowedFd<'_>, handle: u32) {
    let cmd = DestroyQp {
        response: 0,
        qp_handle: handle,
        reserved: 0,
    };
    // SAFETY: DESTROY_QP carries no user address but its response pointer,
    // which write_cmd supplies.
    let _ = unsafe { write_cmd::<_, DestroyQpResp>(fd, nr::DESTROY_QP, &cmd, &[], &mut []) };
}

/// CREATE_CQ with the driver data `drv`, whose `buf_addr` must be `ring`
/// (as many entries as `core.cqe + 1`, of `drv.cqe_size` bytes) and
/// `db_addr` `db`. `EINVAL` if not.
pub(crate) fn create_cq(
    fd: BorrowedFd<'_>,
    core: &CreateCq,
    drv: &mlx5::CreateCq,
    drv_resp: &mut mlx5::CreateCqResp,
    ring: &CqRing,
    db: &DbRec,
) -> Result<CreateCqResp, Errno> {
    if drv.buf_addr != ring.addr()
        || drv.db_addr != db.addr()
        || drv.cqe_size as usize != CQE_SIZE
        || u64::from(core.cqe) + 1 > u64::from(ring.ncqe())
    {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the user addresses are the driver data's `buf_addr` and
    // `db_addr`: `ring`, with room for the entries asked for (checked),
    // and `db`, a 64-byte doorbell record; mappings of our own that no
    // Rust reference covers (read and written only through raw pointers
    // and atomics), which the CQ and its CqMemory keep until DESTROY_CQ.
    // The core command carries only its response pointer, which write_cmd
    // supplies.
    unsafe {
        write_cmd(
            fd,
            nr::CREATE_CQ,
            core,
            drv.as_bytes(),
            drv_resp.as_mut_bytes(),
        )
    }
}

/// DESTROY_CQ of `handle` (undoing a creation; best effort).
pub(crate) fn destroy_cq(fd: BorrowedFd<'_>, handle: u32) {
    let d = DestroyCq {
        response: 0,
        cq_handle: handle,
        reserved: 0,
    };
    // SAFETY: DESTROY_CQ carries no user address but its response pointer,
    // which write_cmd supplies.
    let _ = unsafe { write_cmd::<_, DestroyCqResp>(fd, nr::DESTROY_CQ, &d, &[], &mut []) };
}

/// RESIZE_CQ with the driver data `drv`, whose `buf_addr` must be `ring`
/// (as many entries as `cmd.cqe + 1`). `EINVAL` if not.
pub(crate) fn resize_cq(
    fd: BorrowedFd<'_>,
    cmd: &ResizeCq,
    drv: &mlx5::ResizeCq,
    ring: &CqRing,
) -> Result<ResizeCqResp, Errno> {
    if drv.buf_addr != ring.addr()
        || drv.cqe_size as usize != CQE_SIZE
        || u64::from(cmd.cqe) + 1 > u64::from(ring.ncqe())
    {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the one user address is the driver data's `buf_addr`:
    // `ring`, with room for the entries asked for (checked), a mapping no
    // Rust reference covers, which the CQ keeps until the next resize but
    // one or DESTROY_CQ. The core command carries only its response
    // pointer, which write_cmd supplies.
    unsafe { write_cmd::<_, ResizeCqResp>(fd, nr::RESIZE_CQ, cmd, drv.as_bytes(), &mut []) }
}

/// CREATE_SRQ with the driver data `drv`, whose `buf_addr` must be `buf`
/// (room for the WQEs the kernel derives from `core`: a power of two
/// above `max_wr` of them, each a power of two of at least 32 bytes
/// holding the next segment and `max_sge` data segments) and `db_addr`
/// `db`. `EINVAL` if not.
pub(crate) fn create_srq(
    fd: BorrowedFd<'_>,
    core: &CreateSrq,
    drv: &mlx5::CreateSrq,
    drv_resp: &mut mlx5::CreateSrqResp,
    buf: &Mapping,
    db: &DbRec,
) -> Result<CreateSrqResp, Errno> {
    let wqes = (u64::from(core.max_wr) + 1).next_power_of_two();
    let wqe = (16 + 16 * u64::from(core.max_sge))
        .max(32)
        .next_power_of_two();
    if drv.buf_addr != buf.addr() || drv.db_addr != db.addr() || !fits(buf, wqes.checked_mul(wqe)) {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the user addresses are the driver data's `buf_addr` and
    // `db_addr`: `buf`, with room for the WQEs described (checked), and
    // `db`, a 64-byte doorbell record; mappings of our own that no Rust
    // reference covers (accessed through raw pointers and atomics only),
    // which the Srq and its SrqMemory keep until DESTROY_SRQ. The core
    // command carries only its response pointer, which write_cmd supplies.
    unsafe {
        write_cmd(
            fd,
            nr::CREATE_SRQ,
            core,
            drv.as_bytes(),
            drv_resp.as_mut_bytes(),
        )
    }
}

/// `IB_SRQ_LIMIT`: MODIFY_SRQ (re)arms the limit event.
const SRQ_LIMIT: u32 = 2;

/// MODIFY_SRQ arming SRQ `srq_handle`'s limit event at `limit`, without
/// driver data (mlx5 takes none).
pub(crate) fn modify_srq_limit(
    fd: BorrowedFd<'_>,
    srq_handle: u32,
    limit: u32,
) -> Result<(), Errno> {
    let cmd = ModifySrq {
        srq_handle,
        attr_mask: SRQ_LIMIT,
        max_wr: 0,
        srq_limit: limit,
    };
    // SAFETY: MODIFY_SRQ without driver data carries no user address.
    unsafe { write_cmd::<_, NoResp>(fd, nr::MODIFY_SRQ, &cmd, &[], &mut []) }.map(|_| ())
}
