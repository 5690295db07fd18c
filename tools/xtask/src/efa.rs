//! `cargo xtask efa`: the emulated EFA device (package `efa-emu`, an
//! `LD_PRELOAD` library that plays the EFA kernel driver) and the
//! scenarios rdma-core's own libibverbs + libefa run against it, on the
//! host (no VM: the emulator is user space).
//!
//! Steps: build `efa-emu`; run rdma-core's `ibv_devinfo -v -d efa_0`
//! with it preloaded (the device must be found, claimed by libefa and
//! report Amazon's vendor id); compile every `tests/efa-emu/c/*.c` with
//! `cc ... -libverbs -lefa` into `target/efa/` (test-only programs,
//! outside what the linkage check inspects) and run each, preloaded and
//! bounded in time. A program passes when it exits 0, printed at least
//! one `PASS ` line and no `FAIL ` line. Logs go to `target/efa/logs/`.
//! `cargo xtask test` runs the same items.
//!
//! What is not here yet (issue 46): the device model's data path, our
//! provider on the emulated device, and the comparisons with libefa.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Result};

use crate::mlx5::{c_sources, check_program, compile_c, pass_lines, run_bounded, Group, Outcome};
use crate::util::{self, cargo_bin, describe, workspace_root};

/// The emulator's package.
pub const EMU_PACKAGE: &str = "efa-emu";
/// Time limit of one scenario process.
const ITEM_LIMIT: Duration = Duration::from_secs(60);

/// What `ibv_devinfo -v -d efa_0` must print on the emulated device.
const DEVINFO_NEEDLES: [&str; 4] = [
    "hca_id:\tefa_0",
    "vendor_id:\t\t\t0x1d0f",
    "max_sge_rd:\t\t\t1",
    "state:\t\t\tPORT_ACTIVE",
];

/// Builds the emulator and the scenario programs, runs every scenario,
/// prints one line per item and returns the outcomes.
pub fn run_all(target_dir: &Path) -> Result<Vec<Outcome>> {
    let ws = workspace_root();
    util::ensure_tool("cc", "gcc")?;
    util::ensure_tool("ibv_devinfo", "ibverbs-utils")?;
    for (file, pkg) in [
        ("/usr/include/infiniband/efadv.h", "libibverbs-dev"),
        ("/etc/libibverbs.d/efa.driver", "ibverbs-providers"),
    ] {
        if !Path::new(file).exists() {
            util::apt_install(&[pkg])?;
        }
    }
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["build", "-p", EMU_PACKAGE])
        .current_dir(&ws)
        .stdin(Stdio::null());
    say!("building the EFA emulator: {}", describe(&cmd));
    util::run(&mut cmd)?;
    let lib = target_dir.join("debug").join("libefa_emu.so");
    if !lib.is_file() {
        bail!("{} was not built", lib.display());
    }
    let out_dir = target_dir.join("efa");
    let logs = out_dir.join("logs");
    util::mkdir_p(&logs)?;
    // A tree of our own per run, so a stale one cannot interfere.
    let sysfs = out_dir.join("sysfs");
    let _ = fs::remove_dir_all(&sysfs);
    let preload = |c: &mut Command| {
        c.env("LD_PRELOAD", &lib)
            .env("EFA_EMU_SYSFS", &sysfs)
            .env("SYSFS_PATH", &sysfs)
            .env("EFA_EMU_LOG", "1");
    };

    let mut outcomes = Vec::new();
    let mut record = |name: String, steps: usize, verdict: Result<String, String>, log: &Path| {
        let (ok, detail) = match verdict {
            Ok(d) => (true, d),
            Err(d) => (false, format!("{d} (log: {})", log.display())),
        };
        util::print_line(&format!(
            "efa: {:<40} {} {detail}",
            name,
            if ok { "ok  " } else { "FAIL" }
        ));
        outcomes.push(Outcome {
            name,
            ok,
            detail,
            group: Group::RdmaCore { steps },
        });
    };

    // rdma-core's ibv_devinfo finds efa_0 and libefa opens it.
    let log = logs.join("ibv_devinfo.log");
    let mut c = Command::new("ibv_devinfo");
    c.args(["-v", "-d", "efa_0"]);
    preload(&mut c);
    let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
    let missing: Vec<&str> = DEVINFO_NEEDLES
        .iter()
        .copied()
        .filter(|n| !out.contains(n))
        .collect();
    let verdict = match (code, missing.is_empty()) {
        (Some(0), true) => Ok(format!("{} lines", out.lines().count())),
        (Some(0), false) => Err(format!("missing from the output: {missing:?}")),
        (c, _) => Err(format!("exit status {c:?}")),
    };
    record("rdma-core ibv_devinfo -v -d efa_0".into(), 0, verdict, &log);

    // The scenario programs on rdma-core's libibverbs + libefa.
    let src_dir = ws.join("tests").join("efa-emu").join("c");
    for (src, stem) in c_sources(&src_dir)? {
        let exe = out_dir.join(&stem);
        let log = logs.join(format!("{stem}.log"));
        let name = format!("rdma-core libefa: {stem}");
        let (code, out) = compile_c(&src, &exe, &["-libverbs", "-lefa"], &log)?;
        if code != Some(0) {
            record(
                name,
                0,
                Err(format!("does not compile: {}", out.trim())),
                &log,
            );
            continue;
        }
        let mut c = Command::new(&exe);
        preload(&mut c);
        let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        record(name, pass_lines(&out), check_program(&out, code), &log);
    }
    Ok(outcomes)
}

/// Prints the closing summary and returns whether everything passed.
pub fn summary(outcomes: &[Outcome]) -> bool {
    let passed = outcomes.iter().filter(|o| o.ok).count();
    let steps: usize = outcomes
        .iter()
        .map(|o| match o.group {
            Group::RdmaCore { steps } => steps,
            _ => 0,
        })
        .sum();
    util::print_line(&format!(
        "efa: rdma-core against the emulated EFA device: {passed} items passed, {} failed \
         ({steps} scenario steps passed)",
        outcomes.len() - passed
    ));
    passed == outcomes.len()
}

/// `cargo xtask efa`.
pub fn efa_command(target_dir: &Path) -> Result<bool> {
    let outcomes = run_all(target_dir)?;
    Ok(summary(&outcomes))
}
