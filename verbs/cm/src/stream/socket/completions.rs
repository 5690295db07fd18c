//! A socket's construction, its small accessors, and handling its
//! completions (received messages and finished sends).

use std::io::{self};

use super::fault::{io_err, Fault};
use super::setup::Parts;
use super::{coarse_now, Socket, QP_CTRL_SIZE, WC_BATCH, WR_ID_RECV};
use crate::stream::book::RecvBook;
use crate::stream::wire::{self, ConnData, Ctrl, Msg, Op, RsSge, IOMAP_LEN, SGE_LEN};
use crate::Connection;
use rverbs::{Qp, RecvWr, Wc, WcStatus};

impl Socket {
    /// The connected socket, from the prepared objects and the peer's
    /// connection data.
    pub(in crate::stream) fn new(
        conn: Connection,
        p: Parts,
        peer: &ConnData,
    ) -> io::Result<Socket> {
        let Parts {
            cq,
            chan,
            sbuf,
            rbuf,
            mut target,
            sizes,
        } = p;
        // The peer's first grant goes into our first target entry, in our
        // byte order (as the peer writes later ones).
        target
            .write_at(0, &peer.data_buf.to_bytes(wire::host_is_net()))
            .map_err(io_err)?;
        Ok(Socket {
            conn,
            cq,
            chan,
            sbuf,
            rbuf,
            target,
            wc: [Wc::default(); WC_BATCH],
            sizes,
            sseq_no: 0,
            sseq_comp: peer.credits,
            sqe_avail: sizes.sq_size - QP_CTRL_SIZE,
            sbuf_bytes_avail: sizes.sbuf_size,
            shead: 0,
            target_sge: 0,
            ctrl_seqno: 0,
            ctrl_max_seqno: QP_CTRL_SIZE,
            remote_sgl: peer.target_sgl,
            // rsockets' second entry first (its first one went in the
            // connection data); 0 for a one-entry list.
            remote_sge: 1 % peer.target_sgl.length.max(1),
            peer_net: peer.is_net(),
            remote_iomap: if peer.flags & wire::FLAG_IOMAP != 0 {
                RsSge {
                    // The entries follow the peer's target list (whose
                    // length the decoder bounded to 1..=2).
                    addr: peer
                        .target_sgl
                        .addr
                        .wrapping_add(u64::from(peer.target_sgl.length) * SGE_LEN as u64),
                    key: peer.target_sgl.key,
                    length: wire::scale_to_value(peer.target_iomap_size),
                }
            } else {
                RsSge::default()
            },
            iomaps: Vec::new(),
            iomap_pending: false,
            rx: RecvBook::new(sizes.rbuf_size, sizes.rq_size),
            readable: true,
            writable: true,
            connected: true,
            fault: None,
            nonblocking: false,
            keepalive: None,
            cm_checked: coarse_now().unwrap_or_default(),
        })
    }

    fn qp(&mut self) -> &mut Qp {
        self.conn.qp_mut()
    }

    pub(super) fn fail(&mut self, f: Fault) {
        if self.fault.is_none() {
            self.fault = Some(f);
        }
        self.readable = false;
        self.writable = false;
        self.connected = false;
    }

    /// A verbs call's failure: the connection is unusable after it.
    pub(super) fn local(&mut self, what: &str, e: rverbs::Error) -> io::Error {
        self.fail(Fault::Local(format!("{what}: {e}")));
        io_err(e)
    }

    /// The target entry `i` as the peer last wrote it (or as sending
    /// consumed it).
    pub(super) fn target_entry(&self, i: u32) -> RsSge {
        let mut b = [0u8; SGE_LEN];
        // In bounds: i < SGL_SIZE, the MR holds SGL_SIZE entries.
        let _ = self.target.read_at(i as usize * SGE_LEN, &mut b);
        RsSge::from_bytes(&b, wire::host_is_net())
    }

    pub(super) fn set_target_entry(&mut self, i: u32, s: RsSge) {
        let _ = self
            .target
            .write_at(i as usize * SGE_LEN, &s.to_bytes(wire::host_is_net()));
    }

    // ---- completions ----

    /// Takes every completion there is and acts on it; reposts the
    /// receives consumed.
    pub(super) fn poll_cq(&mut self) -> io::Result<()> {
        let mut consumed = 0u32;
        loop {
            let n = match self.cq.poll(&mut self.wc) {
                Ok(n) => n,
                Err(e) => return Err(self.local("poll the stream's CQ", e.into())),
            };
            for i in 0..n {
                let wc = self.wc[i];
                if wc.wr_id() & WR_ID_RECV != 0 {
                    if self.on_recv(&wc) {
                        consumed += 1;
                    }
                } else {
                    self.on_send(&wc);
                }
            }
            if n < WC_BATCH {
                break;
            }
        }
        if self.connected {
            for _ in 0..consumed {
                if let Err(e) = self.qp().post_recv(&[RecvWr::new(WR_ID_RECV, &[])]) {
                    return Err(self.local("repost a receive", e.into()));
                }
            }
        }
        Ok(())
    }

    /// A receive's completion: a message from the peer. Returns whether a
    /// receive was consumed.
    fn on_recv(&mut self, wc: &Wc) -> bool {
        if !wc.is_success() {
            if wc.status() != WcStatus::WR_FLUSH_ERR && self.connected {
                self.fail(Fault::Failed(wc.status()));
            }
            return false;
        }
        let Some(imm) = wc.imm_data() else {
            self.fail(Fault::Protocol(
                "a message without immediate data (message-send mode is not spoken)".into(),
            ));
            return true;
        };
        let msg = Msg::from_imm(imm);
        match msg.op {
            Op::Sgl => self.sseq_comp = msg.data as u16,
            Op::IomapSgl | Op::Write => {}
            Op::Ctrl => match msg.ctrl() {
                Some(Ctrl::Disconnect) => {
                    self.readable = false;
                    self.writable = false;
                    self.connected = false;
                }
                Some(Ctrl::Shutdown) => {
                    if self.writable {
                        self.readable = false;
                    } else {
                        self.connected = false;
                        self.readable = false;
                    }
                }
                Some(Ctrl::Keepalive) | None => {}
            },
            Op::Data | Op::DataMore | Op::DraMore | Op::Rsvd => {
                // rsockets takes the reserved ops as data too.
                if let Err(m) = self.rx.on_data(msg.data) {
                    self.fail(Fault::Protocol(m));
                }
                debug_assert!(self.rx.is_consistent());
            }
        }
        true
    }

    /// A send's completion (its work request id is the message's
    /// immediate).
    fn on_send(&mut self, wc: &Wc) {
        let msg = Msg::from_imm(wc.wr_id() as u32);
        match msg.op {
            Op::Sgl => self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1),
            Op::Ctrl => {
                self.ctrl_max_seqno = self.ctrl_max_seqno.wrapping_add(1);
                if msg.ctrl() == Some(Ctrl::Disconnect) {
                    self.connected = false;
                }
            }
            Op::IomapSgl => {
                self.sqe_avail += 1;
                self.sbuf_bytes_avail = self.sbuf_bytes_avail.saturating_add(IOMAP_LEN as u32);
            }
            _ => {
                self.sqe_avail += 1;
                self.sbuf_bytes_avail = self.sbuf_bytes_avail.saturating_add(msg.data);
            }
        }
        // A flush follows the error that moved the QP to ERR (reported
        // by its own completion) or a disconnect (reported by rdma_cm).
        if !wc.is_success() && wc.status() != WcStatus::WR_FLUSH_ERR && self.connected {
            self.fail(Fault::Failed(wc.status()));
        }
    }
}
