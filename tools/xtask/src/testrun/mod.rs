//! `cargo xtask test`: host tests, then the VM suite in one VM.
//!
//! 0. The book's checks (`crate::book`, as `cargo xtask book`): its build,
//!    links and page sizes, and the tokio chapter's doc tests (the host
//!    tests below compile the README's and the other chapters').
//! 1. `cargo test --workspace --exclude verbs-tests` on the host (stdout
//!    shown live and read for libtest's `test result:` lines).
//!    Then the emulated mlx5 items (`mlx5::run_all`, as `cargo xtask
//!    mlx5`): rdma-core's tools and scenario programs against the
//!    `mlx5-emu` library, each one test; and the emulated EFA items
//!    (`efa::run_all`, as `cargo xtask efa`) against `efa-emu`.
//!    `--no-host` skips all three.
//! 2. `cargo build -p rverbs -p rverbs-cm --examples --features
//!    rverbs/tokio,rverbs-cm/tokio` and `cargo build -p rverbs-cli --bin rverbs`.
//! 3. `cargo test -p verbs-tests --no-run --message-format=json`, collecting
//!    the test executables.
//! 4. One VM boot runs a generated `payload.sh` that copies the debug
//!    `rverbs` and our libibverbs' folder into the guest's tmpfs
//!    (`payload::stage_script`), runs every executable
//!    (with `--test-threads=1` and the extra args), then every
//!    `tests/vm/*.sh` script, recording each exit status, output and run
//!    time (`item-N.status`, `item-N.log`, `item-N.secs`) in the run folder;
//!    the host reads them after the VM is gone. On every kernel but the
//!    first, scripts marked `# xtask: first kernel only` are left out.
//! 5. Every `tests/vm2/*.sh` script is one two-guest item: one linked
//!    pair of VMs per kernel (`vm::run_pair`, as `cargo xtask vm2`) runs
//!    them all in turn, each in both guests (RVERBS_ROLE a/b,
//!    RVERBS_PEER_ADDR the other's address, its own run folders; each
//!    guest copies the debug `rverbs` into its tmpfs first, both start an
//!    item together, the link is mended after it, scripts marked `# xtask:
//!    last in the pair` go last); an item passes if both guests' runs
//!    exit 0 and counts as one test.
//! 6. Prints per-item results and the closing line `N passed, N failed`.
//!
//! This module runs those steps; the static checks are in `checks`, the
//! cargo plumbing in `cargo`, the VM payload in `payload`, libtest's
//! output in `libtest`, the interop matrix in `interop`, and `cargo xtask
//! demo` in `demo`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::util::{self, cargo_bin, describe, print_line, workspace_root};
use crate::vm::{self, VmOptions};

mod cargo;
mod checks;
mod demo;
mod interop;
mod libtest;
mod payload;

pub use cargo::target_dir;
use cargo::{examples_build, metadata, run_teed, Package};
use checks::{static_checks, static_rverbs};
pub use demo::demo_command;
use interop::{merge_interop, print_interop, read_interop, InteropRow, INTEROP_FILE};
use libtest::item_counts;
pub use libtest::{failed_tests, Counts};
use payload::{
    build_vm_suite, first_kernel_only, payload_script, scripts_in, stage_script, vm_scripts, Item,
    Stage, TestBinary, STAGE_DIR,
};

/// The package holding the VM suite.
const VM_SUITE: &str = "verbs-tests";
/// The packages whose examples are built for the VM run.
const EXAMPLES_PACKAGES: &[&str] = &["rverbs", "rverbs-cm"];
/// Their features the examples need (`async_echo` and `http_stream` need
/// `tokio`).
const EXAMPLES_FEATURES: &str = "rverbs/tokio,rverbs-cm/tokio";

/// Options of `cargo xtask test`.
pub struct TestOptions {
    /// VM settings (the timeout; the series is each of `kernels`).
    pub vm: VmOptions,
    /// The kernel series to run the VM suite on, in order (the first gets
    /// the full soak).
    pub kernels: Vec<String>,
    /// Extra arguments for every VM test binary.
    pub extra_args: Vec<OsString>,
    /// Skip the host test phase.
    pub no_host: bool,
}

/// `cargo xtask test`. Returns whether everything passed.
/// Installs (as root, via apt) the reference tools and headers the suites
/// use when they are missing: rdma-core's ibv_devinfo (the oracle of the
/// query tests), rping (the rdma_cm interop peer), libibverbs-dev (the linkage check's positive control),
/// python3-pyverbs (a consumer of our libibverbs.so.1), libc6-dev (the static C ping-pong),
/// perftest (the interop peer of `rverbs perf` and of our library, and a
/// consumer the library build checks), the kernel uapi headers and a C
/// compiler (the ABI layout probe).
fn ensure_reference_tools() -> Result<()> {
    util::ensure_tool("ibv_devinfo", "ibverbs-utils")?;
    // tests/vm/perf_cm.sh, perftest_lib.sh, inspect.sh; and the consumer
    // check of `ibverbs::check_consumers`, which lists perftest's files.
    util::ensure_tool("ib_send_bw", "perftest")?;
    // tests/vm/rping.sh, udaddy.sh, ucmatose.sh: rdma-core's rping, udaddy
    // and ucmatose, the rdma_cm interop peers (all in rdmacm-utils).
    util::ensure_tool("rping", "rdmacm-utils")?;
    util::ensure_tool("cc", "gcc")?;
    util::ensure_tool("readelf", "binutils")?;
    for (file, pkg) in [
        ("/usr/include/rdma/ib_user_verbs.h", "linux-libc-dev"),
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        ("/etc/libibverbs.d/rxe.driver", "ibverbs-providers"),
        // tests/vm/ibverbs_tools.sh: pyverbs on our libibverbs.so.1.
        ("/usr/lib/python3/dist-packages/pyverbs", "python3-pyverbs"),
        // The C ping-pong linked with -static against our libibverbs.a.
        ("/usr/lib/x86_64-linux-gnu/libc.a", "libc6-dev"),
    ] {
        if !Path::new(file).exists() {
            util::apt_install(&[pkg])?;
        }
    }
    Ok(())
}

pub fn test_command(opts: &TestOptions) -> Result<bool> {
    // The run's timeline (each phase's end, in seconds from the start),
    // for CI's time budget.
    let t0 = Instant::now();
    let mark = |phase: &str| say!("timeline: {phase} done at {} s", t0.elapsed().as_secs());
    ensure_reference_tools()?;
    let ws = workspace_root();
    let (packages, target_dir) = metadata()?;
    let has = |name: &str| packages.iter().any(|p| p.name == name);
    let mut total = Counts::default();
    let mut problems = Problems::default();
    let mut matrix: Vec<(String, Vec<InteropRow>)> = Vec::new();

    // The book and the pages around it (host): first, as they are quick
    // and a broken link should not wait for the VM suite.
    if !opts.no_host {
        for (name, ok) in crate::book::check_all(crate::book::Doctests::TokioOnly) {
            if ok {
                total.passed += 1;
            } else {
                total.failed += 1;
                problems.push(name);
            }
        }
        mark("book");
    }

    // (a) Host tests.
    if opts.no_host {
        say!("skipping host tests (--no-host)");
    } else {
        let mut cmd = Command::new(cargo_bin());
        // Every test binary runs even after one fails, so one run names
        // every failure.
        cmd.args(["test", "--workspace", "--no-fail-fast"])
            .current_dir(&ws);
        if has(VM_SUITE) {
            cmd.args(["--exclude", VM_SUITE]);
        } else {
            say!("warning: no package {VM_SUITE} in the workspace yet; host tests cover all");
        }
        let (ok, out) = run_teed(&mut cmd)?;
        let counts = item_counts(ok, &out);
        say!(
            "host tests: {} ({} passed, {} failed)",
            if ok { "ok" } else { "FAILED" },
            counts.passed,
            counts.failed
        );
        if !ok {
            let failed = failed_tests(&out);
            if failed.is_empty() {
                problems.push("host tests".into());
            } else {
                problems.push(format!("host tests ({})", failed.join("; ")));
            }
        }
        total.add(counts);
        mark("host tests");
    }

    // Formatting, lints, and the aarch64 type check (host).
    if !opts.no_host {
        for (name, ok) in static_checks(&ws) {
            if ok {
                total.passed += 1;
            } else {
                total.failed += 1;
                problems.push(name);
            }
        }
        mark("static checks");
    }

    // The emulated mlx5 device and rdma-core's scenarios on it (host).
    if has(crate::mlx5::EMU_PACKAGE) && !opts.no_host {
        match crate::mlx5::run_all(&target_dir) {
            Ok(outcomes) => {
                let all_ok = crate::mlx5::summary(&outcomes);
                for o in &outcomes {
                    if o.ok {
                        total.passed += 1;
                    } else {
                        total.failed += 1;
                        problems.push(format!("mlx5: {}: {}", o.name, o.detail));
                    }
                }
                if !all_ok {
                    say!("mlx5 emulator scenarios: FAILED");
                }
            }
            Err(e) => {
                say!("mlx5 emulator: error: {e:#}");
                problems.push("mlx5 emulator".into());
                total.failed += 1;
            }
        }
    }

    // The emulated EFA device and rdma-core's scenarios on it (host).
    if has(crate::efa::EMU_PACKAGE) && !opts.no_host {
        match crate::efa::run_all(&target_dir) {
            Ok(outcomes) => {
                let all_ok = crate::efa::summary(&outcomes);
                for o in &outcomes {
                    if o.ok {
                        total.passed += 1;
                    } else {
                        total.failed += 1;
                        problems.push(format!("efa: {}: {}", o.name, o.detail));
                    }
                }
                if !all_ok {
                    say!("EFA emulator scenarios: FAILED");
                }
            }
            Err(e) => {
                say!("EFA emulator: error: {e:#}");
                problems.push("EFA emulator".into());
                total.failed += 1;
            }
        }
    }

    // (d) Examples of the verbs and cm packages, for the VM scripts.
    if EXAMPLES_PACKAGES.iter().all(|p| has(p)) {
        let mut cmd = examples_build(&ws);
        say!("building examples: {}", describe(&cmd));
        if let Err(e) = util::run(&mut cmd) {
            say!("error: {e:#}");
            problems.push(format!(
                "{} examples build",
                EXAMPLES_PACKAGES.join(" and ")
            ));
            total.failed += 1;
        }
    } else {
        say!(
            "warning: not every package of {} is here: no examples built",
            EXAMPLES_PACKAGES.join(", ")
        );
    }

    // The rverbs tool, for the interop script (tests/vm/interop.sh).
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["build", "-p", "rverbs-cli", "--bin", "rverbs"])
        .current_dir(&ws)
        .stdin(Stdio::null());
    say!("building rverbs: {}", describe(&cmd));
    if let Err(e) = util::run(&mut cmd) {
        say!("error: {e:#}");
        problems.push("rverbs build".into());
        total.failed += 1;
    }

    // Our libibverbs (verbs/ibverbs), for tests/vm/ibverbs_tools.sh; the
    // build checks every symbol's version, and the linkage check below
    // scans it like every other binary.
    match crate::ibverbs::build(&target_dir, false)
        .and_then(|dir| Ok((crate::ibverbs::check_consumers(&dir)?, dir)))
    {
        Ok((n, dir)) => {
            say!(
                "libibverbs (ours): built in {}; all {n} programs and libraries of rdma-core's packages that import from libibverbs bind on it: ok",
                dir.display()
            );
            total.passed += 1;
        }
        Err(e) => {
            say!("libibverbs (ours): FAILED: {e:#}");
            problems.push("libibverbs build".into());
            total.failed += 1;
        }
    }

    // The conformance run's tracer and control-path program, for
    // tests/vm/conform.sh (`cargo xtask conform --prebuilt` in the guest).
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["build", "-p", "uverbs-trace"])
        .current_dir(&ws)
        .stdin(Stdio::null());
    say!("building the uverbs tracer: {}", describe(&cmd));
    if let Err(e) = util::run(&mut cmd)
        .and_then(|()| crate::mlx5::compile_cmd_seq(&ws, &crate::mlx5::cmd_seq_exe(&target_dir)))
    {
        say!("error: {e:#}");
        problems.push("uverbs-trace and cmd_seq build".into());
        total.failed += 1;
    }

    // The fully static rverbs the book promises (getting-started.md: musl,
    // non-PIE), for tests/vm/static.sh: built, then checked to have no
    // interpreter, no dynamic section and no rdma-core name in it.
    match static_rverbs(&ws, &target_dir) {
        Ok(path) => {
            say!(
                "static rverbs: {} has no interpreter and no dynamic section: ok",
                path.display()
            );
            total.passed += 1;
        }
        Err(e) => {
            say!("static rverbs: FAILED: {e:#}");
            problems.push("static rverbs".into());
            total.failed += 1;
        }
    }

    // (b) The VM suite's test executables.
    let binaries = if has(VM_SUITE) {
        match build_vm_suite() {
            Ok(b) => Some(b),
            Err(e) => {
                say!("error: {e:#}");
                problems.push(format!("{VM_SUITE} build"));
                total.failed += 1;
                None
            }
        }
    } else {
        say!("warning: no package {VM_SUITE} in the workspace: no VM tests to run");
        Some(Vec::new())
    };

    // No binary we built may link, import from or dlopen rdma-core.
    match crate::linkage::check(&target_dir) {
        Ok((n, found)) if found.is_empty() => {
            say!("linkage: {n} binaries checked, none links or names libibverbs: ok");
            total.passed += 1;
        }
        Ok((n, found)) => {
            say!(
                "linkage: FAILED ({} problems in {n} binaries):",
                found.len()
            );
            for f in &found {
                say!("  {f}");
            }
            problems.push("linkage check".into());
            total.failed += 1;
        }
        Err(e) => {
            say!("linkage: error: {e:#}");
            problems.push("linkage check".into());
            total.failed += 1;
        }
    }

    // (c) + (e) for each kernel series, one after the other.
    mark("builds and host programs");
    if let Some(binaries) = binaries {
        for (k, series) in opts.kernels.iter().enumerate() {
            let vm = VmOptions {
                series: series.clone(),
                ..opts.vm.clone()
            };
            let mut rows = Vec::new();
            let before = problems.names.len();
            let counts = run_kernel(
                opts,
                &vm,
                k == 0,
                &binaries,
                &packages,
                &target_dir,
                &mut problems,
                &mut rows,
            )?;
            for p in &mut problems.names[before..] {
                *p = format!("[{series}] {p}");
            }
            say!(
                "kernel {series}: {} passed, {} failed",
                counts.passed,
                counts.failed
            );
            total.add(counts);
            matrix.push((series.clone(), rows));
            mark(&format!("kernel {series}"));
        }
    }

    for (series, rows) in &matrix {
        say!("kernel {series}:");
        print_interop(rows);
    }
    // CI shows the end of the output: what each failed VM item printed
    // last comes after the long matrices, next to the verdict.
    for (name, tail) in &problems.tails {
        say!("{name} failed; its last lines:");
        for line in tail.lines() {
            print_line(&format!("  | {line}"));
        }
    }
    if problems.is_empty() {
        say!("all passed");
    } else {
        say!("failed: {}", problems.names.join(", "));
    }
    print_line(&format!("{} passed, {} failed", total.passed, total.failed));
    Ok(problems.is_empty() && total.failed == 0)
}

/// The scripts this kernel runs (all on the first; on the others, those
/// not marked first-kernel-only) and the ones it leaves to the first.
fn kernel_scripts(
    scripts: Vec<std::path::PathBuf>,
    primary: bool,
) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
    if primary {
        return (scripts, Vec::new());
    }
    scripts.into_iter().partition(|s| !first_kernel_only(s))
}

/// Names the scripts a kernel leaves to the first one (not run, not counted).
fn say_held(series: &str, held: &[std::path::PathBuf]) {
    if held.is_empty() {
        return;
    }
    let ws = workspace_root();
    let names: Vec<String> = held
        .iter()
        .map(|p| p.strip_prefix(&ws).unwrap_or(p).display().to_string())
        .collect();
    say!(
        "kernel {series}: not run here, first kernel only (neither passed nor failed): {}",
        names.join(", ")
    );
}

/// How many of its last lines a failed VM item shows at the end of the run.
const TAIL_LINES: usize = 30;

/// What failed: a name for each failure (the closing `failed:` line) and
/// the last lines of each failed VM item (printed just before it).
#[derive(Default)]
struct Problems {
    names: Vec<String>,
    tails: Vec<(String, String)>,
}

impl Problems {
    fn push(&mut self, name: String) {
        self.names.push(name);
    }

    fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// How many earlier `FAIL` lines a failed VM item's summary repeats.
const EARLIER_FAIL_LINES: usize = 10;

/// The last `n` lines of `log`, each cut to 200 characters, after the
/// first few lines above them that start with `FAIL` (the scripts' verdict
/// lines): what failed stays in view when the script printed on after it.
fn last_lines(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let from = lines.len().saturating_sub(n);
    let earlier: Vec<&str> = lines[..from]
        .iter()
        .filter(|l| l.trim_start().starts_with("FAIL"))
        .take(EARLIER_FAIL_LINES)
        .copied()
        .collect();
    let mut shown = earlier;
    if !shown.is_empty() {
        shown.push("...");
    }
    shown.extend_from_slice(&lines[from..]);
    shown
        .iter()
        .map(|l| l.chars().take(200).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Messages of the soak on every kernel but the first, unless the caller
/// set `RVERBS_SOAK_MESSAGES`: the million-message soak runs once.
const SOAK_MESSAGES_SECONDARY: u32 = 100_000;

/// The VM suite and the two-guest items on one kernel series: returns
/// their counts, adds failed items to `problems` and interop rows to
/// `matrix`. `primary`: the first series, the one the full soak runs on.
#[allow(clippy::too_many_arguments)]
fn run_kernel(
    opts: &TestOptions,
    vm_opts: &VmOptions,
    primary: bool,
    binaries: &[TestBinary],
    packages: &[Package],
    target_dir: &Path,
    problems: &mut Problems,
    matrix: &mut Vec<InteropRow>,
) -> Result<Counts> {
    let ws = workspace_root();
    let mut total = Counts::default();
    say!("kernel series {}: the VM suite", vm_opts.series);
    let soak_env = if primary || std::env::var_os("RVERBS_SOAK_MESSAGES").is_some() {
        String::new()
    } else {
        format!(" RVERBS_SOAK_MESSAGES={SOAK_MESSAGES_SECONDARY}")
    };
    {
        let suite_dir = packages
            .iter()
            .find(|p| p.name == VM_SUITE)
            .map(|p| p.dir.clone())
            .unwrap_or_else(|| ws.clone());
        let mut items = Vec::new();
        for b in binaries {
            let mut words = vec![util::shell_quote_os(b.path.as_os_str())?];
            words.push("--test-threads=1".into());
            for a in &opts.extra_args {
                words.push(util::shell_quote_os(a)?);
            }
            let file = b
                .path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| b.name.clone());
            items.push(Item {
                name: format!("{} ({file})", b.name),
                command: words.join(" "),
                dir: suite_dir.clone(),
                env: format!(
                    "CARGO_MANIFEST_DIR={} CARGO_PKG_NAME={VM_SUITE}{soak_env}",
                    util::shell_quote_os(suite_dir.as_os_str())?
                ),
            });
        }
        if binaries.is_empty() {
            say!("warning: {VM_SUITE} has no test executables yet: 0 tests will run in the VM");
        }
        let (scripts, held) = kernel_scripts(vm_scripts(), primary);
        say_held(&vm_opts.series, &held);
        for script in scripts {
            let rel = script.strip_prefix(&ws).unwrap_or(&script).to_path_buf();
            items.push(Item {
                name: rel.display().to_string(),
                command: format!("/bin/sh {}", util::shell_quote_os(script.as_os_str())?),
                dir: ws.clone(),
                // The scripts that compare our libibverbs.so.1 with
                // rdma-core's tools beyond rdma-core's own suite run their
                // longest matrices on the first kernel only (CI's time).
                env: format!("RVERBS_PRIMARY_KERNEL={}", u8::from(primary)),
            });
        }
        say!(
            "running {} item(s) in one VM ({} test executable(s), {} script(s))",
            items.len(),
            binaries.len(),
            items.len() - binaries.len()
        );
        // A guest that died before its command started (a kernel crash at
        // boot, which TCG now and then causes, or a failed set-up) is booted
        // once more: that is the testbed failing, not a test.
        let mut attempt = 1;
        let (run_dir, result) = loop {
            let run_dir = vm::new_run_dir()?;
            let payload = payload_script(&items, &run_dir, target_dir)?;
            let result = vm::run(vm_opts, &run_dir, &payload);
            match &result {
                Err(e) if attempt == 1 && e.downcast_ref::<vm::SetupFailed>().is_some() => {
                    say!(
                        "the VM failed before its command ran ({e:#}); booting it once more (logs in {})",
                        run_dir.display()
                    );
                    attempt += 1;
                }
                _ => break (run_dir, result),
            }
        };
        match result {
            Ok(outcome) => {
                if let Some(secs) = outcome.boot_secs {
                    say!("VM boot took {secs:.1} s");
                }
                let mut vm_total = Counts::default();
                for (i, item) in items.iter().enumerate() {
                    let n = i + 1;
                    let status = std::fs::read_to_string(run_dir.join(format!("item-{n}.status")))
                        .ok()
                        .and_then(|s| s.trim().parse::<i32>().ok());
                    let log = std::fs::read_to_string(run_dir.join(format!("item-{n}.log")))
                        .unwrap_or_default();
                    let secs = std::fs::read_to_string(run_dir.join(format!("item-{n}.secs")))
                        .ok()
                        .and_then(|s| s.trim().parse::<u64>().ok())
                        .map(|s| format!(" ({s} s)"))
                        .unwrap_or_default();
                    let ok = status == Some(0);
                    let counts = item_counts(ok, &log);
                    let verdict = match status {
                        Some(0) => "PASS".to_string(),
                        Some(s) => format!("FAIL (exit status {s})"),
                        None => "FAIL (no exit status recorded)".to_string(),
                    };
                    say!(
                        "{verdict} {}{secs}: {} passed, {} failed",
                        item.name,
                        counts.passed,
                        counts.failed
                    );
                    if !ok {
                        problems.tails.push((
                            format!("[{}] {}", vm_opts.series, item.name),
                            last_lines(&log, TAIL_LINES),
                        ));
                        let failed = failed_tests(&log);
                        if failed.is_empty() {
                            problems.push(item.name.clone());
                        } else {
                            problems.push(format!("{} ({})", item.name, failed.join("; ")));
                        }
                    }
                    vm_total.add(counts);
                }
                if vm_total.passed + vm_total.failed == 0 {
                    say!("warning: no test ran in the VM");
                }
                matrix.extend(read_interop(&run_dir.join(INTEROP_FILE)));
                if outcome.kernel_problems {
                    say!(
                        "warning: the guest kernel logged problems during the VM tests (see above)"
                    );
                }
                say!(
                    "VM: {} passed, {} failed (logs in {})",
                    vm_total.passed,
                    vm_total.failed,
                    run_dir.display()
                );
                total.add(vm_total);
            }
            Err(e) => {
                say!("error: VM run failed: {e:#}");
                problems.push("VM run".into());
                let console =
                    std::fs::read_to_string(run_dir.join("console.log")).unwrap_or_default();
                problems.tails.push((
                    format!("[{}] VM run", vm_opts.series),
                    last_lines(&console, TAIL_LINES),
                ));
                total.failed += 1;
            }
        }
    }

    // (e) Two-guest items: one linked pair of VMs runs every tests/vm2
    // script in turn.
    let (mut pair_scripts, held) = kernel_scripts(scripts_in("vm2"), primary);
    say_held(&vm_opts.series, &held);
    if !pair_scripts.is_empty() {
        order_pair_scripts(&mut pair_scripts);
        let names: Vec<String> = pair_scripts
            .iter()
            .map(|s| s.strip_prefix(&ws).unwrap_or(s).display().to_string())
            .collect();
        say!(
            "running {} two-guest item(s) in one linked pair of VMs",
            pair_scripts.len()
        );
        let pair_total =
            run_pair_items(vm_opts, &names, &pair_scripts, target_dir, matrix, problems)?;
        say!(
            "two-guest items: {} passed, {} failed",
            pair_total.passed,
            pair_total.failed
        );
        total.add(pair_total);
    }
    Ok(total)
}

/// The line (among a `tests/vm2` script's first 40) that puts it after
/// the others in the pair's sequence: scripts that leave the link broken
/// behind them (the payload mends it after each item, but a script that
/// failed half-way may leave more than it knows).
pub(super) const PAIR_LAST: &str = "# xtask: last in the pair";

/// Orders the two-guest scripts as the pair runs them: by name, those
/// marked [`PAIR_LAST`] after the others.
fn order_pair_scripts(scripts: &mut [PathBuf]) {
    scripts.sort_by_key(|s| {
        let last = std::fs::read_to_string(s)
            .map(|t| t.lines().take(40).any(|l| l.trim_end() == PAIR_LAST))
            .unwrap_or(false);
        (last, s.clone())
    });
}

/// How long one two-guest item may run in its guest (`timeout(1)` kills
/// it then), and how long a guest waits for the other at an item's start.
const PAIR_ITEM_SECS: u64 = 300;

/// The payload of each guest of the pair: the debug `rverbs` copied into
/// the guest's tmpfs (`stage_script`), then each script in turn, item `k`
/// in its own folder `item-k` of the guest's run folder (its
/// `RVERBS_RUN_DIR`; the other guest's is its `RVERBS_PEER_RUN_DIR`), with
/// its exit status, output, run time and interop rows there
/// (`status`, `log`, `secs`, `interop.tsv`). An item starts in both
/// guests together: each writes `go` in its item folder and waits for the
/// other's (at most [`PAIR_ITEM_SECS`] and a margin: the other may still
/// be in the item before); an item the other guest never reached is not
/// run (status 125). After each item the link is mended (eth0 up, the
/// other guest's neighbour entry dropped), since a script may cut it.
fn pair_payload(names: &[String], scripts: &[PathBuf], target_dir: &Path) -> Result<String> {
    let q = |p: &Path| util::shell_quote_os(p.as_os_str());
    let mut s = format!(
        "# Generated by `cargo xtask test` ({} two-guest items).
export RVERBS_TARGET_DIR={}
{}run0=$RVERBS_RUN_DIR
peer0=$RVERBS_PEER_RUN_DIR
failed=0
",
        scripts.len(),
        q(target_dir)?,
        stage_script(STAGE_DIR, Stage::Rverbs),
    );
    let wait_ticks = (PAIR_ITEM_SECS + 60) * 10;
    for (i, (name, script)) in names.iter().zip(scripts).enumerate() {
        let k = i + 1;
        s.push_str(&format!(
            r#"echo {banner}
d="$run0/item-{k}"
mkdir -p "$d" && : >"$d/go"
n=0
until [ -e "$peer0/item-{k}/go" ] || [ "$n" -ge {wait_ticks} ]; do
    n=$((n + 1))
    sleep 0.1
done
if [ -e "$peer0/item-{k}/go" ]; then
    started=$(date +%s)
    (export RVERBS_RUN_DIR="$d" RVERBS_PEER_RUN_DIR="$peer0/item-{k}" RVERBS_REPORT="$d/{INTEROP_FILE}"
     timeout -k 5 {limit} /bin/sh {script}; echo $? >"$d/status") 2>&1 | tee "$d/log"
    echo $(($(date +%s) - started)) >"$d/secs"
else
    echo "xtask: the other guest did not reach this item within {wait} s" | tee "$d/log"
    echo 125 >"$d/status"
fi
[ "$(cat "$d/status" 2>/dev/null)" = 0 ] || failed=1
ip link set eth0 up 2>/dev/null
ip neigh del "$RVERBS_PEER_ADDR" dev eth0 2>/dev/null
"#,
            banner = util::shell_quote(&format!("xtask: [{k}/{}] {name}", scripts.len())),
            limit = PAIR_ITEM_SECS,
            wait = wait_ticks / 10,
            script = q(script)?,
        ));
    }
    s.push_str("exit $failed\n");
    Ok(s)
}

/// One two-guest item's result in one guest, read from its item folder.
struct PairSide {
    /// The script's exit status (`None`: the guest never wrote it).
    status: Option<i32>,
    secs: Option<u64>,
    log: String,
}

fn read_pair_side(dir: &Path) -> PairSide {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    PairSide {
        status: read("status").and_then(|t| t.trim().parse().ok()),
        secs: read("secs").and_then(|t| t.trim().parse().ok()),
        log: read("log").unwrap_or_default(),
    }
}

/// Runs the `tests/vm2` scripts (named `names`) in one linked pair of
/// guests ([`pair_payload`]) and counts each as one item: passed if both
/// guests' runs of it exited 0. A failed item is added to `problems` with
/// what each guest reported; errors only for failures outside the items.
fn run_pair_items(
    vm_opts: &VmOptions,
    names: &[String],
    scripts: &[PathBuf],
    target_dir: &Path,
    matrix: &mut Vec<InteropRow>,
    problems: &mut Problems,
) -> Result<Counts> {
    let payload = pair_payload(names, scripts, target_dir)?;
    // Every item's time, the waits between them and the boot.
    let limit = Duration::from_secs((PAIR_ITEM_SECS + 30) * scripts.len() as u64 + 60);
    let vm = VmOptions {
        timeout: vm_opts.timeout.min(limit),
        ..vm_opts.clone()
    };
    let mut counts = Counts::default();
    // A pair whose set-up failed (a guest's rxe0, the link or the ready
    // barrier) before either command ran is booted once more: that is the
    // testbed failing, not the items. Anything else counts as it is.
    let mut attempt = 1;
    let (pair_dir, outcomes) = loop {
        let pair_dir = vm::new_run_dir()?;
        let outcomes = match vm::run_pair(&vm, &pair_dir, [&payload, &payload]) {
            Ok(o) => o,
            Err(e) => {
                say!("FAIL two-guest items: the pair did not run: {e:#}");
                for name in names {
                    problems.push(format!("{name} (the pair did not run: {e:#})"));
                }
                counts.failed += names.len() as u64;
                return Ok(counts);
            }
        };
        if vm::pair_setup_failed(&outcomes) && attempt == 1 {
            say!(
                "the pair failed in its set-up, before the items ran ({}); booting it once more (logs in {})",
                describe_pair(&outcomes),
                pair_dir.display()
            );
            attempt += 1;
            continue;
        }
        break (pair_dir, outcomes);
    };
    for (i, name) in names.iter().enumerate() {
        let item = format!("item-{}", i + 1);
        let sides = vm::Role::BOTH.map(|r| read_pair_side(&pair_dir.join(r.name()).join(&item)));
        let ok = sides.iter().all(|s| s.status == Some(0));
        // Both guests report their side of each run; a run is ok only if
        // both say so.
        let mut rows = Vec::new();
        for role in vm::Role::BOTH {
            rows.extend(read_interop(
                &pair_dir.join(role.name()).join(&item).join(INTEROP_FILE),
            ));
        }
        matrix.extend(merge_interop(rows));
        let secs = sides.iter().filter_map(|s| s.secs).max();
        let statuses: Vec<String> = vm::Role::BOTH
            .iter()
            .zip(&sides)
            .map(|(r, s)| match s.status {
                Some(st) => format!("guest {} ({}): exit status {st}", r.name(), r.addr()),
                None => format!("guest {} ({}): no exit status", r.name(), r.addr()),
            })
            .collect();
        say!(
            "{} {name} ({} s): {}; logs in {}",
            if ok { "PASS" } else { "FAIL" },
            secs.map_or("?".to_string(), |s| s.to_string()),
            statuses.join(", "),
            pair_dir.display()
        );
        if ok {
            counts.passed += 1;
            continue;
        }
        counts.failed += 1;
        for (r, side) in vm::Role::BOTH.iter().zip(&sides) {
            problems.tails.push((
                format!("[{}] {name}, guest {}", vm_opts.series, r.name()),
                last_lines(&side.log, TAIL_LINES),
            ));
        }
        problems.push(format!("{name} ({})", statuses.join(", ")));
    }
    if vm::pair_status(&outcomes) != 0 && counts.failed == 0 {
        // Every item passed but a guest did not end well (a crash after
        // the last item, a timeout): say so, as a failure of the pair.
        let what = describe_pair(&outcomes);
        say!(
            "FAIL two-guest pair: {what}; logs in {}",
            pair_dir.display()
        );
        problems.push(format!("two-guest pair ({what})"));
        counts.failed += 1;
    }
    if outcomes
        .iter()
        .any(|o| o.as_ref().is_ok_and(|o| o.kernel_problems))
    {
        say!("warning: a guest kernel logged problems during the two-guest items (see above)");
    }
    Ok(counts)
}

/// Each guest's outcome, for a message.
fn describe_pair(outcomes: &[Result<vm::VmOutcome>; 2]) -> String {
    vm::Role::BOTH
        .iter()
        .zip(outcomes)
        .map(|(r, o)| vm::describe_outcome(*r, o))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use std::path::PathBuf;

    use super::{last_lines, order_pair_scripts, pair_payload, INTEROP_FILE, PAIR_LAST, STAGE_DIR};

    #[test]
    fn a_pair_guest_copies_rverbs_alone_then_runs_each_script_in_its_folder() {
        let names = ["tests/vm2/x.sh".to_string(), "tests/vm2/y.sh".to_string()];
        let scripts = [
            PathBuf::from("/w/tests/vm2/x.sh"),
            PathBuf::from("/w/tests/vm2/y.sh"),
        ];
        let p = pair_payload(&names, &scripts, Path::new("/w/target")).unwrap();
        let target = p.find("\nexport RVERBS_TARGET_DIR=/w/target\n").unwrap();
        let stage = p.find(&format!("\nstage={STAGE_DIR}\n")).unwrap();
        let x = p
            .find("timeout -k 5 300 /bin/sh /w/tests/vm2/x.sh;")
            .unwrap();
        let y = p
            .find("timeout -k 5 300 /bin/sh /w/tests/vm2/y.sh;")
            .unwrap();
        assert!(target < stage && stage < x && x < y, "{p}");
        // Each item waits for the other guest in its own folder, and runs
        // with its own run folders and report.
        let go2 = p.find(r#"until [ -e "$peer0/item-2/go" ]"#).unwrap();
        assert!(x < go2 && go2 < y, "{p}");
        assert!(p.contains(r#"RVERBS_RUN_DIR="$d" RVERBS_PEER_RUN_DIR="$peer0/item-1""#));
        assert!(p.contains(&format!(r#"RVERBS_REPORT="$d/{INTEROP_FILE}""#)));
        assert!(p.contains("export RVERBS_BIN="), "{p}");
        assert!(!p.contains("RVERBS_IBVERBS_DIR="), "{p}");
        assert!(p.ends_with("exit $failed\n"));
        // The scripts the shell runs parse.
        let sh = std::process::Command::new("sh")
            .args(["-n", "-c", &p])
            .status()
            .unwrap();
        assert!(sh.success());
    }

    #[test]
    fn scripts_marked_last_go_after_the_others() {
        let dir = std::env::temp_dir().join(format!("xtask-order-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mk = |name: &str, text: &str| {
            let p = dir.join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let a = mk("a.sh", &format!("#!/bin/sh\n{PAIR_LAST}\n"));
        let b = mk("b.sh", "#!/bin/sh\n");
        let c = mk(
            "c.sh",
            "#!/bin/sh\n# mentions '# xtask: last in the pair' only\n",
        );
        let mut v = vec![a.clone(), c.clone(), b.clone()];
        order_pair_scripts(&mut v);
        assert_eq!(v, [b, c, a]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn last_lines_keeps_the_end_and_cuts_long_lines() {
        let log = (1..=40)
            .map(|i| format!("line {i}"))
            .collect::<Vec<_>>()
            .join("\n");
        let tail = last_lines(&log, 3);
        assert_eq!(tail, "line 38\nline 39\nline 40");
        assert_eq!(last_lines("a\nb", 30), "a\nb");
        assert_eq!(last_lines("", 5), "");
        let long = "x".repeat(500);
        assert_eq!(last_lines(&long, 1).len(), 200);
        let log = "ok a\nFAIL: b broke\nok c\nok d\nok e";
        assert_eq!(last_lines(log, 2), "FAIL: b broke\n...\nok d\nok e");
    }
}
