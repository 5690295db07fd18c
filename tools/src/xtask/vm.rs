//! Booting the soft-RoCE VM and running a payload script in it.
//!
//! Each run gets a folder `<workspace>/target/vm-run/<id>/` in the writable
//! workspace share. The host writes `guest.sh` (veth pair + `rdma link add
//! rxe0`, then the payload with a clean environment) and `payload.sh` there;
//! the initramfs init chroots into the host's root and runs `guest.sh`,
//! which writes the payload's exit status to `status`. The host reads that
//! file after qemu exits: no exit status is parsed from the console.
//!
//! The serial console is passed through to our stdout, minus firmware noise
//! before init starts (kept and shown only if the boot fails) and `@@xtask:`
//! marker lines, which become `vm: ...` progress lines. qemu is killed on
//! timeout, on SIGINT/SIGTERM/SIGHUP (see [`install_signal_handlers`]) and,
//! through `PR_SET_PDEATHSIG`, if xtask itself dies.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::util::{self, ensure_tool, mkdir_p, print_line, shell_quote, workspace_root};
use crate::{initramfs, kernel};

/// The PATH the payload runs with.
pub const GUEST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How many old run folders to keep under target/vm-run.
const KEEP_RUNS: usize = 10;

/// The pid of the running qemu, for the signal handler (0 when none).
static QEMU_PID: AtomicI32 = AtomicI32::new(0);

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
    let pid = QEMU_PID.load(Ordering::SeqCst);
    let msg: &[u8] = if pid > 0 {
        // SAFETY: kill is async-signal-safe; pid is our qemu child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
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
    let dir = base.join(format!("{secs}-{}", std::process::id()));
    mkdir_p(&dir)?;
    Ok(dir)
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

/// The script the guest runs as root in the chroot: network and rxe0 setup,
/// then `payload.sh` in the workspace with a clean environment.
fn guest_script(workspace: &str, run_dir: &str, extra_env: &[(String, String)]) -> String {
    let mut env = format!("PATH={GUEST_PATH} HOME=/root");
    for (k, v) in extra_env {
        env.push_str(&format!(" {k}={}", shell_quote(v)));
    }
    format!(
        r#"#!/bin/sh
# Generated by `cargo xtask` (tools/src/xtask/vm.rs) for one VM run.
RUN={run}
export PATH={GUEST_PATH}
fail() {{
    echo "$*" >"$RUN/setup-error"
    echo "@@xtask: fatal: $*"
    exit 1
}}
echo xtask-vm >/proc/sys/kernel/hostname
ip link set lo up || fail "ip link set lo up failed"
ip link add veth0 type veth peer name veth1 || fail "cannot create the veth pair"
ip addr add 10.0.0.1/24 dev veth0 || fail "cannot address veth0"
ip addr add 10.0.0.2/24 dev veth1 || fail "cannot address veth1"
ip link set veth0 up || fail "cannot bring veth0 up"
ip link set veth1 up || fail "cannot bring veth1 up"
rdma link add rxe0 type rxe netdev veth0 || fail "rdma link add rxe0 type rxe netdev veth0 failed"
port=/sys/class/infiniband/rxe0/ports/1
n=0
until [ -e /dev/infiniband/uverbs0 ] && grep -q ACTIVE "$port/state" 2>/dev/null &&
    grep -q 'ffff:0a00:0001' "$port/gids/1" 2>/dev/null; do
    n=$((n + 1))
    [ "$n" -le 400 ] || fail "rxe0 not ready after 20 s (no uverbs0, port not ACTIVE or no IPv4 GID)"
    sleep 0.05
done
echo "@@xtask: ready"
cd {ws} || fail "cannot cd to the workspace {ws}"
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
    done: AtomicBool,
    fatal: Mutex<Option<String>>,
    /// Seconds from qemu start until rxe0 was ready.
    ready_at: Mutex<Option<f64>>,
}

/// Reads the serial console, passing payload output through.
/// Everything is also written to `log` (the run folder's console.log).
fn pump(mut reader: impl Read, console: Arc<Console>, start: Instant, mut log: Option<File>) {
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
                print_line(before);
            }
        }
        let Some(marker) = marker else { continue };
        let secs = start.elapsed().as_secs_f64();
        if marker == "init" {
            console.init.store(true, Ordering::SeqCst);
            step!("guest init started after {secs:.1} s; loading modules, mounting 9p shares ...");
        } else if marker == "chroot" {
            // Modules loaded and shares mounted; guest.sh starts now.
        } else if marker == "ready" {
            console.ready.store(true, Ordering::SeqCst);
            *console.ready_at.lock().unwrap() = Some(secs);
            step!("rxe0 ready (boot took {secs:.1} s)");
        } else if let Some(msg) = marker.strip_prefix("fatal: ") {
            console.done.store(true, Ordering::SeqCst);
            step!("guest setup failed: {msg}");
            *console.fatal.lock().unwrap() = Some(msg.to_string());
        } else if marker.starts_with("guest.sh exited") {
            console.done.store(true, Ordering::SeqCst);
        } else {
            print_line(line);
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
fn check_dmesg(run_dir: &Path) -> bool {
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
    step!(
        "warning: the guest kernel logged {} problem line(s); full log in {}",
        hits.len(),
        path.display()
    );
    for line in hits.iter().take(20) {
        print_line(&format!("vm| {line}"));
    }
    true
}

/// Boots the VM and runs `payload` (a shell script body, run by /bin/sh in
/// the workspace as root with the clean environment) in it. `run_dir` must
/// come from [`new_run_dir`].
pub fn run(opts: &VmOptions, run_dir: &Path, payload: &str) -> Result<VmOutcome> {
    let qemu = ensure_tool("qemu-system-x86_64", "qemu-system-x86")?;
    // The guest runs the host's iproute2 `ip` and `rdma` in the chroot.
    ensure_tool("rdma", "iproute2")?;
    ensure_tool("ip", "iproute2")?;
    let (kernel, initrd) = {
        let _lock = lock_cache()?;
        let kernel = kernel::prepare(&opts.series)?;
        let initrd = initramfs::prepare(&kernel)?;
        (kernel, initrd)
    };

    let ws = workspace_root();
    let ws_str = plain_path(&ws)?;
    let run_str = plain_path(run_dir)?;
    if !run_dir.starts_with(&ws) {
        bail!(
            "run dir {} is outside the workspace share",
            run_dir.display()
        );
    }
    std::fs::write(
        run_dir.join("guest.sh"),
        guest_script(ws_str, run_str, &passthrough_env()),
    )
    .context("cannot write guest.sh")?;
    std::fs::write(run_dir.join("payload.sh"), payload).context("cannot write payload.sh")?;

    let stderr_path = run_dir.join("qemu.stderr");
    let stderr = std::fs::File::create(&stderr_path)
        .with_context(|| format!("cannot create {}", stderr_path.display()))?;
    let append =
        format!("console=ttyS0 quiet loglevel=1 panic=-1 xtask_ws={ws_str} xtask_run={run_str}");
    let mut cmd = Command::new(&qemu);
    cmd.args(["-nodefaults", "-no-user-config", "-no-reboot"])
        .args(["-accel", "tcg,thread=multi", "-cpu", "max"])
        .args(["-m", "2048", "-smp", "2"])
        .args(["-display", "none", "-monitor", "none"])
        .args([
            "-chardev",
            "stdio,id=console,signal=off",
            "-serial",
            "chardev:console",
        ])
        .arg("-kernel")
        .arg(&kernel.vmlinuz)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", &append])
        .arg("-virtfs")
        .arg("local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap")
        .arg("-virtfs")
        .arg(format!(
            "local,path={},mount_tag=work,security_model=none,multidevs=remap",
            ws_str.replace(',', ",,")
        ))
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
    step!(
        "booting {} with {} (timeout {} s) ...",
        kernel.release,
        qemu.display(),
        opts.timeout.as_secs()
    );
    std::fs::write(run_dir.join("qemu.cmd"), util::describe(&cmd) + "\n").ok();

    let start = Instant::now();
    let mut child: Child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", qemu.display()))?;
    QEMU_PID.store(child.id() as i32, Ordering::SeqCst);
    let console = Arc::new(Console::default());
    let stdout = child.stdout.take().context("qemu stdout not captured")?;
    let pump_thread = {
        let console = Arc::clone(&console);
        let log = File::create(run_dir.join("console.log")).ok();
        std::thread::spawn(move || pump(stdout, console, start, log))
    };

    let mut next_note = Duration::from_secs(15);
    let exit = loop {
        if let Some(status) = child.try_wait().context("cannot wait for qemu")? {
            break status;
        }
        let elapsed = start.elapsed();
        if elapsed >= opts.timeout {
            let _ = child.kill();
            let _ = child.wait();
            QEMU_PID.store(0, Ordering::SeqCst);
            let _ = pump_thread.join();
            show_early(&console, "console output before init");
            return Err(Timeout(opts.timeout.as_secs()).into());
        }
        if !console.ready.load(Ordering::SeqCst) && elapsed >= next_note {
            step!("still booting ({} s) ...", elapsed.as_secs());
            next_note += Duration::from_secs(15);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    QEMU_PID.store(0, Ordering::SeqCst);
    let _ = pump_thread.join();
    let total = start.elapsed().as_secs_f64();

    let status_file = run_dir.join("status");
    if let Ok(text) = std::fs::read_to_string(&status_file) {
        let status: i32 = text
            .trim()
            .parse()
            .with_context(|| format!("bad status {:?} in {}", text, status_file.display()))?;
        step!("guest finished in {total:.1} s; command exit status {status}");
        let kernel_problems = check_dmesg(run_dir);
        return Ok(VmOutcome {
            status,
            boot_secs: *console.ready_at.lock().unwrap(),
            kernel_problems,
        });
    }

    // No status: the guest never got to run the payload to its end.
    if !console.init.load(Ordering::SeqCst) {
        show_early(&console, "console output (init never started)");
    }
    let qemu_err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
    for line in qemu_err
        .lines()
        .filter(|l| !l.contains("TCG doesn't support"))
    {
        print_line(&format!("qemu: {line}"));
    }
    if let Some(msg) = console.fatal.lock().unwrap().clone() {
        bail!("the guest failed before the command ran: {msg}");
    }
    bail!(
        "the guest exited ({exit}) after {total:.1} s without reporting the command's exit status \
         (crash or power-off inside the command?); console log in {}/console.log",
        run_dir.display()
    )
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
fn show_early(console: &Console, title: &str) {
    let early = console.early.lock().unwrap().clone();
    let lines: Vec<&String> = early.iter().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return;
    }
    step!("{title}:");
    for line in lines {
        print_line(&format!("vm| {line}"));
    }
}

/// `cargo xtask vm`: runs one command in the VM and returns its exit status.
pub fn vm_command(opts: &VmOptions, command: &[std::ffi::OsString]) -> Result<i32> {
    if command.is_empty() {
        bail!("no command given: use `cargo xtask vm -- CMD [ARGS...]`");
    }
    let quoted: Vec<String> = command
        .iter()
        .map(|a| util::shell_quote_os(a))
        .collect::<Result<_>>()?;
    let payload = format!(
        "# Generated by `cargo xtask vm`.\nexec {}\n",
        quoted.join(" ")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_script_quotes() {
        let s = guest_script(
            "/w s",
            "/w s/target/vm-run/1",
            &[("RVERBS_X".into(), "a'b".into())],
        );
        assert!(s.contains("RUN='/w s/target/vm-run/1'"));
        assert!(s.contains(r"RVERBS_X='a'\''b'"));
        assert!(s.contains("cd '/w s' ||"));
    }

    #[test]
    fn rejects_spaces() {
        assert!(plain_path(Path::new("/a b")).is_err());
        assert!(plain_path(Path::new("rel")).is_err());
        assert_eq!(plain_path(Path::new("/work/main")).unwrap(), "/work/main");
    }
}
