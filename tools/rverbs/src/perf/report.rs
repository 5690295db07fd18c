//! Reporting: the banner and address lines perftest prints, the CPU usage
//! figures, and the `--json` document.

use rverbs::{Gid, Mtu};
use serde_json::{json, Value};

use super::args::{Kind, Verb};
use super::plan::Plan;
use super::ptmsg::PtDest;
use super::setup::Opened;
use super::stats::{Report, RULE};
use crate::common::gid_text;

pub(super) fn rusage() -> (f64, f64) {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

/// The banner; `cm`: of a `-R` run (the rdma_cm lines perftest prints).
pub(super) fn print_banner(p: &Plan, o: &Opened, mtu: Mtu, outs: Option<u32>, cm: bool) {
    println!("{RULE}");
    let title = format!(
        "{} {} Test",
        p.verb.title(),
        match p.kind {
            Kind::Bw => "BW",
            Kind::Lat => "Latency",
        }
    );
    println!("{:>28}{title} (rverbs perf)", "");
    println!(" Device          : {:<16} Connection type : RC", o.name);
    println!(" Number of qps   : 1                Transport type  : IB");
    if p.verb == Verb::Send {
        println!(
            " TX depth        : {:<16} RX depth        : {}",
            p.tx_depth, p.rx_depth
        );
    } else {
        println!(" TX depth        : {}", p.tx_depth);
    }
    println!(" CQ Moderation   : {}", p.cq_mod);
    println!(" Mtu             : {}[B]", mtu.bytes());
    println!(" Link type       : {}", o.port.link_layer());
    match o.gid_index {
        Some(i) => println!(" GID index       : {i}"),
        None => println!(" GID index       : none"),
    }
    println!(" Max inline data : {}[B]", p.inline);
    if let Some(n) = outs {
        println!(" Outstand reads  : {n}");
    }
    match p.timing {
        Some(t) => println!(
            " Duration        : {} s (margin {} s)",
            t.total.as_secs(),
            t.margin.as_secs()
        ),
        None => println!(" Iterations      : {}", p.iters),
    }
    if cm {
        println!(" rdma_cm QPs\t : ON");
        println!(" Data ex. method : rdma_cm");
        if p.host.is_none() {
            println!("{RULE}");
            println!(" Waiting for client rdma_cm QP to connect");
            println!(" Please run the same command with the IB/RoCE interface IP");
        }
    } else {
        println!(" Data ex. method : Ethernet");
    }
    println!("{RULE}");
}

/// A `local address:` or `remote address:` line of the keys (and the GID
/// line, when the keys name one).
pub(super) fn print_dest(which: &str, d: &PtDest, outs: Option<u32>) {
    print!(
        " {which} address: LID {:04x} QPN {:#06x} PSN {:#08x}",
        d.lid, d.qpn, d.psn
    );
    if outs.is_some() {
        print!(" OUT {:#04x}", d.out_reads);
    }
    println!(" RKey {:#08x} VAddr {:#016x}", d.rkey, d.vaddr);
    if d.gid_index >= 0 || d.gid != Gid::ZERO {
        println!(" GID: {}", gid_text(&d.gid));
    }
}

/// The `--json` document.
pub(super) fn json_doc(p: &Plan, o: &Opened, client: bool, reports: &[Report]) -> String {
    // The server of WRITE/READ/atomic bandwidth and READ/atomic latency
    // measures nothing: it shows the client's figures.
    let server_measures = p.verb == Verb::Send || (p.verb == Verb::Write && p.kind == Kind::Lat);
    let measured_by = if client || !server_measures {
        "client"
    } else {
        "server"
    };
    let results: Vec<Value> = reports
        .iter()
        .map(|r| {
            let mut v = p.fmt.json(r);
            if let Value::Object(m) = &mut v {
                m.insert("measured_by".into(), json!(measured_by));
            }
            v
        })
        .collect();
    let doc = json!({
        "tool": "rverbs perf",
        "test": p.verb.name(),
        "kind": p.kind.name(),
        "side": if client { "client" } else { "server" },
        "device": o.name,
        "ib_port": p.ib_port,
        "gid_index": o.gid_index,
        "connection": "RC",
        "iterations": if p.timing.is_some() { Value::Null } else { json!(p.iters) },
        "duration_sec": p.timing.map(|t| t.total.as_secs()),
        "margin_sec": p.timing.map(|t| t.margin.as_secs()),
        "tx_depth": p.tx_depth,
        "rx_depth": p.rx_depth,
        "cq_mod": p.cq_mod,
        "inline_size": p.inline,
        "atomic_type": (p.verb == Verb::Atomic)
            .then_some(if p.cmp_swap { "CMP_AND_SWAP" } else { "FETCH_AND_ADD" }),
    });
    json_text(&doc, &results)
}

/// `head` (an object) with a `results` array appended: compact, but one
/// result object per line. Valid JSON either way.
pub(super) fn json_text(head: &Value, results: &[Value]) -> String {
    let mut s = serde_json::to_string(head).unwrap_or_else(|_| "{}".into());
    s.pop(); // the closing brace
    if s.len() > 1 {
        s.push(',');
    }
    s.push_str("\"results\":[\n");
    let rows: Vec<String> = results.iter().map(|v| v.to_string()).collect();
    s.push_str(&rows.join(",\n"));
    s.push_str("\n]}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_document_keeps_every_key() {
        let head = json!({"tool": "rverbs perf", "tx_depth": 128, "side": "client"});
        let rows = [json!({"bytes": 2}), json!({"bytes": 4})];
        let text = json_text(&head, &rows);
        assert_eq!(text.lines().count(), 4, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["tx_depth"], 128);
        assert_eq!(v["side"], "client");
        assert_eq!(v["results"][1]["bytes"], 4);
        let v: Value = serde_json::from_str(&json_text(&json!({}), &[])).unwrap();
        assert_eq!(v["results"].as_array().map(Vec::len), Some(0));
    }
}
