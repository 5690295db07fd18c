//! Booting the soft-RoCE VM (or a linked pair of them) and running a
//! payload script in it.
//!
//! Each run gets a folder `<workspace>/target/vm-run/<id>/` in the writable
//! workspace share (a pair gets `<id>/a/` and `<id>/b/`, one per guest). The
//! host writes `guest.sh` (network and `rdma link add rxe0`, then the
//! payload with a clean environment) and `payload.sh` there; the initramfs
//! init chroots into the host's root and runs `guest.sh`, which writes the
//! payload's exit status to `status`. The host reads that file after qemu
//! exits: no exit status is parsed from the console.
//!
//! A single guest ([`run`]) gets rxe0 on a veth pair inside the guest
//! (10.0.0.1/24). A pair ([`run_pair`]) is two guests whose virtio NICs
//! (eth0) are joined by qemu's socket netdev over a TCP connection on the
//! host's loopback (`listen=127.0.0.1:PORT` on guest a, `connect=` on guest
//! b): a real two-host RoCE v2 link, a = 10.0.1.1/24, b = 10.0.1.2/24, rxe0
//! on eth0 in both. Each guest waits until its rxe0 is ACTIVE with its IPv4
//! GID at index 1, until it can ping the other, and until the other wrote
//! its `ready` file, then runs its payload.
//!
//! The serial console is passed through to our stdout (prefixed `a| ` /
//! `b| ` for a pair), minus firmware noise before init starts (kept and
//! shown only if the boot fails) and `@@xtask:` marker lines, which become
//! `vm: ...` progress lines. qemu is killed on timeout, on
//! SIGINT/SIGTERM/SIGHUP (see [`install_signal_handlers`]) and, through
//! `PR_SET_PDEATHSIG`, if xtask itself dies.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::util::{self, ensure_tool, mkdir_p, print_line, shell_quote, workspace_root};
use crate::{initramfs, kernel};

/// The PATH the payload runs with.
pub const GUEST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How many old run folders to keep under target/vm-run.
const KEEP_RUNS: usize = 10;

/// The pids of the running qemus, for the signal handler (0 when none):
/// slot 0 for a single guest or guest a, slot 1 for guest b.
static QEMU_PIDS: [AtomicI32; 2] = [AtomicI32::new(0), AtomicI32::new(0)];

/// Options for one VM boot.
#[derive(Debug, Clone)]
pub struct VmOptions {
    /// Kernel series ("6.1" or "6.12").
    pub series: String,
    /// Wall-clock limit for the whole VM run.
    pub timeout: Duration,
}

/// The guest ran past its time limit and was killed.
#[derive(Debug)]
pub struct Timeout(pub u64);

/// The guest failed in its own set-up (rxe0, the link, the pair's ready
/// barrier), before the command ran: a failure of the testbed, not of the
/// command.
#[derive(Debug)]
pub struct SetupFailed(pub String);

impl std::fmt::Display for SetupFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the guest failed before the command ran: {}", self.0)
    }
}

impl std::error::Error for SetupFailed {}

/// Whether a pair failed in its testbed set-up before either command ran
/// to its end: one guest failed its set-up (see [`SetupFailed`]) and
/// neither reported a command status.
pub fn pair_setup_failed(outcomes: &[Result<VmOutcome>; 2]) -> bool {
    outcomes
        .iter()
        .any(|o| matches!(o, Err(e) if e.downcast_ref::<SetupFailed>().is_some()))
        && outcomes.iter().all(|o| o.is_err())
}

impl std::fmt::Display for Timeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "timeout: the VM ran longer than {} s and was killed (raise it with --timeout SECS)",
            self.0
        )
    }
}

impl std::error::Error for Timeout {}

extern "C" fn on_signal(sig: libc::c_int) {
    let mut killed = false;
    for slot in &QEMU_PIDS {
        let pid = slot.load(Ordering::SeqCst);
        if pid > 0 {
            // SAFETY: kill is async-signal-safe; pid is our qemu child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
    }
    let msg: &[u8] = if killed {
        b"\nvm: interrupted: killed qemu\n"
    } else {
        b"\nxtask: interrupted\n"
    };
    // SAFETY: write and _exit are async-signal-safe.
    unsafe {
        libc::write(2, msg.as_ptr().cast(), msg.len());
        libc::_exit(128 + sig);
    }
}

/// Makes SIGINT, SIGTERM and SIGHUP kill a running qemu and exit.
pub fn install_signal_handlers() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only calls async-signal-safe functions.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Creates a fresh run folder under `<workspace>/target/vm-run/`, pruning
/// old ones.
pub fn new_run_dir() -> Result<PathBuf> {
    let base = workspace_root().join("target").join("vm-run");
    mkdir_p(&base)?;
    let mut old: Vec<PathBuf> = std::fs::read_dir(&base)
        .with_context(|| format!("cannot read {}", base.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    old.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    if old.len() >= KEEP_RUNS {
        // Other runs may be going on in this workspace: only folders idle
        // for an hour go.
        let idle = |p: &Path| {
            std::fs::metadata(p)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(3600))
        };
        for dir in old[..old.len() + 1 - KEEP_RUNS].iter().filter(|d| idle(d)) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // Two runs started in the same second by the same process (the pairs
    // of `cargo xtask test`) get distinct folders.
    for n in 0u32.. {
        let name = if n == 0 {
            format!("{secs}-{}", std::process::id())
        } else {
            format!("{secs}-{}-{n}", std::process::id())
        };
        let dir = base.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
        }
    }
    unreachable!("u32 range exhausted")
}

/// One guest of a linked pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Guest a: 10.0.1.1, the listening end of the link (by convention the
    /// server of a two-guest test).
    A,
    /// Guest b: 10.0.1.2, the connecting end (by convention the client).
    B,
}

impl Role {
    /// Both roles, a first.
    pub const BOTH: [Role; 2] = [Role::A, Role::B];

    /// "a" or "b" (the value of `RVERBS_ROLE`).
    pub fn name(self) -> &'static str {
        match self {
            Role::A => "a",
            Role::B => "b",
        }
    }

    /// The guest's IPv4 address on eth0.
    pub fn addr(self) -> &'static str {
        match self {
            Role::A => "10.0.1.1",
            Role::B => "10.0.1.2",
        }
    }

    /// The other guest.
    pub fn peer(self) -> Role {
        match self {
            Role::A => Role::B,
            Role::B => Role::A,
        }
    }

    /// The tail of the IPv4-mapped GID (`::ffff:10.0.1.x`) as the kernel
    /// prints it in `ports/1/gids/1`.
    fn gid_tail(self) -> &'static str {
        match self {
            Role::A => "ffff:0a00:0101",
            Role::B => "ffff:0a00:0102",
        }
    }

    /// The NIC's MAC address (the two must differ).
    fn mac(self) -> &'static str {
        match self {
            Role::A => "52:54:00:0a:01:01",
            Role::B => "52:54:00:0a:01:02",
        }
    }

    fn slot(self) -> usize {
        match self {
            Role::A => 0,
            Role::B => 1,
        }
    }
}

/// How a guest's rxe0 is networked.
#[derive(Debug, Clone)]
enum GuestNet {
    /// rxe0 on veth0 of a veth pair inside the guest (10.0.0.1/24).
    Veth,
    /// rxe0 on eth0, the virtio NIC linked to the other guest of a pair,
    /// whose run folder (for the ready barrier) is `peer_run`.
    Link { role: Role, peer_run: String },
}

/// The variables the payload gets besides PATH and HOME: RUST_BACKTRACE
/// and every `RVERBS_*` variable of the host.
fn passthrough_env() -> Vec<(String, String)> {
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k == "RUST_BACKTRACE" || k.starts_with("RVERBS_"))
        .filter(|(k, _)| k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    vars.sort();
    vars
}

/// The variables a linked guest's payload gets on top of
/// [`passthrough_env`] (replacing host variables of the same name).
fn link_env(role: Role, run_dir: &str, peer_run: &str) -> Vec<(String, String)> {
    let set = [
        ("RVERBS_ROLE", role.name()),
        ("RVERBS_ADDR", role.addr()),
        ("RVERBS_PEER_ADDR", role.peer().addr()),
        ("RVERBS_NETDEV", "eth0"),
        ("RVERBS_RUN_DIR", run_dir),
        ("RVERBS_PEER_RUN_DIR", peer_run),
    ];
    let mut vars: Vec<(String, String)> = passthrough_env()
        .into_iter()
        .filter(|(k, _)| !set.iter().any(|(s, _)| s == k))
        .collect();
    vars.extend(set.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    vars
}

/// The script the guest runs as root in the chroot: network and rxe0 setup,
/// then `payload.sh` in the workspace with a clean environment.
fn guest_script(
    workspace: &str,
    run_dir: &str,
    extra_env: &[(String, String)],
    net: &GuestNet,
) -> String {
    let mut env = format!("PATH={GUEST_PATH} HOME=/root");
    for (k, v) in extra_env {
        env.push_str(&format!(" {k}={}", shell_quote(v)));
    }
    let (hostname, setup, gid_tail) = match net {
        GuestNet::Veth => (
            "xtask-vm".to_string(),
            r#"ip link add veth0 type veth peer name veth1 || fail "cannot create the veth pair"
ip addr add 10.0.0.1/24 dev veth0 || fail "cannot address veth0"
ip addr add 10.0.0.2/24 dev veth1 || fail "cannot address veth1"
ip link set veth0 up || fail "cannot bring veth0 up"
ip link set veth1 up || fail "cannot bring veth1 up"
rdma link add rxe0 type rxe netdev veth0 || fail "rdma link add rxe0 type rxe netdev veth0 failed"
n=0
until [ -e /sys/bus/nd/devices/namespace0.0 ]; do
    n=$((n + 1))
    [ "$n" -le 200 ] || fail "no NVDIMM namespace after 10 s (nfit not loaded, or qemu gave no nvdimm?)"
    sleep 0.05
done
ndctl create-namespace --force --reconfig=namespace0.0 --mode=devdax --map=dev >/dev/null 2>"$RUN/ndctl.err" ||
    fail "ndctl could not make namespace0.0 a device-DAX namespace: $(cat "$RUN/ndctl.err")"
[ -c /dev/dax0.0 ] || fail "no /dev/dax0.0 after ndctl create-namespace"
"#
            .to_string(),
            "ffff:0a00:0001",
        ),
        GuestNet::Link { role, .. } => (
            format!("xtask-vm-{}", role.name()),
            format!(
                r#"[ -e /sys/class/net/eth0 ] || fail "no eth0: the virtio NIC did not show up (virtio_net not loaded?)"
ip addr add {addr}/24 dev eth0 || fail "cannot address eth0"
ip link set eth0 up || fail "cannot bring eth0 up"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 type rxe netdev eth0 failed"
"#,
                addr = role.addr()
            ),
            role.gid_tail(),
        ),
    };
    // A linked guest waits for the other one: ping over the link (bounded),
    // then a barrier through the workspace share so that both payloads
    // start together.
    let peer = match net {
        GuestNet::Veth => String::new(),
        GuestNet::Link { role, peer_run } => format!(
            r#"PEER={peer}
PEER_RUN={peer_run}
n=0
until busybox ping -c 1 -W 1 "$PEER" >/dev/null 2>&1; do
    n=$((n + 1))
    [ "$n" -le 90 ] || fail "cannot ping the other guest ($PEER) over eth0 (tried for about 90 s)"
    sleep 0.2
done
echo "@@xtask: peer $PEER answers ping"
: >"$RUN/ready" || fail "cannot write $RUN/ready"
n=0
until [ -e "$PEER_RUN/ready" ]; do
    n=$((n + 1))
    [ "$n" -le 1200 ] || fail "the other guest did not get ready within 60 s"
    sleep 0.05
done
"#,
            peer = role.peer().addr(),
            peer_run = shell_quote(peer_run),
        ),
    };
    format!(
        r#"#!/bin/sh
# Generated by `cargo xtask` (tools/xtask/src/vm.rs) for one VM run.
RUN={run}
export PATH={GUEST_PATH}
fail() {{
    echo "$*" >"$RUN/setup-error"
    echo "@@xtask: fatal: $*"
    exit 1
}}
echo {hostname} >/proc/sys/kernel/hostname
ip link set lo up || fail "ip link set lo up failed"
{setup}port=/sys/class/infiniband/rxe0/ports/1
n=0
until [ -e /dev/infiniband/uverbs0 ] && grep -q ACTIVE "$port/state" 2>/dev/null &&
    grep -q '{gid_tail}' "$port/gids/1" 2>/dev/null; do
    n=$((n + 1))
    [ "$n" -le 400 ] || fail "rxe0 not ready after 20 s (no uverbs0, port not ACTIVE or no IPv4 GID)"
    sleep 0.05
done
echo "@@xtask: ready"
{peer}cd {ws} || fail "cannot cd to the workspace {ws}"
echo "@@xtask: command"
env -i {env} /bin/sh "$RUN/payload.sh" </dev/null
status=$?
dmesg >"$RUN/dmesg.txt" 2>/dev/null
echo "$status" >"$RUN/status.tmp" && mv "$RUN/status.tmp" "$RUN/status"
exit 0
"#,
        run = shell_quote(run_dir),
        ws = shell_quote(workspace),
    )
}

/// Checks that a path can go on the kernel command line and into a qemu
/// option, and returns it as a string.
fn plain_path(path: &Path) -> Result<&str> {
    let s = path
        .to_str()
        .with_context(|| format!("path {} is not valid UTF-8", path.display()))?;
    if !s.starts_with('/')
        || s.chars()
            .any(|c| c.is_whitespace() || c == '"' || c.is_control())
    {
        bail!(
            "the VM harness needs an absolute workspace path without spaces or quotes, got {s:?}"
        );
    }
    Ok(s)
}

/// What the console pump saw, shared with the main thread.
#[derive(Default)]
struct Console {
    /// Output before init started (firmware noise, early kernel messages).
    early: Mutex<Vec<String>>,
    init: AtomicBool,
    ready: AtomicBool,
    /// guest.sh is about to run the payload (set-up and barrier done).
    command: AtomicBool,
    done: AtomicBool,
    fatal: Mutex<Option<String>>,
    /// Seconds from qemu start until rxe0 was ready.
    ready_at: Mutex<Option<f64>>,
}

/// Prints a progress line: `vm: ...` for a single guest, `vm a: ...` for a
/// guest of a pair.
fn note(label: Option<&str>, msg: &str) {
    match label {
        Some(l) => print_line(&format!("vm {l}: {msg}")),
        None => print_line(&format!("vm: {msg}")),
    }
}

/// Prints a console line, prefixed `a| ` for a guest of a pair.
fn console_line(label: Option<&str>, line: &str) {
    match label {
        Some(l) => print_line(&format!("{l}| {line}")),
        None => print_line(line),
    }
}

/// Reads the serial console, passing payload output through.
/// Everything is also written to `log` (the run folder's console.log).
fn pump(
    mut reader: impl Read,
    console: Arc<Console>,
    start: Instant,
    mut log: Option<File>,
    label: Option<&str>,
) {
    let mut buf = BufReader::new(&mut reader);
    let mut raw = Vec::new();
    loop {
        raw.clear();
        match buf.read_until(b'\n', &mut raw) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(f) = log.as_mut() {
            let _ = f.write_all(&raw);
        }
        let text = String::from_utf8_lossy(&raw);
        let line = text.trim_end_matches(['\n', '\r']);
        let (before, marker) = match line.find("@@xtask: ") {
            Some(i) => (&line[..i], Some(&line[i + "@@xtask: ".len()..])),
            None => (line, None),
        };
        if !before.is_empty() || marker.is_none() {
            if !console.init.load(Ordering::SeqCst) {
                console.early.lock().unwrap().push(before.to_string());
            } else if !console.done.load(Ordering::SeqCst) {
                console_line(label, before);
            }
        }
        let Some(marker) = marker else { continue };
        let secs = start.elapsed().as_secs_f64();
        if marker == "init" {
            console.init.store(true, Ordering::SeqCst);
            note(
                label,
                &format!(
                    "guest init started after {secs:.1} s; loading modules, mounting 9p shares ..."
                ),
            );
        } else if marker == "chroot" {
            // Modules loaded and shares mounted; guest.sh starts now.
        } else if marker == "command" {
            console.command.store(true, Ordering::SeqCst);
        } else if marker == "ready" {
            console.ready.store(true, Ordering::SeqCst);
            *console.ready_at.lock().unwrap() = Some(secs);
            note(label, &format!("rxe0 ready (boot took {secs:.1} s)"));
        } else if let Some(msg) = marker.strip_prefix("fatal: ") {
            console.done.store(true, Ordering::SeqCst);
            note(label, &format!("guest setup failed: {msg}"));
            *console.fatal.lock().unwrap() = Some(msg.to_string());
        } else if marker.starts_with("guest.sh exited") {
            console.done.store(true, Ordering::SeqCst);
        } else {
            note(label, &format!("{marker} (after {secs:.1} s)"));
        }
    }
}

/// The result of a VM run.
pub struct VmOutcome {
    /// The payload's exit status.
    pub status: i32,
    /// Seconds from qemu start until rxe0 was ready.
    pub boot_secs: Option<f64>,
    /// The guest kernel logged a BUG, WARNING or oops (see dmesg.txt).
    pub kernel_problems: bool,
}

/// Patterns in the guest's kernel log that mean the kernel misbehaved.
const KERNEL_PROBLEMS: &[&str] = &[
    "BUG:",
    "WARNING:",
    "Oops",
    "Call Trace",
    "general protection fault",
    "kernel panic",
    "UBSAN:",
    "KASAN:",
];

/// Scans the guest's dmesg for BUGs/WARNINGs/oopses and reports them.
fn check_dmesg(run_dir: &Path, label: Option<&str>) -> bool {
    let path = run_dir.join("dmesg.txt");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return false;
    };
    let hits: Vec<&str> = text
        .lines()
        .filter(|l| KERNEL_PROBLEMS.iter().any(|p| l.contains(p)))
        .collect();
    if hits.is_empty() {
        return false;
    }
    note(
        label,
        &format!(
            "warning: the guest kernel logged {} problem line(s); full log in {}",
            hits.len(),
            path.display()
        ),
    );
    for line in hits.iter().take(20) {
        print_line(&format!("vm| {line}"));
    }
    true
}

/// What every boot needs: qemu, the kernel and the initramfs.
struct Boot {
    qemu: PathBuf,
    kernel: kernel::Kernel,
    initrd: PathBuf,
}

/// Finds qemu and the guest's tools and prepares the kernel and initramfs.
fn prepare_boot(opts: &VmOptions) -> Result<Boot> {
    let qemu = ensure_tool("qemu-system-x86_64", "qemu-system-x86")?;
    // The guest runs the host's iproute2 `ip` and `rdma` in the chroot.
    ensure_tool("rdma", "iproute2")?;
    ensure_tool("ip", "iproute2")?;
    // It makes the NVDIMM of a single guest a device-DAX namespace.
    ensure_tool("ndctl", "ndctl")?;
    // tests/vm/inspect_watch.sh runs `rverbs inspect --watch` in tmux.
    ensure_tool("tmux", "tmux")?;
    let _lock = lock_cache()?;
    let kernel = kernel::prepare(&opts.series)?;
    let initrd = initramfs::prepare(&kernel)?;
    Ok(Boot {
        qemu,
        kernel,
        initrd,
    })
}

/// Why a guest was killed before it powered off by itself.
#[derive(Debug, Clone)]
enum Killed {
    /// It ran past the time limit.
    Timeout(u64),
    /// The other guest of its pair failed before its command ran.
    PeerFailed(&'static str),
}

/// A running guest.
struct Guest {
    label: Option<&'static str>,
    slot: usize,
    run_dir: PathBuf,
    stderr_path: PathBuf,
    child: Child,
    console: Arc<Console>,
    pump: Option<JoinHandle<()>>,
    start: Instant,
    exit: Option<ExitStatus>,
    /// Seconds from start until qemu was seen gone.
    ran_for: Option<f64>,
    killed: Option<Killed>,
}

/// The guest's RAM in MiB.
const GUEST_RAM_MIB: u64 = 2048;

/// Size in MiB of the emulated NVDIMM a single guest gets, which its
/// `guest.sh` turns into the device-DAX namespace `/dev/dax0.0`: persistent
/// memory for RDMA FLUSH with the persistent placement type. rxe accepts
/// only pages in a region the firmware describes as persistent (ACPI NFIT,
/// which qemu's `nvdimm` device provides; `memmap=` regions are "legacy"
/// and refused), and only device DAX can be pinned (FOLL_LONGTERM refuses
/// filesystem DAX).
const PMEM_MIB: u64 = 64;

/// The qemu memory arguments of a single guest: its RAM plus an NVDIMM
/// backed by a sparse file in the run directory (removed when the guest is
/// done).
fn pmem_args(run_dir: &Path) -> Result<Vec<String>> {
    let image = run_dir.join(PMEM_IMAGE);
    let file = std::fs::File::create(&image)
        .with_context(|| format!("cannot create {}", image.display()))?;
    file.set_len(PMEM_MIB << 20)
        .with_context(|| format!("cannot size {}", image.display()))?;
    let path = plain_path(&image)?.replace(',', ",,");
    Ok(vec![
        "-machine".into(),
        "pc,nvdimm=on".into(),
        "-m".into(),
        format!(
            "{GUEST_RAM_MIB}M,slots=1,maxmem={}M",
            GUEST_RAM_MIB + PMEM_MIB
        ),
        "-object".into(),
        format!("memory-backend-file,id=pmem0,share=on,mem-path={path},size={PMEM_MIB}M"),
        "-device".into(),
        "nvdimm,id=nvdimm0,memdev=pmem0".into(),
    ])
}

/// The NVDIMM's backing file in a run directory.
const PMEM_IMAGE: &str = "pmem.img";

/// Boots one guest: writes `guest.sh` and `payload.sh` into `run_dir`
/// (inside the workspace) and starts qemu with `nic` (extra qemu arguments
/// for the network device, empty for none). The qemu pid goes into signal
/// slot `slot`.
fn spawn_guest(
    boot: &Boot,
    run_dir: &Path,
    payload: &str,
    net: &GuestNet,
    nic: &[String],
    label: Option<&'static str>,
    slot: usize,
) -> Result<Guest> {
    let ws = workspace_root();
    let ws_str = plain_path(&ws)?;
    let run_str = plain_path(run_dir)?;
    if !run_dir.starts_with(&ws) {
        bail!(
            "run dir {} is outside the workspace share",
            run_dir.display()
        );
    }
    let env = match net {
        GuestNet::Veth => passthrough_env(),
        GuestNet::Link { role, peer_run } => link_env(*role, run_str, peer_run),
    };
    std::fs::write(
        run_dir.join("guest.sh"),
        guest_script(ws_str, run_str, &env, net),
    )
    .context("cannot write guest.sh")?;
    std::fs::write(run_dir.join("payload.sh"), payload).context("cannot write payload.sh")?;

    let stderr_path = run_dir.join("qemu.stderr");
    let stderr = std::fs::File::create(&stderr_path)
        .with_context(|| format!("cannot create {}", stderr_path.display()))?;
    let append =
        format!("console=ttyS0 quiet loglevel=1 panic=-1 xtask_ws={ws_str} xtask_run={run_str}");
    let memory = match net {
        GuestNet::Veth => pmem_args(run_dir)?,
        GuestNet::Link { .. } => vec!["-m".into(), format!("{GUEST_RAM_MIB}")],
    };
    let mut cmd = Command::new(&boot.qemu);
    cmd.args(["-nodefaults", "-no-user-config", "-no-reboot"])
        .args(["-accel", "tcg,thread=multi", "-cpu", "max"])
        .args(&memory)
        .args(["-smp", "2"])
        .args(["-display", "none", "-monitor", "none"])
        .args([
            "-chardev",
            "stdio,id=console,signal=off",
            "-serial",
            "chardev:console",
        ])
        .arg("-kernel")
        .arg(&boot.kernel.vmlinuz)
        .arg("-initrd")
        .arg(&boot.initrd)
        .args(["-append", &append])
        .arg("-virtfs")
        .arg("local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap")
        .arg("-virtfs")
        .arg(format!(
            "local,path={},mount_tag=work,security_model=none,multidevs=remap",
            ws_str.replace(',', ",,")
        ))
        .args(nic)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
    std::fs::write(run_dir.join("qemu.cmd"), util::describe(&cmd) + "\n").ok();

    let start = Instant::now();
    let mut child: Child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", boot.qemu.display()))?;
    QEMU_PIDS[slot].store(child.id() as i32, Ordering::SeqCst);
    let console = Arc::new(Console::default());
    let stdout = match child.stdout.take() {
        Some(s) => s,
        None => {
            let _ = child.kill();
            let _ = child.wait();
            QEMU_PIDS[slot].store(0, Ordering::SeqCst);
            bail!("qemu stdout not captured");
        }
    };
    let pump_thread = {
        let console = Arc::clone(&console);
        let log = File::create(run_dir.join("console.log")).ok();
        std::thread::spawn(move || pump(stdout, console, start, log, label))
    };
    Ok(Guest {
        label,
        slot,
        run_dir: run_dir.to_path_buf(),
        stderr_path,
        child,
        console,
        pump: Some(pump_thread),
        start,
        exit: None,
        ran_for: None,
        killed: None,
    })
}

impl Guest {
    /// Whether qemu has exited (reaping it when it has).
    fn poll(&mut self) -> Result<bool> {
        if self.exit.is_some() {
            return Ok(true);
        }
        if let Some(status) = self.child.try_wait().context("cannot wait for qemu")? {
            self.exit = Some(status);
            self.ran_for = Some(self.start.elapsed().as_secs_f64());
            QEMU_PIDS[self.slot].store(0, Ordering::SeqCst);
            return Ok(true);
        }
        Ok(false)
    }

    /// Kills qemu (if still running) for `why`.
    fn kill(&mut self, why: Killed) {
        if self.exit.is_some() {
            return;
        }
        let _ = self.child.kill();
        self.exit = self.child.wait().ok();
        self.ran_for = Some(self.start.elapsed().as_secs_f64());
        QEMU_PIDS[self.slot].store(0, Ordering::SeqCst);
        self.killed = Some(why);
    }

    /// Whether the guest got to write its payload's exit status.
    fn has_status(&self) -> bool {
        self.run_dir.join("status").exists()
    }

    /// Reads the outcome once qemu is gone.
    fn finish(mut self) -> Result<VmOutcome> {
        if let Some(pump) = self.pump.take() {
            let _ = pump.join();
        }
        // Only the guest reads it (a single guest's NVDIMM, if any).
        let _ = std::fs::remove_file(self.run_dir.join(PMEM_IMAGE));
        let total = self
            .ran_for
            .unwrap_or_else(|| self.start.elapsed().as_secs_f64());
        let label = self.label;
        match &self.killed {
            Some(Killed::Timeout(secs)) => {
                show_early(&self.console, "console output before init", label);
                return Err(Timeout(*secs).into());
            }
            Some(Killed::PeerFailed(peer)) => {
                bail!("stopped after {total:.1} s: guest {peer} ended without reporting its command's exit status");
            }
            None => {}
        }
        let status_file = self.run_dir.join("status");
        if let Ok(text) = std::fs::read_to_string(&status_file) {
            let status: i32 = text
                .trim()
                .parse()
                .with_context(|| format!("bad status {:?} in {}", text, status_file.display()))?;
            note(
                label,
                &format!("guest finished in {total:.1} s; command exit status {status}"),
            );
            let kernel_problems = check_dmesg(&self.run_dir, label);
            return Ok(VmOutcome {
                status,
                boot_secs: *self.console.ready_at.lock().unwrap(),
                kernel_problems,
            });
        }

        // No status: the guest never got to run the payload to its end.
        if !self.console.init.load(Ordering::SeqCst) {
            show_early(&self.console, "console output (init never started)", label);
        }
        let qemu_err = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        for line in qemu_err
            .lines()
            .filter(|l| !l.contains("TCG doesn't support"))
        {
            print_line(&format!("qemu: {line}"));
        }
        let exit = self
            .exit
            .map(|e| e.to_string())
            .unwrap_or_else(|| "unknown status".into());
        Err(unreported(&self.console, &exit, total, &self.run_dir))
    }
}

/// Why a guest that ended by itself wrote no status: a [`SetupFailed`] if
/// its command never started (its set-up failed, or its kernel died at
/// boot, which TCG now and then causes), else a crash in the command.
fn unreported(console: &Console, exit: &str, total: f64, run_dir: &Path) -> anyhow::Error {
    if let Some(msg) = console.fatal.lock().unwrap().clone() {
        return SetupFailed(msg).into();
    }
    if !console.command.load(Ordering::SeqCst) {
        let stage = if console.init.load(Ordering::SeqCst) {
            "in its set-up"
        } else {
            "while its kernel booted, before init started"
        };
        return SetupFailed(format!(
            "the guest exited ({exit}) after {total:.1} s {stage}; console log in {}/console.log",
            run_dir.display()
        ))
        .into();
    }
    anyhow!(
        "the guest exited ({exit}) after {total:.1} s without reporting the command's exit status \
         (crash or power-off inside the command?); console log in {}/console.log",
        run_dir.display()
    )
}

impl Drop for Guest {
    fn drop(&mut self) {
        // An early return must not leave qemu running.
        if self.exit.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            QEMU_PIDS[self.slot].store(0, Ordering::SeqCst);
        }
    }
}

/// Boots the VM and runs `payload` (a shell script body, run by /bin/sh in
/// the workspace as root with the clean environment) in it. `run_dir` must
/// come from [`new_run_dir`].
pub fn run(opts: &VmOptions, run_dir: &Path, payload: &str) -> Result<VmOutcome> {
    let boot = prepare_boot(opts)?;
    step!(
        "booting {} with {} (timeout {} s) ...",
        boot.kernel.release,
        boot.qemu.display(),
        opts.timeout.as_secs()
    );
    let mut guest = spawn_guest(&boot, run_dir, payload, &GuestNet::Veth, &[], None, 0)?;
    let mut next_note = Duration::from_secs(15);
    loop {
        if guest.poll()? {
            break;
        }
        let elapsed = guest.start.elapsed();
        if elapsed >= opts.timeout {
            guest.kill(Killed::Timeout(opts.timeout.as_secs()));
            break;
        }
        if !guest.console.ready.load(Ordering::SeqCst) && elapsed >= next_note {
            step!("still booting ({} s) ...", elapsed.as_secs());
            next_note += Duration::from_secs(15);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    guest.finish()
}

/// A free TCP port on the host's loopback (the kernel picks it).
fn free_loopback_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .context("cannot find a free TCP port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

/// Whether some socket listens on 127.0.0.1:`port` (from /proc/net/tcp;
/// probing with a connection would be taken by qemu as the link's peer).
fn loopback_listening(port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(1) == Some(&local.as_str()) && fields.get(3) == Some(&"0A")
    })
}

/// The qemu arguments of a pair guest's NIC: a virtio-net device on a
/// socket netdev over the host's loopback (never any other address).
fn link_nic(role: Role, port: u16) -> Vec<String> {
    let end = match role {
        Role::A => "listen",
        Role::B => "connect",
    };
    vec![
        "-netdev".into(),
        format!("socket,id=link0,{end}=127.0.0.1:{port}"),
        "-device".into(),
        format!("virtio-net-pci,netdev=link0,mac={}", role.mac()),
    ]
}

/// Boots two linked guests (see the module docs) and runs `payloads[0]` in
/// guest a and `payloads[1]` in guest b; their run folders are
/// `pair_dir/a` and `pair_dir/b` (`pair_dir` from [`new_run_dir`]). Waits
/// for both; a guest that fails before its command ran takes the other
/// one down with it, and `opts.timeout` bounds the whole pair. Returns each
/// guest's outcome (a first); the outer error is for failures to start.
pub fn run_pair(
    opts: &VmOptions,
    pair_dir: &Path,
    payloads: [&str; 2],
) -> Result<[Result<VmOutcome>; 2]> {
    let boot = prepare_boot(opts)?;
    let dirs = Role::BOTH.map(|r| pair_dir.join(r.name()));
    for d in &dirs {
        mkdir_p(d)?;
    }
    let port = free_loopback_port()?;
    step!(
        "booting two linked guests with {} (a = {}, b = {}; link over 127.0.0.1:{port}; timeout {} s) ...",
        boot.kernel.release,
        Role::A.addr(),
        Role::B.addr(),
        opts.timeout.as_secs()
    );
    let spawn = |role: Role| -> Result<Guest> {
        let i = role.slot();
        let net = GuestNet::Link {
            role,
            peer_run: plain_path(&dirs[role.peer().slot()])?.to_string(),
        };
        spawn_guest(
            &boot,
            &dirs[i],
            payloads[i],
            &net,
            &link_nic(role, port),
            Some(role.name()),
            i,
        )
    };
    let start = Instant::now();
    let mut a = spawn(Role::A)?;
    // b's qemu connects once at startup: a must be listening by then.
    loop {
        if loopback_listening(port) {
            break;
        }
        if a.poll()? || start.elapsed() >= Duration::from_secs(30) {
            a.kill(Killed::Timeout(30));
            let err = std::fs::read_to_string(&a.stderr_path).unwrap_or_default();
            bail!(
                "guest a's qemu did not listen on 127.0.0.1:{port}: {}",
                err.trim()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let b = spawn(Role::B)?;
    let mut guests = [a, b];
    let mut next_note = Duration::from_secs(15);
    loop {
        let mut running = 0;
        for g in guests.iter_mut() {
            if !g.poll()? {
                running += 1;
            }
        }
        if running == 0 {
            break;
        }
        // A guest gone without a status never ran its command (or crashed
        // in it): its partner cannot get a meaningful result.
        for (i, role) in Role::BOTH.iter().enumerate() {
            let peer = role.peer().slot();
            if guests[i].exit.is_some() && !guests[i].has_status() && guests[peer].exit.is_none() {
                note(
                    Some(role.peer().name()),
                    &format!(
                        "stopping: guest {} ended without reporting its command's exit status",
                        role.name()
                    ),
                );
                guests[peer].kill(Killed::PeerFailed(role.name()));
            }
        }
        let elapsed = start.elapsed();
        if elapsed >= opts.timeout {
            for g in guests.iter_mut() {
                g.kill(Killed::Timeout(opts.timeout.as_secs()));
            }
            continue;
        }
        if elapsed >= next_note
            && guests
                .iter()
                .any(|g| !g.console.ready.load(Ordering::SeqCst))
        {
            step!("still booting ({} s) ...", elapsed.as_secs());
            next_note += Duration::from_secs(15);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let [a, b] = guests;
    Ok([a.finish(), b.finish()])
}

/// Takes an exclusive lock on the cache while the kernel and initramfs are
/// prepared, so that concurrent runs do not download or build twice. The
/// lock is released when the returned file is dropped.
fn lock_cache() -> Result<File> {
    use std::os::fd::AsRawFd;
    let dir = util::cache_dir();
    mkdir_p(&dir)?;
    let path = dir.join(".lock");
    let file = File::create(&path).with_context(|| format!("cannot open {}", path.display()))?;
    // SAFETY: flock on a file descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        step!(
            "waiting for another xtask run to finish preparing {} ...",
            dir.display()
        );
        // SAFETY: as above.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!(
                "cannot lock {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(file)
}

/// Shows the buffered pre-init console output after a failed boot.
fn show_early(console: &Console, title: &str, label: Option<&str>) {
    let early = console.early.lock().unwrap().clone();
    let lines: Vec<&String> = early.iter().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return;
    }
    note(label, &format!("{title}:"));
    for line in lines {
        print_line(&format!("vm| {line}"));
    }
}

/// Shell words of a command line, quoted.
fn quote_command(command: &[std::ffi::OsString]) -> Result<String> {
    let quoted: Vec<String> = command
        .iter()
        .map(|a| util::shell_quote_os(a))
        .collect::<Result<_>>()?;
    Ok(quoted.join(" "))
}

/// `cargo xtask vm`: runs one command in the VM and returns its exit status.
pub fn vm_command(opts: &VmOptions, command: &[std::ffi::OsString]) -> Result<i32> {
    if command.is_empty() {
        bail!("no command given: use `cargo xtask vm -- CMD [ARGS...]`");
    }
    let payload = format!(
        "# Generated by `cargo xtask vm`.\nexec {}\n",
        quote_command(command)?
    );
    let run_dir = new_run_dir()?;
    let outcome = match run(opts, &run_dir, &payload) {
        Ok(outcome) => outcome,
        Err(e) => {
            // Keep the folder for debugging only if the VM got to boot.
            if !run_dir.join("console.log").exists() {
                let _ = std::fs::remove_dir_all(&run_dir);
            }
            return Err(e);
        }
    };
    // Nothing worth keeping once the status is read, unless the kernel
    // complained (dmesg.txt).
    if !outcome.kernel_problems {
        let _ = std::fs::remove_dir_all(&run_dir);
    }
    Ok(outcome.status)
}

/// What one guest of a pair runs.
pub enum PairCommand {
    /// A command and its arguments (`exec`ed).
    Argv(Vec<std::ffi::OsString>),
    /// A shell command line (the body of the payload script).
    Shell(String),
}

impl PairCommand {
    fn payload(&self) -> Result<String> {
        Ok(match self {
            PairCommand::Argv(argv) => {
                if argv.is_empty() {
                    bail!("empty command");
                }
                format!(
                    "# Generated by `cargo xtask vm2`.\nexec {}\n",
                    quote_command(argv)?
                )
            }
            PairCommand::Shell(line) => {
                if line.trim().is_empty() {
                    bail!("empty command");
                }
                format!("# Generated by `cargo xtask vm2`.\n{line}\n")
            }
        })
    }
}

/// A one-line description of a pair guest's outcome.
pub fn describe_outcome(role: Role, outcome: &Result<VmOutcome>) -> String {
    let what = match outcome {
        Ok(o) => format!("exit status {}", o.status),
        Err(e) if e.downcast_ref::<Timeout>().is_some() => "timed out (killed)".to_string(),
        Err(e) => format!("error: {e:#}"),
    };
    format!("guest {} ({}): {what}", role.name(), role.addr())
}

/// The exit status of a pair: 0 when both commands exited 0, 124 when a
/// guest timed out, 1 when one failed to run its command, else the first
/// non-zero command status (a before b).
pub fn pair_status(outcomes: &[Result<VmOutcome>; 2]) -> i32 {
    if outcomes
        .iter()
        .any(|o| matches!(o, Err(e) if e.downcast_ref::<Timeout>().is_some()))
    {
        return 124;
    }
    let mut code = 0;
    for o in outcomes {
        match o {
            Err(_) => return 1,
            Ok(o) if o.status != 0 && code == 0 => code = o.status,
            Ok(_) => {}
        }
    }
    code
}

/// `cargo xtask vm2`: boots a linked pair, runs `commands[0]` in guest a
/// and `commands[1]` in guest b, prints both statuses and returns the
/// pair's status (see [`pair_status`]).
pub fn vm2_command(opts: &VmOptions, commands: [&PairCommand; 2]) -> Result<i32> {
    let payloads = [
        commands[0].payload().map_err(|e| anyhow!("guest a: {e}"))?,
        commands[1].payload().map_err(|e| anyhow!("guest b: {e}"))?,
    ];
    let pair_dir = new_run_dir()?;
    let outcomes = match run_pair(opts, &pair_dir, [&payloads[0], &payloads[1]]) {
        Ok(o) => o,
        Err(e) => {
            step!("run folders kept in {}", pair_dir.display());
            return Err(e);
        }
    };
    for (role, o) in Role::BOTH.iter().zip(&outcomes) {
        step!("{}", describe_outcome(*role, o));
    }
    let status = pair_status(&outcomes);
    let kernel_problems = outcomes
        .iter()
        .any(|o| o.as_ref().is_ok_and(|o| o.kernel_problems));
    if status == 0 && !kernel_problems {
        let _ = std::fs::remove_dir_all(&pair_dir);
    } else {
        step!("run folders (console logs) kept in {}", pair_dir.display());
    }
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_script_quotes() {
        let s = guest_script(
            "/w s",
            "/w s/target/vm-run/1",
            &[("RVERBS_X".into(), "a'b".into())],
            &GuestNet::Veth,
        );
        assert!(s.contains("RUN='/w s/target/vm-run/1'"));
        assert!(s.contains(r"RVERBS_X='a'\''b'"));
        assert!(s.contains("cd '/w s' ||"));
        assert!(s.contains("rdma link add rxe0 type rxe netdev veth0"));
        assert!(s.contains("'ffff:0a00:0001'"));
        assert!(s.contains("ndctl create-namespace --force --reconfig=namespace0.0 --mode=devdax"));
        assert!(!s.contains("ping"));
    }

    #[test]
    fn link_guest_script() {
        let s = guest_script(
            "/w",
            "/w/target/vm-run/1/b",
            &link_env(Role::B, "/w/target/vm-run/1/b", "/w/target/vm-run/1/a"),
            &GuestNet::Link {
                role: Role::B,
                peer_run: "/w/target/vm-run/1/a".into(),
            },
        );
        assert!(s.contains("ip addr add 10.0.1.2/24 dev eth0"));
        assert!(s.contains("rdma link add rxe0 type rxe netdev eth0"));
        assert!(s.contains("'ffff:0a00:0102'"));
        assert!(s.contains("PEER=10.0.1.1\n"));
        assert!(s.contains("PEER_RUN=/w/target/vm-run/1/a\n"));
        assert!(s.contains("RVERBS_ROLE=b RVERBS_ADDR=10.0.1.2 RVERBS_PEER_ADDR=10.0.1.1"));
        assert!(s.contains("RVERBS_PEER_RUN_DIR=/w/target/vm-run/1/a"));
        assert!(!s.contains("veth"));
        assert!(!s.contains("ndctl"), "a pair guest has no NVDIMM");
    }

    #[test]
    fn link_nic_is_loopback_only() {
        let a = link_nic(Role::A, 4321).join(" ");
        let b = link_nic(Role::B, 4321).join(" ");
        assert!(a.contains("socket,id=link0,listen=127.0.0.1:4321"));
        assert!(b.contains("socket,id=link0,connect=127.0.0.1:4321"));
        assert_ne!(Role::A.mac(), Role::B.mac());
    }

    #[test]
    fn a_guest_gone_before_its_command_is_a_setup_failure() {
        let run = Path::new("/w/target/vm-run/1");
        let feed = |text: &str| {
            let console = Arc::new(Console::default());
            pump(
                text.as_bytes(),
                Arc::clone(&console),
                Instant::now(),
                None,
                Some("b"),
            );
            console
        };
        let is_setup = |c: &Console| {
            unreported(c, "exit status: 0", 9.7, run)
                .downcast_ref::<SetupFailed>()
                .is_some()
        };
        // Died while the kernel booted: nothing from init.
        assert!(is_setup(&feed("")));
        assert!(is_setup(&feed("[    1.2] int3: 0000 [#1] SMP\n")));
        // In the set-up, after init and rxe0.
        assert!(is_setup(&feed(
            "@@xtask: init\n@@xtask: chroot\n@@xtask: ready\n"
        )));
        assert!(is_setup(&feed("@@xtask: init\n@@xtask: fatal: no eth0\n")));
        // Its command had started: that is the command's failure.
        let started = feed("@@xtask: init\n@@xtask: ready\n@@xtask: command\n");
        assert!(!is_setup(&started));
        let msg = unreported(&started, "exit status: 0", 9.7, run).to_string();
        assert!(msg.contains("inside the command"), "{msg}");
    }

    #[test]
    fn pair_statuses() {
        let ok = |status| -> Result<VmOutcome> {
            Ok(VmOutcome {
                status,
                boot_secs: None,
                kernel_problems: false,
            })
        };
        assert_eq!(pair_status(&[ok(0), ok(0)]), 0);
        assert_eq!(pair_status(&[ok(0), ok(3)]), 3);
        assert_eq!(pair_status(&[ok(2), ok(3)]), 2);
        assert_eq!(pair_status(&[ok(0), Err(anyhow!("setup"))]), 1);
        assert_eq!(pair_status(&[ok(0), Err(Timeout(5).into())]), 124);
        let setup = || -> Result<VmOutcome> { Err(SetupFailed("no eth0".into()).into()) };
        assert!(pair_setup_failed(&[setup(), Err(anyhow!("peer a failed"))]));
        assert!(pair_setup_failed(&[setup(), setup()]));
        // A command that ran (whatever its status) is a real result.
        assert!(!pair_setup_failed(&[setup(), ok(1)]));
        assert!(!pair_setup_failed(&[
            Err(Timeout(300).into()),
            Err(anyhow!("x"))
        ]));
    }

    #[test]
    fn rejects_spaces() {
        assert!(plain_path(Path::new("/a b")).is_err());
        assert!(plain_path(Path::new("rel")).is_err());
        assert_eq!(plain_path(Path::new("/work/main")).unwrap(), "/work/main");
    }
}
