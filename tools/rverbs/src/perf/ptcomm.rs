//! perftest's `-R` (`--rdma_cm`) control channel: the "comm" RC connection
//! through rdma_cm that carries perftest's version, system data, MTU,
//! barrier, key and report messages as plain SENDs, so that `rverbs perf
//! -R` interoperates with perftest's `ib_*_bw -R` and `ib_*_lat -R` (perftest 4.5, version
//! "6.06", as shipped by Debian 12).
//!
//! Every message is one SEND, strictly alternating: the client sends
//! first, the server answers (`Channel::xchg`). One receive is kept
//! posted and re-posted as soon as it completes, before answering. The
//! messages are [`super::ptmsg`]'s (the keys in their binary form); every
//! received message has its length checked, every wait is bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs::{
    AccessFlags, Cq, Mr, Mtu, Qp, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Wc, WcOpcode, WcStatus,
};
use rverbs_cm::{CmError, CmEventKind, ConnParams, ConnRequest, Connection, Resolved};

use super::exchange::{Channel, STEP_TIMEOUT};
use super::ptmsg::{check_len, PtDest, DEST_LEN, DEST_LEN_NEW};

/// Address and route resolution time, each (perftest's 2000 ms).
pub const RESOLVE_TIMEOUT: Duration = Duration::from_millis(2000);

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
            mtu,
            sending: false,
            early: None,
        })
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

impl Channel for PtComm {
    fn is_client(&self) -> bool {
        self.client
    }

    fn send_msg(&mut self, msg: &[u8], what: &str) -> Result<()> {
        self.send(msg, STEP_TIMEOUT)
            .with_context(|| format!("sending {what}"))
    }

    fn recv_msg(&mut self, len: usize, what: &str) -> Result<Vec<u8>> {
        let b = self.recv(Some(STEP_TIMEOUT), None, what)?;
        check_len(&b, &[len], what)?;
        Ok(b)
    }

    fn send_dest(&mut self, d: &PtDest, what: &str) -> Result<()> {
        self.send_msg(&d.encode(), what)
    }

    fn recv_dest(
        &mut self,
        limit: Option<Duration>,
        data: Option<&mut Connection>,
        what: &str,
    ) -> Result<PtDest> {
        let b = self.recv(limit, data, what)?;
        check_len(&b, &[DEST_LEN, DEST_LEN_NEW], what)?;
        PtDest::decode(&b).with_context(|| what.to_string())
    }

    fn after_close(&mut self) {}
}
