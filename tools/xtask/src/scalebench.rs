//! The control-path scale part of `cargo xtask bench`: QP lifecycles (N
//! CQs and RC QPs created, each QP's endpoint asked for, connected in
//! pairs through RTS, destroyed) and MR registrations (N 4 KiB buffers
//! registered and deregistered) by our library (verbs/examples/scale.rs)
//! and by rdma-core (tools/bench/scale.c) in the same guest, for N = 1 to
//! 1024: the library's own instructions per object under callgrind (the
//! kernel excluded) and the time per object (median of three rounds).
//! Target (issue 16): at or below rdma-core's instructions, nothing
//! growing faster than linearly; reported, not enforced.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// The object counts.
pub const COUNTS: &[u32] = &[1, 16, 256, 1024];
/// The cases: the probe's first argument and the report's name.
pub const CASES: &[(&str, &str)] = &[("qp", "QP lifecycle"), ("mr", "MR register + deregister")];
/// Timed rounds (the probe prints their median).
const ROUNDS: u32 = 3;
const LIMIT_SECS: u32 = 900;

/// The file stem of a run: `kind` is `t` (timed) or `cg` (callgrind).
fn name(kind: &str, tool: &str, what: &str, n: u32) -> String {
    format!("scale-{kind}-{tool}-{what}-{n}")
}

/// Appends the guest commands: for each case and count, both probes under
/// callgrind (one measured round), then both timed, alternating which
/// goes first.
pub fn payload(s: &mut String, ours: &str, theirs: &str, device: &str) -> Result<()> {
    for (i, (what, _)) in CASES.iter().enumerate() {
        for (j, &n) in COUNTS.iter().enumerate() {
            let order = if (i + j) % 2 == 0 {
                [("rverbs", ours), ("rdma-core", theirs)]
            } else {
                [("rdma-core", theirs), ("rverbs", ours)]
            };
            for (tool, bin) in order {
                writeln!(s, "echo \"bench: scale {tool} {what} N={n}\"")?;
                let cg = name("cg", tool, what, n);
                writeln!(
                    s,
                    "timeout {LIMIT_SECS} valgrind --tool=callgrind --collect-atstart=no \
                     '--toggle-collect=*measured_*' --callgrind-out-file=\"$OUT/{cg}.out\" \
                     {bin} {what} {n} 1 {device} >\"$OUT/{cg}.log\" 2>&1; \
                     echo $? >\"$OUT/{cg}.status\""
                )?;
                let t = name("t", tool, what, n);
                writeln!(
                    s,
                    "timeout {LIMIT_SECS} {bin} {what} {n} {ROUNDS} {device} \
                     >\"$OUT/{t}.log\" 2>&1; echo $? >\"$OUT/{t}.status\""
                )?;
            }
        }
    }
    Ok(())
}

/// The median time of a round from the probe's `scale: ... median_ns=T`
/// line.
pub fn parse_median_ns(log: &str) -> Result<f64> {
    let line = log
        .lines()
        .find(|l| l.starts_with("scale: "))
        .context("no `scale:` line")?;
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("median_ns="))
        .with_context(|| format!("no median_ns in {line:?}"))?
        .parse::<f64>()
        .with_context(|| format!("median_ns in {line:?}"))
}

/// One side of one case, per object.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Side {
    /// Library instructions per object (callgrind).
    pub insns: f64,
    /// Microseconds per object (median round).
    pub us: f64,
}

fn read_file(out: &Path, stem: &str, ext: &str) -> String {
    std::fs::read_to_string(out.join(format!("{stem}.{ext}"))).unwrap_or_default()
}

fn read_side(out: &Path, tool: &str, what: &str, n: u32) -> Result<Side> {
    for kind in ["cg", "t"] {
        let stem = name(kind, tool, what, n);
        let status = read_file(out, &stem, "status");
        if status.trim() != "0" {
            let log = read_file(out, &stem, "log");
            bail!(
                "{tool} {what} N={n} failed (status {:?}): {}",
                status.trim(),
                log.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
            );
        }
    }
    let cg = name("cg", tool, what, n);
    let total = crate::callgrind::callgrind_total(&read_file(out, &cg, "out"))
        .with_context(|| format!("no instruction total in {cg}.out"))?;
    let median = parse_median_ns(&read_file(out, &name("t", tool, what, n), "log"))?;
    Ok(Side {
        insns: total as f64 / f64::from(n),
        us: median / 1e3 / f64::from(n),
    })
}

/// Every case's two sides (rverbs, rdma-core), as read from the run
/// folder.
pub type Rows = Vec<(&'static str, u32, Result<(Side, Side)>)>;

/// Reads every case.
pub fn read(out: &Path) -> Rows {
    let mut rows = Vec::new();
    for (what, label) in CASES {
        for &n in COUNTS {
            let r = read_side(out, "rverbs", what, n)
                .and_then(|a| Ok((a, read_side(out, "rdma-core", what, n)?)));
            rows.push((*label, n, r));
        }
    }
    rows
}

/// The report's table; false if a case failed (a ratio above 1 is shown,
/// not failed: the target is reported).
pub fn table(w: &mut impl FnMut(&str), rows: &Rows) -> bool {
    let mut ok = true;
    w("| Case | N | rverbs insns / object | rdma-core insns / object | insns ratio | rverbs us / object | rdma-core us / object | time ratio |");
    w("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (label, n, r) in rows {
        match r {
            Ok((a, b)) => w(&format!(
                "| {label} | {n} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} | {:.2} |",
                a.insns,
                b.insns,
                a.insns / b.insns,
                a.us,
                b.us,
                a.us / b.us
            )),
            Err(e) => {
                ok = false;
                w(&format!("| {label} | {n} | failed: {e:#} | | | | | |"));
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_probe_line() {
        let l = "x\nscale: what=qp n=16 reps=3 median_ns=123456 min_ns=120000\n";
        assert_eq!(parse_median_ns(l).unwrap(), 123456.0);
        assert!(parse_median_ns("nothing").is_err());
        assert!(parse_median_ns("scale: what=qp median_ns=x").is_err());
    }

    #[test]
    fn reads_a_run_folder() {
        let dir = std::env::temp_dir().join(format!("scalebench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (tool, insns, ns) in [("rverbs", 3200u64, 64_000u64), ("rdma-core", 4000, 80_000)] {
            let cg = name("cg", tool, "qp", 16);
            let t = name("t", tool, "qp", 16);
            std::fs::write(dir.join(format!("{cg}.status")), "0\n").unwrap();
            std::fs::write(dir.join(format!("{cg}.out")), format!("totals: {insns}\n")).unwrap();
            std::fs::write(dir.join(format!("{t}.status")), "0\n").unwrap();
            std::fs::write(
                dir.join(format!("{t}.log")),
                format!("scale: what=qp n=16 reps=3 median_ns={ns} min_ns=1\n"),
            )
            .unwrap();
        }
        let a = read_side(&dir, "rverbs", "qp", 16).unwrap();
        assert_eq!(
            a,
            Side {
                insns: 200.0,
                us: 4.0
            }
        );
        // A missing case is an error in its row, not a panic.
        assert!(read_side(&dir, "rverbs", "mr", 16).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
