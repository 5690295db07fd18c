//! `cargo xtask ibverbs`: builds our `libibverbs.so.1` and `libibverbs.a`
//! from the `rverbs-ibverbs` package (verbs/ibverbs).
//!
//! The package is a Rust `staticlib`; that archive is `libibverbs.a`, and
//! the system `cc` links it into `libibverbs.so.1` with the version script
//! `verbs/ibverbs/libibverbs.map`, so every function carries the symbol
//! version consumers of rdma-core's library import it with (rustc's
//! `cdylib` applies a version script of its own and would leave them
//! unversioned). The script names each symbol's default version; a
//! compatibility version (`ibv_get_device_list@IBVERBS_1.0`) is a symbol
//! of the crate named so (`#[export_name]`), which the linker exports as
//! that version of the name. Each symbol is passed as `-u` (so its object
//! is pulled from the archive) and `--no-undefined-version` makes a name
//! the crate does not define a link error. The result is then checked:
//! exactly the script's symbols and the crate's compatibility versions are
//! exported, each with its version; every (symbol, version) pair of
//! rdma-core 56's library is among them (`abi.rs`, against the list in
//! `verbs/ibverbs/abi/`); and the linkage check finds nothing in it but
//! its own name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::abi::Pair;
use crate::util::{self, cargo_bin, workspace_root};

/// The package and its version script, relative to the workspace.
const PACKAGE: &str = "rverbs-ibverbs";
const MAP: &str = "verbs/ibverbs/libibverbs.map";
/// The library's name without `.so`: the file names are built from it at
/// run time, so that this harness's own binary never holds the string the
/// linkage check looks for in binaries that could `dlopen` rdma-core.
const STEM: &str = "libibverbs";

/// The library's file name and soname, `libibverbs.so.1`.
pub fn soname() -> String {
    format!("{STEM}.so.{}", 1)
}

/// The (symbol, version) pairs a version script exports: every name in a
/// node's `global:` list, under that node's name.
pub fn map_symbols(script: &str) -> Result<BTreeMap<String, String>> {
    // Drop /* comments */ first.
    let mut text = String::new();
    let mut rest = script;
    while let Some(i) = rest.find("/*") {
        text.push_str(&rest[..i]);
        let end = rest[i..].find("*/").context("unterminated comment")?;
        rest = &rest[i + end + 2..];
    }
    text.push_str(rest);
    // Tokens: words, and each of `{`, `}`, `;` on its own.
    let mut toks: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_whitespace() || "{};".contains(c) {
            if !cur.is_empty() {
                toks.push(std::mem::take(&mut cur));
            }
            if "{};".contains(c) {
                toks.push(c.to_string());
            }
        } else {
            cur.push(c);
        }
    }
    if !cur.is_empty() {
        toks.push(cur);
    }
    enum At {
        /// Before a node's name.
        Outside,
        /// After its name, before `{`.
        Named(String),
        /// In its braces; whether in `global:`.
        Inside(String, bool),
        /// After its `}`: the nodes it depends on, up to `;`.
        After,
    }
    let mut out = BTreeMap::new();
    let mut at = At::Outside;
    for t in toks {
        at = match (at, t.as_str()) {
            (At::Outside, name) if name != "{" && name != "}" && name != ";" => {
                At::Named(name.to_string())
            }
            (At::Named(n), "{") => At::Inside(n, false),
            (At::Inside(n, _), "global:") => At::Inside(n, true),
            (At::Inside(n, _), "local:") => At::Inside(n, false),
            (At::Inside(_, _), "}") => At::After,
            (At::Inside(n, g), ";") => At::Inside(n, g),
            (At::Inside(n, true), sym) => {
                if !sym.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    bail!("unexpected token {sym:?} in the version script");
                }
                if out.insert(sym.to_string(), n.clone()).is_some() {
                    bail!("{sym} is exported twice");
                }
                At::Inside(n, true)
            }
            (At::Inside(n, false), _) => At::Inside(n, false),
            (At::After, ";") => At::Outside,
            (At::After, _) => At::After,
            (_, t) => bail!("unexpected {t:?} in the version script"),
        };
    }
    if !matches!(at, At::Outside) {
        bail!("the version script ends inside a node");
    }
    if out.is_empty() {
        bail!("the version script exports nothing");
    }
    Ok(out)
}

/// The compatibility versions the crate defines: the symbols of the
/// archive named `name@VERSION` (`#[export_name]`), which the linker
/// exports as that version of `name`, not its default (the version script
/// names only the defaults).
fn compat_pairs(archive: &Path) -> Result<BTreeSet<Pair>> {
    let out = util::output(
        Command::new("nm")
            .args(["-g", "--defined-only"])
            .arg(archive),
    )?;
    Ok(out
        .lines()
        .filter_map(|l| l.split_whitespace().last())
        .filter(|name| name.contains('@'))
        .filter_map(Pair::parse)
        .collect())
}

/// Builds the library with `profile` (`debug` or `release`) into
/// `target/ibverbs/<profile>/`: `libibverbs.so.1`, the `libibverbs.so`
/// link, `libibverbs.a`. Returns that folder.
pub fn build(target_dir: &Path, release: bool) -> Result<PathBuf> {
    let ws = workspace_root();
    let profile = if release { "release" } else { "debug" };
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["build", "-p", PACKAGE, "--lib"])
        .current_dir(&ws)
        .stdin(Stdio::null());
    if release {
        cmd.arg("--release");
    }
    say!("building {PACKAGE} ({profile})");
    util::run(&mut cmd)?;
    let archive = target_dir.join(profile).join("librverbs_ibverbs.a");
    let out = target_dir.join("ibverbs").join(profile);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    std::fs::copy(&archive, out.join(format!("{STEM}.a")))
        .with_context(|| format!("copying {}", archive.display()))?;
    let map_path = ws.join(MAP);
    let script = std::fs::read_to_string(&map_path)
        .with_context(|| format!("reading {}", map_path.display()))?;
    let defaults = map_symbols(&script)?;
    let compat = compat_pairs(&archive)?;
    let mut wanted: BTreeSet<Pair> = defaults
        .iter()
        .map(|(name, version)| Pair {
            name: name.clone(),
            version: version.clone(),
            default: true,
        })
        .collect();
    wanted.extend(compat.iter().cloned());
    let soname = soname();
    let lib = out.join(&soname);
    let mut cc = shared_link(&lib, &soname, &map_path);
    cc.args(defaults.keys().map(|s| format!("-Wl,-u,{s}")))
        .args(compat.iter().map(|p| format!("-Wl,-u,{p}")))
        .arg(&archive)
        .args(["-lpthread", "-ldl", "-lm"]);
    say!("linking {}", lib.display());
    util::run(&mut cc).with_context(|| format!("linking {soname} (is a C compiler installed?)"))?;
    let got = check_shared(&out, STEM, &lib, &wanted)?;
    say!(
        "{}: {} (symbol, version) pairs ({} compatibility versions), as the version script and the crate say; no rdma-core in it",
        lib.display(),
        got.len(),
        compat.len()
    );
    crate::abi::check(&ws, &lib)?;
    crate::efadv::build(&ws, &out, release)?;
    static_programs(&ws, &out)?;
    c_tests(&ws, &out)?;
    host_c_tests(&out)?;
    Ok(out)
}

/// The `cc` command that links the shared library `lib` (soname `soname`)
/// with the version script `map`: every symbol at its script's version,
/// a name the script gives but nothing defines an error, nothing left
/// undefined, bound at load. The caller adds the inputs.
pub(crate) fn shared_link(lib: &Path, soname: &str, map: &Path) -> Command {
    let mut cc = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()));
    cc.arg("-shared")
        .arg("-o")
        .arg(lib)
        .arg(format!("-Wl,-soname,{soname}"))
        .arg(format!("-Wl,--version-script={}", map.display()))
        .args([
            "-Wl,--no-undefined-version",
            "-Wl,--no-undefined",
            "-Wl,-z,now",
        ])
        .stdin(Stdio::null());
    cc
}

/// After [`shared_link`]: makes the `<stem>.so` link to `lib` beside it
/// and checks `lib`, which must export exactly `wanted` and pass the
/// linkage check. Returns what it exports.
pub(crate) fn check_shared(
    out: &Path,
    stem: &str,
    lib: &Path,
    wanted: &BTreeSet<Pair>,
) -> Result<BTreeSet<Pair>> {
    let soname = lib
        .file_name()
        .with_context(|| format!("{} has no file name", lib.display()))?;
    let link = out.join(format!("{stem}.{}", "so"));
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(soname, &link)
        .with_context(|| format!("linking {}", link.display()))?;
    let got = crate::abi::exported(lib)?;
    if got != *wanted {
        let missing: Vec<String> = wanted.difference(&got).map(|p| p.to_string()).collect();
        let extra: Vec<String> = got.difference(wanted).map(|p| p.to_string()).collect();
        bail!(
            "{} exports the wrong set: missing or mis-versioned {missing:?}, unexpected {extra:?}",
            lib.display()
        );
    }
    let problems = crate::linkage::inspect(lib)?;
    if !problems.is_empty() {
        bail!(
            "linkage check of {}: {}",
            lib.display(),
            problems.join("; ")
        );
    }
    Ok(got)
}

/// One run of a program of `c-tests` on the host, on rdma-core's library
/// (`ours` false: the loader's default, `LD_LIBRARY_PATH` removed) or
/// ours (`out` first on `LD_LIBRARY_PATH`): its stdout. Fails unless it
/// exits 0 and says (its stderr's `library:` line) that it ran on the
/// library meant.
fn run_host_c_test(out: &Path, name: &str, args: &[&str], ours: bool) -> Result<String> {
    let exe = out.join("c-tests").join(name);
    let mut cmd = Command::new(&exe);
    cmd.args(args).stdin(Stdio::null());
    if ours {
        cmd.env("LD_LIBRARY_PATH", out);
    } else {
        cmd.env_remove("LD_LIBRARY_PATH");
    }
    let who = if ours { "ours" } else { "rdma-core" };
    let res = cmd
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&res.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&res.stderr).into_owned();
    if !stderr.lines().any(|l| l == format!("library: {who}")) {
        bail!("{name} did not run on {who}'s library: {}", stderr.trim());
    }
    if !res.status.success() {
        bail!(
            "{name} on {who}'s library: {}:\n{stdout}{stderr}",
            res.status
        );
    }
    Ok(stdout)
}

/// The C tests that need no device, on the host, each on rdma-core's
/// library and on ours: `helpers` (rates, path record copies, the private
/// helpers; both must print the same lines, and ours must have
/// `ibv_wr_opcode_str`), and `compat_1_0` without a device (the
/// `IBVERBS_1.0` device list must agree with the 1.1 list on each
/// library; the VM runs its device round, `tests/vm/ibverbs_compat.sh`).
fn host_c_tests(out: &Path) -> Result<()> {
    let theirs = run_host_c_test(out, "helpers", &[], false)?;
    let ours = run_host_c_test(out, "helpers", &["--expect-wr-opcode-str"], true)?;
    if theirs != ours {
        let diff: Vec<String> = theirs
            .lines()
            .zip(ours.lines())
            .filter(|(a, b)| a != b)
            .take(10)
            .map(|(a, b)| format!("rdma-core: {a}\n  ours:      {b}"))
            .collect();
        bail!(
            "c-tests/helpers answers differently on ours ({} lines against {}):\n  {}",
            ours.lines().count(),
            theirs.lines().count(),
            diff.join("\n  ")
        );
    }
    say!(
        "c-tests/helpers: the same {} answers on rdma-core's library and ours",
        ours.lines().count()
    );
    for ours in [false, true] {
        run_host_c_test(out, "compat_1_0", &[], ours)?;
    }
    say!("c-tests/compat_1_0: the IBVERBS_1.0 device list agrees with the 1.1 list on both libraries");
    Ok(())
}

/// The C tests of `tests/ibverbs-c` that judge a libibverbs (thread
/// safety; object lifetimes, events, signals and re-registration), each
/// linked dynamically against the `libibverbs.so.1` in `out` (so that it
/// runs on whichever library the loader finds first: rdma-core's, or ours
/// with `LD_LIBRARY_PATH`): `out/c-tests/NAME`, a folder the linkage
/// check does not read (the programs need a libibverbs, which is their
/// point).
fn c_tests(ws: &Path, out: &Path) -> Result<()> {
    let dir = out.join("c-tests");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for name in C_TESTS {
        let src = ws.join(format!("tests/ibverbs-c/{name}.c"));
        let exe = dir.join(name);
        let mut cc = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()));
        cc.args(["-O2", "-Wall", "-Werror", "-pthread", "-I"])
            .arg(ws.join("tools/bench"))
            .arg("-o")
            .arg(&exe)
            .arg(&src)
            .arg(out.join(soname()))
            .stdin(Stdio::null());
        say!("linking {}", exe.display());
        util::run(&mut cc).with_context(|| format!("building {}", src.display()))?;
    }
    Ok(())
}

/// The programs [`c_tests`] builds, by file stem.
const C_TESTS: &[&str] = &["threads", "rules", "helpers", "compat_1_0", "parent_domain"];

/// The C ping-pong of `tests/ibverbs-c`, linked with `-static` against
/// our `libibverbs.a` in `out` (the header is `<infiniband/verbs.h>` from
/// libibverbs-dev, the ABI it implements): `out/static_pingpong`; and the
/// efadv probe of `tests/efa-emu/c` against our `libefa.a` and
/// `libibverbs.a`: `out/efadv_static`. Each checked to have no
/// interpreter and no dynamic section.
fn static_programs(ws: &Path, out: &Path) -> Result<()> {
    static_program(ws, out, STATIC_PINGPONG_SRC, "static_pingpong", &[])?;
    let efa = out.join(format!("{}.a", ["lib", "efa"].concat()));
    static_program(ws, out, EFADV_PROBE_SRC, "efadv_static", &[efa])
}

/// `src` linked with `-static` against `first` and then our
/// `libibverbs.a` in `out`, as `out/<name>`; checked as
/// [`static_programs`] says.
fn static_program(ws: &Path, out: &Path, src: &str, name: &str, first: &[PathBuf]) -> Result<()> {
    let src = ws.join(src);
    let exe = out.join(name);
    let mut cc = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()));
    cc.args(["-O2", "-Wall", "-Werror", "-static", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(first)
        .arg(out.join(format!("{STEM}.a")))
        .args(["-lpthread", "-ldl", "-lm"])
        .stdin(Stdio::null());
    say!("linking {} statically", exe.display());
    let what = util::describe(&cc);
    let out = cc
        .output()
        .with_context(|| format!("cannot start `{what}`"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!(
            "linking {} with -static failed ({}; libibverbs-dev and libc6-dev must be installed): {}",
            src.display(),
            out.status,
            stderr.trim()
        );
    }
    let warned = static_link_warnings(&stderr);
    let unexpected: Vec<_> = warned
        .iter()
        .filter(|f| !STD_STATIC_WARNINGS.contains(&f.as_str()))
        .collect();
    if !unexpected.is_empty() {
        bail!(
            "linking {} statically warns of {unexpected:?}: something in libibverbs.a now \
             reaches glibc functions a static program cannot use (only Rust's std may, \
             {STD_STATIC_WARNINGS:?}: see docs/book/src/c-library.md, its static linking section)",
            src.display()
        );
    }
    say!("static link warnings (Rust std's own, never called): {warned:?}");
    if !crate::linkage::fully_static(&exe)? {
        bail!("{} has an interpreter or a dynamic section", exe.display());
    }
    let problems = crate::linkage::inspect(&exe)?;
    if !problems.is_empty() {
        bail!(
            "linkage check of {}: {}",
            exe.display(),
            problems.join("; ")
        );
    }
    say!("{}: fully static, no rdma-core in it", exe.display());
    Ok(())
}

/// The glibc functions whose static-link warning ("Using 'F' in
/// statically linked applications requires at runtime the shared
/// libraries ...") a program linked with `libibverbs.a` gets, all from
/// Rust's prebuilt `std`, which is one object file: its name resolver
/// (`getaddrinfo`, behind `ToSocketAddrs`) and `env::home_dir`
/// (`getpwuid_r`). Nothing of libibverbs' API resolves a name or reads
/// the user database, so neither is called; any other warning fails the
/// build.
const STD_STATIC_WARNINGS: &[&str] = &["getaddrinfo", "getpwuid_r"];

/// The functions a linker's output warns of as unusable in static
/// programs, in order, without repeats.
fn static_link_warnings(stderr: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in stderr.lines() {
        let Some((_, rest)) = line.split_once("warning: Using '") else {
            continue;
        };
        let Some((name, tail)) = rest.split_once('\'') else {
            continue;
        };
        if tail.contains("in statically linked applications") && !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    out
}

/// The C program [`static_program`] links.
const STATIC_PINGPONG_SRC: &str = "tests/ibverbs-c/static_pingpong.c";
/// The efadv probe (also one of `cargo xtask efa`'s programs).
const EFADV_PROBE_SRC: &str = "tests/efa-emu/c/efadv_probe.c";

/// Debian's packages whose programs and libraries import from
/// libibverbs (rdma-core 44's consumers).
const CONSUMER_PACKAGES: &[&str] = &[
    "ibverbs-utils",
    "perftest",
    "rdmacm-utils",
    "librdmacm1",
    "ibverbs-providers",
    "python3-pyverbs",
];

/// Checks that every ELF file of [`CONSUMER_PACKAGES`] that imports a
/// versioned libibverbs symbol resolves libibverbs to our library in
/// `dir` and binds every symbol it imports there (`ldd -r` with
/// `LD_LIBRARY_PATH`; they are linked with `-z now`, so one missing
/// (symbol, version) pair would stop them at load time). Returns how
/// many were checked; fails on the first that does not bind, or if fewer
/// than 40 were found (the packages are missing).
pub fn check_consumers(dir: &Path) -> Result<usize> {
    let lib = dir.join(soname());
    let mut files = Vec::new();
    for pkg in CONSUMER_PACKAGES {
        let list = util::output(Command::new("dpkg").args(["-L", pkg]))
            .with_context(|| format!("listing the files of {pkg} (is it installed?)"))?;
        files.extend(list.lines().map(PathBuf::from).filter(|p| p.is_file()));
    }
    let mut checked = 0;
    for f in files {
        let Ok(syms) = util::output(Command::new("objdump").arg("-T").arg(&f)) else {
            continue;
        };
        if !syms.contains("(IBVERBS_") {
            continue;
        }
        checked += 1;
        let out = Command::new("ldd")
            .arg("-r")
            .arg(&f)
            .env("LD_LIBRARY_PATH", dir)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running ldd -r {}", f.display()))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let resolved = format!("{} => {}", soname(), lib.display());
        if !text.contains(&resolved) {
            bail!("{} does not resolve {} to ours", f.display(), soname());
        }
        if let Some(l) = text
            .lines()
            .find(|l| l.contains("undefined symbol") || l.contains("not defined"))
        {
            bail!("{} does not bind on ours: {}", f.display(), l.trim());
        }
    }
    if checked < 40 {
        bail!("only {checked} consumers of libibverbs found in {CONSUMER_PACKAGES:?}");
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_static_link_warnings() {
        let err = "/x/unistd.rs:3425: warning: Using 'getpwuid_r' in statically linked \
                   applications requires at runtime the shared libraries from the glibc \
                   version used for linking\n\
                   /y/mod.rs:350: warning: Using 'getaddrinfo' in statically linked \
                   applications requires at runtime ...\n\
                   /z: warning: Using 'getpwuid_r' in statically linked applications\n\
                   ld: warning: something else\n";
        assert_eq!(static_link_warnings(err), ["getpwuid_r", "getaddrinfo"]);
        assert!(static_link_warnings("").is_empty());
    }

    #[test]
    fn reads_the_version_script() {
        let m = map_symbols(
            "/* c */ A_1.0 {\n global:\n  f; g;\n local: *;\n};\nA_1.1 {\n global: h;\n} A_1.0;\n",
        )
        .unwrap();
        let v: Vec<(&str, &str)> = m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(v, [("f", "A_1.0"), ("g", "A_1.0"), ("h", "A_1.1")]);
        assert!(map_symbols("A { global: f; };\nB { global: f; };").is_err());
        assert!(map_symbols("/* nothing */").is_err());
    }

    #[test]
    fn the_crates_script_parses() {
        let s = std::fs::read_to_string(workspace_root().join(MAP)).unwrap();
        let m = map_symbols(&s).unwrap();
        assert_eq!(m["ibv_get_device_list"], "IBVERBS_1.1");
        assert_eq!(m["ibv_read_sysfs_file"], "IBVERBS_1.0");
        assert_eq!(m["ibv_query_gid_type"], "IBVERBS_PRIVATE_34");
        assert_eq!(m["rverbs_ibverbs_version"], "RVERBS_IBVERBS_0");
    }
}
