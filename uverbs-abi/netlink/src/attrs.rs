//! Attribute parsing: [`Attr`], one `struct nlattr` TLV with its typed
//! accessors, and [`Attrs`], the bounds-checked walk over a run of them.

use nix::errno::Errno;

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
