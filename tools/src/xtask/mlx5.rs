//! `cargo xtask mlx5`: the emulated mlx5 device (package `mlx5-emu`, an
//! `LD_PRELOAD` library that plays the mlx5 kernel driver) and the
//! scenarios rdma-core's own libibverbs + libmlx5 run against it, on the
//! host (no VM: the emulator is user space).
//!
//! Steps: build `mlx5-emu`; compile every `tests/mlx5-emu/c/*.c` with
//! `cc ... -libverbs` into `target/mlx5/` (test-only programs: that folder
//! is outside what the linkage check inspects, on purpose); run, each with
//! the library preloaded and bounded in time, rdma-core's `ibv_devices`,
//! `ibv_devinfo -v` and every compiled program. A program passes when it
//! exits 0, printed at least one `PASS ` line and no `FAIL ` line. Logs go
//! to `target/mlx5/logs/`. `cargo xtask test` runs the same items.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::util::{self, cargo_bin, describe, workspace_root};

/// The emulator's package.
pub const EMU_PACKAGE: &str = "mlx5-emu";
/// Time limit of one scenario process.
const ITEM_LIMIT: Duration = Duration::from_secs(60);

/// One scenario's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What ran.
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
    /// One line saying why (or how many steps passed).
    pub detail: String,
}

/// Runs `cmd` with its output in `log`, killed after `limit`. Returns the
/// exit code (None: killed or died by a signal) and the output.
fn run_bounded(cmd: &mut Command, log: &Path, limit: Duration) -> Result<(Option<i32>, String)> {
    let file = fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = file.try_clone()?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", describe(cmd)))?;
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = fs::read_to_string(log).unwrap_or_default();
    Ok((status.and_then(|s| s.code()), out))
}

/// The checks an rdma-core tool's output must pass: every needle present.
fn check_tool(
    out: &str,
    code: Option<i32>,
    needles: &[&str],
) -> std::result::Result<String, String> {
    match code {
        Some(0) => {}
        Some(c) => return Err(format!("exit status {c}")),
        None => {
            return Err(format!(
                "killed after {} s or by a signal",
                ITEM_LIMIT.as_secs()
            ))
        }
    }
    let missing: Vec<&str> = needles
        .iter()
        .copied()
        .filter(|n| !out.contains(n))
        .collect();
    if missing.is_empty() {
        Ok(format!("{} expected fields present", needles.len()))
    } else {
        Err(format!("missing from the output: {missing:?}"))
    }
}

/// A scenario program's verdict from its exit code and `PASS`/`FAIL` lines.
fn check_program(out: &str, code: Option<i32>) -> std::result::Result<String, String> {
    let passed = out.lines().filter(|l| l.starts_with("PASS ")).count();
    let failed: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL ")).collect();
    match (code, passed, failed.first()) {
        (_, _, Some(f)) => Err((*f).to_string()),
        (Some(0), 0, None) => Err("exit 0 but no PASS line".into()),
        (Some(0), n, None) => Ok(format!("{n} steps passed")),
        (Some(c), _, None) => Err(format!("exit status {c} ({passed} steps passed)")),
        (None, _, None) => Err(format!(
            "killed after {} s or by a signal ({passed} steps passed)",
            ITEM_LIMIT.as_secs()
        )),
    }
}

/// Builds the emulator and the scenario programs, runs every scenario,
/// prints one line per scenario and returns the outcomes.
pub fn run_all(target_dir: &Path) -> Result<Vec<Outcome>> {
    let ws = workspace_root();
    util::ensure_tool("cc", "gcc")?;
    util::ensure_tool("ibv_devinfo", "ibverbs-utils")?;
    for (file, pkg) in [
        ("/usr/include/infiniband/verbs.h", "libibverbs-dev"),
        ("/etc/libibverbs.d/mlx5.driver", "ibverbs-providers"),
    ] {
        if !Path::new(file).exists() {
            util::apt_install(&[pkg])?;
        }
    }
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["build", "-p", EMU_PACKAGE])
        .current_dir(&ws)
        .stdin(Stdio::null());
    say!("building the mlx5 emulator: {}", describe(&cmd));
    util::run(&mut cmd)?;
    let lib = target_dir.join("debug").join("libmlx5_emu.so");
    if !lib.is_file() {
        bail!("{} was not built", lib.display());
    }

    let out_dir = target_dir.join("mlx5");
    let logs = out_dir.join("logs");
    util::mkdir_p(&logs)?;
    // A tree of our own per run, so a stale one from another checkout
    // cannot interfere.
    let sysfs = out_dir.join("sysfs");
    let _ = fs::remove_dir_all(&sysfs);

    let mut outcomes = Vec::new();
    let mut record = |name: String, verdict: std::result::Result<String, String>, log: &Path| {
        let (ok, detail) = match verdict {
            Ok(d) => (true, d),
            Err(d) => (false, format!("{d} (log: {})", log.display())),
        };
        util::print_line(&format!(
            "mlx5: {:<40} {} {detail}",
            name,
            if ok { "ok  " } else { "FAIL" }
        ));
        outcomes.push(Outcome { name, ok, detail });
    };

    let preload = |c: &mut Command| {
        c.env("LD_PRELOAD", &lib)
            .env("MLX5_EMU_SYSFS", &sysfs)
            .env("SYSFS_PATH", &sysfs)
            .env_remove("MLX5_EMU_LOG");
    };

    // rdma-core's own tools.
    let tools: [(&str, &[&str], &[&str]); 2] = [
        ("ibv_devices", &[], &["mlx5_0"]),
        (
            "ibv_devinfo",
            &["-v", "-d", "mlx5_0"],
            &[
                "hca_id:\tmlx5_0",
                "transport:\t\t\tInfiniBand (0)",
                "vendor_id:\t\t\t0x02c9",
                "vendor_part_id:\t\t\t4119",
                "phys_port_cnt:\t\t\t1",
                "state:\t\t\tPORT_ACTIVE (4)",
                "GID[  0]:",
            ],
        ),
    ];
    for (tool, args, needles) in tools {
        let name = format!("rdma-core {tool} {}", args.join(" "));
        let log = logs.join(format!("{tool}.log"));
        let mut c = Command::new(tool);
        c.args(args);
        preload(&mut c);
        let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        record(
            name.trim_end().to_string(),
            check_tool(&out, code, needles),
            &log,
        );
    }

    // The scenario programs.
    let src_dir = ws.join("tests").join("mlx5-emu").join("c");
    let mut sources: Vec<PathBuf> = fs::read_dir(&src_dir)
        .with_context(|| format!("reading {}", src_dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    if sources.is_empty() {
        bail!("no scenario programs in {}", src_dir.display());
    }
    for src in sources {
        let stem = src
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let exe = out_dir.join(&stem);
        let log = logs.join(format!("{stem}.log"));
        let name = format!("rdma-core libmlx5: {stem}");
        let mut cc = Command::new("cc");
        cc.args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(&src)
            .arg("-libverbs");
        let (code, out) = run_bounded(&mut cc, &log, ITEM_LIMIT)?;
        if code != Some(0) {
            record(name, Err(format!("does not compile: {}", out.trim())), &log);
            continue;
        }
        let mut c = Command::new(&exe);
        preload(&mut c);
        let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        record(name, check_program(&out, code), &log);
    }
    Ok(outcomes)
}

/// Prints the closing summary and returns whether everything passed.
pub fn summary(outcomes: &[Outcome]) -> bool {
    let passed = outcomes.iter().filter(|o| o.ok).count();
    let failed = outcomes.len() - passed;
    util::print_line(&format!(
        "mlx5: rdma-core against the emulated ConnectX-5: {passed} passed, {failed} failed; \
         our provider: not built yet (issue 5, part 2); WQEs compared: 0"
    ));
    failed == 0
}

/// `cargo xtask mlx5`.
pub fn mlx5_command(target_dir: &Path) -> Result<bool> {
    let outcomes = run_all(target_dir)?;
    Ok(summary(&outcomes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_verdicts() {
        assert!(check_program("PASS open\nPASS pd\n", Some(0)).is_ok());
        assert!(check_program("PASS open\nFAIL pd: EINVAL\n", Some(1)).is_err());
        assert!(check_program("PASS open\nFAIL pd: EINVAL\n", Some(0)).is_err());
        assert!(check_program("", Some(0)).is_err());
        assert!(check_program("PASS open\n", Some(1)).is_err());
        assert!(check_program("PASS open\n", None).is_err());
    }

    #[test]
    fn tool_verdicts() {
        assert!(check_tool("hca_id:\tmlx5_0\n", Some(0), &["hca_id:\tmlx5_0"]).is_ok());
        assert!(check_tool("hca_id:\tmlx5_0\n", Some(0), &["vendor_id"]).is_err());
        assert!(check_tool("hca_id:\tmlx5_0\n", Some(255), &["hca_id"]).is_err());
        assert!(check_tool("hca_id:\tmlx5_0\n", None, &["hca_id"]).is_err());
    }
}
