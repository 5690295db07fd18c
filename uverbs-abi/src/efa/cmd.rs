//! EFA's commands with their driver data, safe to call: no EFA driver
//! struct names user memory (the kernel allocates every ring and hands
//! it out by mmap key), and the core commands they extend carry only the
//! response pointer, which the framing supplies, and cookies. So the one
//! contract of [`write_cmd`] (user addresses the
//! kernel keeps) has nothing to uphold here.

use std::os::fd::BorrowedFd;

use zerocopy::FromZeros;
use zerocopy::IntoBytes;

use crate::ah::{CreateAh, CreateAhResp};
use crate::cmd::{nr, write_cmd, write_cmd_prefilled, write_ex_cmd, NO_FD};
use crate::cq::{CreateCq, CreateCqResp};
use crate::device::{ExQueryDevice, ExQueryDeviceResp, GetContext, GetContextResp};
use crate::efa;
use crate::pd::{AllocPd, AllocPdResp};
use crate::qp::{CreateQp, CreateQpResp};
use crate::Errno;

/// GET_CONTEXT with `req`; returns the core answer (its async fd field
/// [`NO_FD`] if the kernel did not write it) and EFA's.
pub fn get_context(
    fd: BorrowedFd<'_>,
    req: &efa::AllocUcontextCmd,
) -> Result<(GetContextResp, efa::AllocUcontextResp), Errno> {
    let mut resp = GetContextResp {
        async_fd: NO_FD,
        num_comp_vectors: 0,
    };
    let mut drv = efa::AllocUcontextResp::new_zeroed();
    // SAFETY: GET_CONTEXT carries no user address but its response
    // pointer, which write_cmd_prefilled supplies; EFA's request is a
    // mask and reserved bytes.
    unsafe {
        write_cmd_prefilled(
            fd,
            nr::GET_CONTEXT,
            &GetContext::new_zeroed(),
            &mut resp,
            req.as_bytes(),
            drv.as_mut_bytes(),
        )?
    };
    Ok((resp, drv))
}

/// ALLOC_PD, with EFA's answer (the PD number).
pub fn alloc_pd(fd: BorrowedFd<'_>) -> Result<(AllocPdResp, efa::AllocPdResp), Errno> {
    let mut drv = efa::AllocPdResp::new_zeroed();
    // SAFETY: ALLOC_PD carries only its response pointer (supplied).
    let core = unsafe {
        write_cmd::<_, AllocPdResp>(
            fd,
            nr::ALLOC_PD,
            &AllocPd::new_zeroed(),
            &[],
            drv.as_mut_bytes(),
        )?
    };
    Ok((core, drv))
}

/// The extended QUERY_DEVICE with EFA's answer (its queue limits,
/// `max_rdma_size` and capability bits).
pub fn ex_query_device(
    fd: BorrowedFd<'_>,
) -> Result<(ExQueryDeviceResp, efa::ExQueryDeviceResp), Errno> {
    let mut drv = efa::ExQueryDeviceResp::new_zeroed();
    // SAFETY: a mask and a reserved word; the response buffer is supplied.
    let core = unsafe {
        write_ex_cmd::<_, ExQueryDeviceResp>(
            fd,
            nr::EX_QUERY_DEVICE,
            &ExQueryDevice::default(),
            &[],
            drv.as_mut_bytes(),
        )?
    };
    Ok((core, drv))
}

/// CREATE_CQ for `core` with EFA's request `drv`; the answer says where
/// the kernel's ring is (its mmap key and size).
pub fn create_cq(
    fd: BorrowedFd<'_>,
    core: &CreateCq,
    drv: &efa::CreateCq,
) -> Result<(CreateCqResp, efa::CreateCqResp), Errno> {
    let mut out = efa::CreateCqResp::new_zeroed();
    // SAFETY: the core command's fields are a cookie, counts and a channel
    // fd, the response pointer is supplied; EFA's request holds sizes and
    // flags only.
    let resp = unsafe {
        write_cmd::<_, CreateCqResp>(fd, nr::CREATE_CQ, core, drv.as_bytes(), out.as_mut_bytes())?
    };
    Ok((resp, out))
}

/// CREATE_QP for `core` with EFA's request `drv` (ring sizes, the driver
/// QP type); the answer says where the kernel's rings and doorbells are.
pub fn create_qp(
    fd: BorrowedFd<'_>,
    core: &CreateQp,
    drv: &efa::CreateQp,
) -> Result<(CreateQpResp, efa::CreateQpResp), Errno> {
    let mut out = efa::CreateQpResp::new_zeroed();
    // SAFETY: handles, counts, flags and a cookie; the response pointer is
    // supplied; EFA's request holds sizes and a type.
    let resp = unsafe {
        write_cmd::<_, CreateQpResp>(fd, nr::CREATE_QP, core, drv.as_bytes(), out.as_mut_bytes())?
    };
    Ok((resp, out))
}

/// CREATE_AH for `core`, with EFA's answer (the device's address handle
/// number, which send descriptors name).
pub fn create_ah(
    fd: BorrowedFd<'_>,
    core: &CreateAh,
) -> Result<(CreateAhResp, efa::CreateAhResp), Errno> {
    let mut out = efa::CreateAhResp::new_zeroed();
    // SAFETY: a PD handle, a cookie and the address attributes; the
    // response pointer is supplied.
    let resp =
        unsafe { write_cmd::<_, CreateAhResp>(fd, nr::CREATE_AH, core, &[], out.as_mut_bytes())? };
    Ok((resp, out))
}
