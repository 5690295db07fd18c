//! The registration-cost part of `cargo xtask bench`: register +
//! deregister of 4 KiB to 1 GiB, pinned and on-demand, by our library
//! (verbs/examples/regmr.rs) and by rdma-core (tools/bench/regmr.c), in the
//! same guest: the wall time of each pair (the kernel's pinning and
//! mapping, the same work on both sides, dominates it), the library's own
//! instructions under callgrind (the kernel excluded), and VmPin while a
//! registration is held.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// Sizes and measured iterations (fewer where each pair pins more).
pub const SIZES: &[(u64, u32)] = &[(4 << 10, 200), (2 << 20, 50), (64 << 20, 10), (1 << 30, 3)];
/// Registration modes, as the probes take them.
pub const MODES: [&str; 2] = ["pinned", "odp"];
/// Time limit of one probe run, seconds.
const LIMIT_SECS: u32 = 600;

/// What one probe run printed (`regmr: key=value ...`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    /// Median ns per register + deregister.
    pub median_ns: f64,
    /// VmPin (KiB) while the unmeasured registration was held, minus
    /// before it.
    pub pinned_kib: i64,
}

/// The outcome of one probe run: measured, or refused by the kernel.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Registered and measured.
    Ran(Run),
    /// The registration was refused (no on-demand paging on this kernel).
    Unsupported,
}

/// Parses the probe's line.
pub fn parse(log: &str) -> Result<Outcome> {
    let line = log
        .lines()
        .find(|l| l.starts_with("regmr: "))
        .context("no `regmr:` line")?;
    if line.contains(" unsupported") {
        return Ok(Outcome::Unsupported);
    }
    let field = |k: &str| -> Result<f64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
            .with_context(|| format!("no {k} in {line:?}"))?
            .parse::<f64>()
            .with_context(|| format!("{k} in {line:?}"))
    };
    let before = field("vmpin_before_kib")?;
    Ok(Outcome::Ran(Run {
        median_ns: field("median_ns")?,
        pinned_kib: (field("vmpin_held_kib")? - before) as i64,
    }))
}

/// The file stem of a run: `kind` is `t` (timed) or `cg` (callgrind).
fn name(kind: &str, tool: &str, mode: &str, size: u64) -> String {
    format!("reg-{kind}-{tool}-{mode}-{size}")
}

/// Appends the guest commands: for each size and mode, both probes under
/// callgrind, then both timed, alternating which goes first.
pub fn payload(s: &mut String, ours: &str, theirs: &str, device: &str) -> Result<()> {
    for (i, &(size, iters)) in SIZES.iter().enumerate() {
        for (j, mode) in MODES.iter().enumerate() {
            let order = if (i + j) % 2 == 0 {
                [("rverbs", ours), ("rdma-core", theirs)]
            } else {
                [("rdma-core", theirs), ("rverbs", ours)]
            };
            for (tool, bin) in order {
                writeln!(s, "echo \"bench: registration {tool} {mode} {size} B\"")?;
                let cg = name("cg", tool, mode, size);
                writeln!(
                    s,
                    "timeout {LIMIT_SECS} valgrind --tool=callgrind --collect-atstart=no \
                     '--toggle-collect=*measured_*' --callgrind-out-file=\"$OUT/{cg}.out\" \
                     {bin} {size} {iters} {device} {mode} >\"$OUT/{cg}.log\" 2>&1; \
                     echo $? >\"$OUT/{cg}.status\""
                )?;
                let t = name("t", tool, mode, size);
                writeln!(
                    s,
                    "timeout {LIMIT_SECS} {bin} {size} {iters} {device} {mode} \
                     >\"$OUT/{t}.log\" 2>&1; echo $? >\"$OUT/{t}.status\""
                )?;
            }
        }
    }
    Ok(())
}

/// One side of one case: the timed run and the instructions per pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    /// The timed run.
    pub outcome: Outcome,
    /// Library instructions per register + deregister (callgrind).
    pub insns: Option<f64>,
}

fn read_side(out: &Path, tool: &str, mode: &str, size: u64, iters: u32) -> Result<Side> {
    let t = name("t", tool, mode, size);
    let status = std::fs::read_to_string(out.join(format!("{t}.status"))).unwrap_or_default();
    let log = std::fs::read_to_string(out.join(format!("{t}.log"))).unwrap_or_default();
    if status.trim() != "0" {
        bail!(
            "{tool} {mode} {size} B failed (status {:?}): {}",
            status.trim(),
            log.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
        );
    }
    let outcome = parse(&log)?;
    let cg = name("cg", tool, mode, size);
    let insns = match outcome {
        Outcome::Unsupported => None,
        Outcome::Ran(_) => {
            let data = std::fs::read_to_string(out.join(format!("{cg}.out")))
                .with_context(|| format!("no callgrind output {cg}.out"))?;
            let total = crate::callgrind::callgrind_total(&data)
                .with_context(|| format!("no instruction total in {cg}.out"))?;
            Some(total as f64 / f64::from(iters))
        }
    };
    Ok(Side { outcome, insns })
}

/// Every case's two sides, as read from the run folder.
pub type Rows = Vec<(u64, &'static str, Result<(Side, Side)>)>;

/// Reads every case (rverbs, rdma-core).
pub fn read(out: &Path) -> Rows {
    let mut rows = Vec::new();
    for &(size, iters) in SIZES {
        for mode in MODES {
            let r = read_side(out, "rverbs", mode, size, iters)
                .and_then(|a| Ok((a, read_side(out, "rdma-core", mode, size, iters)?)));
            rows.push((size, mode, r));
        }
    }
    rows
}

fn size_name(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 => format!("{} MiB", n >> 20),
        n => format!("{} KiB", n >> 10),
    }
}

/// The report's table; false if a case failed or ours pinned differently
/// or cost more library instructions than rdma-core's.
pub fn table(w: &mut impl FnMut(&str), rows: &Rows) -> bool {
    let mut ok = true;
    w("| Size | Mode | rverbs (us) | rdma-core (us) | time ratio | rverbs insns | rdma-core insns | insns ratio | pinned while held (KiB), rverbs / rdma-core |");
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (size, mode, r) in rows {
        let sz = size_name(*size);
        match r {
            Ok((
                Side {
                    outcome: Outcome::Ran(a),
                    insns: ia,
                },
                Side {
                    outcome: Outcome::Ran(b),
                    insns: ib,
                },
            )) => {
                let (ia, ib) = (ia.unwrap_or(f64::NAN), ib.unwrap_or(f64::NAN));
                if ia > ib || a.pinned_kib != b.pinned_kib {
                    ok = false;
                }
                w(&format!(
                    "| {sz} | {mode} | {:.1} | {:.1} | {:.3} | {:.0} | {:.0} | {:.3} | {} / {} |",
                    a.median_ns / 1e3,
                    b.median_ns / 1e3,
                    a.median_ns / b.median_ns,
                    ia,
                    ib,
                    ia / ib,
                    a.pinned_kib,
                    b.pinned_kib
                ));
            }
            Ok((a, b))
                if a.outcome == Outcome::Unsupported && b.outcome == Outcome::Unsupported =>
            {
                w(&format!(
                    "| {sz} | {mode} | refused | refused | - | - | - | - | this kernel's rxe has no on-demand paging |"
                ));
            }
            Ok((a, b)) => {
                ok = false;
                w(&format!(
                    "| {sz} | {mode} | {:?} | {:?} | the two sides disagree | | | | |",
                    a.outcome, b.outcome
                ));
            }
            Err(e) => {
                ok = false;
                w(&format!("| {sz} | {mode} | failed: {e:#} | | | | | | |"));
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_probe_lines() {
        let l = "x\nregmr: size=4096 mode=pinned iters=200 median_ns=15000 min_ns=12000 \
                 vmpin_before_kib=0 vmpin_held_kib=4 vmpin_after_kib=0\n";
        assert_eq!(
            parse(l).unwrap(),
            Outcome::Ran(Run {
                median_ns: 15000.0,
                pinned_kib: 4,
            })
        );
        let u = "regmr: size=4096 mode=odp unsupported errno=95\n";
        assert_eq!(parse(u).unwrap(), Outcome::Unsupported);
        assert!(parse("nothing").is_err());
        assert!(parse("regmr: size=1 mode=pinned median_ns=x").is_err());
    }
}
