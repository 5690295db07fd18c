//! The receive side's bookkeeping, with no verbs object in it: which
//! bytes of the receive buffer hold unread data, which are granted to the
//! peer and not yet written, which are free; the lengths of the messages
//! not yet read; the message credits. Everything a peer can influence on
//! the receive side goes through [`RecvBook::on_data`], which refuses what
//! the grants and credits did not allow, so the ring can never point
//! outside the buffer. Pure, so it is fuzzed with hostile message
//! sequences (`tests/fuzz/fuzz_targets/stream_book.rs`).

use std::collections::VecDeque;

/// The receive side's state (rsockets' `rbuf_*`, `rmsg` and `rseq_*`).
#[derive(Clone, Debug)]
pub struct RecvBook {
    rbuf_size: u32,
    rq_size: u32,
    /// Lengths of the data messages not yet read (the first one partly
    /// read), at most `rq_size`.
    rmsg: VecDeque<u32>,
    /// Where the next unread byte is.
    offset: u32,
    /// Free bytes not granted yet, and where they start.
    avail: u32,
    free_offset: u32,
    /// Bytes granted to the peer and not yet written by it.
    granted: u32,
    /// Unread bytes.
    unread: u32,
    /// Messages read, and the count at which credits are due.
    rseq_no: u16,
    rseq_comp: u16,
}

/// What a grant sends: a buffer half (its offset in the receive buffer and
/// length) when one is free, and the credit value for the immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The half granted, if one was free: (offset, length).
    pub buf: Option<(u32, u32)>,
    /// The sequence number up to which the peer may send (rsockets' 16-bit
    /// count plus the queue's depth).
    pub credits: u32,
}

impl RecvBook {
    /// A buffer of `rbuf_size` bytes (even, at least 2) whose first half
    /// is granted at connection time, and `rq_size` receives posted.
    pub fn new(rbuf_size: u32, rq_size: u32) -> RecvBook {
        let half = rbuf_size / 2;
        RecvBook {
            rbuf_size,
            rq_size,
            rmsg: VecDeque::with_capacity(rq_size as usize),
            offset: 0,
            avail: half,
            free_offset: half,
            granted: half,
            unread: 0,
            rseq_no: 0,
            rseq_comp: (rq_size / 2) as u16,
        }
    }

    /// A data message of `len` bytes arrived (written at the peer's
    /// granted position). Refused, changing nothing, if the peer wrote
    /// more than it was granted or sent more messages than its credits
    /// allowed.
    pub fn on_data(&mut self, len: u32) -> Result<(), String> {
        if len > self.granted {
            return Err(format!(
                "{len} bytes sent where {} were granted",
                self.granted
            ));
        }
        if self.rmsg.len() >= self.rq_size as usize {
            return Err(format!(
                "more than {} messages unread (credits ignored)",
                self.rq_size
            ));
        }
        self.granted -= len;
        self.unread += len;
        self.rmsg.push_back(len);
        Ok(())
    }

    /// Whether a message waits (possibly an empty one).
    pub fn has_data(&self) -> bool {
        !self.rmsg.is_empty()
    }

    /// Unread bytes.
    #[cfg_attr(not(feature = "fuzz"), allow(dead_code))]
    pub fn unread(&self) -> u32 {
        self.unread
    }

    /// Takes up to `want` bytes in order: `copy(buf_offset, out_offset,
    /// len)` for each contiguous span (a message may wrap at the buffer's
    /// end); returns the bytes taken. Empty messages are taken too.
    pub fn consume(&mut self, want: usize, mut copy: impl FnMut(u32, usize, u32)) -> usize {
        let mut done = 0usize;
        while let Some(head) = self.rmsg.front_mut() {
            let left_out = u32::try_from(want - done).unwrap_or(u32::MAX);
            if left_out == 0 && *head != 0 {
                break;
            }
            let rsize = if left_out < *head {
                *head -= left_out;
                left_out
            } else {
                let n = *head;
                self.rmsg.pop_front();
                self.rseq_no = self.rseq_no.wrapping_add(1);
                n
            };
            let mut left = rsize;
            while left > 0 {
                let n = left.min(self.rbuf_size - self.offset);
                copy(self.offset, done, n);
                self.offset += n;
                if self.offset == self.rbuf_size {
                    self.offset = 0;
                }
                self.avail += n;
                self.unread -= n;
                done += n as usize;
                left -= n;
            }
        }
        done
    }

    /// Whether credits (and a buffer half, if free) are due: half the
    /// buffer is free, or half the credits were used.
    pub fn credits_due(&self) -> bool {
        self.avail >= self.rbuf_size / 2
            || (self.rseq_no as i16).wrapping_sub(self.rseq_comp as i16) >= 0
    }

    /// Records a grant as sent: the next free half, if there is one, and
    /// the credits.
    pub fn grant(&mut self) -> Grant {
        let half = self.rbuf_size / 2;
        self.rseq_comp = self.rseq_no.wrapping_add((self.rq_size / 2) as u16);
        let credits = u32::from(self.rseq_no) + self.rq_size;
        let buf = if half > 0 && self.avail >= half {
            let at = self.free_offset;
            self.granted += half;
            self.avail -= half;
            self.free_offset += half;
            if self.free_offset >= self.rbuf_size {
                self.free_offset = 0;
            }
            Some((at, half))
        } else {
            None
        };
        Grant { buf, credits }
    }

    /// The accounting holds: every byte is unread, granted or free.
    pub fn is_consistent(&self) -> bool {
        u64::from(self.unread) + u64::from(self.granted) + u64::from(self.avail)
            == u64::from(self.rbuf_size)
            && self.offset < self.rbuf_size.max(1)
            && self.rmsg.iter().map(|&m| u64::from(m)).sum::<u64>() == u64::from(self.unread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_grants_halves() {
        let mut b = RecvBook::new(8, 4);
        assert!(b.on_data(5).is_err(), "only the first half is granted");
        b.on_data(3).unwrap();
        b.on_data(1).unwrap();
        // The second half is free: due at once.
        assert!(b.credits_due());
        assert_eq!(
            b.grant(),
            Grant {
                buf: Some((4, 4)),
                credits: 4
            }
        );
        b.on_data(4).unwrap();
        let mut spans = Vec::new();
        assert_eq!(b.consume(100, |o, d, n| spans.push((o, d, n))), 8);
        assert_eq!(spans, [(0, 0, 3), (3, 3, 1), (4, 4, 4)]);
        assert_eq!(b.grant().buf, Some((0, 4)));
        b.on_data(4).unwrap();
        assert!(b.is_consistent());
        assert!(b.on_data(1).is_err(), "nothing granted");
        assert!(b.is_consistent());
    }

    #[test]
    fn credits_bound_the_messages() {
        let mut b = RecvBook::new(1 << 16, 4);
        for _ in 0..4 {
            b.on_data(0).unwrap();
        }
        assert!(b.on_data(0).is_err());
        // Empty messages are consumed (and count) without bytes.
        assert_eq!(b.consume(10, |_, _, _| panic!("no bytes")), 0);
        assert!(!b.has_data());
        assert!(b.is_consistent());
    }
}
