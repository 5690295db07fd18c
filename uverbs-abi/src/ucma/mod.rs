//! The RDMA connection manager's userspace ABI (`/dev/infiniband/rdma_cm`,
//! `<rdma/rdma_user_cm.h>`, [`RDMA_USER_CM_ABI_VERSION`] 4): its `write()`
//! commands and responses, the constants they use, the path records of
//! `<rdma/ib_user_sa.h>`, socket-address helpers, and the command framing
//! ([`write_cmd`], and the safe [`exec`] for the [`UcmaCmd`]s).
//!
//! Every `#[repr(C)]` struct mirrors the C struct of the same name without
//! its `rdma_ucm_` prefix (`struct rdma_ucm_create_id` is [`CreateId`]);
//! `tests/layout.rs` checks them against the installed header. The
//! `struct sockaddr_in6` and `struct __kernel_sockaddr_storage` members are
//! byte arrays of the C size and alignment ([`SockaddrIn6`],
//! [`SockaddrStorage`]), built and read with [`encode_sockaddr`] and
//! [`decode_sockaddr`].
//!
//! The rdma_cm's framing differs from uverbs' ([`crate::cmd`]): the header
//! is [`CmdHdr`] `{cmd, in, out}` with byte (not word) lengths, and a
//! command's `response` field is not always its first (CREATE_ID has `uid`
//! first).
//!
//! This module holds the ABI itself; the socket-address codec is in
//! `sockaddr` and the command framing in `framing`, both re-exported here.

use crate::Errno;
use zerocopy::byteorder::big_endian::{U16, U32};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::ah::AhAttr;

/// The rdma_cm ABI version this module speaks (`RDMA_USER_CM_ABI_VERSION`,
/// the kernel's `/sys/class/infiniband_cm/abi_version`).
pub const RDMA_USER_CM_ABI_VERSION: u32 = 4;

/// Largest private data a connect, accept, reject or event carries
/// (`RDMA_MAX_PRIVATE_DATA`).
pub const RDMA_MAX_PRIVATE_DATA: usize = 256;

/// The rdma_cm's `write()` command numbers (`RDMA_USER_CM_CMD_*`).
#[allow(missing_docs)]
pub mod nr {
    pub const CREATE_ID: u32 = 0;
    pub const DESTROY_ID: u32 = 1;
    pub const BIND_IP: u32 = 2;
    pub const RESOLVE_IP: u32 = 3;
    pub const RESOLVE_ROUTE: u32 = 4;
    pub const QUERY_ROUTE: u32 = 5;
    pub const CONNECT: u32 = 6;
    pub const LISTEN: u32 = 7;
    pub const ACCEPT: u32 = 8;
    pub const REJECT: u32 = 9;
    pub const DISCONNECT: u32 = 10;
    pub const INIT_QP_ATTR: u32 = 11;
    pub const GET_EVENT: u32 = 12;
    /// In the enum, but the kernel implements no handler (ENOSYS).
    pub const GET_OPTION: u32 = 13;
    pub const SET_OPTION: u32 = 14;
    pub const NOTIFY: u32 = 15;
    pub const JOIN_IP_MCAST: u32 = 16;
    pub const LEAVE_MCAST: u32 = 17;
    pub const MIGRATE_ID: u32 = 18;
    pub const QUERY: u32 = 19;
    pub const BIND: u32 = 20;
    pub const RESOLVE_ADDR: u32 = 21;
    pub const JOIN_MCAST: u32 = 22;
}

/// Port spaces (`enum rdma_ucm_port_space`): [`CreateId::ps`].
#[allow(missing_docs)]
pub mod port_space {
    pub const IPOIB: u16 = 0x0002;
    pub const IB: u16 = 0x013F;
    pub const TCP: u16 = 0x0106;
    pub const UDP: u16 = 0x0111;
}

/// What QUERY reports ([`Query::option`], `RDMA_USER_CM_QUERY_*`).
pub mod query_option {
    /// The bound and peer addresses: a [`super::QueryAddrResp`].
    pub const ADDR: u32 = 0;
    /// The path records: a [`super::QueryPathResp`] and its
    /// [`super::PathRecData`]s.
    pub const PATH: u32 = 1;
    /// The source and destination GIDs, as `AF_IB` addresses in a
    /// [`super::QueryAddrResp`].
    pub const GID: u32 = 2;
}

/// Multicast join flags ([`JoinMcast::join_flags`], `RDMA_MC_JOIN_FLAG_*`).
#[allow(missing_docs)]
pub mod mc_join_flag {
    pub const FULLMEMBER: u16 = 0;
    pub const SENDONLY_FULLMEMBER: u16 = 1;
    pub const RESERVED: u16 = 2;
}

/// Option levels of SET_OPTION ([`SetOption::level`], `RDMA_OPTION_ID`,
/// `RDMA_OPTION_IB`).
#[allow(missing_docs)]
pub mod option_level {
    pub const ID: u32 = 0;
    pub const IB: u32 = 1;
}

/// Option names of SET_OPTION ([`SetOption::optname`]).
pub mod option_name {
    /// Level `ID`: type of service, a `u8` (`RDMA_OPTION_ID_TOS`).
    pub const ID_TOS: u32 = 0;
    /// Level `ID`: allow reuse of the bound address, an `int`
    /// (`RDMA_OPTION_ID_REUSEADDR`).
    pub const ID_REUSEADDR: u32 = 1;
    /// Level `ID`: IPv6 binds do not take IPv4, an `int`
    /// (`RDMA_OPTION_ID_AFONLY`).
    pub const ID_AFONLY: u32 = 2;
    /// Level `ID`: the QP ack timeout, a `u8` (`RDMA_OPTION_ID_ACK_TIMEOUT`).
    pub const ID_ACK_TIMEOUT: u32 = 3;
    /// Level `IB`: set the path records, an array of
    /// [`super::PathRecData`] (`RDMA_OPTION_IB_PATH`).
    pub const IB_PATH: u32 = 1;
}

/// Event numbers ([`EventResp::event`]).
///
/// `enum rdma_cm_event_type` is not in the uapi headers: these are the
/// kernel's values, from `include/rdma/rdma_cm.h` (and rdma-core's
/// `librdmacm/rdma_cma.h`, which repeats them). Not probe-checked.
#[allow(missing_docs)]
pub mod event {
    pub const ADDR_RESOLVED: u32 = 0;
    pub const ADDR_ERROR: u32 = 1;
    pub const ROUTE_RESOLVED: u32 = 2;
    pub const ROUTE_ERROR: u32 = 3;
    pub const CONNECT_REQUEST: u32 = 4;
    pub const CONNECT_RESPONSE: u32 = 5;
    pub const CONNECT_ERROR: u32 = 6;
    pub const UNREACHABLE: u32 = 7;
    pub const REJECTED: u32 = 8;
    pub const ESTABLISHED: u32 = 9;
    pub const DISCONNECTED: u32 = 10;
    pub const DEVICE_REMOVAL: u32 = 11;
    pub const MULTICAST_JOIN: u32 = 12;
    pub const MULTICAST_ERROR: u32 = 13;
    pub const ADDR_CHANGE: u32 = 14;
    pub const TIMEWAIT_EXIT: u32 = 15;
}

/// Path record flags ([`PathRecData::flags`], `IB_PATH_*` of
/// `<rdma/ib_user_sa.h>`).
#[allow(missing_docs)]
pub mod path_flag {
    pub const GMP: u32 = 1;
    pub const PRIMARY: u32 = 1 << 1;
    pub const ALTERNATE: u32 = 1 << 2;
    pub const OUTBOUND: u32 = 1 << 3;
    pub const INBOUND: u32 = 1 << 4;
    pub const INBOUND_REVERSE: u32 = 1 << 5;
    pub const BIDIRECTIONAL: u32 = OUTBOUND | INBOUND_REVERSE;
}

/// `Default` as all zeros, for the structs whose arrays are too long for
/// the derived one.
macro_rules! zeroed_default {
    ($($t:ty),* $(,)?) => {$(
        impl Default for $t {
            fn default() -> Self {
                Self::new_zeroed()
            }
        }
    )*};
}

mod framing;
mod sockaddr;

pub use framing::{exec, exec_bytes, migrate_id, set_option, write_cmd, UcmaCmd};
pub use sockaddr::{
    decode_sockaddr, encode_sockaddr, sockaddr_len, sockaddr_off, SockaddrError, SockaddrIn6,
    SockaddrStorage, AF_IB, AF_INET, AF_INET6, SOCKADDR_IN6_LEN, SOCKADDR_IN_LEN,
    SOCKADDR_STORAGE_LEN,
};

// ---------------------------------------------------------------------------
// Path records (`<rdma/ib_user_sa.h>`).

/// `struct ib_user_path_rec`: a path record (QUERY_ROUTE's answer).
/// `dlid`, `slid`, `flow_label` and `pkey` are big-endian.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct UserPathRec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: U16,
    pub slid: U16,
    pub raw_traffic: u32,
    pub flow_label: U32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: U16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ib_path_rec_data`: a path record in the SA's wire format
/// (QUERY's PATH option, SET_OPTION's `IB_PATH`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct PathRecData {
    /// [`path_flag`] bits.
    pub flags: u32,
    /// Reserved.
    pub reserved: u32,
    /// The 64-byte path record, as the SA sends it (big-endian).
    pub path_rec: [u32; 16],
}

// ---------------------------------------------------------------------------
// Commands and responses.

/// `struct rdma_ucm_cmd_hdr`: precedes every rdma_cm command.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CmdHdr {
    /// Command number ([`nr`]).
    pub cmd: u32,
    /// Command length in bytes, this header excluded (C `in`).
    pub in_len: u16,
    /// Response buffer length in bytes (C `out`).
    pub out_len: u16,
}

/// `struct rdma_ucm_create_id` (CREATE_ID): a new cm id.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateId {
    /// Opaque cookie, reported back in the id's events.
    pub uid: u64,
    /// User address of the [`CreateIdResp`] (supplied by the framing).
    pub response: u64,
    /// Port space ([`port_space`]).
    pub ps: u16,
    /// QP type (`crate::qp::qp_type`).
    pub qp_type: u8,
    /// Reserved.
    pub reserved: [u8; 5],
}

/// `struct rdma_ucm_create_id_resp`: the new id (also JOIN_*_MCAST's
/// answer).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateIdResp {
    /// The id's handle in this rdma_cm file.
    pub id: u32,
}

/// `struct rdma_ucm_destroy_id` (DESTROY_ID; also LEAVE_MCAST, as
/// [`LeaveMcast`]).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DestroyId {
    /// User address of the [`DestroyIdResp`] (supplied by the framing).
    pub response: u64,
    /// The id (for LEAVE_MCAST: the multicast id JOIN answered).
    pub id: u32,
    /// Reserved.
    pub reserved: u32,
}

/// `struct rdma_ucm_destroy_id_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DestroyIdResp {
    /// Events the kernel reported for the id.
    pub events_reported: u32,
}

/// `struct rdma_ucm_bind_ip` (BIND_IP; the kernel ignores `response`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct BindIp {
    /// Unused by the kernel (the framing fills it anyway).
    pub response: u64,
    /// Address to bind.
    pub addr: SockaddrIn6,
    /// The id.
    pub id: u32,
}

/// `struct rdma_ucm_bind` (BIND).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Bind {
    /// The id.
    pub id: u32,
    /// Bytes of `addr` that are the address.
    pub addr_size: u16,
    /// Reserved.
    pub reserved: u16,
    /// Address to bind.
    pub addr: SockaddrStorage,
}

/// `struct rdma_ucm_resolve_ip` (RESOLVE_IP).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ResolveIp {
    pub src_addr: SockaddrIn6,
    pub dst_addr: SockaddrIn6,
    pub id: u32,
    pub timeout_ms: u32,
}

/// `struct rdma_ucm_resolve_addr` (RESOLVE_ADDR).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ResolveAddr {
    pub id: u32,
    pub timeout_ms: u32,
    pub src_size: u16,
    pub dst_size: u16,
    pub reserved: u32,
    pub src_addr: SockaddrStorage,
    pub dst_addr: SockaddrStorage,
}

/// `struct rdma_ucm_resolve_route` (RESOLVE_ROUTE).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ResolveRoute {
    pub id: u32,
    pub timeout_ms: u32,
}

/// `struct rdma_ucm_query` (QUERY; also QUERY_ROUTE, as [`QueryRoute`]).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Query {
    /// User address of the response (supplied by the framing).
    pub response: u64,
    /// The id.
    pub id: u32,
    /// What to report ([`query_option`]; QUERY_ROUTE ignores it).
    pub option: u32,
}

/// `struct rdma_ucm_query` sent as QUERY_ROUTE (the C command reuses
/// QUERY's struct; this wrapper binds it to its own command number and
/// response, [`QueryRouteResp`]).
#[repr(transparent)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryRoute(pub Query);

/// `struct rdma_ucm_query_route_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct QueryRouteResp {
    pub node_guid: u64,
    pub ib_route: [UserPathRec; 2],
    pub src_addr: SockaddrIn6,
    pub dst_addr: SockaddrIn6,
    pub num_paths: u32,
    pub port_num: u8,
    pub reserved: [u8; 3],
    pub ibdev_index: u32,
    pub reserved1: u32,
}

/// `struct rdma_ucm_query_addr_resp` (QUERY's ADDR and GID options).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct QueryAddrResp {
    pub node_guid: u64,
    pub port_num: u8,
    pub reserved: u8,
    pub pkey: u16,
    pub src_size: u16,
    pub dst_size: u16,
    pub src_addr: SockaddrStorage,
    pub dst_addr: SockaddrStorage,
    pub ibdev_index: u32,
    pub reserved1: u32,
}

/// `struct rdma_ucm_query_path_resp` (QUERY's PATH option), without its
/// flexible `path_data[]` of [`PathRecData`]: see [`QueryPathResp::parse`].
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct QueryPathResp {
    /// Path records that follow.
    pub num_paths: u32,
    /// Reserved.
    pub reserved: u32,
}

impl QueryPathResp {
    /// The header and the path records of a PATH answer in `bytes` (as
    /// many of `num_paths` as `bytes` holds); `None` if `bytes` is shorter
    /// than the header. Never panics.
    pub fn parse(bytes: &[u8]) -> Option<(Self, impl Iterator<Item = PathRecData> + '_)> {
        let (hdr, rest) = Self::read_from_prefix(bytes).ok()?;
        let n = hdr.num_paths as usize;
        let paths = rest
            .chunks_exact(size_of::<PathRecData>())
            .take(n)
            .filter_map(|c| PathRecData::read_from_bytes(c).ok());
        Some((hdr, paths))
    }
}

/// `struct rdma_ucm_conn_param`: connection parameters (CONNECT, ACCEPT,
/// and the connection events). The private data is inline.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ConnParam {
    pub qp_num: u32,
    pub qkey: u32,
    pub private_data: [u8; RDMA_MAX_PRIVATE_DATA],
    pub private_data_len: u8,
    pub srq: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub valid: u8,
}

/// `struct rdma_ucm_ud_param`: datagram parameters (the UDP/IPoIB port
/// spaces' and the multicast events).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct UdParam {
    pub qp_num: u32,
    pub qkey: u32,
    pub ah_attr: AhAttr,
    pub private_data: [u8; RDMA_MAX_PRIVATE_DATA],
    pub private_data_len: u8,
    pub reserved: [u8; 7],
}

/// The valid prefix of a private data array, `len` clamped to it.
fn private(data: &[u8; RDMA_MAX_PRIVATE_DATA], len: u8) -> &[u8] {
    &data[..usize::from(len).min(RDMA_MAX_PRIVATE_DATA)]
}

/// Copies `src` into a private data array and returns its length, or
/// `E2BIG` if it is longer than [`RDMA_MAX_PRIVATE_DATA`] - 1 (the length
/// field is a `u8`).
fn set_private(data: &mut [u8; RDMA_MAX_PRIVATE_DATA], src: &[u8]) -> Result<u8, Errno> {
    let len = u8::try_from(src.len()).map_err(|_| Errno::E2BIG)?;
    data.fill(0);
    data[..src.len()].copy_from_slice(src);
    Ok(len)
}

impl ConnParam {
    /// The private data (`private_data_len` bytes).
    pub fn private_data(&self) -> &[u8] {
        private(&self.private_data, self.private_data_len)
    }

    /// Sets the private data and its length (`E2BIG` past 255 bytes).
    pub fn set_private_data(&mut self, data: &[u8]) -> Result<(), Errno> {
        self.private_data_len = set_private(&mut self.private_data, data)?;
        Ok(())
    }
}

impl UdParam {
    /// The private data (`private_data_len` bytes).
    pub fn private_data(&self) -> &[u8] {
        private(&self.private_data, self.private_data_len)
    }
}

/// `struct rdma_ucm_ece`: enhanced connection establishment options.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct Ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

/// `struct rdma_ucm_connect` (CONNECT).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct Connect {
    pub conn_param: ConnParam,
    pub id: u32,
    pub reserved: u32,
    pub ece: Ece,
}

/// `struct rdma_ucm_listen` (LISTEN).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct Listen {
    pub id: u32,
    pub backlog: u32,
}

/// `struct rdma_ucm_accept` (ACCEPT).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Accept {
    /// Opaque cookie for the accepted id's events.
    pub uid: u64,
    /// Connection parameters.
    pub conn_param: ConnParam,
    /// The id (of the CONNECT_REQUEST event).
    pub id: u32,
    /// Reserved.
    pub reserved: u32,
    /// ECE options.
    pub ece: Ece,
}

/// `struct rdma_ucm_reject` (REJECT).
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct Reject {
    pub id: u32,
    pub private_data_len: u8,
    pub reason: u8,
    pub reserved: [u8; 2],
    pub private_data: [u8; RDMA_MAX_PRIVATE_DATA],
}

impl Reject {
    /// The private data (`private_data_len` bytes).
    pub fn private_data(&self) -> &[u8] {
        private(&self.private_data, self.private_data_len)
    }

    /// Sets the private data and its length (`E2BIG` past 255 bytes).
    pub fn set_private_data(&mut self, data: &[u8]) -> Result<(), Errno> {
        self.private_data_len = set_private(&mut self.private_data, data)?;
        Ok(())
    }
}

/// `struct rdma_ucm_disconnect` (DISCONNECT).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct Disconnect {
    /// The id.
    pub id: u32,
}

/// `struct rdma_ucm_init_qp_attr` (INIT_QP_ATTR): answered by a
/// [`QpAttr`](crate::qp::QpAttr).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct InitQpAttr {
    /// User address of the [`QpAttr`](crate::qp::QpAttr) (supplied by the framing).
    pub response: u64,
    /// The id.
    pub id: u32,
    /// The state to move the QP to (`crate::qp::qp_state`).
    pub qp_state: u32,
}

/// `struct rdma_ucm_notify` (NOTIFY): an async event of the id's QP.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct Notify {
    pub id: u32,
    pub event: u32,
}

/// `struct rdma_ucm_join_ip_mcast` (JOIN_IP_MCAST): answered by a
/// [`CreateIdResp`].
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct JoinIpMcast {
    /// User address of the [`CreateIdResp`] (supplied by the framing).
    pub response: u64,
    /// Opaque cookie for the membership's events.
    pub uid: u64,
    /// The multicast address.
    pub addr: SockaddrIn6,
    /// The id.
    pub id: u32,
}

/// `struct rdma_ucm_join_mcast` (JOIN_MCAST): answered by a
/// [`CreateIdResp`].
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct JoinMcast {
    /// User address of the [`CreateIdResp`] (supplied by the framing).
    pub response: u64,
    /// Opaque cookie for the membership's events.
    pub uid: u64,
    /// The id.
    pub id: u32,
    /// Bytes of `addr` that are the address.
    pub addr_size: u16,
    /// [`mc_join_flag`].
    pub join_flags: u16,
    /// The multicast address.
    pub addr: SockaddrStorage,
}

/// `struct rdma_ucm_destroy_id` sent as LEAVE_MCAST (the C command reuses
/// DESTROY_ID's struct; `id` is the multicast id JOIN answered).
#[repr(transparent)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct LeaveMcast(pub DestroyId);

/// `struct rdma_ucm_get_event` (GET_EVENT): answered by an
/// [`EventResp`]; blocks unless the file is non-blocking.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct GetEvent {
    /// User address of the [`EventResp`] (supplied by the framing).
    pub response: u64,
}

/// Bytes of [`EventResp::param`], the C union of [`ConnParam`] and
/// [`UdParam`].
pub const EVENT_PARAM_LEN: usize = 304;

/// `struct rdma_ucm_event_resp`: an event. The C union `param` is kept as
/// bytes ([`EventResp::conn`] and [`EventResp::ud`] read its arms); it
/// starts at byte 20, unaligned for a `u64`, which is why neither arm has
/// one.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct EventResp {
    /// The id's (or membership's) cookie.
    pub uid: u64,
    /// The id (for CONNECT_REQUEST: the new id).
    pub id: u32,
    /// The event ([`event`]).
    pub event: u32,
    /// Status (a negative errno, or a reject reason).
    pub status: u32,
    /// `union { struct rdma_ucm_conn_param conn; struct rdma_ucm_ud_param
    /// ud; } param`.
    pub param: [u8; EVENT_PARAM_LEN],
    /// Reserved.
    pub reserved: u32,
    /// ECE options of the peer.
    pub ece: Ece,
}

zeroed_default!(ConnParam, UdParam, Connect, Accept, Reject, EventResp);

const _: () = {
    assert!(EVENT_PARAM_LEN >= size_of::<ConnParam>());
    assert!(EVENT_PARAM_LEN >= size_of::<UdParam>());
};

impl EventResp {
    /// The fewest bytes of an event the kernel writes: it accepts a buffer
    /// without `reserved` and `ece` (older 32-bit user space) and writes
    /// `min(out, size)` bytes.
    pub const MIN_LEN: usize = size_of::<EventResp>() - 4 - size_of::<Ece>();

    /// An event from the bytes the kernel wrote: at least [`Self::MIN_LEN`]
    /// of them (`None` otherwise), missing tail bytes read as zeros,
    /// extra ones ignored. Never panics.
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() < Self::MIN_LEN {
            return None;
        }
        let mut ev = Self::new_zeroed();
        let n = bytes.len().min(size_of::<Self>());
        ev.as_mut_bytes()[..n].copy_from_slice(&bytes[..n]);
        Some(ev)
    }

    /// `param.conn`: the arm of the connection events of the TCP and IB
    /// port spaces.
    pub fn conn(&self) -> ConnParam {
        // The union is at least as large as the arm (checked above).
        ConnParam::read_from_prefix(&self.param).map_or_else(|_| ConnParam::default(), |(c, _)| c)
    }

    /// `param.ud`: the arm of the UDP and IPoIB port spaces' events and of
    /// the multicast events.
    pub fn ud(&self) -> UdParam {
        // The union is at least as large as the arm (checked above).
        UdParam::read_from_prefix(&self.param).map_or_else(|_| UdParam::default(), |(u, _)| u)
    }
}

/// `struct rdma_ucm_set_option` (SET_OPTION). `optval` is a user address
/// the kernel reads `optlen` bytes from: not a [`UcmaCmd`], sent with the
/// unsafe [`write_cmd`] only.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct SetOption {
    pub optval: u64,
    pub id: u32,
    pub level: u32,
    pub optname: u32,
    pub optlen: u32,
}

/// `struct rdma_ucm_migrate_id` (MIGRATE_ID): moves the id from the rdma_cm
/// file `fd` to the one the command is written to. `fd` is a file
/// descriptor the kernel acts on: not a [`UcmaCmd`], sent with the unsafe
/// [`write_cmd`] only.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct MigrateId {
    /// User address of the [`MigrateResp`] (supplied by the framing).
    pub response: u64,
    /// The id, in the file `fd`.
    pub id: u32,
    /// The rdma_cm file the id is in now.
    pub fd: u32,
}

/// `struct rdma_ucm_migrate_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct MigrateResp {
    /// Events the kernel reported for the id.
    pub events_reported: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_is_bounded() {
        let mut c = ConnParam::default();
        c.set_private_data(&[7; 255]).unwrap();
        assert_eq!(c.private_data(), &[7; 255][..]);
        assert_eq!(c.set_private_data(&[0; 256]), Err(Errno::E2BIG));
        let mut r = Reject::default();
        r.set_private_data(b"no").unwrap();
        assert_eq!(r.private_data(), b"no");
    }

    /// xorshift64*: deterministic bytes, no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
    }

    #[test]
    fn parsing_arbitrary_bytes_never_panics() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut buf = vec![0u8; 2 * size_of::<EventResp>()];
        for round in 0..20_000 {
            let len = (rng.next() % buf.len() as u64) as usize;
            match round % 4 {
                0 => buf.iter_mut().for_each(|b| *b = rng.next() as u8),
                1 => buf.fill(0xff),
                2 => buf.fill(0),
                _ => buf
                    .iter_mut()
                    .for_each(|b| *b = (rng.next() % 3) as u8 * 0x7f),
            }
            // Steer some rounds into the address families' paths.
            if round % 5 == 0 {
                let af = [AF_INET, AF_INET6][round % 2];
                buf[..2].copy_from_slice(&af.to_ne_bytes());
            }
            let bytes = &buf[..len];
            if let Some(ev) = EventResp::parse(bytes) {
                assert!(len >= EventResp::MIN_LEN);
                let c = ev.conn();
                assert!(c.private_data().len() <= RDMA_MAX_PRIVATE_DATA);
                let u = ev.ud();
                assert!(u.private_data().len() <= RDMA_MAX_PRIVATE_DATA);
            } else {
                assert!(len < EventResp::MIN_LEN);
            }
            if let Some((hdr, paths)) = QueryPathResp::parse(bytes) {
                assert!(paths.count() <= hdr.num_paths as usize);
            }
            let _ = decode_sockaddr(bytes);
            let mut st = SockaddrStorage::default();
            let n = len.min(SOCKADDR_STORAGE_LEN);
            st.bytes[..n].copy_from_slice(&bytes[..n]);
            let _ = st.to_socket_addr(rng.next() as u16 as usize);
            let _ = st.to_socket_addr(len);
            if let Ok((r, _)) = Reject::read_from_prefix(bytes) {
                assert!(r.private_data().len() <= RDMA_MAX_PRIVATE_DATA);
            }
        }
    }

    #[test]
    fn event_parse_zero_fills_a_short_tail() {
        let mut ev = EventResp::new_zeroed();
        ev.id = 5;
        ev.event = event::ESTABLISHED;
        ev.ece.vendor_id = 9;
        let bytes = ev.as_bytes();
        let short = EventResp::parse(&bytes[..EventResp::MIN_LEN]).unwrap();
        assert_eq!((short.id, short.event, short.ece.vendor_id), (5, 9, 0));
        assert_eq!(EventResp::parse(bytes).unwrap().ece.vendor_id, 9);
        assert!(EventResp::parse(&bytes[..EventResp::MIN_LEN - 1]).is_none());
    }
}
