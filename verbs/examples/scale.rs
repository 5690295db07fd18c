//! The control-path scale probe: `cargo xtask bench` runs it next to
//! rdma-core's twin (tools/bench/scale.c) for N = 1 to 1024 objects, under
//! callgrind for the library's own instructions (only `*measured_*` is
//! counted; the kernel's work is not) and plainly for the time.
//!
//! `qp`: N CQs and N RC QPs created, each QP's endpoint asked for (port
//! and GID: what a program sends its peer), connected in pairs (QP i to QP
//! i ^ 1; a lone QP to itself) through INIT, RTR and RTS, then all
//! destroyed. `mr`: N page buffers (mapped beforehand) registered, then
//! deregistered.
//!
//! Usage: `scale qp|mr N REPS [DEVICE]`. One unmeasured round comes
//! first; then REPS measured rounds. Prints
//! `scale: what=W n=N reps=R median_ns=T min_ns=T`.

use std::process::ExitCode;
use std::time::Instant;

use rverbs::{AccessFlags, ConnectOpts, Context, PageBuf, Pd, QpCap, QpInitAttr, QpType};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The access the QPs and MRs get.
fn access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
}

/// Measured: the lifecycle of `n` QPs with their CQs.
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_qp_lifecycle(
    ctx: &Context,
    pd: &Pd,
    n: usize,
    gid_index: u8,
) -> rverbs::Result<()> {
    qp_lifecycle(ctx, pd, n, gid_index)
}

/// Measured: `bufs` registered one by one, then deregistered.
#[no_mangle]
#[inline(never)]
pub fn rverbs_measured_mr_lifecycle(pd: &Pd, bufs: Vec<PageBuf>) -> rverbs::Result<Vec<PageBuf>> {
    mr_lifecycle(pd, bufs)
}

/// The lifecycle of `n` QPs with their CQs (the warm-up round calls it
/// directly, so that callgrind does not count it).
#[inline(never)]
fn qp_lifecycle(ctx: &Context, pd: &Pd, n: usize, gid_index: u8) -> rverbs::Result<()> {
    // Arrays sized up front, as the C twin's are (a `collect` of
    // `Result`s grows its vector from empty, copying the objects at
    // every step: the program's cost, not the library's).
    let mut cqs = Vec::with_capacity(n);
    for _ in 0..n {
        cqs.push(ctx.create_cq(16)?);
    }
    let mut qps = Vec::with_capacity(n);
    for cq in &cqs {
        qps.push(pd.create_qp(&QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Rc,
            cap: QpCap::default(),
            sq_sig_all: false,
        })?);
    }
    let opts = |i: usize| ConnectOpts {
        sgid_index: gid_index,
        sq_psn: i as u32 & 0xff_ffff,
        ..Default::default()
    };
    let mut eps = Vec::with_capacity(n);
    for (i, qp) in qps.iter().enumerate() {
        eps.push(qp.endpoint(&opts(i))?);
    }
    for (i, qp) in qps.iter_mut().enumerate() {
        let peer = if n == 1 { 0 } else { (i ^ 1).min(n - 1) };
        qp.connect(&eps[peer], access(), &opts(i))?;
    }
    drop(qps);
    drop(cqs);
    Ok(())
}

/// `bufs` registered one by one, then deregistered.
#[inline(never)]
fn mr_lifecycle(pd: &Pd, bufs: Vec<PageBuf>) -> rverbs::Result<Vec<PageBuf>> {
    let mut mrs = Vec::with_capacity(bufs.len());
    for b in bufs {
        mrs.push(pd.register(b, access()).map_err(rverbs::Error::from)?);
    }
    let mut out = Vec::with_capacity(mrs.len());
    for mr in mrs {
        out.push(mr.into_inner()?);
    }
    Ok(out)
}

fn run() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err("usage: scale qp|mr N REPS [DEVICE]".into());
    }
    let what = args[1].as_str();
    let n: usize = args[2].parse()?;
    let reps: usize = args[3].parse()?;
    let dev = args.get(4).map_or("rxe0", String::as_str);
    if n == 0 || reps == 0 || !matches!(what, "qp" | "mr") {
        return Err("bad kind, N or REPS".into());
    }
    let ctx = rverbs::device(dev)?.open()?;
    let pd = ctx.alloc_pd()?;
    let gid_index = ctx.default_gid_index(1)?;
    let mut bufs = (0..n)
        .map(|_| PageBuf::new(4096))
        .collect::<rverbs::Result<Vec<_>>>()?;
    // The unmeasured round: first-use costs of the process (the
    // fork-safety question at the first registration, lazy statics) are
    // not what the scale is about.
    if what == "qp" {
        qp_lifecycle(&ctx, &pd, n, gid_index)?;
    } else {
        bufs = mr_lifecycle(&pd, bufs)?;
    }
    let mut t = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t0 = Instant::now();
        if what == "qp" {
            rverbs_measured_qp_lifecycle(&ctx, &pd, n, gid_index)?;
        } else {
            bufs = rverbs_measured_mr_lifecycle(&pd, bufs)?;
        }
        t.push(t0.elapsed().as_nanos());
    }
    t.sort_unstable();
    println!(
        "scale: what={what} n={n} reps={reps} median_ns={} min_ns={}",
        t[reps / 2],
        t[0]
    );
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scale: {e}");
            ExitCode::FAILURE
        }
    }
}
