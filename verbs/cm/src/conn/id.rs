//! The ucma commands on an id: creating it, its events, address and route
//! resolution, its options, preparing a QP for it, rejecting and migrating,
//! and the checks and conversions they share.

use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use rverbs_abi::qp::qp_type;
use rverbs_abi::ucma::{
    self, option_level, option_name, port_space, query_option, ConnParam, CreateId, InitQpAttr,
    Query, QueryAddrResp, Reject, ResolveAddr, SockaddrStorage,
};
use rverbs_abi::Errno;

use super::{next_uid, Id, Space, Wait};
use crate::channel::{CmEvent, EventChannel};
use crate::CmEventKind;
use crate::{qp_attr_from_kernel, CmError, ConnParams};
use rverbs::device::{Device, Guid};
use rverbs::error::{Error, InvalidKind, Result};
use rverbs::qp::{Qp, QpState};

impl Id {
    /// A new id on a channel of its own, in the port space `space`.
    pub(crate) fn create(space: Space) -> Result<Id> {
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

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.ch.fd()
    }

    /// The next event for this id or one of its multicast groups, by
    /// `deadline`; events for other ids (there are none on a channel of
    /// one id) are skipped.
    pub(crate) fn next_event(&self, deadline: Option<Instant>) -> Result<Option<CmEvent>> {
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
    pub(super) fn event_within(&self, step: &'static str, timeout: Duration) -> Result<CmEvent> {
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
    pub(crate) async fn expect<W: Wait>(
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
    pub(crate) fn query_addr(&self) -> Result<QueryAddrResp> {
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
    pub(super) fn modify_qp(
        &self,
        qp: &mut Qp,
        state: QpState,
        rd_atomic: Option<u8>,
    ) -> Result<()> {
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
    pub(super) fn ready_qp(&self, qp: &mut Qp, p: &ConnParams) -> Result<()> {
        self.modify_qp(qp, QpState::Init, None)?;
        self.modify_qp(qp, QpState::Rtr, Some(p.responder_resources))?;
        self.modify_qp(qp, QpState::Rts, Some(p.initiator_depth))
    }

    /// The step before posting receives: an RC QP goes to INIT; a UD QP
    /// to INIT with the CM's port, P_Key and Q_Key, then RTR and RTS (as
    /// librdmacm brings up the QP of a UDP-port-space id), unless it is
    /// past RESET already.
    pub(crate) fn prepare_qp(&self, qp: &mut Qp, device: &Device) -> Result<()> {
        check_qp(qp, device, self.space)?;
        match self.space {
            Space::Tcp => self.modify_qp(qp, QpState::Init, None),
            Space::Udp => {
                if qp.state() == QpState::Reset {
                    self.modify_qp(qp, QpState::Init, None)?;
                }
                if qp.state() == QpState::Init {
                    qp.modify(&rverbs::qp::QpAttr {
                        qp_state: Some(QpState::Rtr),
                        ..Default::default()
                    })?;
                }
                if qp.state() == QpState::Rtr {
                    qp.modify(&rverbs::qp::QpAttr {
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
    pub(crate) async fn resolve_addr<W: Wait>(
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
pub(crate) fn failure(ev: &CmEvent, step: &'static str) -> CmError {
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
/// enumerating every device each time: [`rverbs::device::device_by_guid`]).
pub(crate) fn device_of(resp: &QueryAddrResp) -> Result<Device> {
    let guid = Guid::from_raw_be(resp.node_guid);
    rverbs::device::device_by_guid(guid)?.ok_or(Error::Cm(CmError::NoDevice { guid }))
}

/// The addresses in a QUERY ADDR answer (`None` where the kernel's bytes
/// hold none).
pub(crate) fn addrs_of(resp: &QueryAddrResp) -> (Option<SocketAddr>, Option<SocketAddr>) {
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
pub(super) fn conn_param(qpn: u32, p: &ConnParams, max: usize) -> Result<ConnParam> {
    if p.private_data.len() > max {
        return Err(Error::invalid_as(
            InvalidKind::TooLarge,
            format!(
                "{} bytes of private data, at most {max} fit",
                p.private_data.len()
            ),
        ));
    }
    at_most("retry_count", p.retry_count, 7)?;
    at_most("rnr_retry_count", p.rnr_retry_count, 7)?;
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
pub(crate) fn check_qp(qp: &Qp, device: &Device, space: Space) -> Result<()> {
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
        rverbs_abi::ucma::set_option(self.fd(), self.handle, option_level::ID, name, value)
            .map_err(Error::kernel(what))
    }

    pub(super) fn set_tos(&self, tos: u8) -> Result<()> {
        self.set_option(
            option_name::ID_TOS,
            "rdma_set_option(RDMA_OPTION_ID_TOS)",
            &[tos],
        )
    }

    pub(super) fn set_reuseaddr(&self, on: bool) -> Result<()> {
        // An `int`, as the kernel reads it (any nonzero value is "on").
        self.set_option(
            option_name::ID_REUSEADDR,
            "rdma_set_option(RDMA_OPTION_ID_REUSEADDR)",
            &i32::from(on).to_ne_bytes(),
        )
    }

    pub(super) fn set_afonly(&self, on: bool) -> Result<()> {
        self.set_option(
            option_name::ID_AFONLY,
            "rdma_set_option(RDMA_OPTION_ID_AFONLY)",
            &i32::from(on).to_ne_bytes(),
        )
    }

    pub(super) fn set_ack_timeout(&self, timeout: u8) -> Result<()> {
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
    at_most("ack timeout", timeout, crate::MAX_ACK_TIMEOUT)
}

/// Refuses `v` above `max` as [`InvalidKind::TooLarge`], in the words of
/// rverbs' own QP attribute checks ("retry_count 9 exceeds 7").
fn at_most(name: &str, v: u8, max: u8) -> Result<()> {
    if v > max {
        return Err(Error::invalid_as(
            InvalidKind::TooLarge,
            format!("{name} {v} exceeds {max}"),
        ));
    }
    Ok(())
}

impl Id {
    /// REJECT with `private_data` (checked by the caller).
    pub(super) fn reject(&self, private_data: &[u8]) -> Result<()> {
        Id::reject_on(self.fd(), self.handle, private_data)
    }

    /// REJECT of the id `handle` of the channel `fd`.
    pub(super) fn reject_on(fd: BorrowedFd<'_>, handle: u32, private_data: &[u8]) -> Result<()> {
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
    pub(super) fn migrate_from(&self, from: BorrowedFd<'_>) -> Result<()> {
        rverbs_abi::ucma::migrate_id(self.fd(), self.handle, from)
            .map_err(Error::kernel("rdma_migrate_id"))
    }
}
