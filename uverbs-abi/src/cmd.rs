//! The `write()` command channel: headers, command numbers, and [`write_cmd`] /
//! [`write_ex_cmd`], which frame a core command plus the provider's driver data
//! and collect the core response plus the provider's driver response.

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::Errno;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_cmd_hdr`: precedes every `write()` command.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CmdHdr {
    /// Command number, or'ed with [`IB_USER_VERBS_CMD_FLAG_EXTENDED`].
    pub command: u32,
    /// Input length in 4-byte words, header included (8-byte words and no
    /// headers for extended commands).
    pub in_words: u16,
    /// Response length in 4-byte words (8-byte words for extended commands).
    pub out_words: u16,
}

/// `struct ib_uverbs_ex_cmd_hdr`: follows [`CmdHdr`] in extended commands.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ExCmdHdr {
    /// User address of the response buffer.
    pub response: u64,
    /// Driver input length in 8-byte words.
    pub provider_in_words: u16,
    /// Driver response length in 8-byte words.
    pub provider_out_words: u16,
    /// Must be zero.
    pub cmd_hdr_reserved: u32,
}

/// Flag in [`CmdHdr::command`] selecting the extended command set.
pub const IB_USER_VERBS_CMD_FLAG_EXTENDED: u32 = 0x8000_0000;

/// `enum ib_uverbs_write_cmds`: the legacy `write()` command numbers.
#[allow(missing_docs)]
pub mod nr {
    pub const GET_CONTEXT: u32 = 0;
    pub const QUERY_DEVICE: u32 = 1;
    pub const QUERY_PORT: u32 = 2;
    pub const ALLOC_PD: u32 = 3;
    pub const DEALLOC_PD: u32 = 4;
    pub const CREATE_AH: u32 = 5;
    pub const DESTROY_AH: u32 = 8;
    pub const REG_MR: u32 = 9;
    pub const REREG_MR: u32 = 11;
    pub const DEREG_MR: u32 = 13;
    pub const ALLOC_MW: u32 = 14;
    pub const DEALLOC_MW: u32 = 16;
    pub const CREATE_COMP_CHANNEL: u32 = 17;
    pub const CREATE_CQ: u32 = 18;
    pub const RESIZE_CQ: u32 = 19;
    pub const DESTROY_CQ: u32 = 20;
    pub const REQ_NOTIFY_CQ: u32 = 23;
    pub const CREATE_QP: u32 = 24;
    pub const QUERY_QP: u32 = 25;
    pub const MODIFY_QP: u32 = 26;
    pub const DESTROY_QP: u32 = 27;
    pub const POST_SEND: u32 = 28;
    pub const POST_RECV: u32 = 29;
    pub const ATTACH_MCAST: u32 = 30;
    pub const DETACH_MCAST: u32 = 31;
    pub const CREATE_SRQ: u32 = 32;
    pub const MODIFY_SRQ: u32 = 33;
    pub const QUERY_SRQ: u32 = 34;
    pub const DESTROY_SRQ: u32 = 35;
    pub const POST_SRQ_RECV: u32 = 36;
    /// Extended: `IB_USER_VERBS_EX_CMD_QUERY_DEVICE`.
    pub const EX_QUERY_DEVICE: u32 = QUERY_DEVICE;
    /// Extended: `IB_USER_VERBS_EX_CMD_CREATE_CQ`.
    pub const EX_CREATE_CQ: u32 = CREATE_CQ;
    /// Extended: `IB_USER_VERBS_EX_CMD_CREATE_QP`.
    pub const EX_CREATE_QP: u32 = CREATE_QP;
}

/// Largest command or response (core + driver data) this crate frames.
pub const MAX_CMD_BYTES: usize = 512;

/// Marker for commands that have no response (the kernel writes nothing).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct NoResp {}

fn check_sizes(parts: &[usize]) -> Result<usize, Errno> {
    let total: usize = parts.iter().sum();
    if total > MAX_CMD_BYTES {
        return Err(Errno::E2BIG);
    }
    Ok(total)
}

#[inline]
fn do_write(fd: BorrowedFd<'_>, buf: &[u8]) -> Result<(), Errno> {
    // SAFETY: `buf` is a live, initialised byte slice for the whole call.
    let n = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(Errno::last());
    }
    if n as usize != buf.len() {
        // The uverbs write handler consumes whole commands or fails.
        return Err(Errno::EIO);
    }
    Ok(())
}

/// What a response's file-descriptor field is prefilled with (-1): the
/// kernel overwrites it with the fd it opened; a response that still holds
/// it (or any negative value) names no fd, and must not be adopted. See
/// [`response_fd`].
pub const NO_FD: u32 = u32::MAX;

/// The fd number in a response field prefilled with [`NO_FD`]: `None` if
/// the kernel did not write one (the field still holds -1, or holds another
/// negative value), which happens when the command went to something that
/// is not a uverbs device (`/dev/null` accepts every write and answers
/// nothing). A `Some` is only as trustworthy as the fd the command went to.
pub fn response_fd(raw: u32) -> Option<std::os::fd::RawFd> {
    let fd = raw as i32;
    (fd >= 0).then_some(fd)
}

/// A core command that carries no user address but its `response`
/// pointer, which [`exec`] supplies, bound to its command number and its
/// response type: sending one is safe ([`exec`]), unlike [`write_cmd`],
/// whose caller names the command number and may append driver data that
/// carries addresses.
///
/// # Safety
///
/// Implement only for the core struct of command [`PlainCmd::NR`],
/// answered by [`PlainCmd::Resp`], and only if none of its fields is a user
/// address the kernel acts on (handles, counts, attributes and opaque
/// `user_handle` cookies are fine). The implementations are this crate's
/// (sealed by this contract, not by type).
pub unsafe trait PlainCmd: IntoBytes + Immutable + Copy {
    /// The command number (`IB_USER_VERBS_CMD_*`).
    const NR: u32;
    /// The core response ([`NoResp`] if none).
    type Resp: FromBytes + IntoBytes + KnownLayout + Immutable;
}

macro_rules! plain_cmds {
    ($($cmd:ty => $nr:ident, $resp:ty;)*) => {$(
        // SAFETY: the core struct of IB_USER_VERBS_CMD_$nr (layouts checked
        // against the uapi header in tests/layout.rs), answered by $resp;
        // its fields are handles, counts, attributes or cookies: no user
        // address but the leading `response`, which exec supplies.
        unsafe impl PlainCmd for $cmd {
            const NR: u32 = nr::$nr;
            type Resp = $resp;
        }
    )*};
}

plain_cmds! {
    crate::device::GetContext => GET_CONTEXT, crate::device::GetContextResp;
    crate::pd::AllocPd => ALLOC_PD, crate::pd::AllocPdResp;
    crate::pd::DeallocPd => DEALLOC_PD, NoResp;
    crate::mw::AllocMw => ALLOC_MW, crate::mw::AllocMwResp;
    crate::mw::DeallocMw => DEALLOC_MW, NoResp;
    crate::device::QueryDevice => QUERY_DEVICE, crate::device::QueryDeviceResp;
    crate::device::QueryPort => QUERY_PORT, crate::device::QueryPortResp;
    crate::ah::CreateAh => CREATE_AH, crate::ah::CreateAhResp;
    crate::ah::DestroyAh => DESTROY_AH, NoResp;
    crate::cq::CreateCompChannel => CREATE_COMP_CHANNEL, crate::cq::CreateCompChannelResp;
    crate::cq::DestroyCq => DESTROY_CQ, crate::cq::DestroyCqResp;
    crate::cq::ReqNotifyCq => REQ_NOTIFY_CQ, NoResp;
    crate::qp::QueryQp => QUERY_QP, crate::qp::QueryQpResp;
    crate::qp::ModifyQp => MODIFY_QP, NoResp;
    crate::qp::DestroyQp => DESTROY_QP, crate::qp::DestroyQpResp;
    crate::qp::AttachMcast => ATTACH_MCAST, NoResp;
    crate::qp::DetachMcast => DETACH_MCAST, NoResp;
    crate::srq::ModifySrq => MODIFY_SRQ, NoResp;
    crate::srq::QuerySrq => QUERY_SRQ, crate::srq::QuerySrqResp;
    crate::srq::DestroySrq => DESTROY_SRQ, crate::srq::DestroySrqResp;
}

/// Sends the plain command `cmd` (no driver data in; `drv_out.len()` bytes
/// of driver response after the core response) and returns the core
/// response. Safe: a [`PlainCmd`] carries no user address the kernel could
/// act on after the call, and the response buffers are this call's.
pub fn exec<C: PlainCmd>(
    fd: BorrowedFd<'_>,
    cmd: &C,
    drv_out: &mut [u8],
) -> Result<C::Resp, Errno> {
    if drv_out.is_empty() {
        // The common case, framed at its exact size (no staging buffers).
        // SAFETY: `C: PlainCmd` carries no user address but the response
        // pointer write_cmd_fixed supplies.
        return unsafe { write_cmd_fixed::<C, C::Resp>(fd, C::NR, cmd) };
    }
    // SAFETY: `C: PlainCmd` carries no user address but the response
    // pointer write_cmd supplies, and no driver data goes in.
    unsafe { write_cmd(fd, C::NR, cmd, &[], drv_out) }
}

/// [`exec`] with the core response starting as `*resp` (see
/// [`write_cmd_prefilled`]: prefill fd fields with [`NO_FD`]).
pub fn exec_prefilled<C: PlainCmd>(
    fd: BorrowedFd<'_>,
    cmd: &C,
    resp: &mut C::Resp,
    drv_out: &mut [u8],
) -> Result<(), Errno> {
    // SAFETY: as in `exec`.
    unsafe { write_cmd_prefilled(fd, C::NR, cmd, resp, &[], drv_out) }
}

/// The extended QUERY_DEVICE (`IB_USER_VERBS_EX_CMD_QUERY_DEVICE`) with
/// `drv_out.len()` bytes of driver response after the core one (a multiple
/// of 8). Safe: the command carries no user address (the response buffer
/// is supplied here) and no driver data goes in.
pub fn exec_ex_query_device(
    fd: BorrowedFd<'_>,
    drv_out: &mut [u8],
) -> Result<crate::device::ExQueryDeviceResp, Errno> {
    // SAFETY: the extended QUERY_DEVICE's fields are a mask and a reserved
    // word: no user address; write_ex_cmd supplies the response buffer.
    unsafe {
        write_ex_cmd(
            fd,
            nr::EX_QUERY_DEVICE,
            &crate::device::ExQueryDevice::default(),
            &[],
            drv_out,
        )
    }
}

/// Sends a legacy `write()` command: `req` is the core command, `drv_in` the
/// provider's driver data appended to it. When `R` is not [`NoResp`] the
/// command's first field must be its `response` pointer (as in every uverbs
/// command with a response); it is filled in here. The kernel writes the core
/// response, returned, followed by `drv_out.len()` bytes of driver response.
/// All lengths must be multiples of 4 (the kernel counts 4-byte words).
///
/// The response starts zeroed; [`write_cmd_prefilled`] starts it from a
/// given value (to tell a field the kernel wrote from one it left alone).
///
/// # Safety
///
/// The kernel acts on every user address the command carries, in `req` or
/// in `drv_in`, other than the response buffer this function supplies
/// itself: it reads or writes through it, and the device may DMA to or from
/// it, during the call and for as long as the object the command creates
/// or modifies can use it (REG_MR's `start..start + length` until DEREG_MR;
/// mlx5's `buf_addr` and `db_addr` until the CQ, QP or SRQ is destroyed; a
/// `response` field left in a command sent with [`NoResp`]). The caller
/// must ensure every such range is valid for those reads and writes for
/// that long, and that no Rust reference relies on memory the kernel or
/// device may write there staying unchanged. A command that carries no user
/// address (destroy, query, most modifies) has nothing to uphold here.
///
/// `fd` should be a uverbs command fd: the bytes mean nothing to anything
/// else. On any other file they are merely written to it, as `File::write`
/// would do, and the answer is meaningless (see [`NO_FD`]).
pub unsafe fn write_cmd<Q, R>(
    fd: BorrowedFd<'_>,
    command: u32,
    req: &Q,
    drv_in: &[u8],
    drv_out: &mut [u8],
) -> Result<R, Errno>
where
    Q: IntoBytes + Immutable,
    R: FromBytes + IntoBytes + KnownLayout + Immutable,
{
    let mut resp = R::new_zeroed();
    // SAFETY: the caller upholds this function's contract, which is
    // write_cmd_prefilled's.
    unsafe { write_cmd_prefilled(fd, command, req, &mut resp, drv_in, drv_out)? };
    Ok(resp)
}

/// [`write_cmd`] with the core response starting as `*resp` instead of
/// zeros: what the kernel does not write keeps the value given. Prefill a
/// file-descriptor field with [`NO_FD`] and check it with
/// [`response_fd`]. On success `*resp` holds the response; on error its
/// contents are unspecified.
///
/// # Safety
///
/// As [`write_cmd`].
pub unsafe fn write_cmd_prefilled<Q, R>(
    fd: BorrowedFd<'_>,
    command: u32,
    req: &Q,
    resp: &mut R,
    drv_in: &[u8],
    drv_out: &mut [u8],
) -> Result<(), Errno>
where
    Q: IntoBytes + Immutable,
    R: FromBytes + IntoBytes + KnownLayout + Immutable,
{
    let hdr_len = size_of::<CmdHdr>();
    let req_len = size_of::<Q>();
    let resp_len = size_of::<R>();
    let in_len = check_sizes(&[hdr_len, req_len, drv_in.len()])?;
    let out_len = check_sizes(&[resp_len, drv_out.len()])?;
    if in_len % 4 != 0 || out_len % 4 != 0 || (resp_len > 0 && req_len < 8) {
        return Err(Errno::EINVAL);
    }
    // Staging buffers of the smallest size that fits: zeroing and copying
    // 512 bytes twice per command is most of a small command's cost.
    let framing = Framing {
        fd,
        command,
        in_len,
        out_len,
    };
    let len = in_len.max(out_len);
    if len <= STAGE_SMALL {
        framing.send::<STAGE_SMALL, Q, R>(req, resp, drv_in, drv_out)
    } else if len <= STAGE_MEDIUM {
        framing.send::<STAGE_MEDIUM, Q, R>(req, resp, drv_in, drv_out)
    } else {
        framing.send::<MAX_CMD_BYTES, Q, R>(req, resp, drv_in, drv_out)
    }
}

/// Staging-buffer sizes of [`write_cmd_prefilled`] below [`MAX_CMD_BYTES`].
const STAGE_SMALL: usize = 128;
const STAGE_MEDIUM: usize = 256;

/// A legacy command's framing, lengths checked ([`write_cmd_prefilled`]).
struct Framing<'fd> {
    fd: BorrowedFd<'fd>,
    command: u32,
    in_len: usize,
    out_len: usize,
}

impl Framing<'_> {
    /// Frames and sends the command in staging buffers of `N` bytes (`N`
    /// at least both lengths, checked by the caller's choice of `N`; the
    /// slicing below would panic rather than overrun otherwise).
    #[inline]
    fn send<const N: usize, Q, R>(
        &self,
        req: &Q,
        resp: &mut R,
        drv_in: &[u8],
        drv_out: &mut [u8],
    ) -> Result<(), Errno>
    where
        Q: IntoBytes + Immutable,
        R: FromBytes + IntoBytes + KnownLayout + Immutable,
    {
        let Framing {
            fd,
            command,
            in_len,
            out_len,
        } = *self;
        let hdr_len = size_of::<CmdHdr>();
        let req_len = size_of::<Q>();
        let resp_len = size_of::<R>();
        let mut inb = [0u8; N];
        let mut outb = [0u8; N];
        let hdr = CmdHdr {
            command,
            in_words: (in_len / 4) as u16,
            out_words: (out_len / 4) as u16,
        };
        inb[..hdr_len].copy_from_slice(hdr.as_bytes());
        inb[hdr_len..hdr_len + req_len].copy_from_slice(req.as_bytes());
        inb[hdr_len + req_len..in_len].copy_from_slice(drv_in);
        if out_len > 0 {
            let ptr = outb.as_mut_ptr() as u64;
            inb[hdr_len..hdr_len + 8].copy_from_slice(&ptr.to_ne_bytes());
        }
        outb[..resp_len].copy_from_slice(resp.as_bytes());
        do_write(fd, &inb[..in_len])?;
        drv_out.copy_from_slice(&outb[resp_len..out_len]);
        resp.as_mut_bytes().copy_from_slice(&outb[..resp_len]);
        Ok(())
    }
}

/// A legacy command at its exact size: the header, then the core command.
/// Neither part has padding after it (`CmdHdr` is 8 bytes, and every command
/// struct is `IntoBytes`, so its size is a multiple of its alignment of at
/// most 8); checked in [`write_cmd_fixed`].
#[repr(C)]
struct Framed<Q> {
    hdr: CmdHdr,
    req: Q,
}

/// [`write_cmd`] for a command without driver data or driver response,
/// framed on the stack at its exact size instead of in staging buffers: the
/// form for the data path (rxe's send doorbell). When `R` is not
/// [`NoResp`], `req`'s first field must be its `response` pointer; it is
/// filled in here with the address of the returned value's storage. The
/// size rules of [`write_cmd`] are checked at compile time.
///
/// # Safety
///
/// As [`write_cmd`]: every user address `req` carries must be valid for
/// what the command makes the kernel and device do with it, for as long
/// as they may do it.
#[inline(always)]
pub unsafe fn write_cmd_fixed<Q, R>(fd: BorrowedFd<'_>, command: u32, req: &Q) -> Result<R, Errno>
where
    Q: IntoBytes + Immutable + Copy,
    R: FromBytes + IntoBytes,
{
    const {
        assert!(size_of::<Framed<Q>>() == size_of::<CmdHdr>() + size_of::<Q>());
        assert!(size_of::<Framed<Q>>() % 4 == 0 && size_of::<R>() % 4 == 0);
        assert!(size_of::<Framed<Q>>() <= MAX_CMD_BYTES && size_of::<R>() <= MAX_CMD_BYTES);
        assert!(size_of::<R>() == 0 || size_of::<Q>() >= 8);
    }
    let mut resp = R::new_zeroed();
    let mut framed = Framed {
        hdr: CmdHdr {
            command,
            in_words: (size_of::<Framed<Q>>() / 4) as u16,
            out_words: (size_of::<R>() / 4) as u16,
        },
        req: *req,
    };
    if size_of::<R>() > 0 {
        let ptr = (&raw mut resp) as u64;
        // SAFETY: `req` is at least 8 bytes (checked above) and, by this
        // function's contract, starts with its u64 `response` field; the
        // write is unaligned-tolerant and stays inside `framed.req`.
        unsafe { std::ptr::write_unaligned((&raw mut framed.req).cast::<u64>(), ptr) };
    }
    // SAFETY: `framed` is a live local of exactly this many bytes, all
    // initialised: both fields are IntoBytes (no padding inside them) and
    // the layout has no padding between or after them (checked above).
    let bytes = unsafe {
        std::slice::from_raw_parts((&raw const framed).cast::<u8>(), size_of::<Framed<Q>>())
    };
    // The kernel writes the response into `resp` during this call; its
    // address escaped through the command bytes, so the compiler cannot
    // assume it is unchanged afterwards.
    do_write(fd, bytes)?;
    Ok(resp)
}

/// Sends an extended `write()` command (`IB_USER_VERBS_CMD_FLAG_EXTENDED`):
/// the core command `req` and driver data `drv_in`; returns the core
/// response and fills `drv_out`. Lengths must be multiples of 8.
///
/// # Safety
///
/// As [`write_cmd`]: every user address `req` or `drv_in` carries (other
/// than the response buffer this function supplies) must be valid for what
/// the command makes the kernel and device do with it, for as long as they
/// may do it.
pub unsafe fn write_ex_cmd<Q, R>(
    fd: BorrowedFd<'_>,
    command: u32,
    req: &Q,
    drv_in: &[u8],
    drv_out: &mut [u8],
) -> Result<R, Errno>
where
    Q: IntoBytes + Immutable,
    R: FromBytes + IntoBytes + KnownLayout + Immutable,
{
    let hdr_len = size_of::<CmdHdr>() + size_of::<ExCmdHdr>();
    let req_len = size_of::<Q>();
    let resp_len = size_of::<R>();
    let in_len = check_sizes(&[hdr_len, req_len, drv_in.len()])?;
    let out_len = check_sizes(&[resp_len, drv_out.len()])?;
    if req_len % 8 != 0 || drv_in.len() % 8 != 0 || resp_len % 8 != 0 || drv_out.len() % 8 != 0 {
        return Err(Errno::EINVAL);
    }
    let mut inb = [0u8; MAX_CMD_BYTES];
    let mut outb = [0u8; MAX_CMD_BYTES];
    let hdr = CmdHdr {
        command: command | IB_USER_VERBS_CMD_FLAG_EXTENDED,
        in_words: (req_len / 8) as u16,
        out_words: (resp_len / 8) as u16,
    };
    let ex = ExCmdHdr {
        response: if out_len > 0 {
            outb.as_mut_ptr() as u64
        } else {
            0
        },
        provider_in_words: (drv_in.len() / 8) as u16,
        provider_out_words: (drv_out.len() / 8) as u16,
        cmd_hdr_reserved: 0,
    };
    let h0 = size_of::<CmdHdr>();
    inb[..h0].copy_from_slice(hdr.as_bytes());
    inb[h0..hdr_len].copy_from_slice(ex.as_bytes());
    inb[hdr_len..hdr_len + req_len].copy_from_slice(req.as_bytes());
    inb[hdr_len + req_len..in_len].copy_from_slice(drv_in);
    do_write(fd, &inb[..in_len])?;
    drv_out.copy_from_slice(&outb[resp_len..out_len]);
    R::read_from_bytes(&outb[..resp_len]).map_err(|_| Errno::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};

    /// A pipe: (read end, write end).
    fn pipe() -> (File, OwnedFd) {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two fds pipe() writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: pipe() just opened the read end; nothing else owns it.
        let read = unsafe { File::from_raw_fd(fds[0]) };
        // SAFETY: pipe() just opened the write end; nothing else owns it.
        let write = unsafe { OwnedFd::from_raw_fd(fds[1]) };
        (read, write)
    }

    /// The bytes `write_cmd_prefilled` writes for a request of `req_words`
    /// 4-byte words (the first two: the response pointer), `drv` words of
    /// driver data, a 2-word response and `out` words of driver response.
    fn framed(req_words: usize, drv: usize, out: usize) -> (Vec<u8>, [u32; 2], Vec<u8>) {
        let (mut r, w) = pipe();
        let req: Vec<u32> = (0..req_words as u32).map(|i| 0x100 + i).collect();
        let drv_in: Vec<u8> = (0..drv * 4).map(|i| i as u8).collect();
        let mut drv_out = vec![0xAAu8; out * 4];
        let mut resp = [7u32, 9];
        macro_rules! send {
            ($n:literal) => {{
                let mut q = [0u32; $n];
                q.copy_from_slice(&req);
                // SAFETY: the "command" goes to a pipe; nothing acts on the
                // addresses in it.
                unsafe {
                    write_cmd_prefilled(w.as_fd(), 0x42, &q, &mut resp, &drv_in, &mut drv_out)
                }
            }};
        }
        match req_words {
            4 => send!(4),
            40 => send!(40),
            100 => send!(100),
            _ => unreachable!(),
        }
        .unwrap();
        drop(w);
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes).unwrap();
        (bytes, resp, drv_out)
    }

    #[test]
    fn staged_framing_is_exact_at_every_size() {
        // Small, medium and full staging buffers.
        for (req_words, drv, out) in [(4, 2, 1), (40, 10, 20), (100, 20, 60)] {
            let (b, resp, drv_out) = framed(req_words, drv, out);
            let in_len = 8 + req_words * 4 + drv * 4;
            assert_eq!(b.len(), in_len);
            assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 0x42);
            assert_eq!(
                u16::from_ne_bytes(b[4..6].try_into().unwrap()) as usize,
                in_len / 4
            );
            assert_eq!(
                u16::from_ne_bytes(b[6..8].try_into().unwrap()) as usize,
                2 + out
            );
            // The response pointer replaced words 0-1; the rest verbatim.
            assert_ne!(u64::from_ne_bytes(b[8..16].try_into().unwrap()), 0);
            for i in 2..req_words {
                let at = 8 + i * 4;
                assert_eq!(
                    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap()),
                    0x100 + i as u32
                );
            }
            let d = 8 + req_words * 4;
            assert!(b[d..].iter().enumerate().all(|(i, x)| *x == i as u8));
            // Nothing answered: the prefilled response is kept, the driver
            // response reads back as the zeroed staging bytes.
            assert_eq!(resp, [7, 9]);
            assert!(drv_out.iter().all(|x| *x == 0));
        }
    }

    #[test]
    fn exact_framing_of_plain_commands() {
        let (mut r, w) = pipe();
        let cmd = crate::qp::DestroyQp {
            response: 0,
            qp_handle: 5,
            reserved: 0,
        };
        let resp = exec(w.as_fd(), &cmd, &mut []).unwrap();
        drop(w);
        let mut b = Vec::new();
        r.read_to_end(&mut b).unwrap();
        assert_eq!(b.len(), 8 + size_of::<crate::qp::DestroyQp>());
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()),
            nr::DESTROY_QP
        );
        assert_eq!(
            u16::from_ne_bytes(b[6..8].try_into().unwrap()) as usize,
            size_of::<crate::qp::DestroyQpResp>() / 4
        );
        assert_ne!(u64::from_ne_bytes(b[8..16].try_into().unwrap()), 0);
        assert_eq!(u32::from_ne_bytes(b[16..20].try_into().unwrap()), 5);
        assert_eq!(resp.events_reported, 0);
    }
}
