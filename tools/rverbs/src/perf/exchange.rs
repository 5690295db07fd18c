//! perftest 4.5's exchange between the two sides of a test, over either
//! of its channels ([`Channel`]): TCP (the default, [`super::pttcp`]) or
//! the `-R` comm connection ([`super::ptcomm`]). The messages are the same
//! on both ([`super::ptmsg`]), so are the steps and their order, which
//! perftest's `ib_<verb>_<bw|lat>` mains take whatever the channel.
//!
//! First ([`preamble`]) the versions (ours carries our test, so that two
//! `rverbs perf` refuse different tests), page and cache line sizes and
//! MTU codes. Then ([`run`]) the keys: twice, or once for WRITE, READ
//! and atomic bandwidth, the peer's keys once more; without `-R` the QP
//! is connected from them (perftest's `ctx_connect`). A barrier once the
//! receives (SEND) are posted, then per test ([`Flow`]): WRITE, READ and
//! atomic bandwidth: the client's run, the end-of-test message, the five
//! figures (the server prints the client's), the close message; SEND
//! bandwidth: both run (the server receives) and the close message; SEND
//! latency: the ping-pong and the close message; WRITE latency: the
//! ping-pong (the server writes first), nothing after it; READ and atomic
//! latency: the client's run and the close message. Over TCP the close
//! message is followed by `done` (perftest's `ctx_close_connection`);
//! with `-R` the client then disconnects the data connection.
//!
//! perftest's sweep (`-a`) runs every size where a lone size runs: the
//! SEND tests post their receives and pass a barrier before each size
//! (`send bw` one more after it), the others go on to the next size
//! without a word (WRITE latency clears the polled byte of every size
//! before the first barrier), and the bandwidth figures sent to the server
//! are the last size's. With `-D` each side stops on its own clock
//! (perftest's alarm): a waiting receiver or ping-pong side gives up its
//! wait when its time is up, as nothing on the wire says that the run is
//! over.
//!
//! Every step waits at most [`STEP_TIMEOUT`]; a server that does not run
//! waits at most `--timeout` (and `-D`'s seconds) for the client's test to
//! end, as nothing comes meanwhile.

use std::io::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rverbs::{AccessFlags, ConnectOpts, Cq, Endpoint, Gid, Mr, Mtu, Qp};
use rverbs_cm::Connection;

use super::args::{Kind, Verb};
use super::bench::{Bench, Peer, Res};
use super::plan::Plan;
use super::ptmsg::{
    int_msg, mtu_msg, parse_int, parse_mtu_msg, parse_version, version_msg, BwFigures, PtDest,
    TestDesc, CACHE_LINE, MIN_PEER_VERSION, VERSION_LEN,
};
use super::report::{json_doc, print_banner, print_dest, rusage};
use super::setup::Opened;
use super::stats::{Report, RULE};
use crate::common::{page_size, random_psn};

/// The longest wait of any one step (connecting, one message).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest page ("cycle buffer") size accepted from the peer.
const MAX_CYCLE: u64 = 1 << 24;

/// One of perftest's channels: messages each way, strictly alternating
/// (the client sends first, the server answers), each sent whole.
pub(super) trait Channel {
    /// Whether this is the client side (which sends first).
    fn is_client(&self) -> bool;
    /// Sends one message (`what` names it in errors).
    fn send_msg(&mut self, msg: &[u8], what: &str) -> Result<()>;
    /// Receives the peer's next message, which must be `len` bytes.
    fn recv_msg(&mut self, len: usize, what: &str) -> Result<Vec<u8>>;
    /// Sends our keys in this channel's form.
    fn send_dest(&mut self, d: &PtDest, what: &str) -> Result<()>;
    /// Receives the peer's keys, waiting at most `limit` (`None`: no
    /// limit); `data`: an rdma_cm data connection whose disconnection
    /// also ends the wait.
    fn recv_dest(
        &mut self,
        limit: Option<Duration>,
        data: Option<&mut Connection>,
        what: &str,
    ) -> Result<PtDest>;
    /// What perftest's `ctx_close_connection` does after its hand shake
    /// on this channel (TCP: `done`, then the socket is closed). Best
    /// effort: the test is over.
    fn after_close(&mut self);

    /// perftest's `ctx_xchg_data`: the client sends `mine` and receives,
    /// the server receives and answers; the peer's message has our length.
    fn xchg(&mut self, mine: &[u8], what: &str) -> Result<Vec<u8>> {
        if self.is_client() {
            self.send_msg(mine, what)?;
            self.recv_msg(mine.len(), what)
        } else {
            let t = self.recv_msg(mine.len(), what)?;
            self.send_msg(mine, what)?;
            Ok(t)
        }
    }

    /// perftest's `ctx_hand_shake`: exchanges keys (the barriers send all
    /// zeros on `-R`, the same keys again over TCP).
    fn hand_shake(&mut self, mine: &PtDest, what: &str) -> Result<PtDest> {
        if self.is_client() {
            self.send_dest(mine, what)?;
            self.recv_dest(Some(STEP_TIMEOUT), None, what)
        } else {
            let t = self.recv_dest(Some(STEP_TIMEOUT), None, what)?;
            self.send_dest(mine, what)?;
            Ok(t)
        }
    }

    /// perftest's `ctx_close_connection`: a hand shake, then
    /// [`Channel::after_close`].
    fn close_connection(&mut self, mine: &PtDest) -> Result<()> {
        self.hand_shake(mine, "the close")?;
        self.after_close();
        Ok(())
    }

    /// perftest's `xchg_bw_reports`: five 8-byte exchanges; the peer's
    /// figures.
    fn bw_reports(&mut self, mine: &BwFigures) -> Result<BwFigures> {
        let mut theirs = [[0u8; 8]; 5];
        for (i, m) in mine.encode().iter().enumerate() {
            let b = self.xchg(m, "the results")?;
            theirs[i].copy_from_slice(&b);
        }
        Ok(BwFigures::decode(&theirs))
    }
}

/// Exchanges versions: refuses a peer older than [`MIN_PEER_VERSION`],
/// and a peer that is `rverbs perf` given another test than `test`.
fn versions(ch: &mut dyn Channel, test: &TestDesc) -> Result<f64> {
    let b = ch.xchg(&version_msg(test), "the version")?;
    let v = parse_version(&b);
    if v < MIN_PEER_VERSION {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        bail!(
            "the peer announces perftest version {:?}: versions older than 5.70 are not supported",
            String::from_utf8_lossy(&b[..end.min(VERSION_LEN)])
        );
    }
    test.check_peer(TestDesc::from_version(&b).as_ref())?;
    Ok(v)
}

/// The versions, page size, cache line size and MTU (ours: `mine`): the
/// largest page size of both sides (perftest's cycle buffer) and the
/// smaller MTU.
pub(super) fn preamble(ch: &mut dyn Channel, mine: Mtu, test: &TestDesc) -> Result<(u64, Mtu)> {
    versions(ch, test)?;
    let page = page_size() as i32;
    let theirs = parse_int(&ch.xchg(&int_msg(page), "the page size")?)?;
    let cycle = i64::from(page.max(theirs)) as u64;
    if cycle > MAX_CYCLE {
        bail!("the peer announced a page size of {theirs} bytes: more than {MAX_CYCLE}");
    }
    parse_int(&ch.xchg(&int_msg(CACHE_LINE), "the cache line size")?)?;
    let mtu = match parse_mtu_msg(&ch.xchg(&mtu_msg(mine), "the MTU")?)? {
        Some(m) if (m as u8) < (mine as u8) => m,
        _ => mine,
    };
    Ok((cycle, mtu))
}

/// The test this plan runs, as the version message tells it.
pub(super) fn test_desc(p: &Plan) -> TestDesc {
    TestDesc {
        verb: p.verb,
        kind: p.kind,
        all: p.all,
        duration: p.timing.is_some(),
        cmp_swap: p.cmp_swap,
        size: p.max_size().min(u64::from(u32::MAX)) as u32,
        count: match p.timing {
            Some(t) => t.total.as_secs().min(u64::from(u32::MAX)) as u32,
            None => p.iters.min(u64::from(u32::MAX)) as u32,
        },
    }
}

/// How a test goes once both sides are connected (perftest 4.5's mains
/// differ per test).
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
pub(super) fn access_of(v: Verb) -> AccessFlags {
    match v {
        Verb::Send => AccessFlags::empty(),
        Verb::Write => AccessFlags::REMOTE_WRITE,
        Verb::Read => AccessFlags::REMOTE_READ,
        Verb::Atomic => AccessFlags::REMOTE_ATOMIC,
    }
}

/// Outstanding READs/atomics (perftest's `out_reads`): `-o`, or the
/// device's limit; `None` for SEND and WRITE.
pub(super) fn outs_of(p: &Plan, o: &Opened) -> Option<u32> {
    matches!(p.verb, Verb::Read | Verb::Atomic).then(|| {
        p.outs
            .unwrap_or(o.attr.max_qp_init_rd_atom.min(o.attr.max_qp_rd_atom))
            .clamp(1, 255)
    })
}

/// The buffer halves' least size: perftest's peer works within its cycle
/// buffer (the larger page size) from the address we announce.
pub(super) fn min_half(p: &Plan, cycle: u64) -> u64 {
    p.max_size().max(cycle).max(4096)
}

/// Our keys: the data QP and the address the peer's WRITEs, READs and
/// atomics use.
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

/// The keys: `before` exchanges (perftest's WRITE, READ and atomic
/// bandwidth tests have one, the others two), ours printed, one more
/// whose answer is the peer's keys (printed, returned).
fn keys(
    ch: &mut dyn Channel,
    me: &PtDest,
    before: usize,
    outs: Option<u32>,
    json: bool,
) -> Result<PtDest> {
    for _ in 0..before {
        ch.hand_shake(me, "the keys")?;
    }
    if !json {
        print_dest("local", me, outs);
    }
    let peer = ch.hand_shake(me, "the keys")?;
    if !json {
        print_dest("remote", &peer, outs);
        println!("{RULE}");
    }
    Ok(peer)
}

/// The barrier before the run; returns when this side was released (the
/// server: when it answers, before the client can start).
fn barrier(ch: &mut dyn Channel, me: &PtDest) -> Result<Instant> {
    const WHAT: &str = "the barrier before the test";
    if ch.is_client() {
        ch.hand_shake(me, WHAT)?;
        return Ok(Instant::now());
    }
    ch.recv_dest(Some(STEP_TIMEOUT), None, WHAT)?;
    let go = Instant::now();
    ch.send_dest(me, WHAT)?;
    Ok(go)
}

/// The data QP: the rdma_cm data connection (`-R`, which owns the QP), or
/// our own QP in INIT, connected from the peer's keys (TCP).
pub(super) enum Link {
    /// `-R`'s data connection.
    Cm(Connection),
    /// A QP in INIT.
    Qp(Qp),
}

impl Link {
    fn qp(&self) -> &Qp {
        match self {
            Link::Cm(c) => c.qp(),
            Link::Qp(q) => q,
        }
    }
    fn qp_mut(&mut self) -> &mut Qp {
        match self {
            Link::Cm(c) => c.qp_mut(),
            Link::Qp(q) => q,
        }
    }
    fn conn(&mut self) -> Option<&mut Connection> {
        match self {
            Link::Cm(c) => Some(c),
            Link::Qp(_) => None,
        }
    }
}

/// One side's data QP and its verbs objects.
pub(super) struct Data {
    /// The device and port.
    pub o: Opened,
    /// The QP.
    pub link: Link,
    /// Send completions.
    pub scq: Cq,
    /// Receive completions.
    pub rcq: Cq,
    /// The buffer: two halves.
    pub mr: Mr,
    /// Offset of the second half (where the peer's messages land).
    pub half: usize,
    /// Outstanding READs/atomics ([`outs_of`]).
    pub outs: Option<u32>,
}

/// perftest's `ctx_connect`: INIT -> RTR -> RTS towards the peer's keys,
/// at `mtu`, with `me.out_reads` READs/atomics accepted and the peer's
/// `out_reads` (at most what the device allows) issued.
fn connect_qp(
    p: &Plan,
    o: &Opened,
    qp: &mut Qp,
    me: &PtDest,
    peer: &PtDest,
    mtu: Mtu,
) -> Result<()> {
    let lid = u16::try_from(peer.lid)
        .map_err(|_| anyhow::anyhow!("the peer sent LID {:#x}: over 16 bits", peer.lid))?;
    let gid = match o.gid_index {
        Some(i) if peer.gid == Gid::ZERO => bail!(
            "the peer sent no GID while this side sends from GID index {i}: \
             give both sides a GID (-x)"
        ),
        Some(_) => peer.gid,
        None => Gid::ZERO,
    };
    let issue_max = o.attr.max_qp_init_rd_atom.clamp(1, 255);
    let opts = ConnectOpts {
        port_num: p.ib_port,
        sgid_index: o.gid_index.unwrap_or(0),
        path_mtu: mtu,
        sq_psn: me.psn,
        sl: p.sl,
        hop_limit: 64,
        max_dest_rd_atomic: me.out_reads.clamp(1, 255) as u8,
        max_rd_atomic: peer.out_reads.clamp(1, issue_max) as u8,
        min_rnr_timer: 12,
        timeout: p.qp_timeout,
        retry_cnt: p.retry_count,
        rnr_retry: 7,
    };
    let remote = Endpoint {
        qpn: peer.qpn,
        psn: peer.psn,
        lid,
        gid,
    };
    qp.to_rtr(&remote, &opts)
        .context("failed to modify QP to RTR")?;
    qp.to_rts(&opts).context("failed to modify QP to RTS")?;
    Ok(())
}

/// The test on the data QP, either side: the keys (and, TCP, connecting
/// the QP), the run (or the wait for the client's), the figures and the
/// close, in perftest 4.5's order for the test; then `on_end` (`-R`: the
/// disconnection of the data connection), then the `--json` document.
pub(super) fn run(
    p: &Plan,
    ch: &mut dyn Channel,
    data: Data,
    cycle: u64,
    mtu: Mtu,
    on_end: impl FnOnce(&mut Link, bool) -> Result<()>,
) -> Result<()> {
    let Data {
        o,
        mut link,
        scq,
        rcq,
        mr,
        half,
        outs,
    } = data;
    let client = ch.is_client();
    let cm = matches!(link, Link::Cm(_));
    let flow = Flow::of(p);
    if !p.json {
        print_banner(p, &o, mtu, outs, cm);
    }
    let me = my_dest(&o, link.qp(), &mr, mr.addr() + half as u64, outs);
    let before = if flow == Flow::OneSidedBw { 1 } else { 2 };
    let peer = keys(ch, &me, before, outs, p.json)?;
    if let Link::Qp(qp) = &mut link {
        connect_qp(p, &o, qp, &me, &peer, mtu)?;
    }
    // perftest announces no length: it exposes at least the size and the
    // cycle buffer (the larger page size) at vaddr.
    let peer_buf = Peer::remote(peer.vaddr, peer.rkey, p.max_size().max(cycle))?;
    let mut params = p.bench_params(client, if cm { " -R" } else { "" });
    // perftest's ib_write_lat: the server writes first.
    params.leads = client != (p.verb == Verb::Write && p.kind == Kind::Lat);
    let mut bench = Bench::new(params, peer_buf);
    let lat = p.kind == Kind::Lat;
    let runs = client || matches!(flow, Flow::SendBw | Flow::PingPong);
    let mut res = Res {
        qp: link.qp_mut(),
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
    let mut go = barrier(ch, &me)?;
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
            go = barrier(ch, &me)?;
        } else if i > 0 {
            go = Instant::now();
        }
        if runs {
            let (u0, s0) = rusage();
            let mut r = bench.run(&mut res, size, go)?;
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
            ch.hand_shake(&me, "the end of a size of the sweep")?;
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
    const CLIENT_END: &str = "the end of the client's test";
    match flow {
        Flow::OneSidedBw if client => {
            if !p.json {
                println!("{RULE}");
                let _ = std::io::stdout().flush();
            }
            ch.hand_shake(&me, "the end of the test")?;
            // perftest sends the figures of the last size (the only
            // size unless -a).
            let r = reports.last().copied().unwrap_or_default();
            ch.bw_reports(&BwFigures::from_report(&r, unit))?;
            ch.close_connection(&me)?;
        }
        Flow::OneSidedBw => {
            // The client runs; its end-of-test message ends our wait
            // (bounded by --timeout; a closed channel or data connection
            // ends it too).
            ch.recv_dest(wait_limit, link.conn(), CLIENT_END)?;
            ch.send_dest(&me, "the end of the test")?;
            let theirs = ch.bw_reports(&BwFigures::default())?;
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
            ch.close_connection(&me)?;
            if !p.json {
                println!("{RULE}");
            }
        }
        Flow::SendBw => {
            if !p.json {
                println!("{RULE}");
            }
            ch.close_connection(&me)?;
        }
        Flow::PingPong => {
            if !p.json {
                println!("{RULE}");
            }
            // ib_send_lat closes with one more message; ib_write_lat ends
            // without.
            if p.verb == Verb::Send {
                ch.close_connection(&me)?;
            }
        }
        Flow::OneSidedLat if client => {
            if !p.json {
                println!("{RULE}");
            }
            ch.close_connection(&me)?;
        }
        Flow::OneSidedLat => {
            // The close, its first half waited for as long as the
            // client's run may take.
            ch.recv_dest(wait_limit, link.conn(), CLIENT_END)?;
            ch.send_dest(&me, "the close")?;
            ch.after_close();
            if !p.json {
                println!("{RULE}");
            }
        }
    }
    let _ = std::io::stdout().flush();
    on_end(&mut link, client)?;
    drop(link);
    if p.json {
        println!("{}", json_doc(p, &o, client, &reports));
    }
    Ok(())
}
