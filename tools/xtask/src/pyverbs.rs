//! rdma-core's own test suite as the judge of our libibverbs (issue 27,
//! item 3; issue 45): Debian's python3-pyverbs suite
//! (`/usr/share/doc/rdma-core/tests`, `--dev DEV`) runs twice, once on
//! rdma-core's libibverbs and provider and once with our `libibverbs.so.1`
//! first on `LD_LIBRARY_PATH`, each test under a time limit; the per-test
//! verdicts are compared (`tests/vm/lib/pyverbs_compare.py`) against the
//! differences listed with their reasons in an allowed-differences file
//! (`tests/mlx5-emu/pyverbs_allowed.tsv` on the emulated ConnectX-5,
//! `tests/vm/pyverbs_allowed.tsv` on rxe). Used by `cargo xtask mlx5`
//! (on the emulator) and `cargo xtask conform` (on any device).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::util;

/// Where Debian's python3-pyverbs puts the suite (gzipped modules).
const SUITE: &str = "/usr/share/doc/rdma-core/tests";
/// The interpreter pyverbs is installed for (not a pyenv one on PATH).
const PYTHON: &str = "/usr/bin/python3";
/// The whole run's limit, per library.
const RUN_LIMIT: Duration = Duration::from_secs(900);

/// Where and how the suite runs.
pub struct Suite<'a> {
    /// The device (`--dev`).
    pub dev: &'a str,
    /// The allowed-differences file.
    pub allowed: &'a Path,
    /// One test's limit in seconds (a test waiting for a completion that
    /// never comes is interrupted and counts as an error); 0: none.
    pub test_limit_secs: u32,
}

/// How the caller runs a command under a time limit, its output in a log:
/// (exit code, output).
pub type RunBounded = fn(&mut Command, &Path, Duration) -> Result<(Option<i32>, String)>;

/// One line of the summary: what ran, its verdict, its log.
pub type Item = (String, std::result::Result<String, String>, PathBuf);

/// Runs the suite on both libraries (`preload` sets the device's
/// environment on a command, the emulator's say; `ourlib` is the folder of
/// our `libibverbs.so.1`) and compares the verdicts. Files go to `out_dir`.
pub fn run(
    suite: &Suite<'_>,
    ws: &Path,
    out_dir: &Path,
    ourlib: &Path,
    preload: &dyn Fn(&mut Command),
    run_bounded: RunBounded,
) -> Result<Vec<Item>> {
    if !Path::new(SUITE).join("run_tests.py").exists() {
        util::apt_install(&["python3-pyverbs"])?;
    }
    let tests = unpack(out_dir)?;
    let recorder = ws.join("tests/vm/lib/pyverbs_verdicts.py");
    let mut items = Vec::new();
    let mut verdicts = Vec::new();
    for (side, lib) in [("rdma-core", None), ("ours", Some(ourlib))] {
        let tsv = out_dir.join(format!("pyverbs.{side}.tsv"));
        let log = out_dir.join(format!("pyverbs.{side}.log"));
        let running = PathBuf::from(format!("{}.running", tsv.display()));
        let _ = fs::remove_file(&running);
        let mut c = Command::new(PYTHON);
        c.arg(&recorder).arg(&tests).arg(&tsv).arg(suite.dev);
        if suite.test_limit_secs > 0 {
            c.arg(suite.test_limit_secs.to_string());
        }
        c
            // The same random draws per test on both libraries.
            .env("PYVERBS_SEED", "1");
        preload(&mut c);
        if let Some(dir) = lib {
            c.env("LD_LIBRARY_PATH", dir);
        }
        let (code, _) = run_bounded(&mut c, &log, RUN_LIMIT)?;
        let n = fs::read_to_string(&tsv).map_or(0, |t| t.lines().count());
        // unittest exits 1 when a test failed; anything else, or a test
        // left running (the interpreter died in it), is a failure.
        let verdict = if running.exists() {
            let t = fs::read_to_string(&running).unwrap_or_default();
            Err(format!(
                "the interpreter ended (exit {code:?}) in {}",
                t.trim()
            ))
        } else if !matches!(code, Some(0 | 1)) {
            Err(format!("exit status {code:?} after {n} verdicts"))
        } else if n == 0 {
            Err("no verdicts".into())
        } else {
            Ok(format!("{n} verdicts"))
        };
        let name = match side {
            "ours" => "pyverbs suite on our libibverbs".to_string(),
            _ => format!("pyverbs suite on {side}'s libibverbs"),
        };
        items.push((name, verdict, log));
        verdicts.push(tsv);
    }
    let log = out_dir.join("pyverbs.compare.log");
    let mut c = Command::new(PYTHON);
    c.arg(ws.join("tests/vm/lib/pyverbs_compare.py"))
        .arg(&verdicts[0])
        .arg(&verdicts[1])
        .arg(suite.allowed);
    let (code, out) = run_bounded(&mut c, &log, RUN_LIMIT)?;
    let last = out
        .lines()
        .rfind(|l| l.starts_with("pyverbs:"))
        .unwrap_or("no summary line")
        .to_string();
    let verdict = if code == Some(0) {
        Ok(last)
    } else {
        let unlisted: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("UNLISTED") || l.starts_with("MISSING"))
            .take(5)
            .collect();
        Err(format!("{last}; {}", unlisted.join("; ")))
    };
    items.push((
        "pyverbs verdicts: ours against rdma-core's".into(),
        verdict,
        log,
    ));
    Ok(items)
}

/// A fresh copy of the suite in `out_dir`, its gzipped modules unpacked.
fn unpack(out_dir: &Path) -> Result<PathBuf> {
    let dir = out_dir.join("pyverbs-tests");
    let _ = fs::remove_dir_all(&dir);
    util::mkdir_p(&dir)?;
    let mut gz = Vec::new();
    for entry in fs::read_dir(SUITE).with_context(|| format!("reading {SUITE}"))? {
        let path = entry?.path();
        let Some(name) = path.file_name() else {
            continue;
        };
        if !path.is_file() {
            continue;
        }
        let to = dir.join(name);
        fs::copy(&path, &to).with_context(|| format!("copying {}", path.display()))?;
        if to.extension().is_some_and(|e| e == "gz") {
            gz.push(to);
        }
    }
    if !gz.is_empty() {
        util::run(Command::new("gunzip").arg("-f").args(&gz))?;
    }
    if !dir.join("__init__.py").is_file() {
        bail!("{SUITE} holds no __init__.py: not rdma-core's test suite");
    }
    Ok(dir)
}
