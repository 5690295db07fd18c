//! `ucmatose`: a counterpart of rdma-core's `cmatose` (installed by
//! Debian's rdmacm-utils as `ucmatose`), interoperable with it, so that
//! either side may be theirs.
//!
//! Many RC connections at once through the RDMA connection manager
//! ([`rverbs_cm`]): each connection has its own PD, a send and a receive
//! CQ and an RC QP, and posts its `-C` receives of `-S` bytes before it
//! connects (client) or accepts (server). Once every connection is up, the
//! server sends `-C` messages on each, waits for their completions, then
//! for the client's `-C` messages on each; the client waits for the
//! server's messages, then answers with as many. The server then
//! disconnects every connection and waits for each to be torn down; the
//! client waits for the server's disconnect on each and answers it.
//!
//! Unlike cmatose, every wait once a peer is involved is bounded
//! ([`STEP_TIMEOUT`]): a lost message or a vanished peer ends the run with
//! an error instead of a hang (the server waits for its clients as long
//! as it takes, as cmatose does). The client resolves and connects its
//! connections in parallel (at most [`MAX_WORKERS`] at a time). `-V`
//! (ours only: the peer must be `rverbs ucmatose -V` too; cmatose sends
//! unset bytes) fills every message with a pattern and checks what
//! arrives.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use rverbs::{
    AccessFlags, Context, Cq, Device, Mr, PageBuf, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr,
    Wc, WcOpcode,
};
use rverbs_cm::{CmEventKind, CmId, ConnParams, Connection, Listener, Resolved};

use crate::common::num;
use crate::rping::{address_format, resolve_as};

/// cmatose's port (`-p`).
pub const DEFAULT_PORT: u16 = 7471;
/// The longest wait for any one step with a peer (the messages of one
/// connection, its send completions, its disconnect).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// The time allowed for address and route resolution each (cmatose's).
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);
/// The most connections resolved and connected at the same time.
pub const MAX_WORKERS: usize = 16;
/// The most connections (`-c`).
pub const MAX_CONNECTIONS: u32 = 1024;
/// The most messages each way per connection (`-C`): the depth of each
/// queue.
pub const MAX_COUNT: u32 = 4096;
/// The largest message (`-S`).
pub const MAX_SIZE: u32 = 16 << 20;
/// The most bytes of buffers one connection holds with `-V` (a slot per
/// message each way).
const MAX_VALIDATE_BYTES: u64 = 256 << 20;

/// The options of `rverbs ucmatose` (cmatose's own letters).
#[derive(Debug, Clone, clap::Args)]
pub struct UcmatoseArgs {
    /// Be the client of the server at this address (without it: the
    /// server).
    #[arg(short = 's', long = "server", value_name = "ADDR")]
    pub server: Option<String>,
    /// Local address to bind to (server) or connect from (client).
    #[arg(short = 'b', long = "bind", value_name = "ADDR")]
    pub bind: Option<String>,
    /// Address format: name, ip or ipv6 (gid, AF_IB, is not supported).
    #[arg(short = 'f', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,
    /// Port space: only `tcp` (the default) is supported.
    #[arg(short = 'P', long = "port-space", default_value = "tcp")]
    pub port_space: String,
    /// Number of connections (each its own QP).
    #[arg(short = 'c', long = "connections", default_value_t = 1)]
    pub connections: u32,
    /// Messages each way per connection.
    #[arg(short = 'C', long = "count", default_value_t = 10)]
    pub count: u32,
    /// Size of each message (0: no messages, as cmatose).
    #[arg(short = 'S', long = "size", default_value_t = 100)]
    pub size: u32,
    /// Type of service of the client's connections (the server ignores
    /// it, as cmatose does).
    #[arg(short = 't', long = "tos", value_parser = num::<u8>)]
    pub tos: Option<u8>,
    /// The port.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Migrate the ids to a new event channel: not supported (refused).
    #[arg(short = 'm', long = "migrate")]
    pub migrate: bool,
    /// Local ACK timeout of the connections' QPs (0..=31).
    #[arg(short = 'a', long = "ack-timeout", value_parser = num::<u8>)]
    pub ack_timeout: Option<u8>,
    /// Fill messages with a pattern and check what arrives (both sides
    /// must be rverbs).
    #[arg(short = 'V', long = "validate")]
    pub validate: bool,
}

/// The checked options.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Opts {
    conns: u32,
    count: u32,
    size: u32,
    tos: Option<u8>,
    ack_timeout: Option<u8>,
    validate: bool,
    /// Names must be numeric addresses (`-f ip`, `-f ipv6`).
    numeric: bool,
}

impl Opts {
    /// Buffer slots for each direction: one per message with `-V`, else
    /// one shared by all (as cmatose).
    fn slots(&self) -> usize {
        if self.validate {
            self.count as usize
        } else {
            usize::from(self.count > 0)
        }
    }
    /// Where slot `i` of the receive (`send == false`) or send region
    /// starts.
    fn at(&self, send: bool, i: usize) -> usize {
        let i = if self.validate { i } else { 0 };
        (usize::from(send) * self.slots() + i) * self.size as usize
    }
    /// The depth of each queue and CQ.
    fn depth(&self) -> u32 {
        self.count.max(1)
    }
}

/// Checks the command line; refuses what is not supported, naming it.
fn check(a: &UcmatoseArgs) -> Result<Opts> {
    if a.port_space.len() >= 2 && a.port_space[..2].eq_ignore_ascii_case("ib") {
        bail!("-P ib: the IB port space is not supported (only tcp)");
    }
    ensure!(
        a.port_space.eq_ignore_ascii_case("tcp"),
        "-P {:?}: unknown port space (only tcp is supported)",
        a.port_space
    );
    let numeric = address_format(a.format.as_deref())?;
    ensure!(
        !a.migrate,
        "-m (migrating the ids to a new event channel) is not supported by rverbs"
    );
    ensure!(
        (1..=MAX_CONNECTIONS).contains(&a.connections),
        "-c {}: must be 1 to {MAX_CONNECTIONS}",
        a.connections
    );
    ensure!(
        a.count <= MAX_COUNT,
        "-C {}: must be at most {MAX_COUNT}",
        a.count
    );
    ensure!(
        a.size <= MAX_SIZE,
        "-S {}: must be at most {MAX_SIZE}",
        a.size
    );
    if let Some(t) = a.ack_timeout {
        ensure!(t <= 31, "-a {t}: the ACK timeout must be 0 to 31");
    }
    // cmatose: no size, no messages.
    let count = if a.size == 0 { 0 } else { a.count };
    if a.validate {
        let bytes = 2 * u64::from(count) * u64::from(a.size);
        ensure!(
            bytes <= MAX_VALIDATE_BYTES,
            "-V with -C {count} -S {}: {bytes} bytes of buffers per connection, at most {MAX_VALIDATE_BYTES}",
            a.size
        );
    }
    Ok(Opts {
        conns: a.connections,
        count,
        size: a.size,
        tos: a.tos,
        ack_timeout: a.ack_timeout,
        validate: a.validate,
        numeric,
    })
}

/// An address of the command line (`-f ip`/`ipv6`: numeric only).
fn address(host: &str, port: u16, o: &Opts) -> Result<SocketAddr> {
    resolve_as(host, port, o.numeric)
}

/// Runs cmatose: the client with `-s`, else the server.
pub fn run(a: &UcmatoseArgs) -> Result<()> {
    let o = check(a)?;
    match &a.server {
        Some(dst) => {
            println!("cmatose: starting client");
            let dst = address(dst, a.port, &o)?;
            let src = a.bind.as_deref().map(|s| address(s, 0, &o)).transpose()?;
            run_client(src, dst, &o)?;
        }
        None => {
            println!("cmatose: starting server");
            let addr = address(a.bind.as_deref().unwrap_or("0.0.0.0"), a.port, &o)?;
            run_server(addr, &o)?;
        }
    }
    println!("test complete");
    println!("return status 0");
    Ok(())
}

/// Message `i` from the client (`from_server`: from the server), for
/// `-V`.
pub fn pattern(i: u32, from_server: bool, size: usize) -> Vec<u8> {
    let seed = (i as u8).rotate_left(3) ^ (i >> 8) as u8 ^ if from_server { 0x3c } else { 0xc3 };
    (0..size)
        .map(|k| seed.wrapping_add(k as u8).wrapping_mul(29) ^ (k >> 8) as u8)
        .collect()
}

/// The device contexts opened so far, one per device (as librdmacm's
/// ids share theirs).
#[derive(Default)]
struct Contexts(Vec<Context>);

impl Contexts {
    fn get(&mut self, device: &Device) -> Result<Context> {
        if let Some(c) = self.0.iter().find(|c| c.device().name() == device.name()) {
            return Ok(c.clone());
        }
        let c = device
            .open()
            .with_context(|| format!("open {}", device.name()))?;
        self.0.push(c.clone());
        Ok(c)
    }
}

/// One connection's verbs objects before it is connected.
struct Prepared {
    qp: Qp,
    send_cq: Cq,
    recv_cq: Cq,
    /// The receive slots, then the send slots.
    mr: Mr<PageBuf>,
}

/// One connection.
struct Node {
    /// Declared first: it drops (disconnects, destroys the QP) before the
    /// CQs and the MR.
    conn: Connection,
    send_cq: Cq,
    recv_cq: Cq,
    mr: Mr<PageBuf>,
}

/// PD, the two CQs, the RC QP and the MR (as cmatose's `init_node`), and
/// the receives posted.
fn prepare(ctx: &Context, o: &Opts) -> Result<Prepared> {
    let pd = ctx.alloc_pd().context("cmatose: unable to allocate PD")?;
    let send_cq = ctx
        .create_cq(o.depth())
        .context("cmatose: unable to create CQ")?;
    let recv_cq = ctx
        .create_cq(o.depth())
        .context("cmatose: unable to create CQ")?;
    let qp = pd
        .create_qp(
            &QpInitAttr::new(QpType::Rc, &send_cq)
                .recv_cq(&recv_cq)
                .cap(QpCap {
                    max_send_wr: o.depth(),
                    max_recv_wr: o.depth(),
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                }),
        )
        .context("cmatose: unable to create QP")?;
    let len = 2 * o.slots() * o.size as usize;
    let mr = pd
        .alloc_mr(len.max(1), AccessFlags::LOCAL_WRITE)
        .context("failed to reg MR")?;
    // The QP and the MR hold the PD.
    Ok(Prepared {
        qp,
        send_cq,
        recv_cq,
        mr,
    })
}

/// Posts one receive per expected message (`wr_id`: its index).
fn post_recvs(p: &mut Prepared, o: &Opts) -> Result<()> {
    for i in 0..o.count as usize {
        let at = o.at(false, i);
        let sge = [p.mr.sge(at..at + o.size as usize)?];
        p.qp.post_recv(&[RecvWr::new(i as u64, &sge)])
            .context("failed to post receives")?;
    }
    Ok(())
}

/// Posts the `-C` sends of a connection, all signaled (cmatose's QPs
/// signal every send).
fn post_sends(n: &mut Node, from_server: bool, o: &Opts) -> Result<()> {
    if o.count == 0 {
        return Ok(());
    }
    let mut sges = Vec::with_capacity(o.count as usize);
    for i in 0..o.count {
        let at = o.at(true, i as usize);
        if o.validate {
            n.mr.write_at(at, &pattern(i, from_server, o.size as usize))?;
        }
        sges.push([n.mr.sge(at..at + o.size as usize)?]);
    }
    let wrs: Vec<SendWr<'_>> = sges
        .iter()
        .enumerate()
        .map(|(i, sge)| SendWr::send(i as u64, sge).signaled())
        .collect();
    n.conn
        .qp_mut()
        .post_send(&wrs)
        .context("failed to post sends")?;
    Ok(())
}

/// Waits (bounded) for the `-C` send completions of connection `k`.
fn complete_sends(n: &mut Node, k: usize, o: &Opts) -> Result<()> {
    let mut wc = vec![Wc::default(); o.count as usize];
    if wc.is_empty() {
        return Ok(());
    }
    n.send_cq
        .poll_until(&mut wc, o.count as usize, STEP_TIMEOUT)
        .with_context(|| format!("connection {k}: waiting for the completions of its sends"))?;
    for w in &wc {
        ensure!(
            w.is_success(),
            "connection {k}: send failed: {} (wr_id {})",
            w.status().as_str(),
            w.wr_id()
        );
    }
    Ok(())
}

/// Waits (bounded) for the `-C` messages of the peer on connection `k`;
/// each must be `-S` bytes (and with `-V` hold the pattern).
fn receive(n: &mut Node, k: usize, from_server: bool, o: &Opts) -> Result<()> {
    for i in 0..o.count {
        let mut wc = [Wc::default()];
        n.recv_cq
            .poll_until(&mut wc, 1, STEP_TIMEOUT)
            .with_context(|| {
                format!(
                    "connection {k}: waiting for message {} of {}",
                    i + 1,
                    o.count
                )
            })?;
        let wc = wc[0];
        ensure!(
            wc.is_success(),
            "connection {k}: receive failed: {}",
            wc.status().as_str()
        );
        ensure!(
            wc.opcode() == WcOpcode::RECV,
            "connection {k}: unexpected completion {:?} (wr_id {})",
            wc.opcode(),
            wc.wr_id()
        );
        ensure!(
            wc.byte_len() == o.size,
            "connection {k}: message {} of {} bytes, expected {}",
            i + 1,
            wc.byte_len(),
            o.size
        );
        // RC delivers in order, into the receives in the order posted.
        ensure!(
            wc.wr_id() == u64::from(i),
            "connection {k}: message {} landed in receive {}",
            i + 1,
            wc.wr_id()
        );
        if o.validate {
            let mut got = vec![0u8; o.size as usize];
            n.mr.read_at(o.at(false, i as usize), &mut got)?;
            ensure!(
                got == pattern(i, from_server, o.size as usize),
                "connection {k}: message {} differs from what was sent",
                i + 1
            );
        }
    }
    Ok(())
}

/// Waits (bounded) until connection `k` is torn down.
fn await_disconnect(n: &mut Node, k: usize) -> Result<()> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(ev) = n.conn.next_event(Some(left))? else {
            bail!(
                "connection {k}: not disconnected within {} s",
                STEP_TIMEOUT.as_secs()
            );
        };
        match ev.kind() {
            CmEventKind::Disconnected => return Ok(()),
            CmEventKind::DeviceRemoval => bail!("connection {k}: the device was removed"),
            _ => continue,
        }
    }
}

/// Runs `f` on every item, at most [`MAX_WORKERS`] at a time; the results
/// in the items' order, or the first item's error.
fn par_map<T: Send, R: Send>(
    items: Vec<T>,
    f: impl Fn(usize, T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let n = items.len();
    let per = n.div_ceil(MAX_WORKERS).max(1);
    let mut chunks: Vec<Vec<(usize, T)>> = Vec::new();
    for (i, t) in items.into_iter().enumerate() {
        if i % per == 0 {
            chunks.push(Vec::with_capacity(per));
        }
        if let Some(c) = chunks.last_mut() {
            c.push((i, t));
        }
    }
    let f = &f;
    let done: Vec<Vec<Result<R>>> = std::thread::scope(|s| {
        let hs: Vec<_> = chunks
            .into_iter()
            .map(|c| s.spawn(move || c.into_iter().map(|(i, t)| f(i, t)).collect::<Vec<_>>()))
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec![Err(anyhow::anyhow!("a worker thread panicked"))])
            })
            .collect()
    });
    done.into_iter().flatten().collect()
}

fn run_client(src: Option<SocketAddr>, dst: SocketAddr, o: &Opts) -> Result<()> {
    println!("cmatose: connecting");
    // Addresses and routes, all connections at once.
    let ids = par_map(vec![(); o.conns as usize], |k, ()| {
        let mut id = CmId::new()?;
        if let Some(t) = o.tos {
            id.set_tos(t).context("cmatose: set TOS option failed")?;
        }
        if let Some(t) = o.ack_timeout {
            id.set_ack_timeout(t)
                .context("cmatose: set ack timeout option failed")?;
        }
        if let Some(src) = src {
            id.bind(SocketAddr::new(src.ip(), 0))
                .with_context(|| format!("cmatose: failure getting addr (bind {})", src.ip()))?;
        }
        id.resolve(dst, RESOLVE_TIMEOUT)
            .with_context(|| format!("connection {k}: resolving {dst}"))
    })?;
    // The verbs objects on each id's device, receives posted.
    let mut ctxs = Contexts::default();
    let mut ready: Vec<(Resolved, Prepared)> = Vec::with_capacity(ids.len());
    for id in ids {
        let ctx = ctxs.get(id.device())?;
        let mut p = prepare(&ctx, o)?;
        id.init_qp(&mut p.qp)?;
        post_recvs(&mut p, o)?;
        ready.push((id, p));
    }
    // cmatose's connection parameters: one READ each way, 5 retries, no
    // RNR retry (every receive is posted before the peer can send).
    let params = ConnParams {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 5,
        rnr_retry_count: 0,
        ..Default::default()
    };
    let mut nodes = par_map(ready, |k, (id, p)| {
        let conn = id
            .connect(p.qp, &params)
            .with_context(|| format!("cmatose: failure connecting (connection {k})"))?;
        Ok(Node {
            conn,
            send_cq: p.send_cq,
            recv_cq: p.recv_cq,
            mr: p.mr,
        })
    })?;
    if o.count > 0 {
        println!("receiving data transfers");
        for (k, n) in nodes.iter_mut().enumerate() {
            receive(n, k, true, o)?;
        }
        println!("sending replies");
        for n in nodes.iter_mut() {
            post_sends(n, false, o)?;
        }
        for (k, n) in nodes.iter_mut().enumerate() {
            complete_sends(n, k, o)?;
        }
        println!("data transfers complete");
    }
    // The server disconnects; each answer goes out as the connection
    // closes.
    for (k, n) in nodes.iter_mut().enumerate() {
        await_disconnect(n, k)?;
        n.conn.disconnect()?;
    }
    drop(nodes);
    Ok(())
}

fn run_server(addr: SocketAddr, o: &Opts) -> Result<()> {
    let l = Listener::bind(addr, 0).context("cmatose: bind address failed")?;
    let mut ctxs = Contexts::default();
    let mut nodes = Vec::with_capacity(o.conns as usize);
    while nodes.len() < o.conns as usize {
        // Clients come when they come (as cmatose's server, no timeout).
        let Some(req) = l.get_request(None)? else {
            continue;
        };
        let ctx = ctxs.get(req.device())?;
        let mut p = prepare(&ctx, o)?;
        if let Some(t) = o.ack_timeout {
            req.set_ack_timeout(t)
                .context("cmatose: set ack timeout option failed")?;
        }
        req.init_qp(&mut p.qp)?;
        post_recvs(&mut p, o)?;
        let conn = req
            .accept(p.qp, &ConnParams::default())
            .context("cmatose: failure accepting")?;
        nodes.push(Node {
            conn,
            send_cq: p.send_cq,
            recv_cq: p.recv_cq,
            mr: p.mr,
        });
    }
    if o.count > 0 {
        println!("initiating data transfers");
        for n in nodes.iter_mut() {
            post_sends(n, true, o)?;
        }
        println!("completing sends");
        for (k, n) in nodes.iter_mut().enumerate() {
            complete_sends(n, k, o)?;
        }
        println!("receiving data transfers");
        for (k, n) in nodes.iter_mut().enumerate() {
            receive(n, k, false, o)?;
        }
        println!("data transfers complete");
    }
    println!("cmatose: disconnecting");
    for n in nodes.iter_mut() {
        n.conn.disconnect()?;
    }
    for (k, n) in nodes.iter_mut().enumerate() {
        await_disconnect(n, k)?;
    }
    println!("disconnected");
    drop(nodes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<UcmatoseArgs, clap::Error> {
        crate::common::parse_args("ucmatose", args)
    }

    #[test]
    fn defaults_are_cmatose_s() {
        let a = parse(&[]).unwrap();
        assert_eq!((a.connections, a.count, a.size, a.port), (1, 10, 100, 7471));
        assert!(a.server.is_none() && a.bind.is_none() && a.tos.is_none());
        let o = check(&a).unwrap();
        assert_eq!((o.conns, o.count, o.size), (1, 10, 100));
    }

    #[test]
    fn cmatose_s_letters_parse() {
        let a = parse(&[
            "-s", "10.0.0.1", "-b", "10.0.0.2", "-c", "4", "-C", "20", "-S", "1024", "-p", "7000",
            "-t", "0x68", "-a", "16", "-f", "ip",
        ])
        .unwrap();
        let o = check(&a).unwrap();
        assert_eq!(a.server.as_deref(), Some("10.0.0.1"));
        assert_eq!(a.bind.as_deref(), Some("10.0.0.2"));
        assert_eq!((o.conns, o.count, o.size, a.port), (4, 20, 1024, 7000));
        assert_eq!(
            (o.tos, o.ack_timeout, o.numeric),
            (Some(0x68), Some(16), true)
        );
    }

    #[test]
    fn no_size_means_no_messages() {
        let o = check(&parse(&["-S", "0", "-C", "5"]).unwrap()).unwrap();
        assert_eq!(o.count, 0);
        assert_eq!(o.slots(), 0);
    }

    #[test]
    fn what_is_not_supported_is_refused_by_name() {
        for (args, says) in [
            (&["-P", "ib"][..], "-P ib"),
            (&["-P", "udp"], "unknown port space"),
            (&["-f", "gid"], "AF_IB"),
            (&["-f", "mac"], "unknown address format"),
            (&["-m"], "-m"),
            (&["-c", "0"], "-c 0"),
            (&["-c", "1025"], "-c 1025"),
            (&["-C", "4097"], "-C 4097"),
            (&["-S", "16777217"], "-S 16777217"),
            (&["-a", "32"], "-a 32"),
            (&["-V", "-C", "4096", "-S", "65536"], "-V"),
        ] {
            let err = format!("{:#}", check(&parse(args).unwrap()).unwrap_err());
            assert!(err.contains(says), "{args:?}: {err}");
        }
        for bad in [&["-c", "-1"][..], &["-t", "256"], &["-p", "65536"], &["-x"]] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn numeric_format_refuses_names() {
        let o = check(&parse(&["-f", "ip"]).unwrap()).unwrap();
        let err = address("localhost", 1, &o).unwrap_err().to_string();
        assert!(err.contains("not a numeric address"), "{err}");
        assert_eq!(
            address("[::1]", 7, &o).unwrap(),
            "[::1]:7".parse::<SocketAddr>().unwrap()
        );
    }

    #[test]
    fn slots_are_shared_unless_validating() {
        let o = check(&parse(&["-C", "3", "-S", "10"]).unwrap()).unwrap();
        assert_eq!((o.at(false, 2), o.at(true, 0), o.at(true, 2)), (0, 10, 10));
        let v = check(&parse(&["-C", "3", "-S", "10", "-V"]).unwrap()).unwrap();
        assert_eq!((v.at(false, 2), v.at(true, 0), v.at(true, 2)), (20, 30, 50));
    }

    #[test]
    fn patterns_differ_by_message_and_direction() {
        assert_ne!(pattern(0, true, 64), pattern(0, false, 64));
        assert_ne!(pattern(0, true, 64), pattern(1, true, 64));
        assert_eq!(pattern(3, false, 100).len(), 100);
    }
}
