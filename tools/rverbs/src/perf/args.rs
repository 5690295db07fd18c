//! The command line of `rverbs perf`: the operation and test kind, and
//! [`PerfArgs`], perftest's options with perftest's letters, as parsed and
//! before any check.

use rverbs::Mtu;

use crate::common::{num, parse_mtu, timeout_secs};

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
    pub(super) fn code(self) -> u8 {
        self as u8
    }
    pub(super) fn from_code(c: u8) -> Option<Verb> {
        [Verb::Send, Verb::Write, Verb::Read, Verb::Atomic]
            .into_iter()
            .find(|v| v.code() == c)
    }
    pub(super) fn title(self) -> &'static str {
        match self {
            Verb::Send => "Send",
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Atomic => "Atomic",
        }
    }
    pub(super) fn name(self) -> &'static str {
        match self {
            Verb::Send => "send",
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Atomic => "atomic",
        }
    }
}

impl Kind {
    pub(super) fn code(self) -> u8 {
        self as u8
    }
    pub(super) fn from_code(c: u8) -> Option<Kind> {
        [Kind::Bw, Kind::Lat].into_iter().find(|k| k.code() == c)
    }
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Bw => "bw",
            Kind::Lat => "lat",
        }
    }
}

pub(super) fn parse_atomic(s: &str) -> std::result::Result<bool, String> {
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
-D, -A) must match on both sides, as with perftest.

The two sides speak perftest's exchange (perftest 4.5, as Debian 12 ships
it): by default over TCP on port 18515 (-p), as perftest's ib_<test>_<bw|lat>
without -R; with -R (--rdma_cm) over rdma_cm, the data QP connected through
it too, as perftest's -R. Either side may be perftest's tool or rverbs perf
(every test, -s, -a or -D), and each side prints what perftest's would: the
server of write, read and atomic bw the client's figures (of a sweep, the
last size's), of send bw and of send and write lat its own, of read and
atomic lat none. A server that does not run waits at most --timeout seconds
(and -D's) for the client's test to end: nothing comes meanwhile. With -D
each side stops on its own clock, as perftest's do: nothing on the wire
says when a run ends. perftest's messages do not carry the test: two
rverbs perf refuse different tests (ours rides unseen by perftest in the
version message), with perftest give both sides the same options
(perftest's sweep always ends at 8 MiB, so --max-size only suits rverbs on
both sides). With -R, what the connection manager decides (-m, -x, -i, -S,
-u) is refused.

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
    /// Listen on / connect to port PORT (TCP; rdma_cm with -R).
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
    /// Give up after SECS seconds without progress (0: never); a server
    /// that does not run waits this long for the client's test. The
    /// server waits for its client to connect without limit.
    #[arg(long = "timeout", value_name = "SECS", default_value = "60", value_parser = timeout_secs)]
    pub timeout: u64,
    /// Connect through rdma_cm and exchange through it as perftest's -R
    /// does (pairs with perftest's ib_*_bw -R and ib_*_lat -R; without
    /// -R, with perftest's tools run without it).
    #[arg(short = 'R', long = "rdma_cm", alias = "rdma-cm")]
    pub rdma_cm: bool,
}
