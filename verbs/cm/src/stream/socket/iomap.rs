//! Direct placement (rsockets' `riomap` / `riowrite`): mapping local
//! memory for the peer and writing into the peer's mappings.

use std::io::{self};
use std::time::Duration;

use super::{next_xfer, IoMap, MapSlot, Room, Socket, OLAP_START_SIZE};
use crate::stream::wire::{self, Iomap, Msg, Op, RsSge, IOMAP_LEN, SGE_LEN, SGL_SIZE};

impl Socket {
    // ---- direct placement (rsockets' iomap) ----

    /// The PD every MR of this stream is registered on.
    pub(in crate::stream) fn pd(&self) -> &rverbs::Pd {
        self.rbuf.pd()
    }

    /// Offers the peer `len` bytes at `addr` under `rkey` (an MR of this
    /// stream's PD the caller checked), addressed from `offset`: the
    /// peer's first free entry gets the descriptor, sent at once if a
    /// message can go without waiting, else before the next data.
    pub(in crate::stream) fn iomap(
        &mut self,
        addr: u64,
        rkey: u32,
        len: u32,
        offset: u64,
    ) -> io::Result<IoMap> {
        let Some(index) =
            (0..self.remote_iomap.length).find(|i| self.iomaps.iter().all(|m| m.index != *i))
        else {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "every direct-placement entry the peer offers is in use ({})",
                    self.remote_iomap.length
                ),
            ));
        };
        let map = Iomap {
            offset,
            sge: RsSge {
                addr,
                key: rkey,
                length: len,
            },
        };
        self.iomaps.push(MapSlot {
            index,
            map,
            sent: false,
        });
        self.iomap_pending = true;
        // Out now if that needs no wait; a failure to send stays for the
        // next write to report.
        let _ = self.poll_cq();
        let _ = self.try_send_iomaps();
        Ok(IoMap { index, offset, len })
    }

    /// Frees the peer's entry `m` held (a later mapping may take it).
    pub(in crate::stream) fn iounmap(&mut self, m: IoMap) -> io::Result<()> {
        let Some(at) = self
            .iomaps
            .iter()
            .position(|s| s.index == m.index && s.map.offset == m.offset)
        else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a mapping of this stream",
            ));
        };
        self.iomaps.swap_remove(at);
        self.iomap_pending = self.iomaps.iter().any(|s| !s.sent);
        Ok(())
    }

    /// Sends the descriptors not sent yet that can go without waiting.
    fn try_send_iomaps(&mut self) -> io::Result<()> {
        while self.iomap_pending && self.writable && self.can_send() {
            self.send_one_iomap()?;
        }
        Ok(())
    }

    /// Sends every descriptor not sent yet, waiting for room as a write
    /// does.
    pub(super) fn send_iomaps(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        while self.iomap_pending {
            if !self.writable {
                return Err(self.write_error());
            }
            if self.room(0, timeout)? == Room::Stop {
                return Err(self.write_error());
            }
            self.send_one_iomap()?;
        }
        Ok(())
    }

    /// The first unsent descriptor, written into the peer's entry with
    /// its index as the immediate (as rsockets' `riomap` does: a credit
    /// and 24 bytes of the send buffer).
    fn send_one_iomap(&mut self) -> io::Result<()> {
        let Some(slot) = self.iomaps.iter_mut().find(|s| !s.sent) else {
            self.iomap_pending = false;
            return Ok(());
        };
        slot.sent = true;
        let slot = *slot;
        self.iomap_pending = self.iomaps.iter().any(|s| !s.sent);
        self.sseq_no = self.sseq_no.wrapping_add(1);
        self.sqe_avail -= 1;
        self.sbuf_bytes_avail -= IOMAP_LEN as u32;
        let bytes = slot.map.to_bytes(self.peer_net);
        let addr = self
            .remote_iomap
            .addr
            .wrapping_add(u64::from(slot.index) * IOMAP_LEN as u64);
        let imm = Msg::new(Op::IomapSgl, slot.index).imm();
        let key = self.remote_iomap.key;
        self.post_write(&bytes, addr, key, Some(imm), u64::from(imm))
            .map_err(|e| self.local("post a direct-placement descriptor", e))
    }

    /// The direct-placement descriptor the peer last wrote into our entry
    /// `i` (zeros until it writes one).
    fn peer_iomap(&self, i: u32) -> Iomap {
        let mut b = [0u8; IOMAP_LEN];
        // In bounds: i < iomap_size, the MR holds that many entries after
        // the target list.
        let _ = self
            .target
            .read_at(SGE_LEN * SGL_SIZE as usize + i as usize * IOMAP_LEN, &mut b);
        Iomap::from_bytes(&b, wire::host_is_net())
    }

    /// The peer's region that holds `offset`: its address there and the
    /// bytes left in it.
    fn find_iomap(&self, offset: u64) -> Option<(u64, u32, u32)> {
        (0..self.sizes.iomap_size).find_map(|i| {
            let m = self.peer_iomap(i);
            m.locate(offset).map(|(addr, left)| (addr, m.sge.key, left))
        })
    }

    /// rsockets' `riowrite`: writes what it can of `buf` into the peer's
    /// direct-placement regions at `offset` (plain RDMA WRITEs through the
    /// send buffer: the peer's CPU sees nothing). Stops at the end of a
    /// region not followed by another; blocks (or fails with
    /// `WouldBlock`) only when nothing can go at once.
    pub(in crate::stream) fn iowrite(
        &mut self,
        buf: &[u8],
        offset: u64,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        if self.iomap_pending {
            self.send_iomaps(timeout)?;
        }
        if buf.is_empty() {
            return Ok(0);
        }
        let mut sent = 0usize;
        let mut olen = OLAP_START_SIZE;
        while sent < buf.len() {
            if !self.writable {
                break;
            }
            let Some(at) = offset.checked_add(sent as u64) else {
                break;
            };
            let Some((addr, key, room)) = self.find_iomap(at) else {
                if sent > 0 {
                    break;
                }
                let hint = if self.sizes.iomap_size == 0 {
                    " (this stream offers it no entries: StreamOptions::iomap_size)"
                } else {
                    ""
                };
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the peer has mapped no region at offset {at}{hint}"),
                ));
            };
            match self.room(sent, timeout)? {
                Room::Now => {}
                // The peer may have remapped meanwhile: look again.
                Room::AfterWait => continue,
                Room::Stop => break,
            }
            let left = u32::try_from(buf.len() - sent).unwrap_or(u32::MAX);
            let mut xfer = next_xfer(&mut olen, left);
            xfer = xfer.min(self.sbuf_bytes_avail).min(room);
            let data = &buf[sent..sent + xfer as usize];
            self.sqe_avail -= 1;
            self.sbuf_bytes_avail -= xfer;
            // The completion gives the send buffer space back (its id:
            // a `Write` message of the length).
            let id = u64::from(Msg::new(Op::Write, xfer).imm());
            self.post_write(data, addr, key, None, id)
                .map_err(|e| self.local("post a direct write", e))?;
            sent += xfer as usize;
        }
        if sent == 0 {
            return Err(self.write_error());
        }
        Ok(sent)
    }
}
