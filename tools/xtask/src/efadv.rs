//! Our `libefa.so.1` and `libefa.a` (part of `cargo xtask ibverbs`): the
//! `rverbs-efadv` package (verbs/efadv) compiled to one object file, with
//! no standard library and no panic machinery, whose six `efadv_*`
//! functions forward to the `rverbs_efadv_*` of our libibverbs. The
//! archive is that object; the shared library is it linked against our
//! `libibverbs.so.1` with the version script `verbs/efadv/libefa.map`
//! (`EFA_1.0` to `EFA_1.2`, rdma-core 44's). Checked: the object needs
//! nothing but `rverbs_efadv_*`, the library exports exactly the script's
//! pairs, and the linkage check passes it (its one library is our
//! libibverbs, which it names by a version only ours has).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::abi::Pair;
use crate::util::{self, cargo_bin};

/// The package and its version script, relative to the workspace.
const PACKAGE: &str = "rverbs-efadv";
const MAP: &str = "verbs/efadv/libefa.map";
/// The library's name without `.so` (see `ibverbs::STEM` for why the file
/// names are built at run time).
const STEM: &str = "libefa";
/// The prefix of the functions of our libibverbs the object calls.
const CALLEE_PREFIX: &str = "rverbs_efadv_";

/// The library's file name and soname, `libefa.so.1`.
pub fn soname() -> String {
    format!("{STEM}.so.{}", 1)
}

/// Builds `libefa.a` and `libefa.so.1` (and the `libefa.so` link) into
/// `out`, next to our `libibverbs.so.1` there, which it links against.
pub fn build(ws: &Path, out: &Path, release: bool) -> Result<()> {
    let obj = out.join("efadv.o");
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["rustc", "-p", PACKAGE, "--lib"])
        .current_dir(ws)
        .stdin(Stdio::null());
    if release {
        cmd.arg("--release");
    }
    // One codegen unit (one object), no unwinding (no landing pads that
    // would call into core's panic machinery).
    cmd.args(["--", "-C", "codegen-units=1", "-C", "panic=abort"])
        .arg(format!("--emit=obj={}", obj.display()));
    say!("building {PACKAGE} (one object)");
    util::run(&mut cmd)?;
    let undefined = util::output(
        Command::new("nm")
            .args(["-u", "--format=just-symbols"])
            .arg(&obj),
    )?;
    let foreign: Vec<&str> = undefined
        .lines()
        .map(str::trim)
        .filter(|s| !s.is_empty() && !s.starts_with(CALLEE_PREFIX))
        .collect();
    if !foreign.is_empty() {
        bail!(
            "{} needs {foreign:?}: the forwarding object must call nothing but our libibverbs' {CALLEE_PREFIX}*",
            obj.display()
        );
    }
    let archive = out.join(format!("{STEM}.a"));
    let _ = std::fs::remove_file(&archive);
    util::run(Command::new("ar").arg("rcs").arg(&archive).arg(&obj))
        .context("making the archive (binutils' ar)")?;
    let map_path = ws.join(MAP);
    let script = std::fs::read_to_string(&map_path)
        .with_context(|| format!("reading {}", map_path.display()))?;
    let wanted: BTreeSet<Pair> = crate::ibverbs::map_symbols(&script)?
        .into_iter()
        .map(|(name, version)| Pair {
            name,
            version,
            default: true,
        })
        .collect();
    let soname = soname();
    let lib = out.join(&soname);
    let mut cc = crate::ibverbs::shared_link(&lib, &soname, &map_path);
    cc.arg(&obj)
        .arg("-L")
        .arg(out)
        .arg(format!("-l:{}", crate::ibverbs::soname()));
    say!("linking {}", lib.display());
    util::run(&mut cc).with_context(|| format!("linking {soname}"))?;
    let got = crate::ibverbs::check_shared(out, STEM, &lib, &wanted)?;
    say!(
        "{}: {} (symbol, version) pairs, as {MAP} says; its one library is our {}",
        lib.display(),
        got.len(),
        crate::ibverbs::soname()
    );
    Ok(())
}
