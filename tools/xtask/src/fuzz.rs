//! `cargo xtask fuzz [--seconds N]`: runs every cargo-fuzz target of
//! `tests/fuzz` for N seconds each (libFuzzer's `-max_total_time`), one
//! after the other, and fails if any crashed, naming the crashing inputs.
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

/// Runs every target; true if none crashed.
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
    say!("fuzz: {secs} s per target");
    let mut crashed = Vec::new();
    for name in &names {
        let artifacts = dir.join("artifacts").join(name);
        let before = files_in(&artifacts);
        let max_time = format!("-max_total_time={secs}");
        let timeout = format!("-timeout={INPUT_TIMEOUT_SECS}");
        let mut run = nightly_cargo(&[
            "fuzz",
            "run",
            "--fuzz-dir",
            &dir_arg,
            "--debug-assertions",
            name,
            "--",
            &max_time,
            &timeout,
        ]);
        let what = describe(&run);
        let started = Instant::now();
        let out = run
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("cannot start `{what}`"))?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let inputs: Vec<PathBuf> = files_in(&artifacts).difference(&before).cloned().collect();
        if out.status.success() && inputs.is_empty() {
            say!(
                "fuzz: {name}: ok ({})",
                done_line(&text).unwrap_or("no summary from libFuzzer")
            );
            continue;
        }
        let lines: Vec<&str> = text.lines().collect();
        for l in &lines[lines.len().saturating_sub(TAIL_LINES)..] {
            crate::util::print_line(&format!("  {l}"));
        }
        say!(
            "fuzz: {name}: FAILED ({}, after {} s)",
            out.status,
            started.elapsed().as_secs()
        );
        if inputs.is_empty() {
            say!("fuzz: {name}: no crashing input was saved (see the output above)");
        }
        for p in &inputs {
            say!("fuzz: {name}: crashing input: {}", p.display());
        }
        crashed.push(name.clone());
    }
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
