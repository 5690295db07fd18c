//! Connection-manager ids and what they become: a resolved active id, a
//! listener, a connection request, an established connection.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use rverbs_abi::qp::qp_type;
use rverbs_abi::ucma::{
    self, option_level, option_name, port_space, query_option, Accept, Bind, ConnParam, Connect,
    CreateId, Disconnect, InitQpAttr, Listen, Query, QueryAddrResp, Reject, ResolveAddr,
    ResolveRoute, SockaddrStorage,
};
use rverbs_abi::Errno;

use super::channel::{CmEvent, CmEventKind, EventChannel, UdInfo};
use super::{
    qp_attr_from_kernel, CmError, ConnParams, MAX_REJ_PRIVATE_DATA, MAX_REP_PRIVATE_DATA,
    MAX_REQ_PRIVATE_DATA, MAX_SIDR_REP_PRIVATE_DATA, MAX_SIDR_REQ_PRIVATE_DATA,
};
use crate::device::{Device, Guid};
use crate::error::{Error, InvalidKind, Result};
use crate::qp::{Qp, QpState, QpType};

/// A fresh nonzero cookie for an id's events: the kernel drops the events
/// of an id whose cookie is 0 (a request not yet accepted), so every id
/// this crate creates or accepts gets one.
pub(super) fn next_uid() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Which kind of QP an id connects: RC through the CM's REQ/REP/RTU (the
/// TCP port space) or UD through its SIDR exchange (the UDP port space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Tcp,
    Udp,
}

impl Space {
    fn qp_type(self) -> QpType {
        match self {
            Space::Tcp => QpType::Rc,
            Space::Udp => QpType::Ud,
        }
    }
}

/// An id and the channel it lives on (alone). Dropping the channel
/// destroys the id in the kernel.
#[derive(Debug)]
pub(crate) struct Id {
    pub(super) ch: EventChannel,
    pub(super) handle: u32,
    pub(super) space: Space,
    /// The cookie the id was created with (its events carry it).
    pub(super) uid: u64,
}

/// The id's event channel fd (readable when an event is queued), for an
/// async runtime to wait on; only the number, as for [`EventChannel`].
impl AsRawFd for Id {
    fn as_raw_fd(&self) -> RawFd {
        self.ch.as_raw_fd()
    }
}

/// How a handshake waits for its id's next event: the blocking API's
/// [`Blocking`] sleeps in `poll`; `rverbs::tokio`'s waits on its runtime.
/// Every handshake below is written once, as an `async fn` generic over
/// this, and the blocking API runs it with [`Blocking`] through [`block`].
pub(crate) trait Wait {
    /// `id`'s next event within `timeout`, or [`CmError::Timeout`] naming
    /// `step`.
    fn event<'a>(
        &'a mut self,
        id: &'a Id,
        step: &'static str,
        timeout: Duration,
    ) -> impl Future<Output = Result<CmEvent>> + 'a;
}

/// [`Wait`] by blocking the thread (the future is ready when made).
pub(crate) struct Blocking;

impl Wait for Blocking {
    fn event<'a>(
        &'a mut self,
        id: &'a Id,
        step: &'static str,
        timeout: Duration,
    ) -> impl Future<Output = Result<CmEvent>> + 'a {
        std::future::ready(id.event_within(step, timeout))
    }
}

/// Runs a handshake that waits with [`Blocking`] only: its future never
/// returns `Pending` (every wait inside is already done when awaited), so
/// one poll ends it.
pub(super) fn block<T>(f: impl Future<Output = Result<T>>) -> Result<T> {
    /// A waker nothing waits on.
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => Err(Error::invalid_as(
            InvalidKind::Other,
            "a blocking rdma_cm step did not finish (a bug in rverbs)",
        )),
    }
}

impl Id {
    /// A new id on a channel of its own, in the port space `space`.
    pub(super) fn create(space: Space) -> Result<Id> {
        let ch = EventChannel::new()?;
        let (ps, qpt) = match space {
            Space::Tcp => (port_space::TCP, qp_type::RC),
            Space::Udp => (port_space::UDP, qp_type::UD),
        };
        let uid = next_uid();
        let resp = ucma::exec(
            ch.fd(),
            &CreateId {
                uid,
                ps,
                qp_type: qpt,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_create_id"))?;
        Ok(Id {
            ch,
            handle: resp.id,
            space,
            uid,
        })
    }

    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.ch.fd()
    }

    /// The next event for this id or one of its multicast groups, by
    /// `deadline`; events for other ids (there are none on a channel of
    /// one id) are skipped.
    pub(super) fn next_event(&self, deadline: Option<Instant>) -> Result<Option<CmEvent>> {
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.ch.get_event(left)? {
                // A membership's events name the membership (the id JOIN
                // answered), not this id: the channel holds this id alone,
                // so every multicast event on it is one of its groups'.
                Some(ev) if ev.id() == self.handle || ev.kind().is_multicast() => {
                    return Ok(Some(ev))
                }
                Some(_) => continue,
                None => return Ok(None),
            }
        }
    }

    /// The next event within `timeout`, or [`CmError::Timeout`] for `step`.
    fn event_within(&self, step: &'static str, timeout: Duration) -> Result<CmEvent> {
        self.next_event(Instant::now().checked_add(timeout))?
            .ok_or(Error::Cm(CmError::Timeout {
                step,
                after: timeout,
            }))
    }

    /// The next event for this id if one is queued (never blocks).
    #[cfg(feature = "tokio")]
    pub(crate) fn try_event(&self) -> Result<Option<CmEvent>> {
        self.next_event(Some(Instant::now()))
    }

    /// Waits through `w` for `want`; the failure events become their
    /// [`CmError`].
    pub(super) async fn expect<W: Wait>(
        &self,
        w: &mut W,
        want: CmEventKind,
        step: &'static str,
        timeout: Duration,
    ) -> Result<CmEvent> {
        let ev = w.event(self, step, timeout).await?;
        if ev.kind() == want {
            return Ok(ev);
        }
        Err(Error::Cm(failure(&ev, step)))
    }

    /// QUERY's ADDR answer: the device, port and both addresses.
    pub(super) fn query_addr(&self) -> Result<QueryAddrResp> {
        ucma::exec(
            self.fd(),
            &Query {
                id: self.handle,
                option: query_option::ADDR,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_query_addr"))
    }

    /// Moves `qp` to `state` with the attributes the CM hands out for it.
    fn modify_qp(&self, qp: &mut Qp, state: QpState, rd_atomic: Option<u8>) -> Result<()> {
        let raw = ucma::exec(
            self.fd(),
            &InitQpAttr {
                id: self.handle,
                qp_state: u32::from(state.raw()),
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_init_qp_attr"))?;
        let mut attr = qp_attr_from_kernel(&raw);
        if let Some(n) = rd_atomic {
            match state {
                QpState::Rtr if attr.max_dest_rd_atomic.is_some() => {
                    attr.max_dest_rd_atomic = Some(n)
                }
                QpState::Rts if attr.max_rd_atomic.is_some() => attr.max_rd_atomic = Some(n),
                _ => {}
            }
        }
        qp.modify(&attr)
    }

    /// INIT (from RESET, or again from INIT: once the CM has its peer it
    /// hands out the access flags the connection allows), then RTR and
    /// RTS, as librdmacm moves a connected QP.
    fn ready_qp(&self, qp: &mut Qp, p: &ConnParams) -> Result<()> {
        self.modify_qp(qp, QpState::Init, None)?;
        self.modify_qp(qp, QpState::Rtr, Some(p.responder_resources))?;
        self.modify_qp(qp, QpState::Rts, Some(p.initiator_depth))
    }

    /// The step before posting receives: an RC QP goes to INIT; a UD QP
    /// to INIT with the CM's port, P_Key and Q_Key, then RTR and RTS (as
    /// librdmacm brings up the QP of a UDP-port-space id), unless it is
    /// past RESET already.
    pub(super) fn prepare_qp(&self, qp: &mut Qp, device: &Device) -> Result<()> {
        check_qp(qp, device, self.space)?;
        match self.space {
            Space::Tcp => self.modify_qp(qp, QpState::Init, None),
            Space::Udp => {
                if qp.state() == QpState::Reset {
                    self.modify_qp(qp, QpState::Init, None)?;
                }
                if qp.state() == QpState::Init {
                    qp.modify(&crate::qp::QpAttr {
                        qp_state: Some(QpState::Rtr),
                        ..Default::default()
                    })?;
                }
                if qp.state() == QpState::Rtr {
                    qp.modify(&crate::qp::QpAttr {
                        qp_state: Some(QpState::Rts),
                        sq_psn: Some(0),
                        ..Default::default()
                    })?;
                }
                match qp.state() {
                    QpState::Rts => Ok(()),
                    s => Err(Error::invalid_as(
                        InvalidKind::WrongUse,
                        format!("a UD QP in state {s:?} cannot be brought to RTS"),
                    )),
                }
            }
        }
    }
}

impl Id {
    /// RESOLVE_ADDR of `dst` (from `src`, unless the id is bound) with the
    /// kernel's timer at `ms` (`timeout` in milliseconds), and its event,
    /// awaited through `w` for `timeout` and one second more (a backstop:
    /// the kernel's own timer ends the step).
    pub(super) async fn resolve_addr<W: Wait>(
        &self,
        w: &mut W,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        ms: u32,
        timeout: Duration,
    ) -> Result<()> {
        let (dst_addr, dst_size) = SockaddrStorage::new(&dst);
        let (src_addr, src_size) = match src {
            Some(s) => SockaddrStorage::new(&s),
            None => (SockaddrStorage::default(), 0),
        };
        ucma::exec(
            self.fd(),
            &ResolveAddr {
                id: self.handle,
                timeout_ms: ms,
                src_size,
                dst_size,
                src_addr,
                dst_addr,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_resolve_addr"))?;
        // No overflow: `timeout` is under 2^32 ms.
        let backstop = timeout + Duration::from_secs(1);
        self.expect(w, CmEventKind::AddrResolved, "address resolution", backstop)
            .await?;
        Ok(())
    }
}

/// The error an event stands for when `step` expected another.
pub(super) fn failure(ev: &CmEvent, step: &'static str) -> CmError {
    let errno = || Errno::from_raw(ev.status().saturating_neg());
    match ev.kind() {
        CmEventKind::AddrError => CmError::AddrError { errno: errno() },
        CmEventKind::RouteError => CmError::RouteError { errno: errno() },
        CmEventKind::Rejected => CmError::Rejected {
            reason: ev.status(),
            private_data: ev.private_data().to_vec(),
        },
        CmEventKind::Unreachable => CmError::Unreachable { errno: errno() },
        CmEventKind::ConnectError => CmError::ConnectError { errno: errno() },
        k @ (CmEventKind::Disconnected | CmEventKind::DeviceRemoval) => CmError::Gone(k),
        got => CmError::Unexpected {
            step,
            got,
            status: ev.status(),
        },
    }
}

/// The RDMA device whose node GUID the CM answered with (found without
/// enumerating every device each time: [`crate::device::device_by_guid`]).
pub(super) fn device_of(resp: &QueryAddrResp) -> Result<Device> {
    let guid = Guid::from_raw_be(resp.node_guid);
    crate::device::device_by_guid(guid)?.ok_or(Error::Cm(CmError::NoDevice { guid }))
}

/// The addresses in a QUERY ADDR answer (`None` where the kernel's bytes
/// hold none).
pub(super) fn addrs_of(resp: &QueryAddrResp) -> (Option<SocketAddr>, Option<SocketAddr>) {
    let src = resp
        .src_addr
        .to_socket_addr(usize::from(resp.src_size))
        .ok();
    let dst = resp
        .dst_addr
        .to_socket_addr(usize::from(resp.dst_size))
        .ok();
    (src, dst)
}

/// `params` as the kernel's `rdma_ucm_conn_param` for the QP `qpn`,
/// refusing private data longer than `max` bytes.
fn conn_param(qpn: u32, p: &ConnParams, max: usize) -> Result<ConnParam> {
    if p.private_data.len() > max {
        return Err(Error::invalid_as(
            InvalidKind::TooLarge,
            format!(
                "{} bytes of private data, at most {max} fit",
                p.private_data.len()
            ),
        ));
    }
    crate::qp::attr::limit("retry_count", Some(u32::from(p.retry_count)), 7)?;
    crate::qp::attr::limit("rnr_retry_count", Some(u32::from(p.rnr_retry_count)), 7)?;
    let mut c = ConnParam {
        qp_num: qpn,
        responder_resources: p.responder_resources,
        initiator_depth: p.initiator_depth,
        flow_control: 1,
        retry_count: p.retry_count,
        rnr_retry_count: p.rnr_retry_count,
        valid: 1,
        ..Default::default()
    };
    c.set_private_data(&p.private_data)
        .map_err(Error::kernel("private data"))?;
    Ok(c)
}

/// Refuses a QP that is not of the id's type (RC for the TCP port space,
/// UD for the UDP one) on `device`.
pub(super) fn check_qp(qp: &Qp, device: &Device, space: Space) -> Result<()> {
    let want = space.qp_type();
    if qp.qp_type() != want {
        return Err(Error::invalid_as(
            InvalidKind::WrongUse,
            format!(
                "this rdma_cm id connects {want:?} QPs; this one is {:?}",
                qp.qp_type()
            ),
        ));
    }
    let mine = qp.pd().context().device();
    if mine.node_guid() != device.node_guid() {
        return Err(Error::Cm(CmError::WrongDevice {
            qp_device: mine.name().to_string(),
            cm_device: device.name().to_string(),
        }));
    }
    Ok(())
}

impl Id {
    /// SET_OPTION of the id level's option `name` (`what`: its name in
    /// errors) to the bytes of `value`.
    fn set_option(&self, name: u32, what: &'static str, value: &[u8]) -> Result<()> {
        crate::sys::cmd::set_option(self.fd(), self.handle, option_level::ID, name, value)
            .map_err(Error::kernel(what))
    }

    fn set_tos(&self, tos: u8) -> Result<()> {
        self.set_option(
            option_name::ID_TOS,
            "rdma_set_option(RDMA_OPTION_ID_TOS)",
            &[tos],
        )
    }

    fn set_reuseaddr(&self, on: bool) -> Result<()> {
        // An `int`, as the kernel reads it (any nonzero value is "on").
        self.set_option(
            option_name::ID_REUSEADDR,
            "rdma_set_option(RDMA_OPTION_ID_REUSEADDR)",
            &i32::from(on).to_ne_bytes(),
        )
    }

    fn set_afonly(&self, on: bool) -> Result<()> {
        self.set_option(
            option_name::ID_AFONLY,
            "rdma_set_option(RDMA_OPTION_ID_AFONLY)",
            &i32::from(on).to_ne_bytes(),
        )
    }

    fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        check_ack_timeout(timeout, self.space)?;
        self.set_option(
            option_name::ID_ACK_TIMEOUT,
            "rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)",
            &[timeout],
        )
    }
}

/// Refuses an ACK timeout a QP cannot take (the kernel's SET_OPTION takes
/// any byte and hands it back from INIT_QP_ATTR, where MODIFY_QP would
/// then fail mid-connect), and the option on a datagram id (the kernel
/// answers EINVAL: a UD QP has no ACK timeout).
pub(crate) fn check_ack_timeout(timeout: u8, space: Space) -> Result<()> {
    if space != Space::Tcp {
        return Err(Error::invalid_as(
            InvalidKind::WrongUse,
            "the ACK timeout is an RC QP's: a datagram (UD) id has none",
        ));
    }
    crate::qp::attr::limit(
        "ack timeout",
        Some(u32::from(timeout)),
        u32::from(super::MAX_ACK_TIMEOUT),
    )
}

/// An rdma_cm id before it resolves a destination or listens
/// (`rdma_create_id`): the stage where its options are set and, if
/// wanted, an address bound. It becomes a [`Resolved`]
/// ([`CmId::resolve`]) or a [`Listener`] ([`CmId::listen`]);
/// [`Resolved::resolve`] and [`Listener::bind`] are the same steps with
/// no option set.
///
/// ```no_run
/// use std::time::Duration;
/// use rverbs::cm::CmId;
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
    pub(super) id: Id,
    pub(super) bound: Option<SocketAddr>,
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
    /// [`ConnRequest::accept_ud`] requests, as
    /// [`Resolved::resolve_ud`] and [`Listener::bind_ud`] do.
    pub fn new_ud() -> Result<CmId> {
        Self::create(Space::Udp)
    }

    fn create(space: Space) -> Result<CmId> {
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
    /// ([`ConnRequest::set_ack_timeout`]).
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
pub(super) fn resolve_timeout_ms(timeout: Duration) -> Result<u32> {
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

/// An active id whose destination resolved to a local device, port and
/// path (`rdma_resolve_addr` + `rdma_resolve_route`): create the QP on
/// [`Resolved::device`] and [`Resolved::connect`].
#[derive(Debug)]
pub struct Resolved {
    id: Id,
    device: Device,
    port_num: u8,
    local: Option<SocketAddr>,
    peer: SocketAddr,
}

impl Resolved {
    /// Resolves `dst` (address, then route), waiting up to `timeout` for
    /// each step. Errors: [`CmError::AddrError`] (e.g. no RDMA device
    /// behind the address's route), [`CmError::RouteError`],
    /// [`CmError::Timeout`].
    pub fn resolve(dst: SocketAddr, timeout: Duration) -> Result<Resolved> {
        Self::resolve_from(None, dst, timeout)
    }

    /// [`Resolved::resolve`] from the local address `src` (its port
    /// ignored).
    pub fn resolve_from(
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        Self::resolve_in(Space::Tcp, src, dst, timeout)
    }

    /// [`Resolved::resolve`] for a datagram (UD) peer, in the UDP port
    /// space: follow with [`Resolved::connect_ud`] (a SIDR exchange,
    /// interoperable with librdmacm's `RDMA_PS_UDP`, e.g. `udaddy`).
    pub fn resolve_ud(dst: SocketAddr, timeout: Duration) -> Result<Resolved> {
        Self::resolve_ud_from(None, dst, timeout)
    }

    /// [`Resolved::resolve_ud`] from the local address `src` (its port
    /// ignored), as [`Resolved::resolve_from`] is to
    /// [`Resolved::resolve`].
    pub fn resolve_ud_from(
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        Self::resolve_in(Space::Udp, src, dst, timeout)
    }

    fn resolve_in(
        space: Space,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        block(Self::resolve_with(&mut Blocking, space, src, dst, timeout))
    }

    /// [`Resolved::resolve_in`], waiting through `w`: RESOLVE_ADDR, its
    /// event, RESOLVE_ROUTE, its event, each bounded by `timeout` in the
    /// kernel and by `timeout` and one second more in `w` (a backstop).
    pub(crate) async fn resolve_with<W: Wait>(
        w: &mut W,
        space: Space,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        let ms = resolve_timeout_ms(timeout)?;
        let id = Id::create(space)?;
        Self::resolve_id(w, id, src, dst, ms, timeout).await
    }

    /// [`CmId::resolve`], waiting through `w`.
    pub(crate) async fn resolve_cm_id_with<W: Wait>(
        w: &mut W,
        id: CmId,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<Resolved> {
        let ms = resolve_timeout_ms(timeout)?;
        Self::resolve_id(w, id.id, None, dst, ms, timeout).await
    }

    /// RESOLVE_ADDR and RESOLVE_ROUTE of `id` (from `src`, unless `id` is
    /// bound: the kernel then uses its bound address) with the kernel's
    /// timer at `ms` (`timeout` in milliseconds).
    async fn resolve_id<W: Wait>(
        w: &mut W,
        id: Id,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        ms: u32,
        timeout: Duration,
    ) -> Result<Resolved> {
        id.resolve_addr(w, src, dst, ms, timeout).await?;
        let backstop = timeout + Duration::from_secs(1);
        ucma::exec(
            id.fd(),
            &ResolveRoute {
                id: id.handle,
                timeout_ms: ms,
            },
        )
        .map_err(Error::kernel("rdma_resolve_route"))?;
        id.expect(w, CmEventKind::RouteResolved, "route resolution", backstop)
            .await?;
        let q = id.query_addr()?;
        let device = device_of(&q)?;
        let (local, _) = addrs_of(&q);
        Ok(Resolved {
            id,
            device,
            port_num: q.port_num,
            local,
            peer: dst,
        })
    }

    /// The device the destination is reached through: create the QP (and
    /// its PD, CQs and MRs) on it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device's port.
    pub fn port_num(&self) -> u8 {
        self.port_num
    }

    /// The local address chosen.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// The destination.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Moves `qp` (created on [`Resolved::device`]) to INIT with the CM's
    /// port and P_Key, so that receives can be posted before
    /// [`Resolved::connect`]. A UD QP (of [`Resolved::resolve_ud`]) is
    /// brought up to RTS, with the CM's Q_Key ([`super::UDP_QKEY`]).
    pub fn init_qp(&self, qp: &mut Qp) -> Result<()> {
        self.id.prepare_qp(qp, &self.device)
    }

    /// Sets the local ACK timeout the connected QP gets at RTS
    /// (`rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)`, as
    /// [`CmId::set_ack_timeout`]): call it before [`Resolved::connect`].
    /// Set here, after route resolution, it changes the QP's timeout only,
    /// not the path's packet lifetime (see [`CmId::set_ack_timeout`]).
    /// Errors as [`CmId::set_ack_timeout`]'s.
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        self.id.set_ack_timeout(timeout)
    }

    /// Connects the RC QP `qp` (in RESET, or INIT by [`Resolved::init_qp`];
    /// created on [`Resolved::device`])
    /// to the listener: INIT, CM REQ with `params`, then on the peer's
    /// answer RTR, RTS and the CM RTU. Errors: [`CmError::Rejected`] (with
    /// the reason and the peer's private data), [`CmError::Unreachable`],
    /// [`CmError::Timeout`] after `params.timeout`.
    pub fn connect(self, qp: Qp, params: &ConnParams) -> Result<Connection> {
        block(self.connect_with(&mut Blocking, qp, params))
    }

    /// [`Resolved::connect`], waiting through `w`.
    pub(crate) async fn connect_with<W: Wait>(
        self,
        w: &mut W,
        mut qp: Qp,
        params: &ConnParams,
    ) -> Result<Connection> {
        if self.id.space != Space::Tcp {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "a datagram id (Resolved::resolve_ud) connects with connect_ud",
            ));
        }
        check_qp(&qp, &self.device, Space::Tcp)?;
        let cp = conn_param(qp.qp_num(), params, MAX_REQ_PRIVATE_DATA)?;
        let id = self.id;
        id.modify_qp(&mut qp, QpState::Init, None)?;
        ucma::exec(
            id.fd(),
            &Connect {
                conn_param: cp,
                id: id.handle,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_connect"))?;
        let ev = w.event(&id, "the peer's answer", params.timeout).await?;
        match ev.kind() {
            CmEventKind::ConnectResponse => {
                id.ready_qp(&mut qp, params)?;
                // ACCEPT on the active side sends the RTU.
                ucma::exec(
                    id.fd(),
                    &Accept {
                        id: id.handle,
                        ..Default::default()
                    },
                )
                .map_err(Error::kernel("rdma_accept (RTU)"))?;
            }
            CmEventKind::Established => {}
            _ => return Err(Error::Cm(failure(&ev, "the peer's answer"))),
        }
        Ok(Connection {
            id,
            qp,
            peer_private: ev.private_data().to_vec(),
            peer_conn: ev.conn(),
            local: self.local,
            peer: Some(self.peer),
            disconnected: false,
        })
    }
}

impl Resolved {
    /// Asks the listener for its UD QP (the CM's SIDR REQ with
    /// `private_data`, at most [`MAX_SIDR_REQ_PRIVATE_DATA`] bytes) and
    /// waits up to `timeout` for the answer: the peer's QP number, Q_Key
    /// and the address vector towards it. `qp` (a UD QP on
    /// [`Resolved::device`]) is brought up first if it is not in RTS.
    /// Errors: [`CmError::Rejected`] with the SIDR status as reason (1:
    /// nobody listens on the port, 2: the application rejected, with its
    /// private data), [`CmError::Unreachable`] (no answer),
    /// [`CmError::Timeout`].
    pub fn connect_ud(self, qp: &mut Qp, private_data: &[u8], timeout: Duration) -> Result<UdInfo> {
        block(self.connect_ud_with(&mut Blocking, qp, private_data, timeout))
    }

    /// [`Resolved::connect_ud`], waiting through `w`.
    pub(crate) async fn connect_ud_with<W: Wait>(
        self,
        w: &mut W,
        qp: &mut Qp,
        private_data: &[u8],
        timeout: Duration,
    ) -> Result<UdInfo> {
        if self.id.space != Space::Udp {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "connect_ud needs an id of Resolved::resolve_ud (the UDP port space)",
            ));
        }
        let p = ConnParams {
            private_data: private_data.to_vec(),
            ..ConnParams::default()
        };
        let cp = conn_param(qp.qp_num(), &p, MAX_SIDR_REQ_PRIVATE_DATA)?;
        self.id.prepare_qp(qp, &self.device)?;
        let id = self.id;
        ucma::exec(
            id.fd(),
            &Connect {
                conn_param: cp,
                id: id.handle,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_connect (SIDR)"))?;
        let ev = w.event(&id, "the peer's SIDR answer", timeout).await?;
        match ev.kind() {
            CmEventKind::Established => Ok(ev.ud().clone()),
            // A SIDR REP whose status is not success: the status is the
            // event's (positive), the private data in the UD arm.
            CmEventKind::Unreachable if ev.status() > 0 => Err(Error::Cm(CmError::Rejected {
                reason: ev.status(),
                private_data: ev.ud().private_data.clone(),
            })),
            _ => Err(Error::Cm(failure(&ev, "the peer's SIDR answer"))),
        }
    }
}

/// A listening id: yields the connection requests to an address and port
/// (`rdma_listen`). Its fd is readable when a request is pending.
/// Dropping it rejects the requests not yet taken.
#[derive(Debug)]
pub struct Listener {
    id: Id,
    local: SocketAddr,
}

impl Listener {
    /// Binds to `addr` (port 0: one is chosen, see
    /// [`Listener::local_addr`]) and listens with a backlog of `backlog`
    /// requests. Errors: EADDRINUSE when the port is taken, ENODEV (a
    /// [`Error::Kernel`] from `rdma_bind_addr`) when `addr` is a local
    /// address without an RDMA device.
    pub fn bind(addr: SocketAddr, backlog: u32) -> Result<Listener> {
        Self::bind_in(Space::Tcp, addr, backlog)
    }

    /// [`Listener::bind`] in the UDP port space: the requests are for a
    /// UD QP, answered with [`ConnRequest::accept_ud`] (librdmacm's
    /// `RDMA_PS_UDP`, e.g. `udaddy`).
    pub fn bind_ud(addr: SocketAddr, backlog: u32) -> Result<Listener> {
        Self::bind_in(Space::Udp, addr, backlog)
    }

    fn bind_in(space: Space, addr: SocketAddr, backlog: u32) -> Result<Listener> {
        let mut id = CmId::create(space)?;
        id.bind(addr)?;
        id.listen(backlog)
    }

    /// The address and port listened on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The next connection request, waiting up to `timeout` (`None`:
    /// forever); `Ok(None)` when the time ran out. The request is moved to
    /// an event channel of its own.
    pub fn get_request(&self, timeout: Option<Duration>) -> Result<Option<ConnRequest>> {
        // A timeout past what an Instant can hold is no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let Some(ev) = self.id.ch.get_event(left)? else {
                return Ok(None);
            };
            match ev.kind() {
                CmEventKind::ConnectRequest => {
                    return ConnRequest::take(ev, self.id.fd(), self.id.space).map(Some)
                }
                CmEventKind::DeviceRemoval if ev.id() == self.id.handle => {
                    return Err(Error::Cm(CmError::Gone(CmEventKind::DeviceRemoval)))
                }
                // Events of requests not yet taken (a request given up
                // by its peer) or of the listener itself: nothing to do.
                _ => continue,
            }
        }
    }
}

impl Listener {
    /// Waits until a connection request (or another event) is queued,
    /// without taking it: `Ok(true)`, or `Ok(false)` when `timeout`
    /// (`None`: no limit) passed first.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        self.id.ch.wait(timeout)
    }
}

/// The number of the fd its events arrive on, for `poll`, `epoll` or an
/// event loop. Not [`AsFd`](std::os::fd::AsFd): see
/// [`EventChannel`]'s [`AsRawFd`].
impl AsRawFd for Listener {
    fn as_raw_fd(&self) -> RawFd {
        self.id.fd().as_raw_fd()
    }
}

/// A peer's request to connect (`RDMA_CM_EVENT_CONNECT_REQUEST`): answer it
/// with [`ConnRequest::accept`] or [`ConnRequest::reject`]; dropping it
/// unanswered rejects it.
#[derive(Debug)]
pub struct ConnRequest {
    /// `None` once answered (accept moves it into the connection).
    id: Option<Id>,
    device: Device,
    port_num: u8,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    private_data: Vec<u8>,
    conn: super::ConnInfo,
}

impl ConnRequest {
    /// Moves the new id of `ev` to a channel of its own and learns its
    /// device.
    fn take(ev: CmEvent, listener: BorrowedFd<'_>, space: Space) -> Result<ConnRequest> {
        let id = Id {
            ch: EventChannel::new()?,
            handle: ev.id(),
            space,
            // A request's id carries its listener's cookie.
            uid: ev.uid(),
        };
        if let Err(e) = id.migrate_from(listener) {
            // Still the listener's: reject it there.
            let _ = Id::reject_on(listener, ev.id(), &[]);
            return Err(e);
        }
        let q = id.query_addr()?;
        let device = device_of(&q)?;
        let (local, peer) = addrs_of(&q);
        Ok(ConnRequest {
            id: Some(id),
            device,
            port_num: q.port_num,
            local,
            peer,
            private_data: match space {
                Space::Tcp => ev.private_data().to_vec(),
                Space::Udp => ev.ud().private_data.clone(),
            },
            conn: ev.conn(),
        })
    }

    /// The private data the peer sent (rdma_cm's header stripped; on
    /// InfiniBand and RoCE padded with zeros by the CM to
    /// [`super::MAX_REQ_PRIVATE_DATA`] bytes: use
    /// [`super::private::unframe`] to read back exactly what a peer sent
    /// with [`super::private::frame`]).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The peer's connection parameters.
    pub fn conn(&self) -> super::ConnInfo {
        self.conn
    }

    /// The device the request came in on: create the QP on it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device's port.
    pub fn port_num(&self) -> u8 {
        self.port_num
    }

    /// The local address the peer connected to.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Moves `qp` (created on [`ConnRequest::device`]) to INIT with the
    /// CM's attributes, so that receives can be posted before
    /// [`ConnRequest::accept`]. A UD QP (a request of
    /// [`Listener::bind_ud`]) is brought up to RTS, with the CM's Q_Key
    /// ([`super::UDP_QKEY`]).
    pub fn init_qp(&self, qp: &mut Qp) -> Result<()> {
        self.id()?.prepare_qp(qp, &self.device)
    }

    /// Sets the local ACK timeout this side's QP gets at RTS
    /// (`rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT)` on the request's
    /// id): call it before [`ConnRequest::accept`]. Without it the QP
    /// takes the timeout the kernel's CM derives from the path. Errors as
    /// [`CmId::set_ack_timeout`]'s: above 31, or on a datagram request, an
    /// [`Error::InvalidArgument`] before any command.
    pub fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
        self.id()?.set_ack_timeout(timeout)
    }

    /// Accepts with the RC QP `qp` (in RESET, or INIT by
    /// [`ConnRequest::init_qp`]; created on [`ConnRequest::device`]): INIT,
    /// RTR, RTS, the CM REP with `params`, then waits up to
    /// `params.timeout` for the peer's RTU.
    pub fn accept(self, qp: Qp, params: &ConnParams) -> Result<Connection> {
        block(self.accept_with(&mut Blocking, qp, params))
    }

    /// [`ConnRequest::accept`], waiting through `w`.
    pub(crate) async fn accept_with<W: Wait>(
        mut self,
        w: &mut W,
        mut qp: Qp,
        params: &ConnParams,
    ) -> Result<Connection> {
        if self.id()?.space != Space::Tcp {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "a datagram request (Listener::bind_ud) is answered with accept_ud",
            ));
        }
        check_qp(&qp, &self.device, Space::Tcp)?;
        let cp = conn_param(qp.qp_num(), params, MAX_REP_PRIVATE_DATA)?;
        let id = self.id()?;
        id.ready_qp(&mut qp, params)?;
        ucma::exec(
            id.fd(),
            &Accept {
                uid: next_uid(),
                conn_param: cp,
                id: id.handle,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_accept"))?;
        // Answered: from here on a failure destroys the id, no reject.
        let id = self.id.take().ok_or_else(answered)?;
        id.expect(
            w,
            CmEventKind::Established,
            "the peer's RTU",
            params.timeout,
        )
        .await?;
        Ok(Connection {
            id,
            qp,
            peer_private: std::mem::take(&mut self.private_data),
            peer_conn: self.conn,
            local: self.local,
            peer: self.peer,
            disconnected: false,
        })
    }

    /// Answers a datagram request (of [`Listener::bind_ud`]) with the UD
    /// QP `qp` (on [`ConnRequest::device`]; brought up to RTS first if it
    /// is not) and `private_data` (at most [`MAX_SIDR_REP_PRIVATE_DATA`]
    /// bytes): the CM's SIDR REP gives the peer this QP's number and Q_Key
    /// and the address towards it. Nothing comes back: the peer's first
    /// datagram tells who it is ([`crate::Grh::reply_attr`] and the
    /// completion's source QP). The id is released here.
    pub fn accept_ud(mut self, qp: &mut Qp, private_data: &[u8]) -> Result<()> {
        let id = self.id()?;
        if id.space != Space::Udp {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "an RC request (Listener::bind) is answered with accept",
            ));
        }
        let p = ConnParams {
            private_data: private_data.to_vec(),
            ..ConnParams::default()
        };
        let mut cp = conn_param(qp.qp_num(), &p, MAX_SIDR_REP_PRIVATE_DATA)?;
        id.prepare_qp(qp, &self.device)?;
        cp.qkey = super::UDP_QKEY;
        ucma::exec(
            id.fd(),
            &Accept {
                uid: next_uid(),
                conn_param: cp,
                id: id.handle,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_accept (SIDR)"))?;
        // Answered: dropping the id now rejects nothing.
        self.id = None;
        Ok(())
    }

    /// Rejects with `private_data` (at most [`MAX_REJ_PRIVATE_DATA`]
    /// bytes, [`MAX_SIDR_REP_PRIVATE_DATA`] for a datagram request); the
    /// peer's connect fails with [`CmError::Rejected`], reason 28
    /// (consumer defined; a datagram peer: 2, the SIDR status "rejected").
    pub fn reject(mut self, private_data: &[u8]) -> Result<()> {
        let max = match self.id()?.space {
            Space::Tcp => MAX_REJ_PRIVATE_DATA,
            Space::Udp => MAX_SIDR_REP_PRIVATE_DATA,
        };
        if private_data.len() > max {
            return Err(Error::invalid_as(
                InvalidKind::TooLarge,
                format!(
                    "{} bytes of private data, at most {max} fit",
                    private_data.len()
                ),
            ));
        }
        let id = self.id.take().ok_or_else(answered)?;
        id.reject(private_data)
    }

    /// The id, while unanswered.
    fn id(&self) -> Result<&Id> {
        self.id.as_ref().ok_or_else(answered)
    }
}

/// The error of using a request already answered (not reachable through
/// the public API, which consumes the request).
fn answered() -> Error {
    Error::invalid_as(
        InvalidKind::WrongUse,
        "the connection request was already answered",
    )
}

impl Drop for ConnRequest {
    fn drop(&mut self) {
        if let Some(id) = &self.id {
            let _ = id.reject(&[]);
        }
    }
}

impl Id {
    /// REJECT with `private_data` (checked by the caller).
    fn reject(&self, private_data: &[u8]) -> Result<()> {
        Id::reject_on(self.fd(), self.handle, private_data)
    }

    /// REJECT of the id `handle` of the channel `fd`.
    fn reject_on(fd: BorrowedFd<'_>, handle: u32, private_data: &[u8]) -> Result<()> {
        let mut r = Reject {
            id: handle,
            ..Default::default()
        };
        r.set_private_data(private_data)
            .map_err(Error::kernel("rdma_reject"))?;
        ucma::exec(fd, &r).map_err(Error::kernel("rdma_reject"))?;
        Ok(())
    }

    /// Moves this id from the channel `from` (its listener's) to
    /// `self.ch`, with the events pending for it (MIGRATE_ID).
    fn migrate_from(&self, from: BorrowedFd<'_>) -> Result<()> {
        crate::sys::cmd::migrate_id(self.fd(), self.handle, from)
            .map_err(Error::kernel("rdma_migrate_id"))
    }
}

/// An established RC connection: the QP, the peer's private data, and the
/// id's events (pollable: [`Connection::wait`], or register its
/// [`AsRawFd`] with an event loop). Dropping it disconnects.
#[derive(Debug)]
pub struct Connection {
    id: Id,
    qp: Qp,
    peer_private: Vec<u8>,
    peer_conn: super::ConnInfo,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    disconnected: bool,
}

impl Connection {
    /// The connected QP.
    pub fn qp(&self) -> &Qp {
        &self.qp
    }

    /// The connected QP, to post to.
    pub fn qp_mut(&mut self) -> &mut Qp {
        &mut self.qp
    }

    /// The private data the peer answered with (accept) or requested with
    /// (connect), padded with zeros by the CM on InfiniBand and RoCE (to
    /// [`super::MAX_REP_PRIVATE_DATA`] bytes for an accept,
    /// [`super::MAX_REQ_PRIVATE_DATA`] for a request): see
    /// [`super::private`] for framing that survives the padding.
    pub fn private_data(&self) -> &[u8] {
        &self.peer_private
    }

    /// The peer's connection parameters.
    pub fn peer_conn(&self) -> super::ConnInfo {
        self.peer_conn
    }

    /// The local address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// Whether the connection was torn down (by either side).
    pub fn is_disconnected(&self) -> bool {
        self.disconnected
    }

    /// The next event of the connection, waiting up to `timeout` (`None`:
    /// forever); `Ok(None)` when the time ran out. On
    /// [`CmEventKind::Disconnected`] (or a device removal) the QP is moved
    /// to the error state: its outstanding work completes flushed.
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        // A timeout past what an Instant can hold is no timeout.
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let Some(ev) = self.id.ch.get_event(left)? else {
                return Ok(None);
            };
            if ev.id() != self.id.handle {
                continue;
            }
            if matches!(
                ev.kind(),
                CmEventKind::Disconnected | CmEventKind::DeviceRemoval
            ) {
                self.disconnected = true;
                self.flush_qp();
            }
            return Ok(Some(ev));
        }
    }

    /// Moves the QP to ERR so that posted work completes (flushed).
    fn flush_qp(&mut self) {
        if self.qp.state() != QpState::Err {
            let _ = self.qp.modify(&crate::qp::QpAttr {
                qp_state: Some(QpState::Err),
                ..Default::default()
            });
        }
    }

    /// Disconnects (CM DREQ; the peer sees [`CmEventKind::Disconnected`])
    /// and moves the QP to ERR. Does not wait for the peer's reply: its
    /// event follows on [`Connection::next_event`].
    pub fn disconnect(&mut self) -> Result<()> {
        if !self.disconnected {
            self.disconnected = true;
            ucma::exec(self.id.fd(), &Disconnect { id: self.id.handle })
                .map_err(Error::kernel("rdma_disconnect"))?;
        }
        self.flush_qp();
        Ok(())
    }
}

impl Connection {
    /// The fd its events arrive on, for a crate-internal `poll` beside
    /// other fds (the stream's CQ channel).
    pub(crate) fn cm_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.id.fd()
    }

    /// Waits until an event (a disconnect) is queued, without taking it:
    /// `Ok(true)`, or `Ok(false)` when `timeout` (`None`: no limit) passed
    /// first.
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        self.id.ch.wait(timeout)
    }
}

/// The number of the fd its events arrive on, for `poll`, `epoll` or an
/// event loop. Not [`AsFd`](std::os::fd::AsFd): see
/// [`EventChannel`]'s [`AsRawFd`].
impl AsRawFd for Connection {
    fn as_raw_fd(&self) -> RawFd {
        self.id.fd().as_raw_fd()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The channel closes after this, destroying the id (which
        // disconnects a connected id in the kernel anyway).
        let _ = self.disconnect();
    }
}
