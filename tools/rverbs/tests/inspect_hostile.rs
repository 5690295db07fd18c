//! `rverbs inspect --pid` against hostile targets (issue 25): processes
//! that set out to hang the inspector, to make it open what it must not,
//! or to make it allocate without bound. Whatever the target does, the
//! inspector must end (well within [`BOUND`]), with its memory bounded,
//! and say what it refused.
//!
//! Each target is this test program run again in a role (the ignored test
//! [`hostile_target`], with `RVERBS_HOSTILE_ROLE` set): it lays its trap,
//! prints [`READY`] and waits until its stdin closes. The inspector (the
//! built `rverbs`) runs under `RLIMIT_AS`; its peak resident size comes
//! from `wait4`'s resource usage.
//!
//! The roles:
//! - `paths`: maps two files, then puts a FIFO where the first was and a
//!   symlink to that FIFO where the second was; and maps `/dev/zero`.
//!   An inspector that opens the path `/proc/PID/maps` shows blocks on
//!   the FIFO forever.
//! - `qdir`: exports a mlx5 queue directory (the symbol the inspector
//!   looks for) of 65,536 CQ slots that all name one 64 MiB ring.
//! - `elf`: maps three sparse 512 MiB files that start with an ELF header
//!   whose section headers describe huge symbol tables (two of them
//!   deleted).
//! - `names`: chooses every string the inspector shows: its own name, the
//!   names of two files it maps (one holds a queue directory, the other
//!   is an ELF file with a broken header, which a note names) and the
//!   names of the directory symbols in the first; each with terminal
//!   escape sequences, a carriage return and a newline before a fake
//!   line, bidi controls, a C1 control and bytes that are not UTF-8.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rverbs_abi::mlx5::qdir::{kind, DirHeader, DirSlot, MAGIC};
use zerocopy::IntoBytes;

/// Environment variable naming the role of a target process.
const ROLE: &str = "RVERBS_HOSTILE_ROLE";
/// What a target prints once its trap is laid.
const READY: &str = "@@hostile-target-ready@@";
/// The wall-clock bound on one inspection: only there to catch a hang
/// (the inspections take a second or two, even on a loaded machine).
const BOUND: Duration = Duration::from_secs(60);
/// `--timeout` given to the inspector: above any honest run on a loaded
/// machine, below [`BOUND`].
const TIMEOUT: &str = "45";
/// The address-space limit of the inspector (the old inspector needed
/// 6 GiB for the `qdir` target).
const AS_LIMIT: u64 = 1 << 30;

/// Slots of the hostile directory (the most the inspector accepts).
const SLOTS: usize = 1 << 16;
/// Bytes of the hostile directory: header and slots.
const DIR_BYTES: usize = 64 + SLOTS * 80;
/// The ring every slot names.
const RING_BYTES: usize = 64 << 20;

/// The hostile queue directory, under a name the inspector looks for
/// (`RVERBS_MLX5_QUEUE_DIR_V*`). Zero (unused) except in the `qdir` role.
#[no_mangle]
static RVERBS_MLX5_QUEUE_DIR_V1_HOSTILE: [AtomicU64; DIR_BYTES / 8] =
    [const { AtomicU64::new(0) }; DIR_BYTES / 8];

/// The target process of one role.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Target {
    fn start(role: &str) -> Target {
        let mut child = Command::new(std::env::current_exe().expect("own path"))
            .args([
                "hostile_target",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the target");
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().expect("piped"));
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            if out.read_line(&mut line).expect("target output") == 0 {
                panic!("target {role} ended before it was ready: {seen}");
            }
            if line.contains(READY) {
                break;
            }
            seen += &line;
        }
        // Drain the rest of its output.
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        Target { child, stdin }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        // Its stdin closing tells it to clean up and end.
        drop(self.stdin.take());
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One run of the inspector.
#[derive(Debug)]
struct Run {
    /// Exit status, if it exited.
    code: Option<i32>,
    /// The signal that ended it, if one did.
    signal: Option<i32>,
    /// Whether it was still running at [`BOUND`] (then killed).
    hung: bool,
    stdout: String,
    stderr: String,
    /// The bytes written, as they came.
    raw_stdout: Vec<u8>,
    raw_stderr: Vec<u8>,
    elapsed: Duration,
    /// Peak resident size (KiB).
    max_rss_kib: i64,
}

/// Runs `rverbs inspect --pid PID ARGS...` under an `RLIMIT_AS` of
/// `as_limit`, killing it at [`BOUND`].
fn inspect(pid: u32, args: &[&str], as_limit: u64) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rverbs"));
    cmd.args(["inspect", "--pid", &pid.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure runs in the child between fork and exec and only
    // calls setrlimit (async-signal-safe); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::resource::setrlimit(
                nix::sys::resource::Resource::RLIMIT_AS,
                as_limit,
                as_limit,
            )
            .map_err(std::io::Error::from)
        });
    }
    let start = Instant::now();
    // Reaped by wait4 below (for its resource usage), not by Child::wait.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd.spawn().expect("running rverbs");
    let pid = child.id() as libc::pid_t;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut s);
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|s| Box::new(s) as _));
    let err = drain(child.stderr.take().map(|s| Box::new(s) as _));
    let mut hung = false;
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: rusage is plain integers, for which all-zero is valid.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if hung { 0 } else { libc::WNOHANG };
        // SAFETY: both pointers are to live locals of the right types; the
        // pid is our own unreaped child.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if r == pid {
            break (status, usage);
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if start.elapsed() > BOUND {
            hung = true;
            let _ = child.kill();
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let elapsed = start.elapsed();
    let (raw_stdout, raw_stderr) = (out.join().expect("stdout"), err.join().expect("stderr"));
    Run {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        hung,
        stdout: String::from_utf8_lossy(&raw_stdout).into_owned(),
        stderr: String::from_utf8_lossy(&raw_stderr).into_owned(),
        raw_stdout,
        raw_stderr,
        elapsed,
        max_rss_kib: usage.ru_maxrss,
    }
}

/// Checks that the run ended by itself, successfully.
fn assert_clean(what: &str, r: &Run) {
    assert!(
        !r.hung,
        "{what}: the inspector was still running after {BOUND:?} (killed): stdout {} stderr {}",
        tail(&r.stdout),
        tail(&r.stderr)
    );
    assert_eq!(
        (r.code, r.signal),
        (Some(0), None),
        "{what}: the inspector failed (stderr: {})",
        tail(&r.stderr)
    );
    eprintln!(
        "{what}: {:?}, peak RSS {} MiB",
        r.elapsed,
        r.max_rss_kib / 1024
    );
}

fn tail(s: &str) -> &str {
    let at = s.len().saturating_sub(2000);
    let at = (at..=s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    &s[at..]
}

#[test]
fn mapped_paths_replaced_by_a_fifo_or_a_symlink_do_not_hang_it() {
    let t = Target::start("paths");
    let r = inspect(t.pid(), &["--timeout", TIMEOUT], AS_LIMIT);
    assert_clean("paths", &r);
    // The mapped device node is named, and was not opened.
    if maps_of(t.pid()).contains("/dev/zero") {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.contains("/dev/zero") && l.contains("not a regular file")),
            "no refusal of /dev/zero in: {}",
            tail(&r.stdout)
        );
    }
}

#[test]
fn a_directory_whose_slots_all_name_one_huge_ring_stays_bounded() {
    let t = Target::start("qdir");
    for args in [
        &["--timeout", TIMEOUT][..],
        &["--timeout", TIMEOUT, "--json"],
    ] {
        let r = inspect(t.pid(), args, AS_LIMIT);
        assert_clean(&format!("qdir {args:?}"), &r);
        assert!(
            r.max_rss_kib < 512 << 10,
            "peak RSS {} MiB",
            r.max_rss_kib >> 10
        );
        // The ring is read once; the other slots say so.
        assert!(
            r.stdout.contains("not read again"),
            "no note of the ring read once: {}",
            tail(&r.stdout)
        );
    }
    // With every entry decoded (all-zero CQEs read as a full CQ), the
    // budget shows.
    for args in [
        &["--timeout", TIMEOUT, "--entries"][..],
        &["--timeout", TIMEOUT, "--entries", "--json"],
    ] {
        let r = inspect(t.pid(), args, AS_LIMIT);
        assert_clean(&format!("qdir {args:?}"), &r);
        assert!(
            r.max_rss_kib < 512 << 10,
            "peak RSS {} MiB",
            r.max_rss_kib >> 10
        );
        assert!(
            r.stdout.contains("more queued entries not decoded")
                && r.stdout.contains("--max-total-bytes"),
            "no note of the budget: {}",
            tail(&r.stdout)
        );
    }
}

#[test]
fn sparse_elf_files_are_not_read_whole() {
    let t = Target::start("elf");
    let r = inspect(t.pid(), &["--timeout", TIMEOUT], AS_LIMIT);
    assert_clean("elf", &r);
    // Each file is 512 MiB: read whole, one would show here.
    assert!(
        r.max_rss_kib < 200 << 10,
        "peak RSS {} MiB",
        r.max_rss_kib >> 10
    );
    // The one not deleted is readable by any inspector: its symbol table
    // is refused, by name.
    assert!(
        r.stdout
            .lines()
            .any(|l| l.contains("hostile-elf-2") && l.contains("symbol table")),
        "no refusal of the huge symbol table in: {}",
        tail(&r.stdout)
    );
}

#[test]
fn the_deadline_ends_a_slow_inspection_with_a_clear_error() {
    let t = Target::start("qdir");
    let r = inspect(t.pid(), &["--timeout", "0.001"], AS_LIMIT);
    assert!(!r.hung, "still running after {BOUND:?}");
    assert_eq!((r.code, r.signal), (Some(1), None), "{r:?}");
    assert!(
        r.stderr.contains("did not finish within") && r.stderr.contains("--timeout"),
        "{}",
        r.stderr
    );
}

/// The `names` role's name (14 bytes: a process name holds 15).
const COMM: &[u8] = b"\x1b]0;pwned\x07\x1b[2J";
/// The file holding the `names` role's queue directory (a newline the
/// kernel's memory map shows as `\012`).
const DIR_FILE: &str = "qdir-\x1b]0;pwned\x07\x1b[2J\r\nFAKE LINE\u{202e}.so";
/// A file with a broken ELF header, which a note names: not UTF-8, and a
/// C1 control (CSI).
const NOTE_FILE: &[u8] = b"note-\x1b[31m\xff\xfe\xc2\x9b2J\r\nFAKE LINE.so";
/// The symbol of the directory the `names` role lists a CQ in.
const SYMBOL: &str = "RVERBS_MLX5_QUEUE_DIR_V1_\x1b[2J\x1b]0;pwned\x07\u{9b}31m\u{2066}";
/// A second directory symbol, not UTF-8, at an address nothing is mapped.
const SYMBOL_BAD: &[u8] = b"RVERBS_MLX5_QUEUE_DIR_V1_\xff\x1b[2J";

/// Whether `c` would act on a terminal or hide text: a control
/// character other than the newline and tab the tool prints itself, or a
/// bidi control or other invisible format character.
fn acts(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}' | '\u{feff}')
}

/// Checks that output `b` is UTF-8 that cannot drive a terminal, and
/// starts no line with the target's fake one.
fn assert_inert(what: &str, b: &[u8]) {
    let s = std::str::from_utf8(b)
        .unwrap_or_else(|e| panic!("{what}: not UTF-8 ({e}): {:?}", String::from_utf8_lossy(b)));
    if let Some((i, c)) = s.char_indices().find(|&(_, c)| acts(c)) {
        panic!(
            "{what}: a raw {c:?} at byte {i}: {:?}",
            &s[i.saturating_sub(80)..]
        );
    }
    assert!(
        !s.lines().any(|l| l.starts_with("FAKE LINE")),
        "{what}: the target's fake line: {s}"
    );
}

#[test]
fn strings_the_target_chose_reach_the_terminal_escaped() {
    let t = Target::start("names");
    let pid = t.pid();
    // The escaped forms of the target's strings (a backslash shown as
    // `\\`: the map shows the newline as `\012`).
    let comm = r"\x1b]0;pwned\x07\x1b[2J";
    let shown = [
        comm,
        r"qdir-\x1b]0;pwned\x07\x1b[2J\x0d\\012FAKE LINE\u{202e}.so",
        r"note-\x1b[31m\xff\xfe\u{9b}2J\x0d\\012FAKE LINE.so",
        r"RVERBS_MLX5_QUEUE_DIR_V1_\x1b[2J\x1b]0;pwned\x07\u{9b}31m\u{2066}",
        r"RVERBS_MLX5_QUEUE_DIR_V1_\xff\x1b[2J",
    ];
    for args in [
        &["--timeout", TIMEOUT][..],
        &["--timeout", TIMEOUT, "--entries"],
    ] {
        let r = inspect(pid, args, AS_LIMIT);
        assert_clean(&format!("names {args:?}"), &r);
        assert_inert(&format!("names {args:?}: stdout"), &r.raw_stdout);
        assert_inert(&format!("names {args:?}: stderr"), &r.raw_stderr);
        for s in shown {
            assert!(
                r.stdout.contains(s),
                "names {args:?}: no {s} in: {}",
                r.stdout
            );
        }
        // The directory was read: its CQ is listed.
        assert!(r.stdout.contains(": 1 of 1 slots listed"), "{}", r.stdout);
    }
    // JSON: valid, no raw control either, the same escaped forms.
    let r = inspect(pid, &["--timeout", TIMEOUT, "--json"], AS_LIMIT);
    assert_clean("names --json", &r);
    assert_inert("names --json: stdout", &r.raw_stdout);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("valid JSON");
    assert_eq!(v["comm"], comm, "{}", r.stdout);
    let dirs = v["mlx5"]["directories"].as_array().expect("directories");
    for s in &shown[3..] {
        assert!(
            dirs.iter()
                .any(|d| d["symbol"] == *s
                    && d["file"].as_str().is_some_and(|f| f.ends_with(shown[1]))),
            "no directory {s} in {}: {}",
            shown[1],
            r.stdout
        );
    }
    let notes = v["mlx5"]["notes"].as_array().expect("notes");
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.contains(shown[2]))),
        "no note of {}: {notes:?}",
        shown[2]
    );
    // The watch: the tool's own escapes (clear the screen, cursor home)
    // and line ends, nothing of the target's.
    let r = inspect(
        pid,
        &[
            "--timeout",
            TIMEOUT,
            "--watch",
            "--interval",
            "0.1",
            "--iterations",
            "1",
        ],
        AS_LIMIT,
    );
    assert_clean("names --watch", &r);
    let own = String::from_utf8_lossy(&r.raw_stdout)
        .replace("\x1b[H\x1b[2J", "")
        .replace("\r\n", "\n");
    assert_inert("names --watch: stdout", own.as_bytes());
    assert_inert("names --watch: stderr", &r.raw_stderr);
    assert!(own.contains(&format!("process {pid} ({comm})")), "{own}");
    assert!(
        own.lines()
            .any(|l| l.starts_with("CQ") && l.contains(" mlx5 ")),
        "{own}"
    );
}

fn maps_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default()
}

/// The role a target plays (nothing, in an ordinary test run).
#[test]
#[ignore = "a target process of the other tests, run by them"]
fn hostile_target() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    // Readable by the inspector, our sibling, under Yama's ptrace_scope 1
    // too (elsewhere the call fails harmlessly).
    // SAFETY: PR_SET_PTRACER takes plain integers and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0);
    }
    let dir = std::env::temp_dir().join(format!("rverbs-hostile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    // Mappings stay until the process ends.
    let keep: Vec<Box<dyn std::any::Any>> = match role.as_str() {
        "paths" => paths(&dir),
        "qdir" => qdir(),
        "elf" => elf(&dir),
        "names" => names(&dir),
        r => panic!("unknown role {r}"),
    };
    println!("{READY}");
    std::io::stdout().flush().expect("stdout");
    // Wait for the test to close our stdin.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    drop(keep);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Maps `len` bytes of `path` read-only, private.
fn map(path: &Path, len: usize) -> usize {
    let f = std::fs::File::open(path).expect("open to map");
    use std::os::fd::AsRawFd;
    // SAFETY: a fresh read-only private mapping at an address the kernel
    // picks; nothing in this program aliases it, and it is never unmapped
    // (the process ends with it).
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            f.as_raw_fd(),
            0,
        )
    };
    assert!(
        p != libc::MAP_FAILED,
        "mmap {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
    p as usize
}

fn paths(dir: &Path) -> Vec<Box<dyn std::any::Any>> {
    let fifo = dir.join("fifo-here");
    let link = dir.join("symlink-here");
    for p in [&fifo, &link] {
        std::fs::write(p, "not an ELF file\n".repeat(256)).expect("write");
        map(p, 4096);
        std::fs::remove_file(p).expect("unlink");
    }
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    std::os::unix::fs::symlink(&fifo, &link).expect("symlink");
    // A device node mapped (shown in the maps by its own path).
    map(Path::new("/dev/zero"), 4096);
    Vec::new()
}

fn qdir() -> Vec<Box<dyn std::any::Any>> {
    // Zero pages, never touched: no memory here, 64 MiB to read there.
    let ring = vec![0u8; RING_BYTES];
    let addr = ring.as_ptr() as u64;
    let header = DirHeader {
        magic: MAGIC,
        version: 1,
        header_size: 64,
        slot_size: 80,
        slot_count: SLOTS as u32,
        listed: SLOTS as u32,
        ..Default::default()
    };
    let mut bytes = header.as_bytes().to_vec();
    for i in 0..SLOTS as u32 {
        bytes.extend_from_slice(
            DirSlot {
                seq: 2,
                kind: kind::CQ,
                num: i,
                entries: 1 << 20,
                stride_shift: 6,
                info: 1,
                buf: addr,
                dbrec: addr,
                ..Default::default()
            }
            .as_bytes(),
        );
    }
    assert_eq!(bytes.len(), DIR_BYTES);
    for (w, c) in RVERBS_MLX5_QUEUE_DIR_V1_HOSTILE
        .iter()
        .zip(bytes.chunks_exact(8))
    {
        w.store(
            u64::from_ne_bytes(c.try_into().expect("8 bytes")),
            Ordering::Relaxed,
        );
    }
    vec![Box::new(ring)]
}

/// A 64-bit little-endian ELF header whose section headers (at
/// `shoff`, three of them: null, symtab, strtab) give a symbol table of
/// `symtab` bytes and a string table of `strtab` bytes, both at offset
/// 4096.
fn elf_bytes(shoff: u64, symtab: u64, strtab: u64) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2; // ELFCLASS64
    h[5] = 1; // ELFDATA2LSB
    h[6] = 1; // EV_CURRENT
    h[16..18].copy_from_slice(&3u16.to_le_bytes()); // ET_DYN
    h[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    h[20..24].copy_from_slice(&1u32.to_le_bytes());
    h[40..48].copy_from_slice(&shoff.to_le_bytes());
    h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    h[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    h[60..62].copy_from_slice(&3u16.to_le_bytes()); // e_shnum
    let mut sh = vec![0u8; 3 * 64];
    let sec = |s: &mut [u8], ty: u32, size: u64, link: u32, entsize: u64| {
        s[4..8].copy_from_slice(&ty.to_le_bytes());
        s[24..32].copy_from_slice(&4096u64.to_le_bytes());
        s[32..40].copy_from_slice(&size.to_le_bytes());
        s[40..44].copy_from_slice(&link.to_le_bytes());
        s[56..64].copy_from_slice(&entsize.to_le_bytes());
    };
    sec(&mut sh[64..128], 2, symtab, 2, 24); // SHT_SYMTAB
    sec(&mut sh[128..192], 3, strtab, 0, 0); // SHT_STRTAB
    let mut out = h;
    out.resize(shoff as usize, 0);
    out.extend_from_slice(&sh);
    out
}

fn elf(dir: &Path) -> Vec<Box<dyn std::any::Any>> {
    const SIZE: u64 = 512 << 20;
    let files: [(u64, u64, bool); 3] = [
        // Tables within any cap, all zeros: scanned in pieces.
        (100 << 20, 100 << 20, true),
        // Past the end of the file.
        (16 << 30, 16 << 30, true),
        // A symbol table of 500 MiB.
        (500 << 20, 1 << 20, false),
    ];
    for (i, &(symtab, strtab, deleted)) in files.iter().enumerate() {
        let p: PathBuf = dir.join(format!("hostile-elf-{i}.so"));
        std::fs::write(&p, elf_bytes(8192, symtab, strtab)).expect("write");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .expect("open");
        f.set_len(SIZE).expect("sparse size");
        drop(f);
        map(&p, 4096);
        if deleted {
            std::fs::remove_file(&p).expect("unlink");
        }
    }
    Vec::new()
}

/// A 64-bit little-endian ELF executable (fixed addresses: no load bias)
/// whose symbol table holds `syms`: name, value, size.
fn elf_with_symbols(syms: &[(&[u8], u64, u64)]) -> Vec<u8> {
    let mut strtab = vec![0u8];
    let mut symtab = vec![0u8; 24];
    for &(name, value, size) in syms {
        let mut s = [0u8; 24];
        s[0..4].copy_from_slice(&(strtab.len() as u32).to_le_bytes());
        s[4] = 0x11; // STB_GLOBAL, STT_OBJECT
        s[6..8].copy_from_slice(&1u16.to_le_bytes()); // defined
        s[8..16].copy_from_slice(&value.to_le_bytes());
        s[16..24].copy_from_slice(&size.to_le_bytes());
        symtab.extend_from_slice(&s);
        strtab.extend_from_slice(name);
        strtab.push(0);
    }
    let (sym_off, str_off) = (64u64, 64 + symtab.len() as u64);
    let shoff = str_off + strtab.len() as u64;
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2; // ELFCLASS64
    h[5] = 1; // ELFDATA2LSB
    h[6] = 1; // EV_CURRENT
    h[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    h[18..20].copy_from_slice(&62u16.to_le_bytes()); // EM_X86_64
    h[40..48].copy_from_slice(&shoff.to_le_bytes());
    h[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    h[58..60].copy_from_slice(&64u16.to_le_bytes()); // e_shentsize
    h[60..62].copy_from_slice(&3u16.to_le_bytes()); // e_shnum
    let mut out = h;
    out.extend_from_slice(&symtab);
    out.extend_from_slice(&strtab);
    let mut sh = vec![0u8; 3 * 64];
    let mut sec = |i: usize, ty: u32, off: u64, size: u64, link: u32, entsize: u64| {
        let s = &mut sh[i * 64..(i + 1) * 64];
        s[4..8].copy_from_slice(&ty.to_le_bytes());
        s[24..32].copy_from_slice(&off.to_le_bytes());
        s[32..40].copy_from_slice(&size.to_le_bytes());
        s[40..44].copy_from_slice(&link.to_le_bytes());
        s[56..64].copy_from_slice(&entsize.to_le_bytes());
    };
    sec(1, 2, sym_off, symtab.len() as u64, 2, 24); // SHT_SYMTAB
    sec(2, 3, str_off, strtab.len() as u64, 0, 0); // SHT_STRTAB
    out.extend_from_slice(&sh);
    out
}

fn names(dir: &Path) -> Vec<Box<dyn std::any::Any>> {
    // The process's name (the main thread's: /proc/self is the leader).
    std::fs::write("/proc/self/comm", COMM).expect("naming the process");
    // A directory listing one CQ of two entries, in this process's memory.
    let ring = vec![0u8; 2 << 6];
    let dbrec = vec![0u8; 64];
    let header = DirHeader {
        magic: MAGIC,
        version: 1,
        header_size: 64,
        slot_size: 80,
        slot_count: 1,
        listed: 1,
        ..Default::default()
    };
    let mut qdir = header.as_bytes().to_vec();
    qdir.extend_from_slice(
        DirSlot {
            seq: 2,
            kind: kind::CQ,
            num: 5,
            entries: 2,
            stride_shift: 6,
            info: 1,
            buf: ring.as_ptr() as u64,
            dbrec: dbrec.as_ptr() as u64,
            ..Default::default()
        }
        .as_bytes(),
    );
    // Its symbol, and a second one where nothing is mapped, in a mapped
    // file with fixed addresses.
    let syms: [(&[u8], u64, u64); 2] = [
        (SYMBOL.as_bytes(), qdir.as_ptr() as u64, qdir.len() as u64),
        (SYMBOL_BAD, 0x10, 0),
    ];
    let p = dir.join(DIR_FILE);
    std::fs::write(&p, elf_with_symbols(&syms)).expect("write");
    map(&p, 4096);
    // An ELF file of an unknown byte order: a note names it.
    let mut broken = elf_with_symbols(&[]);
    broken[5] = 7;
    broken.resize(4096, 0);
    let p = dir.join(OsStr::from_bytes(NOTE_FILE));
    std::fs::write(&p, broken).expect("write");
    map(&p, 4096);
    vec![Box::new(ring), Box::new(dbrec), Box::new(qdir)]
}
