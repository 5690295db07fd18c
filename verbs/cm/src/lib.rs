//! rdma_cm and rsockets in pure Rust, built on [`rverbs`] as librdmacm is
//! built on libibverbs.
//!
//! This crate connects by IP address and port through the kernel's RDMA
//! connection manager (`/dev/infiniband/rdma_cm`, the ucma ABI 4), as
//! librdmacm does for C, with no C. Its byte streams ([`stream`]) speak
//! librdmacm's rsockets protocol; with the `tokio` feature, `rverbs_cm::tokio`
//! awaits every step on a tokio runtime. Its objects are `rverbs`'
//! objects (a [`Connection`]'s QP is an [`rverbs::Qp`]) and its failures
//! are [`rverbs::Error`]s ([`CmError`] for what the CM reported).
//!
//! The active side resolves an address to a device, port and path
//! ([`Resolved::resolve`]), creates its QP on that device and connects
//! ([`Resolved::connect`]); the passive side listens on an address and
//! port ([`Listener::bind`]) and answers each [`ConnRequest`] with
//! [`ConnRequest::accept`] or [`ConnRequest::reject`]. The QP of a
//! [`Connection`] is an ordinary [`Qp`](rverbs::Qp), moved through
//! INIT/RTR/RTS with the attributes the kernel's CM hands out
//! (INIT_QP_ATTR). Every wait has a timeout; failures are typed
//! ([`CmError`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use rverbs_cm::{ConnParams, Resolved};
//! use rverbs::{QpCap, QpInitAttr, QpType};
//! # fn main() -> rverbs::Result<()> {
//! let id = Resolved::resolve("10.0.0.1:7471".parse().unwrap(), Duration::from_secs(2))?;
//! let ctx = id.device().open()?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(16)?;
//! let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap::default()))?;
//! let mut conn = id.connect(qp, &ConnParams::default())?;
//! // post to conn.qp_mut(), poll cq...
//! conn.disconnect()?;
//! # Ok(()) }
//! ```
//!
//! **One [`Context`](rverbs::Context) per device serves every connection.**
//! [`Resolved::device`] and [`ConnRequest::device`] name the device the
//! route goes through; open it once (and allocate a PD once) and create
//! each connection's QP there: a server does not open the device per
//! request. Compare the named device with the one you opened
//! ([`Device::node_guid`](rverbs::Device::node_guid)) where a host has
//! several.
//!
//! Each id lives on an [`EventChannel`] of its own (a connection request
//! is moved to a new channel when it is taken from its listener), so a
//! [`Connection`]'s fd reports its events only and dropping it tears down
//! that connection only.

#![deny(missing_docs)]
// Clean, so denied (issue 44): nothing `pub` that no one outside can
// name, and one unsafe operation per block, each with its own SAFETY line.
#![deny(unreachable_pub)]
#![deny(clippy::multiple_unsafe_ops_per_block)]
// docs.rs (`--cfg docsrs`, see Cargo.toml) marks feature-gated items.
#![cfg_attr(docsrs, feature(doc_cfg))]
// `unsafe` lives in `sys` (the timerfd of the async waits) and in the
// `OwnsFd` implementations of the fd owners tokio registers, each allowed
// where it stands with its SAFETY line.
#![deny(unsafe_code)]

mod channel;
mod conn;
mod mcast;
pub mod private;

use std::time::Duration;

#[cfg(test)]
pub(crate) use channel::test_path as channel_test_path;
pub use channel::{CmEvent, ConnInfo, EventChannel, UdInfo, RDMA_CM_PATH};
pub use conn::{CmId, ConnRequest, Connection, Listener, Resolved};
#[cfg(feature = "tokio")]
pub(crate) use conn::{Id, Space, Wait};
pub use mcast::{JoinMode, McastGroup, McastId, MCAST_QPN};
pub use rverbs::error::{CmError, CmEventKind};

use rverbs_abi::ah::AhAttr as RawAhAttr;
use rverbs_abi::qp::{attr_mask as m, QpAttr as RawQpAttr};

use rverbs::gid::Gid;
use rverbs::mr::AccessFlags;
use rverbs::qp::{AhAttr, GlobalRoute, Mtu, QpAttr, QpState};

#[cfg(feature = "tokio")]
#[allow(unsafe_code)]
mod sys;

pub mod stream;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio;

/// The book's chapters on this crate (`docs/book/src/api`), compiled as
/// doc tests so their Rust code keeps building: `cargo test --doc -p
/// rverbs-cm`, the tokio chapter with `--features tokio`. The other
/// chapters are `rverbs`' (its module `book`); `cargo xtask book` checks
/// that each is included once.
#[cfg(doctest)]
mod book {
    #[doc = include_str!("../../../docs/book/src/api/cm.md")]
    struct ApiCm;
    #[doc = include_str!("../../../docs/book/src/api/streams.md")]
    struct ApiStreams;
    #[cfg(feature = "tokio")]
    #[doc = include_str!("../../../docs/book/src/api/tokio.md")]
    struct ApiTokio;
}

/// The most private data a connection request carries on InfiniBand and
/// RoCE (the CM's 92 bytes less the rdma_cm header).
pub const MAX_REQ_PRIVATE_DATA: usize = 56;
/// The most private data an accept (CM REP) carries.
pub const MAX_REP_PRIVATE_DATA: usize = 196;
/// The most private data a reject (CM REJ) carries.
pub const MAX_REJ_PRIVATE_DATA: usize = 148;
/// The most private data a datagram (UD) request carries: the CM's SIDR
/// REQ holds 216 bytes, less the rdma_cm header.
pub const MAX_SIDR_REQ_PRIVATE_DATA: usize = 180;
/// The most private data a datagram (UD) answer carries (SIDR REP).
pub const MAX_SIDR_REP_PRIVATE_DATA: usize = 136;

/// The largest local ACK timeout a QP takes
/// ([`CmId::set_ack_timeout`]; 5 bits: 4.096 us * 2^31, about 2.4 hours).
pub const MAX_ACK_TIMEOUT: u8 = 31;

/// The Q_Key the kernel's CM gives the UD QPs of the UDP port space
/// (`RDMA_UDP_QKEY`): what both sides of a datagram "connection" use.
pub const UDP_QKEY: u32 = 0x0123_4567;

/// The parameters of connecting or accepting (`struct rdma_conn_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnParams {
    /// Private data for the peer (at most [`MAX_REQ_PRIVATE_DATA`] bytes to
    /// connect, [`MAX_REP_PRIVATE_DATA`] to accept). The peer receives it
    /// padded with zeros to that size on InfiniBand and RoCE: frame it
    /// with [`private::frame`] if its length matters.
    pub private_data: Vec<u8>,
    /// RDMA READs/atomics accepted as target.
    pub responder_resources: u8,
    /// RDMA READs/atomics issued as initiator.
    pub initiator_depth: u8,
    /// Transport retries, 0..=7.
    pub retry_count: u8,
    /// RNR retries, 0..=7 (7: forever).
    pub rnr_retry_count: u8,
    /// The longest wait for each step (address, route, the peer's answer).
    pub timeout: Duration,
}

impl Default for ConnParams {
    /// One outstanding READ each way, 7 retries, no private data, 10 s per
    /// step.
    fn default() -> Self {
        ConnParams {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            timeout: Duration::from_secs(10),
        }
    }
}

/// The kernel's answer to INIT_QP_ATTR as a [`QpAttr`]: the fields its
/// mask names, `None` for the rest. Values the library would refuse are
/// refused by `Qp::modify` (an out-of-range MTU is dropped here).
fn qp_attr_from_kernel(a: &RawQpAttr) -> QpAttr {
    let mask = a.qp_attr_mask;
    let has = |bit: u32| mask & bit != 0;
    QpAttr {
        qp_state: has(m::STATE)
            .then(|| QpState::from_raw(a.qp_state as u8))
            .flatten(),
        cur_qp_state: None,
        path_mtu: has(m::PATH_MTU)
            .then(|| Mtu::from_raw(a.path_mtu as u8))
            .flatten(),
        qkey: has(m::QKEY).then_some(a.qkey),
        rq_psn: has(m::RQ_PSN).then_some(a.rq_psn),
        sq_psn: has(m::SQ_PSN).then_some(a.sq_psn),
        dest_qp_num: has(m::DEST_QPN).then_some(a.dest_qp_num),
        qp_access_flags: has(m::ACCESS_FLAGS)
            .then(|| AccessFlags::from_bits_truncate(a.qp_access_flags)),
        pkey_index: has(m::PKEY_INDEX).then_some(a.pkey_index),
        port_num: has(m::PORT).then_some(a.port_num),
        ah_attr: has(m::AV).then(|| ah_attr_from_kernel(&a.ah_attr)),
        max_rd_atomic: has(m::MAX_QP_RD_ATOMIC).then_some(a.max_rd_atomic),
        max_dest_rd_atomic: has(m::MAX_DEST_RD_ATOMIC).then_some(a.max_dest_rd_atomic),
        min_rnr_timer: has(m::MIN_RNR_TIMER).then_some(a.min_rnr_timer),
        timeout: has(m::TIMEOUT).then_some(a.timeout),
        retry_cnt: has(m::RETRY_CNT).then_some(a.retry_cnt),
        rnr_retry: has(m::RNR_RETRY).then_some(a.rnr_retry),
    }
}

/// The kernel's address vector (`ib_uverbs_ah_attr`, in INIT_QP_ATTR's
/// answer and in the UD events) as an [`AhAttr`].
fn ah_attr_from_kernel(ah: &RawAhAttr) -> AhAttr {
    AhAttr {
        dlid: ah.dlid,
        sl: ah.sl,
        src_path_bits: ah.src_path_bits,
        static_rate: ah.static_rate,
        port_num: ah.port_num,
        grh: (ah.is_global != 0).then_some(GlobalRoute {
            dgid: Gid(ah.grh.dgid),
            flow_label: ah.grh.flow_label & 0x000f_ffff,
            sgid_index: ah.grh.sgid_index,
            hop_limit: ah.grh.hop_limit,
            traffic_class: ah.grh.traffic_class,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ack_timeouts_are_checked_before_any_command() {
        use rverbs::error::InvalidKind;
        for t in [0, 14, MAX_ACK_TIMEOUT] {
            conn::check_ack_timeout(t, conn::Space::Tcp).unwrap();
        }
        let e = conn::check_ack_timeout(32, conn::Space::Tcp).unwrap_err();
        assert_eq!(e.invalid_kind(), Some(InvalidKind::TooLarge), "{e}");
        assert!(e.to_string().contains("ack timeout 32 exceeds 31"), "{e}");
        let e = conn::check_ack_timeout(255, conn::Space::Tcp).unwrap_err();
        assert_eq!(e.invalid_kind(), Some(InvalidKind::TooLarge), "{e}");
        let e = conn::check_ack_timeout(14, conn::Space::Udp).unwrap_err();
        assert_eq!(e.invalid_kind(), Some(InvalidKind::WrongUse), "{e}");
    }

    #[test]
    fn cm_objects_are_send_and_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<CmId>();
        send_sync::<EventChannel>();
        send_sync::<Resolved>();
        send_sync::<Listener>();
        send_sync::<ConnRequest>();
        send_sync::<Connection>();
    }

    #[test]
    fn kernel_attrs_keep_only_what_the_mask_names() {
        let mut a = RawQpAttr {
            qp_attr_mask: m::STATE | m::ACCESS_FLAGS | m::PORT,
            qp_state: 1,
            qp_access_flags: (AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ).bits(),
            port_num: 1,
            rq_psn: 77,
            timeout: 200,
            ..Default::default()
        };
        let q = qp_attr_from_kernel(&a);
        assert_eq!(q.qp_state, Some(QpState::Init));
        assert_eq!(q.port_num, Some(1));
        assert_eq!(
            q.qp_access_flags,
            Some(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ)
        );
        assert_eq!(q.rq_psn, None);
        assert_eq!(q.ah_attr, None);
        a.qp_attr_mask |= m::RQ_PSN | m::TIMEOUT | m::PATH_MTU;
        a.path_mtu = 99;
        let q = qp_attr_from_kernel(&a);
        assert_eq!(q.rq_psn, Some(77));
        assert_eq!(q.timeout, Some(200), "passed on as the kernel said");
        // The one range check is rverbs' MODIFY_QP encoding (`Qp::modify`):
        // an answer out of range is refused there, not clamped here.
        assert_eq!(q.path_mtu, None, "an MTU code outside the enum is dropped");
    }
}
