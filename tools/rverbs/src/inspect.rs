//! `rverbs inspect`: the host's RDMA resources (PDs, CQs, QPs, SRQs, MRs,
//! CM ids, contexts) from the kernel's nldev resource dumps, and with
//! `--pid` a read-only look into one process's rxe rings: each ring's kind,
//! owner, depth and fill level, and with `--entries` every outstanding send
//! WQE, posted receive WQE and unpolled completion.
//!
//! Works on any process using rxe through the uverbs ABI (rdma-core's
//! libibverbs or this stack): it reads what the kernel and the rings say,
//! not the library's private state.
//!
//! mlx5 queues are the process's own memory, which the kernel does not
//! describe: `--pid` shows them only for processes on our mlx5 provider,
//! which lists them in its queue directory ([`mlx5`]): every SQ's WQEs,
//! RQ and SRQ entries, CQEs, doorbell records and counters.
//!
//! QP numbers are printed as rdma-core's tools print them, `0x%06x`
//! ([`res::Qpn`]), in every mode (host tables, `--pid`, `--watch`,
//! errors); JSON keeps them as numbers.
//!
//! The inspected process may be hostile: everything it controls is read
//! within a byte budget and a deadline, only the regular files it maps
//! are opened, and every string it chose (its name, the paths of the
//! files it maps, the symbol names in them) is shown escaped, in text and
//! JSON alike ([`guard::Untrusted`]).

pub mod guard;
pub mod mlx5;
pub mod res;
pub mod rings;
pub mod watch;

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use crate::common::num;
use guard::{Budget, ENTRY_COST};
use res::{QpDepths, Qpn, Snapshot};
use rings::{Kind, Ring};
use rverbs_abi::mlx5::qdir::kind as qdir_kind;

/// Options of `rverbs inspect`.
#[derive(Debug, Clone, clap::Args)]
pub struct InspectArgs {
    /// Look into the rings of process PID (read-only).
    #[arg(long = "pid", value_name = "PID", value_parser = num::<u32>)]
    pub pid: Option<u32>,
    /// With --pid: only the rings of QP QPN.
    #[arg(long = "qp", value_name = "QPN", value_parser = num::<u32>, requires = "pid")]
    pub qp: Option<u32>,
    /// With --pid: decode every queued entry (outstanding send WQEs, posted
    /// receive WQEs, unpolled completions).
    #[arg(long = "entries", requires = "pid")]
    pub entries: bool,
    /// Print JSON instead of tables.
    #[arg(long = "json")]
    pub json: bool,
    /// Most bytes read from a process for one queue (its ring and
    /// arrays); a larger queue shows its counters only.
    #[arg(long = "max-queue-bytes", value_name = "BYTES", value_parser = num::<u64>,
          default_value_t = guard::DEFAULT_MAX_QUEUE_BYTES)]
    pub max_queue_bytes: u64,
    /// Most bytes read from processes in the whole run, decoded entries
    /// counted at 2 KiB each and queues at 8 KiB; past it, queues are
    /// not read and entries not decoded (the output says so).
    #[arg(long = "max-total-bytes", value_name = "BYTES", value_parser = num::<u64>,
          default_value_t = guard::DEFAULT_MAX_TOTAL_BYTES)]
    pub max_total_bytes: u64,
    /// Give up after SECS seconds (fractions allowed) with an error.
    #[arg(long = "timeout", value_name = "SECS", value_parser = parse_timeout,
          default_value = "30")]
    pub timeout: Duration,
    /// With --pid: a refreshing view of the process's queues (fill,
    /// counters, entries consumed per second, the devices' RNR and retry
    /// counters) until `q` is pressed.
    #[arg(long = "watch", requires = "pid", conflicts_with_all = ["json", "entries", "qp"])]
    pub watch: bool,
    /// With --watch: seconds between refreshes (fractions allowed).
    #[arg(long = "interval", value_name = "SECS", value_parser = parse_timeout,
          default_value = "1", requires = "watch")]
    pub interval: Duration,
    /// With --watch: stop after N refreshes (for scripts; default: until
    /// `q`).
    #[arg(long = "iterations", value_name = "N", value_parser = num::<u64>, requires = "watch")]
    pub iterations: Option<u64>,
}

/// `--timeout`: positive seconds, fractions allowed.
fn parse_timeout(s: &str) -> std::result::Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if secs.is_nan() || secs <= 0.0 {
        return Err(format!("{s} is not a positive number of seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| format!("{s} seconds is out of range"))
}

/// Run `rverbs inspect`: the whole inspection against the deadline of
/// `--timeout`, within the budget of `--max-queue-bytes` and
/// `--max-total-bytes`.
pub fn run(a: &InspectArgs) -> Result<()> {
    if a.watch {
        return watch::run(a, a.interval, a.iterations);
    }
    let what = match a.pid {
        Some(pid) => format!("the inspection of process {pid}"),
        None => "the inspection".to_string(),
    };
    let args = a.clone();
    let out = guard::with_deadline(a.timeout, &what, move || {
        let mut budget = Budget::new(args.max_queue_bytes, args.max_total_bytes);
        match args.pid {
            None => host(args.json, &mut budget),
            Some(pid) => process(pid, &args, &mut budget),
        }
    })?;
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // The reader went away (`| head`): nothing more to say.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}

/// Rings of every process owning QPs or CQs, read quietly (processes that
/// cannot be read are skipped) within `budget`, classified.
fn all_rings(snap: &Snapshot, budget: &mut Budget) -> Vec<Ring> {
    let pids: BTreeSet<u32> = snap
        .qps
        .iter()
        .map(|q| &q.owner)
        .chain(snap.cqs.iter().map(|c| &c.owner))
        .filter_map(|o| o.pid)
        .collect();
    let mut all = Vec::new();
    for pid in pids {
        let Ok(maps) = rings::mappings(pid) else {
            continue;
        };
        let mut rs: Vec<Ring> = maps
            .into_iter()
            .filter_map(|m| Ring::read(pid, m, budget).ok())
            .collect();
        rings::classify(&mut rs, snap, pid);
        all.extend(rs);
    }
    all
}

fn host(as_json: bool, budget: &mut Budget) -> Result<String> {
    let snap = Snapshot::take()?;
    let rs = all_rings(&snap, budget);
    let mut depths: HashMap<(String, u32), QpDepths> = HashMap::new();
    let mut fills: HashMap<(String, u32), u32> = HashMap::new();
    for r in &rs {
        let (Ok(h), Some(dev)) = (&r.header, &r.map.dev) else {
            continue;
        };
        match (r.kind, r.qpn, r.cqn) {
            (Kind::Sq, Some(q), _) => {
                depths.entry((dev.clone(), q)).or_default().sq = Some((h.capacity(), h.fill()))
            }
            (Kind::Rq, Some(q), _) => {
                depths.entry((dev.clone(), q)).or_default().rq = Some((h.capacity(), h.fill()))
            }
            (Kind::Cq, _, Some(c)) => {
                fills.insert((dev.clone(), c), h.fill());
            }
            _ => {}
        }
    }
    let qd = |q: &res::QpRes| depths.get(&(q.dev.clone(), q.lqpn)).copied();
    let cf = |c: &res::CqRes| c.cqn.and_then(|n| fills.get(&(c.dev.clone(), n)).copied());
    if as_json {
        let v = json!({
            "qps": snap.qps.iter().map(|q| q.json(qd(q).as_ref())).collect::<Vec<_>>(),
            "cqs": snap.cqs.iter().map(|c| c.json(cf(c))).collect::<Vec<_>>(),
            "srqs": snap.srqs.iter().map(res::SrqRes::json).collect::<Vec<_>>(),
            "mrs": snap.mrs.iter().map(res::MrRes::json).collect::<Vec<_>>(),
            "pds": snap.pds.iter().map(res::PdRes::json).collect::<Vec<_>>(),
            "cm_ids": snap.cm_ids.iter().map(res::CmIdRes::json).collect::<Vec<_>>(),
            "contexts": snap.ctxs.iter().map(res::CtxRes::json).collect::<Vec<_>>(),
            "notes": snap.notes,
        });
        Ok(serde_json::to_string_pretty(&v)? + "\n")
    } else {
        Ok(format!(
            "{}\nSQ/RQ: queued/capacity from the owner's rings (- if unreadable); \
             UNPOLLED: completions waiting in the CQ ring.\n",
            res::text(&snap, &qd, &cf)
        ))
    }
}

/// The queued entries of ring `r`, as many as `budget` holds (charged);
/// with a note of those left out.
fn ring_entries(
    r: &Ring,
    qp_type: Option<u8>,
    budget: &mut Budget,
) -> (Vec<Value>, Option<String>) {
    let (max, why) = budget.entries_for_queue();
    let (e, more) = rings::entries_limited(r, qp_type, max);
    let _ = budget.charge((e.len() as u64).saturating_mul(ENTRY_COST));
    let note = (more > 0).then(|| format!("{more} more queued entries not decoded: {why}"));
    (e, note)
}

fn ring_json(r: &Ring, with_entries: bool, qp_type: Option<u8>, budget: &mut Budget) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("kind".into(), json!(r.kind.name()));
    m.insert("dev".into(), json!(r.map.dev));
    m.insert("uverbs".into(), json!(r.map.uverbs));
    m.insert("addr".into(), json!(format!("{:#x}", r.map.start)));
    m.insert("map_len".into(), json!(r.map.len()));
    m.insert("map_offset".into(), json!(r.map.offset));
    m.insert("qpn".into(), json!(r.qpn));
    m.insert("cqn".into(), json!(r.cqn));
    m.insert("srqn".into(), json!(r.srqn));
    match &r.header {
        Ok(h) => {
            m.insert("elem_size".into(), json!(h.elem_size()));
            m.insert("slots".into(), json!(h.slots()));
            m.insert("depth".into(), json!(h.capacity()));
            m.insert("producer".into(), json!(h.producer));
            m.insert("consumer".into(), json!(h.consumer));
            m.insert("fill".into(), json!(h.fill()));
        }
        Err(e) => {
            m.insert("error".into(), json!(e));
        }
    }
    m.insert("basis".into(), json!(r.basis));
    if with_entries {
        let (e, note) = ring_entries(r, qp_type, budget);
        m.insert("entries".into(), Value::Array(e));
        m.insert("entries_note".into(), json!(note));
    }
    Value::Object(m)
}

fn owner_text(r: &Ring) -> String {
    match (r.qpn, r.cqn, r.srqn) {
        (Some(q), _, _) => format!("qp {}", Qpn(q)),
        (_, Some(c), _) => format!("cq {c}"),
        (_, _, Some(s)) => format!("srq {s}"),
        _ => "-".into(),
    }
}

fn process(pid: u32, a: &InspectArgs, budget: &mut Budget) -> Result<String> {
    let maps = rings::mappings(pid)?;
    let comm = res::comm_of(pid);
    let (snap, snap_err) = match Snapshot::take() {
        Ok(s) => (s, None),
        Err(e) => (Snapshot::default(), Some(format!("{e:#}"))),
    };
    let mut rs = Vec::new();
    for m in maps {
        rs.push(Ring::read(pid, m, budget)?);
    }
    rings::classify(&mut rs, &snap, pid);
    rs.sort_by_key(|r| (r.map.dev.clone(), r.map.offset));
    // The mlx5 queues our provider lists.
    let (mut dirs, mlx5_notes) = mlx5::locate(pid)?;
    let mut mq = mlx5::read_all(&mlx5::Process(pid), &mut dirs, budget, a.entries);
    let comm_s = comm.clone().unwrap_or_else(|| "?".into());

    let mine = |o: &res::Owner| o.pid == Some(pid);
    if let Some(qpn) = a.qp {
        let is_qp = |q: &mlx5::Queue| {
            matches!(q.listing.kind, qdir_kind::SQ | qdir_kind::RQ) && q.listing.num == qpn
        };
        let in_mlx5 = mq.iter().any(is_qp);
        if !in_mlx5 && !snap.qps.iter().any(|q| q.lqpn == qpn && mine(&q.owner)) {
            bail!(
                "process {pid} owns no QP {} (the kernel lists its QPs as: {}; its mlx5 \
                 queue directory as: {})",
                Qpn(qpn),
                snap.qps
                    .iter()
                    .filter(|q| mine(&q.owner))
                    .map(|q| Qpn(q.lqpn).to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                mq.iter()
                    .filter(|q| q.listing.kind == qdir_kind::SQ)
                    .map(|q| Qpn(q.listing.num).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        rs.retain(|r| r.qpn == Some(qpn));
        mq.retain(is_qp);
        if rs.is_empty() && mq.is_empty() {
            bail!(
                "could not tell which of process {pid}'s rings belong to QP {}",
                Qpn(qpn)
            );
        }
    }
    let qp_type = |r: &Ring| {
        r.qpn.and_then(|n| {
            snap.qps
                .iter()
                .find(|q| q.lqpn == n && Some(&q.dev) == r.map.dev.as_ref())
                .and_then(|q| q.qp_type)
        })
    };
    let none_msg = format!(
        "process {pid} ({comm_s}) has no RDMA queues we can see: no rxe rings mapped (no \
         /dev/infiniband/uverbs* mappings)"
    );
    let mlx5_msg = if dirs.is_empty() {
        Some(mlx5::no_directory_message(pid, &comm_s))
    } else if mq.is_empty() {
        Some(format!(
            "process {pid} ({comm_s}): its mlx5 queue directory lists no queue{}",
            dirs.iter()
                .filter_map(|d| d.error.as_ref())
                .map(|e| format!(" ({e})"))
                .collect::<String>()
        ))
    } else {
        None
    };
    let message = (rs.is_empty() && mq.is_empty()).then(|| {
        let mut m = none_msg.clone();
        if let Some(x) = &mlx5_msg {
            m = format!("{m}\n{x}");
        }
        m
    });
    if a.json {
        let v = json!({
            "pid": pid,
            "comm": comm,
            "rings": rs.iter().map(|r| ring_json(r, a.entries, qp_type(r), budget)).collect::<Vec<_>>(),
            "mlx5": {
                "directories": dirs.iter().map(mlx5::dir_json).collect::<Vec<_>>(),
                "queues": mq.into_iter().map(|q| q.into_json(a.entries)).collect::<Vec<_>>(),
                "message": mlx5_msg,
                "notes": mlx5_notes,
            },
            "qps": snap.qps.iter().filter(|q| mine(&q.owner)).map(|q| q.json(None)).collect::<Vec<_>>(),
            "cqs": snap.cqs.iter().filter(|c| mine(&c.owner)).map(|c| c.json(None)).collect::<Vec<_>>(),
            "srqs": snap.srqs.iter().filter(|s| mine(&s.owner)).map(res::SrqRes::json).collect::<Vec<_>>(),
            "message": message,
            "notes": snap_err.iter().chain(&snap.notes).collect::<Vec<_>>(),
        });
        return Ok(serde_json::to_string_pretty(&v)? + "\n");
    }
    if let Some(m) = &message {
        let mut out = format!("{m}\n");
        for n in &mlx5_notes {
            let _ = writeln!(out, "note: {n}");
        }
        return Ok(out);
    }
    if rs.is_empty() {
        return Ok(mlx5_text(pid, &comm_s, &dirs, &mq, &mlx5_notes, a.entries));
    }
    let mut out = String::new();
    let _ = writeln!(out, "process {pid} ({comm_s}): {} rings", rs.len());
    if let Some(e) = &snap_err {
        let _ = writeln!(
            out,
            "note: no kernel resource data ({e}); classified by contents"
        );
    }
    let rows: Vec<Vec<String>> = rs
        .iter()
        .map(|r| {
            let (elem, slots, depth, prod, cons, fill) = match &r.header {
                Ok(h) => (
                    h.elem_size().to_string(),
                    h.slots().to_string(),
                    h.capacity().to_string(),
                    h.producer.to_string(),
                    h.consumer.to_string(),
                    h.fill().to_string(),
                ),
                Err(_) => Default::default(),
            };
            vec![
                r.kind.name().to_string(),
                r.map.dev.clone().unwrap_or_else(|| r.map.uverbs.clone()),
                owner_text(r),
                elem,
                slots,
                depth,
                prod,
                cons,
                fill,
                format!("{:#x}", r.map.start),
            ]
        })
        .collect();
    res::table(
        &mut out,
        "Rings",
        &[
            "KIND", "DEV", "OWNER", "ELEM", "SLOTS", "DEPTH", "PROD", "CONS", "QUEUED", "ADDRESS",
        ],
        &rows,
    );
    let _ = writeln!(out, "\nWhy:");
    for r in &rs {
        let _ = writeln!(
            out,
            "  {} {} at {:#x}: {}",
            r.kind.name(),
            owner_text(r),
            r.map.start,
            r.basis.join("; ")
        );
    }
    if a.entries {
        for r in &rs {
            let (e, note) = ring_entries(r, qp_type(r), budget);
            let what = match r.kind {
                Kind::Sq => "outstanding send WQEs",
                Kind::Cq => "unpolled completions",
                Kind::Unknown => continue,
                _ => "posted receive WQEs",
            };
            let _ = writeln!(
                out,
                "\n{} {} ({} {what}):",
                r.kind.name(),
                owner_text(r),
                e.len()
            );
            for v in &e {
                let _ = writeln!(out, "  {}", rings::entry_text(r.kind, v));
            }
            if let Some(n) = note {
                let _ = writeln!(out, "  ({n})");
            }
        }
    }
    let qps: Vec<_> = snap.qps.iter().filter(|q| mine(&q.owner)).collect();
    if !qps.is_empty() {
        let rows: Vec<Vec<String>> = qps
            .iter()
            .map(|q| {
                vec![
                    Qpn(q.lqpn).to_string(),
                    res::opt(q.rqpn.map(Qpn)),
                    q.qp_type.map_or("-".into(), res::qp_type_name),
                    q.state.map_or("-".into(), res::qp_state_name),
                    res::opt(q.sq_psn),
                    res::opt(q.rq_psn),
                ]
            })
            .collect();
        out.push('\n');
        res::table(
            &mut out,
            "Its QPs (kernel)",
            &["LQPN", "RQPN", "TYPE", "STATE", "SQ-PSN", "RQ-PSN"],
            &rows,
        );
    }
    for n in &snap.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if !mq.is_empty() {
        out.push('\n');
        out += &mlx5_text(pid, &comm_s, &dirs, &mq, &mlx5_notes, a.entries);
    }
    Ok(out)
}

/// The mlx5 part of `--pid` as text: the directories, a table of the
/// queues with their counters, and with `entries` every queued entry.
fn mlx5_text(
    pid: u32,
    comm: &guard::Untrusted,
    dirs: &[mlx5::Dir],
    qs: &[mlx5::Queue],
    notes: &[String],
    entries: bool,
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "process {pid} ({comm}): {} mlx5 queues", qs.len());
    for d in dirs {
        let _ = write!(
            out,
            "queue directory {} at {:#x} in {}",
            d.symbol, d.addr, d.file
        );
        match (&d.header, &d.error) {
            (_, Some(e)) => {
                let _ = writeln!(out, ": {e}");
            }
            (Some(h), None) => {
                let _ = writeln!(
                    out,
                    ": {} of {} slots listed, {} queues not listed (no free slot)",
                    h.listed, h.slot_count, h.dropped
                );
            }
            (None, None) => out.push('\n'),
        }
        for n in &d.notes {
            let _ = writeln!(out, "  note: {n}");
        }
    }
    let decoded: Vec<_> = qs.iter().map(|q| &q.decoded).collect();
    let g = |d: &mlx5::decode::Decoded, k: &str| {
        d.fields
            .get(k)
            .filter(|v| !v.is_null())
            .map_or("-".to_string(), |v| {
                v.as_str().map_or_else(|| v.to_string(), str::to_owned)
            })
    };
    // A QP's queues by its QP number, others by theirs.
    let num_hex = |d: &mlx5::decode::Decoded| {
        let num = d.fields.get("num").unwrap_or(&Value::Null);
        match d.fields.get("kind").and_then(Value::as_str) {
            Some("SQ" | "RQ") => res::qpn_of(num),
            _ => num.as_u64().map_or("-".into(), |n| format!("{n:#x}")),
        }
    };
    let rows: Vec<Vec<String>> = decoded
        .iter()
        .map(|d| {
            vec![
                g(d, "kind"),
                num_hex(d),
                g(d, "entries"),
                g(d, "stride"),
                g(d, "producer"),
                g(d, "consumer"),
                g(d, "queued"),
                g(d, "buf"),
                g(d, "dbrec_addr"),
            ]
        })
        .collect();
    out.push('\n');
    res::table(
        &mut out,
        "mlx5 queues",
        &[
            "KIND", "NUM", "ENTRIES", "STRIDE", "PROD", "CONS", "QUEUED", "BUFFER", "DBREC",
        ],
        &rows,
    );
    let _ = writeln!(
        out,
        "\nPROD/CONS: SQ in basic blocks (the doorbell record's send counter; the oldest \
         outstanding WQE), RQ in WQEs, SRQ the doorbell counter, CQ the consumer index \
         (doorbell record) and the first entry hardware still owns."
    );
    for d in &decoded {
        for n in &d.notes {
            let _ = writeln!(out, "note: {} {}: {n}", g(d, "kind"), num_hex(d));
        }
        if !entries {
            continue;
        }
        let kind = g(d, "kind");
        let what = match kind.as_str() {
            "SQ" => "outstanding send WQEs",
            "CQ" => "unpolled CQEs",
            _ => "posted receive WQEs",
        };
        let _ = writeln!(out, "\n{kind} {} ({} {what}):", num_hex(d), d.entries.len());
        for v in &d.entries {
            let _ = writeln!(out, "  {}", mlx5::entry_text(&kind, v));
        }
    }
    for n in notes {
        let _ = writeln!(out, "note: {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One QP, as `--pid` (text) and `--watch` (from `--pid`'s JSON) show
    /// it: the same QP number, in rdma-core's `0x%06x`.
    #[test]
    fn qp_numbers_are_the_same_hex_with_pid_and_watch() {
        let ring = Ring {
            map: rings::Mapping {
                start: 0x7000_0000,
                end: 0x7000_1000,
                offset: 0,
                uverbs: "uverbs0".into(),
                dev: Some("rxe0".into()),
            },
            header: Err("not read".into()),
            data: None,
            kind: Kind::Sq,
            basis: Vec::new(),
            qpn: Some(18),
            cqn: None,
            srqn: None,
        };
        assert_eq!(owner_text(&ring), "qp 0x000012");
        let v = json!({
            "rings": [ring_json(&ring, false, None, &mut Budget::default())],
            "mlx5": {"queues": [{"kind": "RQ", "num": 18}]},
        });
        let rows = watch::rows(&v);
        assert_eq!(rows[0].owner, owner_text(&ring));
        assert_eq!(rows[1].owner, "qp 0x000012");
        // The JSON keeps the number.
        assert_eq!(v["rings"][0]["qpn"], 18);
    }
}
