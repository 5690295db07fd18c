//! The rdma_cm's own command framing: a [`CmdHdr`] `{cmd, in, out}` with
//! byte lengths and a response field this module points at its staging
//! buffer ([`write_cmd`]), the safe [`exec`] for the [`UcmaCmd`]s,
//! the commands bound to their numbers and response types, and the two
//! commands that carry more than a response address ([`migrate_id`],
//! [`set_option`]), each wrapped whole.

use std::os::fd::{AsRawFd, BorrowedFd};

use crate::Errno;
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use super::{
    nr, Accept, Bind, BindIp, CmdHdr, Connect, CreateId, CreateIdResp, DestroyId, DestroyIdResp,
    Disconnect, EventResp, GetEvent, InitQpAttr, JoinIpMcast, JoinMcast, LeaveMcast, Listen,
    MigrateId, MigrateResp, Notify, Query, QueryAddrResp, QueryRoute, QueryRouteResp, Reject,
    ResolveAddr, ResolveIp, ResolveRoute, SetOption,
};
use crate::cmd::{NoResp, MAX_CMD_BYTES};
use crate::qp::QpAttr;

/// The response staging buffer's size: larger than every rdma_cm response
/// of ABI 4 (the largest fixed one, [`EventResp`], is 336 bytes; QUERY's
/// PATH answer is bounded by the header's `out`), so a handler that writes
/// its whole response without looking at `out` (MIGRATE_ID does) still
/// writes inside it.
pub(super) const STAGING: usize = MAX_CMD_BYTES;

const _: () = {
    assert!(size_of::<EventResp>() <= STAGING);
    assert!(size_of::<QueryRouteResp>() <= STAGING);
    assert!(size_of::<QueryAddrResp>() <= STAGING);
    assert!(size_of::<QpAttr>() <= STAGING);
    assert!(size_of::<QueryRoute>() == size_of::<Query>());
    assert!(size_of::<LeaveMcast>() == size_of::<DestroyId>());
};

/// Sends the rdma_cm command `command` with body `req` to `fd` (an open
/// `/dev/infiniband/rdma_cm`), framed by a [`CmdHdr`]. If the command has
/// a `response` field, `response_at` is its byte offset in `req`: this
/// function overwrites it with the address of its own staging buffer,
/// whose first `resp.len()` bytes start as `resp` and are copied back into
/// it after the call (the header's `out` is `resp.len()`). With
/// `response_at` `None`, `resp` must be empty.
///
/// Errors: `E2BIG` if the command or response exceeds
/// [`crate::cmd::MAX_CMD_BYTES`], `EINVAL` if `response_at` does not leave
/// 8 bytes inside `req` or `resp` is given without it, `EIO` on a short
/// write, and the kernel's errno.
///
/// # Safety
///
/// The kernel acts on every user address in `req` other than the response
/// field this function supplies: SET_OPTION's `optval` must be readable
/// for `optlen` bytes for the duration of the call. It acts on every file
/// descriptor `req` names: MIGRATE_ID's `fd` must be an fd the caller owns
/// or borrows for the call, and whose ids it may move. And `command` must
/// be the command whose C struct `req` mirrors (the kernel reads the bytes
/// as that command's struct, so under another number a handle or cookie
/// may be taken for an address); a [`UcmaCmd`] guarantees the three, see
/// [`exec`].
///
/// `fd` should be an rdma_cm file: on any other the bytes are merely
/// written, and the answer is meaningless.
pub unsafe fn write_cmd<Q>(
    fd: BorrowedFd<'_>,
    command: u32,
    req: &Q,
    response_at: Option<usize>,
    resp: &mut [u8],
) -> Result<(), Errno>
where
    Q: IntoBytes + Immutable,
{
    let hdr_len = size_of::<CmdHdr>();
    let req_len = size_of::<Q>();
    let in_len = hdr_len + req_len;
    if in_len > MAX_CMD_BYTES || resp.len() > STAGING {
        return Err(Errno::E2BIG);
    }
    match response_at {
        Some(at) if at.checked_add(8).is_some_and(|end| end <= req_len) => {}
        None if resp.is_empty() => {}
        _ => return Err(Errno::EINVAL),
    }
    let mut inb = [0u8; MAX_CMD_BYTES];
    let mut outb = [0u8; STAGING];
    let hdr = CmdHdr {
        cmd: command,
        in_len: req_len as u16,
        out_len: resp.len() as u16,
    };
    inb[..hdr_len].copy_from_slice(hdr.as_bytes());
    inb[hdr_len..in_len].copy_from_slice(req.as_bytes());
    if let Some(at) = response_at {
        let ptr = outb.as_mut_ptr() as u64;
        inb[hdr_len + at..hdr_len + at + 8].copy_from_slice(&ptr.to_ne_bytes());
    }
    outb[..resp.len()].copy_from_slice(resp);
    // SAFETY: `inb[..in_len]` is a live, initialised local for the whole
    // call. The kernel writes the response only into `outb`, a live local
    // of STAGING bytes whose address the command carries (larger than any
    // response, see STAGING); every other address or fd the command
    // carries is the caller's to vouch for, by this function's contract.
    let n = unsafe { libc::write(fd.as_raw_fd(), inb.as_ptr().cast(), in_len) };
    if n < 0 {
        return Err(Errno::last());
    }
    if n as usize != in_len {
        return Err(Errno::EIO);
    }
    let len = resp.len();
    resp.copy_from_slice(&outb[..len]);
    Ok(())
}

/// An rdma_cm command whose only user address is its `response` field
/// (which the framing supplies), bound to its command number and response
/// type: sending one is safe ([`exec`], [`exec_bytes`]).
///
/// # Safety
///
/// Implement only for the struct of command [`UcmaCmd::NR`] (layout
/// checked against the uapi header), with [`UcmaCmd::RESPONSE_AT`] the
/// offset of its `response` field if it has one, and only if it carries
/// no other user address and no file descriptor (ids, sizes, inline
/// addresses and private data, and opaque `uid` cookies are fine). The
/// implementations are this crate's (sealed by this contract, not by
/// type).
pub unsafe trait UcmaCmd: IntoBytes + Immutable {
    /// The command number ([`nr`]).
    const NR: u32;
    /// The byte offset of the `response` field, if any.
    const RESPONSE_AT: Option<usize>;
    /// The response ([`NoResp`] if none).
    type Resp: FromBytes + IntoBytes + KnownLayout + Immutable;
}

macro_rules! ucma_cmds {
    ($($cmd:ty => $nr:ident, $at:expr, $resp:ty;)*) => {$(
        // SAFETY: the struct of RDMA_USER_CM_CMD_$nr (layout checked in
        // tests/layout.rs), whose `response` field is at $at; its other
        // fields are ids, sizes, options, inline addresses or private data,
        // or `uid` cookies the kernel only hands back: no user address and
        // no fd.
        unsafe impl UcmaCmd for $cmd {
            const NR: u32 = nr::$nr;
            const RESPONSE_AT: Option<usize> = $at;
            type Resp = $resp;
        }
    )*};
}

use core::mem::offset_of;

ucma_cmds! {
    CreateId => CREATE_ID, Some(offset_of!(CreateId, response)), CreateIdResp;
    DestroyId => DESTROY_ID, Some(offset_of!(DestroyId, response)), DestroyIdResp;
    BindIp => BIND_IP, Some(offset_of!(BindIp, response)), NoResp;
    Bind => BIND, None, NoResp;
    ResolveIp => RESOLVE_IP, None, NoResp;
    ResolveAddr => RESOLVE_ADDR, None, NoResp;
    ResolveRoute => RESOLVE_ROUTE, None, NoResp;
    Query => QUERY, Some(offset_of!(Query, response)), QueryAddrResp;
    QueryRoute => QUERY_ROUTE, Some(offset_of!(Query, response)), QueryRouteResp;
    Connect => CONNECT, None, NoResp;
    Listen => LISTEN, None, NoResp;
    Accept => ACCEPT, None, NoResp;
    Reject => REJECT, None, NoResp;
    Disconnect => DISCONNECT, None, NoResp;
    InitQpAttr => INIT_QP_ATTR, Some(offset_of!(InitQpAttr, response)), QpAttr;
    Notify => NOTIFY, None, NoResp;
    JoinIpMcast => JOIN_IP_MCAST, Some(offset_of!(JoinIpMcast, response)), CreateIdResp;
    JoinMcast => JOIN_MCAST, Some(offset_of!(JoinMcast, response)), CreateIdResp;
    LeaveMcast => LEAVE_MCAST, Some(offset_of!(DestroyId, response)), DestroyIdResp;
    GetEvent => GET_EVENT, Some(offset_of!(GetEvent, response)), EventResp;
}

/// Sends `cmd` and returns its response. Safe: a [`UcmaCmd`] carries no
/// user address but its response field, which points at this call's
/// staging buffer. (QUERY answers [`QueryAddrResp`] for the ADDR and GID
/// options; for PATH use [`exec_bytes`] and [`QueryPathResp::parse`](super::QueryPathResp::parse).)
pub fn exec<C: UcmaCmd>(fd: BorrowedFd<'_>, cmd: &C) -> Result<C::Resp, Errno> {
    let mut resp = C::Resp::new_zeroed();
    exec_bytes(fd, cmd, resp.as_mut_bytes())?;
    Ok(resp)
}

/// Sends `cmd` with a response buffer of `out.len()` bytes (for answers
/// of variable size: QUERY's PATH option); `EINVAL` if `out` is not empty
/// and the command has no response. Safe, as [`exec`].
pub fn exec_bytes<C: UcmaCmd>(fd: BorrowedFd<'_>, cmd: &C, out: &mut [u8]) -> Result<(), Errno> {
    // SAFETY: `C: UcmaCmd` is the struct of command C::NR, carrying no user
    // address but the response field at C::RESPONSE_AT, which write_cmd
    // supplies, and no fd.
    unsafe { write_cmd(fd, C::NR, cmd, C::RESPONSE_AT, out) }
}

/// MIGRATE_ID on the rdma_cm file `fd`: moves id `id` there from the
/// rdma_cm file `from`, with its pending events.
pub fn migrate_id(fd: BorrowedFd<'_>, id: u32, from: BorrowedFd<'_>) -> Result<(), Errno> {
    let cmd = MigrateId {
        id,
        fd: from.as_raw_fd() as u32,
        ..Default::default()
    };
    let mut resp = MigrateResp::new_zeroed();
    // SAFETY: MIGRATE_ID's struct, whose only user address is the
    // response field (at the offset given, supplied by write_cmd) and
    // whose fd is `from`, borrowed for the call (the kernel checks that it
    // is an rdma_cm file and looks the id up among that file's).
    unsafe {
        write_cmd(
            fd,
            nr::MIGRATE_ID,
            &cmd,
            Some(offset_of!(MigrateId, response)),
            resp.as_mut_bytes(),
        )
    }
}

/// SET_OPTION on the rdma_cm file `fd`: option `name` of level `level`
/// of id `id`, set to the bytes of `value` (the kernel checks their
/// length against the option's C type).
pub fn set_option(
    fd: BorrowedFd<'_>,
    id: u32,
    level: u32,
    name: u32,
    value: &[u8],
) -> Result<(), Errno> {
    let cmd = SetOption {
        optval: value.as_ptr() as u64,
        id,
        level,
        optname: name,
        optlen: u32::try_from(value.len()).map_err(|_| Errno::EINVAL)?,
    };
    // SAFETY: SET_OPTION's struct, with no response field; its one user
    // address, `optval`, points at `value`, borrowed for the call and
    // readable for `optlen` (its length) bytes; the kernel only reads it
    // (it copies the bytes in before acting on them) and keeps no pointer
    // to it after the call.
    unsafe { write_cmd(fd, nr::SET_OPTION, &cmd, None, &mut []) }
}

#[cfg(test)]
mod tests {
    use super::super::port_space;
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    /// Reads one framed command from the peer of the socket it was sent to.
    fn sent(peer: &mut UnixStream, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        peer.read_exact(&mut v).unwrap();
        v
    }

    #[test]
    fn framing_fills_the_header_and_the_response_field() {
        let (ours, mut peer) = UnixStream::pair().unwrap();
        let cmd = CreateId {
            uid: 0x1122_3344_5566_7788,
            response: 0xdead_beef,
            ps: port_space::TCP,
            qp_type: crate::qp::qp_type::RC,
            ..Default::default()
        };
        // A socket answers nothing: the response stays zeroed.
        let resp = exec(ours.as_fd(), &cmd).unwrap();
        assert_eq!(resp.id, 0);
        let b = sent(&mut peer, size_of::<CmdHdr>() + size_of::<CreateId>());
        let (hdr, body) = CmdHdr::read_from_prefix(&b).unwrap();
        assert_eq!(hdr.cmd, nr::CREATE_ID);
        assert_eq!(usize::from(hdr.in_len), size_of::<CreateId>());
        assert_eq!(usize::from(hdr.out_len), size_of::<CreateIdResp>());
        let got = CreateId::read_from_bytes(body).unwrap();
        assert_eq!(got.uid, cmd.uid);
        assert_ne!(
            got.response, 0xdead_beef,
            "the framing supplies the response"
        );
        assert_ne!(got.response, 0);
        assert_eq!((got.ps, got.qp_type), (cmd.ps, cmd.qp_type));

        // No response: out is 0 and the body is sent as is.
        exec(ours.as_fd(), &Listen { id: 3, backlog: 8 }).unwrap();
        let b = sent(&mut peer, size_of::<CmdHdr>() + size_of::<Listen>());
        let (hdr, body) = CmdHdr::read_from_prefix(&b).unwrap();
        assert_eq!((hdr.cmd, hdr.in_len, hdr.out_len), (nr::LISTEN, 8, 0));
        assert_eq!(body, Listen { id: 3, backlog: 8 }.as_bytes());

        // A wrapper carries its own number and the wrapped struct.
        exec(
            ours.as_fd(),
            &QueryRoute(Query {
                id: 4,
                ..Default::default()
            }),
        )
        .unwrap();
        let b = sent(&mut peer, size_of::<CmdHdr>() + size_of::<Query>());
        let (hdr, _) = CmdHdr::read_from_prefix(&b).unwrap();
        assert_eq!(hdr.cmd, nr::QUERY_ROUTE);
        assert_eq!(usize::from(hdr.out_len), size_of::<QueryRouteResp>());
    }

    #[test]
    fn framing_refuses_inconsistent_sizes() {
        let (ours, _peer) = UnixStream::pair().unwrap();
        let mut out = [0u8; 8];
        assert_eq!(
            exec_bytes(ours.as_fd(), &Listen::default(), &mut out),
            Err(Errno::EINVAL)
        );
        let mut big = [0u8; MAX_CMD_BYTES + 1];
        assert_eq!(
            exec_bytes(ours.as_fd(), &GetEvent::default(), &mut big),
            Err(Errno::E2BIG)
        );
        // SAFETY: nothing is sent: the response offset is refused first.
        let r = unsafe {
            write_cmd(
                ours.as_fd(),
                nr::QUERY,
                &Query::default(),
                Some(9),
                &mut out,
            )
        };
        assert_eq!(r, Err(Errno::EINVAL));
        // SAFETY: as above.
        let r = unsafe {
            write_cmd(
                ours.as_fd(),
                nr::QUERY,
                &Query::default(),
                Some(usize::MAX),
                &mut out,
            )
        };
        assert_eq!(r, Err(Errno::EINVAL));
    }
}
