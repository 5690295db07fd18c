//! Getting a Debian distribution kernel for the guest: resolving a kernel
//! series ("6.1", "6.12") to a `linux-image-*` package with apt-cache,
//! downloading it with `apt-get download`, extracting it with `dpkg-deb -x`
//! into `.vm-cache/kernels/<release>/` (never into the host's /boot), running
//! depmod there, and computing the insmod order of the modules we need.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::util::{self, cache_dir, ensure_tool, mkdir_p, output, run};

/// The default kernel series: Debian 12 (bookworm)'s own kernel.
pub const DEFAULT_SERIES: &str = "6.1";

/// A kernel extracted into the cache.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// The release string (`uname -r` in the guest), e.g. `6.1.0-56-amd64`.
    pub release: String,
    /// The extracted package tree (holds `boot/` and `lib/modules/`).
    pub root: PathBuf,
    /// The kernel image.
    pub vmlinuz: PathBuf,
}

/// A resolved image package: name and, when known, the exact version.
#[derive(Debug, Clone, PartialEq)]
struct ImagePackage {
    name: String,
    version: Option<String>,
}

impl ImagePackage {
    /// The kernel release the package ships (`linux-image-REL` → `REL`).
    fn release(&self) -> &str {
        self.name.trim_start_matches("linux-image-")
    }
}

/// Downloads (when needed) and returns the kernel of the given series.
pub fn prepare(series: &str) -> Result<Kernel> {
    if !series
        .split('.')
        .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    {
        bail!("bad kernel series {series:?}: expected something like 6.1 or 6.12");
    }
    if std::env::consts::ARCH != "x86_64" {
        bail!(
            "the VM harness needs an x86_64 host (it runs the host's binaries in an x86_64 guest)"
        );
    }
    ensure_tool("dpkg-deb", "dpkg")?;
    ensure_tool("depmod", "kmod")?;
    ensure_tool("modprobe", "kmod")?;

    let pkg = match resolve(series) {
        Ok(pkg) => pkg,
        Err(err) => {
            match cached_for_series(series) {
                Some(k) => {
                    step!("warning: cannot resolve kernel {series} with apt ({err:#}); using cached {}", k.release);
                    return Ok(k);
                }
                None => return Err(err),
            }
        }
    };
    let dir = cache_dir().join("kernels").join(pkg.release());
    if !dir.join(".complete").exists() {
        download_and_extract(&pkg, &dir)?;
    }
    load(&dir)
}

/// Loads a kernel from an extracted tree.
fn load(dir: &Path) -> Result<Kernel> {
    let modules = modules_root(dir)?;
    let mut releases: Vec<String> = std::fs::read_dir(&modules)
        .with_context(|| format!("cannot read {}", modules.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("modules.order").exists())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    releases.sort();
    let release = match releases.as_slice() {
        [one] => one.clone(),
        [] => bail!("no kernel modules found under {}", modules.display()),
        many => bail!(
            "several kernel releases under {}: {many:?}",
            modules.display()
        ),
    };
    let vmlinuz = dir.join("boot").join(format!("vmlinuz-{release}"));
    if !vmlinuz.exists() {
        bail!(
            "kernel image {} missing from the extracted package",
            vmlinuz.display()
        );
    }
    Ok(Kernel {
        release,
        root: dir.to_path_buf(),
        vmlinuz,
    })
}

/// `lib/modules` of an extracted tree. Packages that ship `usr/lib/modules`
/// get a `lib` symlink so that depmod/modprobe `-b/-d DIR` find them.
fn modules_root(dir: &Path) -> Result<PathBuf> {
    let lib_modules = dir.join("lib/modules");
    if lib_modules.is_dir() {
        return Ok(lib_modules);
    }
    if dir.join("usr/lib/modules").is_dir() && !dir.join("lib").exists() {
        std::os::unix::fs::symlink("usr/lib", dir.join("lib"))
            .with_context(|| format!("cannot link {}/lib to usr/lib", dir.display()))?;
        return Ok(lib_modules);
    }
    bail!("no lib/modules in {}", dir.display())
}

/// The newest cached kernel of a series, for when apt cannot answer.
fn cached_for_series(series: &str) -> Option<Kernel> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache_dir().join("kernels"))
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{series}."))
        })
        .map(|e| e.path())
        .filter(|p| p.join(".complete").exists())
        .collect();
    found.sort();
    found.iter().rev().find_map(|d| load(d).ok())
}

/// Versions apt knows for a package, newest first (`apt-cache madison`).
fn madison(package: &str) -> Result<Vec<String>> {
    let text = output(Command::new("apt-cache").args(["madison", package]))?;
    let mut versions = Vec::new();
    for line in text.lines() {
        let mut fields = line.split('|').map(str::trim);
        if fields.next() == Some(package) {
            if let Some(v) = fields.next() {
                if !versions.iter().any(|x| x == v) {
                    versions.push(v.to_string());
                }
            }
        }
    }
    Ok(versions)
}

/// The image package a metapackage version depends on, if it is of the series.
fn image_dependency(meta: &str, version: &str, series: &str) -> Result<Option<ImagePackage>> {
    let text = output(Command::new("apt-cache").args(["show", &format!("{meta}={version}")]))?;
    let Some(depends) = text.lines().find_map(|l| l.strip_prefix("Depends:")) else {
        return Ok(None);
    };
    Ok(parse_image_dependency(depends, series))
}

/// Picks `linux-image-SERIES.*` out of a Depends field.
fn parse_image_dependency(depends: &str, series: &str) -> Option<ImagePackage> {
    for alt in depends.split([',', '|']) {
        let alt = alt.trim();
        let name = alt.split_whitespace().next().unwrap_or("");
        let Some(release) = name.strip_prefix("linux-image-") else {
            continue;
        };
        if !release.starts_with(&format!("{series}.")) || !release.ends_with("-amd64") {
            continue;
        }
        let version = alt
            .split_once("(=")
            .map(|(_, v)| v.trim().trim_end_matches(')').trim().to_string());
        return Some(ImagePackage {
            name: name.to_string(),
            version,
        });
    }
    None
}

/// Finds the image package for a series among the metapackages apt knows.
fn find_image(series: &str) -> Result<Option<ImagePackage>> {
    let series_meta = format!("linux-image-{series}-amd64");
    for meta in [series_meta.as_str(), "linux-image-amd64"] {
        for version in madison(meta)? {
            if meta == "linux-image-amd64" && !version.starts_with(&format!("{series}.")) {
                continue;
            }
            if let Some(pkg) = image_dependency(meta, &version, series)? {
                return Ok(Some(pkg));
            }
        }
    }
    Ok(None)
}

/// Resolves a series to an image package, adding bookworm-backports to apt's
/// sources when a non-default series is asked for and nothing else has it.
fn resolve(series: &str) -> Result<ImagePackage> {
    util::ensure_apt_lists()?;
    if let Some(pkg) = find_image(series)? {
        return Ok(pkg);
    }
    if newer_than_default(series) && util::is_root() {
        if let Some(codename) = os_codename() {
            let suite = format!("{codename}-backports");
            if !apt_sources_mention(&suite) {
                let file = format!("/etc/apt/sources.list.d/{suite}.sources");
                step!("kernel {series} not in apt's sources: adding {suite} in {file}");
                let text = format!(
                    "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: {suite}\n\
                     Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
                );
                std::fs::write(&file, text).with_context(|| format!("cannot write {file}"))?;
                util::apt_update()?;
                if let Some(pkg) = find_image(series)? {
                    return Ok(pkg);
                }
            }
        }
    }
    bail!(
        "no Debian kernel package of series {series} found with apt-cache \
         (tried linux-image-{series}-amd64 and linux-image-amd64; known series: 6.1, 6.12)"
    )
}

/// Whether a series is newer than [`DEFAULT_SERIES`] (only those may come
/// from backports).
fn newer_than_default(series: &str) -> bool {
    let parse = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(series) > parse(DEFAULT_SERIES)
}

/// `VERSION_CODENAME` from /etc/os-release.
fn os_codename() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
        .filter(|v| !v.is_empty())
}

/// Whether any apt source file names a suite.
fn apt_sources_mention(suite: &str) -> bool {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        files.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
    }
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .any(|t| {
            t.lines()
                .any(|l| !l.trim_start().starts_with('#') && l.contains(suite))
        })
}

/// Downloads the package, extracts it into `dir` and runs depmod there.
fn download_and_extract(pkg: &ImagePackage, dir: &Path) -> Result<()> {
    let downloads = cache_dir().join("downloads");
    if downloads.exists() {
        std::fs::remove_dir_all(&downloads)
            .with_context(|| format!("cannot clean {}", downloads.display()))?;
    }
    mkdir_p(&downloads)?;
    let spec = match &pkg.version {
        Some(v) => format!("{}={v}", pkg.name),
        None => pkg.name.clone(),
    };
    step!("downloading {spec} ...");
    let mut cmd = Command::new("apt-get");
    cmd.arg("download").arg("-q");
    if util::is_root() {
        // The cache is usually not readable by apt's sandbox user.
        cmd.args(["-o", "APT::Sandbox::User=root"]);
    }
    run(cmd.arg(&spec).current_dir(&downloads).stdin(Stdio::null()))
        .with_context(|| format!("cannot download {spec}"))?;
    let deb = std::fs::read_dir(&downloads)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .with_context(|| format!("apt-get download left no .deb in {}", downloads.display()))?;
    let size = std::fs::metadata(&deb).map(|m| m.len()).unwrap_or(0);
    step!(
        "downloaded {} ({:.1} MB); extracting ...",
        deb.file_name().unwrap_or_default().to_string_lossy(),
        size as f64 / 1e6
    );

    let tmp = dir.with_extension("partial");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("cannot clean {}", tmp.display()))?;
    }
    mkdir_p(&tmp)?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp))?;
    modules_root(&tmp)?;
    let release = pkg.release();
    step!("running depmod for {release} ...");
    run(Command::new("depmod").arg("-b").arg(&tmp).arg(release))?;
    if dir.exists() {
        std::fs::remove_dir_all(dir).with_context(|| format!("cannot clean {}", dir.display()))?;
    }
    std::fs::rename(&tmp, dir)
        .with_context(|| format!("cannot move {} to {}", tmp.display(), dir.display()))?;
    std::fs::write(dir.join(".complete"), format!("{spec}\n"))?;
    std::fs::remove_dir_all(&downloads).ok();
    step!("kernel {release} cached in {}", dir.display());
    Ok(())
}

/// The module files to insmod, dependencies first, without duplicates.
/// Built-in modules are skipped.
pub fn module_load_order(kernel: &Kernel, modules: &[&str]) -> Result<Vec<PathBuf>> {
    let mut order: Vec<PathBuf> = Vec::new();
    for module in modules {
        let text = output(
            Command::new("modprobe")
                .arg("-C")
                .arg("/dev/null")
                .arg("-d")
                .arg(&kernel.root)
                .arg("-S")
                .arg(&kernel.release)
                .arg("--show-depends")
                .arg(module),
        )
        .with_context(|| format!("kernel {} has no module {module}", kernel.release))?;
        for line in text.lines() {
            let mut words = line.split_whitespace();
            match words.next() {
                Some("insmod") => {
                    let path = PathBuf::from(words.next().context("empty insmod line")?);
                    if !order.contains(&path) {
                        order.push(path);
                    }
                }
                Some("builtin") | None => {}
                Some(_) => bail!("unexpected modprobe --show-depends line: {line}"),
            }
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_image_of_series() {
        let p = parse_image_dependency(" linux-image-6.1.0-56-amd64", "6.1").unwrap();
        assert_eq!(p.name, "linux-image-6.1.0-56-amd64");
        assert_eq!(p.version, None);
        assert_eq!(p.release(), "6.1.0-56-amd64");
        let p = parse_image_dependency(
            " linux-image-6.12.117+deb12-amd64 (= 6.12.117-1~deb12u1)",
            "6.12",
        )
        .unwrap();
        assert_eq!(p.name, "linux-image-6.12.117+deb12-amd64");
        assert_eq!(p.version.as_deref(), Some("6.12.117-1~deb12u1"));
        assert!(parse_image_dependency(" linux-image-6.12.1-amd64", "6.1").is_none());
        assert!(newer_than_default("6.12"));
        assert!(!newer_than_default("6.1"));
        assert!(!newer_than_default("5.10"));
    }
}
