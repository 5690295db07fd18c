//! `rping`: a counterpart of rdma-core's `rping` (librdmacm's example),
//! wire-compatible with it, so that either side may be theirs.
//!
//! The client (`-c`) connects through the RDMA connection manager
//! ([`rverbs_cm`]) and, per ping, fills its start buffer with the ping's
//! text ([`ping_pattern`]), advertises it (a 16-byte [`Msg`]), waits for
//! the server's go-ahead (the server RDMA READs the buffer meanwhile),
//! advertises its sink buffer and waits for the second go-ahead (the
//! server RDMA WRITEs the echo into the sink meanwhile). The server (`-s`)
//! serves one client and exits when it disconnects (`-P`: serves clients
//! one after another, forever).
//!
//! Everything the peer sends is checked before it is used: every receive
//! must be exactly 16 bytes, an advertised source must fit the server's
//! own buffer, an echo must fit the advertised sink. Every wait is bounded
//! ([`STEP_TIMEOUT`]), so a vanished peer ends the run with an error.

use std::fmt;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs::{
    AccessFlags, Context, Cq, Mr, Qp, QpCap, QpInitAttr, QpType, RecvWr, RemoteMr, SendWr, Wc,
    WcStatus,
};
use rverbs_cm::{CmEventKind, ConnParams, ConnRequest, Connection, Listener, Resolved};

/// The smallest `-S` rping accepts.
pub const MIN_SIZE: i64 = 23;
/// The largest `-S` rping accepts.
pub const MAX_SIZE: i64 = 65535;
/// rping's default port.
pub const DEFAULT_PORT: u16 = 7174;
/// The longest wait for any one step of a ping (or of connecting).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The time allowed for address and route resolution each (rping's 2000 ms).
pub const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);
/// How long the CQ is waited on before the connection's events are checked.
const POLL_SLICE: Duration = Duration::from_millis(100);
/// The listener's backlog (rping's).
const BACKLOG: u32 = 3;
/// The CQ's entries (rping: twice the send queue's depth).
const CQ_DEPTH: u32 = 32;
/// The exit status of a command line rping refuses (EINVAL).
const EXIT_USAGE: u8 = 22;

/// `wr_id` of the receive.
const RECV_ID: u64 = 1;
/// `wr_id` of sends (adverts and go-aheads).
const SEND_ID: u64 = 2;
/// `wr_id` of the server's RDMA READ.
const READ_ID: u64 = 3;
/// `wr_id` of the server's RDMA WRITE.
const WRITE_ID: u64 = 4;

/// The options of `rverbs rping` (rping's own letters).
#[derive(Debug, Clone, clap::Args)]
pub struct RpingArgs {
    /// Be the server (passive side); the last of -s and -c wins.
    #[arg(short = 's', long = "server", overrides_with = "client")]
    pub server: bool,
    /// Be the client (active side); the last of -s and -c wins.
    #[arg(short = 'c', long = "client", overrides_with = "server")]
    pub client: bool,
    /// Server: address to bind to; client: address to connect to (IPv4 or
    /// IPv6 literal, or a host name).
    #[arg(
        short = 'a',
        long = "addr",
        value_name = "ADDR",
        default_value = "0.0.0.0"
    )]
    pub addr: String,
    /// Client: local source address.
    #[arg(short = 'I', long = "src-addr", value_name = "ADDR")]
    pub src_addr: Option<String>,
    /// Port to listen on / connect to.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Client: number of pings (0: forever).
    #[arg(
        short = 'C',
        long = "count",
        default_value = "0",
        allow_negative_numbers = true
    )]
    pub count: i64,
    /// Size of the ping data (23 to 65535).
    #[arg(
        short = 'S',
        long = "size",
        default_value = "64",
        allow_negative_numbers = true
    )]
    pub size: i64,
    /// Print the data of each ping.
    #[arg(short = 'v', long = "verbose")]
    pub verbose: bool,
    /// Client: check that each echo equals the data sent.
    #[arg(short = 'V', long = "validate")]
    pub validate: bool,
    /// Server: serve clients one after another, forever.
    #[arg(short = 'P', long = "persistent")]
    pub persistent: bool,
    /// Print what happens, step by step (stdout).
    #[arg(short = 'd', long = "debug")]
    pub debug: bool,
    /// rping's "create the QP with verbs, not through the connection
    /// manager": rverbs always does (the QP is the caller's; the
    /// connection manager's INIT_QP_ATTR answers move it), so this
    /// changes nothing, on the wire or here. Accepted for rping's command
    /// lines.
    #[arg(short = 'q', long = "self-create-qp")]
    pub self_create_qp: bool,
}

/// A command line rping refuses before doing anything: the message, for
/// an exit status of 22 (EINVAL), as rping's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// The options, checked.
#[derive(Debug, Clone)]
struct Opts {
    size: usize,
    count: u64,
    verbose: bool,
    validate: bool,
    persistent: bool,
    debug: bool,
}

impl Opts {
    fn debug(&self, what: impl FnOnce() -> String) {
        if self.debug {
            println!("{}", what());
        }
    }
}

/// Checks the options that clap cannot: the role, `-S` and `-C`.
fn check(a: &RpingArgs) -> Result<Opts, UsageError> {
    if !(MIN_SIZE..=MAX_SIZE).contains(&a.size) {
        return Err(UsageError(format!(
            "Invalid size {} (valid range is {MIN_SIZE} to {MAX_SIZE})",
            a.size
        )));
    }
    if a.count < 0 {
        return Err(UsageError(format!("Invalid count {}", a.count)));
    }
    if a.server == a.client {
        return Err(UsageError(
            "one of -s (server) and -c (client) is required".to_string(),
        ));
    }
    Ok(Opts {
        size: usize::try_from(a.size)
            .map_err(|_| UsageError(format!("Invalid size {}", a.size)))?,
        count: u64::try_from(a.count)
            .map_err(|_| UsageError(format!("Invalid count {}", a.count)))?,
        verbose: a.verbose,
        validate: a.validate,
        persistent: a.persistent,
        debug: a.debug,
    })
}

/// Runs rping and returns its exit status: 0 on success; 22 for a
/// refused command line (the message on stderr); 1 on any other failure,
/// after `rping client failed: <error>` (or `server`) on stderr.
pub fn exit_code(a: &RpingArgs) -> ExitCode {
    match run(a) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<UsageError>() {
            Some(u) => {
                eprintln!("{u}");
                ExitCode::from(EXIT_USAGE)
            }
            None => {
                let role = if a.server { "server" } else { "client" };
                eprintln!("rping {role} failed: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// Runs rping: the client or the server, as the options say. A refused
/// command line fails with a [`UsageError`].
pub fn run(a: &RpingArgs) -> Result<()> {
    let o = check(a)?;
    if a.server {
        let addr = resolve(&a.addr, a.port)?;
        run_server(addr, &o)
    } else {
        let dst = resolve(&a.addr, a.port)?;
        let src = a.src_addr.as_deref().map(|s| resolve(s, 0)).transpose()?;
        run_client(src, dst, &o)
    }
}

/// `host` (an IP literal, possibly in brackets, or a name) with `port`:
/// the first address it resolves to.
pub fn resolve(host: &str, port: u16) -> Result<SocketAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    (bare, port)
        .to_socket_addrs()
        .with_context(|| format!("invalid hostname or IP address {host:?}"))?
        .next()
        .ok_or_else(|| anyhow!("{host:?} resolves to no address"))
}

/// The address format option (`-f`) of rdma-core's cm examples (cmatose,
/// udaddy): `name` (the default) or `ip`/`ipv6` (numeric addresses only);
/// returns whether names are refused. `gid` (AF_IB) is refused with a
/// clear error, as is an unknown format.
pub fn address_format(f: Option<&str>) -> Result<bool> {
    match f.map(str::to_ascii_lowercase).as_deref() {
        None | Some("name") => Ok(false),
        Some("ip") | Some("ipv6") => Ok(true),
        Some("gid") => bail!("-f gid: AF_IB addresses are not supported"),
        Some(f) => bail!("-f {f:?}: unknown address format (name, ip or ipv6)"),
    }
}

/// [`resolve`], refusing names when `numeric` (`-f ip`/`ipv6`).
pub fn resolve_as(host: &str, port: u16, numeric: bool) -> Result<SocketAddr> {
    if numeric {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if bare.parse::<IpAddr>().is_err() {
            bail!("{host:?} is not a numeric address (-f ip)");
        }
    }
    resolve(host, port)
}

/// The 16-byte message of rping, every field big-endian: an advert of a
/// buffer (the client's), or the server's go-ahead (all zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Msg {
    /// The buffer's virtual address.
    pub addr: u64,
    /// The rkey of the MR covering it.
    pub rkey: u32,
    /// Its length.
    pub len: u32,
}

impl Msg {
    /// The length of the encoding.
    pub const LEN: usize = 16;

    /// The 16 bytes on the wire.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Decodes a received message; anything but exactly 16 bytes is
    /// refused. The values are the peer's word, checked where used.
    pub fn decode(b: &[u8]) -> Result<Msg> {
        let b: &[u8; Self::LEN] = b
            .try_into()
            .map_err(|_| anyhow!("Received bogus data, size {}", b.len()))?;
        let (addr, rest) = b.split_at(8);
        let (rkey, len) = rest.split_at(4);
        Ok(Msg {
            addr: u64::from_be_bytes(addr.try_into()?),
            rkey: u32::from_be_bytes(rkey.try_into()?),
            len: u32::from_be_bytes(len.try_into()?),
        })
    }
}

/// The data of ping `ping` in a buffer of `size` bytes, as rping writes
/// it: `rdma-ping-<ping>: ` (cut to `size - 1` bytes), then the characters
/// 65..=122 in turn from `65 + ping % 58` on, then a NUL as the last byte.
pub fn ping_pattern(ping: u64, size: usize) -> Vec<u8> {
    let mut buf = vec![0u8; size];
    let Some(last) = size.checked_sub(1) else {
        return buf;
    };
    let prefix = format!("rdma-ping-{ping}: ");
    let cc = prefix.len().min(last);
    let start = ping % 58;
    for (i, b) in buf.iter_mut().take(last).enumerate() {
        *b = match prefix.as_bytes().get(i) {
            Some(&c) => c,
            // Both terms are below 58: no overflow, and the result fits.
            None => 65 + ((start + (i.saturating_sub(cc) % 58) as u64) % 58) as u8,
        };
    }
    buf
}

/// The bytes before the first NUL, as text (a C string's view).
fn c_string(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(b.get(..end).unwrap_or_default()).into_owned()
}

/// The connection parameters rping connects (and, here, accepts) with.
fn conn_params() -> ConnParams {
    // The library's defaults are rping's: one READ each way, 7 retries,
    // infinite RNR retries, no private data.
    ConnParams {
        timeout: STEP_TIMEOUT,
        ..ConnParams::default()
    }
}

/// The verbs objects of one side, before the connection owns the QP.
struct Setup {
    cq: Cq,
    qp: Qp,
    recv_mr: Mr,
    send_mr: Mr,
    rdma_mr: Mr,
    /// The client's start buffer.
    start_mr: Option<Mr>,
}

/// Creates rping's CQ, QP and MRs on `ctx` (`start` buffer: the client's).
fn setup(ctx: &Context, size: usize, start: bool) -> Result<Setup> {
    let pd = ctx.alloc_pd().context("ibv_alloc_pd")?;
    let ch = ctx
        .create_comp_channel()
        .context("ibv_create_comp_channel")?;
    let cq = ctx
        .create_cq_with(CQ_DEPTH, Some(&ch), 0)
        .context("ibv_create_cq")?;
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap {
            max_send_wr: 16,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }))
        .context("rdma_create_qp")?;
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let recv_mr = pd
        .alloc_mr(Msg::LEN, AccessFlags::LOCAL_WRITE)
        .context("registering the receive buffer")?;
    let send_mr = pd
        .alloc_mr(Msg::LEN, AccessFlags::empty())
        .context("registering the send buffer")?;
    let rdma_mr = pd
        .alloc_mr(size, remote)
        .context("registering the rdma buffer")?;
    let start_mr = start
        .then(|| pd.alloc_mr(size, remote))
        .transpose()
        .context("registering the start buffer")?;
    Ok(Setup {
        cq,
        qp,
        recv_mr,
        send_mr,
        rdma_mr,
        start_mr,
    })
}

/// Posts the one 16-byte receive.
fn post_recv(qp: &mut Qp, recv_mr: &Mr) -> Result<()> {
    let sge = [recv_mr.sge(0..Msg::LEN)?];
    qp.post_recv(&[RecvWr::new(RECV_ID, &sge)])
        .context("ibv_post_recv")
}

/// What a wait is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// A message from the peer.
    Recv,
    /// The completion of our RDMA READ.
    Read,
    /// The completion of our RDMA WRITE.
    Write,
}

/// How a wait ended.
#[derive(Debug)]
enum Step {
    /// What was awaited arrived (with the message, for [`Want::Recv`]),
    /// and no send is outstanding.
    Done(Option<Msg>),
    /// The peer disconnected.
    Disconnected,
}

/// What one completion was.
enum Got {
    Other,
    Wanted(Option<Msg>),
    Flushed,
}

/// An established connection with its CQ and message buffers.
struct Link {
    cq: Cq,
    conn: Connection,
    recv_mr: Mr,
    send_mr: Mr,
    /// Sends posted whose completion has not been polled.
    sends: u32,
    debug: bool,
}

impl Link {
    /// Sends the 16 bytes `msg` (one SGE, signaled).
    fn send(&mut self, msg: &[u8; Msg::LEN]) -> Result<()> {
        if self.sends != 0 {
            bail!("a send is still outstanding");
        }
        self.send_mr.write_at(0, msg)?;
        let sge = [self.send_mr.sge(0..Msg::LEN)?];
        self.conn
            .qp_mut()
            .post_send(&[SendWr::send(SEND_ID, &sge).signaled()])
            .context("post send error")?;
        self.sends = 1;
        Ok(())
    }

    /// Posts an RDMA READ or WRITE.
    fn post(&mut self, wr: &SendWr<'_>) -> Result<()> {
        self.conn
            .qp_mut()
            .post_send(std::slice::from_ref(wr))
            .context("post send error")
    }

    /// Waits (at most [`STEP_TIMEOUT`]) until `want` completed and every
    /// send did, or the peer disconnected. `what` names the step in errors.
    fn wait(&mut self, want: Want, what: &str) -> Result<Step> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        let mut wc = [Wc::default(); 8];
        let mut got: Option<Option<Msg>> = None;
        loop {
            if let Some(m) = got {
                if self.sends == 0 {
                    return Ok(Step::Done(m));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                bail!(
                    "timed out after {}s waiting for {what}",
                    STEP_TIMEOUT.as_secs()
                );
            }
            let n = match self.cq.poll_blocking(&mut wc, left.min(POLL_SLICE)) {
                Ok(n) => n,
                Err(rverbs::Error::Timeout(_)) => 0,
                Err(e) => return Err(anyhow!(e).context("polling the CQ")),
            };
            if n == 0 {
                if self.peer_gone()? {
                    return Ok(Step::Disconnected);
                }
                continue;
            }
            for w in wc.iter().take(n) {
                match self.completion(w, want, what)? {
                    Got::Other => {}
                    Got::Wanted(m) => {
                        if got.is_some() {
                            bail!("a second completion of {what} arrived");
                        }
                        got = Some(m);
                    }
                    Got::Flushed => {
                        if self.conn.is_disconnected() || self.peer_gone()? {
                            return Ok(Step::Disconnected);
                        }
                        bail!(
                            "a work request was flushed while waiting for {what}: the QP is in the error state"
                        );
                    }
                }
            }
        }
    }

    /// Handles one completion.
    fn completion(&mut self, w: &Wc, want: Want, what: &str) -> Result<Got> {
        let status = w.status();
        if status == WcStatus::WR_FLUSH_ERR {
            return Ok(Got::Flushed);
        }
        if !w.is_success() {
            bail!(
                "cq completion failed status {} ({}) for the {}",
                status.0,
                status.as_str(),
                match w.wr_id() {
                    RECV_ID => "receive",
                    SEND_ID => "send",
                    READ_ID => "RDMA READ",
                    WRITE_ID => "RDMA WRITE",
                    _ => "unknown request",
                }
            );
        }
        match w.wr_id() {
            SEND_ID => {
                self.sends = self
                    .sends
                    .checked_sub(1)
                    .ok_or_else(|| anyhow!("a send completed that was not posted"))?;
                Ok(Got::Other)
            }
            RECV_ID => {
                let len = w.byte_len();
                if usize::try_from(len).ok() != Some(Msg::LEN) {
                    bail!("Received bogus data, size {len}");
                }
                let mut b = [0u8; Msg::LEN];
                self.recv_mr.read_at(0, &mut b)?;
                let msg = Msg::decode(&b)?;
                post_recv(self.conn.qp_mut(), &self.recv_mr)?;
                if self.debug {
                    println!(
                        "recv: addr {:#x} rkey {:#x} len {}",
                        msg.addr, msg.rkey, msg.len
                    );
                }
                if want != Want::Recv {
                    bail!("an unexpected message from the peer while waiting for {what}");
                }
                Ok(Got::Wanted(Some(msg)))
            }
            READ_ID if want == Want::Read => Ok(Got::Wanted(None)),
            WRITE_ID if want == Want::Write => Ok(Got::Wanted(None)),
            other => bail!("an unexpected completion (wr_id {other}) while waiting for {what}"),
        }
    }

    /// Reads the connection's pending events: whether the peer
    /// disconnected (the library then moves the QP to ERR). A device
    /// removal fails; other events are ignored.
    fn peer_gone(&mut self) -> Result<bool> {
        while let Some(ev) = self
            .conn
            .next_event(Some(Duration::ZERO))
            .context("rdma_get_cm_event")?
        {
            match ev.kind() {
                CmEventKind::Disconnected => {
                    if self.debug {
                        println!("DISCONNECT EVENT");
                    }
                    return Ok(true);
                }
                CmEventKind::DeviceRemoval => bail!("cma detected device removal"),
                k => {
                    if self.debug {
                        println!("unhandled event: {k:?}, ignoring");
                    }
                }
            }
        }
        Ok(false)
    }
}

/// The client: connect, ping `count` times (0: forever), disconnect.
fn run_client(src: Option<SocketAddr>, dst: SocketAddr, o: &Opts) -> Result<()> {
    let size32 = u32::try_from(o.size).context("size")?;
    let id = Resolved::resolve_from(src, dst, RESOLVE_TIMEOUT)
        .with_context(|| format!("resolving {dst}"))?;
    o.debug(|| {
        format!(
            "rdma_resolve_addr/route to {dst} successful (device {}, port {})",
            id.device().name(),
            id.port_num()
        )
    });
    let ctx = id.device().open().context("opening the RDMA device")?;
    let Setup {
        cq,
        mut qp,
        recv_mr,
        send_mr,
        rdma_mr,
        start_mr,
    } = setup(&ctx, o.size, true)?;
    let mut start_mr = start_mr.ok_or_else(|| anyhow!("no start buffer"))?;
    id.init_qp(&mut qp).context("moving the QP to INIT")?;
    post_recv(&mut qp, &recv_mr)?;
    let conn = id.connect(qp, &conn_params()).context("connect error")?;
    o.debug(|| "rdma_connect successful".to_string());
    let mut link = Link {
        cq,
        conn,
        recv_mr,
        send_mr,
        sends: 0,
        debug: o.debug,
    };
    let source = Msg {
        addr: start_mr.addr(),
        rkey: start_mr.rkey(),
        len: size32,
    }
    .encode();
    let sink = Msg {
        addr: rdma_mr.addr(),
        rkey: rdma_mr.rkey(),
        len: size32,
    }
    .encode();
    let mut ping: u64 = 0;
    while o.count == 0 || ping < o.count {
        let data = ping_pattern(ping, o.size);
        start_mr.write_at(0, &data)?;
        link.send(&source)?;
        if let Step::Disconnected = link.wait(Want::Recv, "the go-ahead after the RDMA READ")? {
            o.debug(|| format!("the server disconnected after {ping} pings"));
            return Ok(());
        }
        link.send(&sink)?;
        if let Step::Disconnected = link.wait(Want::Recv, "the go-ahead after the RDMA WRITE")? {
            o.debug(|| format!("the server disconnected after {ping} pings"));
            return Ok(());
        }
        let echo = rdma_mr.to_vec();
        if o.validate && echo != start_mr.to_vec() {
            eprintln!("data mismatch!");
            bail!("ping {ping}: the echo differs from the data sent");
        }
        if o.verbose {
            println!("ping data: {}", c_string(&echo));
        }
        ping = ping
            .checked_add(1)
            .ok_or_else(|| anyhow!("ping counter overflow"))?;
    }
    link.conn.disconnect().context("rdma_disconnect")?;
    o.debug(|| "rdma_disconnect successful".to_string());
    Ok(())
}

/// The server: listen on `addr`, serve one client (`-P`: one after
/// another, forever).
fn run_server(addr: SocketAddr, o: &Opts) -> Result<()> {
    let listener = Listener::bind(addr, BACKLOG).with_context(|| format!("binding to {addr}"))?;
    o.debug(|| format!("rdma_listen on {}", listener.local_addr()));
    loop {
        let req = listener
            .get_request(None)
            .context("waiting for a connection request")?
            .ok_or_else(|| anyhow!("no connection request"))?;
        let peer = req.peer_addr();
        o.debug(|| format!("connection request from {peer:?}"));
        let r = serve(req, o);
        if !o.persistent {
            return r;
        }
        if let Err(e) = r {
            eprintln!("rping server: the connection from {peer:?} failed: {e:#}");
        }
    }
}

/// Serves one client until it disconnects.
fn serve(req: ConnRequest, o: &Opts) -> Result<()> {
    let ctx = req.device().open().context("opening the RDMA device")?;
    let Setup {
        cq,
        mut qp,
        recv_mr,
        send_mr,
        rdma_mr,
        ..
    } = setup(&ctx, o.size, false)?;
    req.init_qp(&mut qp).context("moving the QP to INIT")?;
    post_recv(&mut qp, &recv_mr)?;
    let conn = req.accept(qp, &conn_params()).context("rdma_accept")?;
    o.debug(|| "accepted; connection established".to_string());
    let mut link = Link {
        cq,
        conn,
        recv_mr,
        send_mr,
        sends: 0,
        debug: o.debug,
    };
    // The go-ahead: 16 zero bytes (rping sends its never-written buffer).
    let go_ahead = [0u8; Msg::LEN];
    let result = (|| -> Result<()> {
        loop {
            // 1. The source advert.
            let src = match link.wait(Want::Recv, "the client's source advert")? {
                Step::Done(Some(m)) => m,
                Step::Done(None) => bail!("no source advert"),
                Step::Disconnected => return Ok(()),
            };
            let len = usize::try_from(src.len)
                .ok()
                .filter(|&l| l > 0 && l <= o.size)
                .ok_or_else(|| {
                    anyhow!(
                        "the client advertised {} bytes; our buffer holds 1 to {}",
                        src.len,
                        o.size
                    )
                })?;
            if src.addr.checked_add(u64::from(src.len)).is_none() {
                bail!(
                    "the client advertised a buffer at {:#x} of {} bytes, past the address space",
                    src.addr,
                    src.len
                );
            }
            // 2. RDMA READ the ping data.
            let remote = RemoteMr {
                addr: src.addr,
                len: u64::from(src.len),
                rkey: src.rkey,
            };
            let sge = [rdma_mr.sge(0..len)?];
            link.post(&remote.rdma_read(READ_ID, &sge)?.signaled())?;
            if let Step::Disconnected = link.wait(Want::Read, "the RDMA READ")? {
                return Ok(());
            }
            let mut data = vec![0u8; len];
            rdma_mr.read_at(0, &mut data)?;
            if o.verbose {
                println!("server ping data: {}", c_string(&data));
            }
            // 3. Go-ahead #1.
            link.send(&go_ahead)?;
            // 4. The sink advert.
            let sink = match link.wait(Want::Recv, "the client's sink advert")? {
                Step::Done(Some(m)) => m,
                Step::Done(None) => bail!("no sink advert"),
                Step::Disconnected => return Ok(()),
            };
            // 5. RDMA WRITE the echo: the data up to and including its
            // first NUL (all of it if there is none).
            let echo_len = data.iter().position(|&b| b == 0).map_or(len, |p| p + 1);
            let remote = RemoteMr {
                addr: sink.addr,
                len: u64::from(sink.len),
                rkey: sink.rkey,
            };
            if sink.addr.checked_add(u64::from(sink.len)).is_none() {
                bail!(
                    "the client advertised a sink at {:#x} of {} bytes, past the address space",
                    sink.addr,
                    sink.len
                );
            }
            let sge = [rdma_mr.sge(0..echo_len)?];
            let wr = remote.rdma_write(WRITE_ID, &sge).with_context(|| {
                format!(
                    "the echo of {echo_len} bytes does not fit the client's {}-byte sink",
                    sink.len
                )
            })?;
            link.post(&wr.signaled())?;
            if let Step::Disconnected = link.wait(Want::Write, "the RDMA WRITE")? {
                return Ok(());
            }
            // 6. Go-ahead #2.
            link.send(&go_ahead)?;
        }
    })();
    let _ = link.conn.disconnect();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn pattern_matches_rping() {
        let p0 = ping_pattern(0, 64);
        assert_eq!(p0.len(), 64);
        assert_eq!(
            text(&p0[..63]),
            "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqr"
        );
        assert_eq!(p0[63], 0);
        let p1 = ping_pattern(1, 64);
        assert_eq!(
            text(&p1[..63]),
            "rdma-ping-1: BCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrs"
        );
        let p10 = ping_pattern(10, 64);
        assert_eq!(
            text(&p10[..63]),
            "rdma-ping-10: KLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzA"
        );
        assert_eq!(p10[63], 0);
        let p58 = ping_pattern(58, 64);
        assert!(text(&p58[..63]).starts_with("rdma-ping-58: ABC"));
        assert!(text(&p58[..63]).ends_with("opq"));
        assert_eq!(c_string(&p0), text(&p0[..63]));
    }

    #[test]
    fn pattern_is_cut_to_small_sizes() {
        let p = ping_pattern(u64::MAX, 23);
        assert_eq!(p.len(), 23);
        assert_eq!(text(&p[..22]), "rdma-ping-184467440737");
        assert_eq!(p[22], 0);
        assert_eq!(ping_pattern(0, 1), [0]);
        assert!(ping_pattern(0, 0).is_empty());
        let big = ping_pattern(2_147_483_647, 65535);
        assert_eq!(big.len(), 65535);
        assert_eq!(big[65534], 0);
        assert!(big[..65534].iter().all(|&b| b != 0));
    }

    #[test]
    fn messages_round_trip_big_endian() {
        let m = Msg {
            addr: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            len: 64,
        };
        let b = m.encode();
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 64]
        );
        assert_eq!(Msg::decode(&b).unwrap(), m);
        assert_eq!(Msg::decode(&[0u8; 16]).unwrap(), Msg::default());
        for n in [0, 1, 15, 17, 20] {
            let e = Msg::decode(&vec![0u8; n]).unwrap_err().to_string();
            assert!(e.contains(&format!("size {n}")), "{e}");
        }
    }

    #[test]
    fn address_formats_are_checked() {
        assert!(!address_format(None).unwrap());
        assert!(!address_format(Some("NAME")).unwrap());
        assert!(address_format(Some("ip")).unwrap());
        assert!(address_format(Some("ipv6")).unwrap());
        let e = address_format(Some("gid")).unwrap_err().to_string();
        assert!(e.contains("AF_IB"), "{e}");
        assert!(address_format(Some("ipx")).is_err());
        let e = resolve_as("localhost", 1, true).unwrap_err().to_string();
        assert!(e.contains("not a numeric address"), "{e}");
        assert_eq!(
            resolve_as("10.0.0.1", 7, true).unwrap(),
            "10.0.0.1:7".parse::<SocketAddr>().unwrap()
        );
    }

    #[test]
    fn options_are_checked() {
        let base = RpingArgs {
            server: false,
            client: true,
            addr: "0.0.0.0".into(),
            src_addr: None,
            port: DEFAULT_PORT,
            count: 0,
            size: 64,
            verbose: false,
            validate: false,
            persistent: false,
            debug: false,
            self_create_qp: false,
        };
        assert_eq!(check(&base).unwrap().size, 64);
        for (size, ok) in [
            (22, false),
            (23, true),
            (65535, true),
            (65536, false),
            (-1, false),
        ] {
            let r = check(&RpingArgs {
                size,
                ..base.clone()
            });
            assert_eq!(r.is_ok(), ok, "size {size}");
            if let Err(e) = r {
                assert_eq!(
                    e.0,
                    format!("Invalid size {size} (valid range is 23 to 65535)")
                );
            }
        }
        assert!(check(&RpingArgs {
            count: -1,
            ..base.clone()
        })
        .is_err());
        assert!(check(&RpingArgs {
            client: false,
            ..base.clone()
        })
        .is_err());
    }

    #[test]
    fn addresses_resolve() {
        assert_eq!(
            resolve("10.0.0.1", 7174).unwrap(),
            "10.0.0.1:7174".parse().unwrap()
        );
        assert_eq!(resolve("::1", 1).unwrap(), "[::1]:1".parse().unwrap());
        assert_eq!(
            resolve("[fe80::1]", 2).unwrap(),
            "[fe80::1]:2".parse().unwrap()
        );
        assert!(resolve("0.0.0.0", 7174).unwrap().ip().is_unspecified());
    }
}
