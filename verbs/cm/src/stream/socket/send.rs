//! Sending: waiting for room and writing data into the peer's buffers.

use std::io::{self, IoSlice};
use std::time::Duration;

use super::{next_xfer, Room, Socket, Until, OLAP_START_SIZE, SNDLOWAT};
use crate::stream::wire::{Msg, Op, RsSge, SGL_SIZE};
use rverbs::opcode::Write;
use rverbs::Sge;

impl Socket {
    // ---- sending ----

    pub(super) fn can_send(&self) -> bool {
        self.sqe_avail > 0
            && self.sbuf_bytes_avail >= SNDLOWAT
            && self.sseq_no != self.sseq_comp
            && self.target_entry(self.target_sge).length != 0
    }

    /// Whether a message can go: at once, after taking completions and
    /// granting credits, or (when nothing of this write went yet,
    /// `sent == 0`) after waiting for room; `Stop` when a write that
    /// already sent something would have to wait, or the write side
    /// closed meanwhile.
    pub(super) fn room(&mut self, sent: usize, timeout: Option<Duration>) -> io::Result<Room> {
        if self.can_send() {
            return Ok(Room::Now);
        }
        self.poll_cq()?;
        self.update_credits()?;
        if self.can_send() {
            return Ok(Room::Now);
        }
        if sent > 0 {
            return Ok(Room::Stop);
        }
        self.wait(Until::Writable, timeout)?;
        Ok(if self.writable {
            Room::AfterWait
        } else {
            Room::Stop
        })
    }

    /// Sends what it can of `buf` (all of it, unless the peer's credits or
    /// buffer grants run out after part of it went): blocks (or fails
    /// with `WouldBlock`) only when nothing can go at once.
    pub(in crate::stream) fn send(
        &mut self,
        buf: &[u8],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.iomap_pending {
            self.send_iomaps(timeout)?;
        }
        let mut sent = 0usize;
        let mut olen = OLAP_START_SIZE;
        while sent < buf.len() {
            if !self.writable {
                break;
            }
            match self.room(sent, timeout)? {
                Room::Now | Room::AfterWait => {}
                Room::Stop => break,
            }
            let left = u32::try_from(buf.len() - sent).unwrap_or(u32::MAX);
            let mut xfer = next_xfer(&mut olen, left);
            let t = self.target_entry(self.target_sge);
            xfer = xfer.min(self.sbuf_bytes_avail).min(t.length);
            let data = &buf[sent..sent + xfer as usize];
            self.write_data(data, t)?;
            sent += xfer as usize;
        }
        if sent == 0 {
            return Err(self.write_error());
        }
        Ok(sent)
    }

    /// Why nothing can be written.
    pub(in crate::stream) fn write_error(&self) -> io::Error {
        match &self.fault {
            Some(f) => f.to_io(),
            None => io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the stream is closed for writing",
            ),
        }
    }

    /// One data message of `data` into the target entry `t` (the current
    /// one), inline or through the send buffer.
    fn write_data(&mut self, data: &[u8], t: RsSge) -> io::Result<()> {
        let len = data.len() as u32;
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= len;
        // Consume the grant before sending (the peer may rewrite the
        // entry once it sees the data).
        let i = self.target_sge;
        self.set_target_entry(
            i,
            RsSge {
                addr: t.addr.wrapping_add(u64::from(len)),
                key: t.key,
                length: t.length - len,
            },
        );
        if t.length == len {
            self.target_sge = (self.target_sge + 1) % SGL_SIZE;
        }
        let imm = Msg::new(Op::Data, len).imm();
        self.post_write(data, t.addr, t.key, Some(imm), u64::from(imm))
            .map_err(|e| self.local("post data", e))
    }

    /// An RDMA WRITE of `data` to `addr` under `key` (with `imm` if
    /// given): inline up to the inline size, else copied into the send
    /// buffer's ring, wrapping into a second gather entry at its end. The
    /// caller took the ring space (`sbuf_bytes_avail`).
    pub(super) fn post_write(
        &mut self,
        data: &[u8],
        addr: u64,
        key: u32,
        imm: Option<u32>,
        wr_id: u64,
    ) -> rverbs::Result<()> {
        let len = data.len() as u32;
        if len <= self.sizes.sq_inline {
            let bufs = [IoSlice::new(data)];
            let mut w = Write::inline(wr_id, &bufs, addr, key);
            if let Some(imm) = imm {
                w = w.imm(imm);
            }
            return Ok(self.conn.qp_mut().post_send(&[w.build()])?);
        }
        let at = self.shead;
        let room = self.sizes.sbuf_size - at;
        let first = len.min(room);
        let (a, b) = data.split_at(first as usize);
        let _ = self.sbuf.write_at(at as usize, a);
        let _ = self.sbuf.write_at(0, b);
        self.shead = if first == room { len - first } else { at + len };
        let sges: [Sge; 2] = [
            self.sbuf.sge(at as usize..(at + first) as usize)?,
            self.sbuf.sge(0..(len - first) as usize)?,
        ];
        let n = if b.is_empty() { 1 } else { 2 };
        let mut w = Write::new(wr_id, &sges[..n], addr, key);
        if let Some(imm) = imm {
            w = w.imm(imm);
        }
        Ok(self.conn.qp_mut().post_send(&[w.build()])?)
    }
}
