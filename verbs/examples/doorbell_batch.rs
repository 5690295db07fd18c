//! Doorbell batching: a chain of work requests posted with one doorbell.
//!
//! Two RC QPs on one device, connected to each other. QP A posts, in one
//! `post_send` call (one doorbell), a chain of `N` RDMA WRITEs, each to its
//! own slice of B's buffer (addressed with `RemoteMr::slice`), only the
//! last one signaled: the QP executes a chain in order, so that one
//! completion tells that all of them are done. Then a second chain of `N`
//! RDMA READs fetches the slices back into another buffer of A's, again
//! with one doorbell and one signaled request, and everything is compared
//! byte for byte. Finally the chain is timed against `N` single posts.
//!
//! Usage: `doorbell_batch [DEVICE] [-n N] [-s SLICE_BYTES]` (defaults: the
//! first device, N = 32, 1024 bytes).

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rverbs::{AccessFlags, ConnectOpts, Cq, QpCap, QpInitAttr, QpType, Sge, Wc, WcOpcode};

const TIMEOUT: Duration = Duration::from_secs(10);

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(13)
                .wrapping_add(seed.wrapping_mul(101)) as u8
        })
        .collect()
}

/// Waits for the one signaled completion of a chain.
fn wait(cq: &mut Cq, what: &str, wr_id: u64, op: WcOpcode) -> Res<()> {
    let mut wc = [Wc::default(); 1];
    cq.poll_until(&mut wc, 1, TIMEOUT)
        .map_err(|e| format!("{what}: {e}"))?;
    if !wc[0].is_success() || wc[0].wr_id() != wr_id || wc[0].opcode() != op {
        return Err(format!("{what}: {:?}", wc[0]).into());
    }
    // Only the last request was signaled: nothing else may complete.
    if cq.poll(&mut wc)? != 0 {
        return Err(format!("{what}: an unsignaled request completed: {:?}", wc[0]).into());
    }
    Ok(())
}

fn run() -> Res<()> {
    let mut dev_name = None;
    let (mut n, mut slice) = (32usize, 1024usize);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "-n" => n = it.next().ok_or("-n needs a value")?.parse()?,
            "-s" => slice = it.next().ok_or("-s needs a value")?.parse()?,
            d if !d.starts_with('-') => dev_name = Some(d.to_string()),
            o => return Err(format!("unknown argument {o}").into()),
        }
    }
    if n == 0 || slice == 0 {
        return Err("N and the slice size must be positive".into());
    }
    let total = n.checked_mul(slice).ok_or("N x slice overflows")?;
    let devs = rverbs::devices()?;
    let dev = match &dev_name {
        Some(d) => devs
            .iter()
            .find(|x| x.name() == d)
            .ok_or(format!("no device {d}"))?,
        None => devs.first().ok_or("no RDMA device found")?,
    };
    let ctx = dev.open()?;
    let pd = ctx.alloc_pd()?;
    let mut cq_a = ctx.create_cq(16)?;
    let cq_b = ctx.create_cq(16)?;
    // Room for the whole chain in the send queue.
    let wr_count = u32::try_from(n)?;
    let cap = QpCap {
        max_send_wr: wr_count,
        ..QpCap::default()
    };
    let mut a = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq_a).cap(cap))?;
    let mut b = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq_b).cap(cap))?;
    if (a.cap().max_send_wr as usize) < n {
        return Err(format!(
            "the send queue holds {} requests, not {n}",
            a.cap().max_send_wr
        )
        .into());
    }
    let opts = ConnectOpts {
        sgid_index: ctx.default_gid_index(1)?,
        ..Default::default()
    };
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let (ea, eb) = (a.endpoint(&opts)?, b.endpoint(&opts)?);
    a.connect(&eb, access, &opts)?;
    b.connect(&ea, access, &opts)?;

    let mut src = pd.alloc_mr(total, access)?;
    let back = pd.alloc_mr(total, access)?;
    let dst = pd.alloc_mr(total, access)?;
    let remote = dst.remote(); // what B would send A out of band
    let want: Vec<u8> = (0..n).flat_map(|k| pattern(slice, k as u32)).collect();
    src.write_at(0, &want)?;

    // One SGE per request, each over its own slice: built once, borrowed by
    // the chain.
    let sges: Vec<[Sge; 1]> = (0..n)
        .map(|k| Ok([src.sge(k * slice..(k + 1) * slice)?]))
        .collect::<Res<_>>()?;
    let mut chain = Vec::with_capacity(n);
    for (k, sge) in sges.iter().enumerate() {
        let to = remote.slice((k * slice) as u64, slice as u64)?;
        chain.push(to.rdma_write(k as u64, sge)?);
    }
    let last = chain.len() - 1;
    chain[last] = chain[last].signaled();
    a.post_send(&chain)?; // one call, one doorbell
    wait(&mut cq_a, "write chain", last as u64, WcOpcode::RDMA_WRITE)?;
    if dst.to_vec() != want {
        return Err("the RDMA WRITE chain left the wrong bytes".into());
    }
    println!("{n} RDMA WRITEs of {slice} bytes posted with one doorbell, one completion: verified");

    // The READ chain, into `back`.
    let rsges: Vec<[Sge; 1]> = (0..n)
        .map(|k| Ok([back.sge(k * slice..(k + 1) * slice)?]))
        .collect::<Res<_>>()?;
    let mut reads = Vec::with_capacity(n);
    for (k, sge) in rsges.iter().enumerate() {
        let from = remote.slice((k * slice) as u64, slice as u64)?;
        reads.push(from.rdma_read(100 + k as u64, sge)?);
    }
    reads[last] = reads[last].signaled();
    a.post_send(&reads)?;
    wait(
        &mut cq_a,
        "read chain",
        100 + last as u64,
        WcOpcode::RDMA_READ,
    )?;
    if back.to_vec() != want {
        return Err("the RDMA READ chain returned the wrong bytes".into());
    }
    println!("{n} RDMA READs posted with one doorbell, one completion: verified");

    // Posting cost: the chain against one post (one doorbell) per request.
    let rounds = 20;
    let t = Instant::now();
    for _ in 0..rounds {
        a.post_send(&chain)?;
        wait(&mut cq_a, "timed chain", last as u64, WcOpcode::RDMA_WRITE)?;
    }
    let chained = t.elapsed();
    let t = Instant::now();
    for _ in 0..rounds {
        for wr in &chain {
            a.post_send(std::slice::from_ref(wr))?;
        }
        wait(
            &mut cq_a,
            "timed singles",
            last as u64,
            WcOpcode::RDMA_WRITE,
        )?;
    }
    let singles = t.elapsed();
    println!(
        "{rounds} x {n} writes: one doorbell per chain {chained:?}, one per request {singles:?}"
    );
    if dst.to_vec() != want {
        return Err("the timed writes left the wrong bytes".into());
    }
    println!("OK");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("doorbell_batch: {e}");
            ExitCode::FAILURE
        }
    }
}
