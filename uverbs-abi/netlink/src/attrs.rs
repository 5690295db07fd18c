//! Attribute parsing: [`Attr`], one `struct nlattr` TLV with its typed
//! accessors, and [`Attrs`], the bounds-checked walk over a run of them.

use rverbs_abi::Errno;

use super::abi::{NLA_F_NESTED, NLA_HDRLEN, NLA_TYPE_MASK};

/// `NLA_ALIGN`/`NLMSG_ALIGN`: round up to 4 bytes (`None` on overflow).
pub(super) fn align4(len: usize) -> Option<usize> {
    len.checked_add(3).map(|n| n & !3)
}

pub(super) fn ne_u16(b: &[u8]) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(..2)?.try_into().ok()?))
}

pub(super) fn ne_u32(b: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?))
}

pub(super) fn ne_u64(b: &[u8]) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(..8)?.try_into().ok()?))
}

/// One netlink attribute (`struct nlattr` and its payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr<'a> {
    /// The attribute number: `nla_type & NLA_TYPE_MASK` (one of [`attr`](crate::attr)).
    pub kind: u16,
    /// `NLA_F_NESTED` was set. The kernel does not set it on every nested
    /// nldev table, so callers pick [`Attr::nested`] by [`Attr::kind`].
    pub nested_flag: bool,
    /// The payload, without the header and the alignment padding.
    pub payload: &'a [u8],
}

impl<'a> Attr<'a> {
    /// The payload as a `u8`; `None` if it is shorter than 1 byte.
    pub fn u8(&self) -> Option<u8> {
        self.payload.first().copied()
    }

    /// The payload as a host-order `u16`; `None` if it is shorter.
    pub fn u16(&self) -> Option<u16> {
        ne_u16(self.payload)
    }

    /// The payload as a host-order `u32`; `None` if it is shorter.
    pub fn u32(&self) -> Option<u32> {
        ne_u32(self.payload)
    }

    /// The payload as a host-order `u64`; `None` if it is shorter.
    pub fn u64(&self) -> Option<u64> {
        ne_u64(self.payload)
    }

    /// A host-order unsigned integer of exactly 1, 2, 4 or 8 bytes, for
    /// attributes whose width the kernel and the header disagree on (such
    /// as [`attr::UVERBS_DRIVER_ID`](crate::attr::UVERBS_DRIVER_ID)); `None` for any other length.
    pub fn uint(&self) -> Option<u64> {
        match self.payload.len() {
            1 => self.u8().map(u64::from),
            2 => self.u16().map(u64::from),
            4 => self.u32().map(u64::from),
            8 => self.u64(),
            _ => None,
        }
    }

    /// The payload as a string: the bytes before the first NUL (all of them
    /// if there is none); `None` if they are not UTF-8.
    pub fn str(&self) -> Option<&'a str> {
        let end = self
            .payload
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.payload.len());
        std::str::from_utf8(&self.payload[..end]).ok()
    }

    /// The payload as a list of attributes (a nested table).
    pub fn nested(&self) -> Attrs<'a> {
        Attrs::new(self.payload)
    }
}

/// An iterator over the `struct nlattr` TLVs of a buffer (the payload of a
/// message or of a nested attribute).
///
/// Each item is an [`Attr`], or [`Errno::EPROTO`] once if the buffer is
/// malformed (a header or payload running past the end, or `nla_len`
/// shorter than the header), after which the iteration stops. The padding
/// after the last attribute may be missing, as the kernel's `nla_ok` allows.
#[derive(Debug, Clone)]
pub struct Attrs<'a> {
    pub(super) rest: &'a [u8],
}

impl<'a> Attrs<'a> {
    /// Iterate the attributes in `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Attrs { rest: buf }
    }

    /// The first attribute numbered `kind` (later duplicates are ignored),
    /// or `Ok(None)`; [`Errno::EPROTO`] if the buffer is malformed before it.
    pub fn get(self, kind: u16) -> Result<Option<Attr<'a>>, Errno> {
        for a in self {
            let a = a?;
            if a.kind == kind {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = Result<Attr<'a>, Errno>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let rest = self.rest;
        // Stop after this item whatever happens; a valid attribute resets it.
        self.rest = &[];
        let (Some(len), Some(ty)) = (ne_u16(rest), rest.get(2..).and_then(ne_u16)) else {
            return Some(Err(Errno::EPROTO));
        };
        let len = usize::from(len);
        if len < NLA_HDRLEN || len > rest.len() {
            return Some(Err(Errno::EPROTO));
        }
        let next = align4(len).map_or(rest.len(), |n| n.min(rest.len()));
        self.rest = &rest[next..];
        Some(Ok(Attr {
            kind: ty & NLA_TYPE_MASK,
            nested_flag: ty & NLA_F_NESTED != 0,
            payload: &rest[NLA_HDRLEN..len],
        }))
    }
}

#[cfg(test)]
mod tests {
    use rverbs_abi::Errno;

    use super::*;
    use crate::abi::NLA_HDRLEN;
    use crate::tests::{collect, nla};
    use crate::*;

    #[test]
    fn attrs_valid() {
        let buf = [
            nla(attr::DEV_INDEX, &7u32.to_ne_bytes()),
            nla(attr::DEV_NAME, b"mlx5_0\0"),
            nla(attr::DEV_NODE_TYPE, &[1]),
            nla(attr::NODE_GUID, &0x1122_3344_5566_7788u64.to_ne_bytes()),
        ]
        .concat();
        let a: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(a.len(), 4);
        assert_eq!((a[0].kind, a[0].u32()), (attr::DEV_INDEX, Some(7)));
        assert_eq!((a[1].kind, a[1].str()), (attr::DEV_NAME, Some("mlx5_0")));
        assert_eq!(a[1].payload, b"mlx5_0\0");
        assert_eq!((a[2].kind, a[2].u8()), (attr::DEV_NODE_TYPE, Some(1)));
        assert_eq!(a[2].payload.len(), 1);
        assert_eq!(a[3].u64(), Some(0x1122_3344_5566_7788));
        assert!(a.iter().all(|a| !a.nested_flag));
        assert_eq!(
            Attrs::new(&buf).get(attr::DEV_NAME).unwrap().unwrap().str(),
            Some("mlx5_0")
        );
        assert_eq!(Attrs::new(&buf).get(attr::FW_VERSION), Ok(None));
    }

    #[test]
    fn attrs_empty_buffer() {
        assert!(collect(&[]).is_empty());
    }

    #[test]
    fn attrs_truncated_header() {
        for cut in 1..NLA_HDRLEN {
            let buf = nla(attr::DEV_INDEX, &1u32.to_ne_bytes());
            assert_eq!(collect(&buf[..cut]), vec![Err(Errno::EPROTO)], "cut {cut}");
        }
    }

    #[test]
    fn attrs_truncated_payload() {
        let mut buf = nla(attr::DEV_INDEX, &1u32.to_ne_bytes());
        buf.extend(nla(attr::DEV_NAME, b"rxe0\0"));
        // The second attribute claims 9 bytes but only 7 are there.
        let r = collect(&buf[..8 + 7]);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].unwrap().u32(), Some(1));
        assert_eq!(r[1], Err(Errno::EPROTO));
        // `get` reports the malformation instead of "absent".
        assert_eq!(
            Attrs::new(&buf[..15]).get(attr::DEV_NAME),
            Err(Errno::EPROTO)
        );
    }

    #[test]
    fn attrs_len_below_header() {
        for bad in 0..NLA_HDRLEN as u16 {
            let mut buf = Vec::new();
            buf.extend_from_slice(&bad.to_ne_bytes());
            buf.extend_from_slice(&attr::DEV_INDEX.to_ne_bytes());
            buf.extend_from_slice(&[0; 8]);
            // Must neither loop forever nor panic: one error, then the end.
            assert_eq!(collect(&buf), vec![Err(Errno::EPROTO)], "nla_len {bad}");
        }
    }

    #[test]
    fn attrs_nested() {
        let entry = [
            nla(attr::RES_SUMMARY_ENTRY_NAME, b"qp\0"),
            nla(attr::RES_SUMMARY_ENTRY_CURR, &5u64.to_ne_bytes()),
        ]
        .concat();
        let table = nla(attr::RES_SUMMARY_ENTRY | NLA_F_NESTED, &entry);
        let buf = [
            nla(attr::DEV_INDEX, &0u32.to_ne_bytes()),
            nla(attr::RES_SUMMARY | NLA_F_NESTED, &table),
        ]
        .concat();
        let outer: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(outer.len(), 2);
        assert_eq!(outer[1].kind, attr::RES_SUMMARY);
        assert!(outer[1].nested_flag);
        assert_eq!(outer[1].payload, &table[..]);
        let entries: Vec<Attr<'_>> = outer[1].nested().map(Result::unwrap).collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].kind, attr::RES_SUMMARY_ENTRY);
        let fields: Vec<Attr<'_>> = entries[0].nested().map(Result::unwrap).collect();
        assert_eq!(fields[0].str(), Some("qp"));
        assert_eq!(fields[1].u64(), Some(5));
        // A nested table without NLA_F_NESTED (nla_nest_start_noflag) parses
        // the same way.
        let plain = nla(attr::RES_SUMMARY, &table);
        let a = collect(&plain)[0].unwrap();
        assert!(!a.nested_flag);
        assert_eq!(a.nested().count(), 1);
        // A malformed nested payload errors inside, not outside.
        let bad = nla(attr::RES_SUMMARY, &[9, 0, 1, 0]);
        let a = collect(&bad)[0].unwrap();
        assert_eq!(a.nested().collect::<Vec<_>>(), vec![Err(Errno::EPROTO)]);
    }

    #[test]
    fn attrs_type_mask() {
        // NLA_F_NET_BYTEORDER (1 << 14) and NLA_F_NESTED are masked off.
        let buf = nla(
            attr::DEV_INDEX | (1 << 14) | NLA_F_NESTED,
            &1u32.to_ne_bytes(),
        );
        let a = collect(&buf)[0].unwrap();
        assert_eq!(a.kind, attr::DEV_INDEX);
        assert!(a.nested_flag);
    }

    #[test]
    fn attrs_zero_length() {
        let buf = [nla(attr::PAD, &[]), nla(attr::FW_VERSION, &[])].concat();
        assert_eq!(buf.len(), 8);
        let a: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(a.len(), 2);
        for a in &a {
            assert!(a.payload.is_empty());
            assert_eq!(
                (a.u8(), a.u16(), a.u32(), a.u64(), a.uint()),
                (None, None, None, None, None)
            );
            assert_eq!(a.str(), Some(""));
            assert_eq!(a.nested().count(), 0);
        }
    }

    #[test]
    fn attrs_unaligned_padding() {
        // A 1-byte u8 and a 5-byte string are each padded to 8; the next
        // attribute starts after the padding.
        let buf = [
            nla(attr::DEV_NODE_TYPE, &[4]),
            nla(attr::DEV_NAME, b"siw0\0"),
            nla(attr::DEV_INDEX, &9u32.to_ne_bytes()),
        ]
        .concat();
        assert_eq!(buf.len(), 8 + 12 + 8);
        let a: Vec<Attr<'_>> = collect(&buf).into_iter().map(Result::unwrap).collect();
        assert_eq!(a[0].u8(), Some(4));
        assert_eq!(a[1].str(), Some("siw0"));
        assert_eq!(a[2].u32(), Some(9));
        // The padding of the last attribute may be missing.
        let short = &buf[..8 + 9];
        let a: Vec<Attr<'_>> = collect(short).into_iter().map(Result::unwrap).collect();
        assert_eq!(a.len(), 2);
        assert_eq!(a[1].str(), Some("siw0"));
        // Stray bytes after the last attribute (fewer than a header) are an
        // error.
        let mut stray = nla(attr::DEV_INDEX, &9u32.to_ne_bytes());
        stray.extend_from_slice(&[0, 0]);
        let r = collect(&stray);
        assert_eq!(r.len(), 2);
        assert_eq!(r[1], Err(Errno::EPROTO));
    }

    #[test]
    fn attr_helpers_short_payloads() {
        let one = nla(1, &[0xab]);
        let a = collect(&one)[0].unwrap();
        assert_eq!(
            (a.u8(), a.u16(), a.u32(), a.u64()),
            (Some(0xab), None, None, None)
        );
        let three = nla(1, &[1, 2, 3]);
        let a = collect(&three)[0].unwrap();
        assert_eq!(
            (a.u16(), a.u32(), a.uint()),
            (Some(u16::from_ne_bytes([1, 2])), None, None)
        );
        let seven = nla(1, &[0; 7]);
        let a = collect(&seven)[0].unwrap();
        assert_eq!((a.u32(), a.u64(), a.uint()), (Some(0), None, None));
        // uint accepts the widths the kernel may use for one value.
        let w4 = nla(1, &14u32.to_ne_bytes());
        let w8 = nla(1, &14u64.to_ne_bytes());
        assert_eq!(collect(&w4)[0].unwrap().uint(), Some(14));
        assert_eq!(collect(&w8)[0].unwrap().uint(), Some(14));
        // Strings: no NUL is fine, bytes after the NUL are ignored, and
        // invalid UTF-8 is None.
        let s = nla(1, b"abc");
        assert_eq!(collect(&s)[0].unwrap().str(), Some("abc"));
        let s = nla(1, b"ab\0cd");
        assert_eq!(collect(&s)[0].unwrap().str(), Some("ab"));
        let s = nla(1, &[0xff, 0xfe, 0]);
        assert_eq!(collect(&s)[0].unwrap().str(), None);
    }
}
