//! The socket-address codec: `struct sockaddr_in6` and
//! `struct __kernel_sockaddr_storage` members as byte arrays of the C size
//! ([`SockaddrIn6`], [`SockaddrStorage`]), written from and read into
//! [`SocketAddr`]s by [`encode_sockaddr`] and [`decode_sockaddr`].

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

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
#[non_exhaustive]
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
pub(super) fn take<const N: usize>(b: &[u8], off: usize) -> Result<[u8; N], SockaddrError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
