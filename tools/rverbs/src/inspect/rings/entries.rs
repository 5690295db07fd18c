//! Decoding ring entries (send and receive WQEs, CQEs) to JSON and text.

use rverbs_abi::rxe::{DmaInfo, RecvWqe, SendWqe, WrAtomic, WrRdma, WrUd};
use rverbs_abi::wr::{Sge, Wc};
use serde_json::{json, Map, Value};
use zerocopy::{FromBytes, IntoBytes};

use super::classify::sges;
use super::names::{
    send_flag_names, wc_opcode_name, wc_status_name, wqe_state_name, wr_opcode_name,
};
use super::ring::{Kind, Ring};
use crate::inspect::res::qpn_of;

fn sge_json(s: &Sge) -> Value {
    json!({"addr": s.addr, "length": s.length, "lkey": s.lkey})
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Decode a send WQE. `qp_type` (`IB_QPT_*`), when known, tells whether
/// the UD arm of the request is meaningful; otherwise it is shown when it
/// carries a Q_Key or an AH.
pub fn send_entry(slot: u32, e: &[u8], qp_type: Option<u8>) -> Value {
    let Ok((w, rest)) = SendWqe::read_from_prefix(e) else {
        return json!({"index": slot, "error": "element shorter than a send WQE"});
    };
    let mut m = Map::new();
    m.insert("index".into(), json!(slot));
    m.insert("wr_id".into(), json!(w.wr.wr_id));
    m.insert("opcode".into(), json!(wr_opcode_name(w.wr.opcode)));
    m.insert("opcode_raw".into(), json!(w.wr.opcode));
    m.insert("flags".into(), json!(send_flag_names(w.wr.send_flags)));
    m.insert("state".into(), json!(wqe_state_name(w.state)));
    m.insert("length".into(), json!(w.dma.length));
    let op = w.wr.opcode;
    let union = w.wr.wr.as_bytes();
    match op {
        0 | 1 | 4 | 11 | 14 | 15 => {
            if let Ok((r, _)) = WrRdma::read_from_prefix(union) {
                m.insert("remote_addr".into(), json!(r.remote_addr));
                m.insert("rkey".into(), json!(r.rkey));
            }
        }
        5 | 6 | 12 | 13 => {
            if let Ok((a, _)) = WrAtomic::read_from_prefix(union) {
                m.insert("remote_addr".into(), json!(a.remote_addr));
                m.insert("rkey".into(), json!(a.rkey));
                m.insert("compare_add".into(), json!(a.compare_add));
                m.insert("swap".into(), json!(a.swap));
            }
        }
        _ => {}
    }
    if matches!(op, 1 | 3) {
        m.insert("imm_data".into(), json!(u32::from_be(w.wr.ex)));
    }
    if matches!(op, 7 | 9 | 11) {
        m.insert("invalidate_rkey".into(), json!(w.wr.ex));
    }
    if matches!(op, 2 | 3 | 9) {
        // Sends on UD QPs carry the destination.
        if let Ok((u, _)) = WrUd::read_from_prefix(union) {
            let ud = match qp_type {
                Some(t) => t == UD_QP,
                None => u.remote_qkey != 0 || u.ah_num != 0,
            };
            if ud {
                m.insert(
                    "ud".into(),
                    json!({"remote_qpn": u.remote_qpn, "remote_qkey": u.remote_qkey, "ah_num": u.ah_num}),
                );
            }
        }
    }
    if w.state != 0 {
        m.insert("first_psn".into(), json!(w.first_psn));
        m.insert("last_psn".into(), json!(w.last_psn));
    }
    if w.wr.send_flags & rverbs_abi::wr::send_flags::INLINE != 0 {
        let n = (w.dma.length as usize).min(rest.len());
        m.insert("inline".into(), json!(hex(&rest[..n])));
    } else {
        m.insert("num_sge".into(), json!(w.dma.num_sge));
        let s: Vec<Value> = sges(rest, w.dma.num_sge).iter().map(sge_json).collect();
        m.insert("sges".into(), Value::Array(s));
    }
    Value::Object(m)
}

/// Decode a receive WQE.
pub fn recv_entry(slot: u32, e: &[u8]) -> Value {
    let Ok((w, rest)) = RecvWqe::read_from_prefix(e) else {
        return json!({"index": slot, "error": "element shorter than a receive WQE"});
    };
    let dma: DmaInfo = w.dma;
    let s: Vec<Value> = sges(rest, dma.num_sge).iter().map(sge_json).collect();
    json!({
        "index": slot,
        "wr_id": w.wr_id,
        "length": dma.length,
        "num_sge": dma.num_sge,
        "sges": s,
    })
}

/// Decode a work completion.
pub fn cq_entry(slot: u32, e: &[u8]) -> Value {
    let Ok((c, _)) = Wc::read_from_prefix(e) else {
        return json!({"index": slot, "error": "element shorter than a work completion"});
    };
    let mut m = Map::new();
    m.insert("index".into(), json!(slot));
    m.insert("wr_id".into(), json!(c.wr_id));
    m.insert("status".into(), json!(wc_status_name(c.status)));
    m.insert("status_raw".into(), json!(c.status));
    m.insert("opcode".into(), json!(wc_opcode_name(c.opcode)));
    m.insert("opcode_raw".into(), json!(c.opcode));
    m.insert("byte_len".into(), json!(c.byte_len));
    m.insert("qp_num".into(), json!(c.qp_num));
    m.insert("src_qp".into(), json!(c.src_qp));
    m.insert("wc_flags".into(), json!(c.wc_flags));
    if c.wc_flags & rverbs_abi::wr::wc_flags::WITH_IMM != 0 {
        m.insert("imm_data".into(), json!(u32::from_be(c.ex)));
    }
    if c.wc_flags & rverbs_abi::wr::wc_flags::WITH_INVALIDATE != 0 {
        m.insert("invalidated_rkey".into(), json!(c.ex));
    }
    if c.vendor_err != 0 {
        m.insert("vendor_err".into(), json!(c.vendor_err));
    }
    Value::Object(m)
}

/// `IB_QPT_UD`.
const UD_QP: u8 = 4;

/// The queued entries of a classified ring, decoded (oldest first);
/// `qp_type` is the type of the QP owning a send queue, if known.
pub fn entries(r: &Ring, qp_type: Option<u8>) -> Vec<Value> {
    entries_limited(r, qp_type, usize::MAX).0
}

/// [`entries`], at most `max` of them; also how many more there were.
pub fn entries_limited(r: &Ring, qp_type: Option<u8>, max: usize) -> (Vec<Value>, u64) {
    let Ok(h) = &r.header else {
        return (Vec::new(), 0);
    };
    let kind = r.kind;
    let decode = |slot: u32, e: &[u8]| match kind {
        Kind::Sq => send_entry(slot, e, qp_type),
        Kind::Cq => cq_entry(slot, e),
        _ => recv_entry(slot, e),
    };
    if !(kind == Kind::Sq || kind == Kind::Cq || kind.is_recv()) {
        return (Vec::new(), 0);
    }
    let mut out = Vec::new();
    let mut more = 0u64;
    for slot in h.queued() {
        let Some(e) = r.elem(slot) else { continue };
        if out.len() < max {
            out.push(decode(slot, e));
        } else {
            more += 1;
        }
    }
    (out, more)
}

/// One decoded entry as a line of text.
pub fn entry_text(kind: Kind, v: &Value) -> String {
    let g = |k: &str| v.get(k).cloned().unwrap_or(Value::Null);
    let num = |k: &str| g(k).as_u64();
    let s = |k: &str| g(k).as_str().map(str::to_owned).unwrap_or_default();
    let mut out = format!(
        "[{:>5}] wr_id {:#x}",
        num("index").unwrap_or(0),
        num("wr_id").unwrap_or(0)
    );
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        out.push_str(&format!(" ({e})"));
        return out;
    }
    match kind {
        Kind::Sq => {
            out.push_str(&format!(
                " {} len {}",
                s("opcode"),
                num("length").unwrap_or(0)
            ));
            let flags: Vec<String> = g("flags")
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if !flags.is_empty() {
                out.push_str(&format!(" flags {}", flags.join("|")));
            }
            out.push_str(&format!(" state {}", s("state")));
            if let (Some(a), Some(b)) = (num("first_psn"), num("last_psn")) {
                out.push_str(&format!(" psn {a}-{b}"));
            }
            if let (Some(a), Some(k)) = (num("remote_addr"), num("rkey")) {
                out.push_str(&format!(" remote {a:#x} rkey {k:#x}"));
            }
            if let Some(i) = num("imm_data") {
                out.push_str(&format!(" imm {i:#x}"));
            }
            if let Some(u) = v.get("ud") {
                out.push_str(&format!(
                    " ud qpn {} qkey {:#x} ah {}",
                    qpn_of(&u["remote_qpn"]),
                    u["remote_qkey"].as_u64().unwrap_or(0),
                    u["ah_num"]
                ));
            }
            if let Some(i) = v.get("inline").and_then(Value::as_str) {
                out.push_str(&format!(" inline {i}"));
            } else {
                out.push_str(&format!(" sge [{}]", sge_text(&g("sges"))));
            }
        }
        Kind::Cq => {
            out.push_str(&format!(
                " {} {} len {} qp {}",
                s("status"),
                s("opcode"),
                num("byte_len").unwrap_or(0),
                qpn_of(&g("qp_num"))
            ));
            if let Some(i) = num("imm_data") {
                out.push_str(&format!(" imm {i:#x}"));
            }
        }
        _ => {
            out.push_str(&format!(
                " len {} sge [{}]",
                num("length").unwrap_or(0),
                sge_text(&g("sges"))
            ));
        }
    }
    out
}

/// A decoded scatter list (`[{addr, length, lkey}...]`) as text, the same
/// for rxe rings and mlx5 queues.
pub(crate) fn sge_text(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    format!(
                        "{:#x}+{} lkey {:#x}",
                        s["addr"].as_u64().unwrap_or(0),
                        s["length"].as_u64().unwrap_or(0),
                        s["lkey"].as_u64().unwrap_or(0)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}
