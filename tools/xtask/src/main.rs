//! `cargo xtask`: the project's harness.
//!
//! - `cargo xtask vm [--kernel SERIES] [--timeout SECS] -- CMD...` boots a
//!   QEMU (TCG) guest with Debian's distribution kernel and the soft-RoCE
//!   driver (rxe0 on a veth pair), runs CMD as root in the workspace inside
//!   a chroot of the host's root, and exits with CMD's exit status.
//! - `cargo xtask vm2 [--kernel SERIES] [--timeout SECS] [--a SHELL] [--b SHELL] [-- CMD...]`
//!   boots two guests, a (10.0.1.1) and b (10.0.1.2), whose virtio NICs
//!   (eth0) are joined by a TCP connection on the host's loopback, with
//!   rxe0 on eth0 in each: a real two-host RoCE v2 link. Once both rxe0 are
//!   ACTIVE and the guests ping each other, guest a runs `--a` (a shell
//!   command line) and guest b runs `--b`; a guest without its own option
//!   runs CMD (given after `--`). Each command runs as root in the
//!   workspace with `RVERBS_ROLE` (a|b), `RVERBS_ADDR` (its own IP),
//!   `RVERBS_PEER_ADDR` (the other's IP), `RVERBS_NETDEV` (eth0),
//!   `RVERBS_RUN_DIR` (its own run folder in the shared workspace) and
//!   `RVERBS_PEER_RUN_DIR` (the other's, for coordination that must not
//!   use the link, e.g. after cutting it). Prints both exit statuses;
//!   exits 0 only if both commands exited 0. To cut the link from inside a
//!   guest (fault tests), run `ip link set eth0 down` there: the other
//!   guest's RC QPs with work in flight then end in transport retry errors
//!   (RETRY_EXC_ERR), provided their retry_cnt is below 7: rxe retries
//!   forever at 7, the value ibv_*_pingpong and perftest use unless told
//!   otherwise (see tests/vm2/link_cut.sh).
//! - `cargo xtask test [--kernel SERIES] [--timeout SECS] [--no-host | --no-vm] [-- ARGS...]`
//!   runs the host tests, builds the VM suite (package `verbs-tests`) and
//!   the `verbs` examples, runs every VM test executable in one VM, then
//!   every `tests/vm2/*.sh` script in a linked pair (see `vm2`; the same
//!   script runs in both guests, one test each) and prints
//!   `N passed, N failed`.
//! - `cargo xtask demo [--kernel SERIES]` builds the examples and runs the
//!   two-process `rc_client_server` demo in the VM.
//!
//! - `cargo xtask bench [--kernel SERIES] [--repeats R] [--probe-iters N] [--skip-perf] [--skip-sweeps] [--mlx5-only]`
//!   builds in release mode and, in one VM, compares rverbs with rdma-core:
//!   user-space instructions per post+poll (callgrind) and, with
//!   `rverbs perf`, bandwidth, message rate and latency against perftest;
//!   prints a markdown report and writes it to `target/bench/BENCHMARKS.md`,
//!   with SVG charts in `target/bench/docs/bench/` (see
//!   `tools/xtask/src/bench.rs`). Not part of `test`.
//!
//! - `cargo xtask mlx5` builds the emulated mlx5 device (package
//!   `mlx5-emu`, an `LD_PRELOAD` library) and runs rdma-core's tools and
//!   the scenario programs of `tests/mlx5-emu/c/` against it, on the host
//!   (see `tools/xtask/src/mlx5.rs`); `test` runs the same items.
//!
//! - `cargo xtask conform --dev NAME [--emu] [--prebuilt] [--only PART]`
//!   is the conformance run for a machine with a device we drive:
//!   rdma-core's suite on both libraries, the interop matrix with rdma-core's
//!   tools, and the uverbs commands both send, compared; one report (see
//!   `tools/xtask/src/conform.rs`).
//!
//! - `cargo xtask fuzz [--seconds N]` runs every cargo-fuzz target of
//!   `tests/fuzz` for N seconds each (default: about 90 s in all) and
//!   fails on any crash, printing the crashing input's path (see
//!   `tools/xtask/src/fuzz.rs`). Needs the nightly toolchain and
//!   cargo-fuzz; installs neither.
//!
//! - `cargo xtask book` builds the book (`mdbook build docs/book`), checks
//!   the links of the book, README.md and BENCHMARKS.md and their line
//!   limits, and runs the README's and the book's Rust code as doc tests
//!   of `rverbs` (see `tools/xtask/src/book.rs`). `test` runs it first.
//!
//! Downloads and builds are cached in `<workspace>/.vm-cache/`.

#[macro_use]
mod util;
mod abi;
mod bench;
mod book;
mod callgrind;
mod charts;
mod conform;
mod efa;
mod efabench;
mod efadv;
mod fuzz;
mod ibverbs;
mod initramfs;
mod kernel;
mod linkage;
mod mlx5;
mod perfrun;
mod pyverbs;
mod regbench;
mod scalebench;
mod streambench;
mod sweepbench;
mod testrun;
mod vm;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// The project's harness: a soft-RoCE VM runner and the test driver.
#[derive(Parser)]
#[command(name = "cargo xtask", bin_name = "cargo xtask", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Boot the soft-RoCE VM (rxe0 ready) and run CMD in it, in the
    /// workspace, as root; exits with CMD's exit status.
    Vm {
        /// Kernel series: "6.1" (Debian 12's kernel), "6.12" (Debian 13's) or "7" (the newest in backports).
        #[arg(long, value_name = "SERIES", default_value = kernel::DEFAULT_SERIES)]
        kernel: String,
        /// Kill the VM after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 1200)]
        timeout: u64,
        /// The command and its arguments (after `--`).
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Boot two linked soft-RoCE guests, a (10.0.1.1) and b (10.0.1.2),
    /// and run a command in each; exits 0 only if both exit 0.
    ///
    /// Examples: `cargo xtask vm2 -- sh tests/vm2/rc_pingpong.sh` (the same
    /// command in both guests, told apart by RVERBS_ROLE) or
    /// `cargo xtask vm2 --a 'ibv_rc_pingpong -g 1 -n 10' --b 'sleep 2; ibv_rc_pingpong -g 1 -n 10 $RVERBS_PEER_ADDR'`.
    /// Each command gets RVERBS_ROLE (a|b), RVERBS_ADDR, RVERBS_PEER_ADDR,
    /// RVERBS_NETDEV (eth0), RVERBS_RUN_DIR and RVERBS_PEER_RUN_DIR (run
    /// folders in the shared workspace). `ip link set eth0 down` in a
    /// guest cuts the link.
    Vm2 {
        /// Kernel series: "6.1" (Debian 12's kernel), "6.12" (Debian 13's) or "7" (the newest in backports).
        #[arg(long, value_name = "SERIES", default_value = kernel::DEFAULT_SERIES)]
        kernel: String,
        /// Kill both VMs after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 600)]
        timeout: u64,
        /// Shell command line for guest a (instead of CMD).
        #[arg(long = "a", value_name = "SHELL")]
        a: Option<String>,
        /// Shell command line for guest b (instead of CMD).
        #[arg(long = "b", value_name = "SHELL")]
        b: Option<String>,
        /// The command run in each guest without its own --a/--b (after `--`).
        #[arg(last = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Build the examples and run the rc_client_server demo (server and
    /// client processes, RDMA WRITE/READ and SEND/RECV) in the rxe VM.
    Demo {
        /// Kernel series: "6.1" (Debian 12's kernel), "6.12" (Debian 13's) or "7" (the newest in backports).
        #[arg(long, value_name = "SERIES", default_value = kernel::DEFAULT_SERIES)]
        kernel: String,
        /// Kill the VM after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 600)]
        timeout: u64,
    },
    /// Build our libibverbs, shared (.so.1) and static (.a), from package
    /// rverbs-ibverbs into target/ibverbs/release/ (debug with --debug):
    /// C and Python verbs programs run on it with LD_LIBRARY_PATH there.
    Ibverbs {
        /// Build the debug profile (target/ibverbs/debug/).
        #[arg(long)]
        debug: bool,
    },
    /// Compare rverbs with rdma-core in one VM: instructions per post+poll
    /// (callgrind) and, with `rverbs perf`, bandwidth, message rate and
    /// latency against perftest. Writes target/bench/BENCHMARKS.md.
    Bench {
        /// Kernel series: "6.1" (Debian 12's kernel), "6.12" (Debian 13's) or "7" (the newest in backports).
        #[arg(long, value_name = "SERIES", default_value = kernel::DEFAULT_SERIES)]
        kernel: String,
        /// Kill the VM after this many seconds.
        #[arg(long, value_name = "SECS", default_value_t = 2400)]
        timeout: u64,
        /// Runs of every timed case per tool (ratios are reported as
        /// min / median / max over them).
        #[arg(long, value_name = "R", default_value_t = 3)]
        repeats: u32,
        /// Measured iterations of each instruction-count probe.
        #[arg(long, value_name = "N", default_value_t = 1000)]
        probe_iters: u32,
        /// Only the instruction counts: skip the perftest comparison (the
        /// fixed-size cases and the message-size sweeps).
        #[arg(long)]
        skip_perf: bool,
        /// Skip the message-size sweeps (`-a`) behind the latency and
        /// bandwidth charts; the fixed-size cases still run.
        #[arg(long)]
        skip_sweeps: bool,
        /// Only the host's instruction counts: the emulated ConnectX-5's
        /// and the emulated EFA device's (no VM boot). Prints the tables,
        /// writes no report.
        #[arg(long)]
        mlx5_only: bool,
        /// Run nothing: write the report and charts of the earlier run
        /// whose raw results are in DIR (printed at the end of a run; pass
        /// the run's --repeats and --probe-iters).
        #[arg(long, value_name = "DIR")]
        report_from: Option<std::path::PathBuf>,
    },
    /// Run rdma-core's tools and the scenario programs of tests/mlx5-emu/c
    /// against the emulated mlx5 device (on the host, no VM) and print a
    /// summary.
    Mlx5,
    /// Run rdma-core's ibv_devinfo and the scenario programs of
    /// tests/efa-emu/c (libibverbs + libefa) against the emulated EFA
    /// device (on the host, no VM) and print a summary.
    Efa,
    /// The conformance run on a machine with an RDMA device we drive:
    /// rdma-core's pyverbs suite on rdma-core's libibverbs and on ours
    /// compared verdict for verdict, the interop matrix against rdma-core's
    /// tools, and the uverbs commands both libraries send for the same
    /// verbs (recorded by tests/uverbs-trace) compared field by field; one
    /// report, `<out>/report.txt`. Exits 1 if any item failed.
    Conform {
        /// The device, as `ibv_devices` lists it (mlx5_0, rxe0, ...).
        #[arg(long, value_name = "NAME")]
        dev: String,
        /// On the emulated ConnectX-5 (tests/mlx5-emu), `--dev mlx5_0`.
        #[arg(long)]
        emu: bool,
        /// Build nothing: take every binary from the target folder.
        #[arg(long)]
        prebuilt: bool,
        /// The report's folder (default: `<target>/conform/<dev>`).
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
        /// The target folder (default: cargo's, or RVERBS_TARGET_DIR).
        #[arg(long, value_name = "DIR")]
        target_dir: Option<std::path::PathBuf>,
        /// The GID index on a RoCE port (default: the first RoCE v2 GID
        /// that maps an IPv4 address).
        #[arg(long, value_name = "N")]
        gid_index: Option<u32>,
        /// The pyverbs allowed-differences file (default: the driver's,
        /// tests/vm/pyverbs_allowed.tsv for rxe, tests/mlx5-emu's for mlx5).
        #[arg(long, value_name = "FILE")]
        allowed: Option<std::path::PathBuf>,
        /// Run only this part: pyverbs, interop or commands (repeatable).
        #[arg(long, value_name = "PART")]
        only: Vec<String>,
        /// The first TCP port the interop matrix uses.
        #[arg(long, value_name = "PORT", default_value_t = 19700)]
        port: u16,
    },
    /// Build the book (docs/book, with mdBook), check the links of the
    /// book, README.md and BENCHMARKS.md and their sizes, and compile the
    /// README's and the book's Rust code as doc tests of rverbs.
    Book,
    /// Run every cargo-fuzz target of tests/fuzz for N seconds each and
    /// fail on any crash, naming the crashing inputs. Needs the nightly
    /// toolchain and cargo-fuzz (`cargo install cargo-fuzz --locked`).
    Fuzz {
        /// Seconds per target (default: 90 s shared among the targets).
        #[arg(long, value_name = "N")]
        seconds: Option<u64>,
    },
    /// Run the host tests, then the VM suite (package verbs-tests) in one VM.
    Test {
        /// Kernel series to run the VM suite on, one after the other: "6.1"
        /// (Debian 12's kernel), "6.12" (Debian 13's), "7" (the newest in
        /// backports), a comma-separated list, or "all" (all three; the
        /// million-message soak runs on the first, a shorter one on the
        /// others).
        #[arg(long, value_name = "SERIES", default_value = "all")]
        kernel: String,
        /// Kill the VM after this many seconds (one kernel's suite, all
        /// of it in one VM).
        #[arg(long, value_name = "SECS", default_value_t = 1800)]
        timeout: u64,
        /// Skip the host test phase (`cargo test --workspace ...`).
        #[arg(long)]
        no_host: bool,
        /// Skip the VM phases (host tests and checks only).
        #[arg(long, conflicts_with = "no_host")]
        no_vm: bool,
        /// Extra arguments for each VM test executable (after `--`).
        #[arg(last = true, value_name = "ARGS")]
        args: Vec<OsString>,
    },
}

fn vm_options(kernel: String, timeout: u64) -> Result<vm::VmOptions, String> {
    if timeout == 0 {
        return Err("--timeout must be at least 1 second".into());
    }
    Ok(vm::VmOptions {
        series: kernel,
        timeout: Duration::from_secs(timeout),
    })
}

/// The commands of guests a and b of `vm2`: `--a`/`--b`, else CMD.
fn pair_commands(
    a: Option<String>,
    b: Option<String>,
    command: Vec<OsString>,
) -> Result<[vm::PairCommand; 2], String> {
    let pick = |own: Option<String>, role: &str| match own {
        Some(line) if line.trim().is_empty() => Err(format!("--{role} is empty")),
        Some(line) => Ok(vm::PairCommand::Shell(line)),
        None if command.is_empty() => Err(format!(
            "no command for guest {role}: give --{role} 'SHELL' or a command after `--`"
        )),
        None => Ok(vm::PairCommand::Argv(command.clone())),
    };
    Ok([pick(a, "a")?, pick(b, "b")?])
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    vm::install_signal_handlers();
    let result = match cli.command {
        Cmd::Vm {
            kernel,
            timeout,
            command,
        } => vm_options(kernel, timeout)
            .map_err(anyhow::Error::msg)
            .and_then(|opts| vm::vm_command(&opts, &command))
            .map(|status| u8::try_from(status).unwrap_or(1)),
        Cmd::Vm2 {
            kernel,
            timeout,
            a,
            b,
            command,
        } => vm_options(kernel, timeout)
            .and_then(|opts| Ok((opts, pair_commands(a, b, command)?)))
            .map_err(anyhow::Error::msg)
            .and_then(|(opts, [a, b])| vm::vm2_command(&opts, [&a, &b]))
            .map(|status| u8::try_from(status).unwrap_or(1)),
        Cmd::Demo { kernel, timeout } => vm_options(kernel, timeout)
            .map_err(anyhow::Error::msg)
            .and_then(|opts| testrun::demo_command(&opts))
            .map(|status| u8::try_from(status).unwrap_or(1)),
        Cmd::Bench {
            kernel,
            timeout,
            repeats,
            probe_iters,
            skip_perf,
            skip_sweeps,
            mlx5_only,
            report_from,
        } => vm_options(kernel, timeout)
            .map_err(anyhow::Error::msg)
            .and_then(|vm| {
                let args: Vec<String> = std::env::args().skip(1).collect();
                bench::bench_command(&bench::BenchOptions {
                    vm,
                    repeats,
                    probe_iters,
                    skip_perf,
                    skip_sweeps,
                    mlx5_only,
                    report_from,
                    command_line: format!("cargo xtask {}", args.join(" ")),
                })
            })
            .map(|ok| if ok { 0 } else { 1 }),
        Cmd::Ibverbs { debug } => testrun::target_dir()
            .and_then(|t| ibverbs::build(&t, !debug))
            .map(|dir| {
                match ibverbs::check_consumers(&dir) {
                    Ok(n) => say!(
                        "all {n} programs and libraries of rdma-core's packages that import from libibverbs bind on it"
                    ),
                    Err(e) => say!(
                        "not every consumer binds on it (or their packages are missing): {e:#}"
                    ),
                }
                util::print_line(&format!(
                    "run a verbs program on it: LD_LIBRARY_PATH={} PROGRAM",
                    dir.display()
                ));
                0
            }),
        Cmd::Mlx5 => testrun::target_dir()
            .and_then(|t| mlx5::mlx5_command(&t))
            .map(|ok| if ok { 0 } else { 1 }),
        Cmd::Efa => testrun::target_dir()
            .and_then(|t| efa::efa_command(&t))
            .map(|ok| if ok { 0 } else { 1 }),
        Cmd::Conform {
            dev,
            emu,
            prebuilt,
            out,
            target_dir,
            gid_index,
            allowed,
            only,
            port,
        } => conform::conform_command(&conform::Options {
            dev,
            emu,
            prebuilt,
            out,
            target_dir,
            gid_index,
            allowed,
            only,
            port,
        })
        .map(|ok| if ok { 0 } else { 1 }),
        Cmd::Book => book::book_command().map(|ok| if ok { 0 } else { 1 }),
        Cmd::Fuzz { seconds } => {
            fuzz::fuzz_command(&fuzz::FuzzOptions { seconds }).map(|ok| if ok { 0 } else { 1 })
        }
        Cmd::Test {
            kernel,
            timeout,
            no_host,
            no_vm,
            args,
        } => kernel::parse_series_list(&kernel)
            .and_then(|kernels| {
                let vm = vm_options(kernels[0].clone(), timeout).map_err(anyhow::Error::msg)?;
                testrun::test_command(&testrun::TestOptions {
                    vm,
                    kernels: if no_vm { Vec::new() } else { kernels },
                    extra_args: args,
                    no_host,
                })
            })
            .map(|ok| if ok { 0 } else { 1 }),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            if let Some(t) = err.downcast_ref::<vm::Timeout>() {
                eprintln!("vm: {t}");
                return ExitCode::from(124);
            }
            eprintln!("xtask: error: {err:#}");
            ExitCode::from(1)
        }
    }
}
