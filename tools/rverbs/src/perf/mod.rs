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
//! `-R` (`write bw` only, for now) the exchange and the connection go
//! through rdma_cm the way perftest's `-R` does ([`ptcomm`], `cm`), so
//! either side may be perftest's `ib_write_bw -R`.

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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: PerfArgs,
    }

    fn args(v: &[&str]) -> std::result::Result<PerfArgs, clap::Error> {
        T::try_parse_from(std::iter::once("perf").chain(v.iter().copied())).map(|t| t.a)
    }

    fn plan(v: &[&str]) -> Result<Plan> {
        Plan::new(&args(v).map_err(|e| anyhow::anyhow!("{e}"))?)
    }

    #[test]
    fn perftest_letters_parse() {
        let a = args(&[
            "write",
            "bw",
            "-d",
            "rxe0",
            "-i",
            "1",
            "-x",
            "1",
            "-s",
            "4096",
            "-n",
            "200",
            "-t",
            "64",
            "-I",
            "128",
            "-p",
            "19000",
            "-F",
            "--report_gbits",
            "-Q",
            "8",
            "-N",
            "-m",
            "2048",
            "-S",
            "2",
            "-u",
            "16",
            "--retry_count",
            "2",
            "--json",
            "--cpu_util",
            "10.0.0.1",
        ])
        .unwrap();
        assert_eq!((a.verb, a.kind), (Verb::Write, Kind::Bw));
        assert_eq!(a.host.as_deref(), Some("10.0.0.1"));
        assert_eq!(
            (a.dev.as_deref(), a.ib_port, a.gid_index),
            (Some("rxe0"), 1, Some(1))
        );
        assert_eq!(
            (a.size, a.iters, a.tx_depth, a.inline),
            (Some(4096), Some(200), Some(64), Some(128))
        );
        assert!(a.cpu_freq && a.report_gbits && a.no_peak && a.json && a.cpu_util);
        assert_eq!(
            (a.port, a.cq_mod, a.mtu, a.sl, a.qp_timeout),
            (19000, Some(8), Some(Mtu::Mtu2048), 2, 16)
        );
        assert_eq!(a.retry_count, 2);
        let p = Plan::new(&a).unwrap();
        assert_eq!(p.sizes, [4096]);
        assert_eq!((p.iters, p.tx_depth, p.cq_mod, p.inline), (200, 64, 8, 128));
        assert!(!p.peak);
        let b = args(&[
            "atomic",
            "lat",
            "-A",
            "CMP_AND_SWAP",
            "-o",
            "4",
            "--inline-size",
            "0",
        ])
        .unwrap();
        assert_eq!((b.atomic_type, b.outs), (Some(true), Some(4)));
        assert!(args(&["send", "lat", "-D", "3", "-f", "1", "-r", "64"]).is_ok());
    }

    #[test]
    fn defaults_follow_perftest() {
        let p = plan(&["write", "bw"]).unwrap();
        assert_eq!(
            (p.sizes.clone(), p.iters, p.tx_depth, p.cq_mod),
            (vec![65536], 5000, 128, 64)
        );
        assert!(p.peak && p.host.is_none());
        let p = plan(&["send", "bw", "localhost"]).unwrap();
        assert_eq!((p.iters, p.rx_depth), (1000, 512));
        let p = plan(&["send", "lat"]).unwrap();
        assert_eq!(
            (p.sizes.clone(), p.iters, p.tx_depth, p.cq_mod),
            (vec![2], 1000, 1, 1)
        );
        let p = plan(&["atomic", "bw"]).unwrap();
        assert_eq!(p.sizes, [8]);
        assert!(!p.cmp_swap);
        let p = plan(&["read", "bw", "-n", "5", "-t", "128"]).unwrap();
        assert_eq!((p.tx_depth, p.cq_mod, p.rx_depth), (5, 2, 1));
        let p = plan(&["write", "bw", "-n", "30000"]).unwrap();
        assert!(!p.peak, "no peak above 20000 iterations");
    }

    #[test]
    fn sweep_sizes() {
        let p = plan(&["write", "bw", "-a"]).unwrap();
        assert_eq!(p.sizes.first(), Some(&2));
        assert_eq!(p.sizes.last(), Some(&(1 << 23)));
        assert_eq!(p.sizes.len(), 23);
        let p = plan(&["send", "lat", "-a", "--max-size", "1000"]).unwrap();
        assert_eq!(p.sizes, [2, 4, 8, 16, 32, 64, 128, 256, 512]);
    }

    #[test]
    fn bad_options_get_clear_errors() {
        for (v, want) in [
            (
                &["write", "bw", "-s", "0"][..],
                "-s/--size must be at least 1",
            ),
            (&["write", "bw", "-s", "4294967296"], "at most"),
            (&["atomic", "bw", "-s", "16"], "must be 8"),
            (&["atomic", "lat", "-a"], "atomic"),
            (&["write", "bw", "-n", "4"], "at least 5"),
            (&["write", "bw", "-t", "0"], "-t/--tx-depth"),
            (&["send", "bw", "-r", "20000"], "-r/--rx-depth"),
            (&["send", "bw", "-I", "2000"], "0..1024"),
            (&["read", "bw", "-I", "64"], "send and write tests only"),
            (&["write", "bw", "-a", "-s", "64"], "not both"),
            (&["write", "bw", "--max-size", "64"], "-a/--all"),
            (&["write", "bw", "-a", "-D", "5"], "-D/--duration"),
            (&["write", "bw", "-D", "5", "-n", "100"], "exclude"),
            (&["write", "bw", "-D", "4", "-f", "2"], "margin"),
            (&["write", "bw", "-f", "1"], "-D/--duration runs only"),
            (&["write", "bw", "-Q", "0"], "-Q/--cq-mod"),
            (&["write", "bw", "-c", "UD"], "RC only"),
            (&["write", "bw", "-A", "FETCH_AND_ADD"], "atomic tests only"),
            (&["send", "bw", "-o", "4"], "read and atomic"),
            (&["write", "lat", "-S", "16"], "-S/--sl"),
            (&["write", "bw", "-i", "0"], "-i/--ib-port"),
            (&["write", "bw", "--retry_count", "8"], "--retry_count"),
            (&["write", "lat", "-n", "60000000"], "-D for longer runs"),
        ] {
            let e = format!("{:#}", plan(v).unwrap_err());
            assert!(e.contains(want), "{v:?}: {e}");
        }
        for v in [
            &["write", "bw", "-m", "1000"][..],
            &["bogus", "bw"],
            &["write", "both"],
            &["write", "bw", "-A", "SWAP"],
            &["write", "bw", "-n", "ten"],
            &["write", "bw", "a", "b"],
        ] {
            assert!(args(v).is_err(), "{v:?} was accepted");
        }
    }

    #[test]
    fn rdma_cm_is_write_bw_only() {
        let p = plan(&["write", "bw", "-R", "-s", "4096", "-n", "1000", "10.0.0.1"]).unwrap();
        assert!(p.rdma_cm);
        assert_eq!(
            (p.sizes.clone(), p.iters, p.port),
            (vec![4096], 1000, 18515)
        );
        let p = plan(&["write", "bw", "--rdma_cm", "-p", "19000"]).unwrap();
        assert!(p.rdma_cm && p.host.is_none());
        assert_eq!(p.port, 19000);
        assert!(!plan(&["write", "bw"]).unwrap().rdma_cm);
        for (v, want) in [
            (&["read", "bw", "-R"][..], "only `perf write bw -R`"),
            (&["send", "bw", "-R"], "not `perf send bw -R`"),
            (&["write", "lat", "-R"], "not `perf write lat -R`"),
            (&["write", "bw", "-R", "-a"], "-a/--all"),
            (&["write", "bw", "-R", "-D", "5"], "-D/--duration"),
            (&["write", "bw", "-R", "-m", "1024"], "-m/--mtu"),
            (&["write", "bw", "-R", "-x", "1"], "-x/--gid-index"),
            (&["write", "bw", "-R", "-i", "2"], "-i/--ib-port"),
            (&["write", "bw", "-R", "-S", "1"], "-S/--sl"),
            (&["write", "bw", "-R", "-u", "16"], "-u/--qp-timeout"),
            (&["write", "bw", "-R", "-c", "UC"], "RC only"),
        ] {
            let e = format!("{:#}", plan(v).unwrap_err());
            assert!(e.contains(want), "{v:?}: {e}");
        }
    }

    #[test]
    fn mismatched_peers_are_refused() {
        let p = plan(&["write", "bw", "-s", "4096"]).unwrap();
        let mine = Hello {
            verb: Verb::Write.code(),
            kind: Kind::Bw.code(),
            size: 4096,
            iters: 5000,
            len: 8192,
            ..Default::default()
        };
        assert!(check_match(&p, &mine, &mine).is_ok());
        let theirs = Hello { size: 64, ..mine };
        let e = check_match(&p, &mine, &theirs).unwrap_err().to_string();
        assert!(e.contains("-s 64") && e.contains("-s 4096"), "{e}");
        let theirs = Hello {
            verb: Verb::Read.code(),
            ..mine
        };
        let e = check_match(&p, &mine, &theirs).unwrap_err().to_string();
        assert!(e.contains("perf read bw"), "{e}");
    }

    #[test]
    fn a_peer_buffer_that_wraps_the_address_space_is_refused() {
        // A server's Hello whose buffer ends past 2^64: `addr + len / 2`
        // used to overflow (a panic) once the test started.
        let p = plan(&["write", "bw", "-s", "4096"]).unwrap();
        let mine = Hello {
            verb: Verb::Write.code(),
            kind: Kind::Bw.code(),
            size: 4096,
            iters: 5000,
            addr: 0x7f00_0000_0000,
            len: 8192,
            ..Default::default()
        };
        let theirs = Hello {
            addr: u64::MAX - 100,
            ..mine
        };
        let e = check_match(&p, &mine, &theirs).unwrap_err().to_string();
        assert!(e.contains("past the end of the address space"), "{e}");
        let theirs = Hello {
            addr: u64::MAX - 8192,
            ..mine
        };
        assert!(check_match(&p, &mine, &theirs).is_ok());
    }
}
