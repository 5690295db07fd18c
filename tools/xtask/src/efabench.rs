//! The EFA rows of `cargo xtask bench`: instructions per post + poll on
//! the emulated EFA device (`tests/efa-emu`, preloaded, on the host),
//! ours (`verbs/examples/efa_postpoll.rs`, through `provider-efa`)
//! against rdma-core's libibverbs + libefa (`tools/bench/efa_postpoll.c`),
//! both under callgrind counting only the `*measured_*` functions. Each
//! probe checks every round's payload (`verified=`); the target is
//! libefa's count.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::callgrind::callgrind_total;
use crate::util::{self, cargo_bin, workspace_root};

/// The emulated device's name.
const DEVICE: &str = "efa_0";
/// Time limit of one probe under valgrind.
const LIMIT_SECS: u32 = 600;

/// One EFA probe mode (see verbs/examples/efa_postpoll.rs).
pub struct EfaProbe {
    /// The probes' first argument.
    pub mode: &'static str,
    /// The table's row.
    pub what: &'static str,
}

/// The EFA probes: both must cost no more than libefa's (issue 46).
pub const EFA_PROBES: &[EfaProbe] = &[
    EfaProbe {
        mode: "send",
        what: "post_send of one signaled 64 B SEND on an SRD QP + the poll that returns its completion",
    },
    EfaProbe {
        mode: "recv",
        what: "post_recv of one 64 B receive on an SRD QP + the poll that returns its completion",
    },
];

/// One probe's counts per iteration: ours, libefa's.
pub type EfaResult = (&'static EfaProbe, Result<f64>, Result<f64>);

/// The two sides' tags (file names in the run folder).
const SIDES: [&str; 2] = ["rverbs", "rdma-core"];

fn file(tag: &str, mode: &str) -> String {
    format!("efa-cg-{tag}-{mode}")
}

/// Builds the emulator and the C twin, runs every probe on both sides
/// into the run folder `out` (`probe_rs`: the release example, built by
/// the bench's workspace build) and reads the counts.
pub fn run(target: &Path, out: &Path, probe_rs: &Path, iters: u32) -> Result<Vec<EfaResult>> {
    say!("building the EFA emulator for the EFA probes");
    util::run(
        Command::new(cargo_bin())
            .args(["build", "-p", crate::efa::EMU_PACKAGE])
            .current_dir(workspace_root()),
    )?;
    let lib = target.join("debug").join("libefa_emu.so");
    if !lib.is_file() {
        bail!("{} was not built", lib.display());
    }
    if !Path::new("/usr/include/infiniband/efadv.h").exists() {
        util::apt_install(&["libibverbs-dev"])?;
    }
    let probe_c: PathBuf = target.join("bench").join("efa-postpoll-c");
    util::mkdir_p(&target.join("bench"))?;
    util::run(
        Command::new("cc")
            .args(["-O2", "-o"])
            .arg(&probe_c)
            .arg(workspace_root().join("tools/bench/efa_postpoll.c"))
            .args(["-libverbs", "-lefa"]),
    )
    .context("compiling tools/bench/efa_postpoll.c (libibverbs-dev, libefa)")?;
    let sysfs = target.join("bench").join("efa-sysfs");
    let _ = std::fs::remove_dir_all(&sysfs);
    for p in EFA_PROBES {
        for (tag, bin) in SIDES.iter().zip([probe_rs, probe_c.as_path()]) {
            let name = file(tag, p.mode);
            say!("efa: callgrind {tag} {}", p.mode);
            let log = std::fs::File::create(out.join(format!("{name}.log")))?;
            let status = Command::new("timeout")
                .arg(LIMIT_SECS.to_string())
                .args(["valgrind", "--tool=callgrind", "--collect-atstart=no"])
                .arg("--toggle-collect=*measured_*")
                .arg(format!(
                    "--callgrind-out-file={}",
                    out.join(format!("{name}.out")).display()
                ))
                .arg(bin)
                .arg(p.mode)
                .arg(iters.to_string())
                .arg(DEVICE)
                .env("LD_PRELOAD", &lib)
                .env("EFA_EMU_SYSFS", &sysfs)
                .env("SYSFS_PATH", &sysfs)
                .env_remove("EFA_EMU_LOG")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .status()
                .context("running valgrind")?;
            let code = status
                .code()
                .map_or("signal".to_string(), |c| c.to_string());
            std::fs::write(out.join(format!("{name}.status")), format!("{code}\n"))?;
        }
    }
    Ok(read(out, iters))
}

/// Every EFA probe's counts from the run folder `out`.
pub fn read(out: &Path, iters: u32) -> Vec<EfaResult> {
    EFA_PROBES
        .iter()
        .map(|p| {
            (
                p,
                read_one(out, SIDES[0], p, iters),
                read_one(out, SIDES[1], p, iters),
            )
        })
        .collect()
}

fn read_one(out: &Path, tag: &str, p: &EfaProbe, iters: u32) -> Result<f64> {
    let name = file(tag, p.mode);
    let status = std::fs::read_to_string(out.join(format!("{name}.status"))).unwrap_or_default();
    let log = std::fs::read_to_string(out.join(format!("{name}.log"))).unwrap_or_default();
    if status.trim() != "0" {
        bail!(
            "the {tag} EFA probe `{}` failed (status {:?}): {}",
            p.mode,
            status.trim(),
            log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
        );
    }
    if !log.contains("verified=") {
        bail!("the {tag} EFA probe `{}` did not verify its data", p.mode);
    }
    let data = std::fs::read_to_string(out.join(format!("{name}.out")))
        .with_context(|| format!("no callgrind output for {name}"))?;
    let total =
        callgrind_total(&data).with_context(|| format!("no instruction total in {name}.out"))?;
    if total == 0 {
        bail!("{name}: callgrind counted nothing (were the *measured_* functions inlined away?)");
    }
    Ok(total as f64 / f64::from(iters.max(1)))
}

/// The table of `rows` (target: no more than libefa's count). Returns
/// whether every probe ran and met it.
pub fn table(w: &mut impl FnMut(&str), rows: &[EfaResult]) -> bool {
    let mut ok = true;
    w("| Measured step | rverbs | rdma-core (libefa) | rverbs / rdma-core | target |");
    w("|---|---:|---:|---:|:---:|");
    for (p, ours, theirs) in rows {
        let cell = |r: &Result<f64>| match r {
            Ok(v) => format!("{v:.1}"),
            Err(_) => "failed".into(),
        };
        let (ratio, verdict) = match (ours, theirs) {
            (Ok(o), Ok(t)) if o <= t => (format!("{:.3}", o / t), "<= 1.0x: met".to_string()),
            (Ok(o), Ok(t)) => {
                ok = false;
                (format!("{:.3}", o / t), "<= 1.0x: **missed**".to_string())
            }
            _ => {
                ok = false;
                ("-".into(), "**failed**".into())
            }
        };
        w(&format!(
            "| {} | {} | {} | {ratio} | {verdict} |",
            p.what,
            cell(ours),
            cell(theirs)
        ));
    }
    for (p, ours, theirs) in rows {
        for (side, r) in SIDES.iter().zip([ours, theirs]) {
            if let Err(e) = r {
                w("");
                w(&format!("- {side} EFA probe `{}`: {e:#}", p.mode));
            }
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_judges_against_libefa_and_names_failures() {
        let rows: Vec<EfaResult> = vec![
            (&EFA_PROBES[0], Ok(382.0), Ok(337.1)),
            (&EFA_PROBES[1], Ok(270.0), Err(anyhow::anyhow!("status 1"))),
        ];
        let mut md = String::new();
        let ok = table(
            &mut |l| {
                md.push_str(l);
                md.push('\n');
            },
            &rows,
        );
        assert!(!ok);
        assert!(md.contains("| 382.0 | 337.1 | 1.133 | <= 1.0x: **missed** |"));
        assert!(md.contains("| 270.0 | failed | - | **failed** |"));
        assert!(md.contains("- rdma-core EFA probe `recv`: status 1"));
        let met: Vec<EfaResult> = vec![(&EFA_PROBES[0], Ok(300.0), Ok(337.1))];
        assert!(table(&mut |_| {}, &met));
    }
}
