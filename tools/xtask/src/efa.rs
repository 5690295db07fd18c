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
//! Then our provider: `efa_scenarios` (`tests/src/bin/efa_scenarios.rs`,
//! `datapath.c`'s scenarios through rverbs) runs the same way; its
//! `PASS`/`FAIL` lines count in the summary. Last, the comparison:
//! `cmd_seq.c` (libefa) and `efa_cmd_seq` (ours) make the same fixed
//! sequence of verbs with `EFA_EMU_CMD_LOG` and `EFA_EMU_DESC_LOG` set,
//! and [`efa_compare`] compares the commands and descriptors byte for byte
//! after the normalisations it lists (report: `logs/efa_compare.log`).
//!
//! And rdma-core's pyverbs suite (`--dev efa_0`) on libefa and on our
//! `libibverbs.so.1`, verdict for verdict, against the differences listed
//! in [`PYVERBS_ALLOWED`] (`crate::pyverbs`).
//!
//! Not here yet (issue 46): a `libefa.so.1` of ours (efadv).

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Result};

use crate::mlx5::{c_sources, check_program, compile_c, pass_lines, run_bounded, Group, Outcome};
use crate::util::{self, cargo_bin, describe, workspace_root};

#[path = "efa_compare.rs"]
pub mod efa_compare;

/// The emulator's package.
pub const EMU_PACKAGE: &str = "efa-emu";
/// The package of our scenario program.
const TESTS_PACKAGE: &str = "verbs-tests";
/// Our programs: `datapath.c`'s scenarios through rverbs, and
/// `cmd_seq.c`'s sequence.
const OUR_PROGRAMS: [&str; 2] = ["efa_scenarios", OUR_CMD_SEQ];
/// Our twin of `cmd_seq.c`.
const OUR_CMD_SEQ: &str = "efa_cmd_seq";
/// The C program whose commands and descriptors are compared.
const CMD_SEQ: &str = "cmd_seq";
/// The differences of rdma-core's suite on the emulator allowed, with why.
pub const PYVERBS_ALLOWED: &str = "tests/efa-emu/pyverbs_allowed.tsv";
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
        push(&mut outcomes, name, Group::RdmaCore { steps }, verdict, log);
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
    let theirs_devinfo = out;

    // What cmd_seq.c and ours record, for the comparison.
    let theirs_cmds = logs.join("cmd_seq.rdma-core.cmd");
    let theirs_descs = logs.join("cmd_seq.rdma-core.desc");
    let ours_cmds = logs.join("cmd_seq.ours.cmd");
    let ours_descs = logs.join("cmd_seq.ours.desc");

    // The scenario programs on rdma-core's libibverbs + libefa.
    let src_dir = ws.join("tests").join("efa-emu").join("c");
    // Every program also runs on our libibverbs (and, for those of efadv,
    // our libefa): (stem, program, steps on rdma-core, uses efadv).
    let mut again = Vec::new();
    for (src, stem) in c_sources(&src_dir)? {
        let exe = out_dir.join(&stem);
        let log = logs.join(format!("{stem}.log"));
        let name = format!("rdma-core libefa: {stem}");
        let uses_efadv = fs::read_to_string(&src)
            .map(|t| t.contains("efadv.h"))
            .unwrap_or(true);
        let libs: &[&str] = if uses_efadv {
            &["-libverbs", "-lefa"]
        } else {
            &["-libverbs"]
        };
        let (code, out) = compile_c(&src, &exe, libs, &log)?;
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
        if stem == CMD_SEQ {
            let _ = fs::remove_file(&theirs_cmds);
            let _ = fs::remove_file(&theirs_descs);
            c.env("EFA_EMU_CMD_LOG", &theirs_cmds)
                .env("EFA_EMU_DESC_LOG", &theirs_descs);
        }
        let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        let steps = pass_lines(&out);
        record(name, steps, check_program(&out, code), &log);
        again.push((stem, exe, steps, uses_efadv));
    }

    // Our tool prints what rdma-core's prints, line for line, and then
    // EFA's own attributes (which ibv_devinfo does not print).
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["build", "-p", "rverbs-cli", "--bin", "rverbs"])
        .current_dir(&ws)
        .stdin(Stdio::null());
    say!("building the rverbs tool: {}", describe(&cmd));
    let ours_log = logs.join("rverbs_devinfo.log");
    let verdict = match util::run(&mut cmd) {
        Err(e) => Err(format!("{e:#}")),
        Ok(()) => {
            let mut c = Command::new(target_dir.join("debug").join("rverbs"));
            c.args(["devinfo", "-v", "-d", "efa_0"]);
            preload(&mut c);
            let (ocode, ours) = run_bounded(&mut c, &ours_log, ITEM_LIMIT)?;
            let norm = |s: &str| -> Vec<String> {
                s.lines()
                    .filter(|l| !l.starts_with("efa-emu["))
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .filter(|l| !l.is_empty())
                    .collect()
            };
            let (theirs_lines, all) = (norm(&theirs_devinfo), norm(&ours));
            let efa_at = all.iter().position(|l| l == "efa:");
            let core = &all[..efa_at.unwrap_or(all.len())];
            let first_diff = theirs_lines
                .iter()
                .zip(core)
                .position(|(a, b)| a != b)
                .or_else(|| (theirs_lines.len() != core.len()).then_some(core.len()));
            match (ocode, efa_at, first_diff) {
                (Some(0), Some(_), None) => Ok(format!(
                    "{} lines agree, then EFA's {}",
                    core.len(),
                    all.len() - core.len() - 1
                )),
                (Some(0), None, _) => Err("no efa: section".into()),
                (Some(0), _, Some(i)) => Err(format!(
                    "line {}: {:?} where rdma-core prints {:?}",
                    i + 1,
                    core.get(i),
                    theirs_lines.get(i)
                )),
                (c, ..) => Err(format!("exit status {c:?}")),
            }
        }
    };
    record_ours(
        &mut outcomes,
        "rverbs devinfo -v -d efa_0".into(),
        0,
        usize::from(verdict.is_err()),
        verdict,
        &ours_log,
    );

    // rdma-core's ibv_devinfo and the scenario programs, unchanged, on
    // our libibverbs.so.1 (rverbs' EFA provider under it) and our
    // libefa.so.1 (efadv over it): the same output, the same steps.
    match crate::ibverbs::build(target_dir, false) {
        Err(e) => {
            let log = logs.join("our-libibverbs.log");
            record_ours(
                &mut outcomes,
                "our libibverbs: build".into(),
                0,
                1,
                Err(format!("{e:#}")),
                &log,
            );
        }
        Ok(dir) => {
            let log = logs.join("ibv_devinfo.our-libibverbs.log");
            let mut c = Command::new("ibv_devinfo");
            c.args(["-v", "-d", "efa_0"]).env("LD_LIBRARY_PATH", &dir);
            preload(&mut c);
            let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
            let norm = |s: &str| -> Vec<String> {
                s.lines()
                    .filter(|l| !l.starts_with("efa-emu["))
                    .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                    .collect()
            };
            let verdict = match (code, norm(&out) == norm(&theirs_devinfo)) {
                (Some(0), true) => Ok(format!("{} lines, as on rdma-core", out.lines().count())),
                (Some(0), false) => Err("the output differs from rdma-core's".into()),
                (c, _) => Err(format!("exit status {c:?}")),
            };
            let failed = usize::from(verdict.is_err());
            record_ours(
                &mut outcomes,
                "rdma-core ibv_devinfo on our libibverbs".into(),
                0,
                failed,
                verdict,
                &log,
            );
            // rdma-core's own suite on libefa and on our libibverbs.so.1.
            let allowed = ws.join(PYVERBS_ALLOWED);
            let suite = crate::pyverbs::Suite {
                dev: "efa_0",
                allowed: &allowed,
                test_limit_secs: crate::mlx5::PYVERBS_TEST_LIMIT_SECS,
            };
            let suite_dir = out_dir.join("pyverbs");
            for (name, verdict, log) in
                crate::pyverbs::run(&suite, &ws, &suite_dir, &dir, &preload, run_bounded)?
            {
                let failed = usize::from(verdict.is_err());
                record_ours(&mut outcomes, name, 0, failed, verdict, &log);
            }
            for (stem, exe, steps, uses_efadv) in &again {
                let log = logs.join(format!("{stem}.our-libibverbs.log"));
                let mut c = Command::new(exe);
                c.env("LD_LIBRARY_PATH", &dir);
                preload(&mut c);
                let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
                let osteps = pass_lines(&out);
                let verdict = check_program(&out, code).and_then(|d| {
                    if osteps == *steps {
                        Ok(format!("{d}, as on rdma-core"))
                    } else {
                        Err(format!("{osteps} steps passed, {steps} on rdma-core"))
                    }
                });
                let failed = usize::from(verdict.is_err());
                let libs = if *uses_efadv {
                    "our libibverbs + libefa"
                } else {
                    "our libibverbs"
                };
                record_ours(
                    &mut outcomes,
                    format!("C program {stem} on {libs}"),
                    osteps,
                    failed,
                    verdict,
                    &log,
                );
            }
        }
    }

    // Our provider: the same scenarios through rverbs, and the same
    // sequence of verbs as cmd_seq.c.
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["build", "-p", TESTS_PACKAGE]);
    for p in OUR_PROGRAMS {
        cmd.args(["--bin", p]);
    }
    cmd.current_dir(&ws).stdin(Stdio::null());
    say!("building our EFA programs: {}", describe(&cmd));
    let built = util::run(&mut cmd);
    for p in OUR_PROGRAMS {
        let log = logs.join(format!("{p}.log"));
        let name = format!("our provider: {p}");
        if let Err(e) = &built {
            record_ours(&mut outcomes, name, 0, 1, Err(format!("{e:#}")), &log);
            continue;
        }
        let mut c = Command::new(target_dir.join("debug").join(p));
        preload(&mut c);
        if p == OUR_CMD_SEQ {
            let _ = fs::remove_file(&ours_cmds);
            let _ = fs::remove_file(&ours_descs);
            c.env("EFA_EMU_CMD_LOG", &ours_cmds)
                .env("EFA_EMU_DESC_LOG", &ours_descs);
        }
        let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        let verdict = check_program(&out, code);
        let passed = pass_lines(&out);
        let failed = out.lines().filter(|l| l.starts_with("FAIL ")).count()
            + usize::from(verdict.is_err() && !out.contains("FAIL "));
        record_ours(&mut outcomes, name, passed, failed, verdict, &log);
    }

    // The comparison of what the device saw from both.
    let report_path = logs.join("efa_compare.log");
    let read = |p: &Path| fs::read_to_string(p).unwrap_or_default();
    let mut report = vec!["Normalisations:".to_string()];
    report.extend(
        efa_compare::RULES
            .iter()
            .map(|(k, w)| format!("  {k}: {w}")),
    );
    let cmds = efa_compare::parse_cmds(&read(&theirs_cmds)).and_then(|t| {
        Ok(efa_compare::compare_cmds(
            &t,
            &efa_compare::parse_cmds(&read(&ours_cmds))?,
        ))
    });
    let descs = efa_compare::parse_descs(&read(&theirs_descs)).and_then(|t| {
        Ok(efa_compare::compare_descs(
            &t,
            &efa_compare::parse_descs(&read(&ours_descs))?,
        ))
    });
    for (what, r) in [("commands", cmds), ("descriptors", descs)] {
        let (group, verdict) = match r {
            Ok(r) => {
                report.push(format!("{what}:"));
                report.extend(r.lines.iter().map(|l| format!("  {l}")));
                report.extend(r.problems.iter().map(|l| format!("  PROBLEM {l}")));
                let group = if what == "commands" {
                    Group::Commands {
                        compared: r.compared,
                        identical: r.identical,
                        differing: r.compared - r.identical,
                    }
                } else {
                    Group::Compare {
                        compared: r.compared,
                        identical: r.identical,
                        differing: r.compared - r.identical,
                    }
                };
                let verdict = match (r.problems.first(), r.compared) {
                    (Some(p), _) => Err(p.clone()),
                    (None, 0) => Err(format!("no {what} recorded")),
                    (None, n) => Ok(format!("{n} identical to libefa's")),
                };
                (group, verdict)
            }
            Err(e) => (
                Group::Commands {
                    compared: 0,
                    identical: 0,
                    differing: 1,
                },
                Err(format!("{e:#}")),
            ),
        };
        let (ok, detail) = match verdict {
            Ok(d) => (true, d),
            Err(d) => (false, format!("{d} (report: {})", report_path.display())),
        };
        util::print_line(&format!(
            "efa: {:<40} {} {detail}",
            format!("{what}: libefa against ours"),
            if ok { "ok  " } else { "FAIL" }
        ));
        outcomes.push(Outcome {
            name: format!("{what} compared"),
            ok,
            detail,
            group,
        });
    }
    let _ = fs::write(&report_path, report.join("\n") + "\n");
    Ok(outcomes)
}

/// Records the outcome of one of our programs.
fn record_ours(
    outcomes: &mut Vec<Outcome>,
    name: String,
    passed: usize,
    failed: usize,
    verdict: Result<String, String>,
    log: &Path,
) {
    push(outcomes, name, Group::Ours { passed, failed }, verdict, log);
}

/// Prints one item's line and records its outcome in `group`.
fn push(
    outcomes: &mut Vec<Outcome>,
    name: String,
    group: Group,
    verdict: Result<String, String>,
    log: &Path,
) {
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
        group,
    });
}

/// Prints the closing summary and returns whether everything passed.
pub fn summary(outcomes: &[Outcome]) -> bool {
    let theirs = || {
        outcomes
            .iter()
            .filter(|o| matches!(o.group, Group::RdmaCore { .. }))
    };
    let passed = theirs().filter(|o| o.ok).count();
    let failed = theirs().count() - passed;
    let (mut steps, mut ours, mut ours_failed) = (0, 0, 0);
    let (mut cc, mut ci, mut dc, mut di) = (0, 0, 0, 0);
    for o in outcomes {
        match o.group {
            Group::RdmaCore { steps: n } => steps += n,
            Group::Ours { passed, failed } => {
                ours += passed;
                ours_failed += failed;
            }
            Group::Commands {
                compared,
                identical,
                ..
            } => {
                cc += compared;
                ci += identical;
            }
            Group::Compare {
                compared,
                identical,
                ..
            } => {
                dc += compared;
                di += identical;
            }
            _ => {}
        }
    }
    util::print_line(&format!(
        "efa: rdma-core against the emulated EFA device: {passed} items passed, {failed} failed \
         ({steps} scenario steps passed); our provider: {ours} scenario steps passed, \
         {ours_failed} failed; commands compared: {cc} ({ci} identical after normalisation); \
         descriptors compared: {dc} ({di} identical after normalisation)"
    ));
    outcomes.iter().all(|o| o.ok)
}

/// `cargo xtask efa`.
pub fn efa_command(target_dir: &Path) -> Result<bool> {
    let outcomes = run_all(target_dir)?;
    Ok(summary(&outcomes))
}
