//! The byte-stream part of `cargo xtask bench`: one rstream-style test
//! (a ping-pong for latency, `-C` transfers each way for bandwidth) over
//! three stacks in the same guest, both ends on rxe0's address: ours
//! (`rverbs rstream`, rverbs_cm::stream), librdmacm's rsockets (`rstream`)
//! and the kernel's TCP over the same veth (`rstream -T s`). Each run's
//! client line (rstream's columns) gives Gb/s and µs per transfer; the
//! report shows the medians and ours as a ratio to each of the others.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// What a case measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// µs per transfer of a ping-pong (lower is better).
    Latency,
    /// Gb/s (higher is better).
    Bandwidth,
}

/// A case: its label, rstream's options, what it measures.
pub struct Case {
    /// Shown in the table.
    pub label: &'static str,
    /// `-S`, `-C`, `-I`.
    pub args: &'static str,
    /// The figure read.
    pub metric: Metric,
}

/// The cases.
pub const CASES: &[Case] = &[
    Case {
        label: "64 B ping-pong",
        args: "-S 64 -C 1 -I 10000",
        metric: Metric::Latency,
    },
    Case {
        label: "4 KiB ping-pong",
        args: "-S 4096 -C 1 -I 5000",
        metric: Metric::Latency,
    },
    Case {
        label: "64 KiB bandwidth",
        args: "-S 65536 -C 1000 -I 1",
        metric: Metric::Bandwidth,
    },
    Case {
        label: "1 MiB bandwidth",
        args: "-S 1048576 -C 100 -I 1",
        metric: Metric::Bandwidth,
    },
];

/// The stacks: tag, and how the command starts (`{R}`: our binary).
pub const STACKS: [(&str, &str); 3] = [
    ("rverbs", "{R} rstream --timeout 60"),
    ("rsockets", "rstream"),
    ("tcp", "rstream -T s"),
];

/// rxe0's address in the guest.
const ADDR: &str = "10.0.0.1";
/// Time limit of one side of one run, seconds.
const LIMIT_SECS: u32 = 300;
/// The first port used.
const FIRST_PORT: u16 = 17700;

fn name(case: usize, stack: &str, repeat: u32) -> String {
    format!("stream-{case}-{stack}-{repeat}")
}

/// Appends the guest commands: every case on every stack, `repeats`
/// times, the stacks' order rotated each time.
pub fn payload(s: &mut String, rverbs: &str, repeats: u32) -> Result<()> {
    let mut port = FIRST_PORT;
    for r in 0..repeats {
        for (i, c) in CASES.iter().enumerate() {
            for k in 0..STACKS.len() {
                let (tag, cmd) = STACKS[(k + r as usize + i) % STACKS.len()];
                let cmd = cmd.replace("{R}", rverbs);
                port += 1;
                let n = name(i, tag, r);
                writeln!(
                    s,
                    "echo \"bench: stream {tag} {}, repeat {}\"",
                    c.label,
                    r + 1
                )?;
                writeln!(
                    s,
                    "timeout {LIMIT_SECS} {cmd} -b {ADDR} -p {port} {} >\"$OUT/{n}.server\" 2>&1 &",
                    c.args
                )?;
                writeln!(s, "spid=$!")?;
                writeln!(
                    s,
                    "for _ in $(seq 100); do grep -q '^name' \"$OUT/{n}.server\" && break; sleep 0.1; done"
                )?;
                writeln!(
                    s,
                    "timeout {LIMIT_SECS} {cmd} -s {ADDR} -p {port} {} >\"$OUT/{n}.client\" 2>&1; crc=$?",
                    c.args
                )?;
                writeln!(s, "[ $crc = 0 ] || kill $spid 2>/dev/null")?;
                writeln!(s, "wait $spid; src=$?")?;
                writeln!(s, "echo \"$crc $src\" >\"$OUT/{n}.status\"")?;
            }
        }
    }
    Ok(())
}

/// A run's figures: (Gb/s, µs per transfer) from rstream's result line.
pub fn parse(out: &str) -> Result<(f64, f64)> {
    let line = out
        .lines()
        .find(|l| l.starts_with("custom "))
        .context("no result line")?;
    let cols: Vec<&str> = line.split_whitespace().collect();
    // name bytes xfers iters total time Gb/sec usec/xfer
    if cols.len() != 8 {
        bail!("unexpected result line {line:?}");
    }
    let gbps = cols[6]
        .parse::<f64>()
        .with_context(|| format!("{line:?}"))?;
    let usec = cols[7]
        .parse::<f64>()
        .with_context(|| format!("{line:?}"))?;
    Ok((gbps, usec))
}

/// Medians per case and stack (`None`: a run failed).
pub type Rows = Vec<[Result<f64, String>; 3]>;

fn read_run(out: &Path, n: &str) -> Result<(f64, f64)> {
    let status = std::fs::read_to_string(out.join(format!("{n}.status"))).unwrap_or_default();
    if status.split_whitespace().collect::<Vec<_>>() != ["0", "0"] {
        let client = std::fs::read_to_string(out.join(format!("{n}.client"))).unwrap_or_default();
        bail!(
            "exit statuses (client, server) {:?}: {}",
            status.trim(),
            client.lines().last().unwrap_or("no output")
        );
    }
    parse(&std::fs::read_to_string(out.join(format!("{n}.client")))?)
}

/// Reads every run: the median figure per case and stack.
pub fn read(out: &Path, repeats: u32) -> Rows {
    CASES
        .iter()
        .enumerate()
        .map(|(i, c)| {
            STACKS.map(|(tag, _)| {
                let mut v = Vec::new();
                for r in 0..repeats {
                    let (gbps, usec) =
                        read_run(out, &name(i, tag, r)).map_err(|e| format!("{tag}: {e:#}"))?;
                    v.push(match c.metric {
                        Metric::Latency => usec,
                        Metric::Bandwidth => gbps,
                    });
                }
                v.sort_by(f64::total_cmp);
                v.get(v.len() / 2)
                    .copied()
                    .ok_or_else(|| format!("{tag}: no run"))
            })
        })
        .collect()
}

/// Writes the table; false if a run failed.
pub fn table(w: &mut impl FnMut(&str), rows: &Rows) -> bool {
    let mut ok = true;
    w("| test | rverbs_cm::stream | rsockets | TCP | ours vs rsockets | ours vs TCP |");
    w("|---|---:|---:|---:|---:|---:|");
    for (c, row) in CASES.iter().zip(rows) {
        let unit = match c.metric {
            Metric::Latency => "µs",
            Metric::Bandwidth => "Gb/s",
        };
        let cell = |r: &Result<f64, String>| match r {
            Ok(v) => format!("{v:.2} {unit}"),
            Err(_) => "failed".into(),
        };
        // Ratios as "x times better" (> 1: ours is better).
        let ratio = |theirs: &Result<f64, String>| match (&row[0], theirs) {
            (Ok(o), Ok(t)) if *o > 0.0 && *t > 0.0 => match c.metric {
                Metric::Latency => format!("{:.2}x", t / o),
                Metric::Bandwidth => format!("{:.2}x", o / t),
            },
            _ => "-".into(),
        };
        w(&format!(
            "| {} | {} | {} | {} | {} | {} |",
            c.label,
            cell(&row[0]),
            cell(&row[1]),
            cell(&row[2]),
            ratio(&row[1]),
            ratio(&row[2])
        ));
        for r in row {
            if let Err(e) = r {
                w(&format!("\n- {}: {e}", c.label));
                ok = false;
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rstreams_line() {
        let out = "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n\
                   custom    64      1       10k     1.2m        1.02s      0.01      51.04\n";
        assert_eq!(parse(out).unwrap(), (0.01, 51.04));
        assert!(parse("name\n").is_err());
    }
}
