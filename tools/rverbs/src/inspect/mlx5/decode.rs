//! Decoding one mlx5 queue of another process from the bytes read for it
//! (its ring, doorbell record and the provider's bookkeeping, as its
//! queue-directory slot points to them): the counters, and every queued
//! entry as JSON, through the PRM layouts of `rverbs_abi::mlx5::prm`.
//!
//! Everything here works on bytes that came from another process: every
//! size and index is checked, nothing panics, and a short or missing
//! piece only leaves its fields out (with a note).

use rverbs_abi::mlx5::prm::{self, cqe_opcode, opcode, Cqe64, CtrlSeg, DataSeg, SrqNextSeg};
use rverbs_abi::mlx5::qdir::{kind, DirSlot};
use rverbs_abi::mlx5::wqe::{self, DataItem, SendLayout};
use serde_json::{json, Map, Value};
use zerocopy::FromBytes;

/// What was read of one queue.
#[derive(Debug, Clone, Default)]
pub struct Image {
    /// Its directory slot.
    pub slot: DirSlot,
    /// The ring (`entries << stride_shift` bytes), if read.
    pub ring: Option<Vec<u8>>,
    /// The 64-byte doorbell record, if read.
    pub dbrec: Option<Vec<u8>>,
    /// The `wr_id` array (8 bytes per entry), if any and read.
    pub wrid: Option<Vec<u8>>,
    /// The retired counter, if any and read.
    pub retired: Option<u32>,
    /// The `extra` area (SQ: 4 bytes per BB; SRQ: 8 bytes), if read.
    pub extra: Option<Vec<u8>>,
    /// The `extra2` area (SRQ: the completed bitmap), if read.
    pub extra2: Option<Vec<u8>>,
    /// What could not be read.
    pub notes: Vec<String>,
}

/// The name of a slot kind.
pub fn kind_name(k: u32) -> &'static str {
    match k {
        kind::SQ => "SQ",
        kind::RQ => "RQ",
        kind::SRQ => "SRQ",
        kind::CQ => "CQ",
        _ => "unknown",
    }
}

/// Checks a slot's geometry: a known kind, a power-of-two entry count the
/// device allows, a stride that fits the kind. Returns the ring's size in
/// bytes.
pub fn check_slot(s: &DirSlot) -> Result<u64, String> {
    let (max_entries, strides) = match s.kind {
        kind::SQ => (1u32 << 16, 6..=6),
        kind::RQ | kind::SRQ => (1 << 16, 4..=20),
        kind::CQ => (1 << 24, 6..=7),
        k => return Err(format!("unknown kind {k}")),
    };
    if !s.entries.is_power_of_two() || s.entries > max_entries {
        return Err(format!(
            "{} entries is not a power of two up to {max_entries}",
            s.entries
        ));
    }
    if !strides.contains(&s.stride_shift) {
        return Err(format!(
            "stride 2^{} is implausible for a {}",
            s.stride_shift,
            kind_name(s.kind)
        ));
    }
    if s.buf == 0 || s.dbrec == 0 || s.dbrec % 4 != 0 {
        return Err("no ring or doorbell record address".into());
    }
    if matches!(s.kind, kind::RQ | kind::SRQ) {
        let next = if s.kind == kind::SRQ { 1 } else { 0 };
        if (u64::from(s.info) + next) * 16 > 1u64 << s.stride_shift {
            return Err(format!("{} data segments do not fit a WQE", s.info));
        }
    }
    if s.kind == kind::SRQ && (s.info2 == 0 || s.info2 > s.entries) {
        return Err(format!(
            "a list of {} WQEs in {} does not fit",
            s.info2, s.entries
        ));
    }
    let bytes = u64::from(s.entries) << s.stride_shift;
    s.buf
        .checked_add(bytes)
        .ok_or("the ring runs past the end of the address space")?;
    Ok(bytes)
}

fn be16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(
        b.get(off..off.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn be32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_be_bytes(
        b.get(off..off.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn ne32(b: &[u8], i: usize) -> Option<u32> {
    let off = i.checked_mul(4)?;
    Some(u32::from_ne_bytes(
        b.get(off..off.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn ne64(b: &[u8], i: usize) -> Option<u64> {
    let off = i.checked_mul(8)?;
    Some(u64::from_ne_bytes(
        b.get(off..off.checked_add(8)?)?.try_into().ok()?,
    ))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `MLX5_OPCODE_*` names.
pub fn wqe_opcode_name(op: u8) -> String {
    match op {
        0x00 => "NOP".into(),
        opcode::SEND_INVAL => "SEND_INVAL".into(),
        opcode::RDMA_WRITE => "RDMA_WRITE".into(),
        opcode::RDMA_WRITE_IMM => "RDMA_WRITE_IMM".into(),
        opcode::SEND => "SEND".into(),
        opcode::SEND_IMM => "SEND_IMM".into(),
        0x0e => "LSO".into(),
        opcode::RDMA_READ => "RDMA_READ".into(),
        opcode::ATOMIC_CS => "ATOMIC_CS".into(),
        opcode::ATOMIC_FA => "ATOMIC_FA".into(),
        0x14 => "ATOMIC_MASKED_CS".into(),
        0x15 => "ATOMIC_MASKED_FA".into(),
        0x18 => "BIND_MW".into(),
        0x1b => "LOCAL_INVAL".into(),
        opcode::UMR => "UMR".into(),
        o => format!("opcode {o:#x}"),
    }
}

/// `MLX5_CQE_*` opcode names.
pub fn cqe_opcode_name(op: u8) -> String {
    match op {
        cqe_opcode::REQ => "REQ".into(),
        cqe_opcode::RESP_WR_IMM => "RESP_WR_IMM".into(),
        cqe_opcode::RESP_SEND => "RESP_SEND".into(),
        cqe_opcode::RESP_SEND_IMM => "RESP_SEND_IMM".into(),
        cqe_opcode::RESP_SEND_INV => "RESP_SEND_INV".into(),
        cqe_opcode::RESIZE_CQ => "RESIZE_CQ".into(),
        6 => "NO_PACKET".into(),
        12 => "SIG_ERR".into(),
        cqe_opcode::REQ_ERR => "REQ_ERR".into(),
        cqe_opcode::RESP_ERR => "RESP_ERR".into(),
        cqe_opcode::INVALID => "INVALID".into(),
        o => format!("opcode {o}"),
    }
}

/// `MLX5_CQE_SYNDROME_*` names.
pub fn syndrome_name(s: u8) -> String {
    use prm::syndrome as sy;
    match s {
        sy::LOCAL_LENGTH_ERR => "LOCAL_LENGTH_ERR".into(),
        sy::LOCAL_QP_OP_ERR => "LOCAL_QP_OP_ERR".into(),
        sy::LOCAL_PROT_ERR => "LOCAL_PROT_ERR".into(),
        sy::WR_FLUSH_ERR => "WR_FLUSH_ERR".into(),
        sy::MW_BIND_ERR => "MW_BIND_ERR".into(),
        sy::BAD_RESP_ERR => "BAD_RESP_ERR".into(),
        sy::LOCAL_ACCESS_ERR => "LOCAL_ACCESS_ERR".into(),
        sy::REMOTE_INVAL_REQ_ERR => "REMOTE_INVAL_REQ_ERR".into(),
        sy::REMOTE_ACCESS_ERR => "REMOTE_ACCESS_ERR".into(),
        sy::REMOTE_OP_ERR => "REMOTE_OP_ERR".into(),
        sy::TRANSPORT_RETRY_EXC_ERR => "TRANSPORT_RETRY_EXC_ERR".into(),
        sy::RNR_RETRY_EXC_ERR => "RNR_RETRY_EXC_ERR".into(),
        sy::REMOTE_ABORTED_ERR => "REMOTE_ABORTED_ERR".into(),
        s => format!("syndrome {s:#x}"),
    }
}

fn ctrl_flags(f: u8) -> Vec<&'static str> {
    let mut v = Vec::new();
    if f & prm::WQE_CTRL_FENCE != 0 {
        v.push("FENCE");
    }
    if f & prm::WQE_CTRL_CQ_UPDATE != 0 {
        v.push("SIGNALED");
    }
    if f & prm::WQE_CTRL_SOLICITED != 0 {
        v.push("SOLICITED");
    }
    v
}

fn sge_json(d: &DataSeg) -> Value {
    json!({"addr": d.addr.get(), "length": d.byte_count.get(), "lkey": d.lkey.get()})
}

/// Decodes a send WQE: `b` holds its `ds * 16` bytes (unwrapped), `qp_type`
/// is the QP's (`IB_QPT_*`). Fields: the control segment's opcode,
/// opcode modifier, WQE index, QP number, DS count and flags, immediate
/// data, then the remote address and rkey (RDMA, atomics), the atomic
/// operands, the UD destination, the data segments and inline data.
pub fn send_wqe(b: &[u8], qp_type: u32) -> Map<String, Value> {
    let mut m = Map::new();
    let Ok((c, _)) = CtrlSeg::read_from_prefix(b) else {
        m.insert("error".into(), json!("shorter than a control segment"));
        return m;
    };
    let w = c.opmod_idx_opcode.get();
    let op = w as u8;
    let ds = c.qpn_ds.get() & 0x3f;
    m.insert("opcode".into(), json!(wqe_opcode_name(op)));
    m.insert("opcode_raw".into(), json!(op));
    m.insert("opmod".into(), json!(w >> 24));
    m.insert("wqe_index".into(), json!((w >> 8) & 0xffff));
    m.insert("qpn".into(), json!(c.qpn_ds.get() >> 8));
    m.insert("ds".into(), json!(ds));
    m.insert("fm_ce_se".into(), json!(c.fm_ce_se));
    m.insert("flags".into(), json!(ctrl_flags(c.fm_ce_se)));
    match op {
        opcode::RDMA_WRITE_IMM | opcode::SEND_IMM => {
            m.insert("imm_data".into(), json!(c.imm.get()));
        }
        opcode::SEND_INVAL | 0x1b => {
            m.insert("invalidate_rkey".into(), json!(c.imm.get()));
        }
        _ => {}
    }
    let end = (ds as usize * 16).min(b.len());
    // Where each segment is: the PRM's layout, from rverbs-abi's one reader
    // of it (also used by the emulated HCA and the WQE comparison). A
    // segment cut by the WQE's end is left out.
    let wqe = &b[..end];
    let layout = SendLayout::of(u8::try_from(qp_type).unwrap_or(u8::MAX), op);
    if let Some(d) = layout.datagram_seg(wqe) {
        let av = d.av;
        m.insert(
            "ud".into(),
            json!({
                "remote_qpn": av.dqp_dct.get() & 0xff_ffff,
                "remote_qkey": av.qkey.get(),
                "dlid": av.rlid.get(),
                "sl": av.stat_rate_sl & 0xf,
                "grh": av.grh_gid_fl.get() & (1 << 30) != 0,
            }),
        );
    }
    if let Some(r) = layout.raddr_seg(wqe) {
        m.insert("remote_addr".into(), json!(r.raddr.get()));
        m.insert("rkey".into(), json!(r.rkey.get()));
    }
    if let Some(a) = layout.atomic_seg(wqe) {
        m.insert("swap_add".into(), json!(a.swap_add.get()));
        m.insert("compare".into(), json!(a.compare.get()));
    }
    let mut sges = Vec::new();
    let mut inline = String::new();
    let mut inline_len: u64 = 0;
    for item in wqe::data_items(wqe, layout.data, end) {
        match item {
            DataItem::Inline { len, bytes, .. } => {
                inline.push_str(&hex(bytes));
                inline_len += u64::from(len);
            }
            DataItem::Seg { seg, .. } => sges.push(sge_json(&seg)),
            DataItem::Trailing { .. } => {}
        }
    }
    m.insert("sges".into(), Value::Array(sges));
    if inline_len > 0 {
        m.insert("inline".into(), json!(inline));
        m.insert("inline_len".into(), json!(inline_len));
    }
    m
}

/// Decodes a 64-byte CQE: owner bit, opcode, and by opcode the QP, WQE
/// counter, byte count, immediate, source QP, and for an error CQE its
/// syndrome and vendor syndrome.
pub fn cqe(b: &[u8]) -> Map<String, Value> {
    let mut m = Map::new();
    let Ok((c, _)) = Cqe64::read_from_prefix(b) else {
        m.insert("error".into(), json!("shorter than a CQE"));
        return m;
    };
    let op = c.opcode();
    m.insert("owner".into(), json!(c.op_own & 1));
    m.insert("opcode".into(), json!(cqe_opcode_name(op)));
    m.insert("opcode_raw".into(), json!(op));
    m.insert("solicited".into(), json!(c.op_own & 2 != 0));
    m.insert("qpn".into(), json!(c.sop_drop_qpn.get() & 0xff_ffff));
    m.insert("wqe_counter".into(), json!(c.wqe_counter.get()));
    m.insert("srqn_uidx".into(), json!(c.srqn_uidx.get() & 0xff_ffff));
    match op {
        cqe_opcode::REQ => {
            let wop = (c.sop_drop_qpn.get() >> 24) as u8;
            m.insert("wqe_opcode".into(), json!(wqe_opcode_name(wop)));
            m.insert("byte_cnt".into(), json!(c.byte_cnt.get()));
        }
        cqe_opcode::RESP_WR_IMM..=cqe_opcode::RESP_SEND_INV => {
            m.insert("byte_cnt".into(), json!(c.byte_cnt.get()));
            m.insert("src_qp".into(), json!(c.flags_rqpn.get() & 0xff_ffff));
            m.insert("slid".into(), json!(c.slid.get()));
            if matches!(op, cqe_opcode::RESP_WR_IMM | cqe_opcode::RESP_SEND_IMM) {
                m.insert("imm_data".into(), json!(c.imm_inval_pkey.get()));
            }
            if op == cqe_opcode::RESP_SEND_INV {
                m.insert("invalidated_rkey".into(), json!(c.imm_inval_pkey.get()));
            }
        }
        cqe_opcode::REQ_ERR | cqe_opcode::RESP_ERR => {
            let e = c.as_err();
            m.insert("syndrome".into(), json!(syndrome_name(e.syndrome)));
            m.insert("syndrome_raw".into(), json!(e.syndrome));
            m.insert("vendor_syndrome".into(), json!(e.vendor_err_synd));
            if op == cqe_opcode::REQ_ERR {
                let wop = (e.s_wqe_opcode_qpn.get() >> 24) as u8;
                m.insert("wqe_opcode".into(), json!(wqe_opcode_name(wop)));
            }
        }
        _ => {}
    }
    m
}

/// The data segments of a receive WQE (`b`, after any next segment), at
/// most `max_gs`, up to the invalid-lkey terminator.
pub fn recv_sges(b: &[u8], max_gs: u32) -> Vec<Value> {
    b.chunks_exact(16)
        .take(max_gs as usize)
        .filter_map(|c| DataSeg::read_from_bytes(c).ok())
        .take_while(|d| !(d.lkey.get() == prm::INVALID_LKEY && d.byte_count.get() == 0))
        .map(|d| sge_json(&d))
        .collect()
}

/// The decoded queue: its counters (`fields`) and queued entries.
#[derive(Debug, Clone, Default)]
pub struct Decoded {
    /// Counters and geometry.
    pub fields: Map<String, Value>,
    /// Queued entries, oldest first (SRQ: by WQE index).
    pub entries: Vec<Value>,
    /// Oddities found while decoding.
    pub notes: Vec<String>,
    /// Queued entries left undecoded (past the limit of
    /// [`decode_limited`]).
    pub not_decoded: u64,
}

impl Decoded {
    fn set(&mut self, k: &str, v: Value) {
        self.fields.insert(k.into(), v);
    }
}

/// Decodes a queue image (see [`Image`]); `with_entries` decodes every
/// queued entry too.
pub fn decode(img: &Image, with_entries: bool) -> Decoded {
    decode_limited(img, with_entries, usize::MAX)
}

/// [`decode`], with at most `max_entries` entries decoded; the others
/// are counted in [`Decoded::not_decoded`].
pub fn decode_limited(img: &Image, with_entries: bool, max_entries: usize) -> Decoded {
    let mut d = Decoded {
        notes: img.notes.clone(),
        ..Decoded::default()
    };
    let s = &img.slot;
    d.set("kind", json!(kind_name(s.kind)));
    d.set("num", json!(s.num));
    d.set("entries", json!(s.entries));
    d.set("stride", json!(1u64 << s.stride_shift.min(31)));
    d.set("buf", json!(format!("{:#x}", s.buf)));
    d.set("dbrec_addr", json!(format!("{:#x}", s.dbrec)));
    if let Err(e) = check_slot(s) {
        d.notes.push(format!("slot not decoded: {e}"));
        return d;
    }
    let db = img.dbrec.as_deref();
    let word = |i: usize| db.and_then(|b| be32(b, i * 4));
    // The doorbell record's two words as the device reads them.
    d.set("dbrec", json!([word(0), word(1)]));
    let lim = Limit {
        with_entries,
        max: max_entries,
    };
    match s.kind {
        kind::SQ => sq(img, &mut d, word(1), lim),
        kind::RQ => rq(img, &mut d, word(0), lim),
        kind::SRQ => srq(img, &mut d, word(0), lim),
        _ => cq(img, &mut d, word(0), word(1), lim),
    }
    d
}

/// Which entries to decode.
#[derive(Clone, Copy)]
struct Limit {
    with_entries: bool,
    max: usize,
}

impl Limit {
    /// Whether one more entry is decoded into `d` (if not, it is counted).
    fn take(self, d: &mut Decoded) -> bool {
        if d.entries.len() < self.max {
            true
        } else {
            d.not_decoded += 1;
            false
        }
    }
}

/// The bytes of `len` starting at byte `at` of the ring, wrapping at its
/// end (send WQEs wrap at segment granularity).
fn ring_bytes(ring: &[u8], at: usize, len: usize) -> Vec<u8> {
    let n = ring.len();
    if n == 0 {
        return Vec::new();
    }
    (0..len.min(n)).map(|i| ring[(at + i) % n]).collect()
}

fn sq(img: &Image, d: &mut Decoded, db: Option<u32>, lim: Limit) {
    let s = &img.slot;
    d.set("qp_type", json!(s.info));
    let Some(db) = db else {
        d.notes.push("no doorbell record: counters unknown".into());
        return;
    };
    let prod = db & 0xffff;
    d.set("producer", json!(prod));
    d.set("retired_wrs", json!(img.retired));
    let Some(ring) = img.ring.as_deref() else {
        return;
    };
    let cnt = s.entries;
    let mask = cnt - 1;
    // Walk the last `cnt` BBs before the producer: a WQE starts where a
    // control segment carries that BB's index and this QP's number.
    let start = prod.wrapping_sub(cnt);
    let mut k = 0u32;
    let mut found = Vec::new();
    while k < cnt {
        let idx = start.wrapping_add(k) & 0xffff;
        let bb = (idx & mask) as usize;
        let at = bb << 6;
        let c = ring
            .get(at..at + 16)
            .and_then(|b| CtrlSeg::read_from_bytes(b).ok());
        let Some(c) = c else { break };
        let ds = c.qpn_ds.get() & 0x3f;
        let bbs = ds.div_ceil(4);
        let ok = (c.opmod_idx_opcode.get() >> 8) & 0xffff == idx
            && c.qpn_ds.get() >> 8 == s.num
            && ds > 0
            && k + bbs <= cnt;
        if !ok {
            k += 1;
            continue;
        }
        found.push((idx, bb, ds));
        k += bbs;
    }
    let wrid = img.wrid.as_deref();
    let wr_counter = img.extra.as_deref();
    let mut queued = Vec::new();
    for &(idx, bb, ds) in &found {
        let wrc = wr_counter.and_then(|b| ne32(b, bb));
        // Outstanding: its WR is at or past the retired counter (at most
        // a ring's worth ahead).
        let outstanding = match (wrc, img.retired) {
            (Some(w), Some(t)) => w.wrapping_sub(t) < cnt,
            _ => true,
        };
        if outstanding {
            queued.push((idx, bb, ds, wrc));
        }
    }
    let consumer = queued.first().map_or(prod, |q| q.0);
    d.set("consumer", json!(consumer));
    d.set("queued", json!(queued.len()));
    d.set("queued_bbs", json!(prod.wrapping_sub(consumer) & 0xffff));
    d.set("wqes_in_ring", json!(found.len()));
    if !lim.with_entries {
        return;
    }
    for (idx, bb, ds, wrc) in queued {
        if !lim.take(d) {
            continue;
        }
        let bytes = ring_bytes(ring, bb << 6, ds as usize * 16);
        let mut m = send_wqe(&bytes, s.info);
        m.insert("index".into(), json!(idx));
        m.insert("bb".into(), json!(bb));
        m.insert("bbs".into(), json!(ds.div_ceil(4)));
        m.insert("wr_id".into(), json!(wrid.and_then(|b| ne64(b, bb))));
        m.insert("wr_counter".into(), json!(wrc));
        d.entries.push(Value::Object(m));
    }
}

fn rq(img: &Image, d: &mut Decoded, db: Option<u32>, lim: Limit) {
    let s = &img.slot;
    let Some(db) = db else {
        d.notes.push("no doorbell record: counters unknown".into());
        return;
    };
    let prod = db & 0xffff;
    d.set("producer", json!(prod));
    d.set("max_sge", json!(s.info));
    let Some(tail) = img.retired else {
        d.notes
            .push("retired counter unreadable: queued WQEs unknown".into());
        return;
    };
    let cons = tail & 0xffff;
    let fill = prod.wrapping_sub(cons) & 0xffff;
    d.set("consumer", json!(cons));
    if fill > s.entries {
        d.notes.push(format!(
            "{fill} queued WQEs in a ring of {}: torn read?",
            s.entries
        ));
        return;
    }
    d.set("queued", json!(fill));
    let Some(ring) = img.ring.as_deref().filter(|_| lim.with_entries) else {
        return;
    };
    let wrid = img.wrid.as_deref();
    for i in 0..fill {
        if !lim.take(d) {
            continue;
        }
        let idx = (cons.wrapping_add(i) & (s.entries - 1)) as usize;
        let at = idx << s.stride_shift;
        let wqe = ring
            .get(at..at + (1usize << s.stride_shift))
            .unwrap_or_default();
        d.entries.push(json!({
            "index": cons.wrapping_add(i) & 0xffff,
            "slot": idx,
            "wr_id": wrid.and_then(|b| ne64(b, idx)),
            "sges": recv_sges(wqe, s.info),
        }));
    }
}

fn srq(img: &Image, d: &mut Decoded, db: Option<u32>, lim: Limit) {
    let s = &img.slot;
    d.set("max_sge", json!(s.info));
    d.set("capacity", json!(s.info2 - 1));
    if let Some(db) = db {
        d.set("producer", json!(db & 0xffff));
    }
    d.set("completed", json!(img.retired));
    let (Some(ring), Some(list)) = (
        img.ring.as_deref(),
        img.extra.as_deref().and_then(|b| ne64(b, 0)),
    ) else {
        d.notes
            .push("WQE list unreadable: queued WQEs unknown".into());
        return;
    };
    let (head, tail) = (list as u32, (list >> 32) as u32);
    let n = s.info2;
    if head >= n || tail >= n {
        d.notes.push(format!(
            "list ends {head}..{tail} outside the {n} WQEs: torn read?"
        ));
        return;
    }
    d.set("list_head", json!(head));
    d.set("list_tail", json!(tail));
    // The free list: from head along the links to tail.
    let stride = 1usize << s.stride_shift;
    let next = |i: u32| be16(ring, (i as usize) * stride + 2).map(u32::from);
    let mut free = vec![false; n as usize];
    let mut i = head;
    let mut steps = 0;
    loop {
        free[i as usize] = true;
        if i == tail {
            break;
        }
        steps += 1;
        match next(i) {
            Some(j) if j < n && steps <= n && !free[j as usize] => i = j,
            _ => {
                d.notes
                    .push("the free list does not reach its tail: torn read?".into());
                return;
            }
        }
    }
    let bitmap = img.extra2.as_deref();
    let pending = |i: u32| {
        bitmap
            .and_then(|b| ne64(b, (i / 64) as usize))
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    };
    let queued: Vec<u32> = (0..n)
        .filter(|&i| !free[i as usize] && !pending(i))
        .collect();
    let reclaim = (0..n).filter(|&i| pending(i)).count();
    d.set("queued", json!(queued.len()));
    d.set("completed_not_reclaimed", json!(reclaim));
    if !lim.with_entries {
        return;
    }
    let wrid = img.wrid.as_deref();
    for i in queued {
        if !lim.take(d) {
            continue;
        }
        let at = i as usize * stride;
        let wqe = ring.get(at..at + stride).unwrap_or_default();
        let body = wqe.get(size_of::<SrqNextSeg>()..).unwrap_or_default();
        d.entries.push(json!({
            "index": i,
            "wr_id": wrid.and_then(|b| ne64(b, i as usize)),
            "next": next(i),
            "sges": recv_sges(body, s.info),
        }));
    }
}

fn cq(img: &Image, d: &mut Decoded, ci: Option<u32>, arm: Option<u32>, lim: Limit) {
    let s = &img.slot;
    d.set("cqe_version", json!(s.info));
    let Some(ci) = ci else {
        d.notes.push("no doorbell record: counters unknown".into());
        return;
    };
    let ci = ci & 0xff_ffff;
    d.set("consumer", json!(ci));
    if let Some(a) = arm {
        d.set(
            "arm",
            json!({"sn": a >> 28 & 3, "solicited_only": a & prm::CQ_DB_REQ_NOT_SOL != 0, "ci": a & 0xff_ffff}),
        );
    }
    let Some(ring) = img.ring.as_deref() else {
        return;
    };
    let n = s.entries;
    let mut count = 0u32;
    let mut i = ci;
    while count < n {
        let at = ((i & (n - 1)) as usize) << s.stride_shift;
        let Some(own) = ring.get(at + 63).copied() else {
            break;
        };
        let sw = own >> 4 != cqe_opcode::INVALID && u32::from(own & 1) == u32::from(i & n != 0);
        if !sw {
            break;
        }
        if lim.with_entries && lim.take(d) {
            let mut m = cqe(ring.get(at..at + 64).unwrap_or_default());
            m.insert("index".into(), json!(i & 0xff_ffff));
            m.insert("slot".into(), json!(i & (n - 1)));
            d.entries.push(Value::Object(m));
        }
        count += 1;
        i = i.wrapping_add(1);
    }
    d.set("producer", json!(i & 0xff_ffff));
    d.set("queued", json!(count));
}

#[cfg(test)]
mod tests {
    use super::*;
    use rverbs_abi::mlx5::prm::{AtomicSeg, Av, DatagramSeg, InlineSeg, RaddrSeg};
    use zerocopy::network_endian::{U16, U32, U64};
    use zerocopy::IntoBytes;

    fn ctrl(idx: u32, op: u8, qpn: u32, ds: u32, f: u8, imm: u32) -> Vec<u8> {
        CtrlSeg {
            opmod_idx_opcode: U32::new(idx << 8 | u32::from(op)),
            qpn_ds: U32::new(qpn << 8 | ds),
            fm_ce_se: f,
            imm: U32::new(imm),
            ..Default::default()
        }
        .as_bytes()
        .to_vec()
    }

    fn data(len: u32, lkey: u32, addr: u64) -> Vec<u8> {
        DataSeg {
            byte_count: U32::new(len),
            lkey: U32::new(lkey),
            addr: U64::new(addr),
        }
        .as_bytes()
        .to_vec()
    }

    fn slot(k: u32, entries: u32, shift: u32) -> DirSlot {
        DirSlot {
            seq: 2,
            kind: k,
            num: 0x123,
            entries,
            stride_shift: shift,
            buf: 0x10000,
            dbrec: 0x20000,
            ..Default::default()
        }
    }

    fn dbrec(w0: u32, w1: u32) -> Vec<u8> {
        let mut v = vec![0u8; 64];
        v[..4].copy_from_slice(&w0.to_be_bytes());
        v[4..8].copy_from_slice(&w1.to_be_bytes());
        v
    }

    #[test]
    fn send_wqe_segments() {
        // RDMA write, signaled and fenced, with a data segment.
        let mut b = ctrl(7, opcode::RDMA_WRITE, 0x123, 3, 0x88, 0);
        b.extend(
            RaddrSeg {
                raddr: U64::new(0xdead_0000),
                rkey: U32::new(0x77),
                reserved: U32::ZERO,
            }
            .as_bytes(),
        );
        b.extend(data(300, 5, 0x1000));
        let m = send_wqe(&b, 2);
        assert_eq!(m["opcode"], "RDMA_WRITE");
        assert_eq!(
            (m["wqe_index"].as_u64(), m["ds"].as_u64()),
            (Some(7), Some(3))
        );
        assert_eq!(m["flags"], json!(["FENCE", "SIGNALED"]));
        assert_eq!(
            (m["remote_addr"].as_u64(), m["rkey"].as_u64()),
            (Some(0xdead_0000), Some(0x77))
        );
        assert_eq!(m["sges"][0]["length"], 300);
        // Atomic: remote address and operands.
        let mut b = ctrl(8, opcode::ATOMIC_CS, 0x123, 4, 0x08, 0);
        b.extend(
            RaddrSeg {
                raddr: U64::new(0x40),
                rkey: U32::new(9),
                reserved: U32::ZERO,
            }
            .as_bytes(),
        );
        b.extend(
            AtomicSeg {
                swap_add: U64::new(5),
                compare: U64::new(6),
            }
            .as_bytes(),
        );
        b.extend(data(8, 5, 0x2000));
        let m = send_wqe(&b, 2);
        assert_eq!(
            (m["swap_add"].as_u64(), m["compare"].as_u64()),
            (Some(5), Some(6))
        );
        // UD send with immediate and inline data.
        let mut b = ctrl(9, opcode::SEND_IMM, 0x123, 5, 0x0a, 0x1234);
        let av = Av {
            qkey: U32::new(0x1111_1111),
            dqp_dct: U32::new(0x8000_0456),
            rlid: U16::new(3),
            ..Default::default()
        };
        b.extend(DatagramSeg { av }.as_bytes());
        b.extend(
            InlineSeg {
                byte_count: U32::new(prm::INLINE_SEG | 5),
            }
            .as_bytes(),
        );
        b.extend([1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0]);
        let m = send_wqe(&b, u32::from(rverbs_abi::qp::qp_type::UD));
        assert_eq!(m["ud"]["remote_qpn"], 0x456);
        assert_eq!(m["ud"]["remote_qkey"], 0x1111_1111u32);
        assert_eq!(m["imm_data"], 0x1234);
        assert_eq!(m["inline"], "0102030405");
        assert_eq!(m["flags"], json!(["SIGNALED", "SOLICITED"]));
    }

    #[test]
    fn sq_walk_finds_outstanding_wqes() {
        // 8 BBs; producer 10: WQEs at 6 (2 BBs), 8, 9; retired up to WR 3.
        let mut ring = vec![0u8; 8 * 64];
        let mut put = |bb: usize, b: &[u8]| ring[bb * 64..bb * 64 + b.len()].copy_from_slice(b);
        let mut w6 = ctrl(6, opcode::SEND, 0x123, 5, 0x08, 0);
        for _ in 0..4 {
            w6.extend(data(16, 1, 0x100));
        }
        put(6, &w6);
        put(0, &ctrl(8, opcode::SEND, 0x123, 2, 0x08, 0));
        put(1, &ctrl(9, opcode::RDMA_READ, 0x123, 3, 0x08, 0));
        // Not of this lap: BB 2 holds index 10, not 2.
        put(2, &ctrl(10, opcode::SEND, 0x123, 1, 0, 0));
        let mut wrc = vec![0u8; 8 * 4];
        for (bb, w) in [(6usize, 2u32), (0, 3), (1, 4)] {
            wrc[bb * 4..bb * 4 + 4].copy_from_slice(&w.to_ne_bytes());
        }
        let mut wrid = vec![0u8; 8 * 8];
        wrid[8..16].copy_from_slice(&99u64.to_ne_bytes());
        let img = Image {
            slot: DirSlot {
                info: 2,
                ..slot(kind::SQ, 8, 6)
            },
            ring: Some(ring),
            dbrec: Some(dbrec(0, 10)),
            wrid: Some(wrid),
            retired: Some(3),
            extra: Some(wrc),
            ..Default::default()
        };
        let d = decode(&img, true);
        assert_eq!(d.fields["producer"], 10);
        assert_eq!(d.fields["wqes_in_ring"], 3);
        assert_eq!(d.fields["queued"], 2);
        assert_eq!(d.fields["consumer"], 8);
        assert_eq!(d.entries[0]["index"], 8);
        assert_eq!(d.entries[1]["opcode"], "RDMA_READ");
        assert_eq!(d.entries[1]["wr_id"], 99);
        // The WQE at BB 6 wraps into BBs 7 and 0? No: 2 BBs, 6 and 7.
        let all = decode(
            &Image {
                retired: Some(2),
                ..img.clone()
            },
            true,
        );
        assert_eq!(all.entries[0]["sges"].as_array().map(Vec::len), Some(4));
    }

    #[test]
    fn rq_srq_and_cq() {
        // RQ: 4 WQEs of 32 bytes (2 SGEs), producer 6, retired 4.
        let mut ring = vec![0u8; 4 * 32];
        ring[0..16].copy_from_slice(&data(100, 7, 0x5000));
        ring[16..32].copy_from_slice(&data(0, prm::INVALID_LKEY, 0));
        ring[32..48].copy_from_slice(&data(0, prm::INVALID_LKEY, 0));
        let img = Image {
            slot: DirSlot {
                info: 2,
                ..slot(kind::RQ, 4, 5)
            },
            ring: Some(ring),
            dbrec: Some(dbrec(6, 0)),
            retired: Some(4),
            ..Default::default()
        };
        let d = decode(&img, true);
        assert_eq!((d.fields["queued"].as_u64(), d.entries.len()), (Some(2), 2));
        assert_eq!(
            d.entries[0]["sges"],
            json!([{"addr": 0x5000, "length": 100, "lkey": 7}])
        );
        assert_eq!(d.entries[1]["sges"], json!([]));
        // A torn counter is a note.
        let bad = decode(
            &Image {
                retired: Some(100),
                ..img
            },
            true,
        );
        assert!(bad.notes[0].contains("torn"), "{:?}", bad.notes);

        // SRQ: 8 WQEs, list of 4 (0..=3): free list 2 -> 3, WQE 1 completed
        // (bitmap), so WQE 0 is queued.
        let mut ring = vec![0u8; 8 * 32];
        ring[2 * 32 + 2..2 * 32 + 4].copy_from_slice(&3u16.to_be_bytes());
        ring[16..32].copy_from_slice(&data(64, 9, 0x9000));
        let img = Image {
            slot: DirSlot {
                info: 1,
                info2: 4,
                ..slot(kind::SRQ, 8, 5)
            },
            ring: Some(ring),
            dbrec: Some(dbrec(2, 0)),
            retired: Some(1),
            extra: Some((2u64 | 3 << 32).to_ne_bytes().to_vec()),
            extra2: Some(2u64.to_ne_bytes().to_vec()),
            ..Default::default()
        };
        let d = decode(&img, true);
        assert_eq!(d.fields["queued"], 1);
        assert_eq!(d.entries[0]["index"], 0);
        assert_eq!(d.entries[0]["sges"][0]["lkey"], 9);

        // CQ: 4 CQEs, consumer 5: entries 5 (owner 1, lap 1) and 6 are
        // software's, 7 is still invalid.
        let mut ring = vec![0u8; 4 * 64];
        for i in 0..4 {
            ring[i * 64 + 63] = cqe_opcode::INVALID << 4;
        }
        let mut c = Cqe64 {
            op_own: cqe_opcode::REQ << 4 | 1,
            ..Default::default()
        };
        c.sop_drop_qpn = U32::new(u32::from(opcode::SEND) << 24 | 0x123);
        c.wqe_counter = U16::new(4);
        ring[64..128].copy_from_slice(c.as_bytes());
        let mut e = Cqe64 {
            op_own: cqe_opcode::RESP_ERR << 4 | 1,
            ..Default::default()
        };
        e.sop_drop_qpn = U32::new(0x124);
        let mut eb = e.as_bytes().to_vec();
        eb[55] = prm::syndrome::WR_FLUSH_ERR;
        ring[128..192].copy_from_slice(&eb);
        let img = Image {
            slot: slot(kind::CQ, 4, 6),
            ring: Some(ring),
            dbrec: Some(dbrec(5, 0)),
            ..Default::default()
        };
        let d = decode(&img, true);
        assert_eq!(
            (d.fields["consumer"].as_u64(), d.fields["producer"].as_u64()),
            (Some(5), Some(7))
        );
        assert_eq!(d.entries[0]["opcode"], "REQ");
        assert_eq!(d.entries[0]["wqe_opcode"], "SEND");
        assert_eq!(d.entries[0]["owner"], 1);
        assert_eq!(d.entries[1]["syndrome"], "WR_FLUSH_ERR");
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    #[test]
    fn garbage_never_panics() {
        // A cheap deterministic generator over many slot shapes and bytes.
        let mut r = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..3000 {
            let k = r.below(6) as u32;
            let shift = r.below(9) as u32 + 3;
            let entries = 1u32 << r.below(5);
            let ring_len = if round % 7 == 0 {
                3
            } else {
                (entries as usize) << shift
            };
            let db_len = if round % 5 == 0 { 3 } else { 64 };
            let (n1, n2, n3) = (
                r.below(64) as usize,
                r.below(40) as usize,
                r.below(16) as usize,
            );
            let img = Image {
                slot: DirSlot {
                    info: r.below(8) as u32,
                    info2: r.below(10) as u32,
                    ..slot(k, entries, shift)
                },
                ring: Some(r.bytes(ring_len)),
                dbrec: Some(r.bytes(db_len)),
                wrid: Some(r.bytes(n1)),
                retired: Some(r.next() as u32),
                extra: Some(r.bytes(n2)),
                extra2: Some(r.bytes(n3)),
                notes: Vec::new(),
            };
            let _ = decode(&img, true);
            let n = r.below(80) as usize;
            let b = r.bytes(n);
            let _ = send_wqe(&b, r.below(5) as u32);
            let _ = cqe(&b);
            let _ = recv_sges(&b, 99);
        }
    }
}
