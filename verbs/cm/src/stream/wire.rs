//! rsockets' wire formats, as librdmacm's rsockets put them on the wire:
//! the connection's private data ([`ConnData`]), the 32-bit immediate that
//! frames every message ([`Msg`]), and the 16-byte buffer descriptor
//! ([`RsSge`]) a receiver writes into its peer's target list to grant it
//! receive-buffer space.
//!
//! Everything here decodes bytes a peer chose: the decoders are total
//! (every input is a value or an error, never a panic) and are fuzzed
//! (`tests/fuzz/fuzz_targets/stream_wire.rs`).

use std::fmt;

/// The protocol version rsockets speaks (and the only one it accepts).
pub const VERSION: u8 = 1;
/// [`ConnData::flags`]: the sender is big-endian (its target list holds
/// big-endian descriptors).
pub const FLAG_NET: u8 = 1 << 0;
/// [`ConnData::flags`]: the sender has a direct-placement (iomap) area
/// after its target list.
pub const FLAG_IOMAP: u8 = 1 << 1;
/// Entries in a target list: a receiver advertises its receive buffer in
/// halves, and the list holds the two of them.
pub const SGL_SIZE: u32 = 2;
/// Bytes of the connection data at the front of the private data.
pub const CONN_DATA_LEN: usize = 40;
/// Bytes of one buffer descriptor.
pub const SGE_LEN: usize = 16;
/// Bytes of one direct-placement (iomap) descriptor.
pub const IOMAP_LEN: usize = 24;
/// The most direct-placement descriptors a side can announce (the
/// largest value of [`ConnData::target_iomap_size`]'s scale).
#[cfg(any(test, feature = "fuzz"))]
pub const IOMAP_MAX: u32 = scale_to_value(0xff);
/// Bits of an immediate that carry the message's value.
pub const DATA_BITS: u32 = 29;
/// The largest value a message carries (a data message's length).
pub const DATA_MAX: u32 = (1 << DATA_BITS) - 1;

/// A buffer descriptor: `length` bytes at `addr` under `key`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RsSge {
    /// The buffer's address in the owner's address space.
    pub addr: u64,
    /// The rkey that grants the peer access.
    pub key: u32,
    /// Bytes granted (in a target list's header: its entry count).
    pub length: u32,
}

impl RsSge {
    /// The 16 bytes in the given byte order (addr, key, length).
    pub fn to_bytes(self, big_endian: bool) -> [u8; SGE_LEN] {
        let mut b = [0u8; SGE_LEN];
        if big_endian {
            b[..8].copy_from_slice(&self.addr.to_be_bytes());
            b[8..12].copy_from_slice(&self.key.to_be_bytes());
            b[12..].copy_from_slice(&self.length.to_be_bytes());
        } else {
            b[..8].copy_from_slice(&self.addr.to_le_bytes());
            b[8..12].copy_from_slice(&self.key.to_le_bytes());
            b[12..].copy_from_slice(&self.length.to_le_bytes());
        }
        b
    }

    /// Reads 16 bytes in the given byte order.
    pub fn from_bytes(b: &[u8; SGE_LEN], big_endian: bool) -> RsSge {
        let (a, rest) = b.split_at(8);
        let (k, l) = rest.split_at(4);
        // The splits give exactly 8, 4 and 4 bytes.
        let a: [u8; 8] = a.try_into().unwrap_or_default();
        let k: [u8; 4] = k.try_into().unwrap_or_default();
        let l: [u8; 4] = l.try_into().unwrap_or_default();
        if big_endian {
            RsSge {
                addr: u64::from_be_bytes(a),
                key: u32::from_be_bytes(k),
                length: u32::from_be_bytes(l),
            }
        } else {
            RsSge {
                addr: u64::from_le_bytes(a),
                key: u32::from_le_bytes(k),
                length: u32::from_le_bytes(l),
            }
        }
    }
}

/// A direct-placement (iomap) descriptor: the peer may write `sge.length`
/// bytes at `sge.addr` under `sge.key`, addressing them as `offset` and
/// up. A side writes its descriptors into entries after the peer's target
/// list (rsockets' `riomap`), in the peer's byte order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Iomap {
    /// The offset the region starts at, as the writer addresses it.
    pub offset: u64,
    /// The region.
    pub sge: RsSge,
}

impl Iomap {
    /// The 24 bytes in the given byte order (offset, then the region).
    pub fn to_bytes(self, big_endian: bool) -> [u8; IOMAP_LEN] {
        let mut b = [0u8; IOMAP_LEN];
        let off = if big_endian {
            self.offset.to_be_bytes()
        } else {
            self.offset.to_le_bytes()
        };
        b[..8].copy_from_slice(&off);
        b[8..].copy_from_slice(&self.sge.to_bytes(big_endian));
        b
    }

    /// Reads 24 bytes in the given byte order.
    pub fn from_bytes(b: &[u8; IOMAP_LEN], big_endian: bool) -> Iomap {
        let (o, s) = b.split_at(8);
        // The split gives exactly 8 and 16 bytes.
        let o: [u8; 8] = o.try_into().unwrap_or_default();
        let s: [u8; SGE_LEN] = s.try_into().unwrap_or_default();
        Iomap {
            offset: if big_endian {
                u64::from_be_bytes(o)
            } else {
                u64::from_le_bytes(o)
            },
            sge: RsSge::from_bytes(&s, big_endian),
        }
    }

    /// Where offset `at` lies in the region: its address there and the
    /// bytes from there to the region's end; `None` outside the region
    /// (or where a peer's values would overflow).
    pub fn locate(&self, at: u64) -> Option<(u64, u32)> {
        let into = at.checked_sub(self.offset)?;
        let left = u64::from(self.sge.length).checked_sub(into)?;
        if left == 0 {
            return None;
        }
        let addr = self.sge.addr.checked_add(into)?;
        // left <= length, a u32.
        Some((addr, left as u32))
    }
}

/// Whether this host is big-endian (rsockets' "network order" host).
pub const fn host_is_net() -> bool {
    cfg!(target_endian = "big")
}

/// The connection data each side sends in its private data (the request's
/// and the accept's first 40 bytes; the CM pads the rest with zeros).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnData {
    /// [`VERSION`].
    pub version: u8,
    /// [`FLAG_NET`], [`FLAG_IOMAP`].
    pub flags: u8,
    /// Messages the sender can receive at once (its receive queue's depth):
    /// the peer's first credits.
    pub credits: u16,
    /// The direct-placement area's size, on rsockets' 8-bit scale (0: none).
    pub target_iomap_size: u8,
    /// Where the peer writes its buffer grants: the address and rkey of the
    /// sender's target list, and its entry count ([`SGL_SIZE`]).
    pub target_sgl: RsSge,
    /// The first half of the sender's receive buffer, granted at once.
    pub data_buf: RsSge,
}

/// Why a peer's bytes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the format needs.
    Short {
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        got: usize,
    },
    /// A version other than [`VERSION`].
    Version(u8),
    /// The target list's entry count is not one rsockets uses (1 or 2).
    TargetList(u32),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Short { need, got } => {
                write!(f, "rsockets connection data of {got} bytes, {need} needed")
            }
            WireError::Version(v) => {
                write!(f, "rsockets protocol version {v}, only {VERSION} is spoken")
            }
            WireError::TargetList(n) => {
                write!(
                    f,
                    "rsockets target list of {n} entries (1 to {SGL_SIZE} expected)"
                )
            }
        }
    }
}

impl std::error::Error for WireError {}

impl ConnData {
    /// The 40 bytes on the wire (multi-byte fields big-endian).
    pub fn encode(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        // b[4..7]: reserved, zero.
        b[7] = self.target_iomap_size;
        b[8..24].copy_from_slice(&self.target_sgl.to_bytes(true));
        b[24..40].copy_from_slice(&self.data_buf.to_bytes(true));
        b
    }

    /// Reads the connection data at the front of `b` (the private data as
    /// received, padding included). Refuses short data, another version,
    /// and a target list that is empty or longer than [`SGL_SIZE`] (which
    /// rsockets never sends; an empty one would leave no slot to grant
    /// buffer space into).
    pub fn decode(b: &[u8]) -> Result<ConnData, WireError> {
        let Some(b) = b.get(..CONN_DATA_LEN) else {
            return Err(WireError::Short {
                need: CONN_DATA_LEN,
                got: b.len(),
            });
        };
        if b[0] != VERSION {
            return Err(WireError::Version(b[0]));
        }
        let sge = |at: usize| {
            let mut s = [0u8; SGE_LEN];
            s.copy_from_slice(&b[at..at + SGE_LEN]);
            RsSge::from_bytes(&s, true)
        };
        let d = ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl: sge(8),
            data_buf: sge(24),
        };
        if !(1..=SGL_SIZE).contains(&d.target_sgl.length) {
            return Err(WireError::TargetList(d.target_sgl.length));
        }
        Ok(d)
    }

    /// Whether the sender's target list holds big-endian descriptors.
    pub fn is_net(&self) -> bool {
        self.flags & FLAG_NET != 0
    }
}

/// What a message is: the top three bits of its immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Data: the value is its length; the bytes were written at the
    /// receiver's current buffer position.
    Data,
    /// Reserved (rsockets treats it as data).
    DataMore,
    /// A direct-placement write (never carried in an immediate).
    Write,
    /// Reserved (rsockets treats it as data).
    DraMore,
    /// A credit grant: the value is the sequence number up to which the
    /// peer may send; it may come with a buffer descriptor written into
    /// the target list.
    Sgl,
    /// Reserved (rsockets treats it as data).
    Rsvd,
    /// A direct-placement descriptor was updated (the value: its index).
    IomapSgl,
    /// Control: the value is a [`Ctrl`].
    Ctrl,
}

/// The values of a [`Op::Ctrl`] message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Ctrl {
    /// The sender closed both directions.
    Disconnect = 0,
    /// A keep-alive probe (sent as a zero-length RDMA WRITE, no immediate).
    Keepalive = 1,
    /// The sender will send no more (it still reads).
    Shutdown = 2,
}

/// A message's immediate, decoded: its [`Op`] and its 29-bit value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Msg {
    /// What the message is.
    pub op: Op,
    /// Its value (length, sequence number, index or [`Ctrl`]).
    pub data: u32,
}

impl Msg {
    /// A message; `data` is cut to its 29 bits.
    pub const fn new(op: Op, data: u32) -> Msg {
        Msg {
            op,
            data: data & DATA_MAX,
        }
    }

    /// Decodes an immediate (host order). Every value is a message.
    pub const fn from_imm(imm: u32) -> Msg {
        let op = match imm >> DATA_BITS {
            0 => Op::Data,
            1 => Op::DataMore,
            2 => Op::Write,
            3 => Op::DraMore,
            4 => Op::Sgl,
            5 => Op::Rsvd,
            6 => Op::IomapSgl,
            _ => Op::Ctrl,
        };
        Msg {
            op,
            data: imm & DATA_MAX,
        }
    }

    /// The immediate (host order).
    pub const fn imm(self) -> u32 {
        let op = match self.op {
            Op::Data => 0,
            Op::DataMore => 1,
            Op::Write => 2,
            Op::DraMore => 3,
            Op::Sgl => 4,
            Op::Rsvd => 5,
            Op::IomapSgl => 6,
            Op::Ctrl => 7,
        };
        (op << DATA_BITS) | (self.data & DATA_MAX)
    }

    /// The [`Ctrl`] of a control message (`None` for other ops and for
    /// values rsockets does not define).
    pub const fn ctrl(self) -> Option<Ctrl> {
        match (self.op, self.data) {
            (Op::Ctrl, 0) => Some(Ctrl::Disconnect),
            (Op::Ctrl, 1) => Some(Ctrl::Keepalive),
            (Op::Ctrl, 2) => Some(Ctrl::Shutdown),
            _ => None,
        }
    }
}

/// rsockets' 8-bit scale for sizes (the iomap size in [`ConnData`]):
/// values up to 128 as they are, larger ones as `128 | (value >> 8)`.
pub const fn value_to_scale(value: u32) -> u8 {
    if value <= 128 {
        value as u8
    } else {
        let v = value >> 8;
        (0x80 | if v > 0x7f { 0x7f } else { v }) as u8
    }
}

/// The inverse of [`value_to_scale`].
pub const fn scale_to_value(scale: u8) -> u32 {
    if scale <= 128 {
        scale as u32
    } else {
        ((scale & 0x7f) as u32) << 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ConnData {
        ConnData {
            version: VERSION,
            flags: FLAG_IOMAP,
            credits: 384,
            target_iomap_size: 0,
            target_sgl: RsSge {
                addr: 0x7f00_1234_5678,
                key: 0x1122,
                length: SGL_SIZE,
            },
            data_buf: RsSge {
                addr: 0x7f00_0000_1000,
                key: 0x3344,
                length: 65536,
            },
        }
    }

    #[test]
    fn conn_data_layout() {
        let b = sample().encode();
        // Byte for byte as rsockets lays out struct rs_conn_data.
        assert_eq!(&b[..8], &[1, 2, 0x01, 0x80, 0, 0, 0, 0]);
        assert_eq!(&b[8..16], &0x7f00_1234_5678u64.to_be_bytes());
        assert_eq!(&b[16..20], &0x1122u32.to_be_bytes());
        assert_eq!(&b[20..24], &2u32.to_be_bytes());
        assert_eq!(&b[36..40], &65536u32.to_be_bytes());
        let mut padded = b.to_vec();
        padded.resize(56, 0);
        assert_eq!(ConnData::decode(&padded), Ok(sample()));
    }

    #[test]
    fn conn_data_refusals() {
        let b = sample().encode();
        assert_eq!(
            ConnData::decode(&b[..39]),
            Err(WireError::Short { need: 40, got: 39 })
        );
        let mut v = b;
        v[0] = 2;
        assert_eq!(ConnData::decode(&v), Err(WireError::Version(2)));
        let mut v = b;
        v[20..24].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(ConnData::decode(&v), Err(WireError::TargetList(0)));
        let mut v = b;
        v[20..24].copy_from_slice(&3u32.to_be_bytes());
        assert_eq!(ConnData::decode(&v), Err(WireError::TargetList(3)));
        // Zeros (a peer that sent no private data) are refused.
        assert_eq!(ConnData::decode(&[0; 56]), Err(WireError::Version(0)));
    }

    #[test]
    fn msg_round_trip() {
        for imm in [0, 1, DATA_MAX, 4 << 29 | 400, 7 << 29 | 2, u32::MAX] {
            assert_eq!(Msg::from_imm(imm).imm(), imm);
        }
        assert_eq!(Msg::new(Op::Data, 4096).imm(), 4096);
        assert_eq!(Msg::new(Op::Sgl, 768).imm(), 0x8000_0300);
        assert_eq!(Msg::from_imm(0xe000_0002).ctrl(), Some(Ctrl::Shutdown));
        assert_eq!(Msg::from_imm(0xe000_0000).ctrl(), Some(Ctrl::Disconnect));
        assert_eq!(Msg::from_imm(0xe000_0009).ctrl(), None);
        assert_eq!(Msg::from_imm(0).ctrl(), None);
    }

    #[test]
    fn sge_both_orders() {
        let s = sample().data_buf;
        for be in [false, true] {
            assert_eq!(RsSge::from_bytes(&s.to_bytes(be), be), s);
        }
        assert_eq!(&s.to_bytes(false)[12..], &65536u32.to_le_bytes());
    }

    #[test]
    fn iomap_layout_and_locate() {
        let m = Iomap {
            offset: 4096,
            sge: RsSge {
                addr: 0x7f00_0000_0000,
                key: 7,
                length: 100,
            },
        };
        let le = m.to_bytes(false);
        // As rsockets lays out struct rs_iomap: offset, addr, key, length.
        assert_eq!(&le[..8], &4096u64.to_le_bytes());
        assert_eq!(&le[8..16], &0x7f00_0000_0000u64.to_le_bytes());
        assert_eq!(&le[16..20], &7u32.to_le_bytes());
        assert_eq!(&le[20..], &100u32.to_le_bytes());
        for be in [false, true] {
            assert_eq!(Iomap::from_bytes(&m.to_bytes(be), be), m);
        }
        assert_eq!(m.locate(4096), Some((0x7f00_0000_0000, 100)));
        assert_eq!(m.locate(4195), Some((0x7f00_0000_0063, 1)));
        assert_eq!(m.locate(4196), None);
        assert_eq!(m.locate(4095), None);
        let hostile = Iomap {
            offset: 0,
            sge: RsSge {
                addr: u64::MAX - 1,
                key: 1,
                length: u32::MAX,
            },
        };
        assert_eq!(hostile.locate(5), None);
        assert_eq!(IOMAP_MAX, 32512);
    }

    #[test]
    fn scale() {
        assert_eq!(value_to_scale(0), 0);
        assert_eq!(value_to_scale(128), 128);
        assert_eq!(scale_to_value(value_to_scale(4096)), 4096);
        assert_eq!(scale_to_value(0x81), 256);
    }
}
