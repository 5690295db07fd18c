//! Small helpers shared by the xtask modules: step logging, locating the
//! workspace, running external commands with context, making sure host tools
//! are installed (through apt when we are root), shell quoting and a stable
//! hash for cache keys.

use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context, Result};

/// Prints one progress line prefixed with `vm: ` and flushes it right away.
macro_rules! step {
    ($($arg:tt)*) => {{
        $crate::util::print_line(&format!("vm: {}", format_args!($($arg)*)));
    }};
}

/// Prints one progress line prefixed with `xtask: ` and flushes it.
macro_rules! say {
    ($($arg:tt)*) => {{
        $crate::util::print_line(&format!("xtask: {}", format_args!($($arg)*)));
    }};
}

/// Writes a line to stdout and flushes, ignoring a closed stdout.
pub fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The workspace root: two levels above this package's manifest directory
/// (`<root>/tools/xtask`).
pub fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| manifest.to_path_buf())
}

/// The cache folder for everything downloaded or built for the VM.
pub fn cache_dir() -> PathBuf {
    workspace_root().join(".vm-cache")
}

/// The cargo binary that runs us (cargo sets `CARGO`), or `cargo` from PATH.
pub fn cargo_bin() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cargo"))
}

/// Whether we run as root (and may install packages with apt-get).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Renders a command for messages: program and arguments, shell-quoted.
pub fn describe(cmd: &Command) -> String {
    let mut parts = vec![shell_quote(&cmd.get_program().to_string_lossy())];
    parts.extend(cmd.get_args().map(|a| shell_quote(&a.to_string_lossy())));
    parts.join(" ")
}

/// Runs a command with inherited stdio and fails unless it exits with 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    let what = describe(cmd);
    let status = cmd
        .status()
        .with_context(|| format!("cannot start `{what}`"))?;
    if !status.success() {
        bail!("`{what}` failed ({status})");
    }
    Ok(())
}

/// Runs a command, captures its stdout (stderr is captured too and shown in
/// the error), and fails unless it exits with 0.
pub fn output(cmd: &mut Command) -> Result<String> {
    let what = describe(cmd);
    let out: Output = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot start `{what}`"))?;
    if !out.status.success() {
        bail!(
            "`{what}` failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8(out.stdout).with_context(|| format!("`{what}` printed non-UTF-8 output"))
}

/// Finds an executable by name in PATH and the usual sbin folders (a
/// non-root PATH often lacks them).
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for extra in ["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"] {
        dirs.push(PathBuf::from(extra));
    }
    dirs.into_iter()
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// Whether `path` is a regular file with an execute bit.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Whether apt's package lists are present (apt-get update has run).
fn apt_lists_present() -> bool {
    std::fs::read_dir("/var/lib/apt/lists")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().contains("_Packages"))
        })
        .unwrap_or(false)
}

/// Runs `apt-get update` (as root only).
pub fn apt_update() -> Result<()> {
    step!("running apt-get update ...");
    run(Command::new("apt-get")
        .args(["update", "-q"])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null()))
    .context("apt-get update failed")
}

/// Makes sure apt's package lists exist, running `apt-get update` once if
/// they are empty and we are root.
pub fn ensure_apt_lists() -> Result<()> {
    if apt_lists_present() {
        return Ok(());
    }
    if !is_root() {
        bail!("apt's package lists are empty: run `apt-get update` as root first");
    }
    apt_update()
}

/// Installs Debian packages with apt-get (root only), printing that we do.
pub fn apt_install(packages: &[&str]) -> Result<()> {
    if !is_root() {
        bail!(
            "missing Debian package(s) {}: install them with `sudo apt-get install {}`",
            packages.join(", "),
            packages.join(" ")
        );
    }
    ensure_apt_lists()?;
    step!(
        "installing {} (apt-get install -y {}) ...",
        packages.join(", "),
        packages.join(" ")
    );
    run(Command::new("apt-get")
        .args(["install", "-y", "-q", "--no-install-recommends"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null()))
    .with_context(|| format!("apt-get install {} failed", packages.join(" ")))
}

/// Returns the path of host tool `bin`, installing Debian package `pkg` if
/// it is missing and we are root; otherwise fails naming the package.
pub fn ensure_tool(bin: &str, pkg: &str) -> Result<PathBuf> {
    if let Some(p) = find_in_path(bin) {
        return Ok(p);
    }
    if !is_root() {
        bail!("`{bin}` not found: install the Debian package `{pkg}` (sudo apt-get install {pkg})");
    }
    apt_install(&[pkg])?;
    find_in_path(bin)
        .with_context(|| format!("`{bin}` still not found after installing package `{pkg}`"))
}

/// Quotes a string for a POSIX shell (single quotes, `'` as `'\''`).
pub fn shell_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Shell-quotes an OS string; fails on non-UTF-8 (it would be mangled).
pub fn shell_quote_os(s: &OsStr) -> Result<String> {
    let s = s
        .to_str()
        .with_context(|| format!("argument {s:?} is not valid UTF-8"))?;
    Ok(shell_quote(s))
}

/// FNV-1a 64-bit: a small, stable hash for cache keys.
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Fnv {
    /// A fresh hasher.
    pub fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds bytes, followed by a separator so that concatenations differ.
    pub fn add(&mut self, bytes: &[u8]) -> &mut Self {
        for &b in bytes.iter().chain(&[0xff]) {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    /// The hash as 16 hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.0)
    }
}

/// Writes a file atomically (temp file in the same folder, then rename).
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    std::fs::write(&tmp, data).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}

/// Creates a folder and its parents, with the path in the error.
pub fn mkdir_p(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).with_context(|| format!("cannot create {}", path.display()))
}

/// Renders `v` with about three significant digits (the report's tables
/// and the charts' tick labels).
pub fn fmt_num(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("ls"), "ls");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$HOME;x"), "'$HOME;x'");
    }

    #[test]
    fn fnv_is_stable() {
        assert_eq!(Fnv::new().add(b"abc").hex(), Fnv::new().add(b"abc").hex());
        assert_ne!(
            Fnv::new().add(b"ab").add(b"c").hex(),
            Fnv::new().add(b"a").add(b"bc").hex()
        );
    }
}
