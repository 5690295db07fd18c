//! `cargo xtask test`: host tests, then the VM suite in one VM.
//!
//! 1. `cargo test --workspace --exclude verbs-tests` on the host (stdout
//!    shown live and read for libtest's `test result:` lines).
//!    Then the emulated mlx5 items (`mlx5::run_all`, as `cargo xtask
//!    mlx5`): rdma-core's tools and scenario programs against the
//!    `mlx5-emu` library, each one test. `--no-host` skips both.
//! 2. `cargo build -p rverbs --examples --features tokio` and `cargo build -p rverbs-cli --bin rverbs`.
//! 3. `cargo test -p verbs-tests --no-run --message-format=json`, collecting
//!    the test executables.
//! 4. One VM boot runs a generated `payload.sh` that runs every executable
//!    (with `--test-threads=1` and the extra args), then every
//!    `tests/vm/*.sh` script, recording each exit status and output
//!    (`item-N.status`, `item-N.log`) in the run folder; the host reads them
//!    after the VM is gone.
//! 5. Every `tests/vm2/*.sh` script is one two-guest item: a linked pair
//!    of VMs (`vm::run_pair`, as `cargo xtask vm2`) runs the script in both
//!    guests (RVERBS_ROLE a/b, RVERBS_PEER_ADDR the other's address); it
//!    passes if both exit 0 and counts as one test.
//! 6. Prints per-item results and the closing line `N passed, N failed`.

use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

use crate::util::{self, cargo_bin, describe, print_line, shell_quote, workspace_root};
use crate::vm::{self, VmOptions};

/// The package holding the VM suite.
const VM_SUITE: &str = "verbs-tests";
/// Time limit of one two-guest item (boot of both guests included).
const VM2_ITEM_TIMEOUT: Duration = Duration::from_secs(300);
/// The package whose examples are built for the VM run.
const EXAMPLES_PACKAGE: &str = "rverbs";
/// Its features the examples need (`async_echo` needs `tokio`).
const EXAMPLES_FEATURES: &str = "tokio";

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

/// Passed and failed counts.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
    }
}

/// Sums libtest's `test result: ok. X passed; Y failed; ...` lines.
pub fn parse_libtest(output: &str) -> (Counts, usize) {
    let mut counts = Counts::default();
    let mut results = 0;
    for line in output.lines() {
        let Some((_, rest)) = line.split_once("test result:") else {
            continue;
        };
        results += 1;
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            if let [.., n, what] = words.as_slice() {
                let Ok(n) = n.parse::<u64>() else { continue };
                match *what {
                    "passed" => counts.passed += n,
                    "failed" => counts.failed += n,
                    _ => {}
                }
            }
        }
    }
    (counts, results)
}

/// The tests libtest reported as failed (`test NAME ... FAILED`), each with
/// the first lines of its captured output (`---- NAME stdout ----`), so the
/// end of a long run names what failed and why.
pub fn failed_tests(output: &str) -> Vec<String> {
    /// Lines of a failure's output kept for the summary.
    const KEEP: usize = 6;
    let mut names: Vec<String> = output
        .lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(str::to_owned)
        .collect();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let header = format!("---- {name} stdout ----");
            let detail: Vec<&str> = output
                .lines()
                .skip_while(|l| *l != header)
                .skip(1)
                .take_while(|l| !l.starts_with("---- ") && !l.is_empty())
                .take(KEEP)
                .collect();
            if detail.is_empty() {
                name
            } else {
                format!("{name}: {}", detail.join(" | "))
            }
        })
        .collect()
}

/// Counts for one item from its exit status and output: a failing item
/// whose output reports no failed test counts as one failure; a passing
/// item without libtest lines (a script) counts as one pass.
fn item_counts(success: bool, output: &str) -> Counts {
    let (mut counts, results) = parse_libtest(output);
    if !success && counts.failed == 0 {
        counts.failed += 1;
    }
    if success && results == 0 {
        counts.passed += 1;
    }
    counts
}

/// One package of `cargo metadata`.
struct Package {
    name: String,
    dir: PathBuf,
}

/// Workspace packages and the target directory, from `cargo metadata`.
/// The workspace's target directory.
pub fn target_dir() -> Result<PathBuf> {
    Ok(metadata()?.1)
}

fn metadata() -> Result<(Vec<Package>, PathBuf)> {
    let text = util::output(
        Command::new(cargo_bin())
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .current_dir(workspace_root()),
    )
    .context("cargo metadata failed (is the workspace's Cargo.toml valid?)")?;
    let json: Value = serde_json::from_str(&text).context("cargo metadata printed bad JSON")?;
    let mut packages = Vec::new();
    for p in json["packages"].as_array().into_iter().flatten() {
        let (Some(name), Some(manifest)) = (p["name"].as_str(), p["manifest_path"].as_str()) else {
            continue;
        };
        let dir = Path::new(manifest)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        packages.push(Package {
            name: name.to_string(),
            dir,
        });
    }
    let target = json["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    Ok((packages, target))
}

/// Runs a cargo command with stdout shown live and captured.
fn run_teed(cmd: &mut Command) -> Result<(bool, String)> {
    let what = describe(cmd);
    say!("running {what}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start `{what}`"))?;
    let mut captured = String::new();
    if let Some(out) = child.stdout.take() {
        let mut reader = BufReader::new(out);
        let mut raw = Vec::new();
        while reader.read_until(b'\n', &mut raw).unwrap_or(0) > 0 {
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches('\n');
            print_line(line);
            captured.push_str(line);
            captured.push('\n');
            raw.clear();
        }
    }
    let status = child
        .wait()
        .with_context(|| format!("cannot wait for `{what}`"))?;
    Ok((status.success(), captured))
}

/// Adds a target's standard library with rustup unless it is installed.
fn ensure_rust_target(target: &str) -> Result<()> {
    let installed = util::output(Command::new("rustup").args(["target", "list", "--installed"]))
        .map(|t| t.lines().any(|l| l.trim() == target))
        .unwrap_or(false);
    if !installed {
        say!("adding the {target} target with rustup");
        util::run(
            Command::new("rustup")
                .args(["target", "add", target])
                .stdin(Stdio::null()),
        )?;
    }
    Ok(())
}

/// The target whose type check stands in for the aarch64 machines mlx5 runs
/// on (BlueField, Grace, Graviton): the barriers differ there.
const AARCH64_TARGET: &str = "aarch64-unknown-linux-gnu";

/// `cargo fmt --check`, clippy with warnings denied, and `cargo check` of
/// the workspace for aarch64 (the target's standard library is added with
/// rustup when missing). Returns each check's name and verdict.
fn static_checks(ws: &Path) -> Vec<(String, bool)> {
    let mut results = Vec::new();
    if let Err(e) = ensure_rust_target(AARCH64_TARGET) {
        say!("rustup target add aarch64: FAILED: {e:#}");
        results.push(("rustup target add aarch64".to_string(), false));
    }
    let mut check = |name: &str, cmd: &mut Command| {
        cmd.current_dir(ws).stdin(Stdio::null());
        say!("{name}: {}", describe(cmd));
        let ok = match util::run(cmd) {
            Ok(()) => true,
            Err(e) => {
                say!("{name}: FAILED: {e:#}");
                false
            }
        };
        say!("{name}: {}", if ok { "ok" } else { "FAILED" });
        results.push((name.to_string(), ok));
    };
    check(
        "cargo fmt --check",
        Command::new(cargo_bin()).args(["fmt", "--all", "--check"]),
    );
    check(
        "clippy -D warnings",
        Command::new(cargo_bin()).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--quiet",
            "--",
            "-D",
            "warnings",
        ]),
    );
    check(
        "cargo doc -D warnings",
        Command::new(cargo_bin())
            .args(["doc", "--no-deps", "--workspace", "--quiet"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    );
    // docs.rs builds rverbs with its tokio feature (package.metadata.docs.rs).
    check(
        "cargo doc -D warnings (tokio feature)",
        Command::new(cargo_bin())
            .args(["doc", "--no-deps", "--workspace", "--quiet"])
            .args(["--features", "rverbs/tokio"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    );
    // Verification builds the packages as registry crates, which cargo
    // never rebuilds for a changed source at an unchanged version: it gets
    // a target folder of its own, emptied first, and no unpacked copy of
    // an earlier run's sources.
    forget_packaged_sources();
    let verify_dir = ws.join("target/package-verify");
    let _ = std::fs::remove_dir_all(&verify_dir);
    let mut package = Command::new(cargo_bin());
    package
        .args(["package", "--quiet", "--allow-dirty"])
        .env("CARGO_TARGET_DIR", &verify_dir);
    for p in PUBLISHED {
        package.args(["-p", p]);
    }
    check("cargo package (published crates)", &mut package);
    check(
        "aarch64 type check",
        Command::new(cargo_bin()).args([
            "check",
            "--workspace",
            "--all-targets",
            "--quiet",
            "--target",
            AARCH64_TARGET,
        ]),
    );
    match msrv_command(ws) {
        Ok(mut cmd) => check("MSRV check", &mut cmd),
        Err(e) => {
            say!("MSRV check: FAILED: {e:#}");
            results.push(("MSRV check".to_string(), false));
        }
    }
    results
}

/// The target of the static `rverbs` (`.cargo/config.toml` makes it
/// non-PIE and statically linked).
const STATIC_TARGET: &str = "x86_64-unknown-linux-musl";

/// Builds `rverbs` for [`STATIC_TARGET`] (adding the target with rustup
/// when missing) and checks the result is fully static and names no
/// rdma-core library. Returns its path.
fn static_rverbs(ws: &Path, target_dir: &Path) -> Result<PathBuf> {
    ensure_rust_target(STATIC_TARGET)?;
    let mut cmd = Command::new(cargo_bin());
    cmd.args([
        "build",
        "-p",
        "rverbs-cli",
        "--bin",
        "rverbs",
        "--target",
        STATIC_TARGET,
    ])
    .current_dir(ws)
    .stdin(Stdio::null());
    say!("static rverbs: {}", describe(&cmd));
    util::run(&mut cmd)?;
    let path = target_dir.join(STATIC_TARGET).join("debug/rverbs");
    if !crate::linkage::fully_static(&path)? {
        anyhow::bail!("{} has an interpreter or a dynamic section", path.display());
    }
    let names = crate::linkage::inspect(&path)?;
    if !names.is_empty() {
        anyhow::bail!("{}: {}", path.display(), names.join("; "));
    }
    Ok(path)
}

/// Removes what earlier `cargo package` runs unpacked of our own crates.
/// Verification builds each package against its siblings from a local
/// registry in the target folder; cargo unpacks those into
/// `$CARGO_HOME/registry/src/-<hash of that path>/NAME-VERSION` and reuses
/// an unpacked copy whose version did not change, so a second run from the
/// same checkout path would verify against the first run's sources. Local
/// registries are the folders whose name starts with `-`; only our package
/// names are touched.
fn forget_packaged_sources() {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return;
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return;
    };
    for reg in registries.flatten() {
        if !reg.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let Ok(crates) = std::fs::read_dir(reg.path()) else {
            continue;
        };
        for c in crates.flatten() {
            let name = c.file_name().to_string_lossy().into_owned();
            let ours = PUBLISHED.iter().any(|p| {
                name.strip_prefix(p)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|ch: char| ch.is_ascii_digit()))
            });
            if ours {
                let _ = std::fs::remove_dir_all(c.path());
            }
        }
    }
}

/// The packages published to crates.io, in dependency order.
const PUBLISHED: &[&str] = &[
    "rverbs-abi",
    "rverbs-netlink",
    "rverbs-provider",
    "rverbs-rxe",
    "rverbs-mlx5",
    "rverbs",
    "rverbs-cli",
];

/// The workspace's declared `rust-version` (`[workspace.package]`).
fn declared_msrv(ws: &Path) -> Result<String> {
    let manifest = std::fs::read_to_string(ws.join("Cargo.toml"))?;
    manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
        .context("no rust-version in the workspace's Cargo.toml")
}

/// Prepares the MSRV check of the published crates (libraries and the
/// `rverbs` binary, default features: what a user builds; the `tokio`
/// feature follows tokio's own MSRV, and dev-dependencies are ours alone):
/// installs the declared toolchain with rustup
/// when missing, copies the workspace's files (tracked and untracked, not
/// ignored) to `target/msrv/ws`, resolves its dependencies there for that
/// Rust version (cargo's `fallback` resolver, so a dependency whose newest
/// release needs a newer Rust is taken at an older release; the real
/// Cargo.lock is untouched), and returns the `cargo +MSRV check` to run.
fn msrv_command(ws: &Path) -> Result<Command> {
    let msrv = declared_msrv(ws)?;
    let has = util::output(Command::new("rustup").args(["toolchain", "list"]))
        .map(|t| t.lines().any(|l| l.starts_with(&format!("{msrv}-"))))
        .unwrap_or(false);
    if !has {
        say!("MSRV check: installing Rust {msrv} with rustup");
        util::run(
            Command::new("rustup")
                .args(["toolchain", "install", &msrv, "--profile", "minimal"])
                .stdin(Stdio::null()),
        )?;
    }
    let base = ws.join("target/msrv");
    let copy = base.join("ws");
    if copy.exists() {
        std::fs::remove_dir_all(&copy)?;
    }
    let files = util::output(
        Command::new("git")
            .args(["ls-files", "-co", "--exclude-standard"])
            .current_dir(ws),
    )?;
    for f in files.lines().filter(|f| !f.is_empty()) {
        let (from, to) = (ws.join(f), copy.join(f));
        if !from.is_file() {
            continue;
        }
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(&from, &to).with_context(|| format!("copying {f}"))?;
    }
    util::run(
        Command::new(cargo_bin())
            .args(["update", "--quiet"])
            .env("CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS", "fallback")
            .current_dir(&copy)
            .stdin(Stdio::null()),
    )?;
    let mut cmd = Command::new("cargo");
    // By manifest path: the checks run from the workspace root.
    cmd.arg(format!("+{msrv}"))
        .args(["check", "--quiet"])
        .args(PUBLISHED.iter().flat_map(|p| ["-p", p]))
        .arg("--manifest-path")
        .arg(copy.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(base.join("target"))
        // rustup's proxy picks the toolchain from `+MSRV`, not from the
        // cargo that runs xtask.
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC");
    Ok(cmd)
}

/// A test executable of the VM suite.
struct TestBinary {
    name: String,
    path: PathBuf,
}

/// Builds the VM suite and returns its test executables.
fn build_vm_suite() -> Result<Vec<TestBinary>> {
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["test", "-p", VM_SUITE, "--no-run", "--message-format=json"])
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let what = describe(&cmd);
    say!("building the VM suite: {what}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{what}`"))?;
    let mut binaries = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.context("cannot read cargo's output")?;
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                print_line(&line);
                continue;
            };
            match msg["reason"].as_str() {
                Some("compiler-artifact") if msg["profile"]["test"].as_bool() == Some(true) => {
                    if let Some(exe) = msg["executable"].as_str() {
                        let name = msg["target"]["name"].as_str().unwrap_or("?").to_string();
                        binaries.push(TestBinary {
                            name,
                            path: PathBuf::from(exe),
                        });
                    }
                }
                Some("compiler-message") => {
                    if let Some(text) = msg["message"]["rendered"].as_str() {
                        eprint!("{text}");
                    }
                }
                _ => {}
            }
        }
    }
    let status = child.wait().context("cannot wait for cargo")?;
    if !status.success() {
        anyhow::bail!("`{what}` failed ({status})");
    }
    Ok(binaries)
}

/// Scripts run in the VM after the test binaries: `tests/vm/*.sh`.
fn vm_scripts() -> Vec<PathBuf> {
    scripts_in("vm")
}

/// The `*.sh` files of `tests/<sub>/` (not its subfolders), sorted.
fn scripts_in(sub: &str) -> Vec<PathBuf> {
    let dir = workspace_root().join("tests").join(sub);
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "sh"))
                .collect()
        })
        .unwrap_or_default();
    scripts.sort();
    scripts
}

/// One thing the VM runs.
struct Item {
    name: String,
    /// Shell words of the command.
    command: String,
    /// Folder to run it in.
    dir: PathBuf,
    /// Extra environment, as `K=V` shell words.
    env: String,
}

/// The payload script that runs every item and records its status and log.
fn payload_script(items: &[Item], run_dir: &Path, target_dir: &Path) -> Result<String> {
    let q = |p: &Path| -> Result<String> { util::shell_quote_os(p.as_os_str()) };
    let mut s = String::from("# Generated by `cargo xtask test`.\n");
    s.push_str(&format!("RUN={}\n", q(run_dir)?));
    s.push_str(&format!("export RVERBS_TARGET_DIR={}\n", q(target_dir)?));
    s.push_str(&format!("export RVERBS_REPORT=\"$RUN/{INTEROP_FILE}\"\n"));
    s.push_str("failed=0\n");
    for (i, item) in items.iter().enumerate() {
        let n = i + 1;
        s.push_str(&format!(
            "echo {}\n",
            shell_quote(&format!("xtask: [{n}/{}] {}", items.len(), item.name))
        ));
        s.push_str(&format!(
            "(cd {dir} && {{ env {env} {cmd}; echo $? >\"$RUN/item-{n}.status\"; }}) 2>&1 | tee \"$RUN/item-{n}.log\"\n",
            dir = q(&item.dir)?,
            env = item.env,
            cmd = item.command,
        ));
        s.push_str(&format!(
            "[ \"$(cat \"$RUN/item-{n}.status\" 2>/dev/null)\" = 0 ] || failed=1\n"
        ));
    }
    s.push_str("exit $failed\n");
    Ok(s)
}

/// `cargo xtask test`. Returns whether everything passed.
/// Installs (as root, via apt) the reference tools and headers the suites
/// use when they are missing: rdma-core's ibv_devinfo (the oracle of the
/// query tests), rping (the rdma_cm interop peer), libibverbs-dev (the linkage check's positive control),
/// the kernel uapi headers and a C compiler (the ABI layout probe).
fn ensure_reference_tools() -> Result<()> {
    util::ensure_tool("ibv_devinfo", "ibverbs-utils")?;
    // tests/vm/rping.sh, tests/vm/udaddy.sh: rdma-core's rping and udaddy,
    // the rdma_cm interop peers (both in rdmacm-utils).
    util::ensure_tool("rping", "rdmacm-utils")?;
    util::ensure_tool("cc", "gcc")?;
    util::ensure_tool("readelf", "binutils")?;
    for (file, pkg) in [
        ("/usr/include/rdma/ib_user_verbs.h", "linux-libc-dev"),
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        ("/etc/libibverbs.d/rxe.driver", "ibverbs-providers"),
    ] {
        if !Path::new(file).exists() {
            util::apt_install(&[pkg])?;
        }
    }
    Ok(())
}

/// `cargo build` of the examples the VM scripts run (test and demo).
fn examples_build(ws: &Path) -> Command {
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["build", "-p", EXAMPLES_PACKAGE, "--examples"])
        .args(["--features", EXAMPLES_FEATURES])
        .current_dir(ws)
        .stdin(Stdio::null());
    cmd
}

/// `cargo xtask demo`: builds the examples and runs `rc_client_server`
/// (server and client, two processes) in the rxe VM.
pub fn demo_command(vm: &crate::vm::VmOptions) -> Result<i32> {
    let ws = workspace_root();
    let (_, target_dir) = metadata()?;
    let mut cmd = examples_build(&ws);
    say!("building examples: {}", describe(&cmd));
    util::run(&mut cmd)?;
    let script = format!(
        "RVERBS_TARGET_DIR={} exec sh tests/vm/rc_client_server.sh",
        util::shell_quote_os(target_dir.as_os_str())?
    );
    crate::vm::vm_command(vm, &["sh".into(), "-c".into(), script.into()])
}

pub fn test_command(opts: &TestOptions) -> Result<bool> {
    ensure_reference_tools()?;
    let ws = workspace_root();
    let (packages, target_dir) = metadata()?;
    let has = |name: &str| packages.iter().any(|p| p.name == name);
    let mut total = Counts::default();
    let mut problems: Vec<String> = Vec::new();
    let mut matrix: Vec<(String, Vec<InteropRow>)> = Vec::new();

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

    // (d) Examples of the verbs package, for the VM scripts.
    if has(EXAMPLES_PACKAGE) {
        let mut cmd = examples_build(&ws);
        say!("building examples: {}", describe(&cmd));
        if let Err(e) = util::run(&mut cmd) {
            say!("error: {e:#}");
            problems.push(format!("{EXAMPLES_PACKAGE} examples build"));
            total.failed += 1;
        }
    } else {
        say!("warning: no package {EXAMPLES_PACKAGE}: no examples built");
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

    // The fully static rverbs the README promises (musl, non-PIE), for
    // tests/vm/static.sh: built, then checked to have no interpreter, no
    // dynamic section and no rdma-core name in it.
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
    if let Some(binaries) = binaries {
        for (k, series) in opts.kernels.iter().enumerate() {
            let vm = VmOptions {
                series: series.clone(),
                ..opts.vm.clone()
            };
            let mut rows = Vec::new();
            let before = problems.len();
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
            for p in &mut problems[before..] {
                *p = format!("[{series}] {p}");
            }
            say!(
                "kernel {series}: {} passed, {} failed",
                counts.passed,
                counts.failed
            );
            total.add(counts);
            matrix.push((series.clone(), rows));
        }
    }

    for (series, rows) in &matrix {
        say!("kernel {series}:");
        print_interop(rows);
    }
    if problems.is_empty() {
        say!("all passed");
    } else {
        say!("failed: {}", problems.join(", "));
    }
    print_line(&format!("{} passed, {} failed", total.passed, total.failed));
    Ok(problems.is_empty() && total.failed == 0)
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
    problems: &mut Vec<String>,
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
        for script in vm_scripts() {
            let rel = script.strip_prefix(&ws).unwrap_or(&script).to_path_buf();
            items.push(Item {
                name: rel.display().to_string(),
                command: format!("/bin/sh {}", util::shell_quote_os(script.as_os_str())?),
                dir: ws.clone(),
                env: String::new(),
            });
        }
        say!(
            "running {} item(s) in one VM ({} test executable(s), {} script(s))",
            items.len(),
            binaries.len(),
            items.len() - binaries.len()
        );
        let run_dir = vm::new_run_dir()?;
        let payload = payload_script(&items, &run_dir, target_dir)?;
        match vm::run(vm_opts, &run_dir, &payload) {
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
                    let ok = status == Some(0);
                    let counts = item_counts(ok, &log);
                    let verdict = match status {
                        Some(0) => "PASS".to_string(),
                        Some(s) => format!("FAIL (exit status {s})"),
                        None => "FAIL (no exit status recorded)".to_string(),
                    };
                    say!(
                        "{verdict} {}: {} passed, {} failed",
                        item.name,
                        counts.passed,
                        counts.failed
                    );
                    if !ok {
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
                total.failed += 1;
            }
        }
    }

    // (e) Two-guest items: one linked pair of VMs per tests/vm2 script.
    let pair_scripts = scripts_in("vm2");
    if !pair_scripts.is_empty() {
        say!(
            "running {} two-guest item(s), each in a linked pair of VMs",
            pair_scripts.len()
        );
        let mut pair_total = Counts::default();
        for script in &pair_scripts {
            let name = script
                .strip_prefix(&ws)
                .unwrap_or(script)
                .display()
                .to_string();
            let ok = run_pair_item(vm_opts, &name, script, target_dir, matrix, problems)?;
            if ok {
                pair_total.passed += 1;
            } else {
                pair_total.failed += 1;
            }
        }
        say!(
            "two-guest items: {} passed, {} failed",
            pair_total.passed,
            pair_total.failed
        );
        total.add(pair_total);
    }
    Ok(total)
}

/// File (in a run directory, named to scripts by `RVERBS_REPORT`) where
/// interop scripts append one `mix<TAB>transport<TAB>size<TAB>result` line
/// per run.
const INTEROP_FILE: &str = "interop.tsv";

/// One row of the interop matrix.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InteropRow {
    mix: String,
    transport: String,
    size: String,
    result: String,
}

/// The rows a script reported (none if it reported nothing).
fn read_interop(path: &Path) -> Vec<InteropRow> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split('\t');
            Some(InteropRow {
                mix: f.next()?.to_string(),
                transport: f.next()?.to_string(),
                size: f.next()?.to_string(),
                result: f.next()?.to_string(),
            })
        })
        .collect()
}

/// Merges rows reported for the same run by both guests of a pair: the
/// run is ok only if every report of it is.
fn merge_interop(rows: Vec<InteropRow>) -> Vec<InteropRow> {
    let mut out: Vec<InteropRow> = Vec::new();
    for r in rows {
        match out
            .iter_mut()
            .find(|o| o.mix == r.mix && o.transport == r.transport && o.size == r.size)
        {
            Some(o) if o.result == "ok" => o.result = r.result,
            Some(_) => {}
            None => out.push(r),
        }
    }
    out
}

/// Prints the interop matrix (mix, transport, size, result) of the run.
fn print_interop(rows: &[InteropRow]) {
    if rows.is_empty() {
        return;
    }
    let w = |f: fn(&InteropRow) -> &str, title: &str| {
        rows.iter()
            .map(|r| f(r).len())
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let (wm, wt, ws) = (
        w(|r| &r.mix, "mix"),
        w(|r| &r.transport, "transport"),
        w(|r| &r.size, "size"),
    );
    let failed = rows.iter().filter(|r| r.result != "ok").count();
    say!("interop matrix ({} runs, {failed} failed):", rows.len());
    print_line(&format!(
        "  {:<wm$}  {:<wt$}  {:>ws$}  result",
        "mix", "transport", "size"
    ));
    for r in rows {
        print_line(&format!(
            "  {:<wm$}  {:<wt$}  {:>ws$}  {}",
            r.mix, r.transport, r.size, r.result
        ));
    }
}

/// Runs one `tests/vm2` script in both guests of a linked pair. Returns
/// whether both exited 0 (a failure is added to `problems` with what each
/// guest reported); errors only for failures outside the item.
fn run_pair_item(
    vm_opts: &VmOptions,
    name: &str,
    script: &Path,
    target_dir: &Path,
    matrix: &mut Vec<InteropRow>,
    problems: &mut Vec<String>,
) -> Result<bool> {
    let payload = format!(
        "# Generated by `cargo xtask test` (two-guest item {name}).
         export RVERBS_TARGET_DIR={}
         export RVERBS_REPORT=\"$RVERBS_RUN_DIR/{INTEROP_FILE}\"
         exec /bin/sh {}
",
        util::shell_quote_os(target_dir.as_os_str())?,
        util::shell_quote_os(script.as_os_str())?,
    );
    let vm = VmOptions {
        timeout: vm_opts.timeout.min(VM2_ITEM_TIMEOUT),
        ..vm_opts.clone()
    };
    say!("two-guest item {name}");
    // A pair whose set-up failed (a guest's rxe0, the link or the ready
    // barrier) before either command ran is booted once more: that is the
    // testbed failing, not the item. Anything else counts as it is.
    let mut attempt = 1;
    let (pair_dir, started, outcomes) = loop {
        let pair_dir = vm::new_run_dir()?;
        let started = Instant::now();
        let outcomes = match vm::run_pair(&vm, &pair_dir, [&payload, &payload]) {
            Ok(o) => o,
            Err(e) => {
                say!("FAIL {name}: the pair did not run: {e:#}");
                problems.push(format!("{name} (the pair did not run: {e:#})"));
                return Ok(false);
            }
        };
        if vm::pair_setup_failed(&outcomes) && attempt == 1 {
            let statuses: Vec<String> = vm::Role::BOTH
                .iter()
                .zip(&outcomes)
                .map(|(r, o)| vm::describe_outcome(*r, o))
                .collect();
            say!(
                "{name}: the pair failed in its set-up, before the command ran ({}); booting it once more (logs in {})",
                statuses.join(", "),
                pair_dir.display()
            );
            attempt += 1;
            continue;
        }
        break (pair_dir, started, outcomes);
    };
    let secs = started.elapsed().as_secs_f64();
    let ok = vm::pair_status(&outcomes) == 0;
    // Both guests report their side of each run; a run is ok only if both say so.
    let mut rows = Vec::new();
    for role in vm::Role::BOTH {
        rows.extend(read_interop(&pair_dir.join(role.name()).join(INTEROP_FILE)));
    }
    matrix.extend(merge_interop(rows));
    let statuses: Vec<String> = vm::Role::BOTH
        .iter()
        .zip(&outcomes)
        .map(|(r, o)| vm::describe_outcome(*r, o))
        .collect();
    say!(
        "{} {name} ({secs:.0} s): {}; logs in {}",
        if ok { "PASS" } else { "FAIL" },
        statuses.join(", "),
        pair_dir.display()
    );
    if !ok {
        // Where each guest was when it ended: its console's last line.
        let last: Vec<String> = vm::Role::BOTH
            .iter()
            .map(|r| {
                let log = std::fs::read_to_string(pair_dir.join(r.name()).join("console.log"))
                    .unwrap_or_default();
                // Skip the kernel's own lines ("[   21.9] reboot: ...").
                let line = log
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty() && !l.starts_with('['))
                    .unwrap_or("");
                let line: String = line.trim().chars().take(120).collect();
                format!("{} last printed {line:?}", r.name())
            })
            .collect();
        problems.push(format!(
            "{name} ({}; {})",
            statuses.join(", "),
            last.join(", ")
        ));
    }
    if outcomes
        .iter()
        .any(|o| o.as_ref().is_ok_and(|o| o.kernel_problems))
    {
        say!("warning: a guest kernel logged problems during {name} (see above)");
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interop_rows_merge_by_run() {
        let row = |m: &str, r: &str| InteropRow {
            mix: m.into(),
            transport: "rc".into(),
            size: "64".into(),
            result: r.into(),
        };
        let merged = merge_interop(vec![
            row("x", "ok"),
            row("y", "ok"),
            row("x", "FAIL (exit 1)"),
            row("y", "ok"),
        ]);
        assert_eq!(merged, vec![row("x", "FAIL (exit 1)"), row("y", "ok")]);
        let dir = std::env::temp_dir().join(format!("interop-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(INTEROP_FILE);
        std::fs::write(&f, "a\trc\t64\tok\nmalformed line\nb\tud\t1024\tFAIL (x)\n").unwrap();
        let rows = read_interop(&f);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].result, "FAIL (x)");
        assert!(read_interop(&dir.join("missing")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parses_libtest_lines() {
        let out = "running 2 tests\n\
            test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\
            test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let (c, n) = parse_libtest(out);
        assert_eq!(n, 2);
        assert_eq!(
            c,
            Counts {
                passed: 5,
                failed: 1
            }
        );
    }

    #[test]
    fn names_failed_tests_with_their_first_lines() {
        let out = "running 3 tests\n\
            test a::ok ... ok\n\
            test a::bad ... FAILED\n\
            test b::worse ... FAILED\n\
            \n\
            failures:\n\
            \n\
            ---- a::bad stdout ----\n\
            thread 'a::bad' panicked at src/a.rs:3:5:\n\
            assertion failed: x\n\
            \n\
            failures:\n\
            \x20   a::bad\n\
            \x20   b::worse\n\
            test result: FAILED. 1 passed; 2 failed;\n";
        assert_eq!(
            failed_tests(out),
            vec![
                "a::bad: thread 'a::bad' panicked at src/a.rs:3:5: | assertion failed: x"
                    .to_string(),
                "b::worse".to_string(),
            ]
        );
        assert!(failed_tests("test result: ok. 2 passed; 0 failed;\n").is_empty());
    }

    #[test]
    fn item_counting() {
        assert_eq!(
            item_counts(true, "hello\n"),
            Counts {
                passed: 1,
                failed: 0
            }
        );
        assert_eq!(
            item_counts(false, "segfault\n"),
            Counts {
                passed: 0,
                failed: 1
            }
        );
        let zero = "test result: ok. 0 passed; 0 failed; 0 ignored;\n";
        assert_eq!(item_counts(true, zero), Counts::default());
    }
}
