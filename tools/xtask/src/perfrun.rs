//! What the timed runs of `cargo xtask bench` share (its fixed-size table
//! in `bench.rs`, its sweeps in `sweepbench.rs`): the two tools compared,
//! bandwidth or latency, the guest script of one server and client pair,
//! and reading the figures perftest and `rverbs perf` print.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// The device and GID index everything runs on.
pub const DEVICE: &str = "rxe0";
pub const GID_INDEX: &str = "1";
/// The two sides of every comparison.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Rverbs,
    RdmaCore,
}

impl Tool {
    pub fn tag(self) -> &'static str {
        match self {
            Tool::Rverbs => "rverbs",
            Tool::RdmaCore => "rdma-core",
        }
    }
}

/// Bandwidth or latency.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bw,
    Lat,
}

impl Kind {
    /// `bw` or `lat`, as perftest's tool names and `rverbs perf` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bw => "bw",
            Kind::Lat => "lat",
        }
    }
}
/// Appends the guest commands of one timed run: `cmd` as the server on
/// `port` (in the background), then as the client of 127.0.0.1 once the
/// server listens, each under `limit` seconds; their output goes to
/// `$OUT/NAME.{server,client}[.err]`, their exit statuses to
/// `$OUT/NAME.status`.
pub fn server_client(s: &mut String, name: &str, cmd: &str, port: u16, limit: u32) -> Result<()> {
    writeln!(
        s,
        "timeout {limit} {cmd} >\"$OUT/{name}.server\" 2>\"$OUT/{name}.server.err\" &"
    )?;
    writeln!(s, "spid=$!")?;
    writeln!(s, "wait_listen {port}")?;
    writeln!(
        s,
        "timeout {limit} {cmd} 127.0.0.1 >\"$OUT/{name}.client\" 2>\"$OUT/{name}.client.err\"; crc=$?"
    )?;
    // A client that failed leaves nobody to end the server.
    writeln!(s, "[ $crc = 0 ] || kill $spid 2>/dev/null")?;
    writeln!(s, "wait $spid; src=$?")?;
    writeln!(s, "echo \"$crc $src\" >\"$OUT/{name}.status\"")?;
    Ok(())
}

/// The client's output of the run `name` (see [`server_client`]), or,
/// if either side failed, why.
pub fn client_output(out: &Path, name: &str) -> Result<String> {
    let read = |ext: &str| std::fs::read_to_string(out.join(format!("{name}.{ext}")));
    let status = read("status").unwrap_or_default();
    if status.split_whitespace().collect::<Vec<_>>() != ["0", "0"] {
        let err = read("client.err").unwrap_or_default() + &read("server.err").unwrap_or_default();
        bail!(
            "exit statuses (client, server) {:?}: {}",
            status.trim(),
            err.lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("no message")
        );
    }
    Ok(read("client").unwrap_or_default())
}

/// One timed result: bandwidth (MB/s) and message rate (Mpps), or the
/// typical and average latency (usec).
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Bandwidth (MB/s) or typical latency (usec).
    pub a: f64,
    /// Message rate (Mpps) or average latency (usec).
    pub b: f64,
}

/// A sample whose figures are not all positive measured nothing (perftest
/// once printed a row of 0.00 for a run that exited 0): it is a failed
/// repeat, not a ratio of infinity.
pub fn measured(s: Sample) -> Result<Sample> {
    if !(s.a.is_finite() && s.b.is_finite() && s.a > 0.0 && s.b > 0.0) {
        bail!(
            "the run exited 0 but reported no measurement ({} / {})",
            s.a,
            s.b
        );
    }
    Ok(s)
}

/// `rverbs perf --json`: the first result object.
pub fn parse_rverbs(stdout: &str, kind: Kind) -> Result<Sample> {
    first(parse_rverbs_rows(stdout, kind)?)
}

/// perftest's result table: the first row of numbers after the `#bytes`
/// header.
pub fn parse_perftest(stdout: &str, kind: Kind) -> Result<Sample> {
    first(parse_perftest_rows(stdout, kind)?)
}

fn first(rows: Vec<(u64, Sample)>) -> Result<Sample> {
    rows.into_iter()
        .next()
        .map(|(_, s)| s)
        .context("no result row")
}

/// `rverbs perf --json`: every result object, as (message size, figures).
pub fn parse_rverbs_rows(stdout: &str, kind: Kind) -> Result<Vec<(u64, Sample)>> {
    let start = stdout
        .find('{')
        .context("no JSON document in rverbs perf's output")?;
    let doc: Value =
        serde_json::from_str(stdout[start..].trim()).context("rverbs perf printed bad JSON")?;
    let rows = doc["results"]
        .as_array()
        .context("rverbs perf's JSON has no `results` array")?;
    if rows.is_empty() {
        bail!("rverbs perf's JSON has no result row");
    }
    rows.iter()
        .map(|r| {
            let f = |k: &str| {
                r[k].as_f64()
                    .with_context(|| format!("rverbs perf's JSON has no number `{k}`"))
            };
            let bytes = r["bytes"]
                .as_u64()
                .context("rverbs perf's JSON has no size `bytes`")?;
            let s = match kind {
                Kind::Bw => Sample {
                    a: f("bw_average")?,
                    b: f("msg_rate_mpps")?,
                },
                Kind::Lat => Sample {
                    a: f("t_typical_usec")?,
                    b: f("t_avg_usec")?,
                },
            };
            Ok((bytes, s))
        })
        .collect()
}

/// perftest's result table: every row of numbers after the `#bytes`
/// header (one per size of an `-a` sweep), as (message size, figures).
pub fn parse_perftest_rows(stdout: &str, kind: Kind) -> Result<Vec<(u64, Sample)>> {
    let mut lines = stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"));
    lines
        .next()
        .context("no result table in perftest's output")?;
    let rows: Vec<Vec<&str>> = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| !w.is_empty() && w[0].chars().all(|c| c.is_ascii_digit()))
        .collect();
    if rows.is_empty() {
        bail!("no result row in perftest's output");
    }
    rows.iter()
        .map(|row| {
            let num = |i: usize| -> Result<f64> {
                row.get(i)
                    .and_then(|w| w.parse().ok())
                    .with_context(|| format!("perftest's result row {row:?} has no column {i}"))
            };
            let bytes = row[0]
                .parse::<u64>()
                .with_context(|| format!("perftest's result row {row:?}: size"))?;
            let s = match kind {
                // bytes, iterations, BW peak, BW average, MsgRate
                Kind::Bw => Sample {
                    a: num(3)?,
                    b: num(4)?,
                },
                // bytes, iterations, t_min, t_max, t_typical, t_avg, ...
                Kind::Lat => Sample {
                    a: num(4)?,
                    b: num(5)?,
                },
            };
            Ok((bytes, s))
        })
        .collect()
}
