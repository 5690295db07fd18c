//! `rverbs`: command-line tools over the pure-Rust verbs stack.
//!
//! `rverbs rc-pingpong|uc-pingpong|ud-pingpong|srq-pingpong [OPTIONS] [HOST]`
//! are drop-in counterparts of rdma-core's `ibv_*_pingpong` examples: the
//! same options, the same out-of-band TCP exchange (so either side may be
//! theirs) and the same summary lines. Without HOST the tool is the
//! server; with it, the client. Any error, error completion or (with `-c`)
//! data mismatch exits with status 1.

use std::process::ExitCode;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use rverbs::{Mtu, QpType};

use rverbs_cli::common::{num, parse_mtu, Common};
use rverbs_cli::{
    connected, devinfo, inspect, mckey, perf, rcopy, rping, rstream, srq, ucmatose, ud, udaddy,
};

#[derive(Parser)]
#[command(
    name = "rverbs",
    about = "RDMA verbs tools in pure Rust (no libibverbs)",
    version
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

/// Options of `rc-pingpong` beyond the common ones.
#[derive(Debug, clap::Args)]
struct RcArgs {
    #[command(flatten)]
    common: Common,
    /// Size of the messages exchanged.
    #[arg(short = 's', long = "size", default_value = "4096", value_parser = num::<u32>)]
    size: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = parse_mtu)]
    mtu: Mtu,
    /// On-demand paging: not supported (refused).
    #[arg(short = 'o', long = "odp")]
    odp: bool,
    /// Implicit on-demand paging: not supported (refused).
    #[arg(short = 'O', long = "iodp")]
    iodp: bool,
    /// Prefetch an ODP MR: not supported (refused).
    #[arg(short = 'P', long = "prefetch")]
    prefetch: bool,
    /// Completion timestamps: not supported (refused).
    #[arg(short = 't', long = "ts")]
    ts: bool,
    /// Device memory: not supported (refused).
    #[arg(short = 'j', long = "dm")]
    dm: bool,
    /// The "new post send" API: accepted; rverbs has one send path.
    #[arg(short = 'N', long = "new_send")]
    new_send: bool,
    /// Unprotected memory on confidential guests: not supported (refused).
    #[arg(short = 'U', long = "allow-cc-unprotected")]
    cc_unprotected: bool,
}

/// Options of `uc-pingpong` beyond the common ones.
#[derive(Debug, clap::Args)]
struct UcArgs {
    #[command(flatten)]
    common: Common,
    /// Size of the messages exchanged.
    #[arg(short = 's', long = "size", default_value = "4096", value_parser = num::<u32>)]
    size: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = parse_mtu)]
    mtu: Mtu,
}

/// Options of `ud-pingpong` beyond the common ones.
#[derive(Debug, clap::Args)]
struct UdArgs {
    #[command(flatten)]
    common: Common,
    /// Size of the messages exchanged (at most the port's active MTU).
    #[arg(short = 's', long = "size", default_value = "1024", value_parser = num::<u32>)]
    size: u32,
}

/// Options of `srq-pingpong` beyond the common ones.
#[derive(Debug, clap::Args)]
struct SrqArgs {
    #[command(flatten)]
    common: Common,
    /// Size of the messages exchanged.
    #[arg(short = 's', long = "size", default_value = "4096", value_parser = num::<u32>)]
    size: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = parse_mtu)]
    mtu: Mtu,
    /// Number of QPs sharing the receive queue (below 256).
    #[arg(short = 'q', long = "num-qp", default_value = "16", value_parser = num::<u32>)]
    num_qp: u32,
    /// On-demand paging: not supported (refused).
    #[arg(short = 'o', long = "odp")]
    odp: bool,
}

#[derive(Subcommand)]
enum Cmd {
    /// Ping-pong SENDs over a reliable connected QP (ibv_rc_pingpong).
    #[command(name = "rc-pingpong")]
    Rc(RcArgs),
    /// Ping-pong SENDs over an unreliable connected QP (ibv_uc_pingpong).
    #[command(name = "uc-pingpong")]
    Uc(UcArgs),
    /// Ping-pong SENDs over unreliable datagram QPs (ibv_ud_pingpong).
    #[command(name = "ud-pingpong")]
    Ud(UdArgs),
    /// Ping-pong SENDs over several RC QPs sharing one receive queue
    /// (ibv_srq_pingpong).
    #[command(name = "srq-pingpong")]
    Srq(SrqArgs),
    /// List the RDMA devices and their node GUIDs (ibv_devices).
    #[command(name = "devices")]
    Devices,
    /// Print device and port attributes (ibv_devinfo).
    #[command(name = "devinfo")]
    Devinfo(devinfo::DevinfoArgs),
    /// Show the host's RDMA resources, or look into one process's queues.
    #[command(name = "inspect")]
    Inspect(inspect::InspectArgs),
    /// perftest-style bandwidth and latency benchmarks over RC
    /// (ib_{send,write,read,atomic}_{bw,lat}).
    #[command(name = "perf")]
    Perf(perf::PerfArgs),
    /// Ping over an rdma_cm connection with RDMA READ and WRITE, wire
    /// compatible with rdma-core's rping.
    #[command(name = "rping")]
    Rping(rping::RpingArgs),
    /// Datagrams over UD QPs found through rdma_cm's UDP port space,
    /// interoperable with rdma-core's udaddy.
    #[command(name = "udaddy")]
    Udaddy(udaddy::UdaddyArgs),
    /// Multicast datagrams to a group joined through rdma_cm,
    /// interoperable with rdma-core's mckey.
    #[command(name = "mckey")]
    Mckey(mckey::MckeyArgs),
    /// Many RC connections at once through rdma_cm, messages both ways on
    /// each, interoperable with rdma-core's cmatose (ucmatose).
    #[command(name = "ucmatose")]
    Ucmatose(ucmatose::UcmatoseArgs),
    /// Byte streams over rsockets' protocol: latency and bandwidth
    /// series, interoperable with rdma-core's rstream.
    #[command(name = "rstream")]
    Rstream(rstream::RstreamArgs),
    /// Direct placement over rsockets' protocol (`iomap`/`iowrite`: the
    /// peer's memory written by offset), interoperable with rdma-core's
    /// riostream.
    #[command(name = "riostream")]
    Riostream(rstream::RstreamArgs),
    /// Copies a file over rsockets' protocol, interoperable with
    /// rdma-core's rcopy.
    #[command(name = "rcopy")]
    Rcopy(rcopy::RcopyArgs),
}

fn refuse(flags: &[(bool, &str)]) -> Result<()> {
    for (set, what) in flags {
        if *set {
            bail!("{what} is not supported by rverbs");
        }
    }
    Ok(())
}

fn run(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Rc(a) => {
            refuse(&[
                (a.odp, "-o/--odp (on-demand paging)"),
                (a.iodp, "-O/--iodp (implicit on-demand paging)"),
                (a.prefetch, "-P/--prefetch (ODP prefetch)"),
                (a.ts, "-t/--ts (completion timestamps)"),
                (a.dm, "-j/--dm (device memory)"),
                (a.cc_unprotected, "-U/--allow-cc-unprotected"),
            ])?;
            let _ = a.new_send;
            connected::run(
                &a.common,
                &connected::Opts {
                    qp_type: QpType::Rc,
                    size: a.size,
                    mtu: a.mtu,
                },
            )
        }
        Cmd::Uc(a) => connected::run(
            &a.common,
            &connected::Opts {
                qp_type: QpType::Uc,
                size: a.size,
                mtu: a.mtu,
            },
        ),
        Cmd::Ud(a) => ud::run(&a.common, a.size),
        Cmd::Srq(a) => {
            refuse(&[(a.odp, "-o/--odp (on-demand paging)")])?;
            srq::run(&a.common, a.size, a.mtu, a.num_qp)
        }
        Cmd::Devices => devinfo::run_devices(),
        Cmd::Devinfo(a) => devinfo::run_devinfo(&a),
        Cmd::Inspect(a) => inspect::run(&a),
        Cmd::Perf(a) => perf::run(&a),
        Cmd::Rping(a) => rping::run(&a),
        Cmd::Udaddy(a) => udaddy::run(&a),
        Cmd::Mckey(a) => mckey::run(&a),
        Cmd::Ucmatose(a) => ucmatose::run(&a),
        Cmd::Rstream(a) => rstream::run(&a),
        Cmd::Riostream(a) => rstream::run_io(&a),
        Cmd::Rcopy(a) => rcopy::run(&a),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        // rping prints its own failure line (`rping client failed: ...`)
        // and exits 22 for a command line it refuses, as rdma-core's.
        Cmd::Rping(a) => rping::exit_code(&a),
        cmd => match run(cmd) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rverbs: error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cmd, clap::Error> {
        Cli::try_parse_from(std::iter::once("rverbs").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    #[test]
    fn rc_takes_the_rdma_core_options() {
        let Cmd::Rc(a) = parse(&[
            "rc-pingpong",
            "-p",
            "19000",
            "-d",
            "rxe0",
            "-i",
            "1",
            "-s",
            "0x40",
            "-m",
            "2048",
            "-r",
            "100",
            "-n",
            "5",
            "-l",
            "3",
            "-e",
            "-g",
            "1",
            "--chk",
            "10.0.0.1",
        ])
        .unwrap() else {
            panic!("not rc");
        };
        let c = &a.common;
        assert_eq!(
            (c.port, c.dev.as_deref(), c.ib_port, a.size, a.mtu),
            (19000, Some("rxe0"), 1, 64, Mtu::Mtu2048)
        );
        assert_eq!((c.rx_depth, c.iters, c.sl, c.gid_idx), (100, 5, 3, Some(1)));
        assert!(c.events && c.chk);
        assert_eq!(c.host.as_deref(), Some("10.0.0.1"));
    }

    #[test]
    fn defaults_follow_the_rdma_core_tools() {
        let Cmd::Rc(a) = parse(&["rc-pingpong"]).unwrap() else {
            panic!("not rc");
        };
        let c = &a.common;
        assert_eq!(
            (c.port, c.ib_port, a.size, a.mtu),
            (18515, 1, 4096, Mtu::Mtu1024)
        );
        assert_eq!((c.rx_depth, c.iters, c.sl, c.gid_idx), (500, 1000, 0, None));
        assert!(!c.events && !c.chk && c.host.is_none() && c.dev.is_none());
        let Cmd::Ud(u) = parse(&["ud-pingpong"]).unwrap() else {
            panic!("not ud");
        };
        assert_eq!(u.size, 1024);
        let Cmd::Srq(s) = parse(&["srq-pingpong", "-q", "4", "-c"]).unwrap() else {
            panic!("not srq");
        };
        assert_eq!((s.num_qp, s.size), (4, 4096));
        assert!(s.common.chk);
    }

    #[test]
    fn bad_options_are_refused() {
        for bad in [
            &["rc-pingpong", "-m", "1000"][..],
            &["rc-pingpong", "-p", "65536"],
            &["rc-pingpong", "-q", "2"],
            &["ud-pingpong", "-m", "1024"],
            &["uc-pingpong", "-o"],
            &["rc-pingpong", "-n", "ten"],
            &["rc-pingpong", "a", "b"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        let Cmd::Rc(a) = parse(&["rc-pingpong", "-o"]).unwrap() else {
            panic!("not rc");
        };
        let err = run(Cmd::Rc(a)).unwrap_err().to_string();
        assert!(
            err.contains("--odp") && err.contains("not supported"),
            "{err}"
        );
    }

    #[test]
    fn out_of_range_values_fail_before_touching_a_device() {
        for args in [
            &["rc-pingpong", "-s", "0"][..],
            &["rc-pingpong", "-n", "0"],
            &["rc-pingpong", "-r", "0"],
            &["rc-pingpong", "-i", "0"],
            &["uc-pingpong", "-l", "16"],
            &["srq-pingpong", "-q", "600", "-r", "1000"],
            &["srq-pingpong", "-q", "20", "-r", "10"],
            &["srq-pingpong", "-q", "0"],
        ] {
            let cmd = parse(args).unwrap();
            let err = format!("{:#}", run(cmd).unwrap_err());
            assert!(
                err.contains("must") || err.contains("too small"),
                "{args:?}: {err}"
            );
        }
    }

    #[test]
    fn an_rx_depth_the_cq_cannot_hold_is_refused() {
        // The CQ holds rx_depth + 1 (rx_depth + num_qp for srq) entries:
        // 2^32 - 1 used to overflow (a panic) once a device was open.
        for args in [
            &["rc-pingpong", "-r", "4294967295"][..],
            &["uc-pingpong", "-r", "0xffffffff"],
            &["ud-pingpong", "-r", "4294967295"],
            &["srq-pingpong", "-q", "4", "-r", "4294967293"],
        ] {
            let cmd = parse(args).unwrap();
            let err = format!("{:#}", run(cmd).unwrap_err());
            assert!(
                err.contains("-r/--rx-depth") && err.contains("too large"),
                "{args:?}: {err}"
            );
        }
    }
}
