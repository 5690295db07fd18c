//! `cargo xtask fuzz [--seconds N]`: runs every cargo-fuzz target of
//! `tests/fuzz` for N seconds each (libFuzzer's `-max_total_time`), two
//! at a time, and fails if any crashed, naming the crashing inputs.
//!
//! It installs nothing: the nightly toolchain (`rustup toolchain install
//! nightly`) and cargo-fuzz (`cargo install cargo-fuzz --locked`) must be
//! there, or it says which is missing. The targets are the files of
//! `tests/fuzz/fuzz_targets/`; their corpora grow in `tests/fuzz/corpus/`
//! and crashing inputs land in `tests/fuzz/artifacts/<target>/` (both
//! ignored by git). A crash is fixed with a plain `#[test]` on the decoder
//! holding the input's bytes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::util::{describe, workspace_root};

/// Total time of a run without `--seconds`, shared among the targets.
pub const DEFAULT_TOTAL_SECS: u64 = 90;
/// libFuzzer's limit on one input: a slower one is reported as a hang.
const INPUT_TIMEOUT_SECS: u64 = 10;
/// Lines of a failed target's output shown.
const TAIL_LINES: usize = 60;

/// Options of `cargo xtask fuzz`.
#[derive(Debug, Clone)]
pub struct FuzzOptions {
    /// Seconds per target; `None` shares [`DEFAULT_TOTAL_SECS`] among them.
    pub seconds: Option<u64>,
}

/// The fuzz crate.
fn fuzz_dir() -> PathBuf {
    workspace_root().join("tests").join("fuzz")
}

/// The target names: the `.rs` files of `fuzz_targets/`, sorted.
pub fn targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    let dir = fuzz_dir.join("fuzz_targets");
    let mut names = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "rs") {
            if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
                names.push(stem.to_string());
            }
        }
    }
    names.sort();
    if names.is_empty() {
        bail!("no fuzz targets in {}", dir.display());
    }
    Ok(names)
}

/// Seconds per target: `--seconds`, else the default total shared out
/// (at least 1).
pub fn per_target_secs(seconds: Option<u64>, targets: usize) -> Result<u64> {
    match seconds {
        Some(0) => bail!("--seconds must be at least 1"),
        Some(s) => Ok(s),
        None => Ok((DEFAULT_TOTAL_SECS / targets.max(1) as u64).max(1)),
    }
}

/// `cargo +nightly ARGS` through rustup's proxy (the `cargo` on PATH: the
/// one running us may be a toolchain's own binary, which knows no `+`).
fn nightly_cargo(args: &[&str]) -> Command {
    let mut c = Command::new("cargo");
    c.arg("+nightly").args(args).current_dir(workspace_root());
    // What `cargo run` set for us must not steer the nightly build.
    for var in ["CARGO", "RUSTC", "RUSTDOC", "RUSTFLAGS", "CARGO_TARGET_DIR"] {
        c.env_remove(var);
    }
    c
}

/// Fails with what to install unless nightly cargo and cargo-fuzz run.
fn check_tools() -> Result<()> {
    let ok = |mut c: Command| {
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok(nightly_cargo(&["--version"])) {
        bail!(
            "`cargo +nightly` does not run: cargo fuzz needs the nightly toolchain \
             (rustup toolchain install nightly)"
        );
    }
    if !ok(nightly_cargo(&["fuzz", "--version"])) {
        bail!("cargo-fuzz is not installed (cargo install cargo-fuzz --locked)");
    }
    Ok(())
}

/// The files in `dir` (none if it does not exist).
fn files_in(dir: &Path) -> BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default()
}

/// libFuzzer's closing `Done N runs in S second(s)` line, if any.
pub fn done_line(output: &str) -> Option<&str> {
    output.lines().rev().find(|l| l.starts_with("Done "))
}

/// Targets fuzzed at the same time: libFuzzer runs on one thread, and CI
/// machines have two cores.
const PARALLEL: usize = 2;

/// The folder of the fuzz binaries `cargo fuzz build` made:
/// `<target dir>/<host triple>/release` (cargo-fuzz builds for the host
/// triple, in release mode unless `--dev`). The target folder is cargo's
/// own answer for the fuzz crate's manifest, from the same folder and
/// environment `cargo fuzz` runs in.
fn binaries_dir(fuzz_dir: &Path) -> Result<PathBuf> {
    let manifest = fuzz_dir.join("Cargo.toml");
    let manifest = manifest.to_string_lossy();
    let mut meta = nightly_cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--manifest-path",
        &manifest,
    ]);
    let json: serde_json::Value =
        serde_json::from_str(&crate::util::output(&mut meta)?).context("cargo metadata JSON")?;
    let target = json["target_directory"]
        .as_str()
        .context("cargo metadata gave no target_directory")?;
    let version = crate::util::output(&mut nightly_cargo(&["-vV"]))?;
    let host = version
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .context("`cargo +nightly -vV` named no host triple")?;
    Ok(Path::new(target).join(host.trim()).join("release"))
}

/// What one target's run left.
struct Outcome {
    status: std::process::ExitStatus,
    /// Its stdout then stderr.
    text: String,
    /// Files new in its artifacts folder (crashing inputs).
    inputs: Vec<PathBuf>,
    secs: u64,
}

/// Runs one target's binary as `cargo fuzz run --fuzz-dir DIR
/// --debug-assertions NAME -- -max_total_time=S -timeout=T` did, without
/// cargo: the same arguments in the same order (`-artifact_prefix=` first,
/// the corpus folder last, both created first), from the workspace root,
/// with cargo-fuzz's `detect_odr_violation=0` added to `ASAN_OPTIONS`.
/// Output is captured.
fn run_target(bin_dir: &Path, dir: &Path, name: &str, secs: u64) -> Result<Outcome> {
    let artifacts = dir.join("artifacts").join(name);
    let corpus = dir.join("corpus").join(name);
    for d in [&artifacts, &corpus] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let before = files_in(&artifacts);
    let mut asan = std::env::var("ASAN_OPTIONS").unwrap_or_default();
    if !asan.is_empty() {
        asan.push(':');
    }
    asan.push_str("detect_odr_violation=0");
    // The trailing slash: libFuzzer prepends the prefix to the file name.
    let mut prefix = std::ffi::OsString::from("-artifact_prefix=");
    prefix.push(artifacts.join(""));
    let mut run = Command::new(bin_dir.join(name));
    run.arg(prefix)
        .arg(format!("-max_total_time={secs}"))
        .arg(format!("-timeout={INPUT_TIMEOUT_SECS}"))
        .arg(&corpus)
        .env("ASAN_OPTIONS", asan)
        .current_dir(workspace_root())
        .stdin(Stdio::null());
    let what = describe(&run);
    let started = Instant::now();
    let out = run
        .output()
        .with_context(|| format!("cannot start `{what}`"))?;
    let mut text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let inputs: Vec<PathBuf> = files_in(&artifacts).difference(&before).cloned().collect();
    // What `cargo fuzz run` printed after a crash: each input's `Debug`.
    for p in &inputs {
        let input = p.to_string_lossy();
        let dir_arg = dir.to_string_lossy();
        let mut fmt = nightly_cargo(&[
            "fuzz",
            "fmt",
            "--fuzz-dir",
            &dir_arg,
            "--debug-assertions",
            name,
            &input,
        ]);
        let what = describe(&fmt);
        if let Ok(o) = fmt.stdin(Stdio::null()).output() {
            text.push_str(&format!("{what}:\n"));
            text.push_str(&String::from_utf8_lossy(&o.stdout));
            text.push_str(&String::from_utf8_lossy(&o.stderr));
        }
    }
    Ok(Outcome {
        status: out.status,
        text,
        inputs,
        secs: started.elapsed().as_secs(),
    })
}

/// Prints one target's verdict (and on failure the end of its output,
/// each line prefixed with its name); true if it passed.
fn report(name: &str, o: &Outcome) -> bool {
    if o.status.success() && o.inputs.is_empty() {
        say!(
            "fuzz: {name}: ok ({})",
            done_line(&o.text).unwrap_or("no summary from libFuzzer")
        );
        return true;
    }
    let lines: Vec<&str> = o.text.lines().collect();
    for l in &lines[lines.len().saturating_sub(TAIL_LINES)..] {
        crate::util::print_line(&format!("  [{name}] {l}"));
    }
    say!("fuzz: {name}: FAILED ({}, after {} s)", o.status, o.secs);
    if o.inputs.is_empty() {
        say!("fuzz: {name}: no crashing input was saved (see the output above)");
    }
    for p in &o.inputs {
        say!("fuzz: {name}: crashing input: {}", p.display());
    }
    false
}

/// Runs every target, [`PARALLEL`] at a time, each for its full time;
/// true if none crashed.
pub fn fuzz_command(opts: &FuzzOptions) -> Result<bool> {
    let dir = fuzz_dir();
    let names = targets(&dir)?;
    let secs = per_target_secs(opts.seconds, names.len())?;
    check_tools()?;
    let dir_arg = dir.to_string_lossy().into_owned();
    say!(
        "fuzz: building {} targets in {} (nightly, debug assertions, ASan)",
        names.len(),
        dir.display()
    );
    let mut build = nightly_cargo(&[
        "fuzz",
        "build",
        "--fuzz-dir",
        &dir_arg,
        "--debug-assertions",
    ]);
    let what = describe(&build);
    let status = build
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("cannot start `{what}`"))?;
    if !status.success() {
        bail!("`{what}` failed ({status})");
    }
    // `cargo fuzz run` would run `cargo build` and `cargo run` again for
    // every target (about 2 s each); the binaries are built, so they run
    // directly, PARALLEL at a time, each target's output printed in one
    // piece when it ends.
    let bin_dir = binaries_dir(&dir)?;
    for name in &names {
        let bin = bin_dir.join(name);
        if !bin.is_file() {
            bail!("`{what}` left no {}", bin.display());
        }
    }
    let jobs = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, PARALLEL);
    say!("fuzz: {secs} s per target, {jobs} at a time");
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut failed = vec![false; names.len()];
    let mut error = None;
    std::thread::scope(|s| {
        for _ in 0..jobs {
            let tx = tx.clone();
            let (next, names, bin_dir, dir) = (&next, &names, &bin_dir, &dir);
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(name) = names.get(i) else { break };
                if tx.send((i, run_target(bin_dir, dir, name, secs))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, outcome) in rx {
            match outcome {
                Ok(o) => failed[i] = !report(&names[i], &o),
                Err(e) => {
                    say!("fuzz: {}: error: {e:#}", names[i]);
                    error.get_or_insert(e);
                }
            }
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    let crashed: Vec<&str> = names
        .iter()
        .zip(&failed)
        .filter(|(_, &f)| f)
        .map(|(n, _)| n.as_str())
        .collect();
    if crashed.is_empty() {
        say!("fuzz: {} targets, no crash", names.len());
        Ok(true)
    } else {
        say!(
            "fuzz: {} of {} targets crashed: {}. Reproduce with \
             `cargo +nightly fuzz run --fuzz-dir tests/fuzz TARGET INPUT`; \
             make each input a #[test] of its decoder once fixed.",
            crashed.len(),
            names.len(),
            crashed.join(", ")
        );
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_file_is_a_target() {
        let names = targets(&fuzz_dir()).unwrap();
        assert!(names.contains(&"netlink_reply".to_string()), "{names:?}");
        assert!(names.contains(&"mlx5_cqe".to_string()), "{names:?}");
        let manifest = std::fs::read_to_string(fuzz_dir().join("Cargo.toml")).unwrap();
        for n in &names {
            assert!(
                manifest.contains(&format!("name = \"{n}\"")),
                "{n} has no [[bin]] in tests/fuzz/Cargo.toml"
            );
        }
    }

    #[test]
    fn time_is_shared_out() {
        assert_eq!(per_target_secs(None, 10).unwrap(), 9);
        assert_eq!(per_target_secs(None, 200).unwrap(), 1);
        assert_eq!(per_target_secs(Some(60), 10).unwrap(), 60);
        assert!(per_target_secs(Some(0), 10).is_err());
    }

    #[test]
    fn libfuzzer_summary_line() {
        let out = "#1 INITED\n#200 DONE cov: 3\nDone 200 runs in 9 second(s)\n";
        assert_eq!(done_line(out), Some("Done 200 runs in 9 second(s)"));
        assert_eq!(done_line("crash"), None);
    }
}
