//! The memory-registration cost probe: `cargo xtask bench` runs it next to
//! rdma-core's twin (tools/bench/regmr.c), under callgrind for the
//! library's own instructions (only `*measured_*` is counted; the kernel's
//! pinning is not) and plainly for the time each register + deregister
//! pair takes.
//!
//! Maps SIZE bytes (a [`PageBuf`]: anonymous, not touched), registers them
//! once unmeasured while reading `VmPin` before, during and after, then
//! runs ITERS measured register + deregister pairs of the same buffer
//! (`Pd::register`, then `Mr::into_inner`, which hands the buffer back),
//! each timed. Prints the same line as the C probe:
//!
//! `regmr: size=S mode=M iters=N median_ns=T min_ns=T vmpin_before_kib=K
//! vmpin_held_kib=K vmpin_after_kib=K`
//!
//! or `regmr: size=S mode=M unsupported ...` when the registration is
//! refused (on-demand paging where the kernel has none).
//!
//! Usage: `regmr SIZE ITERS [DEVICE [pinned|odp]]` (defaults: rxe0, pinned).

use std::process::ExitCode;
use std::time::Instant;

use rverbs::{AccessFlags, PageBuf, Pd};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Measured: one registration and its deregistration.
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_reg_dereg(
    pd: &Pd,
    buf: PageBuf,
    access: AccessFlags,
) -> rverbs::Result<PageBuf> {
    Ok(pd.register(buf, access)?.into_inner()?)
}

fn vmpin_kib() -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmPin:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(-1)
}

fn run() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: regmr SIZE ITERS [DEVICE [pinned|odp]]".into());
    }
    let size: usize = args[1].parse()?;
    let iters: usize = args[2].parse()?;
    let dev = args.get(3).map_or("rxe0", String::as_str);
    let mode = args.get(4).map_or("pinned", String::as_str);
    if size == 0 || iters == 0 || !matches!(mode, "pinned" | "odp") {
        return Err("bad SIZE, ITERS or mode".into());
    }
    let mut access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    if mode == "odp" {
        access |= AccessFlags::ON_DEMAND;
    }
    let ctx = rverbs::device(dev)?.open()?;
    let pd = ctx.alloc_pd()?;
    let buf = PageBuf::new(size)?;
    let before = vmpin_kib();
    let mr = match pd.register(buf, access) {
        Ok(mr) => mr,
        Err(e) => {
            println!("regmr: size={size} mode={mode} unsupported ({})", e.error);
            return Ok(());
        }
    };
    let held = vmpin_kib();
    let mut buf = mr.into_inner()?;
    let after = vmpin_kib();
    let mut t = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t0 = Instant::now();
        buf = rverbs_measured_reg_dereg(&pd, buf, access)?;
        t.push(t0.elapsed().as_nanos());
    }
    t.sort_unstable();
    println!(
        "regmr: size={size} mode={mode} iters={iters} median_ns={} min_ns={} \
         vmpin_before_kib={before} vmpin_held_kib={held} vmpin_after_kib={after}",
        t[iters / 2],
        t[0]
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("regmr: {e}");
            ExitCode::FAILURE
        }
    }
}
