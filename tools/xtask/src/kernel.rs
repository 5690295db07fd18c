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

/// The series `cargo xtask test` covers by default (`--kernel all`):
/// Debian 12's, Debian 13's, and the newest in Debian's backports.
pub const ALL_SERIES: &[&str] = &["6.1", "6.12", "7"];

/// Parses `--kernel`'s value: one series, a comma-separated list, or `all`
/// ([`ALL_SERIES`]).
pub fn parse_series_list(value: &str) -> Result<Vec<String>> {
    if value == "all" {
        return Ok(ALL_SERIES.iter().map(|s| s.to_string()).collect());
    }
    let list: Vec<String> = value.split(',').map(|s| s.trim().to_string()).collect();
    for s in &list {
        if s.is_empty()
            || !s
                .split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        {
            bail!("bad kernel series {s:?} in {value:?}: expected e.g. 6.1, 6.12, 7, a list 6.1,7, or all");
        }
    }
    Ok(list)
}

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
    /// `NAME=VERSION` (or `NAME`) for apt.
    fn spec(&self) -> String {
        match &self.version {
            Some(v) => format!("{}={v}", self.name),
            None => self.name.clone(),
        }
    }

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
    let vmlinuz = vmlinuz_path(dir, &release).with_context(|| {
        format!(
            "kernel image of {release} missing from the extracted packages in {}",
            dir.display()
        )
    })?;
    Ok(Kernel {
        release,
        root: dir.to_path_buf(),
        vmlinuz,
    })
}

/// The kernel image in an extracted tree: `boot/vmlinuz-REL` (Debian up to
/// 6.x), or `usr/lib/modules/REL/vmlinuz` (7.x, from `linux-binary-*`).
fn vmlinuz_path(dir: &Path, release: &str) -> Option<PathBuf> {
    [
        dir.join("boot").join(format!("vmlinuz-{release}")),
        dir.join("usr/lib/modules").join(release).join("vmlinuz"),
    ]
    .into_iter()
    .find(|p| p.exists())
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
        for suite in backports_suites() {
            if apt_sources_mention(&suite) {
                continue;
            }
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
    bail!(
        "no Debian kernel package of series {series} found with apt-cache \
         (tried linux-image-{series}-amd64 and linux-image-amd64 with backports; \
         known series: 6.1, 6.12, 7)"
    )
}

/// Whether a series is newer than [`DEFAULT_SERIES`] (only those may come
/// from backports).
fn newer_than_default(series: &str) -> bool {
    let parse = |s: &str| -> Vec<u32> { s.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(series) > parse(DEFAULT_SERIES)
}

/// Debian's releases in order, for finding newer kernels in backports.
const CODENAMES: &[&str] = &["bullseye", "bookworm", "trixie", "forky"];

/// The backports suites that may carry newer kernels than the host's
/// release: its own (6.12 for bookworm), then the next release's (the
/// newest series, 7.x, is in trixie-backports).
fn backports_suites() -> Vec<String> {
    let Some(codename) = os_codename() else {
        return Vec::new();
    };
    let mut suites = vec![format!("{codename}-backports")];
    if let Some(i) = CODENAMES.iter().position(|c| *c == codename) {
        if let Some(next) = CODENAMES.get(i + 1) {
            suites.push(format!("{next}-backports"));
        }
    }
    suites
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

/// `apt-get download`s one package into `downloads` and returns its .deb.
fn download(pkg: &ImagePackage, downloads: &Path) -> Result<PathBuf> {
    let spec = pkg.spec();
    step!("downloading {spec} ...");
    let before: Vec<PathBuf> = debs_in(downloads)?;
    let mut cmd = Command::new("apt-get");
    cmd.arg("download").arg("-q");
    if util::is_root() {
        // The cache is usually not readable by apt's sandbox user.
        cmd.args(["-o", "APT::Sandbox::User=root"]);
    }
    run(cmd.arg(&spec).current_dir(downloads).stdin(Stdio::null()))
        .with_context(|| format!("cannot download {spec}"))?;
    let deb = debs_in(downloads)?
        .into_iter()
        .find(|p| !before.contains(p))
        .with_context(|| {
            format!(
                "apt-get download left no new .deb in {}",
                downloads.display()
            )
        })?;
    let size = std::fs::metadata(&deb).map(|m| m.len()).unwrap_or(0);
    step!(
        "downloaded {} ({:.1} MB)",
        deb.file_name().unwrap_or_default().to_string_lossy(),
        size as f64 / 1e6
    );
    Ok(deb)
}

/// The .deb files in a folder.
fn debs_in(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(std::fs::read_dir(dir)
        .with_context(|| format!("cannot read {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "deb"))
        .collect())
}

/// The `linux-binary-REL` (vmlinuz), `linux-modules-REL` and, where it is
/// named, `linux-base-REL` (modules.order, modules.builtin) packages a split
/// image package (7.x) depends on.
fn split_parts(pkg: &ImagePackage) -> Result<Vec<ImagePackage>> {
    let text = output(Command::new("apt-cache").args(["show", &pkg.spec()]))?;
    let depends = text
        .lines()
        .find_map(|l| l.strip_prefix("Depends:"))
        .with_context(|| format!("{} has no kernel image and no Depends", pkg.name))?;
    let parts = parse_split_parts(depends, pkg.release());
    let named = |prefix: &str| parts.iter().any(|p| p.name.starts_with(prefix));
    if !named("linux-binary-") || !named("linux-modules-") {
        bail!(
            "{} has no kernel image, and its Depends do not name linux-binary-{rel} \
             and linux-modules-{rel}: {depends}",
            pkg.name,
            rel = pkg.release()
        );
    }
    Ok(parts)
}

/// Picks `linux-{base,binary,modules}-REL` out of a Depends field.
fn parse_split_parts(depends: &str, release: &str) -> Vec<ImagePackage> {
    let wanted = ["base", "binary", "modules"].map(|p| format!("linux-{p}-{release}"));
    depends
        .split([',', '|'])
        .map(str::trim)
        .filter_map(|alt| {
            let name = alt.split_whitespace().next()?;
            wanted.iter().any(|w| w == name).then(|| ImagePackage {
                name: name.to_string(),
                version: alt
                    .split_once("(=")
                    .map(|(_, v)| v.trim().trim_end_matches(')').trim().to_string()),
            })
        })
        .collect()
}

/// Downloads the package, extracts it into `dir` and runs depmod there.
fn download_and_extract(pkg: &ImagePackage, dir: &Path) -> Result<()> {
    let downloads = cache_dir().join("downloads");
    if downloads.exists() {
        std::fs::remove_dir_all(&downloads)
            .with_context(|| format!("cannot clean {}", downloads.display()))?;
    }
    mkdir_p(&downloads)?;
    let deb = download(pkg, &downloads)?;
    let spec = pkg.spec();

    let tmp = dir.with_extension("partial");
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).with_context(|| format!("cannot clean {}", tmp.display()))?;
    }
    mkdir_p(&tmp)?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp))?;
    let release = pkg.release();
    if vmlinuz_path(&tmp, release).is_none() {
        // From 7.x linux-image-REL is a meta package: the image and the
        // modules are in linux-binary-REL and linux-modules-REL.
        for part in split_parts(pkg)? {
            let deb = download(&part, &downloads)?;
            run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp))?;
        }
    }
    modules_root(&tmp)?;
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
/// Built-in modules are skipped, and so are modules of `optional` that the
/// kernel does not have at all.
pub fn module_load_order(
    kernel: &Kernel,
    modules: &[&str],
    optional: &[&str],
) -> Result<Vec<PathBuf>> {
    let mut order: Vec<PathBuf> = Vec::new();
    for module in modules {
        if optional.contains(module) && !has_module(kernel, module) {
            step!("kernel {} has no module {module}: skipped", kernel.release);
            continue;
        }
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

/// Whether the kernel has `module`, as a loadable module or built in
/// (`modules.builtin`).
fn has_module(kernel: &Kernel, module: &str) -> bool {
    let dir = kernel.root.join("lib/modules").join(&kernel.release);
    let want = |name: &str| {
        let base = name.rsplit('/').next().unwrap_or(name);
        let base = base.split(".ko").next().unwrap_or(base);
        base.replace('-', "_") == module.replace('-', "_")
    };
    ["modules.dep", "modules.builtin"].iter().any(|f| {
        std::fs::read_to_string(dir.join(f))
            .is_ok_and(|t| t.lines().any(|l| want(l.split(':').next().unwrap_or(""))))
    })
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
        assert!(newer_than_default("7"));
        let p = parse_image_dependency(
            " linux-base-amd64 (= 7.3.4-1~bpo13+1), linux-image-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1)",
            "7",
        )
        .unwrap();
        assert_eq!(p.release(), "7.3.4+deb13-amd64");
    }

    #[test]
    fn series_lists() {
        assert_eq!(parse_series_list("all").unwrap(), ["6.1", "6.12", "7"]);
        assert_eq!(parse_series_list("6.12").unwrap(), ["6.12"]);
        assert_eq!(parse_series_list("6.1,7").unwrap(), ["6.1", "7"]);
        assert!(parse_series_list("6.1,,7").is_err());
        assert!(parse_series_list("latest").is_err());
    }

    #[test]
    fn split_image_names_binary_and_modules() {
        let parts = parse_split_parts(
            "dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, \
             linux-base-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), \
             linux-binary-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), \
             linux-modules-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1)",
            "7.3.4+deb13-amd64",
        );
        let names: Vec<_> = parts.iter().map(|p| p.spec()).collect();
        assert_eq!(
            names,
            [
                "linux-base-7.3.4+deb13-amd64=7.3.4-1~bpo13+1",
                "linux-binary-7.3.4+deb13-amd64=7.3.4-1~bpo13+1",
                "linux-modules-7.3.4+deb13-amd64=7.3.4-1~bpo13+1"
            ]
        );
    }
}
