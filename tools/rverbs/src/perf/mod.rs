//! `rverbs perf {send,write,read,atomic} {bw,lat}`: perftest-style
//! bandwidth and latency benchmarks over an RC QP, with perftest's main
//! options (same letters) and its result columns, built on the public
//! `verbs` API only.
//!
//! Options are validated here ([`Plan::new`] needs no device, then
//! [`Plan::fit_device`]); [`run`] opens the device, creates the QP and
//! buffer, exchanges addresses over our own TCP format (`wire`), connects,
//! and runs every size: the data path is in `bench`, the figures and their
//! printing in `stats`. With `-R` (`write bw` only, for now) the exchange
//! and the connection go through rdma_cm the way perftest's `-R` does
//! ([`ptcomm`], `cm`), so either side may be perftest's `ib_write_bw -R`.

mod bench;
mod clock;
mod cm;
pub mod ptcomm;
mod stats;
pub mod wire;

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rverbs::{
    AccessFlags, ConnectOpts, Context, Endpoint, Errno, Gid, LinkLayer, Mtu, QpCap, QpInitAttr,
    QpType,
};
use serde_json::{json, Value};

use crate::common::{gid_text, num, page_size, parse_mtu, random_psn};
use bench::{Bench, Params, Peer, Res, Ticker};
use stats::{Format, RULE};
use wire::{Ctrl, Hello, Msg, Report};

/// The operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Verb {
    /// SEND to pre-posted receives.
    Send,
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// 8-byte atomics (fetch-and-add, or compare-and-swap with `-A`).
    Atomic,
}

/// Bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// Bandwidth and message rate.
    Bw,
    /// Latency.
    Lat,
}

impl Verb {
    fn code(self) -> u8 {
        self as u8
    }
    fn title(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }
    fn name(self) -> &'static str {
        match self {
            Verb::Send => "send",
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Atomic => "atomic",
        }
    }
}

impl Kind {
    fn code(self) -> u8 {
        self as u8
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Bw => "bw",
            Kind::Lat => "lat",
        }
    }
}

/// The measuring window of a `-D` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Whole run.
    pub total: Duration,
    /// Unmeasured time at either end.
    pub margin: Duration,
}

/// perftest's smallest `-n`.
const MIN_ITERS: u64 = 5;
/// Largest message of a `-a` sweep (2^23, as perftest).
const ALL_MAX: u64 = 1 << 23;
/// The largest RC message.
const MAX_MSG: u64 = 1 << 31;
/// Above this many iterations the peak bandwidth is not computed (perftest).
const PEAK_MAX_ITERS: u64 = 20000;
/// Latency runs keep a timestamp per iteration: at most this many.
const LAT_MAX_ITERS: u64 = 50_000_000;

fn parse_atomic(s: &str) -> std::result::Result<bool, String> {
    match s.to_ascii_uppercase().as_str() {
        "CMP_AND_SWAP" => Ok(true),
        "FETCH_AND_ADD" => Ok(false),
        _ => Err(format!("{s:?}: want CMP_AND_SWAP or FETCH_AND_ADD")),
    }
}

/// Options of `rverbs perf`, with perftest's letters.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "\
Run the server (no HOST) first, then the client with the server's address;
both print the results. Options that shape the test (-s/-a/--max-size, -n,
-D, -A) must match on both sides, as with perftest; a mismatch is refused.

The out-of-band exchange (addresses, a barrier per size, the client's
results) is rverbs' own TCP format: rverbs perf talks to rverbs perf only,
not to perftest's binaries. With -R (--rdma_cm; write bw only, for now)
both the exchange and the data QP go through rdma_cm as perftest's -R
does (perftest 4.5): then either side may be perftest's ib_write_bw -R,
the server prints the client's figures, and it waits at most --timeout
seconds for the client's test to end; the sizes are not compared then
(perftest's protocol does not carry them): give the server the same -s.

Latency loops read the CPU's time-stamp counter (on x86-64), calibrated
against CLOCK_MONOTONIC at start, so -F (perftest's CPU frequency check)
is accepted and has nothing to do. MB/sec is 2^20 bytes per second
(perftest's unit); --report_gbits gives 10^9 bits per second.

Results go to stdout as perftest's table, or with --json as one JSON
document (a \"results\" array, one object per size, CPU times included);
a progress line goes to stderr about once a second (not with --json).")]
pub struct PerfArgs {
    /// Operation to measure.
    #[arg(value_enum)]
    pub verb: Verb,
    /// Bandwidth (bw) or latency (lat).
    #[arg(value_enum)]
    pub kind: Kind,
    /// Connect to the server on HOST; without it, be the server.
    #[arg(value_name = "HOST")]
    pub host: Option<String>,
    /// Use RDMA device DEV (default: the first device found).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub dev: Option<String>,
    /// Use port PORT of the device.
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", default_value = "1", value_parser = num::<u8>)]
    pub ib_port: u8,
    /// GID index to send from (default: none on InfiniBand; on RoCE a
    /// RoCE v2 IPv4 GID if there is one).
    #[arg(short = 'x', long = "gid-index", value_name = "INDEX", value_parser = num::<u8>)]
    pub gid_index: Option<u8>,
    /// Message size (default 65536 for bw, 2 for lat, 8 for atomic).
    #[arg(short = 's', long = "size", value_parser = num::<u64>)]
    pub size: Option<u64>,
    /// Run every size from 2 to 2^23 (or --max-size) bytes, powers of 2.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Largest size of an -a sweep (rverbs extension).
    #[arg(long = "max-size", value_name = "SIZE", value_parser = num::<u64>)]
    pub max_size: Option<u64>,
    /// Iterations per size (at least 5; default 5000 for write bw, else 1000).
    #[arg(short = 'n', long = "iters", value_parser = num::<u64>)]
    pub iters: Option<u64>,
    /// Send queue depth: requests in flight (default 128 for bw, 1 for lat).
    #[arg(short = 't', long = "tx-depth", value_parser = num::<u32>)]
    pub tx_depth: Option<u32>,
    /// Receive queue depth of send tests (default 512).
    #[arg(short = 'r', long = "rx-depth", value_parser = num::<u32>)]
    pub rx_depth: Option<u32>,
    /// Send messages up to SIZE bytes inline (default 0; send/write only).
    #[arg(short = 'I', long = "inline_size", alias = "inline-size", value_name = "SIZE", value_parser = num::<u32>)]
    pub inline: Option<u32>,
    /// Listen on / connect to TCP port PORT.
    #[arg(short = 'p', long = "port", default_value = "18515", value_parser = num::<u16>)]
    pub port: u16,
    /// Accepted for perftest compatibility (no CPU frequency is used).
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Run for SECS seconds instead of -n iterations.
    #[arg(short = 'D', long = "duration", value_name = "SECS", value_parser = num::<u32>)]
    pub duration: Option<u32>,
    /// With -D: seconds left unmeasured at either end (default SECS/4).
    #[arg(short = 'f', long = "margin", value_name = "SECS", value_parser = num::<u32>)]
    pub margin: Option<u32>,
    /// Report bandwidth in Gbit/s instead of MB/s (2^20 bytes).
    #[arg(long = "report_gbits", alias = "report-gbits")]
    pub report_gbits: bool,
    /// Request a completion every N sends (default: half the tx depth, at most 100).
    #[arg(short = 'Q', long = "cq-mod", value_name = "N", value_parser = num::<u32>)]
    pub cq_mod: Option<u32>,
    /// Do not compute the peak bandwidth (never computed above 20000 iterations).
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Path MTU: 256..4096 (default: the port's active MTU).
    #[arg(short = 'm', long = "mtu", value_parser = parse_mtu)]
    pub mtu: Option<Mtu>,
    /// Service level.
    #[arg(short = 'S', long = "sl", default_value = "0", value_parser = num::<u8>)]
    pub sl: u8,
    /// QP timeout: 4.096 us * 2^N.
    #[arg(short = 'u', long = "qp-timeout", default_value = "14", value_parser = num::<u8>)]
    pub qp_timeout: u8,
    /// Transport retries before a send fails with RETRY_EXC_ERR: 0..7
    /// (perftest's rdma_cm option, applied here to the QP). 7 is the
    /// default; rxe takes 7 to mean "retry forever".
    #[arg(long = "retry_count", default_value = "7", value_parser = num::<u8>)]
    pub retry_count: u8,
    /// Outstanding READs/atomics (default: the device's maximum).
    #[arg(short = 'o', long = "outs", value_parser = num::<u32>)]
    pub outs: Option<u32>,
    /// Atomic operation: FETCH_AND_ADD (default) or CMP_AND_SWAP.
    #[arg(short = 'A', long = "atomic_type", value_name = "TYPE", value_parser = parse_atomic)]
    pub atomic_type: Option<bool>,
    /// Connection type: RC only.
    #[arg(short = 'c', long = "connection", value_name = "TYPE")]
    pub connection: Option<String>,
    /// Print one JSON document instead of the table (no progress line).
    #[arg(long = "json")]
    pub json: bool,
    /// Add a CPU utilisation column (user+system time over wall time).
    #[arg(long = "cpu_util", alias = "cpu-util")]
    pub cpu_util: bool,
    /// Give up after SECS seconds without progress (0: never). The server
    /// waits for its client without limit.
    #[arg(long = "timeout", value_name = "SECS", default_value = "60", value_parser = num::<u64>)]
    pub timeout: u64,
    /// Connect through rdma_cm and exchange through it as perftest's -R
    /// does: interoperates with perftest's ib_write_bw -R (write bw only).
    #[arg(short = 'R', long = "rdma_cm", alias = "rdma-cm")]
    pub rdma_cm: bool,
}

/// A validated test plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Operation.
    pub verb: Verb,
    /// Bandwidth or latency.
    pub kind: Kind,
    /// The server's host (client side).
    pub host: Option<String>,
    /// Message sizes, in order.
    pub sizes: Vec<u64>,
    /// A `-a` sweep.
    pub all: bool,
    /// `--max-size` was given.
    pub max_size_given: bool,
    /// Iterations per size (0 with `-D`).
    pub iters: u64,
    /// `-D`.
    pub timing: Option<Timing>,
    /// Send queue depth.
    pub tx_depth: u32,
    /// Receive queue depth.
    pub rx_depth: u32,
    /// Completion every this many sends.
    pub cq_mod: u32,
    /// Inline threshold.
    pub inline: u32,
    /// Compute the peak bandwidth.
    pub peak: bool,
    /// Compare-and-swap atomics.
    pub cmp_swap: bool,
    /// Output format.
    pub fmt: Format,
    /// JSON output.
    pub json: bool,
    /// No-progress timeout.
    pub limit: Option<Duration>,
    /// Device name.
    pub dev: Option<String>,
    /// Port.
    pub ib_port: u8,
    /// GID index.
    pub gid_index: Option<u8>,
    /// Path MTU asked for.
    pub mtu: Option<Mtu>,
    /// Service level.
    pub sl: u8,
    /// QP timeout code.
    pub qp_timeout: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// Outstanding READs/atomics asked for.
    pub outs: Option<u32>,
    /// TCP port (rdma_cm port with `-R`).
    pub port: u16,
    /// `-R`: rdma_cm, perftest's way.
    pub rdma_cm: bool,
}

impl Plan {
    /// What the run loops need of the plan, for the client or server side;
    /// `how` ends the progress label (" -R" for the rdma_cm mode).
    pub(super) fn bench_params(&self, client: bool, how: &str) -> Params {
        Params {
            verb: self.verb,
            kind: self.kind,
            client,
            iters: self.iters,
            timing: self.timing,
            tx_depth: self.tx_depth,
            rx_depth: self.rx_depth,
            cq_mod: self.cq_mod,
            inline: self.inline,
            peak: self.peak,
            cmp_swap: self.cmp_swap,
            limit: self.limit,
            progress: !self.json,
            label: format!("perf {} {}{how}", self.verb.name(), self.kind.name()),
        }
    }

    /// Checks the options on their own (no device needed) and fills in
    /// perftest's defaults.
    pub fn new(a: &PerfArgs) -> Result<Plan> {
        if a.rdma_cm {
            check_rdma_cm(a)?;
        }
        if let Some(c) = &a.connection {
            if !c.eq_ignore_ascii_case("RC") {
                bail!("-c/--connection {c}: rverbs perf runs over RC only");
            }
        }
        if a.ib_port < 1 {
            bail!("-i/--ib-port must be at least 1");
        }
        if a.sl > 15 {
            bail!("-S/--sl must be 0..15");
        }
        if a.qp_timeout > 31 {
            bail!("-u/--qp-timeout must be 0..31");
        }
        if a.retry_count > 7 {
            bail!("--retry_count must be 0..7");
        }
        let atomic = a.verb == Verb::Atomic;
        if a.atomic_type.is_some() && !atomic {
            bail!("-A/--atomic_type applies to atomic tests only");
        }
        if a.outs.is_some() && !matches!(a.verb, Verb::Read | Verb::Atomic) {
            bail!("-o/--outs applies to read and atomic tests only");
        }
        if a.outs == Some(0) {
            bail!("-o/--outs must be at least 1");
        }
        if a.max_size.is_some() && !a.all {
            bail!("--max-size applies to -a/--all sweeps only");
        }
        if a.all && a.size.is_some() {
            bail!("give -s/--size or -a/--all, not both");
        }
        if a.all && a.duration.is_some() {
            bail!("-D/--duration cannot run every size (-a): give one -s");
        }
        let sizes: Vec<u64> = if atomic {
            if a.all {
                bail!("-a/--all does not apply to atomic tests: their size is always 8");
            }
            match a.size {
                Some(8) | None => vec![8],
                Some(s) => bail!("atomic tests move 8 bytes: -s/--size must be 8 (got {s})"),
            }
        } else if a.all {
            let max = a.max_size.unwrap_or(ALL_MAX);
            if max < 2 {
                bail!("--max-size must be at least 2");
            }
            if max > MAX_MSG {
                bail!("--max-size must be at most {MAX_MSG}");
            }
            (1..32)
                .map(|i| 1u64 << i)
                .take_while(|&s| s <= max)
                .collect()
        } else {
            let s = a.size.unwrap_or(match a.kind {
                Kind::Bw => 65536,
                Kind::Lat => 2,
            });
            if s == 0 {
                bail!("-s/--size must be at least 1");
            }
            if s > MAX_MSG {
                bail!("-s/--size must be at most {MAX_MSG} (the largest RC message)");
            }
            vec![s]
        };
        let timing = match a.duration {
            None => {
                if a.margin.is_some() {
                    bail!("-f/--margin applies to -D/--duration runs only");
                }
                None
            }
            Some(d) => {
                if a.iters.is_some() {
                    bail!("-n/--iters and -D/--duration exclude each other");
                }
                if d == 0 {
                    bail!("-D/--duration must be at least 1 second");
                }
                let m = a.margin.unwrap_or(d / 4);
                if 2 * m as u64 >= d as u64 {
                    bail!("-f/--margin {m} leaves nothing to measure in -D {d} (need 2*margin < duration)");
                }
                Some(Timing {
                    total: Duration::from_secs(d.into()),
                    margin: Duration::from_secs(m.into()),
                })
            }
        };
        let iters = match timing {
            Some(_) => 0,
            None => {
                let n = a
                    .iters
                    .unwrap_or(if a.verb == Verb::Write && a.kind == Kind::Bw {
                        5000
                    } else {
                        1000
                    });
                if n < MIN_ITERS {
                    bail!("-n/--iters must be at least {MIN_ITERS}");
                }
                if n > u32::MAX as u64 {
                    bail!("-n/--iters must be at most {}", u32::MAX);
                }
                if a.kind == Kind::Lat && n > LAT_MAX_ITERS {
                    bail!(
                        "-n/--iters must be at most {LAT_MAX_ITERS} for latency tests \
                         (one timestamp per iteration is kept); use -D for longer runs"
                    );
                }
                n
            }
        };
        let mut tx_depth = a.tx_depth.unwrap_or(match a.kind {
            Kind::Bw => 128,
            Kind::Lat => 1,
        });
        if !(1..=15000).contains(&tx_depth) {
            bail!("-t/--tx-depth must be 1..15000");
        }
        let mut rx_depth = a.rx_depth.unwrap_or(512);
        if !(1..=16384).contains(&rx_depth) {
            bail!("-r/--rx-depth must be 1..16384");
        }
        if timing.is_none() {
            tx_depth = tx_depth.min(iters as u32);
            rx_depth = rx_depth.min(iters as u32);
        }
        if a.verb != Verb::Send {
            rx_depth = 1;
        }
        let cq_mod = match a.cq_mod {
            Some(q) if !(1..=1024).contains(&q) => bail!("-Q/--cq-mod must be 1..1024"),
            Some(q) => q.min(tx_depth),
            None => match a.kind {
                Kind::Bw => (tx_depth / 2).clamp(1, 100),
                Kind::Lat => tx_depth.min(100),
            },
        };
        let inline = match a.inline {
            Some(i) if i > 0 && matches!(a.verb, Verb::Read | Verb::Atomic) => {
                bail!("-I/--inline_size applies to send and write tests only")
            }
            Some(i) if i > 1024 => bail!("-I/--inline_size must be 0..1024"),
            Some(i) => i,
            None => 0,
        };
        Ok(Plan {
            verb: a.verb,
            kind: a.kind,
            host: a.host.clone(),
            sizes,
            all: a.all,
            max_size_given: a.max_size.is_some(),
            iters,
            timing,
            tx_depth,
            rx_depth,
            cq_mod,
            inline,
            peak: a.kind == Kind::Bw && !a.no_peak && timing.is_none() && iters <= PEAK_MAX_ITERS,
            cmp_swap: a.atomic_type.unwrap_or(false),
            fmt: Format {
                gbits: a.report_gbits,
                cpu_util: a.cpu_util,
            },
            json: a.json,
            limit: (a.timeout > 0).then(|| Duration::from_secs(a.timeout)),
            dev: a.dev.clone(),
            ib_port: a.ib_port,
            gid_index: a.gid_index,
            mtu: a.mtu,
            sl: a.sl,
            qp_timeout: a.qp_timeout,
            retry_count: a.retry_count,
            outs: a.outs,
            port: a.port,
            rdma_cm: a.rdma_cm,
        })
    }

    /// The largest size.
    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// Checks the plan against the device and port; a `-a` sweep without
    /// `--max-size` stops at the port's largest message.
    pub fn fit_device(&mut self, dev: &rverbs::DeviceAttr, port: &rverbs::PortAttr) -> Result<()> {
        let max_msg = port.max_msg_sz as u64;
        if self.max_size() > max_msg {
            if self.all && !self.max_size_given {
                self.sizes.retain(|&s| s <= max_msg);
            } else if self.all {
                bail!(
                    "--max-size {} exceeds the port's max_msg_sz {max_msg}",
                    self.max_size()
                );
            } else {
                bail!(
                    "-s/--size {} exceeds the port's max_msg_sz {max_msg}",
                    self.max_size()
                );
            }
        }
        if self.tx_depth > dev.max_qp_wr {
            bail!(
                "-t/--tx-depth {} exceeds the device's max_qp_wr {}",
                self.tx_depth,
                dev.max_qp_wr
            );
        }
        if self.rx_depth > dev.max_qp_wr {
            bail!(
                "-r/--rx-depth {} exceeds the device's max_qp_wr {}",
                self.rx_depth,
                dev.max_qp_wr
            );
        }
        if self.tx_depth.max(self.rx_depth) + 1 > dev.max_cqe {
            bail!(
                "the queue depths exceed the device's max_cqe {}",
                dev.max_cqe
            );
        }
        if self.verb == Verb::Atomic && dev.atomic_cap == 0 {
            bail!("the device does not support atomic operations (atomic_cap NONE)");
        }
        if let Some(o) = self.outs {
            let max = dev.max_qp_init_rd_atom.min(dev.max_qp_rd_atom);
            if o > max {
                bail!(
                    "-o/--outs {o} exceeds the device's limit of outstanding READs/atomics {max}"
                );
            }
        }
        Ok(())
    }
}

/// The options `-R` refuses: every test but `write bw`, and what the
/// connection manager decides with rdma_cm (MTU, GID, port, SL, timeout).
fn check_rdma_cm(a: &PerfArgs) -> Result<()> {
    if (a.verb, a.kind) != (Verb::Write, Kind::Bw) {
        bail!(
            "-R/--rdma_cm: only `perf write bw -R` (RC) speaks perftest's rdma_cm protocol for now, \
             not `perf {} {} -R`",
            a.verb.name(),
            a.kind.name()
        );
    }
    let refuse = |given: bool, what: &str| -> Result<()> {
        if given {
            bail!("-R/--rdma_cm: {what} is not supported with rdma_cm (yet)");
        }
        Ok(())
    };
    refuse(a.all, "-a/--all")?;
    refuse(a.duration.is_some(), "-D/--duration")?;
    refuse(
        a.mtu.is_some(),
        "-m/--mtu (the connection manager sets the path MTU)",
    )?;
    refuse(
        a.gid_index.is_some(),
        "-x/--gid-index (the connection manager picks the GID from the IP route)",
    )?;
    refuse(
        a.ib_port != 1,
        "-i/--ib-port (the connection manager picks the port from the IP route)",
    )?;
    refuse(a.sl != 0, "-S/--sl (the connection manager sets the SL)")?;
    refuse(
        a.qp_timeout != 14,
        "-u/--qp-timeout (the connection manager sets the timeout)",
    )?;
    Ok(())
}

/// The opened device and the port's figures.
struct Opened {
    ctx: Context,
    attr: rverbs::DeviceAttr,
    port: rverbs::PortAttr,
    gid_index: Option<u8>,
    gid: Gid,
    name: String,
}

fn open(p: &Plan) -> Result<Opened> {
    let dev = match &p.dev {
        Some(name) => {
            rverbs::device(name).with_context(|| format!("IB device {name} not found"))?
        }
        None => rverbs::devices()
            .context("failed to get the RDMA device list")?
            .into_iter()
            .next()
            .context("no RDMA devices found")?,
    };
    let name = dev.name().to_string();
    let ctx = dev
        .open()
        .with_context(|| format!("couldn't get a context for {name}"))?;
    let attr = ctx.query_device().context("couldn't query the device")?;
    if p.ib_port > attr.phys_port_cnt {
        bail!(
            "-i/--ib-port {}: {name} has {} port(s)",
            p.ib_port,
            attr.phys_port_cnt
        );
    }
    let port = ctx
        .query_port(p.ib_port)
        .with_context(|| format!("couldn't query port {}", p.ib_port))?;
    let eth = port.link_layer() == LinkLayer::Ethernet;
    if !eth && port.lid == 0 {
        bail!(
            "port {} has no LID (is the subnet manager running?)",
            p.ib_port
        );
    }
    let gid_index = match p.gid_index {
        Some(i) => Some(i),
        None if eth => Some(
            ctx.default_gid_index(p.ib_port)
                .context("no usable GID on the port (give -x)")?,
        ),
        None => None,
    };
    let gid = match gid_index {
        Some(i) => ctx
            .query_gid(p.ib_port, i)
            .with_context(|| format!("-x/--gid-index {i}: can't read that GID"))?,
        None => Gid::ZERO,
    };
    Ok(Opened {
        ctx,
        attr,
        port,
        gid_index,
        gid,
        name,
    })
}

/// The verbs objects of a run before it connects: one buffer of two
/// halves (each the largest size, page-rounded), the send and receive
/// CQs, the RC QP.
struct Parts {
    mr: rverbs::Mr,
    half: usize,
    scq: rverbs::Cq,
    rcq: rverbs::Cq,
    qp: rverbs::Qp,
}

/// Creates a run's [`Parts`] on `o`, the buffer open to the peer with
/// `access` (and `LOCAL_WRITE`). A QP refused with EINVAL while `-I` asks
/// for inline data is tried again without: if that works, the error says
/// the inline size is too large.
fn create_parts(p: &Plan, o: &Opened, access: AccessFlags) -> Result<Parts> {
    let page = page_size();
    let half = (p.max_size().max(64) as usize).div_ceil(page) * page;
    let pd = o.ctx.alloc_pd().context("couldn't allocate a PD")?;
    let mr = pd
        .alloc_mr(2 * half, AccessFlags::LOCAL_WRITE | access)
        .with_context(|| format!("couldn't register a {}-byte buffer", 2 * half))?;
    let scq = o
        .ctx
        .create_cq(p.tx_depth + 1)
        .context("couldn't create the send CQ")?;
    let rcq = o
        .ctx
        .create_cq(p.rx_depth + 1)
        .context("couldn't create the receive CQ")?;
    let cap = QpCap {
        max_send_wr: p.tx_depth,
        max_recv_wr: p.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: p.inline,
    };
    let attr = |cap| QpInitAttr {
        send_cq: &scq,
        recv_cq: &rcq,
        qp_type: QpType::Rc,
        cap,
        sq_sig_all: false,
    };
    let qp = match pd.create_qp(&attr(cap)) {
        Ok(q) => q,
        Err(e) if p.inline > 0 && e.errno() == Some(Errno::EINVAL) => {
            let probe = pd.create_qp(&attr(QpCap {
                max_inline_data: 0,
                ..cap
            }));
            if probe.is_ok() {
                bail!(
                    "-I/--inline_size {} exceeds what the device allows inline",
                    p.inline
                );
            }
            return Err(e).context("couldn't create the QP");
        }
        Err(e) => return Err(e).context("couldn't create the QP"),
    };
    Ok(Parts {
        mr,
        half,
        scq,
        rcq,
        qp,
    })
}

/// The device and port rdma_cm chose (`-R`), opened: like [`open`], with
/// the port's default GID (printed only).
fn open_at(dev: &rverbs::Device, port_num: u8) -> Result<Opened> {
    let name = dev.name().to_string();
    let ctx = dev
        .open()
        .with_context(|| format!("couldn't get a context for {name}"))?;
    let attr = ctx.query_device().context("couldn't query the device")?;
    let port = ctx
        .query_port(port_num)
        .with_context(|| format!("couldn't query port {port_num}"))?;
    let gid_index = if port.link_layer() == LinkLayer::Ethernet {
        ctx.default_gid_index(port_num).ok()
    } else {
        None
    };
    let gid = match gid_index {
        Some(i) => ctx.query_gid(port_num, i).unwrap_or(Gid::ZERO),
        None => Gid::ZERO,
    };
    Ok(Opened {
        ctx,
        attr,
        port,
        gid_index,
        gid,
        name,
    })
}

fn rusage() -> (f64, f64) {
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage for the call.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let t = |v: libc::timeval| v.tv_sec as f64 + v.tv_usec as f64 / 1e6;
    (t(ru.ru_utime), t(ru.ru_stime))
}

/// Compares the peer's announced test with ours.
fn check_match(p: &Plan, mine: &Hello, theirs: &Hello) -> Result<()> {
    let describe = |h: &Hello| {
        let verb = [Verb::Send, Verb::Write, Verb::Read, Verb::Atomic]
            .into_iter()
            .find(|v| v.code() == h.verb)
            .map_or("?", |v| v.name());
        let kind = [Kind::Bw, Kind::Lat]
            .into_iter()
            .find(|k| k.code() == h.kind)
            .map_or("?", |k| k.name());
        let mut s = format!("perf {verb} {kind}");
        if h.flags & Hello::ALL != 0 {
            s += &format!(" -a (up to {} bytes)", h.size);
        } else {
            s += &format!(" -s {}", h.size);
        }
        if h.flags & Hello::DURATION != 0 {
            s += &format!(" -D {} (margin {})", h.duration, h.margin);
        } else {
            s += &format!(" -n {}", h.iters);
        }
        if h.flags & Hello::CMP_SWAP != 0 {
            s += " -A CMP_AND_SWAP";
        }
        s
    };
    let key = |h: &Hello| {
        (
            h.verb, h.kind, h.flags, h.size, h.iters, h.duration, h.margin,
        )
    };
    if key(mine) != key(theirs) {
        bail!(
            "the peer runs `{}`, this side `{}`: both sides must be given the same test",
            describe(theirs),
            describe(mine)
        );
    }
    if theirs.addr.checked_add(theirs.len).is_none() {
        bail!(
            "the peer announced a {}-byte buffer at {:#x}: it runs past the end \
             of the address space",
            theirs.len,
            theirs.addr
        );
    }
    if theirs.len / 2 < p.max_size() {
        bail!(
            "the peer's buffer is too small for {}-byte messages",
            p.max_size()
        );
    }
    Ok(())
}

fn print_banner(p: &Plan, o: &Opened, mtu: Mtu, outs: Option<u32>) {
    print_banner_via(p, o, mtu, outs, false);
}

/// The banner; `cm`: of a `-R` run (the rdma_cm lines perftest prints).
fn print_banner_via(p: &Plan, o: &Opened, mtu: Mtu, outs: Option<u32>, cm: bool) {
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
        println!(" Data ex. method : TCP (rverbs perf's own format)");
    }
    println!("{RULE}");
}

fn print_address(which: &str, h: &Hello) {
    println!(
        " {which} address: LID {:04x} QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x}",
        h.lid, h.qpn, h.psn, h.rkey, h.addr
    );
    println!(" GID: {}", gid_text(&h.gid));
}

/// Runs `rverbs perf`.
pub fn run(a: &PerfArgs) -> Result<()> {
    let _ = a.cpu_freq;
    let mut plan = Plan::new(a)?;
    if plan.rdma_cm {
        return cm::run_cm(plan);
    }
    let o = open(&plan)?;
    plan.fit_device(&o.attr, &o.port)?;
    if plan.sizes.is_empty() {
        bail!(
            "no size of the -a sweep fits the port's max_msg_sz {}",
            o.port.max_msg_sz
        );
    }
    let client = plan.host.is_some();
    let p = &plan;

    // Resources: one buffer of two halves, two CQs, the QP.
    let access = match p.verb {
        Verb::Send => AccessFlags::empty(),
        Verb::Write => AccessFlags::REMOTE_WRITE,
        Verb::Read => AccessFlags::REMOTE_READ,
        Verb::Atomic => AccessFlags::REMOTE_ATOMIC,
    };
    let Parts {
        mr,
        half,
        scq,
        rcq,
        mut qp,
    } = create_parts(p, &o, access)?;
    qp.to_init_at(p.ib_port, 0, access)
        .context("failed to modify QP to INIT")?;
    let outs = matches!(p.verb, Verb::Read | Verb::Atomic).then(|| {
        p.outs
            .unwrap_or(o.attr.max_qp_init_rd_atom.min(o.attr.max_qp_rd_atom))
            .clamp(1, 255)
    });
    let my_mtu = p.mtu.or(o.port.active_mtu()).unwrap_or(Mtu::Mtu1024);
    let remote_mr = mr.remote();
    let mut flags = 0;
    if p.all {
        flags |= Hello::ALL;
    }
    if p.timing.is_some() {
        flags |= Hello::DURATION;
    }
    if p.cmp_swap {
        flags |= Hello::CMP_SWAP;
    }
    let me = Hello {
        verb: p.verb.code(),
        kind: p.kind.code(),
        flags,
        mtu: my_mtu as u8,
        size: p.max_size() as u32,
        iters: p.iters,
        duration: p.timing.map_or(0, |t| t.total.as_secs() as u32),
        margin: p.timing.map_or(0, |t| t.margin.as_secs() as u32),
        qpn: qp.qp_num(),
        psn: random_psn(),
        lid: o.port.lid,
        gid: o.gid,
        addr: remote_mr.addr,
        rkey: remote_mr.rkey,
        len: remote_mr.len,
    };

    let mut ctrl = match &p.host {
        Some(h) => {
            let mut c = Ctrl::connect(h, p.port, p.limit)?;
            c.send_hello(&me)?;
            c
        }
        None => {
            let l = Ctrl::listen(p.port)?;
            if !p.json {
                println!();
                println!("************************************");
                println!("* Waiting for client to connect... *");
                println!("************************************");
            }
            Ctrl::accept(l, p.limit)?
        }
    };
    let peer = ctrl.recv_hello()?;
    if !client {
        ctrl.send_hello(&me)?;
    }
    let result = (|| -> Result<Vec<Report>> {
        check_match(p, &me, &peer)?;
        let mtu = Mtu::from_raw(peer.mtu.min(me.mtu)).unwrap_or(my_mtu);
        let opts = ConnectOpts {
            port_num: p.ib_port,
            sgid_index: o.gid_index.unwrap_or(0),
            path_mtu: mtu,
            sq_psn: me.psn,
            sl: p.sl,
            hop_limit: 64,
            max_dest_rd_atomic: o.attr.max_qp_rd_atom.clamp(1, 255) as u8,
            max_rd_atomic: outs.unwrap_or(1) as u8,
            min_rnr_timer: 12,
            timeout: p.qp_timeout,
            retry_cnt: p.retry_count,
            rnr_retry: 7,
        };
        let remote = Endpoint {
            qpn: peer.qpn,
            psn: peer.psn,
            lid: peer.lid,
            gid: peer.gid,
        };
        qp.to_rtr(&remote, &opts)
            .context("failed to modify QP to RTR")?;
        qp.to_rts(&opts).context("failed to modify QP to RTS")?;
        if !p.json {
            print_banner(p, &o, mtu, outs);
            print_address("local", &me);
            print_address("remote", &peer);
            println!("{RULE}");
        }
        ctrl.sync(client)?;
        let mut res = Res {
            qp: &mut qp,
            scq,
            rcq,
            mr,
            half,
            inline_src: vec![0x5a; p.inline as usize],
        };
        let mut bench = Bench::new(
            p.bench_params(client, ""),
            Peer::new(peer.addr, peer.rkey, peer.len)?,
        );
        let lat_hdr = p.kind == Kind::Lat;
        if !p.json {
            println!("{}", p.fmt.header(lat_hdr, lat_hdr && p.timing.is_some()));
        }
        let mut out = Vec::with_capacity(p.sizes.len());
        for &size in &p.sizes {
            let size = size as usize;
            bench.prepare(&mut res, size)?;
            let go = ctrl.sync(client)?;
            let report = if bench.active() {
                let (u0, s0) = rusage();
                let mut r = bench.run(&mut res, &mut ctrl, size, go)?;
                let (u1, s1) = rusage();
                r.cpu_user = u1 - u0;
                r.cpu_sys = s1 - s0;
                if client {
                    ctrl.send(&Msg::Report(r))?;
                } else {
                    wait_report(&mut ctrl, bench.params(), size)?;
                }
                r
            } else {
                wait_report(&mut ctrl, bench.params(), size)?
            };
            if !p.json {
                println!("{}", p.fmt.row(&report));
            }
            out.push(report);
        }
        ctrl.sync(client)?;
        if !p.json {
            println!("{RULE}");
        }
        Ok(out)
    })();
    let reports = match result {
        Ok(r) => r,
        Err(e) => {
            ctrl.send_failure(&e);
            return Err(e);
        }
    };
    if p.json {
        println!("{}", json_doc(p, &o, client, &reports));
    }
    Ok(())
}

/// The server's wait for the client's report of one size: shows the
/// client's progress meanwhile; returns the report.
fn wait_report(ctrl: &mut Ctrl, params: &Params, size: usize) -> Result<Report> {
    let mut ticker = Ticker::new(params, size, false);
    loop {
        match ctrl.recv()? {
            Msg::Report(r) => {
                ticker.finish();
                if r.size != size as u64 {
                    bail!(
                        "out of step: the client reported size {}, expected {size}",
                        r.size
                    );
                }
                return Ok(r);
            }
            Msg::Progress(n) => ticker.show(Instant::now(), n),
            Msg::Done(_) => {}
            other => bail!("out of step with the client: got {other:?} waiting for its results"),
        }
    }
}

/// The `--json` document.
fn json_doc(p: &Plan, o: &Opened, client: bool, reports: &[Report]) -> String {
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
fn json_text(head: &Value, results: &[Value]) -> String {
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
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: PerfArgs,
    }

    fn args(v: &[&str]) -> std::result::Result<PerfArgs, clap::Error> {
        T::try_parse_from(std::iter::once("perf").chain(v.iter().copied())).map(|t| t.a)
    }

    fn plan(v: &[&str]) -> Result<Plan> {
        Plan::new(&args(v).map_err(|e| anyhow::anyhow!("{e}"))?)
    }

    #[test]
    fn perftest_letters_parse() {
        let a = args(&[
            "write",
            "bw",
            "-d",
            "rxe0",
            "-i",
            "1",
            "-x",
            "1",
            "-s",
            "4096",
            "-n",
            "200",
            "-t",
            "64",
            "-I",
            "128",
            "-p",
            "19000",
            "-F",
            "--report_gbits",
            "-Q",
            "8",
            "-N",
            "-m",
            "2048",
            "-S",
            "2",
            "-u",
            "16",
            "--retry_count",
            "2",
            "--json",
            "--cpu_util",
            "10.0.0.1",
        ])
        .unwrap();
        assert_eq!((a.verb, a.kind), (Verb::Write, Kind::Bw));
        assert_eq!(a.host.as_deref(), Some("10.0.0.1"));
        assert_eq!(
            (a.dev.as_deref(), a.ib_port, a.gid_index),
            (Some("rxe0"), 1, Some(1))
        );
        assert_eq!(
            (a.size, a.iters, a.tx_depth, a.inline),
            (Some(4096), Some(200), Some(64), Some(128))
        );
        assert!(a.cpu_freq && a.report_gbits && a.no_peak && a.json && a.cpu_util);
        assert_eq!(
            (a.port, a.cq_mod, a.mtu, a.sl, a.qp_timeout),
            (19000, Some(8), Some(Mtu::Mtu2048), 2, 16)
        );
        assert_eq!(a.retry_count, 2);
        let p = Plan::new(&a).unwrap();
        assert_eq!(p.sizes, [4096]);
        assert_eq!((p.iters, p.tx_depth, p.cq_mod, p.inline), (200, 64, 8, 128));
        assert!(!p.peak);
        let b = args(&[
            "atomic",
            "lat",
            "-A",
            "CMP_AND_SWAP",
            "-o",
            "4",
            "--inline-size",
            "0",
        ])
        .unwrap();
        assert_eq!((b.atomic_type, b.outs), (Some(true), Some(4)));
        assert!(args(&["send", "lat", "-D", "3", "-f", "1", "-r", "64"]).is_ok());
    }

    #[test]
    fn defaults_follow_perftest() {
        let p = plan(&["write", "bw"]).unwrap();
        assert_eq!(
            (p.sizes.clone(), p.iters, p.tx_depth, p.cq_mod),
            (vec![65536], 5000, 128, 64)
        );
        assert!(p.peak && p.host.is_none());
        let p = plan(&["send", "bw", "localhost"]).unwrap();
        assert_eq!((p.iters, p.rx_depth), (1000, 512));
        let p = plan(&["send", "lat"]).unwrap();
        assert_eq!(
            (p.sizes.clone(), p.iters, p.tx_depth, p.cq_mod),
            (vec![2], 1000, 1, 1)
        );
        let p = plan(&["atomic", "bw"]).unwrap();
        assert_eq!(p.sizes, [8]);
        assert!(!p.cmp_swap);
        let p = plan(&["read", "bw", "-n", "5", "-t", "128"]).unwrap();
        assert_eq!((p.tx_depth, p.cq_mod, p.rx_depth), (5, 2, 1));
        let p = plan(&["write", "bw", "-n", "30000"]).unwrap();
        assert!(!p.peak, "no peak above 20000 iterations");
    }

    #[test]
    fn sweep_sizes() {
        let p = plan(&["write", "bw", "-a"]).unwrap();
        assert_eq!(p.sizes.first(), Some(&2));
        assert_eq!(p.sizes.last(), Some(&(1 << 23)));
        assert_eq!(p.sizes.len(), 23);
        let p = plan(&["send", "lat", "-a", "--max-size", "1000"]).unwrap();
        assert_eq!(p.sizes, [2, 4, 8, 16, 32, 64, 128, 256, 512]);
    }

    #[test]
    fn bad_options_get_clear_errors() {
        for (v, want) in [
            (
                &["write", "bw", "-s", "0"][..],
                "-s/--size must be at least 1",
            ),
            (&["write", "bw", "-s", "4294967296"], "at most"),
            (&["atomic", "bw", "-s", "16"], "must be 8"),
            (&["atomic", "lat", "-a"], "atomic"),
            (&["write", "bw", "-n", "4"], "at least 5"),
            (&["write", "bw", "-t", "0"], "-t/--tx-depth"),
            (&["send", "bw", "-r", "20000"], "-r/--rx-depth"),
            (&["send", "bw", "-I", "2000"], "0..1024"),
            (&["read", "bw", "-I", "64"], "send and write tests only"),
            (&["write", "bw", "-a", "-s", "64"], "not both"),
            (&["write", "bw", "--max-size", "64"], "-a/--all"),
            (&["write", "bw", "-a", "-D", "5"], "-D/--duration"),
            (&["write", "bw", "-D", "5", "-n", "100"], "exclude"),
            (&["write", "bw", "-D", "4", "-f", "2"], "margin"),
            (&["write", "bw", "-f", "1"], "-D/--duration runs only"),
            (&["write", "bw", "-Q", "0"], "-Q/--cq-mod"),
            (&["write", "bw", "-c", "UD"], "RC only"),
            (&["write", "bw", "-A", "FETCH_AND_ADD"], "atomic tests only"),
            (&["send", "bw", "-o", "4"], "read and atomic"),
            (&["write", "lat", "-S", "16"], "-S/--sl"),
            (&["write", "bw", "-i", "0"], "-i/--ib-port"),
            (&["write", "bw", "--retry_count", "8"], "--retry_count"),
            (&["write", "lat", "-n", "60000000"], "-D for longer runs"),
        ] {
            let e = format!("{:#}", plan(v).unwrap_err());
            assert!(e.contains(want), "{v:?}: {e}");
        }
        for v in [
            &["write", "bw", "-m", "1000"][..],
            &["bogus", "bw"],
            &["write", "both"],
            &["write", "bw", "-A", "SWAP"],
            &["write", "bw", "-n", "ten"],
            &["write", "bw", "a", "b"],
        ] {
            assert!(args(v).is_err(), "{v:?} was accepted");
        }
    }

    #[test]
    fn rdma_cm_is_write_bw_only() {
        let p = plan(&["write", "bw", "-R", "-s", "4096", "-n", "1000", "10.0.0.1"]).unwrap();
        assert!(p.rdma_cm);
        assert_eq!(
            (p.sizes.clone(), p.iters, p.port),
            (vec![4096], 1000, 18515)
        );
        let p = plan(&["write", "bw", "--rdma_cm", "-p", "19000"]).unwrap();
        assert!(p.rdma_cm && p.host.is_none());
        assert_eq!(p.port, 19000);
        assert!(!plan(&["write", "bw"]).unwrap().rdma_cm);
        for (v, want) in [
            (&["read", "bw", "-R"][..], "only `perf write bw -R`"),
            (&["send", "bw", "-R"], "not `perf send bw -R`"),
            (&["write", "lat", "-R"], "not `perf write lat -R`"),
            (&["write", "bw", "-R", "-a"], "-a/--all"),
            (&["write", "bw", "-R", "-D", "5"], "-D/--duration"),
            (&["write", "bw", "-R", "-m", "1024"], "-m/--mtu"),
            (&["write", "bw", "-R", "-x", "1"], "-x/--gid-index"),
            (&["write", "bw", "-R", "-i", "2"], "-i/--ib-port"),
            (&["write", "bw", "-R", "-S", "1"], "-S/--sl"),
            (&["write", "bw", "-R", "-u", "16"], "-u/--qp-timeout"),
            (&["write", "bw", "-R", "-c", "UC"], "RC only"),
        ] {
            let e = format!("{:#}", plan(v).unwrap_err());
            assert!(e.contains(want), "{v:?}: {e}");
        }
    }

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

    #[test]
    fn mismatched_peers_are_refused() {
        let p = plan(&["write", "bw", "-s", "4096"]).unwrap();
        let mine = Hello {
            verb: Verb::Write.code(),
            kind: Kind::Bw.code(),
            size: 4096,
            iters: 5000,
            len: 8192,
            ..Default::default()
        };
        assert!(check_match(&p, &mine, &mine).is_ok());
        let theirs = Hello { size: 64, ..mine };
        let e = check_match(&p, &mine, &theirs).unwrap_err().to_string();
        assert!(e.contains("-s 64") && e.contains("-s 4096"), "{e}");
        let theirs = Hello {
            verb: Verb::Read.code(),
            ..mine
        };
        let e = check_match(&p, &mine, &theirs).unwrap_err().to_string();
        assert!(e.contains("perf read bw"), "{e}");
    }

    #[test]
    fn a_peer_buffer_that_wraps_the_address_space_is_refused() {
        // A server's Hello whose buffer ends past 2^64: `addr + len / 2`
        // used to overflow (a panic) once the test started.
        let p = plan(&["write", "bw", "-s", "4096"]).unwrap();
        let mine = Hello {
            verb: Verb::Write.code(),
            kind: Kind::Bw.code(),
            size: 4096,
            iters: 5000,
            addr: 0x7f00_0000_0000,
            len: 8192,
            ..Default::default()
        };
        let theirs = Hello {
            addr: u64::MAX - 100,
            ..mine
        };
        let e = check_match(&p, &mine, &theirs).unwrap_err().to_string();
        assert!(e.contains("past the end of the address space"), "{e}");
        let theirs = Hello {
            addr: u64::MAX - 8192,
            ..mine
        };
        assert!(check_match(&p, &mine, &theirs).is_ok());
    }
}
