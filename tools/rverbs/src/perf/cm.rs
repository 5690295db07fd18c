//! `rverbs perf write bw -R`: the test connected and coordinated through
//! rdma_cm as perftest's `-R` does (perftest 4.5), so that either side
//! may be perftest's `ib_write_bw -R`.
//!
//! Both connections go to the same port: first the comm connection
//! ([`PtComm`]: versions, page and cache line sizes, MTU, a barrier), then
//! the data connection (the server listens for it only once it has the
//! client's barrier, and answers the barrier after that), another barrier,
//! the keys three times, the client's run, the end-of-test message, the
//! five figures (the server prints the client's) and the close message.
//! The client then disconnects the data connection.

use std::io::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs::cm::{ConnParams, Connection, Listener, Resolved};
use rverbs::{AccessFlags, Cq, Mr, Mtu, Qp, QpCap, QpInitAttr, QpType};

use super::bench::{Bench, Peer, Res, Silent};
use super::plan::Plan;
use super::ptcomm::{self, BwFigures, PtComm, PtDest, CACHE_LINE, RESOLVE_TIMEOUT, STEP_TIMEOUT};
use super::report::{json_doc, print_banner_via, rusage};
use super::setup::{create_parts, open_at, Opened, Parts};
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

/// The data connection's parameters: no READs (WRITE), perftest's retry
/// count for both retry counters.
fn data_params(p: &Plan) -> ConnParams {
    ConnParams {
        private_data: Vec::new(),
        responder_resources: 0,
        initiator_depth: 0,
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

/// Our dest message: the data QP and where the peer may write.
fn my_dest(o: &Opened, qp: &Qp, mr: &Mr, vaddr: u64) -> PtDest {
    PtDest {
        lid: u32::from(o.port.lid),
        out_reads: 1,
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

fn print_dest(which: &str, d: &PtDest) {
    println!(
        " {which} address: LID {:04x} QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x}",
        d.lid, d.qpn, d.psn, d.rkey, d.vaddr
    );
    if d.gid_index >= 0 {
        println!(" GID: {}", gid_text(&d.gid));
    }
}

/// D1 (print ours), D2 (print theirs), D3: the peer's dest.
fn keys(comm: &mut PtComm, me: &PtDest, json: bool) -> Result<PtDest> {
    comm.hand_shake(me, "the keys")?;
    if !json {
        print_dest("local", me);
    }
    let peer = comm.hand_shake(me, "the keys")?;
    if !json {
        print_dest("remote", &peer);
        println!("{RULE}");
    }
    comm.hand_shake(me, "the barrier before the test")?;
    Ok(peer)
}

/// The client's data side, connected.
struct DataClient {
    o: Opened,
    conn: Connection,
    scq: Cq,
    rcq: Cq,
    mr: Mr,
    half: usize,
}

/// Resolves, creates the QP and its buffer on the device the connection
/// manager chose, connects; a refusal (the server not listening yet) is
/// retried with everything created anew.
fn connect_data(p: &mut Plan, dst: SocketAddr) -> Result<DataClient> {
    let until = Instant::now() + DATA_PATIENCE;
    loop {
        let id = Resolved::resolve(dst, RESOLVE_TIMEOUT)
            .with_context(|| format!("resolving {dst} for the data connection"))?;
        let o = open_at(id.device(), id.port_num())?;
        check_dev(p, &o)?;
        p.fit_device(&o.attr, &o.port)?;
        let Parts {
            mr,
            half,
            scq,
            rcq,
            qp,
        } = create_parts(p, &o, AccessFlags::REMOTE_WRITE)?;
        match id.connect(qp, &data_params(p)) {
            Ok(conn) => {
                return Ok(DataClient {
                    o,
                    conn,
                    scq,
                    rcq,
                    mr,
                    half,
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
    let DataClient {
        o,
        mut conn,
        scq,
        rcq,
        mr,
        half,
    } = connect_data(p, dst)?;
    comm.hand_shake(&PtDest::default(), "the barrier after the data connection")?;
    let p = &*p;
    if !p.json {
        print_banner_via(p, &o, mtu, None, true);
    }
    let me = my_dest(&o, conn.qp(), &mr, mr.addr() + half as u64);
    let peer = keys(&mut comm, &me, p.json)?;
    // perftest's server announces no length: it exposes at least the
    // size and the cycle buffer (the larger page size) at vaddr.
    let room = p.max_size().max(cycle);
    let peer_buf = Peer::remote(peer.vaddr, peer.rkey, room)?;
    let size = p.sizes.first().copied().unwrap_or(0) as usize;
    if !p.json {
        println!("{}", p.fmt.header(false, false));
    }
    let report = {
        let mut res = Res {
            qp: conn.qp_mut(),
            scq,
            rcq,
            mr,
            half,
            inline_src: vec![0x5a; p.inline as usize],
        };
        let mut bench = Bench::new(p.bench_params(true, " -R"), peer_buf);
        bench.prepare(&mut res, size)?;
        let (u0, s0) = rusage();
        let mut r = bench.run(&mut res, &mut Silent, size, Instant::now())?;
        let (u1, s1) = rusage();
        r.cpu_user = u1 - u0;
        r.cpu_sys = s1 - s0;
        r
    };
    if !p.json {
        println!("{}", p.fmt.row(&report));
        println!("{RULE}");
        let _ = std::io::stdout().flush();
    }
    let (_, unit) = p.fmt.bw_unit();
    comm.hand_shake(&me, "the end of the test")?;
    comm.bw_reports(&BwFigures::from_report(&report, unit))?;
    comm.hand_shake(&me, "the close")?;
    // perftest 4.5: the client disconnects the data connection and waits
    // for the server's side of it.
    if !ptcomm::disconnect_and_wait(&mut conn, CLIENT_DISCONNECT_WAIT)? {
        eprintln!(
            "note: the server did not complete the data disconnection within {}s",
            CLIENT_DISCONNECT_WAIT.as_secs()
        );
    }
    drop(conn);
    drop(comm);
    if p.json {
        println!("{}", json_doc(p, &o, true, &[report]));
    }
    Ok(())
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
    let p = &*p;
    // perftest's client WRITEs within max(size, cycle buffer) bytes from
    // the address we announce.
    let page = page_size();
    let room = (p.max_size().max(cycle).max(4096) as usize).div_ceil(page) * page;
    let pd = o.ctx.alloc_pd().context("couldn't allocate a PD")?;
    let mr = pd
        .alloc_mr(room, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .with_context(|| format!("couldn't register a {room}-byte buffer"))?;
    let cq = o.ctx.create_cq(2).context("couldn't create the CQ")?;
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }))
        .context("couldn't create the QP")?;
    let mut conn = req
        .accept(qp, &data_params(p))
        .context("accepting the data connection (rdma_accept)")?;
    comm.hand_shake(&PtDest::default(), "the barrier after the data connection")?;
    if !p.json {
        print_banner_via(p, &o, mtu, None, true);
    }
    let me = my_dest(&o, conn.qp(), &mr, mr.addr());
    keys(&mut comm, &me, p.json)?;
    if !p.json {
        println!("{}", p.fmt.header(false, false));
        let _ = std::io::stdout().flush();
    }
    // The client runs; its end-of-test message ends our wait (bounded by
    // --timeout; a closed comm or data connection ends it too).
    let b = comm.recv(p.limit, Some(&mut conn), "the end of the client's test")?;
    PtDest::decode(&b).context("the end of the client's test")?;
    comm.send(&me.encode(), STEP_TIMEOUT)
        .context("answering the end of the test")?;
    let (_, unit) = p.fmt.bw_unit();
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
    comm.hand_shake(&me, "the close")?;
    if !p.json {
        println!("{RULE}");
        let _ = std::io::stdout().flush();
    }
    // perftest 4.5's client disconnects; answering with our own
    // disconnection is fine either way.
    let _ = ptcomm::disconnect_and_wait(&mut conn, SERVER_DISCONNECT_WAIT);
    drop(conn);
    drop(comm);
    if p.json {
        println!("{}", json_doc(p, &o, false, &[report]));
    }
    Ok(())
}
