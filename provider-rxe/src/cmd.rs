//! The uverbs commands rxe issues, as safe functions: the one place in this
//! crate that calls [`rverbs_abi::cmd`]'s `unsafe fn write_cmd*`.
//!
//! Those functions are unsafe because a command may carry user addresses
//! the kernel acts on after the call. Of the commands here only MODIFY_SRQ
//! carries one (the address rxe writes the resized ring's [`MmInfo`] to,
//! during the command), and [`modify_srq_resize`] supplies it itself; every
//! other command carries no user address but the response pointer, which
//! `write_cmd*` supplies. rxe takes no driver data in on any create command:
//! its rings are the kernel's, mapped afterwards by [`crate::queue`].

use std::os::fd::BorrowedFd;

use rverbs_abi::cmd::{nr, write_cmd, write_cmd_fixed, write_ex_cmd, NoResp};
use rverbs_abi::cq::{
    CreateCq, CreateCqResp, DestroyCq, DestroyCqResp, ExCreateCq, ExCreateCqResp, ReqNotifyCq,
    ResizeCq, ResizeCqResp,
};
use rverbs_abi::qp::{
    CreateQp, CreateQpResp, DestroyQp, DestroyQpResp, ExCreateQp, ExCreateQpResp,
};
use rverbs_abi::rxe::{self, MmInfo, ModifySrqCmd};
use rverbs_abi::srq::{CreateSrq, CreateSrqResp, DestroySrq, DestroySrqResp, ModifySrq};
use rverbs_abi::wr::{PostSend, PostSendResp, UVERBS_SEND_WR_SIZE};
use rverbs_abi::Errno;
use zerocopy::IntoBytes;

/// CREATE_QP; rxe's driver response (the rings' [`MmInfo`]s) lands in `drv`.
pub(crate) fn create_qp(
    fd: BorrowedFd<'_>,
    cmd: &CreateQp,
    drv: &mut rxe::CreateQpResp,
) -> Result<CreateQpResp, Errno> {
    // SAFETY: CREATE_QP carries no user address but its response pointer,
    // which write_cmd supplies; rxe takes no driver data in.
    unsafe { write_cmd(fd, nr::CREATE_QP, cmd, &[], drv.as_mut_bytes()) }
}

/// The extended CREATE_QP (`IB_USER_VERBS_EX_CMD_CREATE_QP`).
pub(crate) fn create_qp_ex(
    fd: BorrowedFd<'_>,
    cmd: &ExCreateQp,
    drv: &mut rxe::CreateQpResp,
) -> Result<ExCreateQpResp, Errno> {
    // SAFETY: the extended CREATE_QP carries no user address (write_ex_cmd
    // supplies the response buffer); rxe takes no driver data in.
    unsafe { write_ex_cmd(fd, nr::EX_CREATE_QP, cmd, &[], drv.as_mut_bytes()) }
}

/// rxe's doorbell: POST_SEND with no work requests tells the kernel to run
/// the requester for the QP `qp_handle`.
///
/// The command is framed at its exact size on the stack
/// ([`write_cmd_fixed`]): it is rung on every post, compiled into it.
#[inline(always)]
pub(crate) fn doorbell(fd: BorrowedFd<'_>, qp_handle: u32) -> Result<(), Errno> {
    let cmd = PostSend {
        response: 0,
        qp_handle,
        wr_count: 0,
        sge_count: 0,
        wqe_size: UVERBS_SEND_WR_SIZE,
    };
    // SAFETY: with `wr_count` 0 POST_SEND carries no work request, hence
    // no user address but its response pointer, which write_cmd_fixed
    // supplies.
    unsafe { write_cmd_fixed::<_, PostSendResp>(fd, nr::POST_SEND, &cmd) }.map(|_| ())
}

/// CREATE_CQ; rxe's driver response (the ring's [`MmInfo`]) lands in `drv`.
pub(crate) fn create_cq(
    fd: BorrowedFd<'_>,
    cmd: &CreateCq,
    drv: &mut rxe::CreateCqResp,
) -> Result<CreateCqResp, Errno> {
    // SAFETY: CREATE_CQ carries no user address but its response pointer,
    // which write_cmd supplies; rxe takes no driver data in.
    unsafe { write_cmd(fd, nr::CREATE_CQ, cmd, &[], drv.as_mut_bytes()) }
}

/// The extended CREATE_CQ (`IB_USER_VERBS_EX_CMD_CREATE_CQ`).
pub(crate) fn create_cq_ex(
    fd: BorrowedFd<'_>,
    cmd: &ExCreateCq,
    drv: &mut rxe::CreateCqResp,
) -> Result<ExCreateCqResp, Errno> {
    // SAFETY: the extended CREATE_CQ carries no user address (write_ex_cmd
    // supplies the response buffer); rxe takes no driver data in.
    unsafe { write_ex_cmd(fd, nr::EX_CREATE_CQ, cmd, &[], drv.as_mut_bytes()) }
}

/// RESIZE_CQ; the new ring's [`MmInfo`] lands in `drv`.
pub(crate) fn resize_cq(
    fd: BorrowedFd<'_>,
    cmd: &ResizeCq,
    drv: &mut rxe::ResizeCqResp,
) -> Result<ResizeCqResp, Errno> {
    // SAFETY: RESIZE_CQ carries no user address but its response pointer,
    // which write_cmd supplies; rxe takes no driver data in.
    unsafe { write_cmd(fd, nr::RESIZE_CQ, cmd, &[], drv.as_mut_bytes()) }
}

/// CREATE_SRQ; rxe's driver response (SRQ number, ring) lands in `drv`.
pub(crate) fn create_srq(
    fd: BorrowedFd<'_>,
    cmd: &CreateSrq,
    drv: &mut rxe::CreateSrqResp,
) -> Result<CreateSrqResp, Errno> {
    // SAFETY: CREATE_SRQ carries no user address but its response pointer,
    // which write_cmd supplies; rxe takes no driver data in.
    unsafe { write_cmd(fd, nr::CREATE_SRQ, cmd, &[], drv.as_mut_bytes()) }
}

/// MODIFY_SRQ without a resize (`cmd.attr_mask` lacks `IB_SRQ_MAX_WR`).
/// rxe requires its driver data on every call: here the address 0.
pub(crate) fn modify_srq(fd: BorrowedFd<'_>, cmd: &ModifySrq) -> Result<(), Errno> {
    let drv = ModifySrqCmd { mmap_info_addr: 0 };
    // SAFETY: the driver data's one user address is 0: rxe writes nothing.
    unsafe { write_cmd::<_, NoResp>(fd, nr::MODIFY_SRQ, cmd, drv.as_bytes(), &mut [])? };
    Ok(())
}

/// MODIFY_SRQ with a resize (`cmd.attr_mask` has `IB_SRQ_MAX_WR`): rxe
/// writes the new ring's [`MmInfo`] to the address in the driver data,
/// which is returned.
pub(crate) fn modify_srq_resize(fd: BorrowedFd<'_>, cmd: &ModifySrq) -> Result<MmInfo, Errno> {
    let mut mi = MmInfo::default();
    let drv = ModifySrqCmd {
        mmap_info_addr: &raw mut mi as u64,
    };
    // SAFETY: the one user address is the driver data's `mmap_info_addr`:
    // `mi`, a local live across the call and not borrowed, which rxe writes
    // (an `MmInfo`, exactly its size) during the command and never after.
    unsafe { write_cmd::<_, NoResp>(fd, nr::MODIFY_SRQ, cmd, drv.as_bytes(), &mut [])? };
    // SAFETY: `mi` is a live, aligned local; the kernel wrote it during the
    // command through the address handed over above, so read it back
    // without letting the compiler assume it unchanged.
    Ok(unsafe { std::ptr::read_volatile(&raw const mi) })
}

/// DESTROY_SRQ.
pub(crate) fn destroy_srq(fd: BorrowedFd<'_>, cmd: &DestroySrq) -> Result<DestroySrqResp, Errno> {
    // SAFETY: DESTROY_SRQ carries no user address but its response
    // pointer, which write_cmd supplies.
    unsafe { write_cmd(fd, nr::DESTROY_SRQ, cmd, &[], &mut []) }
}

/// DESTROY_CQ (cleanup of a CQ whose ring could not be mapped).
pub(crate) fn destroy_cq(fd: BorrowedFd<'_>, cmd: &DestroyCq) -> Result<DestroyCqResp, Errno> {
    // SAFETY: DESTROY_CQ carries no user address but its response pointer,
    // which write_cmd supplies.
    unsafe { write_cmd(fd, nr::DESTROY_CQ, cmd, &[], &mut []) }
}

/// DESTROY_QP (cleanup of a QP whose rings could not be mapped).
pub(crate) fn destroy_qp(fd: BorrowedFd<'_>, cmd: &DestroyQp) -> Result<DestroyQpResp, Errno> {
    // SAFETY: DESTROY_QP carries no user address but its response pointer,
    // which write_cmd supplies.
    unsafe { write_cmd(fd, nr::DESTROY_QP, cmd, &[], &mut []) }
}

/// REQ_NOTIFY_CQ: rxe arms a CQ in the kernel.
pub(crate) fn req_notify_cq(fd: BorrowedFd<'_>, cmd: &ReqNotifyCq) -> Result<(), Errno> {
    // SAFETY: REQ_NOTIFY_CQ carries no user address.
    unsafe { write_cmd::<_, NoResp>(fd, nr::REQ_NOTIFY_CQ, cmd, &[], &mut []) }.map(|_| ())
}
