//! `mckey`: a counterpart of rdma-core's `mckey` (librdmacm's multicast
//! example), interoperable with it, so that either side may be theirs.
//!
//! Every node (`-c` of them, each its own datagram id and UD QP) resolves
//! the multicast address (`-m`, from `-b` if given) to the local device,
//! brings its QP up, and joins the group through the RDMA connection
//! manager ([`rverbs_cm::McastId::join`]): a full member's QP is attached
//! to the group, a send-only member's (`-o`) is not. After mckey's pause
//! of three seconds, the sender (`-s`) sends `-C` datagrams of `-S` bytes
//! per node to the group (QPN 0xFFFFFF, the join's Q_Key and address
//! vector; SEND with immediate: the sender's QP number, as mckey), and a
//! receiver takes `-C` datagrams per node. Then every node leaves.
//!
//! Unlike mckey, every wait is bounded (`--timeout` for the receives,
//! [`STEP_TIMEOUT`] for the other steps): a lost datagram ends the run
//! with an error instead of a hang. Each datagram received is checked:
//! its length (GRH + `-S`) and its immediate (the sender's QP number,
//! which the completion's source QP must match).

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};
use rverbs::{
    AccessFlags, Ah, Cq, Grh, Mr, PageBuf, Pd, Qp, QpCap, QpCreateFlags, QpInitAttr, QpType,
    RecvWr, SendWr, UdSendWr, Wc, WcOpcode,
};
use rverbs_cm::{JoinMode, McastGroup, McastId};

use crate::common::MAX_TIMEOUT_SECS;
use crate::rping::resolve;

/// The longest wait for a step other than the receives (resolution, the
/// join, the send completions).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The time allowed for address resolution (mckey's).
const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);
/// mckey's pause between the joins and the transfers ("to give the SM a
/// chance to configure switches").
const JOIN_PAUSE: Duration = Duration::from_secs(3);
/// `wr_id` of receives (the slot in the upper bits).
const RECV_ID: u64 = 1;
/// `wr_id` of sends.
const SEND_ID: u64 = 2;
/// librdmacm's UDP port space (`RDMA_PS_UDP`), mckey's default `-p`.
const PS_UDP: u32 = 0x0111;
/// librdmacm's IPoIB port space (`RDMA_PS_IPOIB`).
const PS_IPOIB: u32 = 0x0002;

/// The options of `rverbs mckey` (mckey's own letters).
#[derive(Debug, Clone, clap::Args)]
pub struct MckeyArgs {
    /// The multicast address to join.
    #[arg(short = 'm', long = "mcast", value_name = "ADDR")]
    pub mcast: Option<String>,
    /// An unmapped multicast address (an AF_IB GID; replaces -m and needs
    /// -b): not supported.
    #[arg(short = 'M', long = "unmapped", value_name = "GID")]
    pub unmapped: Option<String>,
    /// Be the sender (without it: a receiver).
    #[arg(short = 's', long = "sender")]
    pub sender: bool,
    /// Local address to bind to (the group is reached through its device).
    #[arg(short = 'b', long = "bind", value_name = "ADDR")]
    pub bind: Option<String>,
    /// Number of nodes (each its own id and QP joining the group).
    #[arg(short = 'c', long = "connections", default_value_t = 1)]
    pub connections: u32,
    /// Datagrams sent (sender) or awaited (receiver) per node.
    #[arg(short = 'C', long = "count", default_value_t = 10)]
    pub count: u32,
    /// Size of each datagram (at most the port's active MTU).
    #[arg(short = 'S', long = "size", default_value_t = 100)]
    pub size: u32,
    /// Port space: 0x111 (UDP, the default); IPoIB (0x2) is not supported.
    #[arg(short = 'p', long = "port-space", default_value = "0x111")]
    pub port_space: String,
    /// Join as a send-only full member (no attachment, no IP group join).
    #[arg(short = 'o', long = "send-only")]
    pub send_only: bool,
    /// Join without multicast loopback (a QP created with
    /// BLOCK_MULTICAST_LOOPBACK, which rxe refuses).
    #[arg(short = 'l', long = "no-loopback")]
    pub no_loopback: bool,
    /// The longest wait for the datagrams, in seconds (mckey waits
    /// forever).
    #[arg(long = "timeout", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(..=MAX_TIMEOUT_SECS))]
    pub timeout: u64,
}

/// One node: its id, verbs objects and group.
struct Node {
    id: McastId,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    /// `count` receive slots of GRH + `size` bytes, then the send buffer.
    mr: Mr<PageBuf>,
    group: Option<(McastGroup, Ah)>,
}

/// The checked options.
struct Opts {
    count: u32,
    size: u32,
    sender: bool,
    mode: JoinMode,
    no_loopback: bool,
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

/// `-p`'s value as mckey reads it (`strtol(.., 0)`: decimal, `0x` hex or
/// `0` octal).
fn parse_port_space(s: &str) -> Option<u32> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u32::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u32::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

/// Runs mckey: the sender with `-s`, else a receiver.
pub fn run(a: &MckeyArgs) -> Result<()> {
    if a.unmapped.is_some() {
        bail!(
            "-M (an unmapped AF_IB multicast GID) is not supported: rverbs speaks IPv4 and \
             IPv6 addresses to the rdma_cm only (and on RoCE v2 the kernel refuses AF_IB \
             groups with ENOTSUPP); use -m with an IP multicast address"
        );
    }
    match parse_port_space(&a.port_space) {
        Some(PS_UDP) => {}
        Some(PS_IPOIB) => {
            bail!("port space 0x2 (IPoIB) is not supported: it needs an InfiniBand port")
        }
        _ => bail!(
            "port space {:?}: only 0x111 (UDP) is supported",
            a.port_space
        ),
    }
    let Some(mcast) = &a.mcast else {
        bail!("mckey needs -m multicast_address");
    };
    ensure!(a.connections > 0, "-c must be at least 1");
    ensure!(a.count <= 4096, "-C {}: at most 4096", a.count);
    ensure!(a.size <= 65536, "-S {}: larger than any MTU", a.size);
    let o = Opts {
        // mckey: no size, no messages.
        count: if a.size == 0 { 0 } else { a.count },
        size: a.size,
        sender: a.sender,
        mode: if a.send_only {
            JoinMode::SendOnlyFullMember
        } else {
            JoinMode::FullMember
        },
        no_loopback: a.no_loopback,
    };
    let group = resolve(mcast, 0)?;
    ensure!(
        group.ip().is_multicast(),
        "{} is not a multicast address",
        group.ip()
    );
    let src = a.bind.as_deref().map(|s| resolve(s, 0)).transpose()?;
    println!(
        "mckey: starting {}",
        if o.sender { "client" } else { "server" }
    );
    println!("mckey: joining");
    let mut nodes = Vec::new();
    for _ in 0..a.connections {
        nodes.push(join_node(src, group, &o)?);
    }
    std::thread::sleep(JOIN_PAUSE);
    if o.count > 0 {
        if o.sender {
            println!("initiating data transfers");
            for n in &mut nodes {
                send_all(n, &o)?;
            }
        } else {
            println!("receiving data transfers");
            let timeout = Duration::from_secs(a.timeout);
            for (i, n) in nodes.iter_mut().enumerate() {
                recv_all(n, i, &o, timeout)?;
            }
        }
        println!("data transfers complete");
    }
    for n in &mut nodes {
        if let Some((g, _)) = n.group.take() {
            n.id.leave(g, Some(&mut n.qp))
                .context("mckey: failure leaving")?;
        }
    }
    println!("test complete");
    println!("return status 0");
    Ok(())
}

/// One node: the address resolved, the QP up (receives posted for a
/// receiver), the group joined, its address handle made.
fn join_node(src: Option<SocketAddr>, group: SocketAddr, o: &Opts) -> Result<Node> {
    let id = McastId::resolve_from(src, group, RESOLVE_TIMEOUT)
        .with_context(|| format!("mckey: resolve addr failure ({group})"))?;
    let ctx = id
        .device()
        .open()
        .with_context(|| format!("open {}", id.device().name()))?;
    if o.count > 0 {
        // As mckey's verify_test_params.
        let mtu = ctx
            .query_port(id.port_num())?
            .active_mtu()
            .map_or(0, |m| m.bytes() as u64);
        ensure!(
            u64::from(o.size) <= mtu,
            "mckey: message_size {} is larger than active mtu {mtu}",
            o.size
        );
    }
    let pd = ctx.alloc_pd()?;
    let depth = o.count.max(1);
    // A receiver sleeps on a completion channel rather than spin: under
    // emulation a spinning receiver takes the CPU rxe's send work needs.
    let chan = ctx.create_comp_channel()?;
    let cq = ctx.create_cq_with(depth * 2, Some(&chan), 0)?;
    let attr = QpInitAttr::new(QpType::Ud, &cq).cap(QpCap {
        max_send_wr: depth,
        max_recv_wr: depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    });
    let qp = if o.no_loopback {
        pd.create_qp_ex(&attr, QpCreateFlags::BLOCK_MULTICAST_LOOPBACK, None)
    } else {
        pd.create_qp(&attr)
    }
    .context("mckey: unable to create QP")?;
    let len = o.send_at() + o.size as usize;
    let mr = pd.alloc_mr(len.max(1), AccessFlags::LOCAL_WRITE)?;
    let mut n = Node {
        id,
        pd,
        cq,
        qp,
        mr,
        group: None,
    };
    n.id.init_qp(&mut n.qp)?;
    if !o.sender {
        for i in 0..o.count as usize {
            let at = i * o.slot();
            let sge = [n.mr.sge(at..at + o.slot())?];
            n.qp.post_recv(&[RecvWr::new(RECV_ID + ((i as u64) << 8), &sge)])
                .context("failed to post receives")?;
        }
    }
    let g =
        n.id.join(group, o.mode, Some(&mut n.qp), STEP_TIMEOUT)
            .context("mckey: failure joining")?;
    let ah = g.ah_attr();
    println!(
        "mckey: joined dgid: {} mlid {:#x} sl {}",
        g.mgid(),
        ah.dlid,
        ah.sl
    );
    let ah =
        n.pd.create_ah(ah)
            .context("mckey: failure creating address handle")?;
    n.group = Some((g, ah));
    Ok(n)
}

/// Sends `count` datagrams to the node's group (immediate: the QP's
/// number), each signaled, and waits for their completions (a UD send
/// completes once on the wire: the QP is not destroyed under it).
fn send_all(n: &mut Node, o: &Opts) -> Result<()> {
    let Some((g, ah)) = &n.group else {
        bail!("the node has not joined");
    };
    let at = o.send_at();
    let sge = [n.mr.sge(at..at + o.size as usize)?];
    let me = n.qp.qp_num();
    let wrs: Vec<SendWr<'_>> = (0..o.count)
        .map(|_| {
            SendWr::send_with_imm(SEND_ID, &sge, me)
                .signaled()
                .to(ah, g.remote_qpn(), g.qkey())
        })
        .collect();
    n.qp.post_send(&wrs).context("failed to post sends")?;
    let mut wc = vec![Wc::default(); o.count as usize];
    n.cq.poll_until(&mut wc, o.count as usize, STEP_TIMEOUT)
        .context("waiting for the send completions")?;
    for w in &wc {
        ensure!(
            w.is_success() && w.wr_id() == SEND_ID,
            "send failed: {} (wr_id {})",
            w.status().as_str(),
            w.wr_id()
        );
    }
    Ok(())
}

/// Receives `count` datagrams within `timeout`; each must be `size`
/// bytes behind a GRH, its immediate the sender's QP number.
fn recv_all(n: &mut Node, node: usize, o: &Opts, timeout: Duration) -> Result<()> {
    let mut wc = vec![Wc::default(); o.count as usize];
    let mut got = 0;
    let deadline = std::time::Instant::now() + timeout;
    while got < wc.len() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        ensure!(
            !left.is_zero(),
            "mckey: node {node}: {got} of {} datagrams within {timeout:?} (lost?)",
            o.count
        );
        got += match n.cq.poll_blocking(&mut wc[got..], left) {
            Ok(k) => k,
            Err(rverbs::Error::Timeout(_)) => 0,
            Err(e) => return Err(e).context("mckey: failed polling CQ"),
        };
    }
    for w in &wc {
        ensure!(w.is_success(), "receive failed: {}", w.status().as_str());
        ensure!(
            w.opcode() == WcOpcode::RECV && w.wr_id() & 0xff == RECV_ID,
            "unexpected completion {:?} (wr_id {})",
            w.opcode(),
            w.wr_id()
        );
        ensure!(
            w.byte_len() as usize == o.slot(),
            "datagram of {} bytes, expected {} (GRH + {})",
            w.byte_len(),
            o.slot(),
            o.size
        );
        let imm = w.imm_data().map(|i| i & 0x00ff_ffff);
        ensure!(
            imm == Some(w.src_qp()),
            "datagram from QP {:#x} with immediate {imm:?}, not its QP number",
            w.src_qp()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_spaces_read_as_strtol_does() {
        assert_eq!(parse_port_space("0x111"), Some(PS_UDP));
        assert_eq!(parse_port_space("273"), Some(PS_UDP));
        assert_eq!(parse_port_space("0421"), Some(PS_UDP));
        assert_eq!(parse_port_space("0x2"), Some(PS_IPOIB));
        assert_eq!(parse_port_space("0"), Some(0));
        assert_eq!(parse_port_space("udp"), None);
    }
}
