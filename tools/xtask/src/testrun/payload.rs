//! The VM suite and its payload: building the test executables, finding
//! the `tests/vm*` scripts, and the script that runs every item in the VM
//! and records its status and log.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};
use serde_json::Value;

use super::interop::INTEROP_FILE;
use super::VM_SUITE;
use crate::util::{self, cargo_bin, describe, print_line, shell_quote, workspace_root};

/// A test executable of the VM suite.
pub(super) struct TestBinary {
    pub(super) name: String,
    pub(super) path: PathBuf,
}

/// Builds the VM suite and returns its test executables.
pub(super) fn build_vm_suite() -> Result<Vec<TestBinary>> {
    let mut cmd = Command::new(cargo_bin());
    cmd.args(["test", "-p", VM_SUITE, "--no-run", "--message-format=json"])
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let what = describe(&cmd);
    say!("building the VM suite: {what}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{what}`"))?;
    let mut binaries = Vec::new();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines() {
            let line = line.context("cannot read cargo's output")?;
            let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                print_line(&line);
                continue;
            };
            match msg["reason"].as_str() {
                Some("compiler-artifact") if msg["profile"]["test"].as_bool() == Some(true) => {
                    if let Some(exe) = msg["executable"].as_str() {
                        let name = msg["target"]["name"].as_str().unwrap_or("?").to_string();
                        binaries.push(TestBinary {
                            name,
                            path: PathBuf::from(exe),
                        });
                    }
                }
                Some("compiler-message") => {
                    if let Some(text) = msg["message"]["rendered"].as_str() {
                        eprint!("{text}");
                    }
                }
                _ => {}
            }
        }
    }
    let status = child.wait().context("cannot wait for cargo")?;
    if !status.success() {
        anyhow::bail!("`{what}` failed ({status})");
    }
    Ok(binaries)
}

/// Scripts run in the VM after the test binaries: `tests/vm/*.sh`.
pub(super) fn vm_scripts() -> Vec<PathBuf> {
    scripts_in("vm")
}

/// The line (among a script's first 40) that keeps a `tests/vm*` script to
/// the first kernel of a `cargo xtask test` run: scripts whose outcome
/// does not depend on the kernel (our tool's terminal view, the static
/// binary) or whose tool matrices already ran in full there. The others
/// kernels do not run it, and it is not counted for them.
pub(super) const FIRST_KERNEL_ONLY: &str = "# xtask: first kernel only";

/// Whether `script` carries [`FIRST_KERNEL_ONLY`].
pub(super) fn first_kernel_only(script: &Path) -> bool {
    std::fs::read_to_string(script)
        .map(|text| marked_first_kernel_only(&text))
        .unwrap_or(false)
}

fn marked_first_kernel_only(text: &str) -> bool {
    text.lines()
        .take(40)
        .any(|l| l.trim_end() == FIRST_KERNEL_ONLY)
}

/// The `*.sh` files of `tests/<sub>/` (not its subfolders), sorted.
pub(super) fn scripts_in(sub: &str) -> Vec<PathBuf> {
    let dir = workspace_root().join("tests").join(sub);
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "sh"))
                .collect()
        })
        .unwrap_or_default();
    scripts.sort();
    scripts
}

/// One thing the VM runs.
pub(super) struct Item {
    pub(super) name: String,
    /// Shell words of the command.
    pub(super) command: String,
    /// Folder to run it in.
    pub(super) dir: PathBuf,
    /// Extra environment, as `K=V` shell words.
    pub(super) env: String,
}

/// The guest folder the payload copies our most-started binaries into:
/// the guest's `/tmp` is a tmpfs (see `initramfs::INIT_SCRIPT`), half the
/// guest's RAM in size.
pub(super) const STAGE_DIR: &str = "/tmp/rverbs-stage";

/// What a payload copies into [`STAGE_DIR`] before its first item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// The debug `rverbs` and our libibverbs' folder (the single guest's
    /// suite: the tool matrices run both many times).
    RverbsAndLibrary,
    /// The debug `rverbs` alone (a `tests/vm2` guest: no script there
    /// loads our libibverbs).
    Rverbs,
}

/// The part of a payload that copies, once per boot, the binaries the
/// scripts start many times from the workspace's 9p share (uncached: every
/// start reads the whole file again; the 45 MB debug `rverbs` takes about
/// 0.8 s a start from there, 0.2 s from the tmpfs) into `stage_dir`, and
/// exports where the copies are in the variables the scripts read before
/// their `$RVERBS_TARGET_DIR` default: `RVERBS_BIN` (`debug/rverbs`) and
/// `RVERBS_IBVERBS_DIR` (`ibverbs/debug`, without the static archive,
/// which only the host's linker reads). A variable already set (passed
/// from the host) is kept; a file that is missing or does not copy leaves
/// its variable unset, so the scripts start it from the target dir as
/// before (and report it missing as before). Prints one line: what was
/// copied, its size and how long the copy took. Needs
/// `RVERBS_TARGET_DIR` set.
pub(super) fn stage_script(stage_dir: &str, what: Stage) -> String {
    let mut s = format!(
        r#"# Our most-started binaries, copied once into the guest's tmpfs.
stage={dir}
stage_t0=$(date +%s%N)
stage_done=
stage_not=
mkdir -p "$stage"
if [ -n "${{RVERBS_BIN:-}}" ]; then
    stage_not="$stage_not debug/rverbs (RVERBS_BIN is set: $RVERBS_BIN);"
elif stage_err=$(cp "$RVERBS_TARGET_DIR/debug/rverbs" "$stage/rverbs" 2>&1); then
    export RVERBS_BIN="$stage/rverbs"
    stage_done="$stage_done debug/rverbs"
else
    rm -f "$stage/rverbs"
    stage_not="$stage_not debug/rverbs ($stage_err);"
fi
"#,
        dir = shell_quote(stage_dir)
    );
    if what == Stage::RverbsAndLibrary {
        // The library's name is built at run time (see `ibverbs::soname`):
        // this binary must not hold it (the linkage check reads it too).
        s.push_str(&format!(
            "stage_lib() {{\n    [ -f \"$1/{lib}\" ] || {{ echo \"no $1/{lib}\"; return 1; }}\n",
            lib = crate::ibverbs::soname()
        ));
        s.push_str(
            r#"    mkdir -p "$stage/ibverbs" || return 1
    for f in "$1"/*; do
        case $f in *.a) continue ;; esac
        cp -RP "$f" "$stage/ibverbs/" || return 1
    done
}
if [ -n "${RVERBS_IBVERBS_DIR:-}" ]; then
    stage_not="$stage_not ibverbs/debug (RVERBS_IBVERBS_DIR is set: $RVERBS_IBVERBS_DIR);"
elif stage_err=$(stage_lib "$RVERBS_TARGET_DIR/ibverbs/debug" 2>&1); then
    export RVERBS_IBVERBS_DIR="$stage/ibverbs"
    stage_done="$stage_done ibverbs/debug"
else
    rm -rf "$stage/ibverbs"
    stage_not="$stage_not ibverbs/debug ($stage_err);"
fi
"#,
        );
    }
    s.push_str(
        r#"stage_ms=$(( ($(date +%s%N) - stage_t0) / 1000000 ))
echo "xtask: copied${stage_done:- nothing} ($(du -sm "$stage" 2>/dev/null | cut -f1) MB) into $stage in $stage_ms ms${stage_not:+; from the target dir:$stage_not}"
"#,
    );
    s
}

/// The payload script that runs every item and records its status, log
/// and run time in whole seconds (`item-N.{status,log,secs}`), after
/// [`stage_script`] copied what the scripts start most.
pub(super) fn payload_script(items: &[Item], run_dir: &Path, target_dir: &Path) -> Result<String> {
    let q = |p: &Path| -> Result<String> { util::shell_quote_os(p.as_os_str()) };
    let mut s = String::from("# Generated by `cargo xtask test`.\n");
    s.push_str(&format!("RUN={}\n", q(run_dir)?));
    s.push_str(&format!("export RVERBS_TARGET_DIR={}\n", q(target_dir)?));
    s.push_str(&format!("export RVERBS_REPORT=\"$RUN/{INTEROP_FILE}\"\n"));
    s.push_str(&stage_script(STAGE_DIR, Stage::RverbsAndLibrary));
    s.push_str("failed=0\n");
    for (i, item) in items.iter().enumerate() {
        let n = i + 1;
        s.push_str(&format!(
            "echo {}\n",
            shell_quote(&format!("xtask: [{n}/{}] {}", items.len(), item.name))
        ));
        s.push_str("started=$(date +%s)\n");
        s.push_str(&format!(
            "(cd {dir} && {{ env {env} {cmd}; echo $? >\"$RUN/item-{n}.status\"; }}) 2>&1 | tee \"$RUN/item-{n}.log\"\n",
            dir = q(&item.dir)?,
            env = item.env,
            cmd = item.command,
        ));
        s.push_str(&format!(
            "echo $(($(date +%s) - started)) >\"$RUN/item-{n}.secs\"\n"
        ));
        s.push_str(&format!(
            "[ \"$(cat \"$RUN/item-{n}.status\" 2>/dev/null)\" = 0 ] || failed=1\n"
        ));
    }
    s.push_str("exit $failed\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use super::{
        marked_first_kernel_only, payload_script, stage_script, Item, Stage, FIRST_KERNEL_ONLY,
        STAGE_DIR,
    };

    /// A fresh folder under the host's temp dir for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xtask-stage-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn write_exe(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A target dir as `cargo xtask test` leaves it: the debug rverbs and
    /// our libibverbs' folder (library, its link, the static archive, the
    /// static ping-pong and the C tests).
    fn full_target(dir: &Path) {
        write_exe(&dir.join("debug/rverbs"), "#!/bin/sh\necho rverbs\n");
        let lib = dir.join("ibverbs/debug");
        // Names built at run time: see `ibverbs::soname`.
        let so = crate::ibverbs::soname();
        write_exe(&lib.join(&so), "lib");
        let link = so.strip_suffix(".1").unwrap();
        std::os::unix::fs::symlink(&so, lib.join(link)).unwrap();
        std::fs::write(lib.join("libibverbs.a"), "archive").unwrap();
        write_exe(&lib.join("static_pingpong"), "pp");
        write_exe(&lib.join("c-tests/threads"), "threads");
    }

    /// Runs `stage_script` with /bin/sh (the payload's shell) and `env`,
    /// then prints the two variables: returns (stdout, stderr, success).
    fn run_stage(stage: &Path, what: Stage, env: &[(&str, &str)]) -> (String, String, bool) {
        let script = format!(
            "{}echo \"BIN=${{RVERBS_BIN:-unset}}\"\necho \"LIB=${{RVERBS_IBVERBS_DIR:-unset}}\"\n",
            stage_script(stage.to_str().unwrap(), what)
        );
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            out.status.success(),
        )
    }

    #[test]
    fn stage_copies_rverbs_and_the_library_folder_and_exports_them() {
        let dir = scratch("full");
        let target = dir.join("target");
        full_target(&target);
        let stage = dir.join("stage");
        let t = target.to_str().unwrap();
        let (out, err, ok) =
            run_stage(&stage, Stage::RverbsAndLibrary, &[("RVERBS_TARGET_DIR", t)]);
        assert!(ok && err.is_empty(), "{out}{err}");
        let s = stage.display();
        assert!(out.contains(&format!("BIN={s}/rverbs\n")), "{out}");
        assert!(out.contains(&format!("LIB={s}/ibverbs\n")), "{out}");
        let line = out
            .lines()
            .find(|l| l.starts_with("xtask: copied"))
            .unwrap();
        assert!(
            line.starts_with("xtask: copied debug/rverbs ibverbs/debug (")
                && line.contains(&format!(" MB) into {s} in "))
                && line.ends_with(" ms"),
            "{line}"
        );
        // The copies run, and are the same bytes.
        let rverbs = stage.join("rverbs");
        assert_eq!(
            std::fs::metadata(&rverbs).unwrap().permissions().mode() & 0o111,
            0o111
        );
        let ran = Command::new(&rverbs).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&ran.stdout), "rverbs\n");
        let lib = stage.join("ibverbs");
        let so = crate::ibverbs::soname();
        assert_eq!(std::fs::read(lib.join(&so)).unwrap(), b"lib");
        let link = lib.join(so.strip_suffix(".1").unwrap());
        assert_eq!(std::fs::read_link(link).unwrap(), Path::new(&so));
        assert!(lib.join("static_pingpong").is_file());
        assert!(lib.join("c-tests/threads").is_file());
        // The static archive is for the host's linker only.
        assert!(!lib.join("libibverbs.a").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stage_falls_back_to_the_target_dir_for_what_is_missing() {
        let dir = scratch("missing");
        let target = dir.join("target");
        // A partial build: the library folder without the library.
        write_exe(&target.join("ibverbs/debug/static_pingpong"), "pp");
        let stage = dir.join("stage");
        let t = target.to_str().unwrap();
        let (out, _, ok) = run_stage(&stage, Stage::RverbsAndLibrary, &[("RVERBS_TARGET_DIR", t)]);
        assert!(ok, "{out}");
        assert!(
            out.contains("BIN=unset\n") && out.contains("LIB=unset\n"),
            "{out}"
        );
        let line = out
            .lines()
            .find(|l| l.starts_with("xtask: copied"))
            .unwrap();
        assert!(line.starts_with("xtask: copied nothing ("), "{line}");
        assert!(
            line.contains("; from the target dir: debug/rverbs (cp: "),
            "{line}"
        );
        let so = crate::ibverbs::soname();
        assert!(
            line.contains(&format!("ibverbs/debug (no {t}/ibverbs/debug/{so});")),
            "{line}"
        );
        // No half-copied folder is left behind.
        assert!(!stage.join("ibverbs").exists() && !stage.join("rverbs").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stage_keeps_variables_set_by_the_caller_and_a_pair_guest_copies_rverbs_alone() {
        let dir = scratch("preset");
        let target = dir.join("target");
        full_target(&target);
        let t = target.to_str().unwrap();
        let stage = dir.join("stage");
        let env = [
            ("RVERBS_TARGET_DIR", t),
            ("RVERBS_BIN", "/opt/rverbs"),
            ("RVERBS_IBVERBS_DIR", "/opt/lib"),
        ];
        let (out, _, ok) = run_stage(&stage, Stage::RverbsAndLibrary, &env);
        assert!(ok, "{out}");
        assert!(
            out.contains("BIN=/opt/rverbs\n") && out.contains("LIB=/opt/lib\n"),
            "{out}"
        );
        assert!(out.contains("(RVERBS_BIN is set: /opt/rverbs);"), "{out}");
        assert!(!stage.join("rverbs").exists() && !stage.join("ibverbs").exists());

        let stage = dir.join("stage2");
        let (out, _, ok) = run_stage(&stage, Stage::Rverbs, &[("RVERBS_TARGET_DIR", t)]);
        assert!(ok, "{out}");
        assert!(
            out.contains(&format!("BIN={}/rverbs\n", stage.display())),
            "{out}"
        );
        assert!(out.contains("LIB=unset\n"), "{out}");
        assert!(out.contains("xtask: copied debug/rverbs ("), "{out}");
        assert!(!stage.join("ibverbs").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_payload_stages_after_the_target_dir_and_before_the_first_item() {
        let items = [Item {
            name: "tests/vm/x.sh".into(),
            command: "/bin/sh tests/vm/x.sh".into(),
            dir: "/w".into(),
            env: String::new(),
        }];
        let p = payload_script(
            &items,
            Path::new("/w/target/vm-run/1"),
            Path::new("/w/target"),
        )
        .unwrap();
        let target = p.find("export RVERBS_TARGET_DIR=/w/target\n").unwrap();
        let stage = p.find(&format!("stage={STAGE_DIR}\n")).unwrap();
        let copied = p.find("echo \"xtask: copied").unwrap();
        let first = p.find("xtask: [1/1] tests/vm/x.sh").unwrap();
        assert!(target < stage && stage < copied && copied < first, "{p}");
        assert!(p.contains("export RVERBS_IBVERBS_DIR="), "{p}");
    }

    #[test]
    fn the_first_kernel_marker_is_a_whole_line_near_the_top() {
        assert!(marked_first_kernel_only(&format!(
            "#!/bin/sh\n# what it does\n{FIRST_KERNEL_ONLY}\nset -u\n"
        )));
        assert!(!marked_first_kernel_only("#!/bin/sh\nset -u\n"));
        // Quoted in a comment, or too far down: not the marker.
        assert!(!marked_first_kernel_only(&format!(
            "#!/bin/sh\n# see '{FIRST_KERNEL_ONLY}'\n"
        )));
        let late = format!("{}{FIRST_KERNEL_ONLY}\n", "echo\n".repeat(40));
        assert!(!marked_first_kernel_only(&late));
    }
}
