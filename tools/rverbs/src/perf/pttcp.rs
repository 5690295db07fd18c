//! perftest's TCP ("ethernet") channel, the default one: a TCP connection
//! to the server's port (perftest's 18515 unless `-p`) that carries
//! perftest's messages ([`super::ptmsg`]) as bytes, each written whole and
//! read to its exact length, the keys as perftest's text (59 bytes, or 108
//! with a GID). perftest reads every message with one `read` of its size,
//! so each of ours goes out in one `write`; after the close message each
//! side writes `done` and closes (perftest 4.5's `ctx_close_connection`),
//! and reads the peer's `done` (if any) so that its close does not reset
//! the peer's connection before the peer has written its own.
//!
//! Every read is bounded (the deadline of the step), an end of the
//! connection is an error naming what was awaited, and the peer's keys
//! are taken in either form: the first 59 bytes say which.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs_cm::Connection;

use super::exchange::{Channel, STEP_TIMEOUT};
use super::ptmsg::{PtDest, KEY_LEN};

/// perftest 4.5's last message on the socket (with its NUL).
const DONE: &[u8] = b"done\0";
/// How long the peer's `done` (or its close) is waited for.
const DONE_WAIT: Duration = Duration::from_secs(2);

/// The TCP channel.
pub struct PtTcp {
    s: TcpStream,
    client: bool,
    /// Our keys go out in the GID form (this side sends from a GID).
    gid: bool,
}

impl PtTcp {
    fn new(s: TcpStream, client: bool, gid: bool) -> Result<PtTcp> {
        s.set_nodelay(true)?;
        s.set_write_timeout(Some(STEP_TIMEOUT))?;
        Ok(PtTcp { s, client, gid })
    }

    /// Client side: connects to `host:port` (bounded by `limit`); `gid`:
    /// our keys carry a GID.
    pub fn connect(host: &str, port: u16, limit: Option<Duration>, gid: bool) -> Result<PtTcp> {
        PtTcp::new(crate::wire::connect(host, port, limit)?, true, gid)
    }

    /// Server side: accepts one client on `l` (waiting without limit, as
    /// perftest's server does) and closes the listener.
    pub fn accept(l: TcpListener, gid: bool) -> Result<PtTcp> {
        let (s, _) = l.accept().context("accept() failed")?;
        drop(l);
        PtTcp::new(s, false, gid)
    }

    /// Reads exactly `buf.len()` bytes by `deadline` (`None`: no limit).
    fn read_exact(
        &mut self,
        buf: &mut [u8],
        deadline: Option<Instant>,
        limit: Option<Duration>,
        what: &str,
    ) -> Result<()> {
        let mut got = 0;
        while got < buf.len() {
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        bail!(
                            "timed out after {}s waiting for {what}",
                            limit.map_or(0, |l| l.as_secs())
                        );
                    }
                    Some(left)
                }
                None => None,
            };
            self.s.set_read_timeout(left)?;
            match self.s.read(&mut buf[got..]) {
                Ok(0) => bail!("the peer closed the connection while we waited for {what}"),
                Ok(n) => got += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Interrupted | ErrorKind::WouldBlock | ErrorKind::TimedOut
                    ) => {}
                Err(e) => bail!("reading {what} from the peer: {e}"),
            }
        }
        Ok(())
    }
}

impl Channel for PtTcp {
    fn is_client(&self) -> bool {
        self.client
    }

    fn send_msg(&mut self, msg: &[u8], what: &str) -> Result<()> {
        self.s
            .write_all(msg)
            .map_err(|e| anyhow!("sending {what} to the peer: {e}"))
    }

    fn recv_msg(&mut self, len: usize, what: &str) -> Result<Vec<u8>> {
        let mut b = vec![0u8; len];
        let deadline = Instant::now().checked_add(STEP_TIMEOUT);
        self.read_exact(&mut b, deadline, Some(STEP_TIMEOUT), what)?;
        Ok(b)
    }

    fn send_dest(&mut self, d: &PtDest, what: &str) -> Result<()> {
        let m = d.encode_text(self.gid);
        self.send_msg(&m, what)
    }

    fn recv_dest(
        &mut self,
        limit: Option<Duration>,
        _data: Option<&mut Connection>,
        what: &str,
    ) -> Result<PtDest> {
        let deadline = limit.and_then(|l| Instant::now().checked_add(l));
        let mut b = vec![0u8; KEY_LEN];
        self.read_exact(&mut b, deadline, limit, what)?;
        let len = PtDest::text_len(&b).with_context(|| what.to_string())?;
        b.resize(len, 0);
        self.read_exact(&mut b[KEY_LEN..], deadline, limit, what)?;
        PtDest::decode_text(&b).with_context(|| what.to_string())
    }

    fn after_close(&mut self) {
        if self.s.write_all(DONE).is_err() {
            return;
        }
        let _ = self.s.set_read_timeout(Some(DONE_WAIT));
        let deadline = Instant::now() + DONE_WAIT;
        let mut b = [0u8; 64];
        let mut got = 0;
        while got < DONE.len() && Instant::now() < deadline {
            match self.s.read(&mut b) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        let _ = self.s.shutdown(std::net::Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::super::ptmsg::{BwFigures, KEY_LEN_GID};
    use super::*;

    fn pair(gid_server: bool, gid_client: bool) -> (PtTcp, std::thread::JoinHandle<PtTcp>) {
        let l = crate::wire::listen(0).unwrap();
        let port = l.local_addr().unwrap().port();
        let t = std::thread::spawn(move || PtTcp::accept(l, gid_server).unwrap());
        let c =
            PtTcp::connect("127.0.0.1", port, Some(Duration::from_secs(10)), gid_client).unwrap();
        (c, t)
    }

    fn dest(qpn: u32) -> PtDest {
        PtDest {
            qpn,
            psn: 0x123456,
            rkey: 0xabcd,
            vaddr: 0x7f00_0000_1000,
            out_reads: 1,
            ..Default::default()
        }
    }

    #[test]
    fn the_exchange_runs_both_ways_over_loopback() {
        let (mut c, t) = pair(true, false);
        let mut s = t.join().unwrap();
        let srv = std::thread::spawn(move || {
            let v = s.xchg(b"0123456789abcdef", "the version").unwrap();
            // The client sends the short form, the server the GID form:
            // each side reads either.
            let d = s.hand_shake(&dest(0x22), "the keys").unwrap();
            let f = s.bw_reports(&BwFigures::default()).unwrap();
            s.close_connection(&dest(0x22)).unwrap();
            (v, d, f)
        });
        let v = c.xchg(b"fedcba9876543210", "the version").unwrap();
        assert_eq!(&v, b"0123456789abcdef");
        let d = c.hand_shake(&dest(0x11), "the keys").unwrap();
        assert_eq!(
            (d.qpn, d.psn, d.rkey, d.vaddr),
            (0x22, 0x123456, 0xabcd, 0x7f00_0000_1000)
        );
        let mine = BwFigures {
            size: 4096,
            iters: 100,
            bw_avg: 12.5,
            ..Default::default()
        };
        let theirs = c.bw_reports(&mine).unwrap();
        assert_eq!(theirs, BwFigures::default());
        c.close_connection(&dest(0x11)).unwrap();
        let (v, d, f) = srv.join().unwrap();
        assert_eq!(&v, b"fedcba9876543210");
        assert_eq!(d.qpn, 0x11);
        assert_eq!(f, mine);
    }

    #[test]
    fn a_peer_that_closes_or_stalls_is_an_error_not_a_hang() {
        let (c, t) = pair(true, true);
        let mut s = t.join().unwrap();
        drop(c);
        let e = s.recv_dest(Some(Duration::from_secs(10)), None, "the keys");
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("closed the connection while we waited for the keys"),
            "{e}"
        );

        let (mut c, t) = pair(true, true);
        let _s = t.join().unwrap();
        let t0 = Instant::now();
        let e = c
            .recv_dest(
                Some(Duration::from_millis(300)),
                None,
                "the end of the client's test",
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("timed out"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_peer_that_is_not_perftest_is_refused() {
        let (mut c, t) = pair(true, true);
        let mut s = t.join().unwrap();
        let junk = [b'x'; KEY_LEN_GID];
        s.send_msg(&junk, "junk").unwrap();
        let e = c
            .recv_dest(Some(Duration::from_secs(10)), None, "the keys")
            .unwrap_err();
        assert!(format!("{e:#}").contains("not perftest's"), "{e:#}");
    }
}
