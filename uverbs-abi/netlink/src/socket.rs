//! The `NETLINK_RDMA` socket: [`NlSocket`] opens and binds it, sends a
//! request with the next sequence number and walks the replies.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use rverbs_abi::Errno;

use super::abi::{NLM_F_ACK, NLM_F_DUMP, NLM_F_REQUEST, RECV_BUF, RECV_TIMEOUT_SECS};
use super::framing::{encode_request, feed};

/// A `NETLINK_RDMA` socket bound to a kernel-assigned port.
///
/// Requests carry increasing sequence numbers; replies with another
/// sequence number (left over from an abandoned exchange) are skipped, as
/// are datagrams not sent by the kernel.
#[derive(Debug)]
pub struct NlSocket {
    pub(super) fd: OwnedFd,
    pub(super) seq: u32,
    pub(super) buf: Vec<u8>,
}

impl NlSocket {
    /// Open and bind a `NETLINK_RDMA` socket. [`Errno::EPROTONOSUPPORT`]
    /// means the kernel has no RDMA core (so no RDMA devices).
    pub fn open() -> Result<Self, Errno> {
        // SAFETY: plain syscall with constant arguments; no pointers.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::NETLINK_RDMA,
            )
        };
        if raw < 0 {
            return Err(Errno::last());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let tv = libc::timeval {
            tv_sec: RECV_TIMEOUT_SECS as libc::time_t,
            tv_usec: 0,
        };
        // SAFETY: `tv` is a live timeval and the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(Errno::last());
        }

        let addr = kernel_addr();
        // SAFETY: `addr` is a live sockaddr_nl and the length is its size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(Errno::last());
        }
        Ok(NlSocket {
            fd,
            seq: 0,
            buf: Vec::new(),
        })
    }

    /// Dump: send `nl_type` (for example `nldev_type(cmd::GET)`) with
    /// `NLM_F_REQUEST | NLM_F_DUMP` and the attributes `attrs`, then call
    /// `f` with the attribute bytes of each reply message until
    /// `NLMSG_DONE`. A kernel error ends the dump with its errno. If `f`
    /// fails, the rest of the dump is read and discarded (so the socket can
    /// dump again) and `f`'s error is returned.
    pub fn dump(
        &mut self,
        nl_type: u16,
        attrs: &[(u16, &[u8])],
        f: impl FnMut(&[u8]) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.exchange(nl_type, NLM_F_REQUEST | NLM_F_DUMP, attrs, f)
    }

    /// Single request (a "doit" command such as [`cmd::GET_CHARDEV`](crate::cmd::GET_CHARDEV)): send
    /// `nl_type` with `NLM_F_REQUEST | NLM_F_ACK` and `attrs`, call `f` with
    /// the attribute bytes of each reply message, and return at the
    /// kernel's acknowledgement (or its error).
    pub fn request(
        &mut self,
        nl_type: u16,
        attrs: &[(u16, &[u8])],
        f: impl FnMut(&[u8]) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.exchange(nl_type, NLM_F_REQUEST | NLM_F_ACK, attrs, f)
    }

    pub(super) fn exchange(
        &mut self,
        nl_type: u16,
        flags: u16,
        attrs: &[(u16, &[u8])],
        mut f: impl FnMut(&[u8]) -> Result<(), Errno>,
    ) -> Result<(), Errno> {
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        let mut req = Vec::new();
        encode_request(&mut req, nl_type, flags, seq, attrs)?;
        self.send(&req)?;

        let mut cb_err = None;
        loop {
            let n = match self.recv() {
                Ok(n) => n,
                Err(e) => return Err(cb_err.unwrap_or(e)),
            };
            if let Some(end) = feed(&self.buf[..n], seq, &mut cb_err, &mut f) {
                return end;
            }
        }
    }

    pub(super) fn send(&self, req: &[u8]) -> Result<(), Errno> {
        let addr = kernel_addr();
        loop {
            // SAFETY: `req` and `addr` are live for the call and the lengths
            // passed are theirs.
            let n = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    req.as_ptr().cast(),
                    req.len(),
                    0,
                    (&addr as *const libc::sockaddr_nl).cast(),
                    size_of::<libc::sockaddr_nl>() as libc::socklen_t,
                )
            };
            if n < 0 {
                match Errno::last() {
                    Errno::EINTR => continue,
                    e => return Err(e),
                }
            }
            return if n as usize == req.len() {
                Ok(())
            } else {
                Err(Errno::EIO)
            };
        }
    }

    /// Receive one datagram from the kernel into `self.buf`, growing it to
    /// the datagram's size (peeked with `MSG_PEEK | MSG_TRUNC`); returns
    /// its length. Datagrams from other senders are dropped.
    pub(super) fn recv(&mut self) -> Result<usize, Errno> {
        if self.buf.len() < RECV_BUF {
            self.buf.resize(RECV_BUF, 0);
        }
        loop {
            let want = self.recv_once(libc::MSG_PEEK | libc::MSG_TRUNC)?.0;
            if want > self.buf.len() {
                self.buf.resize(want, 0);
            }
            let (n, from_kernel) = self.recv_once(libc::MSG_TRUNC)?;
            if n > self.buf.len() {
                // The datagram changed between peek and read: cannot happen
                // with one reader; refuse rather than parse a partial one.
                return Err(Errno::EMSGSIZE);
            }
            if from_kernel {
                return Ok(n);
            }
        }
    }

    /// One `recvfrom` into `self.buf`: the datagram's full length (thanks to
    /// `MSG_TRUNC`) and whether the kernel (port 0) sent it.
    pub(super) fn recv_once(&mut self, flags: libc::c_int) -> Result<(usize, bool), Errno> {
        loop {
            // SAFETY: sockaddr_nl is plain old data; all-zero is valid.
            let mut from: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
            let mut from_len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
            // SAFETY: the buffer and `from` are live and writable for the
            // lengths passed; the kernel writes at most those many bytes.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr().cast(),
                    self.buf.len(),
                    flags,
                    (&mut from as *mut libc::sockaddr_nl).cast(),
                    &mut from_len,
                )
            };
            if n < 0 {
                match Errno::last() {
                    Errno::EINTR => continue,
                    Errno::EAGAIN => return Err(Errno::ETIMEDOUT),
                    e => return Err(e),
                }
            }
            let from_kernel = from_len as usize >= size_of::<libc::sockaddr_nl>()
                && from.nl_family as libc::c_int == libc::AF_NETLINK
                && from.nl_pid == 0;
            return Ok((n as usize, from_kernel));
        }
    }
}

/// The kernel's netlink address (port 0, no groups); also the bind address
/// (port 0 asks the kernel to assign one).
pub(super) fn kernel_addr() -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr
}
