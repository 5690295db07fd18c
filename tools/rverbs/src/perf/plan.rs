//! Validating the options: [`Plan::new`] turns [`PerfArgs`] into a test
//! plan without a device (sizes, depths, timing, what `-R` refuses), and
//! [`Plan::fit_device`] then checks it against the opened device.

use std::time::Duration;

use anyhow::{bail, Result};
use rverbs::Mtu;

use super::args::{Kind, PerfArgs, Verb};
use super::bench::Params;
use super::stats::Format;

/// The measuring window of a `-D` run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Whole run.
    pub total: Duration,
    /// Unmeasured time at either end.
    pub margin: Duration,
}

/// perftest's smallest `-n`.
pub(super) const MIN_ITERS: u64 = 5;
/// Largest message of a `-a` sweep (2^23, as perftest).
pub(super) const ALL_MAX: u64 = 1 << 23;
/// The largest RC message.
pub(super) const MAX_MSG: u64 = 1 << 31;
/// Above this many iterations the peak bandwidth is not computed (perftest).
pub(super) const PEAK_MAX_ITERS: u64 = 20000;
/// Latency runs keep a timestamp per iteration: at most this many.
pub(super) const LAT_MAX_ITERS: u64 = 50_000_000;

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
            leads: client,
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

/// The options `-R` refuses: what the connection manager decides with
/// rdma_cm (MTU, GID, port, SL, timeout), and the sweeps and timed runs
/// perftest's `-R` exchange is not built for here.
pub(super) fn check_rdma_cm(a: &PerfArgs) -> Result<()> {
    let refuse = |given: bool, what: &str| -> Result<()> {
        if given {
            bail!("-R/--rdma_cm: {what} is not supported with rdma_cm (yet)");
        }
        Ok(())
    };
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn args(v: &[&str]) -> std::result::Result<PerfArgs, clap::Error> {
        crate::common::parse_args("perf", v)
    }

    pub(in crate::perf) fn plan(v: &[&str]) -> Result<Plan> {
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
    fn rdma_cm_takes_every_test() {
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
        for verb in ["send", "write", "read", "atomic"] {
            for kind in ["bw", "lat"] {
                let p = plan(&[verb, kind, "-R", "-n", "100", "10.0.0.1"]).unwrap();
                assert!(p.rdma_cm, "{verb} {kind}");
                assert_eq!((p.verb.name(), p.kind.name()), (verb, kind));
            }
        }
        let p = plan(&["read", "lat", "-R", "-o", "4"]).unwrap();
        assert_eq!(p.outs, Some(4));
        let p = plan(&["send", "bw", "-R", "-r", "64", "-n", "100"]).unwrap();
        assert_eq!(p.rx_depth, 64);
        // perftest's sweep: 2 bytes to 8 MiB, as without -R.
        for v in [["write", "bw"], ["send", "lat"]] {
            let p = plan(&[v[0], v[1], "-R", "-a", "10.0.0.1"]).unwrap();
            assert!(p.all && p.rdma_cm);
            assert_eq!(p.sizes.len(), 23);
            assert_eq!(p.max_size(), 1 << 23);
        }
        // -D: each side on its own clock, as perftest's.
        let p = plan(&["send", "lat", "-R", "-D", "4", "10.0.0.1"]).unwrap();
        assert!(p.rdma_cm && p.timing.is_some());
        for (v, want) in [
            (&["write", "bw", "-R", "-m", "1024"][..], "-m/--mtu"),
            (&["send", "bw", "-R", "-x", "1"], "-x/--gid-index"),
            (&["write", "bw", "-R", "-i", "2"], "-i/--ib-port"),
            (&["atomic", "bw", "-R", "-S", "1"], "-S/--sl"),
            (&["write", "lat", "-R", "-u", "16"], "-u/--qp-timeout"),
            (&["write", "bw", "-R", "-c", "UC"], "RC only"),
        ] {
            let e = format!("{:#}", plan(v).unwrap_err());
            assert!(e.contains(want), "{v:?}: {e}");
        }
    }
}
