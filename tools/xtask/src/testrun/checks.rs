//! The static checks before any test: fmt, clippy and the aarch64 type
//! check, the fully static `rverbs`, and the MSRV build of the published
//! crates.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::util::{self, cargo_bin, describe};

/// Adds a target's standard library with rustup unless it is installed.
pub(super) fn ensure_rust_target(target: &str) -> Result<()> {
    let installed = util::output(Command::new("rustup").args(["target", "list", "--installed"]))
        .map(|t| t.lines().any(|l| l.trim() == target))
        .unwrap_or(false);
    if !installed {
        say!("adding the {target} target with rustup");
        util::run(
            Command::new("rustup")
                .args(["target", "add", target])
                .stdin(Stdio::null()),
        )?;
    }
    Ok(())
}

/// The target whose type check stands in for the aarch64 machines mlx5 runs
/// on (BlueField, Grace, Graviton): the barriers differ there.
pub(super) const AARCH64_TARGET: &str = "aarch64-unknown-linux-gnu";

/// `cargo fmt --check`, clippy with warnings denied, and `cargo check` of
/// the workspace for aarch64 (the target's standard library is added with
/// rustup when missing). Returns each check's name and verdict.
pub(super) fn static_checks(ws: &Path) -> Vec<(String, bool)> {
    let mut results = Vec::new();
    if let Err(e) = ensure_rust_target(AARCH64_TARGET) {
        say!("rustup target add aarch64: FAILED: {e:#}");
        results.push(("rustup target add aarch64".to_string(), false));
    }
    let mut check = |name: &str, cmd: &mut Command| {
        cmd.current_dir(ws).stdin(Stdio::null());
        say!("{name}: {}", describe(cmd));
        let started = std::time::Instant::now();
        let ok = match util::run(cmd) {
            Ok(()) => true,
            Err(e) => {
                say!("{name}: FAILED: {e:#}");
                false
            }
        };
        // Each check's time, for the run's budget (CI prints them).
        say!(
            "{name}: {} ({} s)",
            if ok { "ok" } else { "FAILED" },
            started.elapsed().as_secs()
        );
        results.push((name.to_string(), ok));
    };
    check(
        "cargo fmt --check",
        Command::new(cargo_bin()).args(["fmt", "--all", "--check"]),
    );
    check(
        "clippy -D warnings",
        Command::new(cargo_bin()).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--quiet",
            "--",
            "-D",
            "warnings",
        ]),
    );
    check(
        "cargo doc -D warnings",
        Command::new(cargo_bin())
            .args(["doc", "--no-deps", "--workspace", "--quiet"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    );
    // docs.rs builds rverbs and rverbs-cm with their tokio feature
    // (package.metadata.docs.rs).
    check(
        "cargo doc -D warnings (tokio feature)",
        Command::new(cargo_bin())
            .args(["doc", "--no-deps", "--workspace", "--quiet"])
            .args(["--features", "rverbs/tokio,rverbs-cm/tokio"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    );
    // Verification builds the packages as registry crates, which cargo
    // never rebuilds for a changed source at an unchanged version: it gets
    // a target folder of its own, with nothing left in it of our crates
    // (their dependencies from crates.io stay built), and no unpacked copy
    // of an earlier run's sources.
    forget_packaged_sources();
    let verify_dir = ws.join("target/package-verify");
    forget_packaged_builds(&verify_dir);
    let mut package = Command::new(cargo_bin());
    package
        .args(["package", "--quiet", "--allow-dirty"])
        .env("CARGO_TARGET_DIR", &verify_dir);
    for p in PUBLISHED {
        package.args(["-p", p]);
    }
    check("cargo package (published crates)", &mut package);
    check(
        "aarch64 type check",
        Command::new(cargo_bin()).args([
            "check",
            "--workspace",
            "--all-targets",
            "--quiet",
            "--target",
            AARCH64_TARGET,
        ]),
    );
    match msrv_command(ws) {
        Ok(mut cmd) => check("MSRV check", &mut cmd),
        Err(e) => {
            say!("MSRV check: FAILED: {e:#}");
            results.push(("MSRV check".to_string(), false));
        }
    }
    results
}

/// The target of the static `rverbs` (`.cargo/config.toml` makes it
/// non-PIE and statically linked).
pub(super) const STATIC_TARGET: &str = "x86_64-unknown-linux-musl";

/// Builds `rverbs` for [`STATIC_TARGET`] (adding the target with rustup
/// when missing) and checks the result is fully static and names no
/// rdma-core library. Returns its path.
pub(super) fn static_rverbs(ws: &Path, target_dir: &Path) -> Result<PathBuf> {
    ensure_rust_target(STATIC_TARGET)?;
    let mut cmd = Command::new(cargo_bin());
    cmd.args([
        "build",
        "-p",
        "rverbs-cli",
        "--bin",
        "rverbs",
        "--target",
        STATIC_TARGET,
    ])
    .current_dir(ws)
    .stdin(Stdio::null());
    say!("static rverbs: {}", describe(&cmd));
    util::run(&mut cmd)?;
    let path = target_dir.join(STATIC_TARGET).join("debug/rverbs");
    if !crate::linkage::fully_static(&path)? {
        anyhow::bail!("{} has an interpreter or a dynamic section", path.display());
    }
    let names = crate::linkage::inspect(&path)?;
    if !names.is_empty() {
        anyhow::bail!("{}: {}", path.display(), names.join("; "));
    }
    Ok(path)
}

/// Removes what earlier `cargo package` runs unpacked of our own crates.
/// Verification builds each package against its siblings from a local
/// registry in the target folder; cargo unpacks those into
/// `$CARGO_HOME/registry/src/-<hash of that path>/NAME-VERSION` and reuses
/// an unpacked copy whose version did not change, so a second run from the
/// same checkout path would verify against the first run's sources. Local
/// registries are the folders whose name starts with `-`; only our package
/// names are touched.
pub(super) fn forget_packaged_sources() {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return;
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return;
    };
    for reg in registries.flatten() {
        if !reg.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let Ok(crates) = std::fs::read_dir(reg.path()) else {
            continue;
        };
        for c in crates.flatten() {
            let name = c.file_name().to_string_lossy().into_owned();
            let ours = PUBLISHED.iter().any(|p| {
                name.strip_prefix(p)
                    .and_then(|rest| rest.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|ch: char| ch.is_ascii_digit()))
            });
            if ours {
                let _ = std::fs::remove_dir_all(c.path());
            }
        }
    }
}

/// Removes what earlier `cargo package` runs left of our own crates in
/// the verification target folder, keeping their dependencies' builds.
/// Cargo fingerprints a registry crate by its version alone, so a build of
/// ours left there would be taken as fresh for changed sources at the same
/// version; with its fingerprint and outputs gone it is built again. In
/// every profile folder (one holding `.fingerprint/`), the entries of the
/// folder itself and of `.fingerprint/`, `deps/`, `build/`, `incremental/`
/// and `examples/` named after one of [`PUBLISHED`] (see [`ours`]) go, and
/// so does `package/` (the packed and unpacked copies of our crates and
/// the local registry holding them).
pub(super) fn forget_packaged_builds(verify_dir: &Path) {
    let _ = std::fs::remove_dir_all(verify_dir.join("package"));
    let Ok(top) = std::fs::read_dir(verify_dir) else {
        return;
    };
    for profile in top.flatten().map(|e| e.path()) {
        if !profile.join(".fingerprint").is_dir() {
            continue;
        }
        for sub in [
            "",
            ".fingerprint",
            "deps",
            "build",
            "incremental",
            "examples",
        ] {
            let Ok(entries) = std::fs::read_dir(profile.join(sub)) else {
                continue;
            };
            for e in entries.flatten() {
                if !ours(&e.file_name().to_string_lossy()) {
                    continue;
                }
                let path = e.path();
                let _ = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
            }
        }
    }
}

/// Whether a file or folder cargo made in a target folder belongs to one
/// of [`PUBLISHED`]: its name, without a `lib` in front and with `-` read
/// as `_`, starts with a published crate's name so read (`rverbs-abi-HASH`,
/// `librverbs_abi-HASH.rlib`, `rverbs_abi-HASH.d`, the `rverbs` binary of
/// rverbs-cli). Every published package's library and binaries carry such
/// a name; a crate of crates.io that did would only be built again.
pub(super) fn ours(name: &str) -> bool {
    let name = name.replace('-', "_");
    let name = name.strip_prefix("lib").unwrap_or(&name);
    PUBLISHED
        .iter()
        .any(|p| name.starts_with(&p.replace('-', "_")))
}

/// The packages published to crates.io, in dependency order.
pub(super) const PUBLISHED: &[&str] = &[
    "rverbs-abi",
    "rverbs-netlink",
    "rverbs-provider",
    "rverbs-rxe",
    "rverbs-mlx5",
    "rverbs-efa",
    "rverbs",
    "rverbs-cm",
    "rverbs-cli",
];

/// The workspace's declared `rust-version` (`[workspace.package]`).
pub(super) fn declared_msrv(ws: &Path) -> Result<String> {
    let manifest = std::fs::read_to_string(ws.join("Cargo.toml"))?;
    manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .map(|v| v.trim().trim_matches('"').to_string())
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit() || b == b'.'))
        .context("no rust-version in the workspace's Cargo.toml")
}

/// Prepares the MSRV check of the published crates (libraries and the
/// `rverbs` binary, default features: what a user builds; the `tokio`
/// feature follows tokio's own MSRV, and dev-dependencies are ours alone):
/// installs the declared toolchain with rustup
/// when missing, copies the workspace's files (tracked and untracked, not
/// ignored) to `target/msrv/ws`, resolves its dependencies there for that
/// Rust version (cargo's `fallback` resolver, so a dependency whose newest
/// release needs a newer Rust is taken at an older release; the real
/// Cargo.lock is untouched), and returns the `cargo +MSRV check` to run.
pub(super) fn msrv_command(ws: &Path) -> Result<Command> {
    let msrv = declared_msrv(ws)?;
    let has = util::output(Command::new("rustup").args(["toolchain", "list"]))
        .map(|t| t.lines().any(|l| l.starts_with(&format!("{msrv}-"))))
        .unwrap_or(false);
    if !has {
        say!("MSRV check: installing Rust {msrv} with rustup");
        util::run(
            Command::new("rustup")
                .args(["toolchain", "install", &msrv, "--profile", "minimal"])
                .stdin(Stdio::null()),
        )?;
    }
    let base = ws.join("target/msrv");
    let copy = base.join("ws");
    if copy.exists() {
        std::fs::remove_dir_all(&copy)?;
    }
    let files = util::output(
        Command::new("git")
            .args(["ls-files", "-co", "--exclude-standard"])
            .current_dir(ws),
    )?;
    for f in files.lines().filter(|f| !f.is_empty()) {
        let (from, to) = (ws.join(f), copy.join(f));
        if !from.is_file() {
            continue;
        }
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(&from, &to).with_context(|| format!("copying {f}"))?;
    }
    util::run(
        Command::new(cargo_bin())
            .args(["update", "--quiet"])
            .env("CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS", "fallback")
            .current_dir(&copy)
            .stdin(Stdio::null()),
    )?;
    let mut cmd = Command::new("cargo");
    // By manifest path: the checks run from the workspace root.
    cmd.arg(format!("+{msrv}"))
        .args(["check", "--quiet"])
        .args(PUBLISHED.iter().flat_map(|p| ["-p", p]))
        .arg("--manifest-path")
        .arg(copy.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(base.join("target"))
        // rustup's proxy picks the toolchain from `+MSRV`, not from the
        // cargo that runs xtask.
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC");
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_crates_are_forgotten_in_the_verify_folder() {
        let dir = std::env::temp_dir().join(format!("package-verify-{}", std::process::id()));
        let debug = dir.join("debug");
        let gone = [
            "package/tmp-registry/index",
            "package/rverbs-abi-0.1.0/src/lib.rs",
            "debug/.fingerprint/rverbs-abi-1d5f129977576a37/lib-rverbs_abi",
            "debug/.fingerprint/rverbs-cli-48413f473fb3dd78/bin-rverbs",
            "debug/deps/librverbs_abi-1d5f129977576a37.rlib",
            "debug/deps/librverbs_mlx5-530476fd959ae075.rmeta",
            "debug/deps/rverbs_rxe-197731299e4c4d5b.d",
            "debug/deps/rverbs-48413f473fb3dd78",
            "debug/build/rverbs-provider-0123456789abcdef/output",
            "debug/incremental/rverbs_netlink-2gtt7s1pjsohr/s-x/dep-graph.bin",
            "debug/librverbs_cli.rlib",
            "debug/rverbs",
            "debug/rverbs.d",
        ];
        let kept = [
            "debug/.fingerprint/nix-0848f01281998d5e/lib-nix",
            "debug/.fingerprint/libc-bb2133470ae49579/lib-libc",
            "debug/deps/libnix-0848f01281998d5e.rlib",
            "debug/deps/libsyn-0dcc5c9aa3511f85.rmeta",
            "debug/deps/serde_json-16253bb678d742cb.d",
            "debug/build/libc-bb2133470ae49579/output",
            "debug/.cargo-lock",
            ".rustc_info.json",
        ];
        for f in gone.iter().chain(&kept) {
            let f = dir.join(f);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, "x").unwrap();
        }
        forget_packaged_builds(&dir);
        for f in gone {
            assert!(!dir.join(f).exists(), "{f} is left");
        }
        for f in kept {
            assert!(dir.join(f).exists(), "{f} is gone");
        }
        assert!(debug.join("incremental").is_dir());
        std::fs::remove_dir_all(&dir).unwrap();
        // A missing folder is no error.
        forget_packaged_builds(&dir);
    }

    #[test]
    fn our_names_are_told_from_others() {
        for n in [
            "rverbs",
            "rverbs-abi-1d5f129977576a37",
            "librverbs_provider-b461e7221b8fa01b.rlib",
            "rverbs_cli-2aw59frt2nq9d",
        ] {
            assert!(ours(n), "{n}");
        }
        for n in [
            "libc-bb2133470ae49579",
            "libnix-0848.rlib",
            "syn-0dcc5c9a",
            "zerocopy",
        ] {
            assert!(!ours(n), "{n}");
        }
    }
}
