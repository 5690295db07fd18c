//! `udaddy`: a counterpart of rdma-core's `udaddy` (librdmacm's datagram
//! example), interoperable with it, so that either side may be theirs.
//!
//! Both sides use the UDP port space of the RDMA connection manager
//! ([`rverbs_cm::Resolved::resolve_ud`], [`rverbs_cm::Listener::bind_ud`]):
//! the client's SIDR request gets it the server's QP number, Q_Key and
//! address. Per connection the client then sends `-C` datagrams of `-S`
//! bytes (SEND with immediate: its own QP number, which is how udaddy's
//! server learns whom to answer) and waits for as many answers; the server
//! receives `-C` datagrams, builds the address back to the sender from the
//! first one's GRH, and answers with `-C` datagrams.
//!
//! Unlike udaddy, every wait is bounded ([`STEP_TIMEOUT`]): a lost
//! datagram or a vanished peer ends the run with an error instead of a
//! hang. `-V` (ours only: the peer must be `rverbs udaddy -V` too) fills
//! every datagram with a pattern and checks what arrives.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};
use rverbs::{
    AccessFlags, Ah, Cq, Grh, Mr, PageBuf, Pd, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr,
    UdSendWr, Wc, WcOpcode,
};
use rverbs_cm::{CmId, Listener, Resolved};

use crate::common::num;
use crate::rping::{address_format, resolve_as};

/// udaddy's port (it has no option for it; `--port` is ours).
pub const DEFAULT_PORT: u16 = 7174;
/// The longest wait for any one step (resolution, the SIDR answer, the
/// datagrams of one connection).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The time allowed for address and route resolution each (udaddy's).
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);
/// `wr_id` of receives.
const RECV_ID: u64 = 1;
/// `wr_id` of sends.
const SEND_ID: u64 = 2;

/// The options of `rverbs udaddy` (udaddy's own letters).
#[derive(Debug, Clone, clap::Args)]
pub struct UdaddyArgs {
    /// Be the client of the server at this address (without it: the
    /// server).
    #[arg(short = 's', long = "server", value_name = "ADDR")]
    pub server: Option<String>,
    /// Local address to bind to (server) or send from (client).
    #[arg(short = 'b', long = "bind", value_name = "ADDR")]
    pub bind: Option<String>,
    /// Address format: name, ip or ipv6 (gid, AF_IB, is not supported).
    #[arg(short = 'f', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,
    /// Number of connections (each its own QP).
    #[arg(short = 'c', long = "connections", default_value_t = 1)]
    pub connections: u32,
    /// Datagrams each way per connection.
    #[arg(short = 'C', long = "count", default_value_t = 10)]
    pub count: u32,
    /// Size of each datagram (at most the port's active MTU).
    #[arg(short = 'S', long = "size", default_value_t = 100)]
    pub size: u32,
    /// Type of service of the client's ids (set before route
    /// resolution, as udaddy does; the server ignores it).
    #[arg(short = 't', long = "tos", value_parser = num::<u8>)]
    pub tos: Option<u8>,
    /// Port space: only `udp` (the default) is supported.
    #[arg(short = 'P', long = "port-space", default_value = "udp")]
    pub port_space: String,
    /// The port (udaddy's is fixed: 7174).
    #[arg(long = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Fill datagrams with a pattern and check what arrives (both sides
    /// must be rverbs).
    #[arg(short = 'V', long = "validate")]
    pub validate: bool,
}

/// One connection's verbs objects.
struct Node {
    pd: Pd,
    cq: Cq,
    qp: Qp,
    /// Receive buffers (`count` slots of `size + 40` bytes), then one send
    /// buffer of `size` bytes.
    mr: Mr<PageBuf>,
    /// The peer: its address handle, QP number and Q_Key.
    peer: Option<(Ah, u32, u32)>,
}

/// The checked options.
struct Opts {
    count: u32,
    size: u32,
    validate: bool,
    tos: Option<u8>,
}

impl Opts {
    /// The bytes of one receive slot (GRH + datagram).
    fn slot(&self) -> usize {
        Grh::LEN + self.size as usize
    }
    /// Where the send buffer starts.
    fn send_at(&self) -> usize {
        self.slot() * self.count as usize
    }
}

/// Runs udaddy: the client with `-s`, else the server.
pub fn run(a: &UdaddyArgs) -> Result<()> {
    if !a.port_space.eq_ignore_ascii_case("udp") {
        bail!(
            "port space {:?}: only udp is supported (IPoIB needs an InfiniBand port)",
            a.port_space
        );
    }
    let numeric = address_format(a.format.as_deref())?;
    ensure!(a.connections > 0, "-c must be at least 1");
    ensure!(a.count <= 4096, "-C {}: at most 4096", a.count);
    let o = Opts {
        count: a.count,
        // udaddy: no size, no messages.
        size: a.size,
        validate: a.validate,
        tos: a.tos,
    };
    let o = if o.size == 0 {
        Opts { count: 0, ..o }
    } else {
        o
    };
    ensure!(o.size <= 65536, "-S {}: larger than any MTU", o.size);
    match &a.server {
        Some(dst) => {
            let dst = resolve_as(dst, a.port, numeric)?;
            let src = a
                .bind
                .as_deref()
                .map(|s| resolve_as(s, 0, numeric))
                .transpose()?;
            run_client(src, dst, a.connections, &o)
        }
        None => {
            let addr = resolve_as(a.bind.as_deref().unwrap_or("0.0.0.0"), a.port, numeric)?;
            run_server(addr, a.connections, &o)
        }
    }
}

/// The datagram `i` of connection `conn` from the client (`reply`: from
/// the server), for `-V`.
fn pattern(conn: u32, i: u32, reply: bool, size: usize) -> Vec<u8> {
    let seed = (conn as u8) ^ (i as u8).rotate_left(3) ^ if reply { 0x5a } else { 0xa5 };
    (0..size)
        .map(|k| seed.wrapping_add(k as u8).wrapping_mul(31))
        .collect()
}

/// PD, CQ, UD QP and MR on the CM's device, the message size checked
/// against the port's MTU (as udaddy's `verify_test_params`).
fn node(device: &rverbs::Device, port: u8, o: &Opts) -> Result<Node> {
    let ctx = device
        .open()
        .with_context(|| format!("open {}", device.name()))?;
    if o.count > 0 {
        let mtu = ctx
            .query_port(port)?
            .active_mtu()
            .map_or(0, |m| m.bytes() as u64);
        ensure!(
            u64::from(o.size) <= mtu,
            "udaddy: message_size {} is larger than active mtu {mtu}",
            o.size
        );
    }
    let pd = ctx.alloc_pd()?;
    let depth = o.count.max(1);
    let cq = ctx.create_cq(depth * 2)?;
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Ud, &cq).cap(QpCap {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }))
        .context("unable to create QP")?;
    let len = o.send_at() + o.size as usize;
    let mr = pd.alloc_mr(len.max(1), AccessFlags::LOCAL_WRITE)?;
    Ok(Node {
        pd,
        cq,
        qp,
        mr,
        peer: None,
    })
}

/// Posts one receive per expected datagram.
fn post_recvs(n: &mut Node, o: &Opts) -> Result<()> {
    for i in 0..o.count as usize {
        let at = i * o.slot();
        let sge = [n.mr.sge(at..at + o.slot())?];
        n.qp.post_recv(&[RecvWr::new(RECV_ID + ((i as u64) << 8), &sge)])
            .context("failed to post receives")?;
    }
    Ok(())
}

/// Sends `count` datagrams to the node's peer, each signaled, with the
/// QP number as immediate; waits for their completions.
fn send_all(n: &mut Node, conn: u32, reply: bool, o: &Opts) -> Result<()> {
    let Some((ah, qpn, qkey)) = &n.peer else {
        bail!("no address for the peer");
    };
    let at = o.send_at();
    let sge = [n.mr.sge(at..at + o.size as usize)?];
    let me = n.qp.qp_num();
    for i in 0..o.count {
        if o.validate {
            n.mr.write_at(at, &pattern(conn, i, reply, o.size as usize))?;
        }
        let wr = SendWr::send_with_imm(SEND_ID, &sge, me)
            .signaled()
            .to(ah, *qpn, *qkey);
        n.qp.post_send(&[wr]).context("failed to post sends")?;
        // One at a time: with -V the buffer is rewritten per datagram.
        let mut wc = [Wc::default()];
        n.cq.poll_until(&mut wc, 1, STEP_TIMEOUT)
            .context("waiting for a send completion")?;
        let wc = wc[0];
        ensure!(
            wc.is_success() && wc.wr_id() == SEND_ID,
            "send failed: {} (wr_id {})",
            wc.status().as_str(),
            wc.wr_id()
        );
    }
    Ok(())
}

/// Receives `count` datagrams; each must be `size` bytes with a GRH in
/// front. Returns the first one's completion.
fn recv_all(n: &mut Node, conn: u32, reply: bool, o: &Opts) -> Result<Option<Wc>> {
    let mut first = None;
    for k in 0..o.count {
        let mut wc = [Wc::default()];
        n.cq.poll_until(&mut wc, 1, STEP_TIMEOUT)
            .with_context(|| format!("waiting for datagram {} of {} (lost?)", k + 1, o.count))?;
        let wc = wc[0];
        ensure!(wc.is_success(), "receive failed: {}", wc.status().as_str());
        ensure!(
            wc.opcode() == WcOpcode::RECV && wc.wr_id() & 0xff == RECV_ID,
            "unexpected completion {:?} (wr_id {})",
            wc.opcode(),
            wc.wr_id()
        );
        ensure!(
            wc.byte_len() as usize == o.slot(),
            "datagram of {} bytes, expected {} (GRH + {})",
            wc.byte_len(),
            o.slot(),
            o.size
        );
        if o.validate {
            // The slot is the wr_id's upper bits (posted by post_recvs,
            // bounded by count).
            let slot = (wc.wr_id() >> 8) as usize;
            ensure!(slot < o.count as usize, "wr_id {} is not ours", wc.wr_id());
            let mut got = vec![0u8; o.size as usize];
            n.mr.read_at(slot * o.slot() + Grh::LEN, &mut got)?;
            ensure!(
                got == pattern(conn, k, reply, o.size as usize),
                "datagram {k} of connection {conn}: data differs"
            );
        }
        first.get_or_insert(wc);
    }
    Ok(first)
}

/// A UD id resolved to `dst` (from `src`), its type of service set
/// before the route is resolved (the route's traffic class, and so the
/// address handle's, follows it).
fn resolve_id(src: Option<SocketAddr>, dst: SocketAddr, tos: Option<u8>) -> Result<Resolved> {
    let Some(tos) = tos else {
        return Resolved::resolve_ud_from(src, dst, RESOLVE_TIMEOUT)
            .with_context(|| format!("resolving {dst}"));
    };
    let mut id = CmId::new_ud()?;
    id.set_tos(tos).context("udaddy: set TOS option failed")?;
    if let Some(src) = src {
        id.bind(SocketAddr::new(src.ip(), 0))
            .with_context(|| format!("udaddy: binding to {}", src.ip()))?;
    }
    id.resolve(dst, RESOLVE_TIMEOUT)
        .with_context(|| format!("resolving {dst}"))
}

fn run_client(src: Option<SocketAddr>, dst: SocketAddr, conns: u32, o: &Opts) -> Result<()> {
    println!("udaddy: starting client");
    println!("udaddy: connecting");
    let mut nodes = Vec::new();
    for _ in 0..conns {
        let id = resolve_id(src, dst, o.tos)?;
        let mut n = node(id.device(), id.port_num(), o)?;
        id.init_qp(&mut n.qp)?;
        post_recvs(&mut n, o)?;
        let peer = id
            .connect_ud(&mut n.qp, &[], STEP_TIMEOUT)
            .context("udaddy: failure connecting")?;
        if o.tos.is_some() {
            // Not in udaddy's output: shows where -t ended up.
            let tc = peer.ah_attr.grh.map(|g| g.traffic_class);
            println!(
                "udaddy: address handle traffic class {}",
                tc.map_or("none (no GRH)".into(), |t| t.to_string())
            );
        }
        let ah =
            n.pd.create_ah(&peer.ah_attr)
                .context("udaddy: failure creating address handle")?;
        n.peer = Some((ah, peer.qp_num, peer.qkey));
        nodes.push(n);
    }
    if o.count > 0 {
        println!("initiating data transfers");
        for (i, n) in nodes.iter_mut().enumerate() {
            send_all(n, i as u32, false, o)?;
        }
        println!("receiving data transfers");
        for (i, n) in nodes.iter_mut().enumerate() {
            recv_all(n, i as u32, true, o)?;
        }
        println!("data transfers complete");
    }
    println!("test complete");
    println!("return status 0");
    Ok(())
}

fn run_server(addr: SocketAddr, conns: u32, o: &Opts) -> Result<()> {
    println!("udaddy: starting server");
    let l = Listener::bind_ud(addr, 0).context("udaddy: bind address failed")?;
    let mut nodes = Vec::new();
    while nodes.len() < conns as usize {
        // Clients come when they come (as udaddy's server, no timeout).
        let Some(req) = l.get_request(None)? else {
            continue;
        };
        let mut n = node(req.device(), req.port_num(), o)?;
        req.init_qp(&mut n.qp)?;
        post_recvs(&mut n, o)?;
        let port = req.port_num();
        req.accept_ud(&mut n.qp, &[])
            .context("udaddy: failure accepting")?;
        nodes.push((n, port));
    }
    if o.count > 0 {
        println!("receiving data transfers");
        for (i, (n, port)) in nodes.iter_mut().enumerate() {
            let Some(wc) = recv_all(n, i as u32, false, o)? else {
                continue;
            };
            // The answer goes back the way the first datagram came; the
            // sender's QP number is its immediate, as udaddy's server
            // takes it (and the completion's source QP says the same).
            let slot = (wc.wr_id() >> 8) as usize;
            let grh = Grh::read(&n.mr, slot * o.slot())?;
            let attr = grh.reply_attr(n.pd.context(), *port)?;
            let ah =
                n.pd.create_ah(&attr)
                    .context("udaddy: failed to create reply AH")?;
            let qpn = wc.imm_data().unwrap_or(wc.src_qp()) & 0x00ff_ffff;
            let qkey = n.qp.query()?.0.qkey.unwrap_or(rverbs_cm::UDP_QKEY);
            n.peer = Some((ah, qpn, qkey));
        }
        println!("sending replies");
        for (i, (n, _)) in nodes.iter_mut().enumerate() {
            send_all(n, i as u32, true, o)?;
        }
        println!("data transfers complete");
    }
    println!("test complete");
    println!("return status 0");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> std::result::Result<UdaddyArgs, clap::Error> {
        crate::common::parse_args("udaddy", v)
    }

    #[test]
    fn tos_and_format_are_udaddys() {
        let a = parse(&["-t", "0x20", "-f", "ip", "-s", "10.0.0.1"]).unwrap();
        assert_eq!((a.tos, a.format.as_deref()), (Some(32), Some("ip")));
        assert!(parse(&["-t", "256"]).is_err());
        // Refused before any id is created.
        let e = run(&parse(&["-f", "gid", "-s", "10.0.0.1"]).unwrap()).unwrap_err();
        assert!(e.to_string().contains("AF_IB"), "{e}");
        let e = run(&parse(&["-f", "ip", "-s", "localhost"]).unwrap()).unwrap_err();
        assert!(e.to_string().contains("not a numeric address"), "{e}");
    }
}
