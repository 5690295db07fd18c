//! `rverbs perf {send,write,read,atomic} {bw,lat}`: perftest-style
//! bandwidth and latency benchmarks over an RC QP, with perftest's main
//! options (same letters) and its result columns, built on the public
//! `verbs` API only.
//!
//! The options are parsed in `args` and validated in `plan` ([`Plan::new`]
//! needs no device, then [`Plan::fit_device`]); [`run`] opens the device,
//! creates the QP and buffer (`setup`), exchanges addresses over our own
//! TCP format (`wire`), connects, and runs every size: the data path is in
//! `bench`, the figures and their printing in `stats` and `report`. With
//! `-R` the exchange and the connection go through rdma_cm the way
//! perftest's `-R` does ([`ptcomm`], `cm`), so either side may be
//! perftest's `ib_<verb>_<bw|lat> -R`.

mod args;
mod bench;
mod clock;
mod cm;
mod plan;
pub mod ptcomm;
mod report;
mod setup;
mod stats;
pub mod wire;

use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use rverbs::{AccessFlags, ConnectOpts, Endpoint, Mtu};

use crate::common::random_psn;
use bench::{Bench, Params, Peer, Res, Ticker};
use stats::RULE;
use wire::{Ctrl, Hello, Msg, Report};

pub use args::{Kind, PerfArgs, Verb};
pub use plan::{Plan, Timing};
use report::{json_doc, print_address, print_banner, rusage};
use setup::{check_match, create_parts, open, Parts};

/// Runs `rverbs perf`.
pub fn run(a: &PerfArgs) -> Result<()> {
    let _ = a.cpu_freq;
    let mut plan = Plan::new(a)?;
    if plan.rdma_cm {
        return cm::run_cm(plan);
    }
    let o = open(&plan)?;
    plan.fit_device(&o.attr, &o.port)?;
    if plan.sizes.is_empty() {
        bail!(
            "no size of the -a sweep fits the port's max_msg_sz {}",
            o.port.max_msg_sz
        );
    }
    let client = plan.host.is_some();
    let p = &plan;

    // Resources: one buffer of two halves, two CQs, the QP.
    let access = match p.verb {
        Verb::Send => AccessFlags::empty(),
        Verb::Write => AccessFlags::REMOTE_WRITE,
        Verb::Read => AccessFlags::REMOTE_READ,
        Verb::Atomic => AccessFlags::REMOTE_ATOMIC,
    };
    let Parts {
        mr,
        half,
        scq,
        rcq,
        mut qp,
    } = create_parts(p, &o, access)?;
    qp.to_init_at(p.ib_port, 0, access)
        .context("failed to modify QP to INIT")?;
    let outs = matches!(p.verb, Verb::Read | Verb::Atomic).then(|| {
        p.outs
            .unwrap_or(o.attr.max_qp_init_rd_atom.min(o.attr.max_qp_rd_atom))
            .clamp(1, 255)
    });
    let my_mtu = p.mtu.or(o.port.active_mtu()).unwrap_or(Mtu::Mtu1024);
    let remote_mr = mr.remote();
    let mut flags = 0;
    if p.all {
        flags |= Hello::ALL;
    }
    if p.timing.is_some() {
        flags |= Hello::DURATION;
    }
    if p.cmp_swap {
        flags |= Hello::CMP_SWAP;
    }
    let me = Hello {
        verb: p.verb.code(),
        kind: p.kind.code(),
        flags,
        mtu: my_mtu as u8,
        size: p.max_size() as u32,
        iters: p.iters,
        duration: p.timing.map_or(0, |t| t.total.as_secs() as u32),
        margin: p.timing.map_or(0, |t| t.margin.as_secs() as u32),
        qpn: qp.qp_num(),
        psn: random_psn(),
        lid: o.port.lid,
        gid: o.gid,
        addr: remote_mr.addr,
        rkey: remote_mr.rkey,
        len: remote_mr.len,
    };

    let mut ctrl = match &p.host {
        Some(h) => {
            let mut c = Ctrl::connect(h, p.port, p.limit)?;
            c.send_hello(&me)?;
            c
        }
        None => {
            let l = Ctrl::listen(p.port)?;
            if !p.json {
                println!();
                println!("************************************");
                println!("* Waiting for client to connect... *");
                println!("************************************");
            }
            Ctrl::accept(l, p.limit)?
        }
    };
    let peer = ctrl.recv_hello()?;
    if !client {
        ctrl.send_hello(&me)?;
    }
    let result = (|| -> Result<Vec<Report>> {
        check_match(p, &me, &peer)?;
        let mtu = Mtu::from_raw(peer.mtu.min(me.mtu)).unwrap_or(my_mtu);
        let opts = ConnectOpts {
            port_num: p.ib_port,
            sgid_index: o.gid_index.unwrap_or(0),
            path_mtu: mtu,
            sq_psn: me.psn,
            sl: p.sl,
            hop_limit: 64,
            max_dest_rd_atomic: o.attr.max_qp_rd_atom.clamp(1, 255) as u8,
            max_rd_atomic: outs.unwrap_or(1) as u8,
            min_rnr_timer: 12,
            timeout: p.qp_timeout,
            retry_cnt: p.retry_count,
            rnr_retry: 7,
        };
        let remote = Endpoint {
            qpn: peer.qpn,
            psn: peer.psn,
            lid: peer.lid,
            gid: peer.gid,
        };
        qp.to_rtr(&remote, &opts)
            .context("failed to modify QP to RTR")?;
        qp.to_rts(&opts).context("failed to modify QP to RTS")?;
        if !p.json {
            print_banner(p, &o, mtu, outs);
            print_address("local", &me);
            print_address("remote", &peer);
            println!("{RULE}");
        }
        ctrl.sync(client)?;
        let mut res = Res {
            qp: &mut qp,
            scq,
            rcq,
            mr,
            half,
            inline_src: vec![0x5a; p.inline as usize],
        };
        let mut bench = Bench::new(
            p.bench_params(client, ""),
            Peer::new(peer.addr, peer.rkey, peer.len)?,
        );
        let lat_hdr = p.kind == Kind::Lat;
        if !p.json {
            println!("{}", p.fmt.header(lat_hdr, lat_hdr && p.timing.is_some()));
        }
        let mut out = Vec::with_capacity(p.sizes.len());
        for &size in &p.sizes {
            let size = size as usize;
            bench.prepare(&mut res, size)?;
            let go = ctrl.sync(client)?;
            let report = if bench.active() {
                let (u0, s0) = rusage();
                let mut r = bench.run(&mut res, &mut ctrl, size, go)?;
                let (u1, s1) = rusage();
                r.cpu_user = u1 - u0;
                r.cpu_sys = s1 - s0;
                if client {
                    ctrl.send(&Msg::Report(r))?;
                } else {
                    wait_report(&mut ctrl, bench.params(), size)?;
                }
                r
            } else {
                wait_report(&mut ctrl, bench.params(), size)?
            };
            if !p.json {
                println!("{}", p.fmt.row(&report));
            }
            out.push(report);
        }
        ctrl.sync(client)?;
        if !p.json {
            println!("{RULE}");
        }
        Ok(out)
    })();
    let reports = match result {
        Ok(r) => r,
        Err(e) => {
            ctrl.send_failure(&e);
            return Err(e);
        }
    };
    if p.json {
        println!("{}", json_doc(p, &o, client, &reports));
    }
    Ok(())
}

/// The server's wait for the client's report of one size: shows the
/// client's progress meanwhile; returns the report.
fn wait_report(ctrl: &mut Ctrl, params: &Params, size: usize) -> Result<Report> {
    let mut ticker = Ticker::new(params, size, false);
    loop {
        match ctrl.recv()? {
            Msg::Report(r) => {
                ticker.finish();
                if r.size != size as u64 {
                    bail!(
                        "out of step: the client reported size {}, expected {size}",
                        r.size
                    );
                }
                return Ok(r);
            }
            Msg::Progress(n) => ticker.show(Instant::now(), n),
            Msg::Done(_) => {}
            other => bail!("out of step with the client: got {other:?} waiting for its results"),
        }
    }
}
