//! The uverbs commands that `rverbs_abi` can only offer as
//! `unsafe` (they may carry user addresses, or hand back a file
//! descriptor), each wrapped whole: its arguments are numbers, handles and
//! borrowed response buffers, never an address the kernel keeps.

use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};

use rverbs_abi::cmd::{exec_prefilled, nr, response_fd, write_cmd_fixed, NoResp, NO_FD};
use rverbs_abi::cq::{CreateCompChannel, CreateCompChannelResp};
use rverbs_abi::device::GidEntry as RawGidEntry;
use rverbs_abi::ioctl::{
    advise_mr_attr as am, device_method, mr_method, object, query_gid_entry_attr as ge,
    query_gid_table_attr as gt, query_port_attr as qp, reg_dmabuf_mr_attr as rd, IoctlCmd,
    QUERY_PORT_RESP_EX_LEN,
};
use rverbs_abi::mr::DeregMr;
use rverbs_abi::wr::Sge;
use rverbs_abi::Errno;
use zerocopy::{FromZeros, IntoBytes};

use crate::error::{Error, Result};

/// The fd number `raw` that `op`'s response holds in `field`, which was
/// prefilled with [`NO_FD`]: refused with a clear error when the kernel did
/// not overwrite it (or wrote a negative value).
fn kernel_fd(op: &'static str, field: &'static str, raw: u32) -> Result<RawFd> {
    response_fd(raw).ok_or(Error::NoFdInResponse {
        op,
        field,
        value: raw as i32,
    })
}

/// The fd number `raw` of the response field `field` of `op`, which the
/// command just sent on a checked uverbs node prefilled with [`NO_FD`],
/// owned.
///
/// Sound only on the fresh answer of such a command, which is what every
/// caller passes (here, and GET_CONTEXT's answer through the provider's
/// [`rverbs_provider::Provider::open`], on the node the library checked).
pub(crate) fn adopt(op: &'static str, field: &'static str, raw: u32) -> Result<OwnedFd> {
    let raw = kernel_fd(op, field, raw)?;
    // SAFETY: the kernel wrote this fd number over the -1 prefilled before
    // the command (kernel_fd refused a field it left alone): it opened it
    // for us in that call on a checked uverbs node, and nothing else owns
    // it.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// CREATE_COMP_CHANNEL on the context's checked uverbs node `fd`: the
/// channel's fd, owned.
pub(crate) fn create_comp_channel(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    // The fd field starts as -1: a response the kernel did not write
    // must not name fd 0.
    let mut resp = CreateCompChannelResp { fd: NO_FD };
    exec_prefilled(fd, &CreateCompChannel::new_zeroed(), &mut resp, &mut [])
        .map_err(Error::kernel("create_comp_channel"))?;
    adopt("create_comp_channel", "fd", resp.fd)
}

/// `UVERBS_METHOD_QUERY_GID_TABLE` on the context's uverbs node `fd` into
/// `raw`: how many entries the kernel says it wrote.
pub(crate) fn query_gid_table(
    fd: BorrowedFd<'_>,
    driver_id: u32,
    raw: &mut [RawGidEntry],
) -> std::result::Result<u64, Errno> {
    let mut n: u64 = 0;
    let bytes = raw.as_mut_bytes();
    let mut call = IoctlCmd::new(object::DEVICE, device_method::QUERY_GID_TABLE);
    call.driver_id(driver_id)
        .in_u64(gt::ENTRY_SIZE, size_of::<RawGidEntry>() as u64)
        .in_u32(gt::FLAGS, 0)
        .out_bytes(gt::RESP_ENTRIES, bytes)
        .out_value(gt::RESP_NUM_ENTRIES, &mut n);
    // SAFETY: the inline values are a size and flags, no address; the
    // outputs are borrowed buffers. The fd is a context's, a uverbs node
    // that passed Device::open_node's check.
    unsafe { call.execute(fd) }?;
    Ok(n)
}

/// `UVERBS_METHOD_QUERY_GID_ENTRY` on the context's uverbs node `fd`:
/// entry `index` of `port` into `raw`.
pub(crate) fn query_gid_entry(
    fd: BorrowedFd<'_>,
    driver_id: u32,
    port: u8,
    index: u32,
    raw: &mut RawGidEntry,
) -> std::result::Result<(), Errno> {
    let mut call = IoctlCmd::new(object::DEVICE, device_method::QUERY_GID_ENTRY);
    call.driver_id(driver_id)
        .in_u64(ge::PORT, u64::from(port))
        .in_u64(ge::GID_INDEX, u64::from(index))
        .in_u32(ge::FLAGS, 0)
        .out_value(ge::RESP_ENTRY, raw);
    // SAFETY: the inline values are numbers, no address; the output is a
    // borrowed entry. The fd is a context's, a uverbs node that passed
    // Device::open_node's check.
    unsafe { call.execute(fd) }
}

/// `UVERBS_METHOD_QUERY_PORT` on the context's uverbs node `fd`: the
/// extended port answer (`struct ib_uverbs_query_port_resp_ex`).
pub(crate) fn query_port_ex(
    fd: BorrowedFd<'_>,
    driver_id: u32,
    port: u8,
) -> std::result::Result<[u8; QUERY_PORT_RESP_EX_LEN], Errno> {
    let mut buf = [0u8; QUERY_PORT_RESP_EX_LEN];
    let mut call = IoctlCmd::new(object::DEVICE, device_method::QUERY_PORT);
    call.driver_id(driver_id)
        .in_u64(qp::PORT_NUM, u64::from(port))
        .out_bytes(qp::RESP, &mut buf);
    // SAFETY: the inline value is a port number, no address; the output
    // is a borrowed buffer. The fd is a context's, a uverbs node that
    // passed Device::open_node's check.
    unsafe { call.execute(fd) }?;
    Ok(buf)
}

/// What `UVERBS_METHOD_REG_DMABUF_MR` answered.
pub(crate) struct DmabufReg {
    /// The call's result.
    pub(crate) done: std::result::Result<(), Errno>,
    /// The new MR's handle, if the kernel wrote one.
    pub(crate) handle: Option<u32>,
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
}

/// `UVERBS_METHOD_REG_DMABUF_MR` on the context's uverbs node `fd`:
/// registers `len` bytes from `offset` of the dma-buf `dmabuf_fd` in PD
/// `pd_handle`, addressed from `iova`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn reg_dmabuf_mr(
    fd: BorrowedFd<'_>,
    driver_id: u32,
    pd_handle: u32,
    offset: u64,
    len: u64,
    iova: u64,
    dmabuf_fd: u32,
    access: u32,
) -> DmabufReg {
    let (mut lkey, mut rkey) = (0u32, 0u32);
    let mut call = IoctlCmd::new(object::MR, mr_method::REG_DMABUF_MR);
    // rdma-core's attribute order (ibv_cmd_reg_dmabuf_mr), so the bytes
    // match its call.
    call.driver_id(driver_id)
        .out_handle(rd::HANDLE)
        .out_value(rd::RESP_LKEY, &mut lkey)
        .out_value(rd::RESP_RKEY, &mut rkey)
        .in_handle(rd::PD_HANDLE, pd_handle)
        .in_u64(rd::OFFSET, offset)
        .in_u64(rd::LENGTH, len)
        .in_u64(rd::IOVA, iova)
        .in_u32(rd::FD, dmabuf_fd)
        .in_u32(rd::ACCESS_FLAGS, access);
    // SAFETY: no inline value is a user address: the offset, length and
    // IOVA name places in the dma-buf, which the kernel resolves from the
    // descriptor itself and checks against the buffer; the outputs are
    // borrowed locals. The fd is a context's uverbs node.
    let done = unsafe { call.execute(fd) };
    let handle = call.handle(rd::HANDLE);
    DmabufReg {
        done,
        handle,
        lkey,
        rkey,
    }
}

/// `UVERBS_METHOD_ADVISE_MR` on the context's uverbs node `fd`: `advice`
/// with `flags` for the range of `sge`, in PD `pd_handle`.
pub(crate) fn advise_mr(
    fd: BorrowedFd<'_>,
    driver_id: u32,
    pd_handle: u32,
    advice: u64,
    flags: u32,
    sge: &Sge,
) -> std::result::Result<(), Errno> {
    let mut call = IoctlCmd::new(object::MR, mr_method::ADVISE_MR);
    call.driver_id(driver_id)
        .in_handle(am::PD_HANDLE, pd_handle)
        .in_u64(am::ADVICE, advice)
        .in_u32(am::FLAGS, flags)
        .in_bytes(am::SGE_LIST, sge.as_bytes());
    // SAFETY: the only address is the SGE's, which the kernel looks up by
    // its lkey among the MRs of this context and checks against that MR's
    // range (failing the call otherwise); advice only maps pages of an
    // MR's own range, never writing their contents. The SGE list is
    // borrowed. The fd is a context's uverbs node.
    unsafe { call.execute(fd) }
}

/// DEREG_MR of MR `mr_handle` on the context's uverbs node `fd`.
pub(crate) fn dereg_mr(fd: BorrowedFd<'_>, mr_handle: u32) -> std::result::Result<(), Errno> {
    let cmd = DeregMr { mr_handle };
    // SAFETY: DEREG_MR carries no user address.
    unsafe { write_cmd_fixed::<_, NoResp>(fd, nr::DEREG_MR, &cmd) }.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_fd_refuses_negative_numbers() {
        assert_eq!(kernel_fd("op", "fd", 5).unwrap(), 5);
        assert_eq!(kernel_fd("op", "fd", 0).unwrap(), 0);
        for raw in [NO_FD, 0x8000_0000, (-2i32) as u32] {
            let e = kernel_fd("op", "fd", raw).unwrap_err();
            assert!(e.to_string().contains("holds no file descriptor"), "{e}");
        }
    }
}
