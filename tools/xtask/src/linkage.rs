//! The "no libibverbs" check: no binary this workspace builds may link,
//! import from, or name for `dlopen` rdma-core's libraries.
//!
//! For every ELF executable or shared object under the target directory's
//! profile folders it reads the dynamic section (`readelf -d`) for NEEDED
//! libraries, the dynamic symbol table (`nm -D --undefined-only`) for
//! imported `ibv_*`/`mlx5dv_*`/`rdma_*` functions, and the file's bytes for
//! the library names a `dlopen` call would carry.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

/// Libraries of rdma-core that no product binary may touch.
const FORBIDDEN_LIBS: &[&str] = &["libibverbs", "libmlx5", "librxe", "librdmacm", "libefa"];
/// The symbol that marks our own `libibverbs.so.1` (see
/// `verbs/ibverbs/src/ffi.rs`).
const OUR_LIBIBVERBS_MARK: &str = "rverbs_ibverbs_version";
/// Symbol prefixes that would mean rdma-core is being called.
const FORBIDDEN_SYMBOLS: &[&str] = &["ibv_", "mlx5dv_", "rdma_create_", "rdma_get_devices"];

fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .map(|_| magic == *b"\x7fELF")
        .unwrap_or(false)
}

/// ELF files directly inside `dir` (not recursive).
fn elf_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file() && is_elf(p))
        .collect();
    v.sort();
    v
}

/// The problems found in one ELF file.
pub fn inspect(path: &Path) -> Result<Vec<String>> {
    let mut found = Vec::new();
    let dynamic = Command::new("readelf")
        .args(["-d", "-W"])
        .arg(path)
        .output()
        .context("running readelf (binutils)")?;
    let text = String::from_utf8_lossy(&dynamic.stdout);
    for line in text.lines().filter(|l| l.contains("(NEEDED)")) {
        if FORBIDDEN_LIBS.iter().any(|l| line.contains(l)) {
            found.push(format!("links {}", line.trim()));
        }
    }
    let syms = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(path)
        .output()
        .context("running nm (binutils)")?;
    for line in String::from_utf8_lossy(&syms.stdout).lines() {
        let name = line.split_whitespace().last().unwrap_or("");
        if FORBIDDEN_SYMBOLS.iter().any(|p| name.starts_with(p)) {
            found.push(format!("imports {name}"));
        }
    }
    // Our own libibverbs.so.1 (verbs/ibverbs) names itself in its soname;
    // it is told from rdma-core's by the symbol only our build defines,
    // and every other check still applies to it.
    let defined = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(path)
        .output()
        .context("running nm (binutils)")?;
    let ours = String::from_utf8_lossy(&defined.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().last()?.split('@').next())
        .any(|name| name == OUR_LIBIBVERBS_MARK);
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    for lib in FORBIDDEN_LIBS
        .iter()
        .filter(|l| !(ours && **l == "libibverbs"))
    {
        let needle = format!("{lib}.so");
        if memchr::memmem::find(&bytes, needle.as_bytes()).is_some() {
            found.push(format!("contains the string {needle:?} (dlopen?)"));
        }
    }
    Ok(found)
}

/// Checks every ELF file the workspace built under `target/<profile>/`,
/// its `examples/` and `deps/`. Returns (files checked, problems).
pub fn check(target_dir: &Path) -> Result<(usize, Vec<String>)> {
    let mut files = Vec::new();
    for profile in ["debug", "release"] {
        let base = target_dir.join(profile);
        for sub in ["", "examples", "deps"] {
            files.extend(elf_files(&base.join(sub)));
        }
        // Our libibverbs.so.1 (`cargo xtask ibverbs`).
        files.extend(elf_files(&target_dir.join("ibverbs").join(profile)));
    }
    let mut problems = Vec::new();
    for f in &files {
        for p in inspect(f)? {
            problems.push(format!("{}: {p}", f.display()));
        }
    }
    Ok((files.len(), problems))
}

/// Whether an ELF64 executable is fully static: no `PT_INTERP` (no
/// dynamic loader) and no `PT_DYNAMIC` (no dynamic section) among its
/// program headers. Errors on a file that is not a well-formed ELF64.
pub fn fully_static(path: &Path) -> Result<bool> {
    let b = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let field = |off: usize, n: usize| -> Result<u64> {
        let s = b
            .get(off..off + n)
            .with_context(|| format!("{}: truncated ELF header", path.display()))?;
        Ok(s.iter().rev().fold(0u64, |v, &x| (v << 8) | u64::from(x)))
    };
    if b.get(..5) != Some(b"\x7fELF\x02".as_slice()) || b.get(5) != Some(&1) {
        anyhow::bail!("{}: not a little-endian ELF64 file", path.display());
    }
    let phoff = usize::try_from(field(0x20, 8)?)?;
    let phentsize = usize::try_from(field(0x36, 2)?)?;
    let phnum = usize::try_from(field(0x38, 2)?)?;
    const PT_DYNAMIC: u64 = 2;
    const PT_INTERP: u64 = 3;
    for i in 0..phnum {
        let at = i
            .checked_mul(phentsize)
            .and_then(|o| o.checked_add(phoff))
            .context("program header offset overflows")?;
        if matches!(field(at, 4)?, PT_DYNAMIC | PT_INTERP) {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamic_executable_is_not_static() {
        // This test binary itself is linked dynamically against glibc.
        let me = std::env::current_exe().unwrap();
        assert!(!fully_static(&me).unwrap());
        assert!(fully_static(Path::new("/etc/hostname")).is_err());
    }

    #[test]
    fn rdma_cores_libibverbs_is_not_taken_for_ours() {
        // Debian's libibverbs1 (installed with libibverbs-dev, which the
        // harness needs): its soname names it, and it lacks our mark. (The
        // names are built at run time so that this test binary, which the
        // check also scans, does not hold them.)
        let name = format!("{}.so", FORBIDDEN_LIBS[0]);
        let theirs = PathBuf::from(format!("/usr/lib/x86_64-linux-gnu/{name}.1"));
        let found = inspect(&theirs).unwrap();
        assert!(found.iter().any(|f| f.contains(&name)), "{found:?}");
    }

    #[test]
    fn flags_a_binary_linked_to_libibverbs_and_passes_a_clean_one() {
        let dir = std::env::temp_dir().join(format!("linkage-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let src = dir.join("p.c");
        fs::write(
            &src,
            "extern int ibv_fork_init(void);\nint main(void){return ibv_fork_init();}\n",
        )
        .unwrap();
        let bad = dir.join("bad");
        let ok = Command::new("cc")
            .arg(&src)
            .arg("-o")
            .arg(&bad)
            .arg("-libverbs")
            .status()
            .unwrap();
        assert!(ok.success(), "cc -libverbs failed: install libibverbs-dev");
        let problems = inspect(&bad).unwrap();
        assert!(
            problems.iter().any(|p| p.contains("libibverbs")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.contains("imports ibv_fork_init")),
            "{problems:?}"
        );
        let clean = std::env::current_exe().unwrap();
        assert_eq!(inspect(&clean).unwrap(), Vec::<String>::new());
        fs::remove_dir_all(&dir).unwrap();
    }
}
