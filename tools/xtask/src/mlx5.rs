//! `cargo xtask mlx5`: the emulated mlx5 device (package `mlx5-emu`, an
//! `LD_PRELOAD` library that plays the mlx5 kernel driver) and the
//! scenarios rdma-core's own libibverbs + libmlx5 run against it, on the
//! host (no VM: the emulator is user space).
//!
//! Steps: build `mlx5-emu` and the `rverbs` tool (`RVERBS_CLI` in every
//! program's environment: `inspect.c` and `mlx5_inspect` run its
//! `inspect --pid` on a paused process of theirs); compile every `tests/mlx5-emu/c/*.c` with
//! `cc ... -libverbs` into `target/mlx5/` (test-only programs: that folder
//! is outside what the linkage check inspects, on purpose); run, each with
//! the library preloaded and bounded in time, rdma-core's `ibv_devices`,
//! `ibv_devinfo -v` and every compiled program. A program passes when it
//! exits 0, printed at least one `PASS ` line and no `FAIL ` line. Logs go
//! to `target/mlx5/logs/`. `cargo xtask test` runs the same items.
//!
//! Then our provider: every `mlx5_*` program of `verbs-tests`
//! (`tests/src/bin/mlx5_*.rs` or `tests/src/bin/mlx5_*/main.rs`, built
//! here) runs the same way; its `PASS`/`FAIL` lines count in the summary.
//! Last, the WQE comparison: `wqe_seq.c` (libmlx5) and `mlx5_wqe_seq`
//! (ours) post the same fixed sequence with `MLX5_EMU_WQE_LOG` set, and
//! [`wqe_compare`] compares the two logs byte for byte after the
//! normalisations it lists (report: `logs/wqe_compare.log`). Likewise the
//! command comparison: `cmd_seq.c` and `mlx5_cmd_seq` make the same fixed
//! control-path calls with `MLX5_EMU_CMD_LOG` set, and [`cmd_compare`]
//! compares every command field by field (report: `logs/cmd_compare.log`).
//! And the dmabuf ioctls: `dmabuf.c` and `mlx5_dmabuf` run with
//! `MLX5_EMU_CMD_LOG` set, and [`ioctl_compare`] checks every
//! REG_DMABUF_MR call of ours is byte-identical to one of rdma-core's
//! (report: `logs/ioctl_compare.log`). The closing line counts them all.
//!
//! RoCE: the emulator plays an Ethernet (RoCE) port instead of its
//! InfiniBand one when `MLX5_EMU_LINK=eth` is set. The scenario programs
//! named `roce*.c` and our `mlx5_roce*` programs run with it (and a sysfs
//! tree of their own), as does a second `ibv_devinfo -v`; everything else
//! sees the InfiniBand port.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::util::{self, cargo_bin, describe, workspace_root};

#[path = "cmd_compare.rs"]
pub mod cmd_compare;
#[path = "ioctl_compare.rs"]
pub mod ioctl_compare;
#[path = "wqe_compare.rs"]
pub mod wqe_compare;

/// The emulator's package.
pub const EMU_PACKAGE: &str = "mlx5-emu";
/// The `rverbs` tool's package (its `inspect --pid` is tested here).
const CLI_PACKAGE: &str = "rverbs-cli";
/// Time limit of one scenario process.
const ITEM_LIMIT: Duration = Duration::from_secs(60);
/// The differences of rdma-core's suite on the emulator allowed, with why.
pub const PYVERBS_ALLOWED: &str = "tests/mlx5-emu/pyverbs_allowed.tsv";
/// One pyverbs test's limit on the emulator (a test waiting for a
/// completion that never comes counts as an error).
pub const PYVERBS_TEST_LIMIT_SECS: u32 = 20;

/// One scenario's outcome.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What ran.
    pub name: String,
    /// Whether it passed.
    pub ok: bool,
    /// One line saying why (or how many steps passed).
    pub detail: String,
    /// Which count of the summary line it belongs to.
    pub group: Group,
}

/// The part of the summary line an outcome counts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// rdma-core (tools and libmlx5 programs) against the emulator: one
    /// item each, with the `PASS` lines of a program (0 for a tool).
    RdmaCore {
        /// `PASS` lines.
        steps: usize,
    },
    /// One of our `mlx5_*` programs: its `PASS`/`FAIL` lines (a program
    /// that is missing, does not build or dies counts one more failure).
    Ours {
        /// `PASS` lines.
        passed: usize,
        /// `FAIL` lines (plus one if the program itself failed otherwise).
        failed: usize,
    },
    /// The command comparison of libmlx5 against our provider.
    Commands {
        /// Commands paired and compared.
        compared: usize,
        /// Identical after normalisation.
        identical: usize,
        /// Differing, or sent by one side only.
        differing: usize,
    },
    /// The REG_DMABUF_MR ioctls of our provider against rdma-core's.
    Ioctl {
        /// Our calls compared.
        compared: usize,
        /// Identical to rdma-core's.
        identical: usize,
    },
    /// The WQE comparison of libmlx5 against our provider.
    Compare {
        /// WQEs compared.
        compared: usize,
        /// Identical after normalisation.
        identical: usize,
        /// Differing.
        differing: usize,
    },
}

/// Runs `cmd` with its output in `log`, killed after `limit`. Returns the
/// exit code (None: killed or died by a signal) and the output.
pub fn run_bounded(
    cmd: &mut Command,
    log: &Path,
    limit: Duration,
) -> Result<(Option<i32>, String)> {
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
/// Whether a tool printed the same on rdma-core's library and on ours,
/// line for line after collapsing whitespace.
fn same_tool_output(theirs: &str, ours: &str) -> std::result::Result<String, String> {
    let norm = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|l| !l.is_empty())
            .collect()
    };
    let (t, o) = (norm(theirs), norm(ours));
    if t.len() < 2 {
        return Err(format!("rdma-core printed only {} lines", t.len()));
    }
    if let Some(i) = (0..t.len().max(o.len())).find(|&i| t.get(i) != o.get(i)) {
        return Err(format!(
            "line {}: rdma-core {:?}, ours {:?}",
            i + 1,
            t.get(i),
            o.get(i)
        ));
    }
    Ok(format!("{} lines agree", t.len()))
}

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

/// The `PASS ` lines (steps passed) of a scenario program's output.
pub(crate) fn pass_lines(out: &str) -> usize {
    out.lines().filter(|l| l.starts_with("PASS ")).count()
}

/// Has the C scenario program `stem`, run by `c`, record what the
/// comparisons read: `wqe_seq.c` its WQEs to `files[0]`, `cmd_seq.c` and
/// `dmabuf.c` their commands to `files[1]` and `files[2]` (each file
/// emptied first); other programs record nothing. `cmd_seq.c` also runs
/// under the uverbs tracer (`trace`, preloaded before the emulator `emu`),
/// which records the same commands from outside to `files[1]` + `.trace`.
fn record_c(c: &mut Command, stem: &str, files: [&Path; 3], trace: &Path, emu: &Path) {
    let [wqes, cmds, dmabuf] = files;
    if stem == CMD_SEQ_C {
        let traced = trace_log(cmds);
        let _ = fs::remove_file(&traced);
        c.env(
            "LD_PRELOAD",
            format!("{}:{}", trace.display(), emu.display()),
        )
        .env("UVERBS_TRACE_LOG", traced);
    }
    for (prog, var, file) in [
        (WQE_SEQ_C, "MLX5_EMU_WQE_LOG", wqes),
        (CMD_SEQ_C, "MLX5_EMU_CMD_LOG", cmds),
        (DMABUF_C, "MLX5_EMU_CMD_LOG", dmabuf),
    ] {
        if stem == prog {
            let _ = fs::remove_file(file);
            c.env(var, file);
        }
    }
}

/// A scenario program's verdict from its exit code and `PASS`/`FAIL` lines.
pub(crate) fn check_program(out: &str, code: Option<i32>) -> std::result::Result<String, String> {
    let passed = pass_lines(out);
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

/// The scenario programs of `dir` (every `*.c`, sorted): `(path, stem)`.
pub(crate) fn c_sources(dir: &Path) -> Result<Vec<(PathBuf, String)>> {
    let mut sources: Vec<PathBuf> = fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    sources.sort();
    if sources.is_empty() {
        bail!("no scenario programs in {}", dir.display());
    }
    Ok(sources
        .into_iter()
        .map(|p| {
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            (p, stem)
        })
        .collect())
}

/// Compiles scenario program `src` into `exe` with `libs`, warnings as
/// errors, its output in `log`: the compiler's exit code and output.
pub(crate) fn compile_c(
    src: &Path,
    exe: &Path,
    libs: &[&str],
    log: &Path,
) -> Result<(Option<i32>, String)> {
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(exe)
        .arg(src)
        .args(libs);
    run_bounded(&mut cc, log, ITEM_LIMIT)
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
    cmd.args(["build", "-p", EMU_PACKAGE, "-p", TRACE_PACKAGE])
        .current_dir(&ws)
        .stdin(Stdio::null());
    say!("building the mlx5 emulator: {}", describe(&cmd));
    util::run(&mut cmd)?;
    let lib = target_dir.join("debug").join("libmlx5_emu.so");
    let trace = target_dir.join("debug").join(TRACE_LIB);
    for f in [&lib, &trace] {
        if !f.is_file() {
            bail!("{} was not built", f.display());
        }
    }
    // The `rverbs` tool, which `inspect.c` and `mlx5_inspect` run on
    // themselves (`RVERBS_CLI`).
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["build", "-p", CLI_PACKAGE, "--bin", "rverbs"])
        .current_dir(&ws)
        .stdin(Stdio::null());
    say!("building the rverbs tool: {}", describe(&cmd));
    util::run(&mut cmd)?;
    let cli = target_dir.join("debug").join("rverbs");
    if !cli.is_file() {
        bail!("{} was not built", cli.display());
    }

    let out_dir = target_dir.join("mlx5");
    let logs = out_dir.join("logs");
    util::mkdir_p(&logs)?;
    // A tree of our own per run, so a stale one from another checkout
    // cannot interfere.
    let sysfs = out_dir.join("sysfs");
    let _ = fs::remove_dir_all(&sysfs);
    let sysfs_eth = out_dir.join("sysfs-eth");
    let _ = fs::remove_dir_all(&sysfs_eth);
    // The WQE logs of the same sequence (wqe_compare.rs).
    let theirs_wqes = logs.join("wqe_seq.rdma-core.wqe");
    let ours_wqes = logs.join("wqe_seq.ours.wqe");
    // The command logs of the same sequence of verbs (cmd_compare.rs).
    let theirs_cmds = logs.join("cmd_seq.rdma-core.cmd");
    let ours_cmds = logs.join("cmd_seq.ours.cmd");
    // The command logs of the dmabuf programs (ioctl_compare.rs).
    let theirs_dmabuf = logs.join("dmabuf.rdma-core.cmd");
    let ours_dmabuf = logs.join("dmabuf.ours.cmd");

    let mut outcomes = Vec::new();
    let mut record_in =
        |group: Group, name: String, verdict: std::result::Result<String, String>, log: &Path| {
            let (ok, detail) = match verdict {
                Ok(d) => (true, d),
                Err(d) => (false, format!("{d} (log: {})", log.display())),
            };
            util::print_line(&format!(
                "mlx5: {:<40} {} {detail}",
                name,
                if ok { "ok  " } else { "FAIL" }
            ));
            outcomes.push(Outcome {
                name,
                ok,
                detail,
                group,
            });
        };
    let mut record =
        |name: String, steps: usize, verdict: std::result::Result<String, String>, log: &Path| {
            record_in(Group::RdmaCore { steps }, name, verdict, log)
        };

    let preload = |c: &mut Command| {
        c.env("LD_PRELOAD", &lib)
            .env("RVERBS_CLI", &cli)
            .env("MLX5_EMU_SYSFS", &sysfs)
            .env("SYSFS_PATH", &sysfs)
            .env_remove("MLX5_EMU_LOG")
            .env_remove("MLX5_EMU_WQE_LOG")
            .env_remove("MLX5_EMU_CMD_LOG")
            .env_remove(LINK_ENV);
    };
    // The RoCE personality, with its own sysfs tree.
    let preload_eth = |c: &mut Command| {
        preload(c);
        c.env(LINK_ENV, "eth")
            .env("MLX5_EMU_SYSFS", &sysfs_eth)
            .env("SYSFS_PATH", &sysfs_eth);
    };
    let preload_for = |c: &mut Command, name: &str| {
        if is_roce(name) {
            preload_eth(c)
        } else {
            preload(c)
        }
    };

    // rdma-core's own tools (the last on the RoCE port).
    let tools: [(&str, &str, &[&str], &[&str]); 3] = [
        ("ibv_devices", "ibv_devices", &[], &["mlx5_0"]),
        (
            "ibv_devinfo",
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
        (
            "roce_ibv_devinfo",
            "ibv_devinfo",
            &["-v", "-d", "mlx5_0"],
            &[
                "hca_id:\tmlx5_0",
                "state:\t\t\tPORT_ACTIVE (4)",
                "active_mtu:\t\t1024 (3)",
                "link_layer:\t\tEthernet",
                "gid_tbl_len:\t\t256",
                "GID[  0]:\t\tfe80:0000:0000:0000:0e42:a1ff:fefb:1234, RoCE v1",
                "GID[  1]:\t\tfe80::e42:a1ff:fefb:1234, RoCE v2",
                "GID[  2]:\t\t0000:0000:0000:0000:0000:ffff:c000:0201, RoCE v1",
                "GID[  3]:\t\t::ffff:192.0.2.1, RoCE v2",
                "GID[  5]:\t\t2001:db8::1, RoCE v2",
            ],
        ),
    ];
    let mut tool_outs = Vec::new();
    for (label, tool, args, needles) in tools {
        let name = format!("rdma-core {label} {}", args.join(" "));
        let log = logs.join(format!("{label}.log"));
        let mut c = Command::new(tool);
        c.args(args);
        preload_for(&mut c, label);
        let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        record(
            name.trim_end().to_string(),
            0,
            check_tool(&out, code, needles),
            &log,
        );
        tool_outs.push((label, tool, args, code, out));
    }

    // The same tools on our libibverbs (verbs/ibverbs) instead of
    // rdma-core's: the same output.
    let ourlib = match crate::ibverbs::build(target_dir, false) {
        Ok(dir) => {
            for (label, tool, args, tcode, theirs) in &tool_outs {
                let name = format!("rdma-core {label} {} on our libibverbs", args.join(" "));
                let log = logs.join(format!("{label}.our-libibverbs.log"));
                let mut c = Command::new(tool);
                c.args(*args);
                preload_for(&mut c, label);
                c.env("LD_LIBRARY_PATH", &dir);
                let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
                let verdict = if *tcode != Some(0) || code != Some(0) {
                    Err(format!("exit status rdma-core {tcode:?}, ours {code:?}"))
                } else {
                    same_tool_output(theirs, &out)
                };
                record(name, 0, verdict, &log);
            }
            Some(dir)
        }
        Err(e) => {
            let log = logs.join("our-libibverbs.log");
            let _ = fs::write(&log, format!("{e:#}\n"));
            record(
                "our libibverbs: build".into(),
                0,
                Err(format!("{e:#}")),
                &log,
            );
            None
        }
    };
    // What the scenario programs record on our libibverbs.
    let ourlib_wqes = logs.join("wqe_seq.our-libibverbs.wqe");
    let ourlib_cmds = logs.join("cmd_seq.our-libibverbs.cmd");
    let ourlib_dmabuf = logs.join("dmabuf.our-libibverbs.cmd");

    // The scenario programs.
    let src_dir = ws.join("tests").join("mlx5-emu").join("c");
    for (src, stem) in c_sources(&src_dir)? {
        let exe = out_dir.join(&stem);
        let log = logs.join(format!("{stem}.log"));
        let name = format!("rdma-core libmlx5: {stem}");
        let (code, out) = compile_c(&src, &exe, &["-libverbs"], &log)?;
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
        preload_for(&mut c, &stem);
        record_c(
            &mut c,
            &stem,
            [&theirs_wqes, &theirs_cmds, &theirs_dmabuf],
            &trace,
            &lib,
        );
        let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        let steps = pass_lines(&out);
        record(name, steps, check_program(&out, code), &log);

        // The same program, unchanged, on our libibverbs.so.1 (rverbs'
        // mlx5 provider under it): the same verdict, step for step.
        let Some(dir) = &ourlib else { continue };
        let log = logs.join(format!("{stem}.our-libibverbs.log"));
        let mut c = Command::new(&exe);
        preload_for(&mut c, &stem);
        c.env("LD_LIBRARY_PATH", dir)
            .env("SCENARIO_OUR_LIBIBVERBS", "1");
        record_c(
            &mut c,
            &stem,
            [&ourlib_wqes, &ourlib_cmds, &ourlib_dmabuf],
            &trace,
            &lib,
        );
        let (ocode, oout) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        let osteps = pass_lines(&oout);
        let verdict = check_program(&oout, ocode).and_then(|d| {
            if osteps == steps {
                Ok(format!("{d}, as on rdma-core"))
            } else {
                Err(format!("{osteps} steps passed, {steps} on rdma-core"))
            }
        });
        record(
            format!("C program {stem} on our libibverbs"),
            0,
            verdict,
            &log,
        );
    }

    // The same scenarios through our own provider.
    let recorded = Recorded {
        wqes: &ours_wqes,
        cmds: &ours_cmds,
        dmabuf: &ours_dmabuf,
    };
    for (group, name, verdict, log) in run_ours(&ws, target_dir, &preload_for, &logs, &recorded)? {
        record_in(group, name, verdict, &log);
    }

    // The same programs' commands, WQEs and dmabuf ioctls through our
    // libibverbs against libmlx5's.
    if ourlib.is_some() {
        for (what, (group, verdict, log)) in [
            (
                "commands: libmlx5 against our libibverbs (cmd_seq.c)",
                compare_cmds(
                    &theirs_cmds,
                    &ourlib_cmds,
                    &logs,
                    "cmd_compare.our-libibverbs.log",
                ),
            ),
            (
                "WQE bytes: libmlx5 against our libibverbs (wqe_seq.c)",
                compare_wqes(
                    &theirs_wqes,
                    &ourlib_wqes,
                    &logs,
                    "wqe_compare.our-libibverbs.log",
                ),
            ),
            (
                "dmabuf ioctls: libibverbs against ours (dmabuf.c)",
                compare_ioctls(
                    &theirs_dmabuf,
                    &ourlib_dmabuf,
                    &logs,
                    "ioctl_compare.our-libibverbs.log",
                ),
            ),
        ] {
            record_in(group, what.into(), verdict, &log);
        }
    }

    // The tracer `cargo xtask conform` records with, against what the
    // emulator itself received: the same lines.
    for (who, cmds) in [("rdma-core's", &theirs_cmds), ("our", &ourlib_cmds)] {
        if who == "our" && ourlib.is_none() {
            continue;
        }
        let traced = trace_log(cmds);
        record_in(
            Group::RdmaCore { steps: 0 },
            format!("uverbs-trace of cmd_seq.c on {who} libibverbs"),
            same_trace(cmds, &traced),
            &traced,
        );
    }

    // rdma-core's own test suite, on libmlx5 and on our libibverbs.so.1.
    if let Some(dir) = &ourlib {
        let allowed = ws.join(PYVERBS_ALLOWED);
        let suite = crate::pyverbs::Suite {
            dev: "mlx5_0",
            allowed: &allowed,
            test_limit_secs: PYVERBS_TEST_LIMIT_SECS,
        };
        for (name, verdict, log) in
            crate::pyverbs::run(&suite, &ws, &out_dir, dir, &preload, run_bounded)?
        {
            record_in(Group::RdmaCore { steps: 0 }, name, verdict, &log);
        }
    }

    // The commands both sent for the same sequence of verbs.
    let (group, verdict, log) = compare_cmds(&theirs_cmds, &ours_cmds, &logs, "cmd_compare.log");
    record_in(
        group,
        "commands: libmlx5 against our provider".into(),
        verdict,
        &log,
    );

    // The WQEs both wrote for the same sequence.
    let (group, verdict, log) = compare_wqes(&theirs_wqes, &ours_wqes, &logs, "wqe_compare.log");
    record_in(
        group,
        "WQE bytes: libmlx5 against our provider".into(),
        verdict,
        &log,
    );

    // The REG_DMABUF_MR ioctls both made for the same registrations.
    let (group, verdict, log) =
        compare_ioctls(&theirs_dmabuf, &ours_dmabuf, &logs, "ioctl_compare.log");
    record_in(
        group,
        "dmabuf ioctls: libibverbs against ours".into(),
        verdict,
        &log,
    );
    Ok(outcomes)
}

// ---- Our provider: the `mlx5_*` programs of verbs-tests -----------------

/// The emulator's link-layer switch (`mlx5-emu`'s `device::LINK_ENV`).
const LINK_ENV: &str = "MLX5_EMU_LINK";

/// Whether the program or tool item `name` runs on the RoCE port: C
/// programs `roce*`, our `mlx5_roce*` programs, items labelled `roce_*`.
fn is_roce(name: &str) -> bool {
    name.strip_prefix("mlx5_")
        .unwrap_or(name)
        .starts_with("roce")
}

/// The C program whose WQEs are recorded (tests/mlx5-emu/c/wqe_seq.c).
const WQE_SEQ_C: &str = "wqe_seq";
/// Our program posting the same sequence (tests/src/bin/mlx5_wqe_seq.rs).
const WQE_SEQ_OURS: &str = "mlx5_wqe_seq";
/// The uverbs tracer (tests/uverbs-trace), its package and library.
const TRACE_PACKAGE: &str = "uverbs-trace";
/// The library cargo builds from [`TRACE_PACKAGE`].
pub const TRACE_LIB: &str = "libuverbs_trace.so";

/// Where the tracer's record of a run whose emulator log is `cmds` goes.
fn trace_log(cmds: &Path) -> PathBuf {
    PathBuf::from(format!("{}.trace", cmds.display()))
}

/// The (object, method) pairs, in hex as recorded, of the ioctl methods the
/// emulator implements (tests/mlx5-emu/src/ioctl.rs): it answers any other
/// EPROTONOSUPPORT before reading the call, and records nothing of it.
const EMU_METHODS: &[&str] = &["0 0", "0 2", "0 5", "0 6", "7 2", "7 4"];

/// Whether the tracer recorded (at `traced`) what the emulator recorded
/// (at `emu`), line for line, but for the calls of methods the emulator
/// does not implement.
fn same_trace(emu: &Path, traced: &Path) -> std::result::Result<String, String> {
    let read = |p: &Path| fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let (e, t) = (read(emu)?, read(traced)?);
    let kept: Vec<&str> = t
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            !(w.len() > 3
                && w[0] == "ioctl"
                && w[1] == "EPROTONOSUPPORT"
                && !EMU_METHODS.contains(&format!("{} {}", w[2], w[3]).as_str()))
        })
        .collect();
    let e: Vec<&str> = e.lines().collect();
    if e.is_empty() {
        return Err("the emulator recorded no command".into());
    }
    match (0..e.len().max(kept.len())).find(|&i| e.get(i) != kept.get(i)) {
        None => Ok(format!(
            "the same {} lines as the emulator's log ({} more for methods it lacks)",
            e.len(),
            t.lines().count() - kept.len()
        )),
        Some(i) => Err(format!(
            "line {}: emulator {:?}, tracer {:?}",
            i + 1,
            e.get(i).map(|l| &l[..l.len().min(80)]),
            kept.get(i).map(|l| &l[..l.len().min(80)])
        )),
    }
}

/// The control-path sequence `cargo xtask conform` runs on any device
/// (compiled into [`cmd_seq_exe`]).
const CMD_SEQ_SRC: &str = "tests/mlx5-emu/c/cmd_seq.c";

/// Where `cmd_seq.c` is compiled to.
pub fn cmd_seq_exe(target: &Path) -> PathBuf {
    target.join("conform").join("cmd_seq")
}

/// Compiles `cmd_seq.c` against the system's libibverbs headers.
pub fn compile_cmd_seq(ws: &Path, exe: &Path) -> Result<()> {
    if let Some(dir) = exe.parent() {
        util::mkdir_p(dir)?;
    }
    util::run(
        Command::new("cc")
            .args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(exe)
            .arg(ws.join(CMD_SEQ_SRC))
            .arg("-libverbs"),
    )
}

/// The C program whose commands are recorded (tests/mlx5-emu/c/cmd_seq.c).
const CMD_SEQ_C: &str = "cmd_seq";
/// Our program making the same calls (tests/src/bin/mlx5_cmd_seq.rs).
const CMD_SEQ_OURS: &str = "mlx5_cmd_seq";
/// The C program whose REG_DMABUF_MR ioctls are compared
/// (tests/mlx5-emu/c/dmabuf.c).
const DMABUF_C: &str = "dmabuf";
/// Our program making the same registrations (tests/src/bin/mlx5_dmabuf.rs).
const DMABUF_OURS: &str = "mlx5_dmabuf";
/// Our programs expected even if their source went missing.
const OURS_EXPECTED: &[&str] = &[
    "mlx5_scenarios",
    "mlx5_inspect",
    WQE_SEQ_OURS,
    CMD_SEQ_OURS,
    DMABUF_OURS,
];

/// Where our recording programs write their logs.
struct Recorded<'a> {
    /// [`WQE_SEQ_OURS`]'s WQE log.
    wqes: &'a Path,
    /// [`CMD_SEQ_OURS`]'s command log.
    cmds: &'a Path,
    /// [`DMABUF_OURS`]'s command log.
    dmabuf: &'a Path,
}

/// Time limit of building our programs (a cold build of the workspace on
/// a small machine takes minutes).
const BUILD_LIMIT: Duration = Duration::from_secs(900);

/// One outcome before it is recorded: group, name, verdict, log.
type Item = (Group, String, std::result::Result<String, String>, PathBuf);

/// Counts `PASS `/`FAIL ` lines; a failing verdict without any `FAIL` line
/// (missing, does not build, crashed, killed) counts one failure more.
fn ours_group(out: &str, verdict: &std::result::Result<String, String>) -> Group {
    let passed = pass_lines(out);
    let mut failed = out.lines().filter(|l| l.starts_with("FAIL ")).count();
    if verdict.is_err() && failed == 0 {
        failed = 1;
    }
    Group::Ours { passed, failed }
}

/// The source of our program `name` in `bin_dir`, in either of cargo's
/// layouts of a binary: `<name>.rs`, or `<name>/main.rs` for one of
/// several modules. None when neither is there.
fn our_source(bin_dir: &Path, name: &str) -> Option<PathBuf> {
    [
        bin_dir.join(format!("{name}.rs")),
        bin_dir.join(name).join("main.rs"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The names of our programs: every `mlx5_*.rs` file and every `mlx5_*`
/// folder with a `main.rs` in `bin_dir`, plus [`OURS_EXPECTED`] (present
/// or not), sorted.
fn our_programs(bin_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = OURS_EXPECTED.iter().map(|s| s.to_string()).collect();
    if let Ok(rd) = fs::read_dir(bin_dir) {
        for e in rd.flatten() {
            let p = e.path();
            let stem = p
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            if stem.starts_with("mlx5_") && p.extension().is_some_and(|x| x == "rs") {
                names.push(stem);
            } else if p.join("main.rs").is_file() {
                let dir = e.file_name().to_string_lossy().into_owned();
                if dir.starts_with("mlx5_") {
                    names.push(dir);
                }
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

/// Builds and runs every `mlx5_*` binary of `verbs-tests` (sources
/// `tests/src/bin/mlx5_*.rs` or `tests/src/bin/mlx5_*/main.rs`, plus
/// [`OURS_EXPECTED`]; see [`our_programs`]) under the emulator like the
/// C programs, each bounded by [`ITEM_LIMIT`] and logging to
/// `logs/<name>.log`; [`WQE_SEQ_OURS`] records its WQEs and
/// [`CMD_SEQ_OURS`] and [`DMABUF_OURS`] their commands where `recorded`
/// says.
/// A program that is expected but missing or does not build fails.
/// `preload` sets a program's environment up by its name.
fn run_ours(
    ws: &Path,
    target_dir: &Path,
    preload: &dyn Fn(&mut Command, &str),
    logs: &Path,
    recorded: &Recorded<'_>,
) -> Result<Vec<Item>> {
    let bin_dir = ws.join("tests").join("src").join("bin");
    let names = our_programs(&bin_dir);
    let _ = fs::remove_file(recorded.wqes);
    let _ = fs::remove_file(recorded.cmds);
    let _ = fs::remove_file(recorded.dmabuf);
    let present: Vec<&String> = names
        .iter()
        .filter(|n| our_source(&bin_dir, n).is_some())
        .collect();
    let build_log = logs.join("mlx5_ours-build.log");
    let mut built = String::new();
    if !present.is_empty() {
        let mut cmd = Command::new(cargo_bin());
        cmd.args(["build", "-p", "verbs-tests"]).current_dir(ws);
        for n in &present {
            cmd.args(["--bin", n.as_str()]);
        }
        say!("building our mlx5 programs: {}", describe(&cmd));
        let (code, out) = run_bounded(&mut cmd, &build_log, BUILD_LIMIT)?;
        if code != Some(0) {
            built = out
                .lines()
                .find(|l| l.starts_with("error"))
                .unwrap_or("cargo build failed")
                .to_string();
        }
    }
    let mut items = Vec::new();
    for n in &names {
        let name = format!("our provider (verbs): {n}");
        let exe = target_dir.join("debug").join(n);
        if our_source(&bin_dir, n).is_none() {
            let v = Err(format!("tests/src/bin/{n}.rs (or {n}/main.rs) is missing"));
            items.push((ours_group("", &v), name, v, build_log.clone()));
            continue;
        }
        if !built.is_empty() {
            let v = Err(format!("does not build: {built}"));
            items.push((ours_group("", &v), name, v, build_log.clone()));
            continue;
        }
        if !exe.is_file() {
            let v = Err(format!("{} was not built", exe.display()));
            items.push((ours_group("", &v), name, v, build_log.clone()));
            continue;
        }
        let log = logs.join(format!("{n}.log"));
        let mut c = Command::new(&exe);
        preload(&mut c, n);
        if n == WQE_SEQ_OURS {
            c.env("MLX5_EMU_WQE_LOG", recorded.wqes);
        }
        if n == CMD_SEQ_OURS {
            c.env("MLX5_EMU_CMD_LOG", recorded.cmds);
        }
        if n == DMABUF_OURS {
            c.env("MLX5_EMU_CMD_LOG", recorded.dmabuf);
        }
        let (code, out) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        let v = check_program(&out, code);
        items.push((ours_group(&out, &v), name, v, log));
    }
    Ok(items)
}

/// Reads and parses the `what` logs (WQE, command) of rdma-core
/// (`theirs`) and our provider (`ours`); an error saying whose log is
/// missing, malformed or `empty`.
fn read_logs<L>(
    theirs: &Path,
    ours: &Path,
    what: &str,
    parse: fn(&str) -> Result<L>,
    empty: fn(&L) -> bool,
) -> std::result::Result<(L, L), String> {
    let read = |p: &Path, who: &str| -> std::result::Result<L, String> {
        let text = fs::read_to_string(p)
            .map_err(|e| format!("no {what} log from {who} ({}: {e})", p.display()))?;
        let l = parse(&text).map_err(|e| format!("{who}'s {what} log: {e:#}"))?;
        if empty(&l) {
            return Err(format!("{who}'s {what} log records no {what}"));
        }
        Ok(l)
    };
    Ok((read(theirs, "rdma-core")?, read(ours, "our provider")?))
}

/// Compares the two WQE logs, writing the full report (the rules, then
/// every mismatch) to `logs/<log_name>`. Fails when a log is missing
/// or empty, or anything differs.
fn compare_wqes(
    theirs: &Path,
    ours: &Path,
    logs: &Path,
    log_name: &str,
) -> (Group, std::result::Result<String, String>, PathBuf) {
    let log = logs.join(log_name);
    let none = Group::Compare {
        compared: 0,
        identical: 0,
        differing: 0,
    };
    let (t, o) = match read_logs(theirs, ours, "WQE", wqe_compare::parse, |l| {
        l.wqes.is_empty()
    }) {
        Ok(both) => both,
        Err(e) => {
            let _ = fs::write(&log, format!("{e}\n"));
            return (none, Err(e), log);
        }
    };
    let r = wqe_compare::compare(&t, &o);
    let mut text = String::from("normalisation rules (what may legitimately differ):\n");
    for (n, why) in wqe_compare::RULES {
        text += &format!("  {n}: {why}\n");
    }
    text += &wqe_compare::render(&r, usize::MAX);
    let _ = fs::write(&log, &text);
    let group = Group::Compare {
        compared: r.compared,
        identical: r.identical,
        differing: r.differing,
    };
    let verdict = if r.ok() {
        Ok(format!(
            "{} WQEs identical after normalisation",
            r.identical
        ))
    } else {
        let first = r
            .geometry
            .first()
            .or(r.mismatches.first())
            .cloned()
            .unwrap_or_default();
        Err(format!(
            "{} of {} WQEs differ, {} geometry differences; first: {first}",
            r.differing,
            r.compared,
            r.geometry.len()
        ))
    };
    (group, verdict, log)
}

/// Compares the two command logs, writing the full report (the rules, the
/// differences, libmlx5's sequence) to `logs/<log_name>`. Fails when
/// a log is missing or empty, or anything differs.
fn compare_cmds(
    theirs: &Path,
    ours: &Path,
    logs: &Path,
    log_name: &str,
) -> (Group, std::result::Result<String, String>, PathBuf) {
    let log = logs.join(log_name);
    let none = Group::Commands {
        compared: 0,
        identical: 0,
        differing: 0,
    };
    let (t, o) = match read_logs(theirs, ours, "command", cmd_compare::parse, Vec::is_empty) {
        Ok(both) => both,
        Err(e) => {
            let _ = fs::write(&log, format!("{e}\n"));
            return (none, Err(e), log);
        }
    };
    let r = cmd_compare::compare(&t, &o);
    let _ = fs::write(&log, cmd_compare::render(&t, &o, &r));
    let group = Group::Commands {
        compared: r.compared,
        identical: r.identical,
        differing: r.differing + r.unpaired,
    };
    let verdict = if r.ok() {
        Ok(format!(
            "{} commands identical after normalisation ({} more only one side sends, \
             each allowed by a rule)",
            r.identical, r.allowed
        ))
    } else {
        Err(format!(
            "{} of {} paired commands differ, {} sent by one side only; first: {}",
            r.differing,
            r.compared,
            r.unpaired,
            r.lines
                .iter()
                .find(|l| !l.contains("allowed by rule"))
                .cloned()
                .unwrap_or_default()
        ))
    };
    (group, verdict, log)
}

/// Compares the REG_DMABUF_MR calls of the two command logs
/// ([`ioctl_compare`]), writing both lists and the verdict to
/// `logs/<log_name>`.
fn compare_ioctls(
    theirs: &Path,
    ours: &Path,
    logs: &Path,
    log_name: &str,
) -> (Group, std::result::Result<String, String>, PathBuf) {
    let log = logs.join(log_name);
    let t = fs::read_to_string(theirs).unwrap_or_default();
    let o = fs::read_to_string(ours).unwrap_or_default();
    let r = ioctl_compare::compare(&t, &o);
    let mut text = String::from(
        "REG_DMABUF_MR calls (ioctl records of MLX5_EMU_CMD_LOG, fd value normalised);\n\
         each of ours must equal one of rdma-core's, in order\n\nrdma-core (dmabuf.c):\n",
    );
    for c in ioctl_compare::calls(&t) {
        text += &format!("  {c}\n");
    }
    text += "ours (mlx5_dmabuf):\n";
    for c in ioctl_compare::calls(&o) {
        text += &format!("  {c}\n");
    }
    for p in &r.problems {
        text += &format!("PROBLEM: {p}\n");
    }
    let _ = fs::write(&log, &text);
    let group = Group::Ioctl {
        compared: r.ours,
        identical: r.identical,
    };
    let verdict = match r.problems.first() {
        None => Ok(format!(
            "{} of ours identical to rdma-core's ({} of theirs; the rest refused before the kernel)",
            r.identical, r.theirs
        )),
        Some(p) => Err(p.clone()),
    };
    (group, verdict, log)
}

/// Prints the closing summary and returns whether everything passed.
pub fn summary(outcomes: &[Outcome]) -> bool {
    util::print_line(&summary_line(outcomes));
    outcomes.iter().all(|o| o.ok)
}

/// The closing summary line.
fn summary_line(outcomes: &[Outcome]) -> String {
    let (mut n, mut m, mut s, mut p, mut q, mut w, mut x, mut y) = (0, 0, 0, 0, 0, 0, 0, 0);
    let (mut cc, mut ci, mut cd) = (0, 0, 0);
    let (mut ic, mut ii) = (0, 0);
    for o in outcomes {
        match o.group {
            Group::RdmaCore { steps } => {
                if o.ok {
                    n += 1;
                } else {
                    m += 1;
                }
                s += steps;
            }
            Group::Ours { passed, failed } => {
                p += passed;
                q += failed;
            }
            Group::Ioctl {
                compared,
                identical,
            } => {
                ic += compared;
                ii += identical;
            }
            Group::Commands {
                compared,
                identical,
                differing,
            } => {
                cc += compared;
                ci += identical;
                cd += differing;
            }
            Group::Compare {
                compared,
                identical,
                differing,
            } => {
                w += compared;
                x += identical;
                y += differing;
            }
        }
    }
    format!(
        "mlx5: rdma-core against the emulated ConnectX-5: {n} items passed, {m} failed \
         ({s} scenario steps passed); our provider: {p} scenario steps passed, {q} failed; \
         commands compared: {cc} ({ci} identical after normalisation, {cd} differing); \
         WQEs compared: {w} ({x} identical after normalisation, {y} differing); \
         dmabuf ioctls compared: {ic} ({ii} identical)"
    )
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
    fn summary_counts_each_group() {
        let o = |group, ok| Outcome {
            name: String::new(),
            ok,
            detail: String::new(),
            group,
        };
        let all = [
            o(Group::RdmaCore { steps: 0 }, true),
            o(Group::RdmaCore { steps: 7 }, true),
            o(Group::RdmaCore { steps: 2 }, false),
            o(
                Group::Ours {
                    passed: 5,
                    failed: 1,
                },
                false,
            ),
            o(
                Group::Ours {
                    passed: 3,
                    failed: 0,
                },
                true,
            ),
            o(
                Group::Commands {
                    compared: 4,
                    identical: 3,
                    differing: 1,
                },
                false,
            ),
            o(
                Group::Compare {
                    compared: 10,
                    identical: 9,
                    differing: 1,
                },
                false,
            ),
        ];
        assert_eq!(
            summary_line(&all),
            "mlx5: rdma-core against the emulated ConnectX-5: 2 items passed, 1 failed (9 \
             scenario steps passed); our provider: 8 scenario steps passed, 1 failed; commands \
             compared: 4 (3 identical after normalisation, 1 differing); WQEs compared: 10 (9 \
             identical after normalisation, 1 differing); dmabuf ioctls compared: 0 (0 \
             identical)"
        );
    }

    #[test]
    fn ours_counts_a_silent_failure() {
        let v = Err("killed".to_string());
        assert_eq!(
            ours_group("PASS a\nPASS b\n", &v),
            Group::Ours {
                passed: 2,
                failed: 1
            }
        );
        let v = Err("FAIL b: x".to_string());
        assert_eq!(
            ours_group("PASS a\nFAIL b: x\n", &v),
            Group::Ours {
                passed: 1,
                failed: 1
            }
        );
        assert_eq!(
            ours_group("PASS a\n", &Ok(String::new())),
            Group::Ours {
                passed: 1,
                failed: 0
            }
        );
    }

    #[test]
    fn our_programs_in_either_layout() {
        let dir = std::env::temp_dir().join(format!("mlx5-bins-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("mlx5_multi")).unwrap();
        fs::create_dir_all(dir.join("mlx5_no_main")).unwrap();
        fs::create_dir_all(dir.join("other")).unwrap();
        for f in [
            "mlx5_single.rs",
            "mlx5_multi/main.rs",
            "mlx5_multi/part.rs",
            "mlx5_notes.txt",
            "other/main.rs",
            "plain.rs",
        ] {
            fs::write(dir.join(f), "").unwrap();
        }
        let names = our_programs(&dir);
        let mut want: Vec<String> = ["mlx5_multi", "mlx5_single"]
            .iter()
            .chain(OURS_EXPECTED)
            .map(|s| s.to_string())
            .collect();
        want.sort();
        want.dedup();
        assert_eq!(names, want);
        assert_eq!(
            our_source(&dir, "mlx5_single"),
            Some(dir.join("mlx5_single.rs"))
        );
        assert_eq!(
            our_source(&dir, "mlx5_multi"),
            Some(dir.join("mlx5_multi").join("main.rs"))
        );
        assert_eq!(our_source(&dir, "mlx5_no_main"), None);
        assert_eq!(our_source(&dir, OURS_EXPECTED[0]), None);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn roce_items_by_name() {
        assert!(is_roce("roce"));
        assert!(is_roce("roce_ud"));
        assert!(is_roce("mlx5_roce"));
        assert!(same_tool_output("a:\t1\nb:  2\n", "a: 1\nb: 2\n").is_ok());
        assert!(same_tool_output("a: 1\nb: 2\n", "a: 1\nb: 3\n").is_err());
        assert!(same_tool_output("a: 1\nb: 2\n", "a: 1\nb: 2\nc: 3\n").is_err());
        assert!(same_tool_output("", "").is_err());
        assert!(is_roce("roce_ibv_devinfo"));
        assert!(!is_roce("datapath"));
        assert!(!is_roce("mlx5_scenarios"));
        assert!(!is_roce("ibv_devinfo"));
    }

    #[test]
    fn tool_verdicts() {
        assert!(check_tool("hca_id:\tmlx5_0\n", Some(0), &["hca_id:\tmlx5_0"]).is_ok());
        assert!(check_tool("hca_id:\tmlx5_0\n", Some(0), &["vendor_id"]).is_err());
        assert!(check_tool("hca_id:\tmlx5_0\n", Some(255), &["hca_id"]).is_err());
        assert!(check_tool("hca_id:\tmlx5_0\n", None, &["hca_id"]).is_err());
    }
}
