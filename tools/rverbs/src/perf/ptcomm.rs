//! perftest's `-R` (`--rdma_cm`) control channel: the "comm" RC connection
//! through rdma_cm that carries perftest's version, system data, MTU,
//! barrier, key and report messages as plain SENDs, so that `rverbs perf
//! -R` interoperates with perftest's `ib_*_bw -R` and `ib_*_lat -R` (perftest 4.5, version
//! "6.06", as shipped by Debian 12).
//!
//! Every exchange is one SEND each way, strictly alternating: the client
//! sends first, the server answers ([`PtComm::xchg`]). One receive is kept
//! posted and re-posted as soon as it completes, before answering. The
//! encodings are pure functions ([`PtDest`], [`BwFigures`],
//! [`parse_version`], [`mtu_msg`]) with unit tests; every received message
//! has its length checked, every wait is bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs::cm::{CmError, CmEventKind, ConnParams, ConnRequest, Connection, Resolved};
use rverbs::{
    AccessFlags, Cq, Gid, Mr, Mtu, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Wc, WcOpcode,
    WcStatus,
};

use super::wire::Report;

/// The version this side announces: below 6.28, so that a newer perftest
/// does not start its parameter negotiation, and at least 5.70, the
/// oldest perftest accepts.
pub const VERSION: &str = "6.06";
/// The oldest peer version perftest (and so this side) works with.
pub const MIN_PEER_VERSION: f64 = 5.70;
/// Size of the version message (`char version[16]`).
pub const VERSION_LEN: usize = 16;
/// Size of perftest 4.5's `struct pingpong_dest` (up to version 6.28).
pub const DEST_LEN: usize = 56;
/// Size of the newer `struct pingpong_dest` (version 6.29 on), received
/// only.
pub const DEST_LEN_NEW: usize = 64;
/// The longest wait of any one step (connecting, one message).
pub const STEP_TIMEOUT: Duration = Duration::from_secs(30);
/// Address and route resolution time, each (perftest's 2000 ms).
pub const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);
/// The cache line size announced (perftest sends sysconf's L1 line).
pub const CACHE_LINE: i32 = 64;

/// `wr_id` of our sends (perftest's `SYNC_SPEC_ID`).
const SEND_ID: u64 = 5;
/// `wr_id` of our one receive.
const RECV_ID: u64 = 6;
/// Room of the receive: more than any perftest message (its largest, the
/// newer parameter negotiation, is 320 bytes).
const RECV_LEN: usize = 1024;
/// Offset of the send buffer in the MR.
const SEND_OFF: usize = 2048;
/// The largest message we send.
const SEND_LEN: usize = 1024;
/// How long the CQ is waited on before the connections' events are checked.
const POLL_SLICE: Duration = Duration::from_millis(100);

/// The 16 bytes of the version message: [`VERSION`] then NULs.
pub fn version_msg() -> [u8; VERSION_LEN] {
    let mut b = [0u8; VERSION_LEN];
    b[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    b
}

/// The peer's version as C's `atof` reads it: the leading decimal number
/// of the text before the first NUL, 0 if there is none.
pub fn parse_version(b: &[u8]) -> f64 {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let text = String::from_utf8_lossy(&b[..end]);
    let t = text.trim_start();
    let mut dot = false;
    let n = t
        .char_indices()
        .take_while(|&(_, c)| {
            if c == '.' && !dot {
                dot = true;
                true
            } else {
                c.is_ascii_digit()
            }
        })
        .count();
    t[..n].parse().unwrap_or(0.0)
}

/// A big-endian `int` message (perftest's `hton_int`): page size, cache line.
pub fn int_msg(v: i32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Decodes [`int_msg`]; anything but 4 bytes is refused.
pub fn parse_int(b: &[u8]) -> Result<i32> {
    let a: [u8; 4] = b.try_into().map_err(|_| {
        anyhow!(
            "expected a 4-byte number from the peer, got {} bytes",
            b.len()
        )
    })?;
    Ok(i32::from_be_bytes(a))
}

/// The MTU message (peer version 5.31 on): the digit of the `ibv_mtu`
/// code (`'1'` = 256 ... `'5'` = 4096) and a NUL.
pub fn mtu_msg(m: Mtu) -> [u8; 2] {
    [b'0' + m as u8, 0]
}

/// Decodes [`mtu_msg`] (`strtol`'s reading); `None` for a code that is
/// not an MTU. Anything but 2 bytes is refused.
pub fn parse_mtu_msg(b: &[u8]) -> Result<Option<Mtu>> {
    if b.len() != 2 {
        bail!("expected the 2-byte MTU message, got {} bytes", b.len());
    }
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let code: Option<u8> = std::str::from_utf8(&b[..end])
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Ok(code.and_then(Mtu::from_raw))
}

/// perftest's `struct pingpong_dest`, as `rdma_write_keys` sends it (every
/// number big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PtDest {
    /// Port LID (0 on RoCE).
    pub lid: u32,
    /// Outstanding reads (1 for WRITE).
    pub out_reads: u32,
    /// The data QP's number (informational with rdma_cm).
    pub qpn: u32,
    /// A PSN (informational with rdma_cm).
    pub psn: u32,
    /// The rkey of the data buffer: what the client's WRITEs use.
    pub rkey: u32,
    /// The address WRITEs go to.
    pub vaddr: u64,
    /// Data-validation tail markers (newer layout only; 0).
    pub tail_markers_vaddr: u64,
    /// The GID (informational).
    pub gid: Gid,
    /// SRQ number (0).
    pub srqn: u32,
    /// GID index (-1: none).
    pub gid_index: i32,
}

impl PtDest {
    /// The 56-byte form of perftest 4.5 (padding at 20..24 zero).
    pub fn encode(&self) -> [u8; DEST_LEN] {
        let mut b = [0u8; DEST_LEN];
        b[0..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid.0);
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b[52..56].copy_from_slice(&self.gid_index.to_be_bytes());
        b
    }

    /// Decodes a received dest, its layout chosen by its length: 56 bytes
    /// (perftest up to 6.28) or 64 (6.29 on, with the tail markers'
    /// address before the GID). Any other length is refused.
    pub fn decode(b: &[u8]) -> Result<PtDest> {
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        let (tail, gid_at, rest) = match b.len() {
            DEST_LEN => (0, 32, 48),
            DEST_LEN_NEW => (u64_at(32), 40, 56),
            n => bail!(
                "the peer's address message has {n} bytes, expected {DEST_LEN} \
                 (or {DEST_LEN_NEW} from a newer perftest)"
            ),
        };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[gid_at..gid_at + 16]);
        Ok(PtDest {
            lid: u32_at(0),
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64_at(24),
            tail_markers_vaddr: tail,
            gid: Gid(gid),
            srqn: u32_at(rest),
            gid_index: u32_at(rest + 4) as i32,
        })
    }
}

/// The five figures of `xchg_bw_reports` (peer version 5.33 on), in
/// perftest's units: bandwidth in MB/s (2^20 bytes) or, with
/// `--report_gbits`, Gb/s (1.25e8 bytes); the message rate in Mpps.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BwFigures {
    /// Message size.
    pub size: u64,
    /// Iterations (times QPs).
    pub iters: u64,
    /// Peak bandwidth (0 when not measured).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Message rate, Mpps.
    pub msg_rate: f64,
}

impl BwFigures {
    /// The five 8-byte messages: two big-endian integers, then three
    /// doubles byte-swapped to big-endian.
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// Decodes [`BwFigures::encode`]'s messages.
    pub fn decode(m: &[[u8; 8]; 5]) -> BwFigures {
        let f = |b: &[u8; 8]| f64::from_bits(u64::from_be_bytes(*b));
        BwFigures {
            size: u64::from_be_bytes(m[0]),
            iters: u64::from_be_bytes(m[1]),
            bw_peak: f(&m[2]),
            bw_avg: f(&m[3]),
            msg_rate: f(&m[4]),
        }
    }

    /// A report's figures; `unit` is the bytes per second of one unit of
    /// bandwidth (2^20, or 1.25e8 for Gb/s).
    pub fn from_report(r: &Report, unit: f64) -> BwFigures {
        BwFigures {
            size: r.size,
            iters: r.iters,
            bw_peak: if r.has_peak() { r.bw_peak / unit } else { 0.0 },
            bw_avg: r.bw_avg / unit,
            msg_rate: r.msg_rate / 1e6,
        }
    }

    /// Back to a report (bytes and messages per second); the peak counts
    /// as measured when it is positive. A figure that is not finite, or
    /// not once scaled, becomes 0.
    pub fn to_report(&self, unit: f64) -> Report {
        let fin = |v: f64, scale: f64| {
            let s = v * scale;
            if s.is_finite() {
                s
            } else {
                0.0
            }
        };
        let mut r = Report {
            size: self.size,
            iters: self.iters,
            bw_peak: fin(self.bw_peak, unit),
            bw_avg: fin(self.bw_avg, unit),
            msg_rate: fin(self.msg_rate, 1e6),
            ..Default::default()
        };
        if r.bw_avg > 0.0 {
            r.elapsed = fin(r.size as f64 * r.iters as f64, 1.0 / r.bw_avg);
        }
        if r.bw_peak > 0.0 {
            r.flags |= Report::PEAK;
        }
        r
    }
}

/// Whether a connect failure is worth another try: nobody listening yet
/// (rejected), or no answer.
pub fn retryable(e: &rverbs::Error) -> bool {
    matches!(
        e,
        rverbs::Error::Cm(CmError::Rejected { .. } | CmError::Unreachable { .. })
    )
}

/// The comm connection: a small RC QP over rdma_cm, one CQ, one MR with
/// the receive slot and the send buffer.
pub struct PtComm {
    conn: Connection,
    cq: Cq,
    mr: Mr,
    client: bool,
    /// The peer's version, once [`PtComm::versions`] ran.
    pub peer_version: f64,
    /// The active MTU of the comm connection's port (announced to the
    /// peer; 1024 if the port has none).
    pub mtu: Mtu,
    /// The send posted and not yet complete.
    sending: bool,
    /// A message that arrived while we waited for our send's completion
    /// (both completions can come in one poll): the next one received.
    early: Option<Vec<u8>>,
}

/// The verbs objects of the comm QP before it is connected.
struct Parts {
    cq: Cq,
    qp: Qp,
    mr: Mr,
    mtu: Mtu,
}

fn parts(dev: &rverbs::Device, port_num: u8) -> Result<Parts> {
    let ctx = dev.open().context("opening the RDMA device (comm QP)")?;
    let mtu = ctx
        .query_port(port_num)
        .with_context(|| format!("couldn't query port {port_num}"))?
        .active_mtu()
        .unwrap_or(Mtu::Mtu1024);
    let pd = ctx.alloc_pd().context("ibv_alloc_pd (comm QP)")?;
    let ch = ctx
        .create_comp_channel()
        .context("ibv_create_comp_channel (comm QP)")?;
    let cq = ctx
        .create_cq_with(8, Some(&ch), 0)
        .context("ibv_create_cq (comm QP)")?;
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap {
            max_send_wr: 2,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }))
        .context("rdma_create_qp (comm QP)")?;
    let mr = pd
        .alloc_mr(SEND_OFF + SEND_LEN, AccessFlags::LOCAL_WRITE)
        .context("registering the comm buffer")?;
    Ok(Parts { cq, qp, mr, mtu })
}

fn post_recv(qp: &mut Qp, mr: &Mr) -> Result<()> {
    let sge = [mr.sge(0..RECV_LEN)?];
    qp.post_recv(&[RecvWr::new(RECV_ID, &sge)])
        .context("posting the comm receive")
}

/// The parameters of the comm connection (perftest's: no READs, 7 RNR
/// retries).
fn comm_params(retry_count: u8) -> ConnParams {
    ConnParams {
        private_data: Vec::new(),
        responder_resources: 0,
        initiator_depth: 0,
        retry_count,
        rnr_retry_count: 7,
        timeout: STEP_TIMEOUT,
    }
}

impl PtComm {
    /// Client: connects the comm QP to `dst`; a refused or unanswered
    /// request is retried for up to `patience` (the server may not be
    /// listening yet).
    pub fn connect(dst: SocketAddr, retry_count: u8, patience: Duration) -> Result<PtComm> {
        let until = Instant::now() + patience;
        loop {
            let id = Resolved::resolve(dst, RESOLVE_TIMEOUT)
                .with_context(|| format!("resolving {dst} through rdma_cm"))?;
            let Parts {
                cq,
                mut qp,
                mr,
                mtu,
            } = parts(id.device(), id.port_num())?;
            id.init_qp(&mut qp).context("moving the comm QP to INIT")?;
            post_recv(&mut qp, &mr)?;
            match id.connect(qp, &comm_params(retry_count)) {
                Ok(conn) => {
                    return Ok(PtComm {
                        conn,
                        cq,
                        mr,
                        client: true,
                        peer_version: 0.0,
                        mtu,
                        sending: false,
                        early: None,
                    })
                }
                Err(e) if retryable(&e) && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("connecting to {dst} (rdma_cm)"));
                }
            }
        }
    }

    /// Server: accepts the comm connection request `req`.
    pub fn accept(req: ConnRequest, retry_count: u8) -> Result<PtComm> {
        let Parts {
            cq,
            mut qp,
            mr,
            mtu,
        } = parts(req.device(), req.port_num())?;
        req.init_qp(&mut qp).context("moving the comm QP to INIT")?;
        post_recv(&mut qp, &mr)?;
        let conn = req
            .accept(qp, &comm_params(retry_count))
            .context("accepting the comm connection (rdma_accept)")?;
        Ok(PtComm {
            conn,
            cq,
            mr,
            client: false,
            peer_version: 0.0,
            mtu,
            sending: false,
            early: None,
        })
    }

    /// Whether this is the client side (which sends first).
    pub fn is_client(&self) -> bool {
        self.client
    }

    /// Sends `msg` and waits (at most `limit`) for its completion.
    pub fn send(&mut self, msg: &[u8], limit: Duration) -> Result<()> {
        if msg.len() > SEND_LEN {
            bail!("internal: a {}-byte comm message", msg.len());
        }
        self.mr.write_at(SEND_OFF, msg)?;
        let sge = [self.mr.sge(SEND_OFF..SEND_OFF + msg.len())?];
        self.conn
            .qp_mut()
            .post_send(&[SendWr::send(SEND_ID, &sge).signaled()])
            .context("posting a comm send")?;
        self.sending = true;
        self.wait(
            false,
            Some(limit),
            None,
            "the completion of a message to the peer",
        )?;
        Ok(())
    }

    /// Waits for the peer's next message (at most `limit`; `None`: no
    /// limit) and returns it, the receive re-posted. `data`: a second
    /// connection whose disconnection also ends the wait.
    pub fn recv(
        &mut self,
        limit: Option<Duration>,
        data: Option<&mut Connection>,
        what: &str,
    ) -> Result<Vec<u8>> {
        self.wait(true, limit, data, what)?
            .ok_or_else(|| anyhow!("internal: no message"))
    }

    /// One exchange: the client sends `mine` then receives, the server
    /// receives then answers with `mine`. The peer's message must have
    /// one of the lengths `want`.
    pub fn xchg(&mut self, mine: &[u8], want: &[usize], what: &str) -> Result<Vec<u8>> {
        let theirs = if self.client {
            self.send(mine, STEP_TIMEOUT)
                .with_context(|| format!("sending {what}"))?;
            self.recv(Some(STEP_TIMEOUT), None, what)?
        } else {
            let t = self.recv(Some(STEP_TIMEOUT), None, what)?;
            self.send(mine, STEP_TIMEOUT)
                .with_context(|| format!("sending {what}"))?;
            t
        };
        check_len(&theirs, want, what)?;
        Ok(theirs)
    }

    /// Exchanges versions; refuses a peer older than [`MIN_PEER_VERSION`].
    pub fn versions(&mut self) -> Result<f64> {
        let b = self.xchg(&version_msg(), &[VERSION_LEN], "the version")?;
        let v = parse_version(&b);
        if v < MIN_PEER_VERSION {
            bail!(
                "the peer announces perftest version {:?}: versions older than 5.70 are not supported",
                String::from_utf8_lossy(&b[..b.iter().position(|&c| c == 0).unwrap_or(b.len())])
            );
        }
        self.peer_version = v;
        Ok(v)
    }

    /// Exchanges an `int` (page size, cache line size).
    pub fn xchg_int(&mut self, v: i32, what: &str) -> Result<i32> {
        parse_int(&self.xchg(&int_msg(v), &[4], what)?)
    }

    /// Exchanges the MTU codes; the peer's (`None` if not an MTU).
    pub fn xchg_mtu(&mut self, m: Mtu) -> Result<Option<Mtu>> {
        parse_mtu_msg(&self.xchg(&mtu_msg(m), &[2], "the MTU")?)
    }

    /// `ctx_hand_shake`: exchanges dests (the barriers send all zeros).
    pub fn hand_shake(&mut self, mine: &PtDest, what: &str) -> Result<PtDest> {
        let b = self.xchg(&mine.encode(), &[DEST_LEN, DEST_LEN_NEW], what)?;
        PtDest::decode(&b)
    }

    /// `xchg_bw_reports`: five 8-byte exchanges; the peer's figures.
    pub fn bw_reports(&mut self, mine: &BwFigures) -> Result<BwFigures> {
        let mut theirs = [[0u8; 8]; 5];
        for (i, m) in mine.encode().iter().enumerate() {
            let b = self.xchg(m, &[8], "the results")?;
            theirs[i].copy_from_slice(&b);
        }
        Ok(BwFigures::decode(&theirs))
    }

    /// Waits for the send to complete (if one is outstanding) and, with
    /// `want_recv`, for a message. Fails on a disconnection of the comm
    /// connection or of `data`, on an error completion, after `limit`.
    fn wait(
        &mut self,
        want_recv: bool,
        limit: Option<Duration>,
        mut data: Option<&mut Connection>,
        what: &str,
    ) -> Result<Option<Vec<u8>>> {
        let deadline = limit.and_then(|l| Instant::now().checked_add(l));
        let mut wc = [Wc::default(); 4];
        let mut got: Option<Vec<u8>> = if want_recv { self.early.take() } else { None };
        loop {
            if !self.sending && (got.is_some() || !want_recv) {
                return Ok(got);
            }
            let slice = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        bail!(
                            "timed out after {}s waiting for {what}",
                            limit.map_or(0, |l| l.as_secs())
                        );
                    }
                    left.min(POLL_SLICE)
                }
                None => POLL_SLICE,
            };
            let n = match self.cq.poll_blocking(&mut wc, slice) {
                Ok(n) => n,
                Err(rverbs::Error::Timeout(_)) => 0,
                Err(e) => return Err(anyhow!(e).context("polling the comm CQ")),
            };
            if n == 0 {
                if gone(&mut self.conn)? {
                    bail!("the peer closed the comm connection while we waited for {what}");
                }
                if let Some(d) = data.as_deref_mut() {
                    if gone(d)? {
                        bail!("the peer closed the data connection while we waited for {what}");
                    }
                }
                continue;
            }
            for w in &wc[..n] {
                if w.status() == WcStatus::WR_FLUSH_ERR {
                    bail!("the comm connection broke (work flushed) while we waited for {what}");
                }
                if !w.is_success() {
                    bail!(
                        "comm {} completed with status {} ({}) while we waited for {what}",
                        if w.wr_id() == SEND_ID {
                            "send"
                        } else {
                            "receive"
                        },
                        w.status().0,
                        w.status().as_str()
                    );
                }
                match w.wr_id() {
                    SEND_ID if w.opcode() == WcOpcode::SEND => {
                        if !self.sending {
                            bail!("a comm send completed that was not posted");
                        }
                        self.sending = false;
                    }
                    RECV_ID if w.opcode() == WcOpcode::RECV => {
                        let len = w.byte_len() as usize;
                        if len > RECV_LEN {
                            bail!(
                                "the peer sent {len} bytes, more than our {RECV_LEN}-byte receive"
                            );
                        }
                        if got.is_some() || self.early.is_some() {
                            bail!("out of step: the peer sent a message out of turn ({len} bytes)");
                        }
                        let mut b = vec![0u8; len];
                        self.mr.read_at(0, &mut b)?;
                        post_recv(self.conn.qp_mut(), &self.mr)?;
                        if want_recv {
                            got = Some(b);
                        } else {
                            self.early = Some(b);
                        }
                    }
                    id => bail!(
                        "unexpected comm completion: wr_id {id}, opcode {:?}",
                        w.opcode()
                    ),
                }
            }
        }
    }
}

/// Whether `conn` was disconnected (its pending events read, none waited
/// for); an error on a device removal.
pub fn gone(conn: &mut Connection) -> Result<bool> {
    if conn.is_disconnected() {
        return Ok(true);
    }
    while let Some(ev) = conn
        .next_event(Some(Duration::ZERO))
        .context("reading rdma_cm events")?
    {
        match ev.kind() {
            CmEventKind::Disconnected => return Ok(true),
            CmEventKind::DeviceRemoval => bail!("the RDMA device was removed"),
            _ => {}
        }
    }
    Ok(false)
}

/// Disconnects `conn` and waits up to `limit` for the peer's side of it
/// (`Disconnected`): true if it came.
pub fn disconnect_and_wait(conn: &mut Connection, limit: Duration) -> Result<bool> {
    let deadline = Instant::now() + limit;
    conn.disconnect().context("rdma_disconnect")?;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        match conn
            .next_event(Some(left))
            .context("reading rdma_cm events")?
        {
            Some(ev) if ev.kind() == CmEventKind::Disconnected => return Ok(true),
            Some(ev) if ev.kind() == CmEventKind::DeviceRemoval => {
                bail!("the RDMA device was removed")
            }
            Some(_) => {}
            None => return Ok(false),
        }
    }
}

fn check_len(b: &[u8], want: &[usize], what: &str) -> Result<()> {
    if !want.contains(&b.len()) {
        let w: Vec<String> = want.iter().map(|n| n.to_string()).collect();
        bail!(
            "out of step with the peer: {what} came as {} bytes, expected {} \
             (is the peer perftest 4.5's `-R` or `rverbs perf -R`, running the same test?)",
            b.len(),
            w.join(" or ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_message_and_atof() {
        let m = version_msg();
        assert_eq!(&m[..5], b"6.06\0");
        assert!(m[4..].iter().all(|&c| c == 0));
        assert_eq!(parse_version(&m), 6.06);
        assert_eq!(parse_version(b"6.29\0garbage\0\0\0\0"), 6.29);
        assert_eq!(parse_version(b"5.70"), 5.70);
        assert_eq!(parse_version(b" 6.1.2x"), 6.1);
        assert_eq!(parse_version(b"\0\0"), 0.0);
        assert_eq!(parse_version(b"abc"), 0.0);
    }

    #[test]
    fn ints_and_mtu() {
        assert_eq!(int_msg(4096), [0, 0, 0x10, 0]);
        assert_eq!(parse_int(&[0, 0, 0x10, 0]).unwrap(), 4096);
        assert!(parse_int(&[1, 2, 3]).is_err());
        assert_eq!(mtu_msg(Mtu::Mtu1024), *b"3\0");
        assert_eq!(mtu_msg(Mtu::Mtu4096), *b"5\0");
        assert_eq!(parse_mtu_msg(b"3\0").unwrap(), Some(Mtu::Mtu1024));
        assert_eq!(parse_mtu_msg(b"1\0").unwrap(), Some(Mtu::Mtu256));
        assert_eq!(parse_mtu_msg(b"9\0").unwrap(), None);
        assert!(parse_mtu_msg(b"3\0\0\0").is_err());
    }

    fn sample() -> PtDest {
        PtDest {
            lid: 0,
            out_reads: 1,
            qpn: 0x11,
            psn: 0x5a3b1c,
            rkey: 0x1234_5678,
            vaddr: 0x7f01_0203_0400,
            tail_markers_vaddr: 0,
            gid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]),
            srqn: 0,
            gid_index: 1,
        }
    }

    #[test]
    fn dest_layout_is_perftest_4_5() {
        let d = sample();
        let b = d.encode();
        assert_eq!(b.len(), 56);
        assert_eq!(&b[0..4], &[0, 0, 0, 0]);
        assert_eq!(&b[4..8], &[0, 0, 0, 1]);
        assert_eq!(&b[8..12], &[0, 0, 0, 0x11]);
        assert_eq!(&b[12..16], &[0, 0x5a, 0x3b, 0x1c]);
        assert_eq!(&b[16..20], &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(&b[20..24], &[0, 0, 0, 0]);
        assert_eq!(&b[24..32], &[0, 0, 0x7f, 1, 2, 3, 4, 0]);
        assert_eq!(&b[32..48], &d.gid.0);
        assert_eq!(&b[48..52], &[0, 0, 0, 0]);
        assert_eq!(&b[52..56], &[0, 0, 0, 1]);
        assert_eq!(PtDest::decode(&b).unwrap(), d);
        let none = PtDest { gid_index: -1, ..d };
        assert_eq!(&none.encode()[52..56], &[0xff; 4]);
        assert_eq!(PtDest::decode(&none.encode()).unwrap().gid_index, -1);
        // The barrier: all zero.
        assert_eq!(PtDest::default().encode(), [0u8; 56]);
    }

    #[test]
    fn dest_of_a_newer_perftest_decodes_by_length() {
        let d = sample();
        let mut b = [0u8; 64];
        let old = d.encode();
        b[..32].copy_from_slice(&old[..32]);
        b[32..40].copy_from_slice(&0x99u64.to_be_bytes());
        b[40..56].copy_from_slice(&d.gid.0);
        b[56..60].copy_from_slice(&7u32.to_be_bytes());
        b[60..64].copy_from_slice(&2u32.to_be_bytes());
        let n = PtDest::decode(&b).unwrap();
        assert_eq!((n.rkey, n.vaddr, n.gid), (d.rkey, d.vaddr, d.gid));
        assert_eq!((n.tail_markers_vaddr, n.srqn, n.gid_index), (0x99, 7, 2));
        for len in [0, 55, 57, 63, 65, 312] {
            let e = PtDest::decode(&vec![0u8; len]).unwrap_err().to_string();
            assert!(e.contains(&format!("{len} bytes")), "{e}");
        }
    }

    #[test]
    fn reports_are_big_endian_doubles() {
        let f = BwFigures {
            size: 65536,
            iters: 5000,
            bw_peak: 1234.5,
            bw_avg: 1200.0,
            msg_rate: 0.0192,
        };
        let m = f.encode();
        assert_eq!(m[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(m[1], [0, 0, 0, 0, 0, 0, 0x13, 0x88]);
        // 1200.0 = 0x4092C00000000000
        assert_eq!(m[3], [0x40, 0x92, 0xc0, 0, 0, 0, 0, 0]);
        assert_eq!(BwFigures::decode(&m), f);
    }

    #[test]
    fn reports_convert_units() {
        let mib = 1048576.0;
        let r = Report {
            size: 4096,
            iters: 1000,
            bw_avg: 100.0 * mib,
            bw_peak: 150.0 * mib,
            msg_rate: 25600.0,
            flags: Report::PEAK,
            ..Default::default()
        };
        let f = BwFigures::from_report(&r, mib);
        assert_eq!((f.size, f.iters), (4096, 1000));
        assert!((f.bw_avg - 100.0).abs() < 1e-9 && (f.bw_peak - 150.0).abs() < 1e-9);
        assert!((f.msg_rate - 0.0256).abs() < 1e-12);
        let back = f.to_report(mib);
        assert!(back.has_peak());
        assert!((back.bw_avg - r.bw_avg).abs() < 1e-3);
        assert!((back.msg_rate - r.msg_rate).abs() < 1e-6);
        let nopeak = BwFigures::from_report(&Report { flags: 0, ..r }, mib);
        assert_eq!(nopeak.bw_peak, 0.0);
        assert!(!nopeak.to_report(mib).has_peak());
        let junk = BwFigures {
            bw_avg: f64::NAN,
            bw_peak: f64::INFINITY,
            ..f
        };
        let j = junk.to_report(mib);
        assert_eq!((j.bw_avg, j.bw_peak), (0.0, 0.0));
    }

    #[test]
    fn lengths_are_checked() {
        assert!(check_len(&[0; 8], &[8], "x").is_ok());
        let e = check_len(&[0; 7], &[56, 64], "the keys")
            .unwrap_err()
            .to_string();
        assert!(e.contains("7 bytes, expected 56 or 64"), "{e}");
    }
}
