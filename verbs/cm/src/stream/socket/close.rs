//! Closing: shutting down a direction and the close handshake.

use std::io::{self};
use std::time::{Duration, Instant};

use super::{Socket, Until};
use crate::stream::wire::{Ctrl, Msg, Op};

impl Socket {
    // ---- closing ----

    /// Closes one or both directions as rsockets' `rshutdown` does: a
    /// control message tells the peer, then the sends already posted are
    /// waited for (at most `timeout`).
    pub(in crate::stream) fn shutdown(
        &mut self,
        how: std::net::Shutdown,
        timeout: Duration,
    ) -> io::Result<()> {
        use std::net::Shutdown;
        if !self.connected {
            self.readable &= how == Shutdown::Write;
            self.writable &= how == Shutdown::Read;
            return Ok(());
        }
        let ctrl = match how {
            Shutdown::Both => {
                self.readable = false;
                self.writable = false;
                Ctrl::Disconnect
            }
            Shutdown::Write => {
                self.writable = false;
                if self.readable {
                    Ctrl::Shutdown
                } else {
                    Ctrl::Disconnect
                }
            }
            Shutdown::Read => {
                self.readable = false;
                if self.writable {
                    return Ok(());
                }
                Ctrl::Disconnect
            }
        };
        let was = self.nonblocking;
        self.nonblocking = false;
        let r = self.close_with(ctrl, timeout);
        self.nonblocking = was;
        r
    }

    /// Closes the write side without waiting (for an async caller):
    /// `WouldBlock` while every control slot is in use.
    #[cfg(feature = "tokio")]
    pub(in crate::stream) fn try_shutdown_write(&mut self) -> io::Result<()> {
        if !self.writable || !self.connected {
            self.writable = false;
            return Ok(());
        }
        self.poll_cq()?;
        if !self.ctrl_avail() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.writable = false;
        let ctrl = if self.readable {
            Ctrl::Shutdown
        } else {
            Ctrl::Disconnect
        };
        self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
        let imm = Msg::new(Op::Ctrl, ctrl as u32).imm();
        self.post_msg(imm)
            .map_err(|e| self.local("post a shutdown message", e))
    }

    fn close_with(&mut self, ctrl: Ctrl, timeout: Duration) -> io::Result<()> {
        let start = Instant::now();
        if !self.ctrl_avail() {
            self.wait(Until::CtrlSlot, Some(timeout))?;
        }
        if self.connected && self.ctrl_avail() {
            self.ctrl_seqno = self.ctrl_seqno.wrapping_add(1);
            let imm = Msg::new(Op::Ctrl, ctrl as u32).imm();
            if let Err(e) = self.post_msg(imm) {
                return Err(self.local("post a shutdown message", e));
            }
        }
        if self.connected {
            // One budget for both waits.
            let left = timeout.saturating_sub(start.elapsed());
            self.wait(Until::SendsDone, Some(left))?;
        }
        Ok(())
    }
}
