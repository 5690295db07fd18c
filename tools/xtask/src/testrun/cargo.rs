//! The cargo plumbing of the test run: `cargo metadata` (packages and the
//! target directory), running a cargo command with its output teed, and
//! the build of the examples the VM scripts run.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use serde_json::Value;

use super::{EXAMPLES_FEATURES, EXAMPLES_PACKAGES};
use crate::util::{self, cargo_bin, describe, print_line, workspace_root};

/// One package of `cargo metadata`.
pub(super) struct Package {
    pub(super) name: String,
    pub(super) dir: PathBuf,
}

/// Workspace packages and the target directory, from `cargo metadata`.
/// The workspace's target directory.
pub fn target_dir() -> Result<PathBuf> {
    Ok(metadata()?.1)
}

pub(super) fn metadata() -> Result<(Vec<Package>, PathBuf)> {
    let text = util::output(
        Command::new(cargo_bin())
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .current_dir(workspace_root()),
    )
    .context("cargo metadata failed (is the workspace's Cargo.toml valid?)")?;
    let json: Value = serde_json::from_str(&text).context("cargo metadata printed bad JSON")?;
    let mut packages = Vec::new();
    for p in json["packages"].as_array().into_iter().flatten() {
        let (Some(name), Some(manifest)) = (p["name"].as_str(), p["manifest_path"].as_str()) else {
            continue;
        };
        let dir = Path::new(manifest)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        packages.push(Package {
            name: name.to_string(),
            dir,
        });
    }
    let target = json["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    Ok((packages, target))
}

/// Runs a cargo command with stdout shown live and captured.
pub(super) fn run_teed(cmd: &mut Command) -> Result<(bool, String)> {
    let what = describe(cmd);
    say!("running {what}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start `{what}`"))?;
    let mut captured = String::new();
    if let Some(out) = child.stdout.take() {
        let mut reader = BufReader::new(out);
        let mut raw = Vec::new();
        while reader.read_until(b'\n', &mut raw).unwrap_or(0) > 0 {
            let line = String::from_utf8_lossy(&raw);
            let line = line.trim_end_matches('\n');
            print_line(line);
            captured.push_str(line);
            captured.push('\n');
            raw.clear();
        }
    }
    let status = child
        .wait()
        .with_context(|| format!("cannot wait for `{what}`"))?;
    Ok((status.success(), captured))
}

/// `cargo build` of the examples the VM scripts run (test and demo).
pub(super) fn examples_build(ws: &Path) -> Command {
    let mut cmd = Command::new(cargo_bin());
    cmd.arg("build")
        .args(EXAMPLES_PACKAGES.iter().flat_map(|p| ["-p", p]))
        .arg("--examples")
        .args(["--features", EXAMPLES_FEATURES])
        .current_dir(ws)
        .stdin(Stdio::null());
    cmd
}
