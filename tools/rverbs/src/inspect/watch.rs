//! `rverbs inspect --pid PID --watch`: a refreshing view of every queue of
//! one process (rxe rings and our mlx5 queues): fill level, producer and
//! consumer counters, entries consumed per second, and the RNR and retry
//! counters of the devices involved, so that a stalled QP is seen at a
//! glance. Plain ANSI (clear screen, then the table), so it works in any
//! terminal; `q` (or Ctrl-C) quits.
//!
//! Each refresh is a whole inspection under the same budget and deadline
//! as a single one ([`super::guard`]); the counters come from sysfs of
//! devices named by the kernel's classification, by a name checked to be
//! a plain device name.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{self, LocalFlags, SetArg, SpecialCharacterIndices, Termios};
use serde_json::Value;

use super::guard::Untrusted;
use super::res::qpn_of;
use super::InspectArgs;

/// One queue in a refresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// SQ, RQ, CQ, SRQ (rxe) or the mlx5 directory's kind.
    pub kind: String,
    /// The device (rxe) or "mlx5".
    pub dev: String,
    /// What it belongs to: `qp N`, `cq N`, `srq N`.
    pub owner: String,
    /// Entries it holds.
    pub depth: u64,
    /// Entries queued now.
    pub queued: u64,
    /// The producer counter.
    pub producer: u64,
    /// The consumer counter.
    pub consumer: u64,
    /// What the counters count modulo: an rxe ring's slot count (its
    /// indices are masked), `None` for free-running 32-bit counters (mlx5).
    pub modulus: Option<u64>,
}

impl Row {
    /// What identifies it from one refresh to the next.
    fn key(&self) -> (String, String, String) {
        (self.kind.clone(), self.dev.clone(), self.owner.clone())
    }
}

/// The rows of one inspection's JSON (`rings` and `mlx5.queues`).
pub fn rows(v: &Value) -> Vec<Row> {
    let n = |r: &Value, k: &str| r.get(k).and_then(Value::as_u64).unwrap_or(0);
    let mut out = Vec::new();
    for r in v["rings"].as_array().into_iter().flatten() {
        let owner = match (r["qpn"].as_u64(), r["cqn"].as_u64(), r["srqn"].as_u64()) {
            (Some(_), _, _) => format!("qp {}", qpn_of(&r["qpn"])),
            (_, Some(c), _) => format!("cq {c}"),
            (_, _, Some(s)) => format!("srq {s}"),
            _ => "-".into(),
        };
        out.push(Row {
            kind: r["kind"].as_str().unwrap_or("?").to_string(),
            dev: r["dev"].as_str().unwrap_or("?").to_string(),
            owner,
            depth: n(r, "depth"),
            queued: n(r, "fill"),
            producer: n(r, "producer"),
            consumer: n(r, "consumer"),
            modulus: r["slots"].as_u64().filter(|&m| m > 0),
        });
    }
    for q in v["mlx5"]["queues"].as_array().into_iter().flatten() {
        let kind = q["kind"].as_str().unwrap_or("?").to_string();
        let num = n(q, "num");
        let owner = match kind.as_str() {
            "SQ" | "RQ" => format!("qp {}", qpn_of(&q["num"])),
            "CQ" => format!("cq {num}"),
            "SRQ" => format!("srq {num}"),
            _ => format!("{num}"),
        };
        out.push(Row {
            kind,
            dev: "mlx5".into(),
            owner,
            depth: q["capacity"]
                .as_u64()
                .or_else(|| q["entries"].as_u64())
                .unwrap_or(0),
            queued: n(q, "queued"),
            producer: n(q, "producer"),
            consumer: n(q, "consumer"),
            modulus: None,
        });
    }
    out
}

/// Consumed entries per second between two refreshes, by row. The
/// counters wrap (at the ring's slot count on rxe, at 2^32 on mlx5): a
/// ring that went round more than once between two refreshes is
/// undercounted, which a shorter `--interval` avoids.
fn rates(prev: &HashMap<(String, String, String), u64>, rows: &[Row], dt: f64) -> Vec<Option<f64>> {
    rows.iter()
        .map(|r| {
            let before = *prev.get(&r.key())?;
            let moved = match r.modulus {
                Some(m) => (r.consumer % m + m - before % m) % m,
                None => u64::from((r.consumer as u32).wrapping_sub(before as u32)),
            };
            (dt > 0.0).then(|| moved as f64 / dt)
        })
        .collect()
}

/// A device name safe to put in a sysfs path: letters, digits, `_`, `-`.
fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The RNR and retry counters of port 1 of device `dev` (its sysfs
/// `hw_counters` whose names say rnr or retry), at most 32, each read up
/// to 64 bytes.
fn counters(dev: &str) -> Vec<(String, u64)> {
    if !plain_name(dev) {
        return Vec::new();
    }
    let dir = format!("/sys/class/infiniband/{dev}/ports/1/hw_counters");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten().take(256) {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.contains("rnr") || name.contains("retry")) || out.len() >= 32 {
            continue;
        }
        let mut buf = [0u8; 64];
        let Ok(mut f) = std::fs::File::open(e.path()) else {
            continue;
        };
        let Ok(len) = f.read(&mut buf) else { continue };
        if let Some(v) = std::str::from_utf8(&buf[..len])
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            out.push((name, v));
        }
    }
    out.sort();
    out
}

/// One screen: a header, the queue table, the counters.
pub fn screen(
    pid: u32,
    comm: &Untrusted,
    interval: Duration,
    rows: &[Row],
    rates: &[Option<f64>],
    counters: &[(String, Vec<(String, u64)>)],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rverbs inspect --watch: process {pid} ({comm}), every {:.1} s; q quits",
        interval.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "\n{:<5} {:<8} {:<12} {:>7} {:>7} {:>5} {:>11} {:>11} {:>10}",
        "KIND", "DEV", "OWNER", "DEPTH", "QUEUED", "FILL", "PRODUCER", "CONSUMER", "CONSUMED/s"
    );
    for (r, rate) in rows.iter().zip(rates) {
        let fill = r
            .queued
            .saturating_mul(100)
            .checked_div(r.depth)
            .map_or("-".to_string(), |p| format!("{p}%"));
        let rate = rate.map_or("-".to_string(), |x| format!("{x:.0}"));
        let _ = writeln!(
            out,
            "{:<5} {:<8} {:<12} {:>7} {:>7} {:>5} {:>11} {:>11} {:>10}",
            r.kind, r.dev, r.owner, r.depth, r.queued, fill, r.producer, r.consumer, rate
        );
    }
    if rows.is_empty() {
        let _ = writeln!(out, "(no queues)");
    }
    for (dev, cs) in counters {
        if cs.is_empty() {
            continue;
        }
        let _ = write!(out, "\n{dev} port 1:");
        for (name, v) in cs {
            let _ = write!(out, " {name} {v}");
        }
        let _ = writeln!(out);
    }
    out
}

/// The terminal in a mode where single keys arrive unechoed (Ctrl-C
/// included, as a byte); restored when dropped.
struct RawKeys {
    saved: Termios,
}

impl RawKeys {
    fn new() -> Option<RawKeys> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok()?;
        let mut t = saved.clone();
        t.local_flags
            .remove(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG);
        t.control_chars[SpecialCharacterIndices::VMIN as usize] = 0;
        t.control_chars[SpecialCharacterIndices::VTIME as usize] = 0;
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &t).ok()?;
        Some(RawKeys { saved })
    }
}

impl Drop for RawKeys {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.saved);
    }
}

/// Whether `keys` ask to quit: `q`, `Q` or Ctrl-C.
pub fn quits(keys: &[u8]) -> bool {
    keys.iter().any(|&k| matches!(k, b'q' | b'Q' | 0x03))
}

/// Waits up to `d` for a key on a terminal stdin; whether one asked to quit.
fn wait_for_quit(d: Duration, keys: &Option<RawKeys>) -> bool {
    if keys.is_none() {
        std::thread::sleep(d);
        return false;
    }
    let stdin = std::io::stdin();
    let ms = u16::try_from(d.as_millis()).unwrap_or(u16::MAX);
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    match poll(&mut fds, PollTimeout::from(ms)) {
        Ok(n) if n > 0 => {
            let mut buf = [0u8; 32];
            match stdin.lock().read(&mut buf) {
                Ok(0) | Err(_) => false,
                Ok(len) => quits(&buf[..len]),
            }
        }
        _ => false,
    }
}

/// Runs the watch on `a.pid` every `interval` until `q`, or `iterations`
/// refreshes when given (for scripts).
pub fn run(a: &InspectArgs, interval: Duration, iterations: Option<u64>) -> Result<()> {
    let pid = a.pid.context("--watch needs --pid")?;
    let keys = RawKeys::new();
    let mut prev: HashMap<(String, String, String), u64> = HashMap::new();
    let mut prev_at: Option<Instant> = None;
    let mut done = 0u64;
    let mut stdout = std::io::stdout();
    loop {
        let mut args = a.clone();
        args.json = true;
        args.entries = false;
        let what = format!("the inspection of process {pid}");
        let json = super::guard::with_deadline(a.timeout, &what, move || {
            let mut budget = super::guard::Budget::new(args.max_queue_bytes, args.max_total_bytes);
            super::process(pid, &args, &mut budget)
        })?;
        let v: Value = serde_json::from_str(&json)?;
        let now = Instant::now();
        let rows = rows(&v);
        let dt = prev_at.map_or(0.0, |t| now.duration_since(t).as_secs_f64());
        let rates = rates(&prev, &rows, dt);
        prev = rows.iter().map(|r| (r.key(), r.consumer)).collect();
        prev_at = Some(now);
        let mut devs: Vec<String> = rows
            .iter()
            .map(|r| r.dev.clone())
            .filter(|d| d != "mlx5")
            .collect();
        devs.sort();
        devs.dedup();
        let cs: Vec<(String, Vec<(String, u64)>)> = devs
            .into_iter()
            .map(|d| (d.clone(), counters(&d)))
            .collect();
        // Read here, not from the JSON (which holds it escaped already).
        let comm = super::res::comm_of(pid).unwrap_or_else(|| "?".into());
        let text = screen(pid, &comm, interval, &rows, &rates, &cs);
        // Clear the screen, cursor home, the view; \r\n: the terminal's
        // output processing may be off.
        let _ = write!(stdout, "\x1b[H\x1b[2J{}", text.replace('\n', "\r\n"));
        let _ = stdout.flush();
        done += 1;
        if iterations.is_some_and(|n| done >= n) {
            return Ok(());
        }
        if wait_for_quit(interval, &keys) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rows_rates_and_screen() {
        let v = json!({
            "rings": [
                {"kind": "SQ", "dev": "rxe0", "qpn": 17, "depth": 128, "fill": 32,
                 "slots": 128, "producer": 100, "consumer": 68},
                {"kind": "RQ", "dev": "rxe0", "qpn": 17, "depth": 511, "fill": 1,
                 "slots": 512, "producer": 5, "consumer": 4},
                {"kind": "CQ", "dev": "rxe0", "cqn": 3, "depth": 512, "fill": 0,
                 "producer": 4000000000u64, "consumer": 4000000000u64},
            ],
            "mlx5": {"queues": [
                {"kind": "RQ", "num": 0x2a, "capacity": 64, "queued": 64,
                 "producer": 64, "consumer": 0}
            ]},
        });
        let rs = rows(&v);
        assert_eq!(rs.len(), 4);
        assert_eq!(rs[0].owner, "qp 0x000011");
        assert_eq!(rs[2].owner, "cq 3");
        assert_eq!(
            (rs[3].dev.as_str(), rs[3].owner.as_str()),
            ("mlx5", "qp 0x00002a")
        );
        // In half a second the rxe RQ's masked index went from 500 round
        // to 4 (16 consumed), and a free-running 32-bit consumer past
        // 2^32 - 1 (300 consumed).
        let prev = HashMap::from([(rs[1].key(), 500u64), (rs[2].key(), 4_294_967_000u64)]);
        let mut later = rs.clone();
        later[2].consumer = 4;
        later[2].modulus = None;
        let r = rates(&prev, &later, 0.5);
        assert_eq!(r[0], None);
        assert_eq!(r[1], Some(32.0));
        assert_eq!(r[2], Some(600.0));
        let s = screen(
            7,
            &"app".into(),
            Duration::from_secs(1),
            &later,
            &r,
            &[("rxe0".into(), vec![("rcvd_rnr_err".into(), 5)])],
        );
        assert!(s.contains("process 7 (app)"), "{s}");
        assert!(s.contains("q quits"), "{s}");
        assert!(s.contains(" 25%"), "the SQ is a quarter full: {s}");
        assert!(s.contains("100%"), "the mlx5 RQ is full: {s}");
        assert!(s.contains("600"), "{s}");
        assert!(s.contains("rxe0 port 1: rcvd_rnr_err 5"), "{s}");
    }

    /// A process named with escape sequences cannot drive the terminal.
    #[test]
    fn process_names_are_printed_inert() {
        let name = Untrusted::from("evil\x1b[2J\x07\u{9b}31m");
        let s = screen(7, &name, Duration::from_secs(1), &[], &[], &[]);
        assert!(s.contains(r"process 7 (evil\x1b[2J\x07\u{9b}31m)"), "{s}");
        assert!(!s.chars().any(|c| c.is_control() && c != '\n'), "{s}");
    }

    #[test]
    fn keys_and_names() {
        assert!(quits(b"q") && quits(b"xQ") && quits(&[0x03]));
        assert!(!quits(b"w") && !quits(b""));
        assert!(plain_name("rxe0") && plain_name("mlx5_0"));
        assert!(!plain_name("../etc") && !plain_name("a/b") && !plain_name(""));
    }
}
