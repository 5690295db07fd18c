//! The WQE comparator of `cargo xtask mlx5`: parses two logs the mlx5
//! emulator wrote with `MLX5_EMU_WQE_LOG` (format: tests/mlx5-emu/src/
//! record.rs) for the same fixed sequence of work requests, one posted by
//! rdma-core's libmlx5 (`tests/mlx5-emu/c/wqe_seq.c`), one by our provider
//! (`tests/src/bin/mlx5_wqe_seq.rs`), normalises what may legitimately
//! differ ([`RULES`]) and compares the rest field by field.
//!
//! What is compared: the objects' geometry (per QP ordinal: type, SQ and RQ
//! `wqe_cnt`/`wqe_shift`; per SRQ ordinal the same; the MRs' lengths), then
//! per queue (QP ordinal + SQ/RQ, or SRQ ordinal) the WQEs in the order the
//! HCA executed or consumed them: the WQE index, the doorbell-record value
//! the HCA acted on, and every byte of the WQE (SQ: `ds * 16` bytes
//! following the ring wrap; RQ/SRQ: the used segments), each byte belonging
//! to a named field. The fields are those of the PRM structs of
//! `rverbs_abi::mlx5::prm` (checked against rdma-core's `mlx5dv.h`), at
//! their declared offsets.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::mem::offset_of;

use anyhow::{bail, Context, Result};
use rverbs_abi::mlx5::prm::{
    self, AtomicSeg, Av, CtrlSeg, DataSeg, DatagramSeg, InlineSeg, RaddrSeg, SrqNextSeg,
};
use rverbs_abi::mlx5::wqe::{data_items, DataItem, SendLayout};
use zerocopy::FromBytes;

/// The normalisation rules: every way the two logs may legitimately
/// differ, with why (notes/objects-and-datapath.md §5). Printed by
/// `cargo xtask mlx5` so the log says what was not compared verbatim.
pub const RULES: &[(&str, &str)] = &[
    (
        "qpn",
        "ctrl qpn_ds bits 31..8 and the UD dqp: QP numbers are the emulator's \
         choice per process; compared as the QP's creation ordinal",
    ),
    (
        "addresses",
        "SGE, raddr and MR addresses are per-process heap addresses; compared \
         as (MR ordinal, offset) when inside a recorded MR, else verbatim",
    ),
    (
        "keys",
        "lkeys and rkeys are handed out by the emulator; compared as the MR \
         ordinal whose lkey/rkey they are, else verbatim (0x100 terminator)",
    ),
    (
        "faa-compare",
        "FETCH_ADD atomic segment bytes 8..15: libmlx5 never writes them \
         (stale ring content)",
    ),
    (
        "inline-padding",
        "bytes after an inline payload up to the 16-byte boundary: never \
         written by libmlx5 (stale)",
    ),
    (
        "beyond-ds",
        "bytes past ds*16 in the last basic block: not part of the WQE and \
         not recorded",
    ),
    (
        "srq-next",
        "SRQ next segment except next_wqe_index: never written by \
         post_srq_recv",
    ),
    (
        "doorbell-register",
        "whether BlueFlame or the 8-byte doorbell was used, and the BF half: \
         the UAR side is not recorded (the HCA acts on the doorbell record, \
         which is compared)",
    ),
    (
        "ud-rlid",
        "UD AV rlid is a random UDP source port on RoCE; the \
         emulated port is InfiniBand, where it is the DLID and compared",
    ),
];

/// Whether the emulated port is RoCE (it is InfiniBand: rule `ud-rlid`
/// does not apply).
const ROCE: bool = false;

/// An MR of a log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mr {
    /// Address the HCA sees for its first byte.
    pub va: u64,
    /// Length.
    pub len: u64,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// A QP's recorded geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpGeo {
    /// `ib_qp_type` (2 RC, 3 UC, 4 UD).
    pub ty: u32,
    /// SQ basic blocks and their log2 size.
    pub sq: (u32, u32),
    /// RQ WQEs and their log2 size.
    pub rq: (u32, u32),
    /// The QP number (normalised away).
    pub qpn: u32,
}

/// Queue kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Queue {
    /// A QP's send queue.
    Sq,
    /// A QP's receive queue.
    Rq,
    /// A shared receive queue.
    Srq,
}

impl Queue {
    fn name(self) -> &'static str {
        match self {
            Queue::Sq => "sq",
            Queue::Rq => "rq",
            Queue::Srq => "srq",
        }
    }
}

/// One recorded WQE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wqe {
    /// Index (SQ: the BB counter's low 16 bits).
    pub index: u32,
    /// Doorbell-record value the HCA acted on.
    pub db: u32,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// A parsed log.
#[derive(Debug, Clone, Default)]
pub struct Log {
    /// MRs by ordinal.
    pub mrs: Vec<Mr>,
    /// QPs by ordinal.
    pub qps: Vec<QpGeo>,
    /// SRQs by ordinal: (wqe_cnt, wqe_shift).
    pub srqs: Vec<(u32, u32)>,
    /// WQEs per (queue kind, object ordinal), in execution order.
    pub wqes: BTreeMap<(Queue, u32), Vec<Wqe>>,
}

fn hex_u64(s: &str) -> Result<u64> {
    u64::from_str_radix(s, 16).with_context(|| format!("bad hex number {s:?}"))
}
fn hex_u32(s: &str) -> Result<u32> {
    u32::from_str_radix(s, 16).with_context(|| format!("bad hex number {s:?}"))
}
/// The bytes of a hex string (two digits a byte), as the emulator's logs
/// write them; an error (never a panic) for anything else.
pub(crate) fn hex_bytes(s: &str) -> Result<Vec<u8>> {
    if s.len() % 2 != 0 {
        bail!("odd hex byte string");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .context("bad hex byte")
        })
        .collect()
}

/// Parses a log.
pub fn parse(text: &str) -> Result<Log> {
    let mut log = Log::default();
    for (n, line) in text.lines().enumerate() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("line {}: {line:?}", n + 1);
        match f.as_slice() {
            [] => {}
            ["mr", ord, va, len, lkey, rkey] => {
                if hex_u32(ord).with_context(bad)? as usize != log.mrs.len() {
                    bail!("{}: MR ordinal out of order", bad());
                }
                log.mrs.push(Mr {
                    va: hex_u64(va).with_context(bad)?,
                    len: hex_u64(len).with_context(bad)?,
                    lkey: hex_u32(lkey).with_context(bad)?,
                    rkey: hex_u32(rkey).with_context(bad)?,
                });
            }
            ["qp", ord, ty, sc, ss, rc, rs, qpn] => {
                if hex_u32(ord).with_context(bad)? as usize != log.qps.len() {
                    bail!("{}: QP ordinal out of order", bad());
                }
                log.qps.push(QpGeo {
                    ty: hex_u32(ty).with_context(bad)?,
                    sq: (
                        hex_u32(sc).with_context(bad)?,
                        hex_u32(ss).with_context(bad)?,
                    ),
                    rq: (
                        hex_u32(rc).with_context(bad)?,
                        hex_u32(rs).with_context(bad)?,
                    ),
                    qpn: hex_u32(qpn).with_context(bad)?,
                });
            }
            ["srq", ord, c, s] => {
                if hex_u32(ord).with_context(bad)? as usize != log.srqs.len() {
                    bail!("{}: SRQ ordinal out of order", bad());
                }
                log.srqs
                    .push((hex_u32(c).with_context(bad)?, hex_u32(s).with_context(bad)?));
            }
            ["wqe", ord, kind, index, db, bytes] => {
                let q = match *kind {
                    "sq" => Queue::Sq,
                    "rq" => Queue::Rq,
                    "srq" => Queue::Srq,
                    _ => bail!("{}: unknown queue kind", bad()),
                };
                let ord = hex_u32(ord).with_context(bad)?;
                log.wqes.entry((q, ord)).or_default().push(Wqe {
                    index: hex_u32(index).with_context(bad)?,
                    db: hex_u32(db).with_context(bad)?,
                    bytes: hex_bytes(bytes).with_context(bad)?,
                });
            }
            _ => bail!("{}: not a record", bad()),
        }
    }
    Ok(log)
}

/// How a field's bytes are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum How {
    /// Byte for byte.
    Exact,
    /// A big-endian QPN in the low 24 bits (rule `qpn`); other bits exact.
    Qpn,
    /// A big-endian 64-bit address (rule `addresses`).
    Addr,
    /// A big-endian lkey (rule `keys`).
    Lkey,
    /// A big-endian rkey (rule `keys`).
    Rkey,
    /// Not compared: the named rule.
    Skip(&'static str),
}

/// A named field of a WQE: byte range and comparison.
#[derive(Debug, Clone)]
struct Field {
    name: String,
    off: usize,
    len: usize,
    how: How,
}

fn field(v: &mut Vec<Field>, name: impl Into<String>, off: usize, len: usize, how: How) {
    v.push(Field {
        name: name.into(),
        off,
        len,
        how,
    });
}

/// Size of the field `f` selects (for `seg_field!`).
fn size_of_field<T, F>(_f: impl Fn(&T) -> &F) -> usize {
    size_of::<F>()
}

/// Adds field `f` of the PRM struct `T` found at byte `base` of the WQE,
/// named `<prefix>.<f>`, at its declared offset and size.
macro_rules! seg_field {
    ($v:expr, $base:expr, $prefix:expr, $T:ident . $f:ident, $how:expr) => {
        field(
            $v,
            format!("{}.{}", $prefix, stringify!($f)),
            $base + offset_of!($T, $f),
            size_of_field(|s: &$T| &s.$f),
            $how,
        )
    };
}

/// Data segments from `off` to `end`.
fn data_segs(v: &mut Vec<Field>, prefix: &str, mut off: usize, end: usize) {
    let mut i = 0;
    while off + size_of::<DataSeg>() <= end {
        let p = format!("{prefix}[{i}]");
        seg_field!(v, off, p, DataSeg.byte_count, How::Exact);
        seg_field!(v, off, p, DataSeg.lkey, How::Lkey);
        seg_field!(v, off, p, DataSeg.addr, How::Addr);
        off += size_of::<DataSeg>();
        i += 1;
    }
    if off < end {
        field(v, "trailing bytes", off, end - off, How::Exact);
    }
}

/// The fields of a send WQE of a QP of type `ty`, laid out from the
/// reference bytes `b`.
fn send_fields(b: &[u8], ty: u32) -> Vec<Field> {
    let mut fields = Vec::new();
    let v = &mut fields;
    // opmod_idx_opcode and qpn_ds split into their parts.
    let w0 = offset_of!(CtrlSeg, opmod_idx_opcode);
    field(v, "ctrl.opmod", w0, 1, How::Exact);
    field(v, "ctrl.wqe_index", w0 + 1, 2, How::Exact);
    field(v, "ctrl.opcode", w0 + 3, 1, How::Exact);
    let w1 = offset_of!(CtrlSeg, qpn_ds);
    field(v, "ctrl.qpn", w1, 3, How::Qpn);
    field(v, "ctrl.ds", w1 + 3, 1, How::Exact);
    seg_field!(v, 0, "ctrl", CtrlSeg.signature, How::Exact);
    seg_field!(v, 0, "ctrl", CtrlSeg.dci_stream_channel_id, How::Exact);
    seg_field!(v, 0, "ctrl", CtrlSeg.fm_ce_se, How::Exact);
    seg_field!(v, 0, "ctrl", CtrlSeg.imm, How::Exact);
    let end = b.len();
    let opcode = CtrlSeg::read_from_prefix(b).map_or(0, |(c, _)| c.opmod_idx_opcode.get() as u8);
    // Where each segment is: the PRM's layout, from rverbs-abi's one reader
    // of it (also used by the emulated HCA and `rverbs inspect`).
    let layout = SendLayout::of(ty as u8, opcode);
    let fits = |at: Option<usize>, len: usize| at.filter(|&o| o + len <= end);
    if let Some(dg) = layout.datagram {
        let av = dg + offset_of!(DatagramSeg, av);
        seg_field!(v, av, "av", Av.qkey, How::Exact);
        seg_field!(v, av, "av", Av.qkey_reserved, How::Exact);
        seg_field!(v, av, "av", Av.dqp_dct, How::Qpn);
        seg_field!(v, av, "av", Av.stat_rate_sl, How::Exact);
        seg_field!(v, av, "av", Av.fl_mlid, How::Exact);
        let rlid = if ROCE {
            How::Skip("ud-rlid")
        } else {
            How::Exact
        };
        seg_field!(v, av, "av", Av.rlid, rlid);
        seg_field!(v, av, "av", Av.reserved0, How::Exact);
        seg_field!(v, av, "av", Av.rmac, How::Exact);
        seg_field!(v, av, "av", Av.tclass, How::Exact);
        seg_field!(v, av, "av", Av.hop_limit, How::Exact);
        seg_field!(v, av, "av", Av.grh_gid_fl, How::Exact);
        seg_field!(v, av, "av", Av.rgid, How::Exact);
    }
    if let Some(off) = fits(layout.raddr, size_of::<RaddrSeg>()) {
        seg_field!(v, off, "raddr", RaddrSeg.raddr, How::Addr);
        seg_field!(v, off, "raddr", RaddrSeg.rkey, How::Rkey);
        seg_field!(v, off, "raddr", RaddrSeg.reserved, How::Exact);
    }
    if let Some(off) = fits(layout.atomic, size_of::<AtomicSeg>()) {
        seg_field!(v, off, "atomic", AtomicSeg.swap_add, How::Exact);
        let cmp = if opcode == prm::opcode::ATOMIC_FA {
            How::Skip("faa-compare")
        } else {
            How::Exact
        };
        seg_field!(v, off, "atomic", AtomicSeg.compare, cmp);
    }
    let off = layout.data;
    if let Some(DataItem::Inline { len, .. }) = data_items(b, off, end).next() {
        let len = len as usize;
        seg_field!(v, off, "inline", InlineSeg.byte_count, How::Exact);
        let start = off + size_of::<InlineSeg>();
        let data_end = start.saturating_add(len).min(end);
        field(v, "inline.data", start, data_end - start, How::Exact);
        if data_end < end {
            field(
                v,
                "inline.padding",
                data_end,
                end - data_end,
                How::Skip("inline-padding"),
            );
        }
    } else {
        data_segs(v, "data", off, end);
    }
    fields
}

/// The fields of a receive WQE (`srq`: starts with the next segment).
fn recv_fields(b: &[u8], srq: bool) -> Vec<Field> {
    let mut v = Vec::new();
    let mut off = 0;
    if srq {
        seg_field!(&mut v, 0, "next", SrqNextSeg.rsvd0, How::Skip("srq-next"));
        seg_field!(&mut v, 0, "next", SrqNextSeg.next_wqe_index, How::Exact);
        seg_field!(
            &mut v,
            0,
            "next",
            SrqNextSeg.signature,
            How::Skip("srq-next")
        );
        seg_field!(&mut v, 0, "next", SrqNextSeg.rsvd1, How::Skip("srq-next"));
        off = size_of::<SrqNextSeg>();
    }
    data_segs(&mut v, "scatter", off, b.len());
    v
}

/// A value as compared: the raw bytes, or a normalised description.
fn normalise(log: &Log, how: How, bytes: &[u8]) -> String {
    let raw: String = bytes.iter().map(|x| format!("{x:02x}")).collect();
    let be = |b: &[u8]| b.iter().fold(0u64, |a, x| (a << 8) | u64::from(*x));
    match how {
        How::Exact | How::Skip(_) => format!("0x{raw}"),
        How::Qpn => {
            let v = be(bytes);
            let (hi, qpn) = if bytes.len() == 4 {
                (v >> 24, (v & 0xff_ffff) as u32)
            } else {
                (0, v as u32)
            };
            match log.qps.iter().position(|q| q.qpn == qpn) {
                Some(o) => format!("qp#{o} high 0x{hi:02x} (qpn 0x{qpn:x})"),
                None => format!("0x{raw} (not a QP of this log)"),
            }
        }
        How::Addr => {
            let a = be(bytes);
            match log
                .mrs
                .iter()
                .position(|m| a >= m.va && a - m.va < m.len.max(1))
            {
                Some(o) => format!("mr#{o}+0x{:x} (0x{a:x})", a - log.mrs[o].va),
                None => format!("0x{a:x} (outside every MR)"),
            }
        }
        How::Lkey | How::Rkey => {
            let k = be(bytes) as u32;
            let o = log.mrs.iter().position(|m| {
                if how == How::Lkey {
                    m.lkey == k
                } else {
                    m.rkey == k
                }
            });
            match o {
                Some(o) => format!(
                    "mr#{o}.{} (0x{k:x})",
                    if how == How::Lkey { "lkey" } else { "rkey" }
                ),
                None => format!("0x{k:x}"),
            }
        }
    }
}

/// The comparable part of a normalised value (without the raw value in
/// parentheses, which legitimately differs).
fn key(s: &str) -> &str {
    s.split(" (").next().unwrap_or(s)
}

/// The outcome of a comparison.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// WQEs compared (pairs, plus WQEs only one log has).
    pub compared: usize,
    /// Identical after normalisation.
    pub identical: usize,
    /// Differing.
    pub differing: usize,
    /// Geometry mismatches (not WQEs).
    pub geometry: Vec<String>,
    /// One line per mismatching field.
    pub mismatches: Vec<String>,
}

impl Report {
    /// Whether the logs agree everywhere.
    pub fn ok(&self) -> bool {
        self.differing == 0 && self.geometry.is_empty() && self.compared > 0
    }
}

/// Compares `ours` against the reference `theirs` (libmlx5).
pub fn compare(theirs: &Log, ours: &Log) -> Report {
    let mut r = Report::default();
    if theirs.qps.len() != ours.qps.len() {
        r.geometry.push(format!(
            "QPs created: rdma-core {}, ours {}",
            theirs.qps.len(),
            ours.qps.len()
        ));
    }
    for (o, (a, b)) in theirs.qps.iter().zip(&ours.qps).enumerate() {
        if (a.ty, a.sq, a.rq) != (b.ty, b.sq, b.rq) {
            r.geometry.push(format!(
                "qp#{o} geometry (type, sq cnt/shift, rq cnt/shift): rdma-core ({}, {:?}, {:?}), ours ({}, {:?}, {:?})",
                a.ty, a.sq, a.rq, b.ty, b.sq, b.rq
            ));
        }
    }
    if theirs.srqs != ours.srqs {
        r.geometry.push(format!(
            "SRQ geometry (cnt, shift): rdma-core {:?}, ours {:?}",
            theirs.srqs, ours.srqs
        ));
    }
    let lens = |l: &Log| l.mrs.iter().map(|m| m.len).collect::<Vec<_>>();
    if lens(theirs) != lens(ours) {
        r.geometry.push(format!(
            "MR lengths: rdma-core {:x?}, ours {:x?}",
            lens(theirs),
            lens(ours)
        ));
    }
    let mut queues: Vec<(Queue, u32)> = theirs
        .wqes
        .keys()
        .chain(ours.wqes.keys())
        .copied()
        .collect();
    queues.sort();
    queues.dedup();
    let empty = Vec::new();
    for q in queues {
        let a = theirs.wqes.get(&q).unwrap_or(&empty);
        let b = ours.wqes.get(&q).unwrap_or(&empty);
        let what = format!(
            "{}#{} {}",
            if q.0 == Queue::Srq { "srq" } else { "qp" },
            q.1,
            q.0.name()
        );
        for i in 0..a.len().max(b.len()) {
            r.compared += 1;
            let (wa, wb) = match (a.get(i), b.get(i)) {
                (Some(x), Some(y)) => (x, y),
                (Some(x), None) => {
                    r.differing += 1;
                    r.mismatches.push(format!(
                        "{what} WQE #{i} (index 0x{:x}): only rdma-core executed it",
                        x.index
                    ));
                    continue;
                }
                (None, Some(y)) => {
                    r.differing += 1;
                    r.mismatches.push(format!(
                        "{what} WQE #{i} (index 0x{:x}): only ours executed it",
                        y.index
                    ));
                    continue;
                }
                (None, None) => continue,
            };
            let before = r.mismatches.len();
            compare_wqe(theirs, ours, q, &what, i, wa, wb, &mut r.mismatches);
            if r.mismatches.len() == before {
                r.identical += 1;
            } else {
                r.differing += 1;
            }
        }
    }
    r
}

#[allow(clippy::too_many_arguments)]
fn compare_wqe(
    theirs: &Log,
    ours: &Log,
    q: (Queue, u32),
    what: &str,
    i: usize,
    wa: &Wqe,
    wb: &Wqe,
    out: &mut Vec<String>,
) {
    let at = format!("{what} WQE #{i} (index 0x{:x})", wa.index);
    if wa.index != wb.index {
        out.push(format!(
            "{at}: WQE index: rdma-core 0x{:x}, ours 0x{:x}",
            wa.index, wb.index
        ));
    }
    if wa.db != wb.db {
        out.push(format!(
            "{at}: doorbell record: rdma-core 0x{:x}, ours 0x{:x}",
            wa.db, wb.db
        ));
    }
    if wa.bytes.len() != wb.bytes.len() {
        out.push(format!(
            "{at}: length: rdma-core {} bytes, ours {} bytes (compared up to the shorter)",
            wa.bytes.len(),
            wb.bytes.len()
        ));
    }
    let fields = match q.0 {
        Queue::Sq => {
            let ty = theirs.qps.get(q.1 as usize).map_or(0, |g| g.ty);
            send_fields(&wa.bytes, ty)
        }
        Queue::Rq => recv_fields(&wa.bytes, false),
        Queue::Srq => recv_fields(&wa.bytes, true),
    };
    let n = wa.bytes.len().min(wb.bytes.len());
    for f in fields {
        if let How::Skip(_) = f.how {
            continue;
        }
        if f.off >= n {
            continue;
        }
        let end = (f.off + f.len).min(n);
        let (x, y) = (&wa.bytes[f.off..end], &wb.bytes[f.off..end]);
        let (nx, ny) = (normalise(theirs, f.how, x), normalise(ours, f.how, y));
        if key(&nx) != key(&ny) {
            out.push(format!(
                "{at}: byte 0x{:x}..0x{:x} {}: rdma-core {nx}, ours {ny}",
                f.off, end, f.name
            ));
        }
    }
}

/// The report as text: the mismatches (at most `max`), then a count.
pub fn render(r: &Report, max: usize) -> String {
    let mut s = String::new();
    for g in &r.geometry {
        let _ = writeln!(s, "geometry: {g}");
    }
    for m in r.mismatches.iter().take(max) {
        let _ = writeln!(s, "{m}");
    }
    if r.mismatches.len() > max {
        let _ = writeln!(s, "... and {} more", r.mismatches.len() - max);
    }
    let _ = writeln!(
        s,
        "WQEs compared: {} ({} identical after normalisation, {} differing)",
        r.compared, r.identical, r.differing
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Big-endian bytes helpers for building sample WQEs.
    fn b32(v: &mut Vec<u8>, x: u32) {
        v.extend_from_slice(&x.to_be_bytes());
    }
    fn b64(v: &mut Vec<u8>, x: u64) {
        v.extend_from_slice(&x.to_be_bytes());
    }
    fn ctrl(v: &mut Vec<u8>, idx: u32, opcode: u8, qpn: u32, ds: u32) {
        b32(v, (idx << 8) | u32::from(opcode));
        b32(v, (qpn << 8) | ds);
        b32(v, 8);
        b32(v, 0);
    }
    fn hex(v: &[u8]) -> String {
        v.iter().map(|x| format!("{x:02x}")).collect()
    }

    /// A small log in the recorder's format: an RC SEND, an RC FAA, an
    /// inline write, a UD send and an SRQ receive; `stale` fills the bytes
    /// libmlx5 never writes.
    fn sample(va: u64, key: u32, qpn: u32, stale: u8) -> String {
        let mut s = format!("mr 0 {va:x} 100000 {key:x} {key:x}\n");
        s += &format!("qp 0 2 80 6 10 5 {:x}\n", qpn);
        s += &format!("qp 1 2 80 6 10 5 {:x}\n", qpn + 1);
        s += &format!("qp 2 4 40 6 10 5 {:x}\n", qpn + 2);
        s += "srq 0 40 6\n";
        let seg = |v: &mut Vec<u8>, len: u32, off: u64| {
            b32(v, len);
            b32(v, key);
            b64(v, va + off);
        };
        // SEND, 1 SGE.
        let mut w = Vec::new();
        ctrl(&mut w, 0, 0x0a, qpn, 2);
        seg(&mut w, 64, 0x10);
        s += &format!("wqe 0 sq 0 1 {}\n", hex(&w));
        // FAA: ctrl, raddr, atomic (compare stale), data.
        let mut w = Vec::new();
        ctrl(&mut w, 1, 0x12, qpn, 4);
        b64(&mut w, va + 0xf0000);
        b32(&mut w, key);
        b32(&mut w, 0);
        b64(&mut w, 5);
        w.extend_from_slice(&[stale; 8]);
        seg(&mut w, 8, 0x3000);
        s += &format!("wqe 0 sq 1 2 {}\n", hex(&w));
        // Inline write of 3 bytes: padding stale.
        let mut w = Vec::new();
        ctrl(&mut w, 2, 0x08, qpn, 3);
        b64(&mut w, va + 0x800);
        b32(&mut w, key);
        b32(&mut w, 0);
        b32(&mut w, 0x8000_0003);
        w.extend_from_slice(b"abc");
        w.extend_from_slice(&[stale; 9]);
        s += &format!("wqe 0 sq 2 3 {}\n", hex(&w));
        // UD send: AV with dqp = qp 1 | bit 31, DLID 1.
        let mut w = Vec::new();
        ctrl(&mut w, 0, 0x0a, qpn + 2, 5);
        b32(&mut w, 0x1111_1111);
        b32(&mut w, 0);
        b32(&mut w, 0x8000_0000 | (qpn + 1));
        b32(&mut w, 1);
        w.extend_from_slice(&[0; 32]);
        seg(&mut w, 200, 0);
        s += &format!("wqe 2 sq 0 2 {}\n", hex(&w));
        // SRQ receive: next segment (rest stale), 1 SGE, terminator.
        let mut w = vec![stale, stale, 0, 1];
        w.extend_from_slice(&[stale; 12]);
        seg(&mut w, 256, 0x80000);
        b32(&mut w, 0);
        b32(&mut w, 0x100);
        b64(&mut w, 0);
        s += &format!("wqe 0 srq 0 1 {}\n", hex(&w));
        s
    }

    #[test]
    fn a_log_equals_itself() {
        let t = parse(&sample(0x7f00_0000_0000, 0x2d0, 0x100, 0)).unwrap();
        let r = compare(&t, &t);
        assert_eq!(
            (r.compared, r.identical, r.differing),
            (5, 5, 0),
            "{}",
            render(&r, 20)
        );
        assert!(r.ok());
    }

    #[test]
    fn legitimate_differences_are_normalised() {
        let t = parse(&sample(0x7f00_0000_0000, 0x2d0, 0x100, 0)).unwrap();
        let o = parse(&sample(0x5555_0000_1000, 0x3f1, 0x240, 0xee)).unwrap();
        let r = compare(&t, &o);
        assert!(r.ok(), "{}", render(&r, 20));
        assert_eq!(r.identical, 5);
    }

    #[test]
    fn a_corrupted_byte_is_reported_precisely() {
        let text = sample(0x7f00_0000_0000, 0x2d0, 0x100, 0);
        let t = parse(&text).unwrap();
        // Flip the fm_ce_se byte of the SEND (byte 11: CE off).
        let bad = text.replacen("0200000008000000000000004", "0200000000000000000000004", 1);
        assert_ne!(bad, text);
        let o = parse(&bad).unwrap();
        let r = compare(&t, &o);
        assert!(!r.ok());
        assert_eq!((r.compared, r.identical, r.differing), (5, 4, 1));
        assert_eq!(r.mismatches.len(), 1, "{:?}", r.mismatches);
        assert_eq!(
            r.mismatches[0],
            "qp#0 sq WQE #0 (index 0x0): byte 0xb..0xc ctrl.fm_ce_se: rdma-core 0x08, ours 0x00"
        );
    }

    #[test]
    fn wrong_keys_qpns_and_offsets_are_mismatches() {
        let text = sample(0x7f00_0000_0000, 0x2d0, 0x100, 0);
        let t = parse(&text).unwrap();
        // The UD dqp names qp 0 instead of qp 1.
        let bad = text.replace("80000101", "80000100");
        let r = compare(&t, &parse(&bad).unwrap());
        assert_eq!(r.differing, 1);
        assert!(r.mismatches[0].contains("av.dqp_dct"), "{:?}", r.mismatches);
        // An SGE 16 bytes further into the MR.
        let bad = text.replace("00007f0000000010", "00007f0000000020");
        let r = compare(&t, &parse(&bad).unwrap());
        assert_eq!(r.differing, 1);
        assert!(
            r.mismatches[0].contains("data[0].addr"),
            "{:?}",
            r.mismatches
        );
        assert!(r.mismatches[0].contains("mr#0+0x10"), "{:?}", r.mismatches);
        // A missing WQE.
        let short: String = text
            .lines()
            .filter(|l| !l.starts_with("wqe 2 "))
            .map(|l| format!("{l}\n"))
            .collect();
        let r = compare(&t, &parse(&short).unwrap());
        assert_eq!(r.differing, 1);
        assert!(
            r.mismatches[0].contains("only rdma-core"),
            "{:?}",
            r.mismatches
        );
    }

    /// Compares two real logs named by `WQE_LOG_A` and `WQE_LOG_B` (e.g.
    /// two runs of wqe_seq.c, which must be identical after
    /// normalisation): `WQE_LOG_A=.. WQE_LOG_B=.. cargo test -p xtask
    /// --bin xtask real_logs -- --ignored`.
    #[test]
    #[ignore = "needs two recorded logs named by WQE_LOG_A and WQE_LOG_B"]
    fn real_logs() {
        let a = std::env::var("WQE_LOG_A").expect("WQE_LOG_A");
        let b = std::env::var("WQE_LOG_B").expect("WQE_LOG_B");
        let a = parse(&std::fs::read_to_string(a).unwrap()).unwrap();
        let b = parse(&std::fs::read_to_string(b).unwrap()).unwrap();
        let r = compare(&a, &b);
        println!("{}", render(&r, 50));
        assert!(r.ok());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse("wqe 0 xq 0 0 00\n").is_err());
        assert!(parse("mr 1 0 0 0 0\n").is_err());
        assert!(parse("hello\n").is_err());
        assert!(parse("wqe 0 sq 0 0 0\n").is_err());
    }
}
