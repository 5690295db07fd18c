//! Credits (granting receive buffers to the peer) and waiting for a
//! condition: the CQ, the completion channel and CM events.

use std::io::{self, IoSlice};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::fault::Fault;
use super::{coarse_now, sleep_on, Socket, Until, CM_CHECK_EVERY, MAX_CTRL_MSG, QP_CTRL_SIZE};
use crate::stream::wire::{Ctrl, Msg, Op, RsSge, SGE_LEN};
use crate::CmEventKind;
use rverbs::opcode::Write;
use rverbs::CompChannel;

impl Socket {
    // ---- credits ----

    pub(super) fn ctrl_avail(&self) -> bool {
        self.ctrl_seqno != self.ctrl_max_seqno
    }

    fn give_credits(&self) -> bool {
        self.rx.credits_due() && self.ctrl_avail() && self.connected
    }

    pub(super) fn update_credits(&mut self) -> io::Result<()> {
        if self.give_credits() {
            self.send_credits()?;
        }
        Ok(())
    }

    /// Grants the next half of the receive buffer if it is free (a
    /// descriptor written into the peer's target list), or credits alone.
    fn send_credits(&mut self) -> io::Result<()> {
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        let g = self.rx.grant();
        let imm = Msg::new(Op::Sgl, g.credits).imm();
        let r = match g.buf {
            Some((at, len)) => {
                let sge = RsSge {
                    addr: self.rbuf.iova() + u64::from(at),
                    key: self.rbuf.rkey(),
                    length: len,
                };
                let r = self.post_grant(sge, imm);
                self.remote_sge += 1;
                if self.remote_sge >= self.remote_sgl.length {
                    self.remote_sge = 0;
                }
                r
            }
            None => self.post_msg(imm),
        };
        r.map_err(|e| self.local("post a credit grant", e))
    }

    /// Writes `sge` into the peer's target list (its next entry, in its
    /// byte order) with `imm`: inline, or from a control slot of the send
    /// buffer when the inline size is too small.
    fn post_grant(&mut self, sge: RsSge, imm: u32) -> rverbs::Result<()> {
        let bytes = sge.to_bytes(self.peer_net);
        let remote = self
            .remote_sgl
            .addr
            .wrapping_add(u64::from(self.remote_sge) * SGE_LEN as u64);
        let rkey = self.remote_sgl.key;
        if self.sizes.sq_inline >= MAX_CTRL_MSG {
            let bufs = [IoSlice::new(&bytes)];
            let wr = Write::inline(u64::from(imm), &bufs, remote, rkey)
                .imm(imm)
                .build();
            return Ok(self.conn.qp_mut().post_send(&[wr])?);
        }
        let at = self.sizes.sbuf_size + MAX_CTRL_MSG * (self.ctrl_seqno & (QP_CTRL_SIZE - 1));
        self.sbuf.write_at(at as usize, &bytes)?;
        let sges = [self.sbuf.sge(at as usize..(at + MAX_CTRL_MSG) as usize)?];
        let wr = Write::new(u64::from(imm), &sges, remote, rkey)
            .imm(imm)
            .build();
        Ok(self.conn.qp_mut().post_send(&[wr])?)
    }

    /// A message with no payload: a zero-length RDMA WRITE carrying `imm`.
    pub(super) fn post_msg(&mut self, imm: u32) -> rverbs::Result<()> {
        let wr = Write::new(u64::from(imm), &[], 0, 0).imm(imm).build();
        Ok(self.conn.qp_mut().post_send(&[wr])?)
    }

    // ---- waiting ----

    fn test(&self, u: Until) -> bool {
        match u {
            Until::Readable => self.rx.has_data() || !self.readable,
            Until::Writable => self.can_send() || !self.writable,
            Until::CtrlSlot => self.ctrl_avail() || !self.connected,
            Until::SendsDone => {
                self.ctrl_max_seqno.wrapping_sub(self.ctrl_seqno) + self.sqe_avail
                    == self.sizes.sq_size
                    || !self.connected
            }
        }
    }

    /// Polls and grants credits until `u` holds: returns at once without
    /// waiting when non-blocking (`WouldBlock`), fails with `TimedOut`
    /// after `timeout`. Sleeps on the CQ's channel and the connection's
    /// rdma_cm fd together, so a peer that vanishes (its rdma_cm
    /// disconnects) wakes the wait.
    pub(super) fn wait(&mut self, u: Until, timeout: Option<Duration>) -> io::Result<()> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut armed = false;
        loop {
            self.update_credits()?;
            self.poll_cq()?;
            self.update_credits()?;
            if self.test(u) {
                return Ok(());
            }
            if self.nonblocking {
                // A caller spinning on WouldBlock must still learn that
                // the peer vanished: look at the rdma_cm fd now and then
                // (every time if the clock cannot be read).
                let now = coarse_now();
                let due = now.is_none_or(|t| t.saturating_sub(self.cm_checked) >= CM_CHECK_EVERY);
                if due {
                    self.cm_checked = now.unwrap_or_default();
                    self.on_cm_event()?;
                    if self.test(u) {
                        return Ok(());
                    }
                }
                return Err(io::ErrorKind::WouldBlock.into());
            }
            if !armed {
                // A completion after this raises an event; poll once more
                // for one that came before.
                self.arm()?;
                armed = true;
                continue;
            }
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "the stream's timeout passed",
                        ));
                    }
                    Some(left)
                }
                None => None,
            };
            // With keep-alive on, a quiet wait probes the peer every
            // interval: a probe that cannot be delivered fails (transport
            // retries exhausted), which ends the stream.
            let nap = match (self.keepalive, left) {
                (Some(k), Some(l)) => Some(k.min(l)),
                (Some(k), None) => Some(k),
                (None, l) => l,
            };
            let (cq_ready, cm_ready) = self.sleep(nap)?;
            if !cq_ready && !cm_ready && self.keepalive.is_some() {
                self.send_probe()?;
            }
            if cq_ready {
                // The next round re-arms.
                self.drain_cq_events()?;
                armed = false;
            }
            if cm_ready {
                self.on_cm_event()?;
            }
        }
    }

    /// Sends a keep-alive probe (rsockets' form: a zero-length RDMA WRITE
    /// without immediate, so the peer's receives are not touched) if a
    /// control slot is free and the connection is up.
    pub(in crate::stream) fn send_probe(&mut self) -> io::Result<()> {
        if !self.connected || !self.ctrl_avail() {
            return Ok(());
        }
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        let id = Msg::new(Op::Ctrl, Ctrl::Keepalive as u32).imm();
        let wr = Write::new(u64::from(id), &[], 0, 0).build();
        self.conn
            .qp_mut()
            .post_send(&[wr])
            .map_err(|e| self.local("post a keep-alive probe", e.into()))
    }

    /// Arms the CQ: its next completion raises an event on the channel.
    pub(in crate::stream) fn arm(&mut self) -> io::Result<()> {
        self.cq
            .req_notify(false)
            .map_err(|e| self.local("arm the stream's CQ", e))
    }

    /// Reads every event queued on the CQ's channel.
    pub(in crate::stream) fn drain_cq_events(&mut self) -> io::Result<()> {
        loop {
            match self.chan.try_get_event() {
                Ok(Some(_)) => {}
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.local("read the CQ's event", e)),
            }
        }
    }

    /// The CQ's channel (for a waiter that sleeps on it without the
    /// socket: an async runtime, another handle's thread).
    pub(in crate::stream) fn chan(&self) -> &CompChannel {
        &self.chan
    }

    /// Sleeps until the channel or the rdma_cm fd is readable (or `left`
    /// passes).
    fn sleep(&self, left: Option<Duration>) -> io::Result<(bool, bool)> {
        let [cq, cm] = sleep_on([self.chan.as_fd(), self.conn.cm_fd()], left)?;
        Ok((cq, cm))
    }

    /// What a waiter of another thread may be waiting to see change (a
    /// direction closing, the connection ending): compared before and
    /// after a call to know whether to wake it.
    pub(in crate::stream) fn status(&self) -> (bool, bool, bool, bool) {
        (
            self.readable,
            self.writable,
            self.connected,
            self.fault.is_some(),
        )
    }

    /// Takes the connection's pending rdma_cm events. A disconnect (or
    /// the device's removal) ends the stream: what already arrived stays
    /// readable; a direction the peer had not closed reports a reset.
    pub(in crate::stream) fn on_cm_event(&mut self) -> io::Result<()> {
        loop {
            let ev = match self.conn.next_event(Some(Duration::ZERO)) {
                Ok(Some(ev)) => ev,
                Ok(None) => return Ok(()),
                Err(e) => return Err(self.local("read the stream's rdma_cm event", e)),
            };
            if matches!(
                ev.kind(),
                CmEventKind::Disconnected | CmEventKind::DeviceRemoval
            ) {
                // Messages that arrived before the disconnect count.
                self.poll_cq()?;
                if self.readable || self.writable {
                    // Data that arrived stays readable before the error.
                    self.fail(Fault::Reset);
                }
                self.connected = false;
            }
        }
    }
}
