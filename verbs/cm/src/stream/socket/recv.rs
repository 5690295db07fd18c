//! Receiving: copying received data out of the ring.

use std::io::{self};
use std::time::Duration;

use super::{Socket, Until};

impl Socket {
    // ---- receiving ----

    /// Reads what has arrived into `buf` (at least one byte), waiting
    /// for data if none has; `Ok(0)` once the peer closed its side and
    /// everything before was read.
    pub(in crate::stream) fn recv(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.rx.has_data() {
                self.poll_cq()?;
                self.update_credits()?;
            }
            if !self.rx.has_data() && self.readable {
                self.wait(Until::Readable, timeout)?;
            }
            let n = self.copy_out(buf);
            if n > 0 {
                self.update_credits()?;
                return Ok(n);
            }
            if !self.rx.has_data() && !self.readable {
                return match &self.fault {
                    Some(f) => Err(f.to_io()),
                    None => Ok(0),
                };
            }
        }
    }

    /// Copies queued data out, in order, freeing the buffer space it held.
    fn copy_out(&mut self, buf: &mut [u8]) -> usize {
        let Socket { rx, rbuf, .. } = self;
        rx.consume(buf.len(), |at, to, n| {
            // In bounds: the book's spans lie in the buffer and in `buf`.
            let _ = rbuf.read_at(at as usize, &mut buf[to..to + n as usize]);
        })
    }

    /// Whether data is waiting to be read.
    pub(in crate::stream) fn has_data(&self) -> bool {
        self.rx.has_data()
    }
}
