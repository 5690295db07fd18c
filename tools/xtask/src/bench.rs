//! `cargo xtask bench`: rverbs measured side by side with rdma-core in one
//! VM boot, written up as a BENCHMARKS.md-ready markdown report.
//!
//! 1. Builds the workspace's binaries and examples in release mode, and
//!    rdma-core's twin of the instruction-count probe (`tools/bench/
//!    postpoll.c`, linked with `-libverbs`) into `target/bench/`, a folder
//!    the linkage check does not scan (it is a test-only reference, never
//!    a product binary). Before booting, the linkage check's own inspector
//!    confirms that our probe and `rverbs` do not touch libibverbs and that
//!    the C probe does (so the comparison really is against rdma-core).
//! 2. In one guest: `valgrind --tool=callgrind` runs both probes
//!    (`verbs/examples/postpoll.rs` and the C one, the C one twice: on
//!    rdma-core's libibverbs and on ours, `verbs/ibverbs`, the C ABI's
//!    rows) for each probe mode,
//!    counting only the functions named `*measured_*` (the post and the
//!    poll calls, everything below them included; user space only, as
//!    callgrind cannot see the kernel, and both sides make the same
//!    syscalls); then the registration costs (module `regbench`) and the
//!    control path at scale, N = 1 to 1024 QPs and MRs (module
//!    `scalebench`). Then, unless `rverbs perf` is missing from the build or
//!    `--skip-perf` was given, every bandwidth and latency case runs
//!    server + client on rxe0 (GID index 1, TCP over 127.0.0.1) with our
//!    `rverbs perf` and with rdma-core's perftest (`ib_*_bw`, `ib_*_lat`),
//!    `--repeats` times, alternating which tool goes first.
//! 3. After the guest is gone, reads every result file from the run
//!    folder, prints the report and writes it to `target/bench/BENCHMARKS.md`.
//!
//! Instruction counts are deterministic and carry the targets (each
//! probe's [`Target`] per provider: a fraction of rdma-core's count, or
//! instructions per work request); timings under TCG are only comparable
//! as ratios within one run. Exits non-zero if a probe or run failed or a
//! target was missed.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::callgrind::callgrind_total;
use crate::charts::{self, Axes, Bar, Line, Mark, OURS, THEIRS};
use crate::efabench::{self, EfaResult};
use crate::linkage;
use crate::perfrun::{
    client_output, measured, parse_perftest, parse_rverbs, server_client, Kind, Sample, Tool,
    DEVICE, GID_INDEX,
};
use crate::streambench;
use crate::sweepbench::{self, Sweep, Sweep1};
use crate::util::{self, cargo_bin, fmt_num, print_line, shell_quote, workspace_root};
use crate::vm::{self, VmOptions};
use crate::{regbench, scalebench};

/// What a probe's count must meet on one provider (issue 16's targets).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// None: the row is for information.
    Info,
    /// rverbs' count at most this fraction of rdma-core's.
    Ratio(f64),
    /// rverbs' count at most this many instructions per work request.
    PerWr(f64),
}

impl Target {
    /// The table cell: the target and whether `ours` (per iteration, of
    /// `wrs` requests) against `theirs` meets it; `None` in the verdict
    /// for a row without a target.
    fn judge(self, ours: f64, theirs: f64, wrs: u32) -> (String, Option<bool>) {
        match self {
            Target::Info => ("(info)".into(), None),
            Target::Ratio(t) => (format!("<= {t}x"), Some(ours / theirs <= t)),
            Target::PerWr(t) => (
                format!("<= {t} per WR"),
                Some(ours / f64::from(wrs.max(1)) <= t),
            ),
        }
    }
}
/// Time limit of one probe under valgrind and of one perf process.
const PROBE_LIMIT_SECS: u32 = 600;
const PERF_LIMIT_SECS: u32 = 120;
/// A latency repeat in which either tool's typical latency reaches this
/// (usec) ran in the guest's timer-tick regime: with both vCPUs busy
/// polling, rxe's deferred work waits for the next 4 ms tick (HZ=250) and
/// every message takes about one tick, whichever tool sends it. Both tools
/// fall into it together when the shared host is busy; such repeats say
/// nothing about the software and are left out of the ratios (and counted).
const TICK_BOUND_USEC: f64 = 2000.0;
/// The emulated ConnectX-5 and its GID index (InfiniBand link layer).
const MLX5_DEVICE: &str = "mlx5_0";
const MLX5_GID_INDEX: &str = "0";
/// First TCP port of the perf runs (each run gets the next one).
const FIRST_PORT: u16 = 19000;

/// Options of `cargo xtask bench`.
pub struct BenchOptions {
    /// VM settings (kernel series, timeout).
    pub vm: VmOptions,
    /// Repeats of every timed case.
    pub repeats: u32,
    /// Measured iterations of each instruction-count probe.
    pub probe_iters: u32,
    /// Skip the perftest comparison (fixed sizes and sweeps).
    pub skip_perf: bool,
    /// Skip the message-size sweeps behind the latency and bandwidth
    /// charts.
    pub skip_sweeps: bool,
    /// Only the host's probes (the emulated mlx5's and EFA's): no VM, no
    /// report file.
    pub mlx5_only: bool,
    /// No run: the report (and charts) of the earlier run whose raw
    /// results are in this folder (`--repeats` and `--probe-iters` must
    /// be the run's).
    pub report_from: Option<PathBuf>,
    /// The command line, for the report.
    pub command_line: String,
}

/// One instruction-count probe mode (see verbs/examples/postpoll.rs).
struct Probe {
    mode: &'static str,
    what: &'static str,
    /// The chart's row label (per operation: per WR for the chains).
    short: &'static str,
    /// Work requests per measured iteration.
    wrs: u32,
    /// The target on rxe (the batch probe has none there: rxe posts a
    /// batch through its chain path; the receive side has none on rxe).
    rxe: Target,
    /// The target on the emulated mlx5.
    mlx5: Target,
}

const PROBES: &[Probe] = &[
    Probe {
        mode: "send",
        short: "SEND + poll",
        what: "post_send of one signaled 64 B SEND + the poll that returns its completion",
        wrs: 1,
        rxe: Target::Ratio(0.6),
        mlx5: Target::Ratio(0.5),
    },
    Probe {
        mode: "write32",
        short: "WRITE x32 chain, per WR",
        what: "post_send of a chain of 32 x 64 B RDMA WRITE (last one signaled) + the poll that returns its completion",
        wrs: 32,
        rxe: Target::Ratio(0.6),
        mlx5: Target::Ratio(0.4),
    },
    Probe {
        mode: "batch32",
        short: "WRITE x32 batch, per WR",
        what: "32 x 64 B RDMA WRITE (last one signaled) + the poll that returns its completion: rverbs post_send_batch, rdma-core the write32 chain (it has no batch call)",
        wrs: 32,
        rxe: Target::Info,
        mlx5: Target::PerWr(40.0),
    },
    Probe {
        mode: "recv",
        short: "RECV + poll",
        what: "post_recv of one 64 B receive + the poll that returns its completion",
        wrs: 1,
        rxe: Target::Info,
        mlx5: Target::Ratio(0.7),
    },
];

/// One timed case: `rverbs perf VERB KIND` against perftest's `ib_VERB_KIND`.
struct PerfCase {
    verb: &'static str,
    kind: Kind,
    size: u64,
    iters: u64,
    /// Whether perftest also runs on our libibverbs.so.1 (both sides),
    /// for the C ABI's timed rows.
    ourlib: bool,
}

impl PerfCase {
    fn perftest(&self) -> String {
        format!("ib_{}_{}", self.verb, self.kind.name())
    }
    /// Options both tools get, with perftest's letters. Bandwidth runs
    /// set the send queue depth and the completion moderation explicitly
    /// to perftest's defaults (128; 100, or 1 above 8 KiB, where perftest
    /// switches moderation off), so both sides run the same pipeline.
    fn common_args(&self, port: u16) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-d".into(),
            DEVICE.into(),
            "-x".into(),
            GID_INDEX.into(),
            "-s".into(),
            self.size.to_string(),
            "-n".into(),
            self.iters.to_string(),
            "-p".into(),
            port.to_string(),
            "-F".into(),
        ];
        if self.kind == Kind::Bw {
            let cq_mod = if self.size > 8192 { 1 } else { 100 };
            a.extend(["-t".into(), "128".into(), "-Q".into(), cq_mod.to_string()]);
        }
        a
    }
}

/// The timed cases: bandwidth and message rate of WRITE and SEND at 64 B,
/// 4 KiB and 64 KiB; latency of SEND, WRITE and READ at 8 B and 4 KiB.
/// Iteration counts keep one run to a few seconds under TCG. perftest
/// runs a third time, on our libibverbs.so.1, for `ib_send_lat`,
/// `ib_write_bw` and `ib_send_bw -s 64`.
fn perf_cases() -> Vec<PerfCase> {
    let mut v = Vec::new();
    for verb in ["write", "send"] {
        for (size, iters) in [(64, 5000), (4096, 2000), (65536, 500)] {
            v.push(PerfCase {
                verb,
                kind: Kind::Bw,
                size,
                iters,
                ourlib: verb == "write" || size == 64,
            });
        }
    }
    for verb in ["send", "write", "read"] {
        for size in [8, 4096] {
            v.push(PerfCase {
                verb,
                kind: Kind::Lat,
                size,
                iters: 500,
                ourlib: verb == "send",
            });
        }
    }
    v
}

/// Paths of the binaries the guest runs (and the host's EFA probe).
struct Binaries {
    probe_rs: PathBuf,
    /// The EFA probe (`verbs/examples/efa_postpoll.rs`), run on the host.
    efa_probe_rs: PathBuf,
    probe_c: PathBuf,
    /// The hand-written mlx5 floor (`tools/bench/floor_mlx5.c`, mlx5dv).
    floor_c: PathBuf,
    /// Our libibverbs.so.1 (release), on which the C probe runs a second
    /// time: the C ABI's rows.
    ourlib: PathBuf,
    regmr_rs: PathBuf,
    regmr_c: PathBuf,
    scale_rs: PathBuf,
    scale_c: PathBuf,
    rverbs: PathBuf,
}

/// Compiles the C probe `tools/bench/{src}` at -O2 into `out`, linked
/// with `libs` (libibverbs-dev's, and libmlx5's for the floor).
fn compile_probe(out: &Path, src: &str, libs: &[&str]) -> Result<()> {
    util::run(
        Command::new("cc")
            .args(["-O2", "-Wall", "-Wextra", "-o"])
            .arg(out)
            .arg(workspace_root().join("tools/bench").join(src))
            .args(libs),
    )
    .with_context(|| {
        format!(
            "compiling tools/bench/{src} with {} (libibverbs-dev)",
            libs.join(" ")
        )
    })
}

/// Builds the release binaries and the C probe.
fn build(target: &Path) -> Result<Binaries> {
    say!("building the workspace's binaries and examples in release mode");
    util::run(
        Command::new(cargo_bin())
            .args(["build", "--release", "--workspace", "--bins", "--examples"])
            .current_dir(workspace_root()),
    )?;
    let release = target.join("release");
    let bench_dir = target.join("bench");
    util::mkdir_p(&bench_dir)?;
    let probe_c = bench_dir.join("postpoll-c");
    say!("building rdma-core's probe {}", probe_c.display());
    compile_probe(&probe_c, "postpoll.c", &["-libverbs"])?;
    // (No library file name in xtask's strings: the linkage check reads
    // one in a binary as a possible dlopen, and xtask's binary is checked.)
    say!("building our libibverbs (release), for the C probe's second run");
    let ourlib = crate::ibverbs::build(target, true)?;
    // The floor drives libmlx5's queues by hand (mlx5dv): it links
    // libmlx5 itself, which libibverbs-dev's mlx5dv.h goes with.
    let floor_c = bench_dir.join("floor-mlx5");
    compile_probe(&floor_c, "floor_mlx5.c", &["-libverbs", "-lmlx5"])?;
    let regmr_c = bench_dir.join("regmr-c");
    compile_probe(&regmr_c, "regmr.c", &["-libverbs"])?;
    let scale_c = bench_dir.join("scale-c");
    compile_probe(&scale_c, "scale.c", &["-libverbs"])?;
    Ok(Binaries {
        probe_rs: release.join("examples/postpoll"),
        efa_probe_rs: release.join("examples/efa_postpoll"),
        probe_c,
        floor_c,
        ourlib,
        regmr_rs: release.join("examples/regmr"),
        regmr_c,
        scale_rs: release.join("examples/scale"),
        scale_c,
        rverbs: release.join("rverbs"),
    })
}

/// Makes sure the host has what the guest will run (valgrind, perftest)
/// and what the C probe is built with (cc, libibverbs-dev, the rxe
/// provider), installing them through apt when we are root.
fn ensure_tools(perf: bool) -> Result<()> {
    util::ensure_tool("cc", "gcc")?;
    util::ensure_tool("valgrind", "valgrind")?;
    util::ensure_tool("readelf", "binutils")?;
    if perf {
        util::ensure_tool("ib_write_bw", "perftest")?;
    }
    for (file, pkg) in [
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        ("/etc/libibverbs.d/rxe.driver", "ibverbs-providers"),
    ] {
        if !Path::new(file).exists() {
            if !util::is_root() {
                bail!("{file} is missing: install the Debian package `{pkg}`");
            }
            util::apt_install(&[pkg])?;
        }
    }
    Ok(())
}

/// Whether the built `rverbs` has the `perf` subcommand.
fn rverbs_perf_available(rverbs: &Path) -> bool {
    Command::new(rverbs)
        .args(["perf", "--help"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Checks, with the linkage check's inspector, that our binaries are free
/// of rdma-core and that the C probe really uses it.
fn check_linkage(b: &Binaries) -> Result<()> {
    for ours in [&b.probe_rs, &b.regmr_rs, &b.scale_rs, &b.rverbs] {
        let problems = linkage::inspect(ours)?;
        if !problems.is_empty() {
            bail!(
                "{} touches rdma-core: {}",
                ours.display(),
                problems.join("; ")
            );
        }
    }
    for c in [&b.probe_c, &b.regmr_c, &b.scale_c, &b.floor_c] {
        let theirs = linkage::inspect(c)?;
        if !theirs.iter().any(|p| p.contains("libibverbs")) {
            bail!(
                "{} does not link libibverbs: the comparison would be meaningless",
                c.display()
            );
        }
    }
    Ok(())
}

/// A file name in the run folder: `family` is "" for the rxe probes in
/// the guest and "mlx5-" for the ones on the emulated ConnectX-5.
fn probe_name(family: &str, tool: Tool, mode: &str) -> String {
    probe_file(family, tool.tag(), mode)
}

/// The file stem of a probe run: `family`, then `cg-`, the side's tag
/// ([`Tool::tag`], or [`OURLIB`]) and the mode.
fn probe_file(family: &str, tag: &str, mode: &str) -> String {
    format!("{family}cg-{tag}-{mode}")
}

/// The tag of the C probe's run on our libibverbs.so.1.
const OURLIB: &str = "ourlib";

fn perf_name(case: usize, tool: Tool, repeat: u32) -> String {
    format!("perf-{case}-{}-r{repeat}", tool.tag())
}

/// The file stem of perftest's run on our libibverbs.so.1.
fn ourlib_perf_name(case: usize, repeat: u32) -> String {
    format!("perf-{case}-perftest-{OURLIB}-r{repeat}")
}

/// The guest script: the probes, then the perf runs; every result goes to
/// a file in `out` (the run folder, shared with the host).
fn payload(
    opts: &BenchOptions,
    b: &Binaries,
    out: &Path,
    cases: Option<&[PerfCase]>,
    sweeps: &[Sweep],
) -> Result<String> {
    let q = |p: &Path| util::shell_quote_os(p.as_os_str());
    let mut s = String::new();
    writeln!(s, "# Generated by `cargo xtask bench`.")?;
    writeln!(s, "OUT={}", q(out)?)?;
    writeln!(s, "cd {}", q(&workspace_root())?)?;
    writeln!(s, "uname -r >\"$OUT/uname\"")?;
    writeln!(s, "valgrind --version >\"$OUT/valgrind-version\" 2>&1")?;
    writeln!(
        s,
        "listening() {{ awk -v p=\":$(printf %04X \"$1\")\" '$2 ~ p\"$\" && $4 == \"0A\" {{ f = 1 }} END {{ exit !f }}' /proc/net/tcp /proc/net/tcp6 2>/dev/null; }}"
    )?;
    writeln!(
        s,
        "wait_listen() {{ i=0; while ! listening \"$1\"; do i=$((i + 1)); [ $i -gt 400 ] && return 1; sleep 0.05; done; }}"
    )?;
    let ourlib_env = format!("env LD_LIBRARY_PATH={} ", q(&b.ourlib)?);
    for p in PROBES {
        for (tag, env, bin) in [
            (Tool::Rverbs.tag(), "", &b.probe_rs),
            (Tool::RdmaCore.tag(), "", &b.probe_c),
            // The same C probe on our libibverbs.so.1.
            (OURLIB, ourlib_env.as_str(), &b.probe_c),
        ] {
            let name = probe_file("", tag, p.mode);
            writeln!(s, "echo \"bench: callgrind {tag} {}\"", p.mode)?;
            writeln!(
                s,
                "timeout {PROBE_LIMIT_SECS} {env}valgrind --tool=callgrind --collect-atstart=no \
                 '--toggle-collect=*measured_*' --callgrind-out-file=\"$OUT/{name}.out\" \
                 {} {} {} {DEVICE} {GID_INDEX} >\"$OUT/{name}.log\" 2>&1; echo $? >\"$OUT/{name}.status\"",
                q(bin)?,
                p.mode,
                opts.probe_iters
            )?;
        }
    }
    regbench::payload(&mut s, &q(&b.regmr_rs)?, &q(&b.regmr_c)?, DEVICE)?;
    scalebench::payload(&mut s, &q(&b.scale_rs)?, &q(&b.scale_c)?, DEVICE)?;
    let Some(cases) = cases else {
        return Ok(s);
    };
    let mut port = FIRST_PORT;
    for r in 0..opts.repeats {
        for (i, c) in cases.iter().enumerate() {
            // Alternate which tool goes first, so a drift in the guest's
            // speed during the run does not favour one side.
            let order = if (r as usize + i) % 2 == 0 {
                [Tool::Rverbs, Tool::RdmaCore]
            } else {
                [Tool::RdmaCore, Tool::Rverbs]
            };
            for tool in order {
                port += 1;
                let name = perf_name(i, tool, r);
                let mut argv: Vec<String> = match tool {
                    // A server that does not run (write bw, read lat)
                    // waits --timeout for the client's whole run: as long
                    // as the process may take.
                    Tool::Rverbs => vec![
                        q(&b.rverbs)?,
                        "perf".into(),
                        c.verb.into(),
                        c.kind.name().into(),
                        "--json".into(),
                        "--timeout".into(),
                        PERF_LIMIT_SECS.to_string(),
                    ],
                    Tool::RdmaCore => vec![c.perftest()],
                };
                argv.extend(c.common_args(port).iter().map(|a| shell_quote(a)));
                let cmd = argv.join(" ");
                writeln!(
                    s,
                    "echo \"bench: {} {} {} {} B, repeat {}\"",
                    tool.tag(),
                    c.verb,
                    c.kind.name(),
                    c.size,
                    r + 1
                )?;
                server_client(&mut s, &name, &cmd, port, PERF_LIMIT_SECS)?;
            }
            if c.ourlib {
                // perftest again, both sides on our libibverbs.so.1.
                port += 1;
                let mut argv = vec![ourlib_env.trim_end().to_string(), c.perftest()];
                argv.extend(c.common_args(port).iter().map(|a| shell_quote(a)));
                writeln!(
                    s,
                    "echo \"bench: perftest on {OURLIB} {} {} {} B, repeat {}\"",
                    c.verb,
                    c.kind.name(),
                    c.size,
                    r + 1
                )?;
                server_client(
                    &mut s,
                    &ourlib_perf_name(i, r),
                    &argv.join(" "),
                    port,
                    PERF_LIMIT_SECS,
                )?;
            }
        }
    }
    streambench::payload(&mut s, &q(&b.rverbs)?, opts.repeats)?;
    sweepbench::payload(&mut s, &q(&b.rverbs)?, sweeps)?;
    Ok(s)
}

/// Runs both probes of every mode under callgrind on the host, against
/// the emulated ConnectX-5 (`tests/mlx5-emu`, preloaded), and reads the
/// counts. The results go to the run folder as `mlx5-cg-*`.
fn mlx5_probes(
    opts: &BenchOptions,
    b: &Binaries,
    target: &Path,
    out: &Path,
) -> Result<Vec<ProbeResult<'static>>> {
    say!("building the mlx5 emulator for the mlx5 probes");
    util::run(
        Command::new(cargo_bin())
            .args(["build", "-p", crate::mlx5::EMU_PACKAGE])
            .current_dir(workspace_root()),
    )?;
    let lib = target.join("debug").join("libmlx5_emu.so");
    if !lib.is_file() {
        bail!("{} was not built", lib.display());
    }
    let sysfs = target.join("bench").join("mlx5-sysfs");
    let _ = std::fs::remove_dir_all(&sysfs);
    for p in PROBES {
        for (tag, ourlib, bin, extra) in [
            (Tool::Rverbs.tag(), false, &b.probe_rs, None),
            (Tool::RdmaCore.tag(), false, &b.probe_c, None),
            (OURLIB, true, &b.probe_c, None),
            (FLOOR, false, &b.floor_c, None),
            // libmlx5 through libibverbs' extended API (ibv_wr_*,
            // ibv_start_poll): the C probe's `ex` argument.
            (RDMA_CORE_EX, false, &b.probe_c, Some("ex")),
        ] {
            let name = probe_file("mlx5-", tag, p.mode);
            say!("mlx5: callgrind {tag} {}", p.mode);
            let log = std::fs::File::create(out.join(format!("{name}.log")))?;
            let mut cmd = Command::new("timeout");
            if ourlib {
                cmd.env("LD_LIBRARY_PATH", &b.ourlib);
            }
            let status = cmd
                .arg(PROBE_LIMIT_SECS.to_string())
                .args(["valgrind", "--tool=callgrind", "--collect-atstart=no"])
                .arg("--toggle-collect=*measured_*")
                .arg(format!(
                    "--callgrind-out-file={}",
                    out.join(format!("{name}.out")).display()
                ))
                .arg(bin)
                .arg(p.mode)
                .arg(opts.probe_iters.to_string())
                .args([MLX5_DEVICE, MLX5_GID_INDEX])
                .args(extra)
                .env("LD_PRELOAD", &lib)
                .env("MLX5_EMU_SYSFS", &sysfs)
                .env("SYSFS_PATH", &sysfs)
                .env_remove("MLX5_EMU_LOG")
                .stdin(std::process::Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .status()
                .context("running valgrind")?;
            let code = status
                .code()
                .map_or("signal".to_string(), |c| c.to_string());
            std::fs::write(out.join(format!("{name}.status")), format!("{code}\n"))?;
        }
    }
    Ok(read_probes(out, "mlx5-", opts.probe_iters))
}

/// Every probe's counts of one family (`""` for rxe in the guest,
/// `"mlx5-"` on the host) from the run folder `out`.
fn read_probes(out: &Path, family: &str, iters: u32) -> Vec<ProbeResult<'static>> {
    PROBES
        .iter()
        .map(|p| {
            (
                p,
                read_probe(out, family, Tool::Rverbs.tag(), p, iters),
                read_probe(out, family, Tool::RdmaCore.tag(), p, iters),
            )
        })
        .collect()
}

/// The C probe's counts of one family on our libibverbs.so.1 and on
/// rdma-core's, as (probe, ours, rdma-core's); None when the run made no
/// such probe (a run from before these rows, read with --report-from).
fn read_cabi(out: &Path, family: &str, iters: u32) -> Option<Vec<ProbeResult<'static>>> {
    let first = probe_file(family, OURLIB, PROBES[0].mode);
    if !out.join(format!("{first}.status")).exists() {
        return None;
    }
    let rows = PROBES
        .iter()
        .map(|p| {
            (
                p,
                read_probe(out, family, OURLIB, p, iters),
                read_probe(out, family, Tool::RdmaCore.tag(), p, iters),
            )
        })
        .collect();
    Some(rows)
}

/// The tag of the hand-written mlx5 floor's runs (`tools/bench/floor_mlx5.c`).
const FLOOR: &str = "floor";

/// The tag of the C probe's runs through libibverbs' extended API on
/// libmlx5 (`ibv_wr_*`, `ibv_start_poll`).
const RDMA_CORE_EX: &str = "rdma-core-ex";

/// One probe mode against the floor: the floor's count, then rverbs',
/// rdma-core's (libmlx5 through `ibv_post_send`, then through the
/// extended API) and our libibverbs'.
type FloorRow = (&'static Probe, [Result<f64>; 5]);

/// Every mlx5 probe's counts against the floor; None when the run made no
/// floor probe (a run from before it, read with --report-from).
fn read_floor(out: &Path, iters: u32) -> Option<Vec<FloorRow>> {
    let first = probe_file("mlx5-", FLOOR, PROBES[0].mode);
    if !out.join(format!("{first}.status")).exists() {
        return None;
    }
    Some(
        PROBES
            .iter()
            .map(|p| {
                let read = |tag| read_probe(out, "mlx5-", tag, p, iters);
                (
                    p,
                    [
                        read(FLOOR),
                        read(Tool::Rverbs.tag()),
                        read(Tool::RdmaCore.tag()),
                        read(RDMA_CORE_EX),
                        read(OURLIB),
                    ],
                )
            })
            .collect(),
    )
}

/// The table of the mlx5 probes against the hand-written floor (issue
/// 28): each side's count and its ratio to the floor. Returns whether
/// every count was read.
fn floor_table(w: &mut impl FnMut(&str), rows: &[FloorRow]) -> bool {
    w(
        "`tools/bench/floor_mlx5.c` sets up the same QP pair through libibverbs, then \
       takes the raw queues with `mlx5dv_init_obj` and drives them as a hand-tuned C \
       program does: control, remote-address and data segments written by hand, the \
       doorbell record and the 64-byte BlueFlame copy (the register alone after a \
       chain), a CQE poll that checks the owner bit, opcode and QP number and nothing \
       else; its batch32 is its write32 (it has one way to post many). It checks that \
       the data arrived, as the others do. libmlx5 runs the C probe twice: through \
       `ibv_post_send`/`ibv_poll_cq` and through the extended API (`ibv_wr_start`, \
       `ibv_wr_send` or `ibv_wr_rdma_write`, `ibv_wr_set_sge`, `ibv_wr_complete`; \
       `ibv_start_poll`/`ibv_end_poll`; receives are posted with `ibv_post_recv` \
       either way). Ratios: each side over the floor.",
    );
    w("");
    w("| Measured step | floor | rverbs | rverbs / floor | libmlx5 (`ibv_post_send`) | / floor | libmlx5 (`ibv_wr_*`) | / floor | our libibverbs / floor |");
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut ok = true;
    for (p, [floor, ours, theirs, theirs_ex, ourlib]) in rows {
        let cell = |r: &Result<f64>| match r {
            Ok(v) if p.wrs > 1 => format!("{:.1} per WR", v / f64::from(p.wrs)),
            Ok(v) => format!("{v:.1}"),
            Err(_) => "failed".into(),
        };
        let ratio = |r: &Result<f64>| match (r, floor) {
            (Ok(v), Ok(f)) if *f > 0.0 => format!("{:.2}x", v / f),
            _ => "-".into(),
        };
        ok &= [floor, ours, theirs, theirs_ex, ourlib]
            .iter()
            .all(|r| r.is_ok());
        w(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            p.short,
            cell(floor),
            cell(ours),
            ratio(ours),
            cell(theirs),
            ratio(theirs),
            cell(theirs_ex),
            ratio(theirs_ex),
            ratio(ourlib)
        ));
    }
    for (p, r) in rows {
        for (side, r) in [
            FLOOR,
            Tool::Rverbs.tag(),
            Tool::RdmaCore.tag(),
            RDMA_CORE_EX,
            OURLIB,
        ]
        .iter()
        .zip(r)
        {
            if let Err(e) = r {
                w("");
                w(&format!("- {side} probe `{}`: {e:#}", p.mode));
            }
        }
    }
    ok
}

/// The C probe on our libibverbs.so.1 against rdma-core's, per provider.
struct CAbi {
    rxe: Option<Vec<ProbeResult<'static>>>,
    mlx5: Option<Vec<ProbeResult<'static>>>,
}

/// The target of the C ABI's rows (issue 27): post + poll through our
/// libibverbs.so.1 costs no more instructions than through rdma-core's.
const CABI_TARGET: Target = Target::Ratio(1.0);

/// The C probe's modes the C ABI's table shows: not `batch32`, which the
/// C probe runs as the same chain as `write32` (C has no batch call).
fn cabi_row(p: &Probe) -> bool {
    p.mode != "batch32"
}

/// The C ABI's table of one provider; whether every row met the target.
fn cabi_table(w: &mut impl FnMut(&str), rows: &[ProbeResult<'_>]) -> bool {
    let rows: Vec<&ProbeResult<'_>> = rows.iter().filter(|r| cabi_row(r.0)).collect();
    probe_table(w, &rows, ["our libibverbs", "ours", OURLIB], |_| {
        CABI_TARGET
    })
}

/// One probe mode's counts: ours and rdma-core's, per iteration.
type ProbeResult<'a> = (&'a Probe, Result<f64>, Result<f64>);

fn read_probe(out: &Path, family: &str, tag: &str, p: &Probe, iters: u32) -> Result<f64> {
    let name = probe_file(family, tag, p.mode);
    let status = std::fs::read_to_string(out.join(format!("{name}.status"))).unwrap_or_default();
    let log = std::fs::read_to_string(out.join(format!("{name}.log"))).unwrap_or_default();
    if status.trim() != "0" {
        bail!(
            "the {tag} probe `{}` failed (status {:?}): {}",
            p.mode,
            status.trim(),
            log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        );
    }
    if !log.contains("verified=") {
        bail!("the {tag} probe `{}` did not verify its data", p.mode);
    }
    let data = std::fs::read_to_string(out.join(format!("{name}.out")))
        .with_context(|| format!("no callgrind output for {name}"))?;
    let total =
        callgrind_total(&data).with_context(|| format!("no instruction total in {name}.out"))?;
    if total == 0 {
        bail!("{name}: callgrind counted nothing (were the *measured_* functions inlined away?)");
    }
    Ok(total as f64 / iters as f64)
}

/// Reads the client's figures of run `repeat` of case number `index`.
fn read_perf(out: &Path, index: usize, case: &PerfCase, tool: Tool, repeat: u32) -> Result<Sample> {
    let client = client_output(out, &perf_name(index, tool, repeat))?;
    let s = match tool {
        Tool::Rverbs => parse_rverbs(&client, case.kind),
        Tool::RdmaCore => parse_perftest(&client, case.kind),
    }?;
    measured(s)
}

/// Reads the client's figures of perftest's run `repeat` of case number
/// `index` on our libibverbs.so.1.
fn read_ourlib_perf(out: &Path, index: usize, case: &PerfCase, repeat: u32) -> Result<Sample> {
    let client = client_output(out, &ourlib_perf_name(index, repeat))?;
    measured(parse_perftest(&client, case.kind)?)
}

/// Minimum, median and maximum of `v` (which must not be empty).
fn min_med_max(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    let med = if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    };
    (s[0], med, s[n - 1])
}

fn fmt_size(n: u64) -> String {
    if n >= 1024 && n % 1024 == 0 {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} B")
    }
}

/// Per repeat: (ours, theirs), or why the repeat has no figures.
type Repeats = Vec<std::result::Result<(Sample, Sample), String>>;

/// The results of one timed case over all repeats.
struct PerfResult {
    /// `rverbs perf` against perftest.
    repeats: Repeats,
    /// perftest on our libibverbs.so.1 against perftest on rdma-core's,
    /// for the cases that run it.
    ourlib: Option<Repeats>,
}

/// The latency repeats outside the guest's timer-tick regime (see
/// [`TICK_BOUND_USEC`]).
fn untimed(all: &[(Sample, Sample)]) -> Vec<(Sample, Sample)> {
    all.iter()
        .filter(|(o, t)| o.a < TICK_BOUND_USEC && t.a < TICK_BOUND_USEC)
        .copied()
        .collect()
}

/// The cell of a case without a ratio: every repeat failed, or none was
/// usable.
fn no_figures(all_failed: bool) -> &'static str {
    if all_failed {
        "failed"
    } else {
        "no usable repeat"
    }
}

/// Adds each failed repeat of the case `label` to `failures`.
fn failed_repeats(failures: &mut Vec<String>, label: &str, repeats: &Repeats) {
    for (i, e) in repeats.iter().enumerate() {
        if let Err(e) = e {
            failures.push(format!("{label}, repeat {}: {e}", i + 1));
        }
    }
}

/// The repeats that have figures on both sides.
fn pairs(repeats: &Repeats) -> Vec<(Sample, Sample)> {
    repeats
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .copied()
        .collect()
}

impl PerfResult {
    fn pairs(&self) -> Vec<(Sample, Sample)> {
        pairs(&self.repeats)
    }
}

/// What the report says about the environment.
struct Environment {
    date: String,
    kernel: String,
    valgrind: String,
    rdma_core: String,
    perftest: String,
}

fn package_version(pkg: &str) -> String {
    util::output(Command::new("dpkg-query").args(["-W", "-f=${Version}", pkg]))
        .map(|v| v.trim().to_string())
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

fn environment(out: &Path) -> Environment {
    let read = |f: &str| {
        std::fs::read_to_string(out.join(f))
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".into())
    };
    let date = util::output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]))
        .map(|d| d.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    Environment {
        date,
        kernel: read("uname"),
        valgrind: read("valgrind-version"),
        rdma_core: package_version("libibverbs1"),
        perftest: package_version("perftest"),
    }
}

/// Writes one instruction-count table (and the failures under it), of
/// the rxe probes or (`mlx5`) the emulated mlx5's; returns whether every
/// probe ran and every target was met.
fn insn_table(w: &mut impl FnMut(&str), probes: &[ProbeResult<'_>], mlx5: bool) -> bool {
    let rows: Vec<&ProbeResult<'_>> = probes.iter().collect();
    probe_table(w, &rows, ["rverbs", "rverbs", Tool::Rverbs.tag()], |p| {
        if mlx5 {
            p.mlx5
        } else {
            p.rxe
        }
    })
}

/// An instruction-count table of `rows` (ours, rdma-core's): `ours` names
/// our side (its column's title, its name in the ratio's title, its tag
/// in the failures under the table), `target` each probe's target.
/// Returns whether every probe ran and every target was met.
fn probe_table(
    w: &mut impl FnMut(&str),
    rows: &[&ProbeResult<'_>],
    ours: [&str; 3],
    target: impl Fn(&Probe) -> Target,
) -> bool {
    let [title, short, tag] = ours;
    let mut ok = true;
    w(&format!(
        "| Measured step | {title} | rdma-core | {short} / rdma-core | target |"
    ));
    w("|---|---:|---:|---:|:---:|");
    for &(p, ours, theirs) in rows {
        let cell = |r: &Result<f64>| match r {
            Ok(v) if p.wrs > 1 => format!("{v:.1} ({:.1} per WR)", v / p.wrs as f64),
            Ok(v) => format!("{v:.1}"),
            Err(_) => "failed".into(),
        };
        let (ratio, verdict) = match (ours, theirs) {
            (Ok(o), Ok(t)) => {
                let (what, met) = target(p).judge(*o, *t, p.wrs);
                let verdict = match met {
                    None => what,
                    Some(true) => format!("{what}: met"),
                    Some(false) => {
                        ok = false;
                        format!("{what}: **missed**")
                    }
                };
                (format!("{:.3}", o / t), verdict)
            }
            _ => {
                ok = false;
                ("-".into(), "**failed**".into())
            }
        };
        w(&format!(
            "| {} | {} | {} | {ratio} | {verdict} |",
            p.what,
            cell(ours),
            cell(theirs)
        ));
    }
    for &(p, ours, theirs) in rows {
        for (side, r) in [(tag, ours), (Tool::RdmaCore.tag(), theirs)] {
            if let Err(e) = r {
                w("");
                w(&format!("- {side} probe `{}`: {e:#}", p.mode));
            }
        }
    }
    ok
}

/// The control-path results of the guest: registration costs and the
/// scale probe.
struct ControlRows {
    reg: regbench::Rows,
    scale: scalebench::Rows,
    /// The byte streams (with the perf runs only).
    stream: Option<streambench::Rows>,
}

/// Where the charts go, relative to the report: in a run
/// `target/bench/docs/bench/`, in the repository `docs/bench/` next to
/// BENCHMARKS.md, so the report's links work in both.
const CHARTS_DIR: &str = "docs/bench";

/// A chart of the run: the report's image line, or why it was not drawn.
type Chart = std::result::Result<String, String>;

/// One sweep's figures, both tools.
struct SweepResult {
    sweep: Sweep,
    ours: Result<Sweep1>,
    theirs: Result<Sweep1>,
}

/// The run's charts.
struct Charts {
    /// Instructions per operation, every probe on both providers.
    insns: Chart,
    /// The control path: instructions, then time, per object over N.
    scale: [Chart; 2],
    /// One per sweep, in the sweeps' order.
    sweeps: Vec<Chart>,
}

/// Draws one chart into `dir`/[`CHARTS_DIR`]/`stem`.svg with `f`.
fn draw(dir: &Path, stem: &str, title: &str, f: impl FnOnce(&Path) -> Result<()>) -> Chart {
    let path = dir.join(CHARTS_DIR).join(format!("{stem}.svg"));
    match f(&path) {
        Ok(()) => Ok(format!("![{title}]({CHARTS_DIR}/{stem}.svg)")),
        Err(e) => Err(format!("chart \"{title}\" not drawn: {e:#}")),
    }
}

/// The instruction chart's rows: per operation (per WR for the chains),
/// both sides, and the target where the probe has one.
fn insn_bars(family: &str, probes: &[ProbeResult<'_>], mlx5: bool) -> Vec<Bar> {
    probes
        .iter()
        .map(|(p, ours, theirs)| {
            let per = f64::from(p.wrs.max(1));
            let theirs = theirs.as_ref().ok().map(|v| v / per);
            let target = match if mlx5 { p.mlx5 } else { p.rxe } {
                Target::Info => None,
                Target::Ratio(t) => theirs.map(|v| v * t),
                Target::PerWr(t) => Some(t),
            };
            Bar {
                label: format!("{family} {}", p.short),
                ours: ours.as_ref().ok().map(|v| v / per),
                theirs,
                target,
            }
        })
        .collect()
}

/// Draws every chart of the run into `dir` (the report's folder), after
/// removing the charts of an earlier run.
fn draw_charts(
    dir: &Path,
    probes: &[ProbeResult<'_>],
    mlx5: &Result<Vec<ProbeResult<'_>>>,
    control: &ControlRows,
    sweeps: &[SweepResult],
) -> Result<Charts> {
    let charts_dir = dir.join(CHARTS_DIR);
    if charts_dir.exists() {
        std::fs::remove_dir_all(&charts_dir)
            .with_context(|| format!("removing {}", charts_dir.display()))?;
    }
    std::fs::create_dir_all(&charts_dir)
        .with_context(|| format!("creating {}", charts_dir.display()))?;
    let mut rows = insn_bars("rxe", probes, false);
    if let Ok(m) = mlx5 {
        rows.extend(insn_bars("mlx5", m, true));
    }
    let insns = draw(
        dir,
        "instructions",
        "User-space instructions per operation (callgrind)",
        |p| {
            charts::bars(
                p,
                "User-space instructions per operation (callgrind)",
                "instructions per operation (post + poll)",
                ["rverbs", "rdma-core (librxe, libmlx5)"],
                &rows,
            )
        },
    );
    let scale_lines = |f: fn(&scalebench::Side) -> f64| -> Vec<Line> {
        let mut v = Vec::new();
        for (case, mark) in scalebench::CASES.iter().zip([Mark::Circle, Mark::Triangle]) {
            for (k, (tool, color)) in [("rverbs", OURS), ("rdma-core", THEIRS)]
                .into_iter()
                .enumerate()
            {
                let points = control
                    .scale
                    .iter()
                    .filter(|(label, _, _)| *label == case.1)
                    .filter_map(|(_, n, r)| {
                        let (a, b) = r.as_ref().ok()?;
                        Some((u64::from(*n), f(if k == 0 { a } else { b })))
                    })
                    .collect();
                v.push(Line {
                    label: format!("{}, {tool}", case.1),
                    points,
                    color,
                    mark,
                });
            }
        }
        v
    };
    let scale = [
        (
            "scale-instructions",
            "Control path: instructions per object (callgrind)",
            "instructions per object",
            scale_lines(|s| s.insns),
        ),
        (
            "scale-time",
            "Control path: time per object (rxe under TCG)",
            "usec per object",
            scale_lines(|s| s.us),
        ),
    ]
    .map(|(stem, title, y, lines)| {
        draw(dir, stem, title, |p| {
            let axes = Axes {
                title,
                x: "objects (N)",
                y,
                x_bytes: false,
                y_log: true,
            };
            charts::lines(p, &axes, &lines)
        })
    });
    let sweeps = sweeps
        .iter()
        .map(|r| {
            let (what, y) = match r.sweep.kind {
                Kind::Bw => ("bandwidth", "MB/s (average)"),
                Kind::Lat => ("latency", "typical latency (usec)"),
            };
            let title = format!(
                "{}: {what} over message size (rxe under TCG)",
                r.sweep.test()
            );
            let line = |label: &str, pts: &Result<Sweep1>, color, mark| Line {
                label: match pts {
                    Ok(_) => label.into(),
                    Err(_) => format!("{label} (failed)"),
                },
                points: pts
                    .as_ref()
                    .map(|v| v.points.iter().map(|(n, s)| (*n, s.a)).collect())
                    .unwrap_or_default(),
                color,
                mark,
            };
            let lines = [
                line("rverbs perf", &r.ours, OURS, Mark::Circle),
                line("perftest", &r.theirs, THEIRS, Mark::Triangle),
            ];
            draw(dir, &r.sweep.stem(), &title, |p| {
                let axes = Axes {
                    title: &title,
                    x: "message size (bytes)",
                    y,
                    x_bytes: true,
                    y_log: true,
                };
                charts::lines(p, &axes, &lines)
            })
        })
        .collect();
    Ok(Charts {
        insns,
        scale,
        sweeps,
    })
}

/// Writes a chart's image line, or its failure (and clears `ok`).
fn chart_line(w: &mut impl FnMut(&str), chart: &Chart, ok: &mut bool) {
    match chart {
        Ok(line) => w(line),
        Err(e) => {
            *ok = false;
            w(&format!("({e})"));
        }
    }
}

/// A titled bullet list, preceded by an empty line; nothing if `items` is
/// empty.
fn bullets(w: &mut impl FnMut(&str), title: &str, items: &[String]) {
    if items.is_empty() {
        return;
    }
    w("");
    w(title);
    w("");
    for i in items {
        w(&format!("- {i}"));
    }
}

/// The sweeps' section: a summary row per sweep and its chart.
fn sweep_section(
    w: &mut impl FnMut(&str),
    sweeps: &[SweepResult],
    charts: &[Chart],
    ok: &mut bool,
) {
    w("### Over message sizes (`-a` sweeps)");
    w("");
    w(&format!(
        "`rverbs perf ... -a` and perftest's `ib_* -a`: every power of two from 2 B to \
         {} MiB, one run per tool (alternating which goes first), the same options on both \
         sides (bandwidth: `-t 64 -Q 16`). Timings are TCG's: compare the two lines, not the \
         absolute figures. The ratio columns are over the sizes both tools measured (bandwidth: \
         ours / perftest's, > 1 faster; latency: typical, ours / perftest's, < 1 faster).",
        sweepbench::MAX_SIZE >> 20
    ));
    w("");
    w("| Test | Iterations per size | Sizes | ratio min / median / max over sizes | at 2 B | at 4 KiB | at 8 MiB |");
    w("|---|---:|---:|---|---:|---:|---:|");
    let mut failures = Vec::new();
    let mut unmeasured = Vec::new();
    for r in sweeps {
        let test = r.sweep.test();
        match (&r.ours, &r.theirs) {
            (Ok(o), Ok(t)) => {
                for (tool, side) in [("rverbs perf", o), ("perftest", t)] {
                    if !side.unmeasured.is_empty() {
                        unmeasured.push(format!(
                            "{test}: {tool} printed no measurement at {}",
                            side.unmeasured
                                .iter()
                                .map(|&n| fmt_size(n))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                }
                let (o, t) = (&o.points, &t.points);
                let ratios: Vec<(u64, f64)> = o
                    .iter()
                    .filter_map(|(n, a)| {
                        let (_, b) = t.iter().find(|(m, _)| m == n)?;
                        Some((*n, a.a / b.a))
                    })
                    .collect();
                if ratios.is_empty() {
                    *ok = false;
                    w(&format!(
                        "| {test} | {} | 0 | no size in common | - | - | - |",
                        r.sweep.iters
                    ));
                    continue;
                }
                let v: Vec<f64> = ratios.iter().map(|r| r.1).collect();
                let (a, b, c) = min_med_max(&v);
                let at = |n: u64| {
                    ratios
                        .iter()
                        .find(|r| r.0 == n)
                        .map_or("-".to_string(), |r| format!("{:.2}", r.1))
                };
                w(&format!(
                    "| {test} | {} | {} | {a:.2} / **{b:.2}** / {c:.2} | {} | {} | {} |",
                    r.sweep.iters,
                    ratios.len(),
                    at(2),
                    at(4096),
                    at(sweepbench::MAX_SIZE)
                ));
            }
            (o, t) => {
                *ok = false;
                w(&format!(
                    "| {test} | {} | - | failed | - | - | - |",
                    r.sweep.iters
                ));
                for (tool, e) in [("rverbs", o), ("perftest", t)] {
                    if let Err(e) = e {
                        failures.push(format!("{test}, {tool}: {e:#}"));
                    }
                }
            }
        }
    }
    bullets(
        w,
        "Sizes left out (a row of 0.00 or inf: the tool measured nothing there, which TCG's clock now and then causes; the other sizes stand):",
        &unmeasured,
    );
    bullets(w, "Failed sweeps:", &failures);
    for c in charts {
        w("");
        chart_line(w, c, ok);
    }
}

/// The markdown report. Returns it and whether every target was met and
/// every run succeeded.
#[allow(clippy::too_many_arguments)]
fn report(
    opts: &BenchOptions,
    env: &Environment,
    probes: &[ProbeResult<'_>],
    control: &ControlRows,
    mlx5: &Result<Vec<ProbeResult<'_>>>,
    efa: &Result<Vec<EfaResult>>,
    floor: Option<&[FloorRow]>,
    cabi: &CAbi,
    perf: Option<&[(PerfCase, PerfResult)]>,
    perf_note: &str,
    sweeps: &[SweepResult],
    charts: &Charts,
) -> (String, bool) {
    let mut ok = true;
    let mut md = String::new();
    let mut w = |line: &str| {
        md.push_str(line);
        md.push('\n');
    };
    w("## rverbs next to rdma-core");
    w("");
    w(&format!(
        "Produced by `{}` on {}: one boot of Debian's kernel `{}` under QEMU \
         (TCG, 2 vCPUs), soft-RoCE `{DEVICE}` on a veth pair, GID index {GID_INDEX}. \
         rdma-core {} (libibverbs + librxe from Debian), perftest {}, {}.",
        opts.command_line, env.date, env.kernel, env.rdma_core, env.perftest, env.valgrind
    ));
    w("");
    w("### User-space instructions per operation (callgrind)");
    w("");
    w(&format!(
        "`verbs/examples/postpoll.rs` and its C twin `tools/bench/postpoll.c` set up the \
         same loopback RC QP pair and repeat one step {} times; callgrind counts only the \
         functions named `*measured_*` (the post and the poll calls and everything they \
         call, in user space; the kernel's share, the same `write()` doorbell on both \
         sides, is not counted). Between the post and the poll both programs block on \
         a completion channel, so each measured poll finds its completion. The counts \
         are deterministic: they do not depend on TCG's speed.",
        opts.probe_iters
    ));
    w("");
    if !insn_table(&mut w, probes, false) {
        ok = false;
    }
    w("");
    w("### What registration costs (rxe)");
    w("");
    w(
        "`verbs/examples/regmr.rs` (`Pd::register` of a `PageBuf`, then `Mr::into_inner`) \
         and its C twin `tools/bench/regmr.c` (`ibv_reg_mr`/`ibv_dereg_mr` of an mmap'd \
         buffer) map the same untouched anonymous buffer, register it once unmeasured \
         (reading VmPin before, while held and after), then time each of N register + \
         deregister pairs (the median is shown; N is 200, 50, 10 and 3 from the smallest \
         size up). The time is nearly all the kernel's (pinning and mapping every page, \
         the same work on both sides); the instructions are the library's own, counted \
         by callgrind in user space only. On-demand rows need a kernel whose rxe has \
         on-demand paging (7.x here); elsewhere both sides are refused.",
    );
    w("");
    if !regbench::table(&mut w, &control.reg) {
        ok = false;
    }
    w("");
    w("### The control path at scale (rxe)");
    w("");
    w(
        "`verbs/examples/scale.rs` and its C twin `tools/bench/scale.c`: `qp` creates N CQs \
         and N RC QPs, asks each QP's endpoint (port and GID), connects them in pairs \
         through RTS and destroys everything; `mr` registers N 4 KiB buffers and \
         deregisters them. One unmeasured round first; then one round under callgrind \
         (the library's own instructions, `*measured_*` only) and three timed rounds \
         (median), per object. Target: at or below rdma-core's instructions at every N.",
    );
    w("");
    if !scalebench::table(&mut w, &control.scale) {
        ok = false;
    }
    for c in &charts.scale {
        w("");
        chart_line(&mut w, c, &mut ok);
    }
    w("");
    w("### The same on the emulated ConnectX-5 (mlx5, callgrind)");
    w("");
    match mlx5 {
        Ok(mlx5_probes) => {
            w(&format!(
                "The same two probes, built the same way, run on the host against the \
                 emulated ConnectX-5 of `tests/mlx5-emu` (an `LD_PRELOAD` library playing \
                 the mlx5 kernel driver and the HCA): ours through `provider-mlx5`, the C \
                 twin through rdma-core's libibverbs + libmlx5, device `{MLX5_DEVICE}`, \
                 GID index {MLX5_GID_INDEX}. On mlx5 neither side enters the kernel to post \
                 or poll (doorbell records, UAR and BlueFlame writes, CQEs in user memory), \
                 so these counts are the whole software cost of the data path; the \
                 emulated HCA runs on its own thread, which callgrind does not count. \
                 What the emulation cannot show (MMIO and write-combining costs, PCIe, \
                 the HCA's own speed) is the same for both sides."
            ));
            w("");
            if !insn_table(&mut w, mlx5_probes, true) {
                ok = false;
            }
            if let Some(rows) = floor {
                w("");
                w("Against a hand-written floor (issue 28):");
                w("");
                ok &= floor_table(&mut w, rows);
            }
        }
        Err(e) => {
            ok = false;
            w(&format!("Failed: {e:#}"));
        }
    }
    w("");
    w(
        "Both providers' counts per operation (per work request for the chains and the \
       batch), the target marked where a probe has one:",
    );
    w("");
    chart_line(&mut w, &charts.insns, &mut ok);
    w("");
    w("### On the emulated EFA device (callgrind)");
    w("");
    w(
        "`verbs/examples/efa_postpoll.rs` (ours, through `provider-efa`) and its twin \
         `tools/bench/efa_postpoll.c` (rdma-core's libibverbs + libefa), two SRD QPs of \
         one context on the emulated EFA device of `tests/efa-emu` (an `LD_PRELOAD` \
         library playing the EFA kernel driver and the device), each round's payload \
         checked. Only the post and the poll are counted; the target is libefa's count.",
    );
    w("");
    match efa {
        Ok(rows) => ok &= efabench::table(&mut w, rows),
        Err(e) => {
            ok = false;
            w(&format!("Failed: {e:#}"));
        }
    }
    w("");
    w("### Through the C ABI: the C probe on our libibverbs (callgrind)");
    w("");
    w(
        "The same C probe, `tools/bench/postpoll.c`, unchanged, run a second time with our \
         libibverbs (`verbs/ibverbs`, release) first on `LD_LIBRARY_PATH`: \
         `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` then reach rverbs' providers \
         through libibverbs' C structs. Counted as above; target: no more instructions \
         than the same program on rdma-core's libibverbs and provider.",
    );
    for (label, rows) in [
        ("rxe, in the guest:", &cabi.rxe),
        ("mlx5, the emulated ConnectX-5 on the host:", &cabi.mlx5),
    ] {
        w("");
        w(label);
        w("");
        match rows {
            Some(r) => {
                if !cabi_table(&mut w, r) {
                    ok = false;
                }
            }
            None => w("Not measured in this run."),
        }
    }
    w("");
    w("### Bandwidth, message rate and latency (`rverbs perf` vs perftest)");
    w("");
    let Some(perf) = perf else {
        w(perf_note);
        return (md, ok);
    };
    w(&format!(
        "Server and client on `{DEVICE}` in the same guest (TCP exchange over 127.0.0.1), \
         {} repeats per case, alternating which tool runs first; figures are the client's. \
         Both tools get the same options (`-d {DEVICE} -x {GID_INDEX} -s SIZE -n ITERS -F`, \
         and for bandwidth `-t 128 -Q 100`, `-Q 1` above 8 KiB as perftest itself \
         does); inline data is 0 on both sides (perftest turns inline off on rxe). \
         **Timings under TCG are emulated: only the ratios measured within one run mean \
         anything, never the absolute figures.** A ratio is taken per repeat (our run \
         over the rdma-core run of the same repeat); min / median / max are over \
         repeats.",
        opts.repeats
    ));
    w("");
    w("Bandwidth and message rate (ratio > 1: rverbs faster):");
    w("");
    w("| Test | Size | Iterations | rverbs MB/s | perftest MB/s | BW ratio min / median / max | Msg-rate ratio min / median / max |");
    w("|---|---:|---:|---:|---:|---|---|");
    let triple = |v: &[f64]| {
        let (a, b, c) = min_med_max(v);
        format!("{a:.2} / **{b:.2}** / {c:.2}")
    };
    let mut failures = Vec::new();
    for (c, r) in perf.iter().filter(|(c, _)| c.kind == Kind::Bw) {
        let pairs = r.pairs();
        let test = format!("{} bw", c.verb);
        if pairs.is_empty() {
            ok = false;
            w(&format!(
                "| {test} | {} | {} | - | - | failed | failed |",
                fmt_size(c.size),
                c.iters
            ));
        } else {
            let ours: Vec<f64> = pairs.iter().map(|p| p.0.a).collect();
            let theirs: Vec<f64> = pairs.iter().map(|p| p.1.a).collect();
            let bw: Vec<f64> = pairs.iter().map(|p| p.0.a / p.1.a).collect();
            let rate: Vec<f64> = pairs.iter().map(|p| p.0.b / p.1.b).collect();
            w(&format!(
                "| {test} | {} | {} | {} | {} | {} | {} |",
                fmt_size(c.size),
                c.iters,
                fmt_num(min_med_max(&ours).1),
                fmt_num(min_med_max(&theirs).1),
                triple(&bw),
                triple(&rate)
            ));
        }
        failed_repeats(
            &mut failures,
            &format!("{test} {}", fmt_size(c.size)),
            &r.repeats,
        );
    }
    w("");
    w(&format!(
        "Latency, typical (median) one-way time as perftest reports it (ratio < 1: \
         rverbs faster). Repeats in which either tool's typical latency reached \
         {TICK_BOUND_USEC:.0} usec ran in the guest's timer-tick regime (rxe's deferred \
         work waiting for the next 4 ms tick while both vCPUs poll; both tools fall \
         into it together when the shared host is busy) and are left out of the \
         ratios; the last column counts them. Under a busy host a run can also land \
         in a slower regime (about twice the round trip, either tool, at random), \
         which moves the per-repeat ratios; the best-repeat ratio (the fastest \
         typical latency of either tool over the repeats, ours over theirs) \
         compares the two in the undisturbed regime."
    ));
    w("");
    w("| Test | Size | Iterations | rverbs usec | perftest usec | ratio min / median / max | best-repeat ratio | t_avg ratio median | tick-bound repeats |");
    w("|---|---:|---:|---:|---:|---|---:|---:|---:|");
    for (c, r) in perf.iter().filter(|(c, _)| c.kind == Kind::Lat) {
        let all = r.pairs();
        let pairs = untimed(&all);
        let tick_bound = all.len() - pairs.len();
        let test = format!("{} lat", c.verb);
        if pairs.is_empty() {
            // Every repeat failed or was tick-bound: nothing to compare.
            ok &= all.len() == r.repeats.len();
            w(&format!(
                "| {test} | {} | {} | - | - | {} | - | - | {tick_bound} |",
                fmt_size(c.size),
                c.iters,
                no_figures(all.is_empty())
            ));
        } else {
            let ours: Vec<f64> = pairs.iter().map(|p| p.0.a).collect();
            let theirs: Vec<f64> = pairs.iter().map(|p| p.1.a).collect();
            let typ: Vec<f64> = pairs.iter().map(|p| p.0.a / p.1.a).collect();
            let avg: Vec<f64> = pairs.iter().map(|p| p.0.b / p.1.b).collect();
            let best = min_med_max(&ours).0 / min_med_max(&theirs).0;
            w(&format!(
                "| {test} | {} | {} | {} | {} | {} | **{best:.2}** | {:.2} | {tick_bound} |",
                fmt_size(c.size),
                c.iters,
                fmt_num(min_med_max(&ours).1),
                fmt_num(min_med_max(&theirs).1),
                triple(&typ),
                min_med_max(&avg).1
            ));
        }
        failed_repeats(
            &mut failures,
            &format!("{test} {}", fmt_size(c.size)),
            &r.repeats,
        );
    }
    w("");
    ourlib_perf_table(&mut w, perf, &mut failures, &mut ok);
    ok &= failures.is_empty();
    bullets(&mut w, "Failed runs:", &failures);
    if let Some(rows) = &control.stream {
        w("");
        w("### Byte streams: rverbs_cm::stream vs rsockets vs TCP (rxe)");
        w("");
        w(&format!(
            "The same rstream test over three stacks in one guest, both ends on rxe0's \
             address: ours (`rverbs rstream`, `rverbs_cm::stream`), librdmacm's rsockets \
             (Debian's `rstream`) and the kernel's TCP on the same veth (`rstream -T s`); \
             rstream's default non-blocking mode (each side spins on its calls), its \
             default 512 KiB socket buffers and 64-byte inline size. Medians of {} \
             repeats, the stacks' order rotated per repeat. Latency is µs per transfer \
             of a ping-pong, bandwidth the Gb/s of `-C` transfers each way; a ratio \
             above 1 means ours is better. **Under TCG only the ratios mean anything.**",
            opts.repeats
        ));
        w("");
        if !streambench::table(&mut w, rows) {
            ok = false;
        }
    }
    if !sweeps.is_empty() {
        w("");
        sweep_section(&mut w, sweeps, &charts.sweeps, &mut ok);
    }
    (md, ok)
}

/// The timed rows of the C ABI: perftest on our libibverbs.so.1 (server
/// and client) against perftest on rdma-core's, per repeat of the same
/// case; failed repeats go to `failures`, a case with no figures clears
/// `ok`.
fn ourlib_perf_table(
    w: &mut impl FnMut(&str),
    perf: &[(PerfCase, PerfResult)],
    failures: &mut Vec<String>,
    ok: &mut bool,
) {
    w("### perftest on our libibverbs vs on rdma-core's (the C ABI, timed)");
    w("");
    w(
        "perftest itself on our libibverbs (`LD_LIBRARY_PATH`, server and client) \
       against perftest on rdma-core's, same options, run right after the two runs \
       above in each repeat: what the C ABI costs a real C program. Bandwidth: \
       ratio > 1, ours faster; latency (typical): ratio < 1, ours faster (tick-bound \
       repeats left out as above).",
    );
    w("");
    w("| Test | Size | Iterations | on ours | on rdma-core | ratio min / median / max |");
    w("|---|---:|---:|---:|---:|---|");
    for (c, r) in perf {
        let Some(repeats) = &r.ourlib else { continue };
        let test = format!("ib_{}_{}", c.verb, c.kind.name());
        let all = pairs(repeats);
        let usable: Vec<(Sample, Sample)> = match c.kind {
            Kind::Bw => all.clone(),
            Kind::Lat => untimed(&all),
        };
        let unit = match c.kind {
            Kind::Bw => "MB/s",
            Kind::Lat => "usec",
        };
        if usable.is_empty() {
            *ok &= !all.is_empty();
            w(&format!(
                "| {test} | {} | {} | - | - | {} |",
                fmt_size(c.size),
                c.iters,
                no_figures(all.is_empty())
            ));
        } else {
            let ours: Vec<f64> = usable.iter().map(|p| p.0.a).collect();
            let theirs: Vec<f64> = usable.iter().map(|p| p.1.a).collect();
            let ratio: Vec<f64> = usable.iter().map(|p| p.0.a / p.1.a).collect();
            let (lo, med, hi) = min_med_max(&ratio);
            w(&format!(
                "| {test} | {} | {} | {} {unit} | {} {unit} | {lo:.2} / **{med:.2}** / {hi:.2} |",
                fmt_size(c.size),
                c.iters,
                fmt_num(min_med_max(&ours).1),
                fmt_num(min_med_max(&theirs).1),
            ));
        }
        failed_repeats(
            failures,
            &format!("{test} {} ({OURLIB})", fmt_size(c.size)),
            repeats,
        );
    }
}

/// `cargo xtask bench`. Returns whether every probe and run succeeded and
/// the instruction target was met.
pub fn bench_command(opts: &BenchOptions) -> Result<bool> {
    if opts.repeats == 0 || opts.probe_iters == 0 {
        bail!("--repeats and --probe-iters must be at least 1");
    }
    let started = std::time::Instant::now();
    ensure_tools(!opts.skip_perf)?;
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    if let Some(dir) = &opts.report_from {
        // The report of an earlier run, from its raw results.
        check_run_dir(dir)?;
        let has = |f: &str| dir.join(f).exists();
        let with_perf = has(&format!("{}.status", perf_name(0, Tool::Rverbs, 0)));
        let mlx5 = Ok(read_probes(dir, "mlx5-", opts.probe_iters));
        let efa = Ok(efabench::read(dir, opts.probe_iters));
        let sweeps = if has("sweep-0-rverbs.status") {
            sweepbench::sweeps()
        } else {
            Vec::new()
        };
        say!("the report of the run in {}", dir.display());
        return finish(
            opts,
            &target,
            dir,
            Finished {
                ok: true,
                with_perf,
                perf_note: "Not run.".into(),
                cases: perf_cases(),
                sweeps,
                mlx5,
                efa,
                started,
            },
        );
    }
    let bins = build(&target)?;
    check_linkage(&bins)?;
    let cases = perf_cases();
    let (with_perf, perf_note) = if opts.skip_perf {
        (false, "Skipped (`--skip-perf`).".to_string())
    } else if !rverbs_perf_available(&bins.rverbs) {
        let note = format!(
            "Skipped: this build's `{}` has no `perf` subcommand (`rverbs perf --help` \
             failed), so there is nothing to compare with perftest yet.",
            bins.rverbs.display()
        );
        say!("{note}");
        (false, note)
    } else {
        (true, String::new())
    };
    let run_dir = vm::new_run_dir()?;
    let mlx5 = mlx5_probes(opts, &bins, &target, &run_dir);
    if let Err(e) = &mlx5 {
        say!("the mlx5 probes could not run: {e:#}");
    }
    let efa = efabench::run(&target, &run_dir, &bins.efa_probe_rs, opts.probe_iters);
    if let Err(e) = &efa {
        say!("the EFA probes could not run: {e:#}");
    }
    if opts.mlx5_only {
        let mut md = String::new();
        let mut w = |l: &str| {
            md.push_str(l);
            md.push('\n');
        };
        let mut ok = match &mlx5 {
            Ok(p) => insn_table(&mut w, p, true),
            Err(_) => false,
        };
        if let Some(rows) = read_floor(&run_dir, opts.probe_iters) {
            w("");
            ok &= floor_table(&mut w, &rows);
        }
        w("");
        ok &= match &efa {
            Ok(rows) => efabench::table(&mut w, rows),
            Err(_) => false,
        };
        print_line("");
        for line in md.lines() {
            print_line(line);
        }
        say!("raw results in {}", run_dir.display());
        return Ok(ok);
    }
    let sweeps = if with_perf && !opts.skip_sweeps {
        sweepbench::sweeps()
    } else {
        Vec::new()
    };
    let script = payload(
        opts,
        &bins,
        &run_dir,
        with_perf.then_some(&cases[..]),
        &sweeps,
    )?;
    say!(
        "running {} probes{} in one VM (results in {})",
        PROBES.len() * 2,
        if with_perf {
            format!(
                " and {} perf runs, {} sweeps",
                (cases.len() * 2 + cases.iter().filter(|c| c.ourlib).count())
                    * opts.repeats as usize,
                sweeps.len() * 2
            )
        } else {
            String::new()
        },
        run_dir.display()
    );
    let outcome = vm::run(&opts.vm, &run_dir, &script)?;
    let mut ok = outcome.status == 0;
    if !ok {
        say!("the guest's script exited with status {}", outcome.status);
    }
    if outcome.kernel_problems {
        say!(
            "the guest kernel logged a BUG/WARNING (see dmesg.txt in {})",
            run_dir.display()
        );
        ok = false;
    }
    finish(
        opts,
        &target,
        &run_dir,
        Finished {
            ok,
            with_perf,
            perf_note,
            cases,
            sweeps,
            mlx5,
            efa,
            started,
        },
    )
}

/// Fails unless `dir` is the folder of a bench run (it holds the first
/// probe's status): a missing or pruned folder (the harness keeps the
/// latest runs only) would otherwise give a report of failed probes.
fn check_run_dir(dir: &Path) -> Result<()> {
    let first = format!("{}.status", probe_name("", Tool::Rverbs, PROBES[0].mode));
    if !dir.is_dir() {
        bail!(
            "{}: no such run folder (runs are pruned after a while)",
            dir.display()
        );
    }
    if !dir.join(&first).is_file() {
        bail!("{} holds no bench results (no {first})", dir.display());
    }
    Ok(())
}

/// What a run hands to its report.
struct Finished {
    /// Whether the guest's script and kernel were fine.
    ok: bool,
    with_perf: bool,
    perf_note: String,
    cases: Vec<PerfCase>,
    sweeps: Vec<Sweep>,
    mlx5: Result<Vec<ProbeResult<'static>>>,
    /// The EFA probes (on the host).
    efa: Result<Vec<EfaResult>>,
    started: std::time::Instant,
}

/// Reads every result of the run folder `run_dir`, draws the charts and
/// writes the report (`target/bench/BENCHMARKS.md`). Returns whether
/// every probe and run succeeded and every target was met.
fn finish(opts: &BenchOptions, target: &Path, run_dir: &Path, f: Finished) -> Result<bool> {
    let Finished {
        ok,
        with_perf,
        perf_note,
        cases,
        sweeps,
        mlx5,
        efa,
        started,
    } = f;
    let run_dir = run_dir.to_path_buf();
    let probes = read_probes(&run_dir, "", opts.probe_iters);
    let perf: Option<Vec<(PerfCase, PerfResult)>> = with_perf.then(|| {
        cases
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let theirs = |r| {
                    read_perf(&run_dir, i, &c, Tool::RdmaCore, r)
                        .map_err(|e| format!("perftest: {e:#}"))
                };
                let repeats = (0..opts.repeats)
                    .map(|r| {
                        let ours = read_perf(&run_dir, i, &c, Tool::Rverbs, r)
                            .map_err(|e| format!("rverbs: {e:#}"))?;
                        Ok((ours, theirs(r)?))
                    })
                    .collect();
                let ourlib = c.ourlib.then(|| {
                    (0..opts.repeats)
                        .map(|r| {
                            let ours = read_ourlib_perf(&run_dir, i, &c, r)
                                .map_err(|e| format!("perftest on {OURLIB}: {e:#}"))?;
                            Ok((ours, theirs(r)?))
                        })
                        .collect()
                });
                (c, PerfResult { repeats, ourlib })
            })
            .collect()
    });
    let env = environment(&run_dir);
    let control = ControlRows {
        reg: regbench::read(&run_dir),
        scale: scalebench::read(&run_dir),
        stream: with_perf.then(|| streambench::read(&run_dir, opts.repeats)),
    };
    let sweeps: Vec<SweepResult> = sweeps
        .into_iter()
        .enumerate()
        .map(|(i, sweep)| SweepResult {
            ours: sweepbench::read(&run_dir, i, &sweep, Tool::Rverbs),
            theirs: sweepbench::read(&run_dir, i, &sweep, Tool::RdmaCore),
            sweep,
        })
        .collect();
    let report_dir = target.join("bench");
    let charts = draw_charts(&report_dir, &probes, &mlx5, &control, &sweeps)?;
    let floor = read_floor(&run_dir, opts.probe_iters);
    let cabi = CAbi {
        rxe: read_cabi(&run_dir, "", opts.probe_iters),
        mlx5: read_cabi(&run_dir, "mlx5-", opts.probe_iters),
    };
    let (md, met) = report(
        opts,
        &env,
        &probes,
        &control,
        &mlx5,
        &efa,
        floor.as_deref(),
        &cabi,
        perf.as_deref(),
        &perf_note,
        &sweeps,
        &charts,
    );
    let path = report_dir.join("BENCHMARKS.md");
    util::write_atomic(&path, md.as_bytes())?;
    print_line("");
    for line in md.lines() {
        print_line(line);
    }
    print_line("");
    say!(
        "report written to {} ({} s in all; raw results in {})",
        path.display(),
        started.elapsed().as_secs(),
        run_dir.display()
    );
    Ok(ok && met)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_judge_ratios_and_per_wr_counts() {
        assert_eq!(Target::Info.judge(9.0, 1.0, 1), ("(info)".into(), None));
        assert_eq!(
            Target::Ratio(0.5).judge(250.0, 500.0, 1),
            ("<= 0.5x".into(), Some(true))
        );
        assert_eq!(Target::Ratio(0.5).judge(251.0, 500.0, 1).1, Some(false));
        assert_eq!(
            Target::PerWr(40.0).judge(1280.0, 5000.0, 32),
            ("<= 40 per WR".into(), Some(true))
        );
        assert_eq!(Target::PerWr(40.0).judge(1281.0, 5000.0, 32).1, Some(false));
    }

    #[test]
    fn parses_perftest_tables() {
        let bw = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n \
                  64         2000             1.65               0.80   \t\t   0.013122\n\
                  ---------------------------------------------------------------------------------------\n";
        let s = parse_perftest(bw, Kind::Bw).unwrap();
        assert_eq!((s.a, s.b), (0.80, 0.013122));
        let lat = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n \
                   8       500          63.43          3561.73      66.30    \t       87.92       \t171.93 \t\t598.10  \t\t3561.73\n";
        let s = parse_perftest(lat, Kind::Lat).unwrap();
        assert_eq!((s.a, s.b), (66.30, 87.92));
        assert!(parse_perftest("no table here\n", Kind::Bw).is_err());
        assert!(measured(Sample { a: 0.0, b: 0.0 }).is_err());
        assert!(measured(Sample {
            a: 1.5,
            b: f64::NAN
        })
        .is_err());
        assert!(measured(Sample { a: 1.5, b: 0.2 }).is_ok());
    }

    #[test]
    fn parses_rverbs_json() {
        let doc = r#"{"tool":"rverbs perf","results":[
{"bytes":64,"iterations":5000,"bw_average":0.9,"msg_rate_mpps":0.0147,"bw_unit":"MB/sec"}
]}"#;
        let s = parse_rverbs(doc, Kind::Bw).unwrap();
        assert_eq!((s.a, s.b), (0.9, 0.0147));
        assert!(parse_rverbs(doc, Kind::Lat).is_err());
        assert!(parse_rverbs("oops", Kind::Bw).is_err());
    }

    /// A run's figures as the report sees them: every probe, the scale
    /// rows, two sweeps (one failed on perftest's side).
    fn sample_run() -> (Vec<ProbeResult<'static>>, ControlRows, Vec<SweepResult>) {
        let probes: Vec<ProbeResult<'static>> = PROBES
            .iter()
            .map(|p| {
                (
                    p,
                    Ok(200.0 * f64::from(p.wrs)),
                    Ok(260.0 * f64::from(p.wrs)),
                )
            })
            .collect();
        let side = |insns, us| scalebench::Side { insns, us };
        let scale = scalebench::CASES
            .iter()
            .flat_map(|c| {
                scalebench::COUNTS.iter().map(|&n| {
                    let k = if c.0 == "qp" { 1.0 } else { 0.1 };
                    let r = side(4600.0 * k, 360.0 * k);
                    (c.1, n, Ok((r, side(r.insns * 0.98, r.us * 1.02))))
                })
            })
            .collect();
        let pts = |f: f64| Sweep1 {
            points: (1..=23)
                .map(|i| {
                    let s = Sample {
                        a: f * f64::from(i),
                        b: 1.0,
                    };
                    (1u64 << i, s)
                })
                .collect(),
            unmeasured: vec![],
        };
        let sweeps = vec![
            SweepResult {
                sweep: sweepbench::sweeps().remove(0),
                ours: Ok(pts(1.0)),
                // perftest printed 0.00 at 1 MiB.
                theirs: Ok({
                    let mut t = pts(1.1);
                    t.points.retain(|p| p.0 != 1 << 20);
                    t.unmeasured.push(1 << 20);
                    t
                }),
            },
            SweepResult {
                sweep: sweepbench::sweeps().remove(2),
                ours: Ok(pts(1.0)),
                theirs: Err(anyhow::anyhow!("exit statuses (client, server) \"1 0\"")),
            },
        ];
        let control = ControlRows {
            reg: Vec::new(),
            scale,
            stream: None,
        };
        (probes, control, sweeps)
    }

    #[test]
    fn the_report_links_every_chart_the_run_drew() {
        let dir = std::env::temp_dir().join(format!("bench-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (probes, control, sweeps) = sample_run();
        let mlx5 = Ok(probes
            .iter()
            .map(|(p, a, b)| (*p, Ok(*a.as_ref().unwrap()), Ok(*b.as_ref().unwrap())))
            .collect::<Vec<_>>());
        // A stale chart of an earlier run must not survive.
        std::fs::create_dir_all(dir.join(CHARTS_DIR)).unwrap();
        std::fs::write(dir.join(CHARTS_DIR).join("old.svg"), "<svg/>").unwrap();
        let charts = draw_charts(&dir, &probes, &mlx5, &control, &sweeps).unwrap();
        assert!(!dir.join(CHARTS_DIR).join("old.svg").exists());
        let opts = BenchOptions {
            vm: VmOptions {
                series: "6.1".into(),
                timeout: std::time::Duration::from_secs(1),
            },
            repeats: 1,
            probe_iters: 1,
            skip_perf: false,
            skip_sweeps: false,
            mlx5_only: false,
            report_from: None,
            command_line: "cargo xtask bench".into(),
        };
        let env = Environment {
            date: "d".into(),
            kernel: "k".into(),
            valgrind: "v".into(),
            rdma_core: "r".into(),
            perftest: "p".into(),
        };
        // The C ABI's rows: rxe met (ours 250 against 260 per op), mlx5 missed.
        let cabi = CAbi {
            rxe: Some(
                PROBES
                    .iter()
                    .map(|p| {
                        (
                            p,
                            Ok(250.0 * f64::from(p.wrs)),
                            Ok(260.0 * f64::from(p.wrs)),
                        )
                    })
                    .collect(),
            ),
            mlx5: Some(
                PROBES
                    .iter()
                    .map(|p| {
                        (
                            p,
                            Ok(300.0 * f64::from(p.wrs)),
                            Ok(260.0 * f64::from(p.wrs)),
                        )
                    })
                    .collect(),
            ),
        };
        let floor: Vec<FloorRow> = PROBES
            .iter()
            .map(|p| {
                let n = f64::from(p.wrs);
                (
                    p,
                    [
                        Ok(100.0 * n),
                        Ok(150.0 * n),
                        Ok(300.0 * n),
                        Ok(280.0 * n),
                        Ok(290.0 * n),
                    ],
                )
            })
            .collect();
        let efa: Result<Vec<EfaResult>> =
            Ok(vec![(&efabench::EFA_PROBES[0], Ok(300.0), Ok(337.1))]);
        let (md, ok) = report(
            &opts,
            &env,
            &probes,
            &control,
            &mlx5,
            &efa,
            Some(&floor),
            &cabi,
            Some(&[]),
            "",
            &sweeps,
            &charts,
        );
        // The perftest side of one sweep failed: the run is not ok, and says so.
        assert!(!ok);
        assert!(md.contains("### Through the C ABI"), "{md}");
        let efa_section = md.split("### On the emulated EFA device").nth(1).unwrap();
        assert!(
            efa_section.contains("| 300.0 | 337.1 | 0.890 | <= 1.0x: met |"),
            "{efa_section}"
        );
        // The floor's table: each side over the floor, per WR for chains.
        let floor_section = md.split("Against a hand-written floor").nth(1).unwrap();
        assert!(
            floor_section.contains(
                "| SEND + poll | 100.0 | 150.0 | 1.50x | 300.0 | 3.00x | 280.0 | 2.80x | 2.90x |"
            ),
            "{floor_section}"
        );
        assert!(
            floor_section.contains("| 100.0 per WR | 150.0 per WR | 1.50x |"),
            "{floor_section}"
        );
        assert!(md.contains("| 0.962 | <= 1x: met |"), "{md}");
        assert!(md.contains("| 1.154 | <= 1x: **missed** |"), "{md}");
        // The C probe's batch32 is its write32 chain again: not repeated.
        let cabi_section = md.split("### Through the C ABI").nth(1).unwrap();
        let cabi_section = cabi_section.split("\n### ").next().unwrap();
        assert!(!cabi_section.contains("post_send_batch"), "{cabi_section}");
        assert_eq!(
            cabi_section.matches("| 0.962 |").count(),
            3,
            "{cabi_section}"
        );
        assert!(md.contains("| send lat | 64 | - | failed |"), "{md}");
        assert!(md.contains("send lat, perftest: exit statuses"));
        // Every chart linked exists, and the drawn ones are all linked.
        let links: Vec<&str> = md
            .lines()
            .filter_map(|l| l.strip_prefix("![")?.split("](").nth(1)?.strip_suffix(')'))
            .collect();
        for stem in [
            "instructions",
            "scale-instructions",
            "scale-time",
            "bw-write",
            "lat-send",
        ] {
            let link = format!("{CHARTS_DIR}/{stem}.svg");
            assert!(links.contains(&link.as_str()), "{link} not linked");
            let svg = std::fs::read_to_string(dir.join(&link)).unwrap();
            assert!(svg.starts_with("<svg"));
        }
        assert_eq!(links.len(), 5);
        let lat = std::fs::read_to_string(dir.join(CHARTS_DIR).join("lat-send.svg")).unwrap();
        assert!(lat.contains("perftest (failed)"));
        // The write bw sweep: ours / perftest's is 1/1.1 at every size
        // both measured (not 1 MiB, which perftest did not).
        assert!(
            md.contains("| write bw | 128 | 22 | 0.91 / **0.91** / 0.91 | 0.91 | 0.91 | 0.91 |"),
            "{md}"
        );
        assert!(
            md.contains("- write bw: perftest printed no measurement at 1024 KiB"),
            "{md}"
        );
        let bars = std::fs::read_to_string(dir.join(CHARTS_DIR).join("instructions.svg")).unwrap();
        assert!(bars.contains("mlx5 WRITE x32 batch, per WR") && bars.contains("target"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_report_from_a_missing_or_foreign_folder_is_refused() {
        let dir = std::env::temp_dir().join(format!("bench-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let e = check_run_dir(&dir).unwrap_err();
        assert!(e.to_string().contains("no such run folder"), "{e}");
        std::fs::create_dir_all(&dir).unwrap();
        let e = check_run_dir(&dir).unwrap_err();
        assert!(e.to_string().contains("holds no bench results"), "{e}");
        std::fs::write(dir.join("cg-rverbs-send.status"), "0\n").unwrap();
        check_run_dir(&dir).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn min_median_max() {
        assert_eq!(min_med_max(&[3.0, 1.0, 2.0]), (1.0, 2.0, 3.0));
        assert_eq!(min_med_max(&[4.0, 1.0]), (1.0, 2.5, 4.0));
    }

    #[test]
    fn the_c_abi_timed_rows_are_ratios_of_the_same_repeat() {
        let bw = |a| Sample { a, b: 1.0 };
        let cases = perf_cases();
        assert!(cases
            .iter()
            .any(|c| c.ourlib && c.verb == "send" && c.kind == Kind::Lat));
        assert!(cases
            .iter()
            .any(|c| c.ourlib && c.verb == "write" && c.kind == Kind::Bw));
        assert!(cases
            .iter()
            .any(|c| c.ourlib && c.verb == "send" && c.kind == Kind::Bw && c.size == 64));
        let case = |ourlib| PerfCase {
            verb: "write",
            kind: Kind::Bw,
            size: 64,
            iters: 10,
            ourlib,
        };
        let perf = vec![
            (
                case(true),
                PerfResult {
                    repeats: vec![Ok((bw(1.0), bw(1.0)))],
                    ourlib: Some(vec![
                        Ok((bw(90.0), bw(100.0))),
                        Err("perftest on ourlib: boom".into()),
                        Ok((bw(110.0), bw(100.0))),
                    ]),
                },
            ),
            (
                case(false),
                PerfResult {
                    repeats: vec![Ok((bw(1.0), bw(1.0)))],
                    ourlib: None,
                },
            ),
        ];
        let mut md = Vec::new();
        let mut failures = Vec::new();
        let mut ok = true;
        ourlib_perf_table(
            &mut |l: &str| md.push(l.to_string()),
            &perf,
            &mut failures,
            &mut ok,
        );
        let rows: Vec<&String> = md.iter().filter(|l| l.starts_with("| ib_")).collect();
        assert_eq!(rows.len(), 1, "{md:#?}");
        assert!(rows[0].contains("0.90 / **1.00** / 1.10"), "{}", rows[0]);
        assert_eq!(failures.len(), 1);
        assert!(failures[0].contains("repeat 2: perftest on ourlib: boom"));
        assert!(ok);
        // No figures at all: the case failed.
        let perf = vec![(
            case(true),
            PerfResult {
                repeats: Vec::new(),
                ourlib: Some(vec![Err("x".into())]),
            },
        )];
        ourlib_perf_table(&mut |_: &str| {}, &perf, &mut failures, &mut ok);
        assert!(!ok);
    }
}
