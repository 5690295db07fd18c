//! `rverbs perf VERB KIND -R`: the test connected and coordinated through
//! rdma_cm as perftest's `-R` does (perftest 4.5), so that either side
//! may be perftest's `ib_<verb>_<bw|lat> -R`.
//!
//! Both connections go to the same port: first the comm connection
//! ([`PtComm`]: versions, page and cache line sizes, MTU, a barrier), then
//! the data connection (the server listens for it only once it has the
//! client's barrier, and answers the barrier after that; READ and atomic
//! tests ask for `-o` READs outstanding both ways), another barrier, the
//! keys (twice, or once for WRITE, READ and atomic bandwidth), the peer's
//! keys, a barrier once the receives (SEND) are posted, then per test
//! ([`Flow`]): WRITE, READ and atomic bandwidth: the client's run, the
//! end-of-test message, the five figures (the server prints the
//! client's), the close message; SEND bandwidth: both run (the server
//! receives) and the close message; SEND latency:
//! the ping-pong and the close message; WRITE latency: the ping-pong (the
//! server writes first), nothing after it; READ and atomic latency: the
//! client's run and the close message. The client then disconnects the
//! data connection. perftest's sweep (`-a`) runs every size where a
//! lone size runs: the SEND tests post their receives and pass a barrier
//! before each size (`send bw` one more after it), the others go on to
//! the next size without a word (WRITE latency clears the polled byte of
//! every size before the first barrier), and the bandwidth figures sent
//! to the server are the last size's.
//! With `-D` each side stops on its own clock (perftest's alarm): a
//! waiting receiver or ping-pong side gives up its wait when its time is
//! up, as nothing on the wire says that the run is over.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs::cm::{ConnParams, Connection, Listener, Resolved};
use rverbs::{AccessFlags, Cq, Mr, Mtu, Qp};

use super::args::{Kind, Verb};
use super::bench::{Bench, Peer, Res, Silent};
use super::plan::Plan;
use super::ptcomm::{self, BwFigures, PtComm, PtDest, CACHE_LINE, RESOLVE_TIMEOUT, STEP_TIMEOUT};
use super::report::{json_doc, print_banner_via, rusage};
use super::setup::{create_parts_min, open_at, Opened, Parts};
use super::stats::RULE;
use super::wire::Report;
use crate::common::{gid_text, page_size, random_psn};

/// How long the client retries a comm connection nobody accepts yet.
const COMM_PATIENCE: Duration = Duration::from_secs(5);
/// How long the client retries a refused data connection (perftest's
/// newer clients: 10 times, 100 ms apart).
const DATA_PATIENCE: Duration = Duration::from_secs(3);
/// The largest page ("cycle buffer") size accepted from the peer.
const MAX_CYCLE: u64 = 1 << 24;
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

/// How a test goes once both sides have the data connection (perftest
/// 4.5's mains differ per test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// WRITE, READ and atomic bandwidth: the client runs, then sends its
    /// five figures; the server prints them.
    OneSidedBw,
    /// SEND bandwidth: the client sends, the server receives (its
    /// receives posted before the last barrier); each side prints what it
    /// measured.
    SendBw,
    /// SEND and WRITE latency: both sides ping-pong (SEND: the client
    /// starts; WRITE: the server does), each prints its own figures.
    PingPong,
    /// READ and atomic latency: the client runs and prints; the server
    /// waits for its end and prints no figures.
    OneSidedLat,
}

impl Flow {
    fn of(p: &Plan) -> Flow {
        match (p.verb, p.kind) {
            (Verb::Send, Kind::Bw) => Flow::SendBw,
            (_, Kind::Bw) => Flow::OneSidedBw,
            (Verb::Send | Verb::Write, Kind::Lat) => Flow::PingPong,
            (Verb::Read | Verb::Atomic, Kind::Lat) => Flow::OneSidedLat,
        }
    }
}

/// What the peer may do to our buffer in this test.
fn access_of(v: Verb) -> AccessFlags {
    match v {
        Verb::Send => AccessFlags::empty(),
        Verb::Write => AccessFlags::REMOTE_WRITE,
        Verb::Read => AccessFlags::REMOTE_READ,
        Verb::Atomic => AccessFlags::REMOTE_ATOMIC,
    }
}

/// Outstanding READs/atomics (perftest's `out_reads`): `-o`, or the
/// device's limit; `None` for SEND and WRITE.
fn outs_of(p: &Plan, o: &Opened) -> Option<u32> {
    matches!(p.verb, Verb::Read | Verb::Atomic).then(|| {
        p.outs
            .unwrap_or(o.attr.max_qp_init_rd_atom.min(o.attr.max_qp_rd_atom))
            .clamp(1, 255)
    })
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

/// Versions, page size, cache line size and MTU: the largest page size of
/// both sides (perftest's cycle buffer) and the smaller MTU.
fn preamble(comm: &mut PtComm) -> Result<(u64, Mtu)> {
    comm.versions()?;
    let mine = page_size() as i32;
    let theirs = comm.xchg_int(mine, "the page size")?;
    let cycle = i64::from(mine.max(theirs)) as u64;
    if cycle > MAX_CYCLE {
        bail!("the peer announced a page size of {theirs} bytes: more than {MAX_CYCLE}");
    }
    let _ = comm.xchg_int(CACHE_LINE, "the cache line size")?;
    let own = comm.mtu;
    let mtu = match comm.xchg_mtu(own)? {
        Some(m) if (m as u8) < (own as u8) => m,
        _ => own,
    };
    Ok((cycle, mtu))
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

/// Our dest message: the data QP and the address the peer's WRITEs,
/// READs and atomics use.
fn my_dest(o: &Opened, qp: &Qp, mr: &Mr, vaddr: u64, outs: Option<u32>) -> PtDest {
    PtDest {
        lid: u32::from(o.port.lid),
        out_reads: outs.unwrap_or(1),
        qpn: qp.qp_num(),
        psn: random_psn(),
        rkey: mr.rkey(),
        vaddr,
        tail_markers_vaddr: 0,
        gid: o.gid,
        srqn: 0,
        gid_index: o.gid_index.map_or(-1, i32::from),
    }
}

fn print_dest(which: &str, d: &PtDest, outs: Option<u32>) {
    print!(
        " {which} address: LID {:04x} QPN {:#06x} PSN {:#08x}",
        d.lid, d.qpn, d.psn
    );
    if outs.is_some() {
        print!(" OUT {:#04x}", d.out_reads);
    }
    println!(" RKey {:#08x} VAddr {:#016x}", d.rkey, d.vaddr);
    if d.gid_index >= 0 {
        println!(" GID: {}", gid_text(&d.gid));
    }
}

/// The dests: `before` exchanges (perftest's WRITE, READ and atomic
/// bandwidth tests have one, the others two), ours printed, one more
/// whose answer is the peer's dest (printed, returned).
fn keys(
    comm: &mut PtComm,
    me: &PtDest,
    before: usize,
    outs: Option<u32>,
    json: bool,
) -> Result<PtDest> {
    for _ in 0..before {
        comm.hand_shake(me, "the keys")?;
    }
    if !json {
        print_dest("local", me, outs);
    }
    let peer = comm.hand_shake(me, "the keys")?;
    if !json {
        print_dest("remote", &peer, outs);
        println!("{RULE}");
    }
    Ok(peer)
}

/// The barrier before the run; returns when this side was released (the
/// server: when it answers, before the client can start).
fn barrier(comm: &mut PtComm, me: &PtDest) -> Result<Instant> {
    const WHAT: &str = "the barrier before the test";
    if comm.is_client() {
        comm.hand_shake(me, WHAT)?;
        return Ok(Instant::now());
    }
    let b = comm.recv(Some(STEP_TIMEOUT), None, WHAT)?;
    PtDest::decode(&b).context(WHAT)?;
    let go = Instant::now();
    comm.send(&me.encode(), STEP_TIMEOUT)
        .with_context(|| format!("answering {WHAT}"))?;
    Ok(go)
}

/// One side's data connection and its verbs objects.
struct Data {
    o: Opened,
    conn: Connection,
    scq: Cq,
    rcq: Cq,
    mr: Mr,
    half: usize,
    outs: Option<u32>,
}

/// The buffer halves' least size: perftest's peer works within its cycle
/// buffer (the larger page size) from the address we announce.
fn min_half(p: &Plan, cycle: u64) -> u64 {
    p.max_size().max(cycle).max(4096)
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
                    conn,
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
    let (cycle, mtu) = preamble(&mut comm)?;
    comm.hand_shake(&PtDest::default(), "the barrier before the data connection")?;
    let data = connect_data(p, dst, cycle)?;
    comm.hand_shake(&PtDest::default(), "the barrier after the data connection")?;
    test(p, &mut comm, data, cycle, mtu)
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
    let (cycle, mtu) = preamble(&mut comm)?;
    // The barrier before the data connection, split: listen for the data
    // connection before answering, so the client cannot come too early.
    let b = comm.recv(
        Some(STEP_TIMEOUT),
        None,
        "the barrier before the data connection",
    )?;
    PtDest::decode(&b).context("the barrier before the data connection")?;
    let data_listener = Listener::bind(addr, 1)
        .with_context(|| format!("couldn't listen on {addr} for the data connection"))?;
    comm.send(&PtDest::default().encode(), STEP_TIMEOUT)
        .context("answering the barrier before the data connection")?;
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
        conn,
        scq,
        rcq,
        mr,
        half,
        outs,
    };
    test(p, &mut comm, data, cycle, mtu)
}

/// The test on the connected data QP, either side: the keys, the run (or
/// the wait for the client's), the figures, the close and the
/// disconnection, in perftest 4.5's order for the test.
fn test(p: &Plan, comm: &mut PtComm, data: Data, cycle: u64, mtu: Mtu) -> Result<()> {
    let Data {
        o,
        mut conn,
        scq,
        rcq,
        mr,
        half,
        outs,
    } = data;
    let client = comm.is_client();
    let flow = Flow::of(p);
    if !p.json {
        print_banner_via(p, &o, mtu, outs, true);
    }
    let me = my_dest(&o, conn.qp(), &mr, mr.addr() + half as u64, outs);
    let before = if flow == Flow::OneSidedBw { 1 } else { 2 };
    let peer = keys(comm, &me, before, outs, p.json)?;
    // perftest announces no length: it exposes at least the size and the
    // cycle buffer (the larger page size) at vaddr.
    let peer_buf = Peer::remote(peer.vaddr, peer.rkey, p.max_size().max(cycle))?;
    let mut params = p.bench_params(client, " -R");
    // perftest's ib_write_lat: the server writes first.
    params.leads = client != (p.verb == Verb::Write && p.kind == Kind::Lat);
    // perftest's -D: each side on its own alarm, nothing says the end.
    params.own_clock = true;
    let mut bench = Bench::new(params, peer_buf);
    let lat = p.kind == Kind::Lat;
    let runs = client || matches!(flow, Flow::SendBw | Flow::PingPong);
    let mut res = Res {
        qp: conn.qp_mut(),
        scq,
        rcq,
        mr,
        half,
        inline_src: vec![0x5a; p.inline as usize],
    };
    let sizes: Vec<usize> = p.sizes.iter().map(|&s| s as usize).collect();
    // perftest's sweep (-a) syncs before each size (after its receives
    // are posted) in the SEND tests only; the others go from one size to
    // the next without a word, so the polled bytes of every size of WRITE
    // latency are cleared before the peer may write any.
    let write_lat = p.verb == Verb::Write && lat;
    let sync_per_size = flow == Flow::SendBw || (flow == Flow::PingPong && p.verb == Verb::Send);
    // Receives (SEND tests) and the polled byte (WRITE latency) are ready
    // before the barrier releases the peer.
    if runs {
        let first = if write_lat {
            &sizes[..]
        } else {
            &sizes[..sizes.len().min(1)]
        };
        for &size in first {
            bench.prepare(&mut res, size)?;
        }
    }
    let mut go = barrier(comm, &me)?;
    if !p.json && (runs || flow == Flow::OneSidedBw) {
        println!("{}", p.fmt.header(lat, lat && p.timing.is_some()));
        let _ = std::io::stdout().flush();
    }
    let mut reports: Vec<Report> = Vec::with_capacity(sizes.len() + 1);
    for (i, &size) in sizes.iter().enumerate() {
        if i > 0 && runs && !write_lat {
            bench.prepare(&mut res, size)?;
        }
        if i > 0 && sync_per_size {
            go = barrier(comm, &me)?;
        } else if i > 0 {
            go = Instant::now();
        }
        if runs {
            let (u0, s0) = rusage();
            let mut r = bench.run(&mut res, &mut Silent, size, go)?;
            let (u1, s1) = rusage();
            r.cpu_user = u1 - u0;
            r.cpu_sys = s1 - s0;
            if !p.json {
                println!("{}", p.fmt.row(&r));
                let _ = std::io::stdout().flush();
            }
            reports.push(r);
        }
        // ib_send_bw's sweep syncs after each size too.
        if p.all && flow == Flow::SendBw {
            comm.hand_shake(&me, "the end of a size of the sweep")?;
        }
    }
    // The buffer stays registered (and the CQs alive) until the end: the
    // peer may still be working on it.
    let Res {
        scq: _scq,
        rcq: _rcq,
        mr: _mr,
        ..
    } = res;
    let (_, unit) = p.fmt.bw_unit();
    // A server that does not run waits for the client's run: --timeout,
    // and the whole of a -D run.
    let wait_limit = p
        .limit
        .map(|l| l + p.timing.map_or(Duration::ZERO, |t| t.total));
    match flow {
        Flow::OneSidedBw if client => {
            if !p.json {
                println!("{RULE}");
                let _ = std::io::stdout().flush();
            }
            comm.hand_shake(&me, "the end of the test")?;
            // perftest sends the figures of the last size (the only
            // size unless -a).
            let r = reports.last().copied().unwrap_or_default();
            comm.bw_reports(&BwFigures::from_report(&r, unit))?;
            comm.hand_shake(&me, "the close")?;
        }
        Flow::OneSidedBw => {
            // The client runs; its end-of-test message ends our wait
            // (bounded by --timeout; a closed comm or data connection ends
            // it too).
            let b = comm.recv(wait_limit, Some(&mut conn), "the end of the client's test")?;
            PtDest::decode(&b).context("the end of the client's test")?;
            comm.send(&me.encode(), STEP_TIMEOUT)
                .context("answering the end of the test")?;
            let theirs = comm.bw_reports(&BwFigures::default())?;
            let report: Report = theirs.to_report(unit);
            if !p.json {
                println!("{}", p.fmt.row(&report));
            }
            if report.size != p.max_size() {
                eprintln!(
                    "note: the client reports {}-byte messages, this side was given -s {}",
                    report.size,
                    p.max_size()
                );
            }
            reports.push(report);
            comm.hand_shake(&me, "the close")?;
            if !p.json {
                println!("{RULE}");
            }
        }
        Flow::SendBw => {
            if !p.json {
                println!("{RULE}");
            }
            comm.hand_shake(&me, "the close")?;
        }
        Flow::PingPong => {
            if !p.json {
                println!("{RULE}");
            }
            // ib_send_lat closes with one more message; ib_write_lat ends
            // without.
            if p.verb == Verb::Send {
                comm.hand_shake(&me, "the close")?;
            }
        }
        Flow::OneSidedLat if client => {
            if !p.json {
                println!("{RULE}");
            }
            comm.hand_shake(&me, "the close")?;
        }
        Flow::OneSidedLat => {
            let b = comm.recv(wait_limit, Some(&mut conn), "the end of the client's test")?;
            PtDest::decode(&b).context("the end of the client's test")?;
            comm.send(&me.encode(), STEP_TIMEOUT)
                .context("answering the close")?;
            if !p.json {
                println!("{RULE}");
            }
        }
    }
    let _ = std::io::stdout().flush();
    // perftest 4.5: the client disconnects the data connection and waits
    // for the server's side of it; the server answering with its own
    // disconnection is fine either way.
    if client {
        if !ptcomm::disconnect_and_wait(&mut conn, CLIENT_DISCONNECT_WAIT)? {
            eprintln!(
                "note: the server did not complete the data disconnection within {}s",
                CLIENT_DISCONNECT_WAIT.as_secs()
            );
        }
    } else {
        let _ = ptcomm::disconnect_and_wait(&mut conn, SERVER_DISCONNECT_WAIT);
    }
    drop(conn);
    if p.json {
        println!("{}", json_doc(p, &o, client, &reports));
    }
    Ok(())
}
