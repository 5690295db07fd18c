//! `cargo xtask conform --dev NAME`: the conformance run for a machine with
//! an RDMA device we drive (issue 45, item 7). We have no ConnectX here;
//! this is how the first user who has one proves or disproves what the
//! emulator shows. Three parts, one report (`<out>/report.txt`):
//!
//! 1. **rdma-core's own suite** (pyverbs, [`crate::pyverbs`]) on rdma-core's
//!    libibverbs and on ours, verdict for verdict, against the
//!    allowed-differences file of the device's driver.
//! 2. **The interop matrix**: rdma-core's `ibv_{rc,ud,srq}_pingpong` and
//!    perftest's `ib_send_bw`, `ib_write_bw` and `ib_read_bw`, a server
//!    and a client on the device, each on rdma-core's library or ours (all
//!    four mixes; rdma-core with itself is the baseline that says the
//!    device works).
//! 3. **The commands**: `tests/mlx5-emu/c/cmd_seq.c`, a fixed sequence of
//!    control-path verbs, on both libraries under `tests/uverbs-trace` (an
//!    `LD_PRELOAD` library that records every `write()` and ioctl on
//!    `/dev/infiniband/uverbs*`), the two logs compared field by field
//!    ([`crate::mlx5::cmd_compare`]).
//!
//! `--emu` runs the same on the emulated ConnectX-5 (`tests/mlx5-emu`,
//! preloaded after the tracer); the interop matrix is not run there (the
//! emulated device lives inside each process, so two processes cannot
//! reach each other through it). `--prebuilt` takes every binary from the
//! target folder instead of building it (the VM: `tests/vm/conform.sh`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::mlx5::cmd_compare::{self, Driver};
use crate::mlx5::run_bounded;
use crate::util::{self, cargo_bin, describe, workspace_root};

/// The tracer's package.
const TRACE_PACKAGE: &str = "uverbs-trace";
/// One program's limit (a pingpong, a perftest run, the sequence).
const ITEM_LIMIT: Duration = Duration::from_secs(60);

/// What to run, and where.
pub struct Options {
    /// The device (`ibv_devices` name).
    pub dev: String,
    /// On the emulated ConnectX-5 (`--dev` must be mlx5_0).
    pub emu: bool,
    /// Take the binaries from the target folder, build nothing.
    pub prebuilt: bool,
    /// The report's folder (default `<target>/conform/<dev>`).
    pub out: Option<PathBuf>,
    /// The target folder (default: cargo's, or `RVERBS_TARGET_DIR`).
    pub target_dir: Option<PathBuf>,
    /// The GID index for RoCE (default: the first RoCE v2 IPv4 GID).
    pub gid_index: Option<u32>,
    /// The pyverbs allowed-differences file (default: the driver's).
    pub allowed: Option<PathBuf>,
    /// Run only these parts (`pyverbs`, `interop`, `commands`); empty: all.
    pub only: Vec<String>,
    /// The first TCP port of the interop matrix.
    pub port: u16,
}

/// One line of the report.
struct Item {
    name: String,
    /// `Ok(detail)`, `Err(why it failed)`.
    verdict: std::result::Result<String, String>,
    log: Option<PathBuf>,
}

/// The binaries the run needs.
struct Binaries {
    /// The folder of our `libibverbs.so.1`.
    ourlib: PathBuf,
    /// The tracer.
    trace: PathBuf,
    /// `cmd_seq.c`, compiled.
    cmd_seq: PathBuf,
    /// The emulator (with `--emu`).
    emu: Option<PathBuf>,
}

/// The device as sysfs describes it.
struct Device {
    /// `mlx5`, `rxe` or what the driver's name says.
    driver: String,
    /// The port's link layer is Ethernet.
    roce: bool,
    /// The GID index the programs use.
    gid_index: u32,
}

/// `cargo xtask conform`: true when every part passed.
pub fn conform_command(o: &Options) -> Result<bool> {
    let ws = workspace_root();
    let target = match (&o.target_dir, std::env::var_os("RVERBS_TARGET_DIR")) {
        (Some(t), _) => t.clone(),
        (None, Some(t)) => PathBuf::from(t),
        (None, None) => crate::testrun::target_dir()?,
    };
    if o.emu && o.dev != "mlx5_0" {
        bail!("--emu: the emulated device is mlx5_0, not {}", o.dev);
    }
    let parts = ["pyverbs", "interop", "commands"];
    if let Some(p) = o.only.iter().find(|p| !parts.contains(&p.as_str())) {
        bail!("--only {p}: the parts are {}", parts.join(", "));
    }
    let wants = |p: &str| o.only.is_empty() || o.only.iter().any(|x| x == p);
    let out = o
        .out
        .clone()
        .unwrap_or_else(|| target.join("conform").join(&o.dev));
    let _ = fs::remove_dir_all(&out);
    util::mkdir_p(&out)?;
    let bins = binaries(&ws, &target, o)?;
    let emu_sysfs = out.join("emu-sysfs");
    let env = |c: &mut Command| {
        if let Some(emu) = &bins.emu {
            c.env("LD_PRELOAD", emu)
                .env("MLX5_EMU_SYSFS", &emu_sysfs)
                .env("SYSFS_PATH", &emu_sysfs);
        }
    };
    let device = device(o, &bins, &env)?;
    say!(
        "conform: {} (driver {}, {}, GID index {}), report in {}",
        o.dev,
        device.driver,
        if device.roce { "RoCE" } else { "InfiniBand" },
        device.gid_index,
        out.display()
    );

    let mut items = Vec::new();
    if wants("pyverbs") {
        let allowed = match (&o.allowed, device.driver.as_str()) {
            (Some(a), _) => Some(a.clone()),
            (None, "mlx5") => Some(ws.join(crate::mlx5::PYVERBS_ALLOWED)),
            (None, "rxe") => Some(ws.join("tests/vm/pyverbs_allowed.tsv")),
            (None, _) => None,
        };
        // No file of allowed differences for an unknown driver: every
        // difference is one.
        let none = out.join("pyverbs_allowed.none.tsv");
        fs::write(&none, "# no allowed differences for this driver\n")?;
        let allowed = allowed.unwrap_or(none);
        let suite = crate::pyverbs::Suite {
            dev: &o.dev,
            allowed: &allowed,
            test_limit_secs: if o.emu {
                crate::mlx5::PYVERBS_TEST_LIMIT_SECS
            } else {
                120
            },
        };
        for (name, verdict, log) in
            crate::pyverbs::run(&suite, &ws, &out, &bins.ourlib, &env, run_bounded)?
        {
            items.push(Item {
                name,
                verdict,
                log: Some(log),
            });
        }
    }
    if wants("interop") {
        if o.emu {
            items.push(Item {
                name: "interop matrix".into(),
                verdict: Ok(
                    "not run: the emulated device lives inside each process, so \
                             two processes cannot reach each other through it"
                        .into(),
                ),
                log: None,
            });
        } else {
            items.extend(interop(o, &device, &bins, &out)?);
        }
    }
    if wants("commands") {
        items.extend(commands(o, &device, &bins, &env, &out)?);
    }

    let mut report = format!("cargo xtask conform --dev {}\n\n", o.dev);
    let mut ok = true;
    for it in &items {
        let (word, detail) = match &it.verdict {
            Ok(d) => ("ok  ", d.as_str()),
            Err(d) => {
                ok = false;
                ("FAIL", d.as_str())
            }
        };
        let log = it
            .log
            .as_ref()
            .map(|l| format!(" (log: {})", l.display()))
            .unwrap_or_default();
        report += &format!("{word} {:<52} {detail}{log}\n", it.name);
    }
    let passed = items.iter().filter(|i| i.verdict.is_ok()).count();
    report += &format!(
        "\nconform: {passed} of {} items passed{}\n",
        items.len(),
        if ok { "" } else { "; see the logs named above" }
    );
    fs::write(out.join("report.txt"), &report)?;
    for line in report.lines() {
        util::print_line(line);
    }
    Ok(ok)
}

/// Builds (or, with `--prebuilt`, finds) what the run needs.
fn binaries(ws: &Path, target: &Path, o: &Options) -> Result<Binaries> {
    let debug = target.join("debug");
    let cmd_seq = crate::mlx5::cmd_seq_exe(target);
    let ourlib = target.join("ibverbs").join("debug");
    if !o.prebuilt {
        util::ensure_tool("cc", "gcc")?;
        if !Path::new("/usr/include/infiniband/verbs.h").exists() {
            util::apt_install(&["libibverbs-dev"])?;
        }
        let mut packages = vec![TRACE_PACKAGE];
        if o.emu {
            packages.push(crate::mlx5::EMU_PACKAGE);
        }
        let mut cmd = Command::new(cargo_bin());
        cmd.arg("build").current_dir(ws).stdin(Stdio::null());
        for p in &packages {
            cmd.args(["-p", p]);
        }
        say!("building {}: {}", packages.join(", "), describe(&cmd));
        util::run(&mut cmd)?;
        let built = crate::ibverbs::build(target, false)?;
        if built != ourlib {
            bail!("our libibverbs was built in {}", built.display());
        }
        crate::mlx5::compile_cmd_seq(ws, &cmd_seq)?;
    }
    let bins = Binaries {
        ourlib,
        trace: debug.join(crate::mlx5::TRACE_LIB),
        cmd_seq,
        emu: o.emu.then(|| debug.join("libmlx5_emu.so")),
    };
    for f in [
        Some(bins.ourlib.join(crate::ibverbs::soname())),
        Some(bins.trace.clone()),
        Some(bins.cmd_seq.clone()),
        bins.emu.clone(),
    ]
    .into_iter()
    .flatten()
    {
        if !f.is_file() {
            bail!(
                "{} is missing{}",
                f.display(),
                if o.prebuilt {
                    " (built without --prebuilt)"
                } else {
                    ""
                }
            );
        }
    }
    Ok(bins)
}

/// Reads a sysfs attribute of the device (the emulator's tree with
/// `--emu`), trimmed.
fn sysfs(root: &Path, dev: &str, attr: &str) -> Option<String> {
    let p = root.join("class/infiniband").join(dev).join(attr);
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

/// Finds the device, its driver, link layer and GID index.
fn device(o: &Options, bins: &Binaries, env: &dyn Fn(&mut Command)) -> Result<Device> {
    if o.emu {
        // The emulator writes its sysfs tree when a program first opens
        // the device list; its port is InfiniBand unless told otherwise.
        let mut c = Command::new("ibv_devices");
        env(&mut c);
        let out = util::output(&mut c)?;
        if !out.contains("mlx5_0") {
            bail!("the emulator lists no mlx5_0: {out}");
        }
        let _ = bins;
        return Ok(Device {
            driver: "mlx5".into(),
            roce: false,
            gid_index: o.gid_index.unwrap_or(0),
        });
    }
    let root = Path::new("/sys");
    let dir = root.join("class/infiniband").join(&o.dev);
    if !dir.exists() {
        let have: Vec<String> = fs::read_dir(root.join("class/infiniband"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        bail!("no RDMA device {} (this machine has: {have:?})", o.dev);
    }
    // A PCI device's driver (mlx5_core, efa); a software device over a
    // netdev (rxe, siw) has a `parent` instead.
    let driver = fs::read_link(dir.join("device/driver"))
        .ok()
        .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
        .map(|d| d.trim_end_matches("_core").to_string())
        .or_else(|| {
            sysfs(root, &o.dev, "parent")
                .is_some()
                .then(|| o.dev.trim_end_matches(|c: char| c.is_ascii_digit()).into())
        })
        .unwrap_or_else(|| "unknown".into());
    let roce = sysfs(root, &o.dev, "ports/1/link_layer").as_deref() == Some("Ethernet");
    let gid_index = match o.gid_index {
        Some(g) => g,
        None if roce => roce_gid(root, &o.dev).unwrap_or(0),
        None => 0,
    };
    Ok(Device {
        driver,
        roce,
        gid_index,
    })
}

/// The first RoCE v2 GID of port 1 that maps an IPv4 address, else the
/// first RoCE v2 one.
fn roce_gid(root: &Path, dev: &str) -> Option<u32> {
    let mut v2 = None;
    for i in 0..256u32 {
        let Some(kind) = sysfs(root, dev, &format!("ports/1/gid_attrs/types/{i}")) else {
            continue;
        };
        let gid = sysfs(root, dev, &format!("ports/1/gids/{i}")).unwrap_or_default();
        if kind != "RoCE v2" || gid.chars().all(|c| c == '0' || c == ':') {
            continue;
        }
        if gid.starts_with("0000:0000:0000:0000:0000:ffff:") {
            return Some(i);
        }
        v2.get_or_insert(i);
    }
    v2
}

/// One mix of the matrix: which library the server and the client use.
#[derive(Clone, Copy)]
enum Lib {
    RdmaCore,
    Ours,
}

impl Lib {
    fn name(self) -> &'static str {
        match self {
            Lib::RdmaCore => "rdma-core",
            Lib::Ours => "ours",
        }
    }
}

/// The interop matrix: every tool, every mix.
fn interop(o: &Options, d: &Device, bins: &Binaries, out: &Path) -> Result<Vec<Item>> {
    let dir = out.join("interop");
    util::mkdir_p(&dir)?;
    let g = d.gid_index.to_string();
    let iters = "200";
    let tools: [(&str, Vec<&str>); 6] = [
        ("ibv_rc_pingpong", vec!["-n", iters, "-s", "4096"]),
        ("ibv_ud_pingpong", vec!["-n", iters, "-s", "1024"]),
        (
            "ibv_srq_pingpong",
            vec!["-n", iters, "-s", "4096", "-q", "4"],
        ),
        ("ib_send_bw", vec!["-n", iters, "-s", "4096"]),
        ("ib_write_bw", vec!["-n", iters, "-s", "4096"]),
        ("ib_read_bw", vec!["-n", iters, "-s", "4096"]),
    ];
    let mut port = o.port;
    let mut items = Vec::new();
    for (tool, args) in &tools {
        if util::find_in_path(tool).is_none() {
            items.push(Item {
                name: format!("interop {tool}"),
                verdict: Err(format!(
                    "{tool} is not installed (apt install ibverbs-utils perftest)"
                )),
                log: None,
            });
            continue;
        }
        let perftest = tool.starts_with("ib_");
        for (srv, cli) in [
            (Lib::RdmaCore, Lib::RdmaCore),
            (Lib::Ours, Lib::RdmaCore),
            (Lib::RdmaCore, Lib::Ours),
            (Lib::Ours, Lib::Ours),
        ] {
            port += 1;
            let mut base: Vec<String> = vec!["-d".into(), o.dev.clone()];
            if d.roce {
                base.extend([if perftest { "-x" } else { "-g" }.to_string(), g.clone()]);
            }
            base.extend(args.iter().map(|s| s.to_string()));
            base.extend(["-p".into(), port.to_string()]);
            let log = dir.join(format!("{tool}.{}-{}.log", srv.name(), cli.name()));
            let mut verdict = pair(tool, &base, port, srv, cli, bins, &log, perftest, iters)?;
            // Once more on a new port, as tests/vm/perftest_lib.sh does: under
            // emulation a run's TCP exchange sometimes loses its peer. Both
            // tries are in the report.
            if let Err(first) = &verdict {
                let first = first.clone();
                let _ = fs::rename(&log, log.with_extension("1st.log"));
                port += 1;
                let p = base.len() - 1;
                base[p] = port.to_string();
                verdict = pair(tool, &base, port, srv, cli, bins, &log, perftest, iters)?
                    .map(|d| format!("{d} (2nd try; 1st: {first})"))
                    .map_err(|e| format!("1st: {first}; 2nd: {e}"));
            }
            items.push(Item {
                name: format!(
                    "interop {tool}: {} server, {} client",
                    srv.name(),
                    cli.name()
                ),
                verdict,
                log: Some(log),
            });
        }
    }
    Ok(items)
}

/// A command of the matrix on `lib`.
fn tool_cmd(tool: &str, args: &[String], lib: Lib, bins: &Binaries) -> Command {
    let mut c = Command::new(tool);
    c.args(args).stdin(Stdio::null());
    if let Lib::Ours = lib {
        c.env("LD_LIBRARY_PATH", &bins.ourlib);
    }
    c
}

/// Whether something listens on TCP `port` (`/proc/net/tcp{,6}`, state
/// 0A), without connecting to it (the servers accept one connection).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3 && w[1].ends_with(&want) && w[3] == "0A"
            })
        })
    })
}

/// Waits up to `limit` for `child` to end; kills it after that.
fn wait_bounded(child: &mut Child, limit: Duration) -> Result<Option<i32>> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(s.code());
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs one server and client pair; both outputs go to `log`.
#[allow(clippy::too_many_arguments)]
fn pair(
    tool: &str,
    args: &[String],
    port: u16,
    srv: Lib,
    cli: Lib,
    bins: &Binaries,
    log: &Path,
    perftest: bool,
    iters: &str,
) -> Result<std::result::Result<String, String>> {
    let slog = log.with_extension("server");
    let file = fs::File::create(&slog)?;
    let mut server = tool_cmd(tool, args, srv, bins)
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting {tool}"))?;
    let start = Instant::now();
    let mut ready = false;
    while start.elapsed() < Duration::from_secs(30) {
        if listening(port) {
            ready = true;
            break;
        }
        if server.try_wait()?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ccode, cout) = if ready {
        let mut c = tool_cmd(tool, args, cli, bins);
        c.arg("127.0.0.1");
        run_bounded(&mut c, log, ITEM_LIMIT)?
    } else {
        (None, String::new())
    };
    // The server ends once its client is done; give it a moment.
    let scode = wait_bounded(&mut server, Duration::from_secs(if ready { 15 } else { 0 }))?;
    let sout = fs::read_to_string(&slog).unwrap_or_default();
    let _ = fs::write(
        log,
        format!(
            "--- client\n{cout}\n--- server ({})\n{sout}",
            slog.display()
        ),
    );
    if !ready {
        return Ok(Err(format!(
            "the server never listened on {port} (exit {scode:?})"
        )));
    }
    if ccode != Some(0) || scode != Some(0) {
        return Ok(Err(format!(
            "exit status server {scode:?}, client {ccode:?}"
        )));
    }
    let good = |out: &str| {
        if perftest {
            // The result row: #bytes #iterations ...
            out.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 2 && w[0].parse::<u64>().is_ok() && w[1] == iters
            })
        } else {
            out.contains(" bytes in ") && !out.contains("invalid")
        }
    };
    Ok(if good(&cout) && (perftest || good(&sout)) {
        Ok("both ended, data and counts as expected".into())
    } else {
        Err("no result line in the output".into())
    })
}

/// The commands part: `cmd_seq` on both libraries under the tracer, then
/// the comparison.
fn commands(
    o: &Options,
    d: &Device,
    bins: &Binaries,
    env: &dyn Fn(&mut Command),
    out: &Path,
) -> Result<Vec<Item>> {
    let mut items = Vec::new();
    let mut logs = Vec::new();
    for lib in [Lib::RdmaCore, Lib::Ours] {
        let trace = out.join(format!("cmd_seq.{}.cmd", lib.name()));
        let log = out.join(format!("cmd_seq.{}.log", lib.name()));
        let _ = fs::remove_file(&trace);
        let mut c = Command::new(&bins.cmd_seq);
        c.arg(&o.dev).arg(d.gid_index.to_string());
        env(&mut c);
        // The tracer first, so that it sees what reaches the device (the
        // emulator's symbols, or libc's).
        let preload = match &bins.emu {
            Some(emu) => format!("{}:{}", bins.trace.display(), emu.display()),
            None => bins.trace.display().to_string(),
        };
        c.env("LD_PRELOAD", preload).env("UVERBS_TRACE_LOG", &trace);
        if let Lib::Ours = lib {
            c.env("LD_LIBRARY_PATH", &bins.ourlib);
        }
        let (code, text) = run_bounded(&mut c, &log, ITEM_LIMIT)?;
        let steps = text.lines().filter(|l| l.starts_with("PASS ")).count();
        let verdict = match (code, text.lines().find(|l| l.starts_with("FAIL "))) {
            (_, Some(f)) => Err(f.to_string()),
            (Some(0), None) if steps > 0 => Ok(format!("{steps} steps passed")),
            (c, None) => Err(format!("exit status {c:?} after {steps} steps")),
        };
        items.push(Item {
            name: match lib {
                Lib::RdmaCore => "cmd_seq.c on rdma-core's libibverbs".into(),
                Lib::Ours => "cmd_seq.c on our libibverbs".into(),
            },
            verdict,
            log: Some(log),
        });
        logs.push(trace);
    }
    let driver = match d.driver.as_str() {
        "mlx5" => Driver::Mlx5,
        "rxe" => Driver::Rxe,
        _ => Driver::Other,
    };
    let log = out.join("cmd_compare.log");
    let verdict = compare_logs(&logs[0], &logs[1], driver, &log);
    items.push(Item {
        name: "uverbs commands: ours against rdma-core's".into(),
        verdict,
        log: Some(log),
    });
    Ok(items)
}

/// Compares two traces; the full report goes to `log`.
fn compare_logs(
    theirs: &Path,
    ours: &Path,
    driver: Driver,
    log: &Path,
) -> std::result::Result<String, String> {
    let read = |p: &Path| -> std::result::Result<Vec<cmd_compare::Command>, String> {
        let text = fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        let cmds =
            cmd_compare::parse_for(&text, driver).map_err(|e| format!("{}: {e:#}", p.display()))?;
        if cmds.is_empty() {
            return Err(format!("{}: no command recorded", p.display()));
        }
        Ok(cmds)
    };
    let (t, o) = match (read(theirs), read(ours)) {
        (Ok(t), Ok(o)) => (t, o),
        (Err(e), _) | (_, Err(e)) => {
            let _ = fs::write(log, format!("{e}\n"));
            return Err(e);
        }
    };
    let r = cmd_compare::compare(&t, &o);
    let _ = fs::write(log, cmd_compare::render(&t, &o, &r));
    if r.ok() {
        Ok(format!(
            "{} of {} commands identical after normalisation ({} more allowed by a rule)",
            r.identical,
            t.len(),
            r.allowed
        ))
    } else {
        Err(format!(
            "{} of {} paired commands differ, {} sent by one side only; first: {}",
            r.differing,
            r.compared,
            r.unpaired,
            r.lines
                .iter()
                .find(|l| !l.contains("allowed by rule"))
                .map_or("", String::as_str)
        ))
    }
}
