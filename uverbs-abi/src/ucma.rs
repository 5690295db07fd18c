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

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::errno::Errno;
use zerocopy::byteorder::big_endian::{U16, U32};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

use crate::ah::AhAttr;
use crate::cmd::{NoResp, MAX_CMD_BYTES};
use crate::qp::QpAttr;

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

// ---------------------------------------------------------------------------
// Socket addresses.

/// `struct sockaddr_in6` as bytes (28, aligned to 4): an IPv6 address, or
/// (the kernel accepts both in the fields of this type) an IPv4 one.
/// [`SockaddrIn6::new`] and [`SockaddrIn6::to_socket_addr`] convert.
#[repr(C, align(4))]
#[derive(
    Debug, Default, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
pub struct SockaddrIn6 {
    /// The socket address bytes.
    pub bytes: [u8; SOCKADDR_IN6_LEN],
}

/// `struct __kernel_sockaddr_storage` as bytes (128, aligned to 8), of
/// which the command's `*_size` field says how many are the address.
/// [`SockaddrStorage::new`] and [`SockaddrStorage::to_socket_addr`]
/// convert.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct SockaddrStorage {
    /// The socket address bytes.
    pub bytes: [u8; SOCKADDR_STORAGE_LEN],
}

zeroed_default!(SockaddrStorage);

/// `sizeof(struct sockaddr_in)`.
pub const SOCKADDR_IN_LEN: usize = 16;
/// `sizeof(struct sockaddr_in6)`.
pub const SOCKADDR_IN6_LEN: usize = 28;
/// `sizeof(struct __kernel_sockaddr_storage)`.
pub const SOCKADDR_STORAGE_LEN: usize = 128;

/// `AF_INET`, the family of a `struct sockaddr_in`.
pub const AF_INET: u16 = libc::AF_INET as u16;
/// `AF_INET6`, the family of a `struct sockaddr_in6`.
pub const AF_INET6: u16 = libc::AF_INET6 as u16;
/// `AF_IB`, the family of the kernel's `struct sockaddr_ib` (QUERY's GID
/// option answers with it; [`decode_sockaddr`] does not parse it).
pub const AF_IB: u16 = 27;

/// Byte offsets of the fields of `struct sockaddr_in` and `struct
/// sockaddr_in6` (the family is at 0 in both), as the helpers use them.
#[allow(missing_docs)]
pub mod sockaddr_off {
    pub const SIN_PORT: usize = 2;
    pub const SIN_ADDR: usize = 4;
    pub const SIN6_PORT: usize = 2;
    pub const SIN6_FLOWINFO: usize = 4;
    pub const SIN6_ADDR: usize = 8;
    pub const SIN6_SCOPE_ID: usize = 24;
}

/// Why bytes are not a socket address [`decode_sockaddr`] understands, or
/// a buffer too small for [`encode_sockaddr`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SockaddrError {
    /// `len` bytes where the address (or its family field) needs `need`.
    Short {
        /// Bytes given.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// A family other than `AF_INET` and `AF_INET6`.
    Family(u16),
    /// An address size field larger than its storage.
    Size(usize),
}

impl fmt::Display for SockaddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SockaddrError::Short { len, need } => {
                write!(f, "socket address of {len} bytes, {need} needed")
            }
            SockaddrError::Family(af) => write!(f, "unsupported socket address family {af}"),
            SockaddrError::Size(n) => write!(f, "socket address size {n} exceeds its storage"),
        }
    }
}

impl std::error::Error for SockaddrError {}

/// The encoded length of `addr`: [`SOCKADDR_IN_LEN`] or
/// [`SOCKADDR_IN6_LEN`].
pub fn sockaddr_len(addr: &SocketAddr) -> usize {
    match addr {
        SocketAddr::V4(_) => SOCKADDR_IN_LEN,
        SocketAddr::V6(_) => SOCKADDR_IN6_LEN,
    }
}

/// Writes `addr` as a `struct sockaddr_in` or `struct sockaddr_in6` at the
/// start of `out` (which it zeroes first) and returns its length. The
/// family and scope id are in host order, the port in network order, the
/// IPv6 flow info as `std` writes it (its raw field value, so it round
/// trips with addresses from `std` and the kernel).
pub fn encode_sockaddr(addr: &SocketAddr, out: &mut [u8]) -> Result<usize, SockaddrError> {
    use sockaddr_off::*;
    let len = sockaddr_len(addr);
    if out.len() < len {
        return Err(SockaddrError::Short {
            len: out.len(),
            need: len,
        });
    }
    out.fill(0);
    let dst = &mut out[..len];
    match addr {
        SocketAddr::V4(a) => {
            dst[..2].copy_from_slice(&AF_INET.to_ne_bytes());
            dst[SIN_PORT..SIN_PORT + 2].copy_from_slice(&a.port().to_be_bytes());
            dst[SIN_ADDR..SIN_ADDR + 4].copy_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            dst[..2].copy_from_slice(&AF_INET6.to_ne_bytes());
            dst[SIN6_PORT..SIN6_PORT + 2].copy_from_slice(&a.port().to_be_bytes());
            dst[SIN6_FLOWINFO..SIN6_FLOWINFO + 4].copy_from_slice(&a.flowinfo().to_ne_bytes());
            dst[SIN6_ADDR..SIN6_ADDR + 16].copy_from_slice(&a.ip().octets());
            dst[SIN6_SCOPE_ID..SIN6_SCOPE_ID + 4].copy_from_slice(&a.scope_id().to_ne_bytes());
        }
    }
    Ok(len)
}

/// `N` bytes of `b` at `off`, or the [`SockaddrError::Short`] that says
/// how many were needed.
fn take<const N: usize>(b: &[u8], off: usize) -> Result<[u8; N], SockaddrError> {
    b.get(off..off + N)
        .and_then(|s| s.try_into().ok())
        .ok_or(SockaddrError::Short {
            len: b.len(),
            need: off + N,
        })
}

/// Reads a `struct sockaddr_in` or `struct sockaddr_in6` from the start of
/// `bytes` (trailing bytes are ignored). Refuses, without panicking on any
/// input, bytes too short for their family and families other than
/// `AF_INET` and `AF_INET6`.
pub fn decode_sockaddr(bytes: &[u8]) -> Result<SocketAddr, SockaddrError> {
    use sockaddr_off::*;
    let family = u16::from_ne_bytes(take::<2>(bytes, 0)?);
    match family {
        AF_INET => {
            let b = take::<SOCKADDR_IN_LEN>(bytes, 0)?;
            let port = u16::from_be_bytes([b[SIN_PORT], b[SIN_PORT + 1]]);
            let ip = Ipv4Addr::from(take::<4>(&b, SIN_ADDR)?);
            Ok(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        }
        AF_INET6 => {
            let b = take::<SOCKADDR_IN6_LEN>(bytes, 0)?;
            let port = u16::from_be_bytes(take::<2>(&b, SIN6_PORT)?);
            let flowinfo = u32::from_ne_bytes(take::<4>(&b, SIN6_FLOWINFO)?);
            let ip = Ipv6Addr::from(take::<16>(&b, SIN6_ADDR)?);
            let scope_id = u32::from_ne_bytes(take::<4>(&b, SIN6_SCOPE_ID)?);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip, port, flowinfo, scope_id,
            )))
        }
        other => Err(SockaddrError::Family(other)),
    }
}

impl SockaddrIn6 {
    /// `addr` encoded (an IPv4 one as a `sockaddr_in` in the first 16
    /// bytes, as the kernel accepts).
    pub fn new(addr: &SocketAddr) -> Self {
        let mut s = Self::default();
        // Cannot fail: both encodings fit in 28 bytes.
        let _ = encode_sockaddr(addr, &mut s.bytes);
        s
    }

    /// The address these bytes hold ([`decode_sockaddr`]).
    pub fn to_socket_addr(&self) -> Result<SocketAddr, SockaddrError> {
        decode_sockaddr(&self.bytes)
    }
}

impl SockaddrStorage {
    /// `addr` encoded, and its length for the command's `*_size` field.
    pub fn new(addr: &SocketAddr) -> (Self, u16) {
        let mut s = Self::default();
        // Cannot fail: both encodings fit in 128 bytes.
        let len = encode_sockaddr(addr, &mut s.bytes).unwrap_or(0);
        (s, len as u16)
    }

    /// The address in the first `size` bytes (the `*_size` field that
    /// accompanies this storage in its command or response).
    pub fn to_socket_addr(&self, size: usize) -> Result<SocketAddr, SockaddrError> {
        let bytes = self.bytes.get(..size).ok_or(SockaddrError::Size(size))?;
        decode_sockaddr(bytes)
    }
}

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
/// [`QpAttr`].
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct InitQpAttr {
    /// User address of the [`QpAttr`] (supplied by the framing).
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

// ---------------------------------------------------------------------------
// Framing.

/// The response staging buffer's size: larger than every rdma_cm response
/// of ABI 4 (the largest fixed one, [`EventResp`], is 336 bytes; QUERY's
/// PATH answer is bounded by the header's `out`), so a handler that writes
/// its whole response without looking at `out` (MIGRATE_ID does) still
/// writes inside it.
const STAGING: usize = MAX_CMD_BYTES;

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
/// options; for PATH use [`exec_bytes`] and [`QueryPathResp::parse`].)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    fn v4() -> SocketAddr {
        "192.0.2.7:4791".parse().unwrap()
    }

    fn v6() -> SocketAddr {
        SocketAddr::V6(SocketAddrV6::new(
            "fe80::1:2:3:4".parse().unwrap(),
            18515,
            0x000a_bcde,
            3,
        ))
    }

    #[test]
    fn sockaddr_round_trips() {
        for addr in [v4(), v6()] {
            let mut buf = [0xffu8; 64];
            let n = encode_sockaddr(&addr, &mut buf).unwrap();
            assert_eq!(n, sockaddr_len(&addr));
            assert!(buf[n..].iter().all(|&b| b == 0), "tail zeroed");
            assert_eq!(decode_sockaddr(&buf[..n]), Ok(addr));
            assert_eq!(SockaddrIn6::new(&addr).to_socket_addr(), Ok(addr));
            let (st, size) = SockaddrStorage::new(&addr);
            assert_eq!(usize::from(size), n);
            assert_eq!(st.to_socket_addr(size.into()), Ok(addr));
            // Trailing bytes are ignored.
            assert_eq!(st.to_socket_addr(SOCKADDR_STORAGE_LEN), Ok(addr));
        }
    }

    #[test]
    fn sockaddr_bytes_are_the_c_encoding() {
        let s = SockaddrIn6::new(&v4());
        assert_eq!(&s.bytes[..2], &AF_INET.to_ne_bytes());
        assert_eq!(&s.bytes[2..4], &4791u16.to_be_bytes());
        assert_eq!(&s.bytes[4..8], &[192, 0, 2, 7]);
        assert!(s.bytes[8..].iter().all(|&b| b == 0));
        let s = SockaddrIn6::new(&v6());
        assert_eq!(&s.bytes[..2], &AF_INET6.to_ne_bytes());
        assert_eq!(&s.bytes[2..4], &18515u16.to_be_bytes());
        assert_eq!(s.bytes[8], 0xfe);
        assert_eq!(&s.bytes[24..28], &3u32.to_ne_bytes());
    }

    #[test]
    fn sockaddr_refuses_short_or_malformed_bytes() {
        assert!(matches!(
            decode_sockaddr(&[]),
            Err(SockaddrError::Short { len: 0, need: 2 })
        ));
        assert!(matches!(
            decode_sockaddr(&[2]),
            Err(SockaddrError::Short { .. })
        ));
        let mut b = [0u8; SOCKADDR_IN6_LEN];
        encode_sockaddr(&v4(), &mut b).unwrap();
        assert_eq!(
            decode_sockaddr(&b[..SOCKADDR_IN_LEN - 1]),
            Err(SockaddrError::Short { len: 15, need: 16 })
        );
        encode_sockaddr(&v6(), &mut b).unwrap();
        assert_eq!(
            decode_sockaddr(&b[..SOCKADDR_IN6_LEN - 1]),
            Err(SockaddrError::Short { len: 27, need: 28 })
        );
        for family in [0u16, 1, AF_IB, 0xffff] {
            b[..2].copy_from_slice(&family.to_ne_bytes());
            assert_eq!(decode_sockaddr(&b), Err(SockaddrError::Family(family)));
        }
        let (st, _) = SockaddrStorage::new(&v6());
        assert!(matches!(
            st.to_socket_addr(0),
            Err(SockaddrError::Short { .. })
        ));
        assert_eq!(st.to_socket_addr(129), Err(SockaddrError::Size(129)));
        assert_eq!(
            st.to_socket_addr(usize::MAX),
            Err(SockaddrError::Size(usize::MAX))
        );
        assert!(SockaddrStorage::default().to_socket_addr(128).is_err());
        let mut small = [0u8; 27];
        assert_eq!(
            encode_sockaddr(&v6(), &mut small),
            Err(SockaddrError::Short { len: 27, need: 28 })
        );
        assert!(encode_sockaddr(&v4(), &mut small[..16]).is_ok());
    }

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
