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

use std::io::{BufRead, BufReader, Read, Write};
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
            String::from_utf8_lossy(&s).into_owned()
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
    Run {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        hung,
        stdout: out.join().expect("stdout"),
        stderr: err.join().expect("stderr"),
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
