//! perftest's control messages, the same over its TCP exchange (the
//! default) and over its `-R` comm connection (perftest 4.5, version
//! "6.06", as Debian 12 ships it): the version, the page and cache line
//! sizes, the MTU, the keys (`struct pingpong_dest`: binary over `-R`,
//! text over TCP) and the five figures of the bandwidth report.
//!
//! Pure encoders and decoders only, unit-tested and fuzzed
//! (`tests/fuzz/fuzz_targets/perftest_comm.rs`): every decoder takes the
//! peer's bytes as they came, checks their length and refuses what does
//! not parse with an error. The channels that carry them are
//! [`super::ptcomm`] (`-R`) and [`super::pttcp`] (TCP).

use anyhow::{anyhow, bail, Result};
use rverbs::{Gid, Mtu};

use super::args::{Kind, Verb};
use super::stats::Report;

/// The version this side announces: below 6.28, so that a newer perftest
/// does not start its parameter negotiation, and at least 5.70, the
/// oldest perftest accepts.
pub const VERSION: &str = "6.06";
/// The oldest peer version perftest (and so this side) works with.
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Size of the version message (`char version[16]`).
pub const VERSION_LEN: usize = 16;
/// Size of perftest 4.5's `struct pingpong_dest` (up to version 6.28).
pub const DEST_LEN: usize = 56;
/// Size of the newer `struct pingpong_dest` (version 6.29 on), received
/// only.
pub const DEST_LEN_NEW: usize = 64;
/// Size of the TCP dest without a GID (perftest's `KEY_MSG_SIZE`).
pub const KEY_LEN: usize = 59;
/// Size of the TCP dest with a GID (perftest's `KEY_MSG_SIZE_GID`).
pub const KEY_LEN_GID: usize = 108;
/// The cache line size announced (perftest sends sysconf's L1 line).
pub const CACHE_LINE: i32 = 64;

/// The 16 bytes of the version message: [`VERSION`], a NUL, then our
/// test described in the 11 bytes perftest leaves zero and never reads
/// (it reads the version with `atof`, which stops at the NUL): a peer
/// that is `rverbs perf` finds out whether both sides were given the
/// same test ([`TestDesc`]); perftest sees version 6.06.
pub fn version_msg(test: &TestDesc) -> [u8; VERSION_LEN] {
    let mut b = [0u8; VERSION_LEN];
    b[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    b[DESC_AT..].copy_from_slice(&test.encode());
    b
}

/// Where [`TestDesc`] starts in the version message: after the version
/// text and its NUL.
const DESC_AT: usize = VERSION.len() + 1;
/// Size of an encoded [`TestDesc`].
pub const DESC_LEN: usize = VERSION_LEN - DESC_AT;
/// The first bytes of an encoded [`TestDesc`].
const DESC_MAGIC: &[u8; 2] = b"rv";

/// The test one `rverbs perf` side was given, as its version message
/// carries it to a peer that is `rverbs perf` too: what both must agree
/// on. perftest's messages carry none of it (perftest sends zeros there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestDesc {
    /// Operation.
    pub verb: Verb,
    /// Bandwidth or latency.
    pub kind: Kind,
    /// A `-a` sweep (`size` is its largest size).
    pub all: bool,
    /// A `-D` run (`count` is its seconds).
    pub duration: bool,
    /// Compare-and-swap atomics.
    pub cmp_swap: bool,
    /// Message size, or the largest of the sweep.
    pub size: u32,
    /// Iterations per size, or the `-D` seconds.
    pub count: u32,
}

impl TestDesc {
    const ALL: u8 = 1 << 3;
    const DURATION: u8 = 1 << 4;
    const CMP_SWAP: u8 = 1 << 5;

    /// The [`DESC_LEN`] bytes: "rv", one byte of verb (bits 0-1), kind
    /// (bit 2) and flags (bits 3-5), the size and the count big-endian.
    pub fn encode(&self) -> [u8; DESC_LEN] {
        let mut b = [0u8; DESC_LEN];
        b[..2].copy_from_slice(DESC_MAGIC);
        let mut t = self.verb.code() | self.kind.code() << 2;
        for (on, bit) in [
            (self.all, Self::ALL),
            (self.duration, Self::DURATION),
            (self.cmp_swap, Self::CMP_SWAP),
        ] {
            if on {
                t |= bit;
            }
        }
        b[2] = t;
        b[3..7].copy_from_slice(&self.size.to_be_bytes());
        b[7..11].copy_from_slice(&self.count.to_be_bytes());
        b
    }

    /// The description in a peer's version message, if it has one (the
    /// peer is `rverbs perf`); `None` for perftest's (zeros there) and for
    /// anything that is not one of ours.
    pub fn from_version(b: &[u8]) -> Option<TestDesc> {
        if b.len() != VERSION_LEN || b[DESC_AT - 1] != 0 {
            return None;
        }
        let d = &b[DESC_AT..];
        if &d[..2] != DESC_MAGIC || d[2] >> 6 != 0 {
            return None;
        }
        let t = d[2];
        let u32_at = |i: usize| u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
        Some(TestDesc {
            verb: Verb::from_code(t & 3)?,
            kind: Kind::from_code(t >> 2 & 1)?,
            all: t & Self::ALL != 0,
            duration: t & Self::DURATION != 0,
            cmp_swap: t & Self::CMP_SWAP != 0,
            size: u32_at(3),
            count: u32_at(7),
        })
    }

    /// The test as a command line would give it (`perf write bw -s 64
    /// -n 20`).
    pub fn describe(&self) -> String {
        let mut s = format!("perf {} {}", self.verb.name(), self.kind.name());
        if self.all {
            s += &format!(" -a (up to {} bytes)", self.size);
        } else {
            s += &format!(" -s {}", self.size);
        }
        if self.duration {
            s += &format!(" -D {}", self.count);
        } else {
            s += &format!(" -n {}", self.count);
        }
        if self.cmp_swap {
            s += " -A CMP_AND_SWAP";
        }
        s
    }

    /// Refuses a peer given another test (`theirs`: what its version
    /// message carried, if anything).
    pub fn check_peer(&self, theirs: Option<&TestDesc>) -> Result<()> {
        match theirs {
            Some(t) if t != self => bail!(
                "the peer runs `{}`, this side `{}`: both sides must be given the same test",
                t.describe(),
                self.describe()
            ),
            _ => Ok(()),
        }
    }
}

/// The peer's version as C's `atof` reads it: the leading decimal number
/// of the text before the first NUL, 0 if there is none.
pub fn parse_version(b: &[u8]) -> f64 {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let text = String::from_utf8_lossy(&b[..end]);
    let t = text.trim_start();
    let mut dot = false;
    let n = t
        .char_indices()
        .take_while(|&(_, c)| {
            if c == '.' && !dot {
                dot = true;
                true
            } else {
                c.is_ascii_digit()
            }
        })
        .count();
    t[..n].parse().unwrap_or(0.0)
}

/// A big-endian `int` message (perftest's `hton_int`): page size, cache line.
pub fn int_msg(v: i32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Decodes [`int_msg`]; anything but 4 bytes is refused.
pub fn parse_int(b: &[u8]) -> Result<i32> {
    let a: [u8; 4] = b.try_into().map_err(|_| {
        anyhow!(
            "expected a 4-byte number from the peer, got {} bytes",
            b.len()
        )
    })?;
    Ok(i32::from_be_bytes(a))
}

/// The MTU message (peer version 5.31 on): the digit of the `ibv_mtu`
/// code (`'1'` = 256 ... `'5'` = 4096) and a NUL.
pub fn mtu_msg(m: Mtu) -> [u8; 2] {
    [b'0' + m as u8, 0]
}

/// Decodes [`mtu_msg`] (`strtol`'s reading); `None` for a code that is
/// not an MTU. Anything but 2 bytes is refused.
pub fn parse_mtu_msg(b: &[u8]) -> Result<Option<Mtu>> {
    if b.len() != 2 {
        bail!("expected the 2-byte MTU message, got {} bytes", b.len());
    }
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let code: Option<u8> = std::str::from_utf8(&b[..end])
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Ok(code.and_then(Mtu::from_raw))
}

/// perftest's `struct pingpong_dest`: binary over `-R` ([`PtDest::encode`],
/// every number big-endian, as `rdma_write_keys` sends it), text over TCP
/// ([`PtDest::encode_text`], as `ethernet_write_keys` does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PtDest {
    /// Port LID (0 on RoCE).
    pub lid: u32,
    /// Outstanding reads (1 for WRITE).
    pub out_reads: u32,
    /// The data QP's number (informational with rdma_cm).
    pub qpn: u32,
    /// A PSN (informational with rdma_cm).
    pub psn: u32,
    /// The rkey of the data buffer: what the client's WRITEs use.
    pub rkey: u32,
    /// The address WRITEs go to.
    pub vaddr: u64,
    /// Data-validation tail markers (newer layout only; 0).
    pub tail_markers_vaddr: u64,
    /// The GID (informational).
    pub gid: Gid,
    /// SRQ number (0).
    pub srqn: u32,
    /// GID index (-1: none).
    pub gid_index: i32,
}

impl PtDest {
    /// The 56-byte form of perftest 4.5 (padding at 20..24 zero).
    pub fn encode(&self) -> [u8; DEST_LEN] {
        let mut b = [0u8; DEST_LEN];
        b[0..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid.0);
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b[52..56].copy_from_slice(&self.gid_index.to_be_bytes());
        b
    }

    /// Decodes a received dest, its layout chosen by its length: 56 bytes
    /// (perftest up to 6.28) or 64 (6.29 on, with the tail markers'
    /// address before the GID). Any other length is refused.
    pub fn decode(b: &[u8]) -> Result<PtDest> {
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        let (tail, gid_at, rest) = match b.len() {
            DEST_LEN => (0, 32, 48),
            DEST_LEN_NEW => (u64_at(32), 40, 56),
            n => bail!(
                "the peer's address message has {n} bytes, expected {DEST_LEN} \
                 (or {DEST_LEN_NEW} from a newer perftest)"
            ),
        };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[gid_at..gid_at + 16]);
        Ok(PtDest {
            lid: u32_at(0),
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64_at(24),
            tail_markers_vaddr: tail,
            gid: Gid(gid),
            srqn: u32_at(rest),
            gid_index: u32_at(rest + 4) as i32,
        })
    }

    /// The TCP form: `LID:OUT_READS:QPN:PSN:RKEY:VADDR:SRQN` in hex
    /// (widths 4, 4, 6, 6, 8, 16, 8) and a NUL, [`KEY_LEN`] bytes; with
    /// `gid` (the side sends from a GID: perftest's `gid_index` is not -1)
    /// the 16 GID bytes, each two hex digits and a colon, come between
    /// VADDR and SRQN, and a colon ends SRQN: [`KEY_LEN_GID`] bytes. The
    /// GID index is not sent. Each number is cut to its width (the QPN and
    /// PSN are 24-bit, the LID 16-bit; OUT_READS never exceeds 255).
    pub fn encode_text(&self, gid: bool) -> Vec<u8> {
        let mut t = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid & 0xffff,
            self.out_reads & 0xffff,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        if gid {
            for b in self.gid.0 {
                t += &format!("{b:02x}:");
            }
            t += &format!("{:08x}:", self.srqn);
        } else {
            t += &format!("{:08x}", self.srqn);
        }
        let mut v = t.into_bytes();
        v.push(0);
        v
    }

    /// How long the peer's text dest is, from its first [`KEY_LEN`]
    /// bytes: [`KEY_LEN`] if they end in the NUL, [`KEY_LEN_GID`] if a
    /// GID's colon stands there. Anything else is refused.
    pub fn text_len(head: &[u8]) -> Result<usize> {
        match head.get(KEY_LEN - 1) {
            Some(0) => Ok(KEY_LEN),
            Some(b':') => Ok(KEY_LEN_GID),
            _ => bail!(
                "the peer's address message is not perftest's: {:?}",
                String::from_utf8_lossy(&head[..head.len().min(KEY_LEN)])
            ),
        }
    }

    /// Decodes [`PtDest::encode_text`]'s forms, told apart by their length
    /// ([`KEY_LEN`] or [`KEY_LEN_GID`]); the GID is zero in the short form,
    /// the GID index -1 in both (it is not sent). Every field must be hex
    /// digits that fit its type, in the form's exact number of fields.
    pub fn decode_text(b: &[u8]) -> Result<PtDest> {
        let gid = match b.len() {
            KEY_LEN => false,
            KEY_LEN_GID => true,
            n => bail!(
                "the peer's address message has {n} bytes, expected {KEY_LEN} \
                 (or {KEY_LEN_GID} with a GID)"
            ),
        };
        let bad = || {
            anyhow!(
                "couldn't parse the peer's address message {:?}",
                String::from_utf8_lossy(b)
            )
        };
        let Some((&0, text)) = b.split_last() else {
            return Err(bad());
        };
        let text = std::str::from_utf8(text).map_err(|_| bad())?;
        let f: Vec<&str> = text.split(':').collect();
        // The GID form ends in a colon: an empty last field.
        let want = if gid { 24 } else { 7 };
        if f.len() != want || (gid && !f[23].is_empty()) {
            return Err(bad());
        }
        let hex = |s: &str, digits: usize| -> Result<u64> {
            if s.is_empty() || s.len() > digits || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u64::from_str_radix(s, 16).map_err(|_| bad())
        };
        let h32 = |s: &str| hex(s, 8).map(|v| v as u32);
        let mut g = [0u8; 16];
        let srqn = if gid {
            for (i, byte) in g.iter_mut().enumerate() {
                *byte = hex(f[6 + i], 2)? as u8;
            }
            h32(f[22])?
        } else {
            h32(f[6])?
        };
        Ok(PtDest {
            lid: h32(f[0])?,
            out_reads: h32(f[1])?,
            qpn: h32(f[2])?,
            psn: h32(f[3])?,
            rkey: h32(f[4])?,
            vaddr: hex(f[5], 16)?,
            tail_markers_vaddr: 0,
            gid: Gid(g),
            srqn,
            gid_index: -1,
        })
    }
}

/// The five figures of `xchg_bw_reports` (peer version 5.33 on), in
/// perftest's units: bandwidth in MB/s (2^20 bytes) or, with
/// `--report_gbits`, Gb/s (1.25e8 bytes); the message rate in Mpps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwFigures {
    /// Message size.
    pub size: u64,
    /// Iterations (times QPs).
    pub iters: u64,
    /// Peak bandwidth (0 when not measured).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate, Mpps.
    pub msg_rate: f64,
}

impl BwFigures {
    /// The five 8-byte messages: two big-endian integers, then three
    /// doubles byte-swapped to big-endian.
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// Decodes [`BwFigures::encode`]'s messages.
    pub fn decode(m: &[[u8; 8]; 5]) -> BwFigures {
        let f = |b: &[u8; 8]| f64::from_bits(u64::from_be_bytes(*b));
        BwFigures {
            size: u64::from_be_bytes(m[0]),
            iters: u64::from_be_bytes(m[1]),
            bw_peak: f(&m[2]),
            bw_avg: f(&m[3]),
            msg_rate: f(&m[4]),
        }
    }

    /// A report's figures; `unit` is the bytes per second of one unit of
    /// bandwidth (2^20, or 1.25e8 for Gb/s).
    pub fn from_report(r: &Report, unit: f64) -> BwFigures {
        BwFigures {
            size: r.size,
            iters: r.iters,
            bw_peak: if r.has_peak() { r.bw_peak / unit } else { 0.0 },
            bw_avg: r.bw_avg / unit,
            msg_rate: r.msg_rate / 1e6,
        }
    }

    /// Back to a report (bytes and messages per second); the peak counts
    /// as measured when it is positive. A figure that is not finite, or
    /// not once scaled, becomes 0.
    pub fn to_report(&self, unit: f64) -> Report {
        let fin = |v: f64, scale: f64| {
            let s = v * scale;
            if s.is_finite() {
                s
            } else {
                0.0
            }
        };
        let mut r = Report {
            size: self.size,
            iters: self.iters,
            bw_peak: fin(self.bw_peak, unit),
            bw_avg: fin(self.bw_avg, unit),
            msg_rate: fin(self.msg_rate, 1e6),
            ..Default::default()
        };
        if r.bw_avg > 0.0 {
            r.elapsed = fin(r.size as f64 * r.iters as f64, 1.0 / r.bw_avg);
        }
        if r.bw_peak > 0.0 {
            r.flags |= Report::PEAK;
        }
        r
    }
}

/// Checks that a message from the peer has one of the lengths `want`.
pub fn check_len(b: &[u8], want: &[usize], what: &str) -> Result<()> {
    if !want.contains(&b.len()) {
        let w: Vec<String> = want.iter().map(|n| n.to_string()).collect();
        bail!(
            "out of step with the peer: {what} came as {} bytes, expected {} \
             (is the peer perftest 4.5 or rverbs perf, running the same test, \
             both with -R or both without?)",
            b.len(),
            w.join(" or ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_message_and_atof() {
        let m = version_msg(&desc());
        assert_eq!(&m[..5], b"6.06\0");
        assert_eq!(parse_version(&m), 6.06);
        assert_eq!(parse_version(b"6.29\0garbage\0\0\0\0"), 6.29);
        assert_eq!(parse_version(b"5.70"), 5.70);
        assert_eq!(parse_version(b" 6.1.2x"), 6.1);
        assert_eq!(parse_version(b"\0\0"), 0.0);
        assert_eq!(parse_version(b"abc"), 0.0);
    }

    fn desc() -> TestDesc {
        TestDesc {
            verb: Verb::Write,
            kind: Kind::Bw,
            all: false,
            duration: false,
            cmp_swap: false,
            size: 65536,
            count: 5000,
        }
    }

    #[test]
    fn the_test_rides_after_the_version_nul() {
        let d = desc();
        let m = version_msg(&d);
        assert_eq!(m, *b"6.06\0rv\x01\x00\x01\x00\x00\x00\x00\x13\x88", "{m:?}");
        assert_eq!(TestDesc::from_version(&m), Some(d));
        for d in [
            TestDesc {
                verb: Verb::Atomic,
                kind: Kind::Lat,
                cmp_swap: true,
                size: 8,
                ..d
            },
            TestDesc {
                verb: Verb::Send,
                all: true,
                size: 1 << 23,
                ..d
            },
            TestDesc {
                verb: Verb::Read,
                duration: true,
                count: 3,
                ..d
            },
        ] {
            assert_eq!(TestDesc::from_version(&version_msg(&d)), Some(d));
        }
        // perftest's: zeros after the NUL; anything else that is not ours.
        let mut theirs = [0u8; 16];
        theirs[..4].copy_from_slice(b"6.06");
        assert_eq!(TestDesc::from_version(&theirs), None);
        let mut odd = m;
        odd[7] |= 0x40;
        assert_eq!(TestDesc::from_version(&odd), None);
        assert_eq!(TestDesc::from_version(&m[..15]), None);
        let mut long = m;
        long[4] = b'1';
        assert_eq!(TestDesc::from_version(&long), None);
    }

    #[test]
    fn another_test_on_the_peer_is_refused_naming_both() {
        let mine = desc();
        assert!(mine.check_peer(Some(&mine)).is_ok());
        assert!(mine.check_peer(None).is_ok());
        let theirs = TestDesc { size: 64, ..mine };
        let e = mine.check_peer(Some(&theirs)).unwrap_err().to_string();
        assert_eq!(
            e,
            "the peer runs `perf write bw -s 64 -n 5000`, this side \
             `perf write bw -s 65536 -n 5000`: both sides must be given the same test"
        );
        let sweep = TestDesc {
            verb: Verb::Send,
            kind: Kind::Lat,
            all: true,
            size: 4096,
            ..mine
        };
        assert_eq!(
            sweep.describe(),
            "perf send lat -a (up to 4096 bytes) -n 5000"
        );
        let d = TestDesc {
            verb: Verb::Atomic,
            duration: true,
            cmp_swap: true,
            size: 8,
            count: 3,
            ..mine
        };
        assert_eq!(d.describe(), "perf atomic bw -s 8 -D 3 -A CMP_AND_SWAP");
    }

    #[test]
    fn text_dests_are_perftests_tcp_form() {
        let d = sample();
        let long = d.encode_text(true);
        let want = "0000:0001:000011:5a3b1c:12345678:00007f0102030400:\
                    00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:01:00000000:\0";
        assert_eq!(String::from_utf8_lossy(&long), want);
        assert_eq!(long.len(), KEY_LEN_GID);
        let short = d.encode_text(false);
        assert_eq!(
            String::from_utf8_lossy(&short),
            "0000:0001:000011:5a3b1c:12345678:00007f0102030400:00000000\0"
        );
        assert_eq!(short.len(), KEY_LEN);
        assert_eq!(PtDest::text_len(&long[..KEY_LEN]).unwrap(), KEY_LEN_GID);
        assert_eq!(PtDest::text_len(&short).unwrap(), KEY_LEN);
        let back = PtDest::decode_text(&long).unwrap();
        assert_eq!(back, PtDest { gid_index: -1, ..d });
        let back = PtDest::decode_text(&short).unwrap();
        assert_eq!(
            back,
            PtDest {
                gid_index: -1,
                gid: Gid([0; 16]),
                ..d
            }
        );
        // Numbers are cut to their width, never wider than the form.
        let wide = PtDest {
            lid: 0x1_2345,
            qpn: 0x1ff_ffff,
            psn: u32::MAX,
            ..d
        };
        assert_eq!(wide.encode_text(true).len(), KEY_LEN_GID);
        assert_eq!(wide.encode_text(false).len(), KEY_LEN);
        // The barrier: zeros.
        let zero = PtDest::decode_text(&PtDest::default().encode_text(true)).unwrap();
        assert_eq!((zero.qpn, zero.vaddr, zero.gid), (0, 0, Gid([0; 16])));
    }

    #[test]
    fn malformed_text_dests_are_errors() {
        let good = sample().encode_text(true);
        let e = PtDest::text_len(b"0000:0001:000011:5a3b1c:12345678:00007f0102030400:0000000x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not perftest's"), "{e}");
        assert!(PtDest::text_len(b"short").is_err());
        for len in [0, 58, 60, 107, 109] {
            let e = PtDest::decode_text(&vec![b'0'; len])
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("{len} bytes")), "{e}");
        }
        let mut cases: Vec<Vec<u8>> = Vec::new();
        // No NUL at the end.
        let mut c = good.clone();
        c[KEY_LEN_GID - 1] = b':';
        cases.push(c);
        // A field that is not hex.
        let mut c = good.clone();
        c[0] = b'g';
        cases.push(c);
        // A GID byte of three digits (a colon moved).
        let mut c = good.clone();
        c[52] = b'0';
        cases.push(c);
        // An empty field.
        let mut c = good.clone();
        c[50] = b':';
        cases.push(c);
        // Not UTF-8.
        let mut c = good.clone();
        c[3] = 0xff;
        cases.push(c);
        // A NUL inside.
        let mut c = good;
        c[10] = 0;
        cases.push(c);
        // The short form without its NUL, and with a sign.
        let short = sample().encode_text(false);
        let mut c = short.clone();
        c[KEY_LEN - 1] = b'0';
        cases.push(c);
        let mut c = short;
        c[0] = b'-';
        cases.push(c);
        for c in cases {
            let e = PtDest::decode_text(&c).unwrap_err().to_string();
            assert!(e.contains("couldn't parse"), "{e}");
        }
    }

    #[test]
    fn ints_and_mtu() {
        assert_eq!(int_msg(4096), [0, 0, 0x10, 0]);
        assert_eq!(parse_int(&[0, 0, 0x10, 0]).unwrap(), 4096);
        assert!(parse_int(&[1, 2, 3]).is_err());
        assert_eq!(mtu_msg(Mtu::Mtu1024), *b"3\0");
        assert_eq!(mtu_msg(Mtu::Mtu4096), *b"5\0");
        assert_eq!(parse_mtu_msg(b"3\0").unwrap(), Some(Mtu::Mtu1024));
        assert_eq!(parse_mtu_msg(b"1\0").unwrap(), Some(Mtu::Mtu256));
        assert_eq!(parse_mtu_msg(b"9\0").unwrap(), None);
        assert!(parse_mtu_msg(b"3\0\0\0").is_err());
    }

    fn sample() -> PtDest {
        PtDest {
            lid: 0,
            out_reads: 1,
            qpn: 0x11,
            psn: 0x5a3b1c,
            rkey: 0x1234_5678,
            vaddr: 0x7f01_0203_0400,
            tail_markers_vaddr: 0,
            gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]),
            srqn: 0,
            gid_index: 1,
        }
    }

    #[test]
    fn dest_layout_is_perftest_4_5() {
        let d = sample();
        let b = d.encode();
        assert_eq!(b.len(), 56);
        assert_eq!(&b[0..4], &[0, 0, 0, 0]);
        assert_eq!(&b[4..8], &[0, 0, 0, 1]);
        assert_eq!(&b[8..12], &[0, 0, 0, 0x11]);
        assert_eq!(&b[12..16], &[0, 0x5a, 0x3b, 0x1c]);
        assert_eq!(&b[16..20], &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(&b[20..24], &[0, 0, 0, 0]);
        assert_eq!(&b[24..32], &[0, 0, 0x7f, 1, 2, 3, 4, 0]);
        assert_eq!(&b[32..48], &d.gid.0);
        assert_eq!(&b[48..52], &[0, 0, 0, 0]);
        assert_eq!(&b[52..56], &[0, 0, 0, 1]);
        assert_eq!(PtDest::decode(&b).unwrap(), d);
        let none = PtDest { gid_index: -1, ..d };
        assert_eq!(&none.encode()[52..56], &[0xff; 4]);
        assert_eq!(PtDest::decode(&none.encode()).unwrap().gid_index, -1);
        // The barrier: all zero.
        assert_eq!(PtDest::default().encode(), [0u8; 56]);
    }

    #[test]
    fn dest_of_a_newer_perftest_decodes_by_length() {
        let d = sample();
        let mut b = [0u8; 64];
        let old = d.encode();
        b[..32].copy_from_slice(&old[..32]);
        b[32..40].copy_from_slice(&0x99u64.to_be_bytes());
        b[40..56].copy_from_slice(&d.gid.0);
        b[56..60].copy_from_slice(&7u32.to_be_bytes());
        b[60..64].copy_from_slice(&2u32.to_be_bytes());
        let n = PtDest::decode(&b).unwrap();
        assert_eq!((n.rkey, n.vaddr, n.gid), (d.rkey, d.vaddr, d.gid));
        assert_eq!((n.tail_markers_vaddr, n.srqn, n.gid_index), (0x99, 7, 2));
        for len in [0, 55, 57, 63, 65, 312] {
            let e = PtDest::decode(&vec![0u8; len]).unwrap_err().to_string();
            assert!(e.contains(&format!("{len} bytes")), "{e}");
        }
    }

    #[test]
    fn reports_are_big_endian_doubles() {
        let f = BwFigures {
            size: 65536,
            iters: 5000,
            bw_peak: 1234.5,
            bw_avg: 1200.0,
            msg_rate: 0.0192,
        };
        let m = f.encode();
        assert_eq!(m[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(m[1], [0, 0, 0, 0, 0, 0, 0x13, 0x88]);
        // 1200.0 = 0x4092C00000000000
        assert_eq!(m[3], [0x40, 0x92, 0xc0, 0, 0, 0, 0, 0]);
        assert_eq!(BwFigures::decode(&m), f);
    }

    #[test]
    fn reports_convert_units() {
        let mib = 1048576.0;
        let r = Report {
            size: 4096,
            iters: 1000,
            bw_avg: 100.0 * mib,
            bw_peak: 150.0 * mib,
            msg_rate: 25600.0,
            flags: Report::PEAK,
            ..Default::default()
        };
        let f = BwFigures::from_report(&r, mib);
        assert_eq!((f.size, f.iters), (4096, 1000));
        assert!((f.bw_avg - 100.0).abs() < 1e-9 && (f.bw_peak - 150.0).abs() < 1e-9);
        assert!((f.msg_rate - 0.0256).abs() < 1e-12);
        let back = f.to_report(mib);
        assert!(back.has_peak());
        assert!((back.bw_avg - r.bw_avg).abs() < 1e-3);
        assert!((back.msg_rate - r.msg_rate).abs() < 1e-6);
        let nopeak = BwFigures::from_report(&Report { flags: 0, ..r }, mib);
        assert_eq!(nopeak.bw_peak, 0.0);
        assert!(!nopeak.to_report(mib).has_peak());
        let junk = BwFigures {
            bw_avg: f64::NAN,
            bw_peak: f64::INFINITY,
            ..f
        };
        let j = junk.to_report(mib);
        assert_eq!((j.bw_avg, j.bw_peak), (0.0, 0.0));
    }

    #[test]
    fn lengths_are_checked() {
        assert!(check_len(&[0; 8], &[8], "x").is_ok());
        let e = check_len(&[0; 7], &[56, 64], "the keys")
            .unwrap_err()
            .to_string();
        assert!(e.contains("7 bytes, expected 56 or 64"), "{e}");
    }
}
