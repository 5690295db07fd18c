//! Multicast through the rdma_cm (`rdma_join_multicast`,
//! `rdma_leave_multicast`): a datagram id resolved to the device behind a
//! multicast address ([`McastId`]), its groups joined and left, and what a
//! join gives a sender: the group's address vector, QPN 0xFFFFFF and the
//! Q_Key ([`McastGroup`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use rverbs_abi::ucma::{self, mc_join_flag, DestroyId, JoinMcast, LeaveMcast, SockaddrStorage};
use rverbs_abi::Errno;

use super::channel::{CmEvent, UdInfo};
use super::conn::{
    addrs_of, block, check_qp, device_of, next_uid, resolve_timeout_ms, Blocking, CmId, Id, Space,
    Wait,
};
use super::CmError;
use super::CmEventKind;
use rverbs::device::Device;
use rverbs::error::{Error, InvalidKind, Result};
use rverbs::gid::Gid;
use rverbs::qp::{AhAttr, Qp};

/// The QP number datagrams to a multicast group are sent to (the join's
/// [`UdInfo::qp_num`]).
pub const MCAST_QPN: u32 = 0x00ff_ffff;

/// How a group is joined (`RDMA_MC_JOIN_FLAG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum JoinMode {
    /// Send and receive: the QP given to [`McastId::join`] is attached to
    /// the group, and on RoCE the netdev joins the IP group (IGMP), so
    /// that the host takes the group's datagrams.
    #[default]
    FullMember,
    /// Send only (`RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`): the group's
    /// address vector for sending, no attachment and no IP group join.
    /// On RoCE the kernel has it from Linux 4.11 or so.
    SendOnlyFullMember,
}

impl JoinMode {
    fn raw(self) -> u16 {
        match self {
            JoinMode::FullMember => mc_join_flag::FULLMEMBER,
            JoinMode::SendOnlyFullMember => mc_join_flag::SENDONLY_FULLMEMBER,
        }
    }
}

/// A joined multicast group ([`McastId::join`]): what sending to it takes
/// (`pd.create_ah(group.ah_attr())`, then UD sends to
/// [`McastGroup::remote_qpn`] with [`McastGroup::qkey`]) and what
/// [`McastId::leave`] needs. Dropping it does not leave: the group is left
/// when the [`McastId`] is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McastGroup {
    addr: SocketAddr,
    mode: JoinMode,
    handle: u32,
    uid: u64,
    ud: UdInfo,
    attached: Option<u32>,
}

impl McastGroup {
    /// The multicast address joined.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How it was joined.
    pub fn mode(&self) -> JoinMode {
        self.mode
    }

    /// The join's datagram parameters as the kernel gave them: QPN
    /// 0xFFFFFF, the Q_Key, the group's address vector.
    pub fn ud(&self) -> &UdInfo {
        &self.ud
    }

    /// The address vector towards the group (create an
    /// [`Ah`](rverbs::Ah) from it): its GRH's destination is the group's
    /// GID ([`McastGroup::mgid`]), its `dlid` the multicast LID.
    pub fn ah_attr(&self) -> &AhAttr {
        &self.ud.ah_attr
    }

    /// The QP number to send to ([`MCAST_QPN`]).
    pub fn remote_qpn(&self) -> u32 {
        self.ud.qp_num
    }

    /// The Q_Key to send with (the id's: [`super::UDP_QKEY`] in the UDP
    /// port space).
    pub fn qkey(&self) -> u32 {
        self.ud.qkey
    }

    /// The group's GID (on RoCE v2, the IPv4-mapped multicast address).
    pub fn mgid(&self) -> Gid {
        self.ud.ah_attr.grh.map(|g| g.dgid).unwrap_or(Gid::ZERO)
    }

    /// The group's multicast LID (0 on RoCE).
    pub fn mlid(&self) -> u16 {
        self.ud.ah_attr.dlid
    }

    /// The number of the QP the join attached to the group, if any.
    pub fn attached_qpn(&self) -> Option<u32> {
        self.attached
    }
}

/// A datagram (UDP port space) rdma_cm id whose address resolved to a
/// device, for multicast: its QP is created on [`McastId::device`] and
/// brought up by [`McastId::init_qp`], then groups are joined
/// ([`McastId::join`]) and left ([`McastId::leave`]), as with librdmacm's
/// `rdma_resolve_addr` + `rdma_join_multicast` (and interoperable with
/// its `mckey`).
///
/// ```no_run
/// use std::time::Duration;
/// use rverbs_cm::{JoinMode, McastId};
/// use rverbs::{QpInitAttr, QpType};
/// # fn main() -> rverbs::Result<()> {
/// let t = Duration::from_secs(2);
/// let group = "239.1.1.1:0".parse().unwrap();
/// let mut id = McastId::resolve_from(Some("10.0.0.1:0".parse().unwrap()), group, t)?;
/// let ctx = id.device().open()?;
/// let (pd, cq) = (ctx.alloc_pd()?, ctx.create_cq(64)?);
/// let mut qp = pd.create_qp(&QpInitAttr::new(QpType::Ud, &cq))?;
/// id.init_qp(&mut qp)?;                       // RTS, with the id's Q_Key
/// // post receives, then join: the QP is attached when the join completes
/// let g = id.join(group, JoinMode::FullMember, Some(&mut qp), t)?;
/// let ah = pd.create_ah(g.ah_attr())?;        // send to g.remote_qpn(), g.qkey()
/// # let _ = ah;
/// id.leave(g, Some(&mut qp))?;                // detaches, then leaves
/// # Ok(()) }
/// ```
///
/// The id lives on an event channel of its own; dropping it leaves every
/// group still joined (the kernel's), and a QP stays attached until it is
/// detached or destroyed.
#[derive(Debug)]
pub struct McastId {
    id: Id,
    device: Device,
    port_num: u8,
    local: Option<SocketAddr>,
    /// (cookie, membership handle) of the groups joined and not left.
    groups: Vec<(u64, u32)>,
    /// Cookies of joins abandoned before their outcome came (a dropped
    /// `rverbs_cm::tokio::join_mcast` future): left at once, and their
    /// events, should one still come, dropped.
    abandoned: Vec<u64>,
    /// Events taken from the channel while a join awaited its own.
    pending: VecDeque<CmEvent>,
}

impl McastId {
    /// Resolves the multicast address `group` (its port ignored) to the
    /// local device and port it is reached through (`rdma_resolve_addr`
    /// only: a join needs the id resolved, not routed), on a new datagram
    /// id, waiting up to `timeout`. Without a route for the group (no
    /// default route, no multicast route), name the local address with
    /// [`McastId::resolve_from`]. Errors: ENETUNREACH from
    /// `rdma_resolve_addr` (an [`Error::Kernel`]) without a route,
    /// [`CmError::AddrError`], [`CmError::Timeout`].
    pub fn resolve(group: SocketAddr, timeout: Duration) -> Result<McastId> {
        Self::resolve_from(None, group, timeout)
    }

    /// [`McastId::resolve`] from the local address `src` (its port
    /// ignored): the group is reached through `src`'s device.
    pub fn resolve_from(
        src: Option<SocketAddr>,
        group: SocketAddr,
        timeout: Duration,
    ) -> Result<McastId> {
        block(Self::resolve_with(&mut Blocking, src, group, timeout))
    }

    /// [`McastId::resolve_from`], waiting through `w`.
    pub(crate) async fn resolve_with<W: Wait>(
        w: &mut W,
        src: Option<SocketAddr>,
        group: SocketAddr,
        timeout: Duration,
    ) -> Result<McastId> {
        let ms = resolve_timeout_ms(timeout)?;
        check_group(&group)?;
        let id = Id::create(Space::Udp)?;
        Self::resolve_id(w, id, src, group, ms, timeout).await
    }

    /// [`CmId::resolve_mcast`], waiting through `w`.
    pub(crate) async fn resolve_cm_id_with<W: Wait>(
        w: &mut W,
        id: CmId,
        group: SocketAddr,
        timeout: Duration,
    ) -> Result<McastId> {
        let ms = resolve_timeout_ms(timeout)?;
        check_group(&group)?;
        if id.id.space != Space::Udp {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                "multicast needs a datagram id (CmId::new_ud): this one is for RC connections",
            ));
        }
        Self::resolve_id(w, id.id, None, group, ms, timeout).await
    }

    async fn resolve_id<W: Wait>(
        w: &mut W,
        id: Id,
        src: Option<SocketAddr>,
        group: SocketAddr,
        ms: u32,
        timeout: Duration,
    ) -> Result<McastId> {
        id.resolve_addr(w, src, group, ms, timeout).await?;
        let q = id.query_addr()?;
        let device = device_of(&q)?;
        let (local, _) = addrs_of(&q);
        Ok(McastId {
            id,
            device,
            port_num: q.port_num,
            local,
            groups: Vec::new(),
            abandoned: Vec::new(),
            pending: VecDeque::new(),
        })
    }

    /// The device the group is reached through: create the QP (and its
    /// PD, CQ and MRs) on it.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The device's port.
    pub fn port_num(&self) -> u8 {
        self.port_num
    }

    /// The local address the id resolved from.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    /// Brings the UD QP `qp` (created on [`McastId::device`]) up to RTS
    /// with the CM's port, P_Key and Q_Key ([`super::UDP_QKEY`]), as
    /// librdmacm's `rdma_create_qp` does for a datagram id, so that
    /// receives can be posted before [`McastId::join`]. Errors: a QP that
    /// is not UD ([`InvalidKind::WrongUse`]), one on another device
    /// ([`CmError::WrongDevice`]).
    pub fn init_qp(&self, qp: &mut Qp) -> Result<()> {
        self.id.prepare_qp(qp, &self.device)
    }

    /// Joins the multicast group `group` (its port ignored; JOIN_MCAST)
    /// and waits up to `timeout` for the join to complete
    /// (`RDMA_CM_EVENT_MULTICAST_JOIN`). With `qp` (a UD QP on
    /// [`McastId::device`], brought up to RTS first if it is not, as
    /// [`McastId::init_qp`] does) and a [`JoinMode::FullMember`] join,
    /// the QP is then attached to the group ([`Qp::attach_mcast`]) with
    /// the group's GID and LID from the join, as librdmacm attaches the
    /// id's QP; a send-only join attaches nothing. On RoCE the kernel
    /// completes the join itself (no subnet manager): the group's GID is
    /// the address's (IPv4-mapped), and a full member's netdev joins the
    /// IP group.
    ///
    /// Errors: before any command ([`Error::InvalidArgument`]), a `group`
    /// that is not a multicast address, a `qp` that is not UD or is on
    /// another device; from the kernel: the JOIN command's errno (EINVAL:
    /// e.g. an address of the other family than the id resolved), a join
    /// that fails
    /// ([`CmError::JoinError`] with the kernel's errno, e.g. ENOTSUPP
    /// (524) for an IPv6 group on RoCE v2), [`CmError::Timeout`], and the
    /// attach's errors. A join that fails after the command is left
    /// again before the error returns.
    pub fn join(
        &mut self,
        group: SocketAddr,
        mode: JoinMode,
        qp: Option<&mut Qp>,
        timeout: Duration,
    ) -> Result<McastGroup> {
        block(self.join_with(&mut Blocking, group, mode, qp, timeout))
    }

    /// [`McastId::join`], waiting through `w`.
    pub(crate) async fn join_with<W: Wait>(
        &mut self,
        w: &mut W,
        group: SocketAddr,
        mode: JoinMode,
        mut qp: Option<&mut Qp>,
        timeout: Duration,
    ) -> Result<McastGroup> {
        check_group(&group)?;
        if let Some(qp) = qp.as_deref_mut() {
            check_qp(qp, &self.device, Space::Udp)?;
            self.id.prepare_qp(qp, &self.device)?;
        }
        let uid = next_uid();
        let (addr, addr_size) = SockaddrStorage::new(&group);
        let resp = ucma::exec(
            self.id.fd(),
            &JoinMcast {
                uid,
                id: self.id.handle,
                addr_size,
                join_flags: mode.raw(),
                addr,
                ..Default::default()
            },
        )
        .map_err(Error::kernel("rdma_join_multicast"))?;
        // From here until the outcome is in, dropping the future (or a
        // failure) leaves the group again: no membership, and no event of
        // it for a later join to take.
        let mut pending = PendingJoin {
            id: self,
            uid,
            handle: resp.id,
            settled: false,
        };
        let ud = pending.id.await_join(w, uid, timeout).await?;
        let mut g = McastGroup {
            addr: group,
            mode,
            handle: resp.id,
            uid,
            ud,
            attached: None,
        };
        if let (Some(qp), JoinMode::FullMember) = (qp, mode) {
            qp.attach_mcast(&g.mgid(), g.mlid())?;
            g.attached = Some(qp.qp_num());
        }
        pending.settled = true;
        pending.id.groups.push((uid, resp.id));
        Ok(g)
    }

    /// Waits through `w` for the outcome of the join whose cookie is
    /// `uid`: its MULTICAST_JOIN (the UD parameters) or MULTICAST_ERROR.
    /// Other groups' events and the id's own are kept for
    /// [`McastId::next_event`]; a device removal ends the wait.
    async fn await_join<W: Wait>(
        &mut self,
        w: &mut W,
        uid: u64,
        timeout: Duration,
    ) -> Result<UdInfo> {
        const STEP: &str = "the multicast join";
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(timeout, |d| d.saturating_duration_since(Instant::now()));
            let ev = w.event(&self.id, STEP, left).await?;
            // Kernels name a group's events by the cookie the join gave
            // (some patched ones by the id's own): only those are this
            // join's. An abandoned join's event is dropped; any other
            // waits for next_event.
            if ev.kind().is_multicast() && self.abandoned.contains(&ev.uid()) {
                continue;
            }
            let ours = ev.kind().is_multicast() && (ev.uid() == uid || ev.uid() == self.id.uid);
            if ours {
                return match ev.kind() {
                    CmEventKind::MulticastJoin if ev.status() == 0 => Ok(ev.ud().clone()),
                    _ => Err(Error::Cm(CmError::JoinError {
                        errno: Errno::from_raw(ev.status().saturating_neg()),
                    })),
                };
            }
            if ev.kind() == CmEventKind::DeviceRemoval {
                return Err(Error::Cm(CmError::Gone(CmEventKind::DeviceRemoval)));
            }
            self.pending.push_back(ev);
        }
    }

    /// Leaves `group` (LEAVE_MCAST), detaching first the QP the join
    /// attached ([`Qp::detach_mcast`], as librdmacm detaches the id's QP):
    /// give that QP as `qp`. With `qp` `None` the QP stays attached until
    /// it is detached or destroyed. Events of the group not yet taken are
    /// dropped.
    ///
    /// Errors, before any command ([`InvalidKind::WrongUse`]): a group of
    /// another id, a `qp` other than the one attached. The detach's and
    /// the LEAVE command's errors come back as [`Error::Kernel`] (the
    /// group is left in the kernel even when the detach failed).
    pub fn leave(&mut self, group: McastGroup, qp: Option<&mut Qp>) -> Result<()> {
        let Some(at) = self
            .groups
            .iter()
            .position(|&(u, h)| u == group.uid && h == group.handle)
        else {
            return Err(Error::invalid_as(
                InvalidKind::WrongUse,
                format!("{} is not a group joined on this id", group.addr),
            ));
        };
        let mut detached = Ok(());
        if let (Some(qpn), Some(qp)) = (group.attached, qp) {
            if qp.qp_num() != qpn {
                return Err(Error::invalid_as(
                    InvalidKind::WrongUse,
                    format!(
                        "the join attached QP {qpn:#x} to {}, not QP {:#x}",
                        group.addr,
                        qp.qp_num()
                    ),
                ));
            }
            detached = qp.detach_mcast(&group.mgid(), group.mlid());
        }
        self.groups.swap_remove(at);
        self.leave_handle(group.handle, group.uid)?;
        detached
    }

    /// LEAVE_MCAST of the membership `handle`, and the drop of its queued
    /// events (cookie `uid`).
    fn leave_handle(&mut self, handle: u32, uid: u64) -> Result<()> {
        self.pending
            .retain(|ev| !(ev.kind().is_multicast() && ev.uid() == uid));
        ucma::exec(
            self.id.fd(),
            &LeaveMcast(DestroyId {
                id: handle,
                ..Default::default()
            }),
        )
        .map_err(Error::kernel("rdma_leave_multicast"))?;
        Ok(())
    }

    /// The next event of the id or of its groups (a later
    /// `MULTICAST_ERROR`, an address change, a device removal), waiting
    /// up to `timeout` (`None`: forever); `Ok(None)` when the time ran
    /// out. Which group an event is of: [`McastId::is_event_of`].
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Option<CmEvent>> {
        if let Some(ev) = self.pending.pop_front() {
            return Ok(Some(ev));
        }
        self.id
            .next_event(timeout.and_then(|t| Instant::now().checked_add(t)))
    }

    /// Whether `ev` is an event of `group` (as opposed to the id's own or
    /// another group's).
    pub fn is_event_of(&self, ev: &CmEvent, group: &McastGroup) -> bool {
        ev.kind().is_multicast() && ev.uid() == group.uid
    }
}

/// How many abandoned joins' cookies an id keeps.
const ABANDONED_KEPT: usize = 64;

/// A join whose JOIN command went out and whose outcome is not settled:
/// dropped unsettled (the join failed, or its future was dropped
/// mid-join), it leaves the membership, drops its queued events and
/// remembers its cookie as abandoned.
struct PendingJoin<'a> {
    id: &'a mut McastId,
    uid: u64,
    handle: u32,
    settled: bool,
}

impl Drop for PendingJoin<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // The kernel drops a left membership's queued events: the list
        // only guards against a straggler, so it keeps the latest few.
        if self.id.abandoned.len() >= ABANDONED_KEPT {
            self.id.abandoned.remove(0);
        }
        self.id.abandoned.push(self.uid);
        // Nothing to report to: a failure to leave leaves the membership
        // to the id's destruction, as the kernel does.
        let _ = self.id.leave_handle(self.handle, self.uid);
    }
}

/// The number of the fd its events arrive on, for `poll`, `epoll` or an
/// event loop. Not [`AsFd`](std::os::fd::AsFd): see
/// [`super::EventChannel`]'s [`AsRawFd`].
impl AsRawFd for McastId {
    fn as_raw_fd(&self) -> RawFd {
        self.id.as_raw_fd()
    }
}

/// Refuses an address that is not multicast (the kernel would resolve
/// it, and the join fail later with EINVAL).
fn check_group(group: &SocketAddr) -> Result<()> {
    if !group.ip().is_multicast() {
        return Err(Error::invalid_as(
            InvalidKind::Other,
            format!("{} is not a multicast address", group.ip()),
        ));
    }
    Ok(())
}

impl CmId {
    /// Resolves the multicast address `group` as [`McastId::resolve`]
    /// does, from the address bound by [`CmId::bind`] if any (its family
    /// must be `group`'s). The id must be a datagram one
    /// ([`CmId::new_ud`]; [`InvalidKind::WrongUse`] otherwise, before any
    /// command).
    pub fn resolve_mcast(self, group: SocketAddr, timeout: Duration) -> Result<McastId> {
        block(McastId::resolve_cm_id_with(
            &mut Blocking,
            self,
            group,
            timeout,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_must_be_multicast() {
        for ok in ["224.0.0.1:0", "239.255.1.2:7", "[ff0e::1]:0"] {
            check_group(&ok.parse().unwrap()).unwrap();
        }
        for bad in ["10.0.0.1:0", "0.0.0.0:0", "[::1]:0", "[::ffff:224.0.0.1]:0"] {
            let e = check_group(&bad.parse().unwrap()).unwrap_err();
            assert!(e.to_string().contains("not a multicast address"), "{e}");
        }
    }

    #[test]
    fn join_modes_are_the_kernels_flags() {
        assert_eq!(JoinMode::FullMember.raw(), 0);
        assert_eq!(JoinMode::SendOnlyFullMember.raw(), 1);
        assert_eq!(JoinMode::default(), JoinMode::FullMember);
    }
}
