//! `rverbs perf VERB KIND -R`: the test connected through rdma_cm as
//! perftest's `-R` does (perftest 4.5), so that either side may be
//! perftest's `ib_<verb>_<bw|lat> -R`.
//!
//! Both connections go to the same port: first the comm connection
//! ([`PtComm`]: versions, page and cache line sizes, MTU, a barrier), then
//! the data connection (the server listens for it only once it has the
//! client's barrier, and answers the barrier after that; READ and atomic
//! tests ask for `-o` READs outstanding both ways), another barrier; the
//! test then goes on as over TCP ([`exchange::run`]), its messages on the
//! comm connection, and ends with the client's disconnection of the data
//! connection.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs_cm::{ConnParams, Listener, Resolved};

use super::exchange::{
    self, access_of, min_half, outs_of, preamble, test_desc, Channel, Data, Link, STEP_TIMEOUT,
};
use super::plan::Plan;
use super::ptcomm::{self, PtComm, RESOLVE_TIMEOUT};
use super::ptmsg::PtDest;
use super::setup::{create_parts_min, open_at, Opened, Parts};

/// How long the client retries a comm connection nobody accepts yet.
const COMM_PATIENCE: Duration = Duration::from_secs(5);
/// How long the client retries a refused data connection (perftest's
/// newer clients: 10 times, 100 ms apart).
const DATA_PATIENCE: Duration = Duration::from_secs(3);
/// How long the client waits for the server's side of the disconnection.
const CLIENT_DISCONNECT_WAIT: Duration = Duration::from_secs(5);
/// How long the server waits for it.
const SERVER_DISCONNECT_WAIT: Duration = Duration::from_secs(2);

/// Runs a `-R` test (the plan was checked by [`super::check_rdma_cm`]).
pub(super) fn run_cm(mut plan: Plan) -> Result<()> {
    if plan.host.is_some() {
        client(&mut plan)
    } else {
        server(&mut plan)
    }
}

/// The data connection's parameters (perftest's): READs and atomics
/// outstanding both ways for READ and atomic tests (none otherwise),
/// perftest's retry count for both retry counters.
fn data_params(p: &Plan, outs: Option<u32>) -> ConnParams {
    let rd = outs.map_or(0, |n| n.min(255) as u8);
    ConnParams {
        private_data: Vec::new(),
        responder_resources: rd,
        initiator_depth: rd,
        retry_count: p.retry_count,
        rnr_retry_count: p.retry_count,
        timeout: STEP_TIMEOUT,
    }
}

/// Checks `-d` against the device the connection manager chose.
fn check_dev(p: &Plan, o: &Opened) -> Result<()> {
    if let Some(d) = &p.dev {
        if *d != o.name {
            bail!(
                "-d {d}: the connection manager routes this connection through {}",
                o.name
            );
        }
    }
    Ok(())
}

/// Resolves, creates the QP and its buffer on the device the connection
/// manager chose, connects; a refusal (the server not listening yet) is
/// retried with everything created anew.
fn connect_data(p: &mut Plan, dst: SocketAddr, cycle: u64) -> Result<Data> {
    let until = Instant::now() + DATA_PATIENCE;
    loop {
        let id = Resolved::resolve(dst, RESOLVE_TIMEOUT)
            .with_context(|| format!("resolving {dst} for the data connection"))?;
        let o = open_at(id.device(), id.port_num())?;
        check_dev(p, &o)?;
        p.fit_device(&o.attr, &o.port)?;
        let outs = outs_of(p, &o);
        let Parts {
            mr,
            half,
            scq,
            rcq,
            qp,
        } = create_parts_min(p, &o, access_of(p.verb), min_half(p, cycle))?;
        match id.connect(qp, &data_params(p, outs)) {
            Ok(conn) => {
                return Ok(Data {
                    o,
                    link: Link::Cm(conn),
                    scq,
                    rcq,
                    mr,
                    half,
                    outs,
                })
            }
            Err(e) if ptcomm::retryable(&e) && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e).context("connecting the data QP (rdma_cm)"),
        }
    }
}

fn client(p: &mut Plan) -> Result<()> {
    let host = p.host.clone().unwrap_or_default();
    let dst = crate::rping::resolve(&host, p.port)?;
    let mut comm = PtComm::connect(dst, p.retry_count, COMM_PATIENCE)?;
    let mine = comm.mtu;
    let (cycle, mtu) = preamble(&mut comm, mine, &test_desc(p))?;
    comm.hand_shake(&PtDest::default(), "the barrier before the data connection")?;
    let data = connect_data(p, dst, cycle)?;
    comm.hand_shake(&PtDest::default(), "the barrier after the data connection")?;
    exchange::run(p, &mut comm, data, cycle, mtu, end_data)
}

fn server(p: &mut Plan) -> Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, p.port));
    let listener =
        Listener::bind(addr, 1).with_context(|| format!("couldn't listen on {addr} (rdma_cm)"))?;
    if !p.json {
        println!();
        println!("************************************");
        println!("* Waiting for client to connect... *");
        println!("************************************");
        let _ = std::io::stdout().flush();
    }
    let req = listener
        .get_request(None)
        .context("waiting for the client (rdma_cm)")?
        .ok_or_else(|| anyhow!("no connection request"))?;
    // Frees the port for the data connection's listener.
    drop(listener);
    let mut comm = PtComm::accept(req, p.retry_count)?;
    let mine = comm.mtu;
    let (cycle, mtu) = preamble(&mut comm, mine, &test_desc(p))?;
    // The barrier before the data connection, split: listen for the data
    // connection before answering, so the client cannot come too early.
    comm.recv_dest(
        Some(STEP_TIMEOUT),
        None,
        "the barrier before the data connection",
    )?;
    let data_listener = Listener::bind(addr, 1)
        .with_context(|| format!("couldn't listen on {addr} for the data connection"))?;
    comm.send_dest(&PtDest::default(), "the barrier before the data connection")?;
    let req = data_listener
        .get_request(Some(STEP_TIMEOUT))
        .context("waiting for the data connection (rdma_cm)")?
        .ok_or_else(|| {
            anyhow!(
                "the client's data connection did not come within {}s",
                STEP_TIMEOUT.as_secs()
            )
        })?;
    drop(data_listener);
    let o = open_at(req.device(), req.port_num())?;
    check_dev(p, &o)?;
    p.fit_device(&o.attr, &o.port)?;
    let outs = outs_of(p, &o);
    let Parts {
        mr,
        half,
        scq,
        rcq,
        qp,
    } = create_parts_min(p, &o, access_of(p.verb), min_half(p, cycle))?;
    let conn = req
        .accept(qp, &data_params(p, outs))
        .context("accepting the data connection (rdma_accept)")?;
    comm.hand_shake(&PtDest::default(), "the barrier after the data connection")?;
    let data = Data {
        o,
        link: Link::Cm(conn),
        scq,
        rcq,
        mr,
        half,
        outs,
    };
    exchange::run(p, &mut comm, data, cycle, mtu, end_data)
}

/// perftest 4.5's end of a `-R` test: the client disconnects the data
/// connection and waits for the server's side of it; the server
/// answering with its own disconnection is fine either way.
fn end_data(link: &mut Link, client: bool) -> Result<()> {
    let Link::Cm(conn) = link else {
        return Ok(());
    };
    if client {
        if !ptcomm::disconnect_and_wait(conn, CLIENT_DISCONNECT_WAIT)? {
            eprintln!(
                "note: the server did not complete the data disconnection within {}s",
                CLIENT_DISCONNECT_WAIT.as_secs()
            );
        }
    } else {
        let _ = ptcomm::disconnect_and_wait(conn, SERVER_DISCONNECT_WAIT);
    }
    Ok(())
}
