//! [`CmId`]: a fresh id, bound or not, before it resolves or listens.

use std::net::SocketAddr;
use std::time::Duration;

use rverbs_abi::ucma::{self, Bind, Listen, SockaddrStorage};

use super::id::addrs_of;
use super::listener::Listener;
use super::resolved::Resolved;
use super::{block, Blocking, Id, Space};
use rverbs::error::{Error, InvalidKind, Result};

/// An rdma_cm id before it resolves a destination or listens
/// (`rdma_create_id`): the stage where its options are set and, if
/// wanted, an address bound. It becomes a [`Resolved`]
/// ([`CmId::resolve`]) or a [`Listener`] ([`CmId::listen`]);
/// [`Resolved::resolve`] and [`Listener::bind`] are the same steps with
/// no option set.
///
/// ```no_run
/// use std::time::Duration;
/// use rverbs_cm::CmId;
/// # fn main() -> rverbs::Result<()> {
/// let id = CmId::new()?;
/// id.set_tos(0x68)?;          // before resolution: the route takes it
/// id.set_ack_timeout(16)?;    // the QP's ACK timeout at RTS
/// let resolved = id.resolve("10.0.0.1:7471".parse().unwrap(), Duration::from_secs(2))?;
/// // ... the QP on resolved.device(), then resolved.connect(qp, &params)
/// # let _ = resolved;
///
/// let mut id = CmId::new()?;
/// id.set_reuseaddr(true)?;    // before bind
/// id.bind("10.0.0.1:7471".parse().unwrap())?;
/// let listener = id.listen(16)?;
/// # let _ = listener;
/// # Ok(()) }
/// ```
///
/// Each option is one SET_OPTION command, sent when the method is
/// called: a value the library can tell is wrong is refused before
/// (an [`Error::InvalidArgument`]); what the kernel refuses comes back as
/// an [`Error::Kernel`] naming the option (`rdma_set_option(...)`) with
/// its errno, EINVAL for an option set in a state that no longer takes
/// it. Dropping the id destroys it (and frees its port).
#[derive(Debug)]
pub struct CmId {
    pub(crate) id: Id,
    pub(crate) bound: Option<SocketAddr>,
}

impl CmId {
    /// A new id for RC connections (the TCP port space, as
    /// `rdma_create_id(.., RDMA_PS_TCP)`), on an event channel of its own.
    pub fn new() -> Result<CmId> {
        Self::create(Space::Tcp)
    }

    /// A new id for datagram (UD) peers (the UDP port space, as
    /// `RDMA_PS_UDP`): [`CmId::resolve`] gives a [`Resolved`] for
    /// [`Resolved::connect_ud`], [`CmId::listen`] a listener of
    /// [`ConnRequest::accept_ud`](crate::ConnRequest::accept_ud) requests, as
    /// [`Resolved::resolve_ud`] and [`Listener::bind_ud`] do.
    pub fn new_ud() -> Result<CmId> {
        Self::create(Space::Udp)
    }

    pub(super) fn create(space: Space) -> Result<CmId> {
        Ok(CmId {
            id: Id::create(space)?,
            bound: None,
        })
    }

    /// Sets the type of service (`rdma_set_option(RDMA_OPTION_ID_TOS)`,
    /// librdmacm's `rdma_set_service_type`): on RoCE the IP header's
    /// traffic class (DSCP and ECN bits) of the connection's packets, and
    /// the service level the kernel maps it to. Call it **before
    /// [`CmId::resolve`]**: route resolution copies it into the path the
    /// QP's address vector is built from (this side's; the passive side's
    /// QP takes the traffic class the request carries). Without it the
    /// port's default (`default_roce_tos` in the rdma_cm configfs, 0) is
    /// used. Every value is valid.
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        self.id.set_tos(tos)
    }

    /// Lets this id share its address and port with other ids that set
    /// it too (`rdma_set_option(RDMA_OPTION_ID_REUSEADDR)`). Call it
    /// **before [`CmId::bind`]** (or before resolving, which binds
    /// implicitly): the kernel checks the port when binding. Two ids bound
    /// to the same address and port both need it; a listening id never
    /// shares its port, so [`CmId::listen`] on an address another id
    /// holds fails with EADDRINUSE. Errors: EINVAL (an [`Error::Kernel`])
    /// when turning it off after the bind.
    pub fn set_reuseaddr(&self, on: bool) -> Result<()> {
        self.id.set_reuseaddr(on)
    }

    /// Whether a bind of an IPv6 address takes the port for IPv6 only
    /// (`rdma_set_option(RDMA_OPTION_ID_AFONLY)`, as `IPV6_V6ONLY`). Call
    /// it **before [`CmId::bind`]**: with `true`, an id bound to `[::]`
    /// leaves the same port free for IPv4 ids; with `false` an IPv4 bind
    /// of that port fails (EADDRNOTAVAIL: the kernel finds the IPv6
    /// wildcard in the way). Not set, an IPv6 id follows the
    /// `net.ipv6.bindv6only` sysctl (0: not AF-only) and an IPv4 id is
    /// AF-only. Errors: EINVAL once the id resolves or listens (the kernel
    /// takes it while the id is new or bound only).
    pub fn set_afonly(&self, on: bool) -> Result<()> {
        self.id.set_afonly(on)
    }

    /// Sets the local ACK timeout of the QP the id connects
    /// (`rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`): 4.096 us *
    /// 2^`timeout` (0: wait forever), which the kernel's CM hands out for
    /// RTS (INIT_QP_ATTR) and this library applies as it moves the QP
    /// there, as librdmacm does. Call it before connecting; here, before
    /// [`CmId::resolve`], the kernel also derives the RoCE path's packet
    /// lifetime from it (`timeout - 1`), which paces the CM's own
    /// retries (and which wraps for 0: set 0 after resolution): to change
    /// the QP's timeout only, set it on the [`Resolved`] instead
    /// ([`Resolved::set_ack_timeout`]); the passive side sets its own
    /// ([`ConnRequest::set_ack_timeout`](crate::ConnRequest::set_ack_timeout)).
    ///
    /// Errors, before any command ([`Error::InvalidArgument`]): `timeout`
    /// above 31 ([`InvalidKind::TooLarge`]; the QP's field has 5 bits),
    /// and a datagram id ([`CmId::new_ud`], [`InvalidKind::WrongUse`]: a
    /// UD QP has no ACK timeout).
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        self.id.set_ack_timeout(timeout)
    }

    /// Binds the id to `addr` (`rdma_bind_addr`; port 0: the kernel picks
    /// one) and returns the address bound, with its port. A specific IP
    /// address must be one of this host's with an RDMA device behind it
    /// (ENODEV otherwise); a wildcard (`0.0.0.0`, `[::]`) is not tied to
    /// a device. Errors (an [`Error::Kernel`] from `rdma_bind_addr`):
    /// EADDRINUSE when another id holds the same address and port without
    /// both setting [`CmId::set_reuseaddr`], EADDRNOTAVAIL when one of the
    /// two is a wildcard (see [`CmId::set_afonly`] for IPv4 beside IPv6),
    /// EINVAL when the id is bound already.
    pub fn bind(&mut self, addr: SocketAddr) -> Result<SocketAddr> {
        let (sa, size) = SockaddrStorage::new(&addr);
        ucma::exec(
            self.id.fd(),
            &Bind {
                id: self.id.handle,
                addr_size: size,
                addr: sa,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_bind_addr"))?;
        let local = addrs_of(&self.id.query_addr()?).0.unwrap_or(addr);
        self.bound = Some(local);
        Ok(local)
    }

    /// The address bound by [`CmId::bind`], `None` before.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.bound
    }

    /// Resolves `dst` (address, then route), waiting up to `timeout` for
    /// each step, as [`Resolved::resolve`] does; from the bound address
    /// if [`CmId::bind`] was called (its family must be `dst`'s: EINVAL
    /// otherwise).
    pub fn resolve(self, dst: SocketAddr, timeout: Duration) -> Result<Resolved> {
        block(Resolved::resolve_cm_id_with(
            &mut Blocking,
            self,
            dst,
            timeout,
        ))
    }

    /// Listens with a backlog of `backlog` requests (`rdma_listen`), as
    /// [`Listener::bind`] does, on the address bound by [`CmId::bind`]
    /// (not bound: on `0.0.0.0` and a port the kernel picks, see
    /// [`Listener::local_addr`]). Errors: EADDRINUSE when another id is
    /// bound to the same address and port (even with
    /// [`CmId::set_reuseaddr`]: a listener's port is its own).
    pub fn listen(self, backlog: u32) -> Result<Listener> {
        let id = self.id;
        ucma::exec(
            id.fd(),
            &Listen {
                id: id.handle,
                backlog,
            },
        )
        .map_err(Error::kernel("rdma_listen"))?;
        let local = match self.bound {
            Some(a) => a,
            None => addrs_of(&id.query_addr()?)
                .0
                .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
        };
        Ok(Listener { id, local })
    }
}

/// `timeout` in whole milliseconds for the kernel's resolution timers,
/// refused when it is zero or does not fit in 32 bits.
pub(crate) fn resolve_timeout_ms(timeout: Duration) -> Result<u32> {
    u32::try_from(timeout.as_millis())
        .ok()
        .filter(|&ms| ms > 0)
        .ok_or_else(|| {
            Error::invalid_as(
                InvalidKind::TooLarge,
                format!("timeout {timeout:?} out of range"),
            )
        })
}
