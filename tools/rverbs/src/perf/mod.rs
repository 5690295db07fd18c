//! `rverbs perf {send,write,read,atomic} {bw,lat}`: perftest-style
//! bandwidth and latency benchmarks over an RC QP, with perftest's main
//! options (same letters), its result columns and its exchange between
//! the sides, so that either side may be perftest's
//! `ib_<verb>_<bw|lat>` (perftest 4.5, as Debian 12 ships it), built on
//! the public `verbs` API only.
//!
//! The options are parsed in `args` and validated in `plan` ([`Plan::new`]
//! needs no device, then [`Plan::fit_device`]); [`run`] opens the device,
//! creates the QP and buffer (`setup`), and goes through perftest's
//! exchange (`exchange`: versions, sizes, MTU, keys, barriers, reports;
//! the messages in [`ptmsg`]) over perftest's TCP channel ([`pttcp`], on
//! perftest's port 18515 unless `-p`), connecting the QP from the peer's
//! keys, and runs every size: the data path is in `bench`, the figures
//! and their printing in `stats` and `report`. With `-R` the exchange
//! goes over an rdma_cm comm connection and the data QP is connected
//! through rdma_cm, as perftest's `-R` does ([`ptcomm`], `cm`).

mod args;
mod bench;
mod clock;
mod cm;
mod exchange;
mod plan;
pub mod ptcomm;
pub mod ptmsg;
pub mod pttcp;
mod report;
mod setup;
mod stats;

use std::io::Write as _;

use anyhow::{bail, Context as _, Result};
use rverbs::Mtu;

use exchange::{access_of, min_half, outs_of, preamble, test_desc, Data, Link};
use pttcp::PtTcp;
use setup::{create_parts_min, open, Parts};

pub use args::{Kind, PerfArgs, Verb};
pub use plan::{Plan, Timing};
pub use stats::Report;

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
    let p = &plan;
    let access = access_of(p.verb);
    // The QP and buffer before any connection, so that what the device
    // refuses (-I) is said at once; made again below if the peer's pages
    // are larger than ours.
    let page = crate::common::page_size() as u64;
    let mut parts = create_parts_min(p, &o, access, min_half(p, page))?;
    let gid = o.gid_index.is_some();
    let mut ch = match &p.host {
        Some(h) => PtTcp::connect(h, p.port, p.limit, gid)?,
        None => {
            let l = crate::wire::listen(p.port)?;
            if !p.json {
                println!();
                println!("************************************");
                println!("* Waiting for client to connect... *");
                println!("************************************");
                let _ = std::io::stdout().flush();
            }
            PtTcp::accept(l, gid)?
        }
    };
    let mine = p.mtu.or(o.port.active_mtu()).unwrap_or(Mtu::Mtu1024);
    let (cycle, mtu) = preamble(&mut ch, mine, &test_desc(p))?;
    if min_half(p, cycle) > parts.half as u64 {
        drop(parts);
        parts = create_parts_min(p, &o, access, min_half(p, cycle))?;
    }
    let Parts {
        mr,
        half,
        scq,
        rcq,
        mut qp,
    } = parts;
    qp.to_init_at(p.ib_port, 0, access)
        .context("failed to modify QP to INIT")?;
    let outs = outs_of(p, &o);
    let data = Data {
        o,
        link: Link::Qp(qp),
        scq,
        rcq,
        mr,
        half,
        outs,
    };
    exchange::run(p, &mut ch, data, cycle, mtu, |_, _| Ok(()))
}
