//! The "no libibverbs" check: no binary this workspace builds may link,
//! import from, or name for `dlopen` rdma-core's libraries.
//!
//! For every ELF executable or shared object under the target directory's
//! profile folders it reads the dynamic section (`readelf -d`) for NEEDED
//! libraries, the dynamic symbol table (`nm -D`) for imported
//! `ibv_*`/`mlx5dv_*`/`rdma_*` functions, and the file's bytes for the
//! library names a `dlopen` call would carry. A file reached under two
//! names (cargo hard-links `deps/NAME-HASH` to `NAME`) is read once, and
//! two files are read at a time.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, Result};

/// Libraries of rdma-core that no product binary may touch.
const FORBIDDEN_LIBS: &[&str] = &["libibverbs", "libmlx5", "librxe", "librdmacm", "libefa"];
/// The symbol that marks our own `libibverbs.so.1` (see
/// `verbs/ibverbs/src/ffi.rs`).
const OUR_LIBIBVERBS_MARK: &str = "rverbs_ibverbs_version";
/// The version of our libibverbs' own symbols: a file that imports one
/// (our `libefa.so.1`, over `rverbs_efadv_*`) loads only beside our
/// libibverbs, so its NEEDED `libibverbs.so.1` is ours.
const OUR_LIBIBVERBS_VERSION: &str = "@RVERBS_IBVERBS_0";
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
    // One `nm -D` serves the questions below. It prints an undefined
    // symbol (what `--undefined-only` lists) with no value and type `U`,
    // or `w`/`v` when weak; every other line is a defined symbol (what
    // `--defined-only` lists). The name is the line's last word.
    let syms = Command::new("nm")
        .arg("-D")
        .arg(path)
        .output()
        .context("running nm (binutils)")?;
    let syms = String::from_utf8_lossy(&syms.stdout);
    let (undefined, defined): (Vec<&str>, Vec<&str>) =
        syms.lines().partition(|line| nm_line_is_undefined(line));
    // Our libefa.so.1: it imports our libibverbs' own version, so it
    // links our libibverbs and names itself in its soname.
    let over_ours = undefined.iter().any(|l| {
        l.split_whitespace()
            .last()
            .is_some_and(|n| n.ends_with(OUR_LIBIBVERBS_VERSION))
    });
    let dynamic = Command::new("readelf")
        .args(["-d", "-W"])
        .arg(path)
        .output()
        .context("running readelf (binutils)")?;
    let text = String::from_utf8_lossy(&dynamic.stdout);
    for line in text.lines().filter(|l| l.contains("(NEEDED)")) {
        if FORBIDDEN_LIBS
            .iter()
            .any(|l| line.contains(l) && !(over_ours && *l == "libibverbs"))
        {
            found.push(format!("links {}", line.trim()));
        }
    }
    for line in undefined {
        let name = line.split_whitespace().last().unwrap_or("");
        if FORBIDDEN_SYMBOLS.iter().any(|p| name.starts_with(p)) {
            found.push(format!("imports {name}"));
        }
    }
    // Our own libibverbs.so.1 (verbs/ibverbs) names itself in its soname;
    // it is told from rdma-core's by the symbol only our build defines,
    // and every other check still applies to it.
    let ours = defined
        .iter()
        .filter_map(|l| l.split_whitespace().last()?.split('@').next())
        .any(|name| name == OUR_LIBIBVERBS_MARK);
    let bytes = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let named = libs_named(&bytes);
    for (lib, _) in FORBIDDEN_LIBS.iter().zip(named).filter(|(l, hit)| {
        *hit && !((ours || over_ours) && **l == "libibverbs") && !(over_ours && **l == "libefa")
    }) {
        let needle = [lib, "so"].join(".");
        found.push(format!("contains the string {needle:?} (dlopen?)"));
    }
    Ok(found)
}

/// For each of [`FORBIDDEN_LIBS`], whether `bytes` contain `NAME.so`. One
/// pass over the bytes (a file is tens of MB, and the harness's memchr is
/// unoptimised): every `so` after a `.` is looked at for a name right
/// before the dot. `so` cannot overlap itself, so this meets every
/// occurrence of every `NAME.so`. (No literal here starts with `.so`:
/// placed after the names in this binary's read-only data, it would spell
/// one of them, and the check scans this binary too.)
fn libs_named(bytes: &[u8]) -> [bool; FORBIDDEN_LIBS.len()] {
    let mut hit = [false; FORBIDDEN_LIBS.len()];
    for at in memchr::memmem::find_iter(bytes, b"so") {
        let Some(dot) = at.checked_sub(1) else {
            continue;
        };
        if bytes[dot] != b'.' {
            continue;
        }
        for (h, lib) in hit.iter_mut().zip(FORBIDDEN_LIBS) {
            *h |= bytes[..dot].ends_with(lib.as_bytes());
        }
    }
    hit
}

/// Whether a line of `nm -D` is an undefined symbol: type `U`, or `w`/`v`
/// (weak), the type being the word before the name (nm leaves the value
/// out for these).
fn nm_line_is_undefined(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    matches!(words.as_slice(), [.., "U" | "w" | "v", _])
}

/// The ELF files the workspace built under `target/<profile>/`, its
/// `examples/` and `deps/`, and our libibverbs' folders, in that order,
/// each file once: a later name of the same (device, inode) is dropped
/// (cargo hard-links each final binary in `deps/` to its plain name).
fn files_to_check(target_dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for profile in ["debug", "release"] {
        let base = target_dir.join(profile);
        for sub in ["", "examples", "deps"] {
            files.extend(elf_files(&base.join(sub)));
        }
        // Our libibverbs.so.1 (`cargo xtask ibverbs`).
        files.extend(elf_files(&target_dir.join("ibverbs").join(profile)));
    }
    let mut seen = HashSet::new();
    files.retain(|f| match fs::metadata(f) {
        Ok(m) => seen.insert((m.dev(), m.ino())),
        // Kept: inspecting it reports the error.
        Err(_) => true,
    });
    files
}

/// Files inspected at the same time (`readelf`, `nm` and the byte scan
/// are each one core's work).
const THREADS: usize = 2;

/// Checks every ELF file the workspace built under `target/<profile>/`,
/// its `examples/` and `deps/` (each distinct file once, see
/// [`files_to_check`]). Returns (files checked, problems), the problems
/// in file order.
pub fn check(target_dir: &Path) -> Result<(usize, Vec<String>)> {
    let files = files_to_check(target_dir);
    let next = AtomicUsize::new(0);
    let mut results: Vec<(usize, Result<Vec<String>>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(f) = files.get(i) else { break };
                        mine.push((i, inspect(f)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a linkage worker panicked"))
            .collect()
    });
    results.sort_by_key(|(i, _)| *i);
    let mut problems = Vec::new();
    for (i, found) in results {
        for p in found? {
            problems.push(format!("{}: {p}", files[i].display()));
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

    #[test]
    fn one_pass_finds_each_library_name() {
        // Names and suffix built at run time (see above and libs_named).
        let so = [".", "so"].concat();
        let old = |bytes: &[u8]| -> Vec<bool> {
            FORBIDDEN_LIBS
                .iter()
                .map(|l| memchr::memmem::find(bytes, format!("{l}{so}").as_bytes()).is_some())
                .collect()
        };
        let [verbs, mlx5, rxe, cm, efa] = FORBIDDEN_LIBS else {
            panic!("{FORBIDDEN_LIBS:?}")
        };
        for text in [
            String::new(),
            so.clone(),
            format!("{mlx5}{so}"),
            format!("x{verbs}.s{rxe}{so}.1\0{cm}so {efa}"),
            format!("{so}{efa}{so}{so}{verbs}.sa{cm}{so}"),
            format!("{}{so}", &verbs[1..]),
            format!("{efa}s{so}{verbs}.{so}"),
        ] {
            let new = libs_named(text.as_bytes());
            assert_eq!(new.to_vec(), old(text.as_bytes()), "{text:?}");
        }
        assert_eq!(
            libs_named(format!("x{verbs}.s{rxe}{so}.1").as_bytes()),
            [false, false, true, false, false]
        );
    }

    #[test]
    fn nm_lines_are_told_apart() {
        assert!(nm_line_is_undefined(
            "                 U ibv_fork_init@IBVERBS_1.1"
        ));
        assert!(nm_line_is_undefined("                 w __gmon_start__"));
        assert!(nm_line_is_undefined("                 v weak_object"));
        assert!(!nm_line_is_undefined(
            "0000000000012340 T rverbs_ibverbs_version@@IBVERBS_1.1"
        ));
        assert!(!nm_line_is_undefined("0000000000000000 A IBVERBS_1.0"));
        assert!(!nm_line_is_undefined("0000000000001000 W weak_defined"));
        assert!(!nm_line_is_undefined(""));
    }

    #[test]
    fn a_hard_linked_binary_is_checked_once() {
        let dir = std::env::temp_dir().join(format!("linkage-dedup-{}", std::process::id()));
        let deps = dir.join("debug/deps");
        fs::create_dir_all(&deps).unwrap();
        let me = std::env::current_exe().unwrap();
        // As cargo leaves a binary: deps/NAME-HASH, hard-linked to NAME.
        fs::copy(&me, deps.join("tool-0123abcd")).unwrap();
        fs::hard_link(deps.join("tool-0123abcd"), dir.join("debug/tool")).unwrap();
        // A copy is another file, and is checked.
        fs::copy(&me, deps.join("other-4567ef01")).unwrap();
        fs::write(deps.join("tool-0123abcd.d"), "not ELF").unwrap();
        let files = files_to_check(&dir);
        assert_eq!(
            files,
            vec![dir.join("debug/tool"), deps.join("other-4567ef01")],
            "{files:?}"
        );
        assert_eq!(check(&dir).unwrap(), (2, Vec::new()));
        fs::remove_dir_all(&dir).unwrap();
    }
}
