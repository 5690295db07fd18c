//! The out-of-band TCP channel of `rverbs perf`: our own format, spoken
//! only between two `rverbs perf` processes (not perftest's).
//!
//! After connecting, each side sends one fixed [`Hello`] ([`HELLO_LEN`]
//! bytes, big-endian): the test it was asked to run (so mismatched command
//! lines are refused on both sides) and its QP and buffer address. Then
//! tagged control messages flow ([`Msg`]): `S` (a barrier: the client
//! sends one and waits for the server's answer), `P` + u64 (the client's progress, also a
//! keep-alive while a passive server waits), `D` + u64 (end of a `-D` run:
//! the messages the client completed), `R` + [`Report`] (one size's
//! results) and `X` + u16 length + text (the sender failed; the text says
//! why).

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs::Gid;

/// First bytes of every [`Hello`]: name and version of the format.
pub const MAGIC: &[u8; 8] = b"RVPERF\x00\x01";
/// Size of an encoded [`Hello`].
pub const HELLO_LEN: usize = 80;

/// What each side announces before the test: the parameters both must
/// agree on, and where its QP and buffer are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hello {
    /// Operation code (`Verb as u8`).
    pub verb: u8,
    /// Test kind code (`Kind as u8`).
    pub kind: u8,
    /// Bit 0: `-a`; bit 1: `-D`; bit 2: compare-and-swap atomics.
    pub flags: u8,
    /// The path MTU this side would use (`Mtu as u8`).
    pub mtu: u8,
    /// Message size, or the largest size of a `-a` sweep.
    pub size: u32,
    /// Iterations per size (0 with `-D`).
    pub iters: u64,
    /// `-D` seconds (0 without).
    pub duration: u32,
    /// Margin of a `-D` run, seconds.
    pub margin: u32,
    /// QP number.
    pub qpn: u32,
    /// First PSN of the QP's sends.
    pub psn: u32,
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// GID the QP sends from.
    pub gid: Gid,
    /// Address of the buffer (its first half is the source of this side's
    /// messages, the second half their destination).
    pub addr: u64,
    /// The buffer's rkey.
    pub rkey: u32,
    /// The buffer's length.
    pub len: u64,
}

impl Hello {
    /// Flag bit of `-a`.
    pub const ALL: u8 = 1;
    /// Flag bit of `-D`.
    pub const DURATION: u8 = 2;
    /// Flag bit of compare-and-swap atomics.
    pub const CMP_SWAP: u8 = 4;

    /// Encodes the fixed big-endian form.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8] = self.verb;
        b[9] = self.kind;
        b[10] = self.flags;
        b[11] = self.mtu;
        b[12..16].copy_from_slice(&self.size.to_be_bytes());
        b[16..24].copy_from_slice(&self.iters.to_be_bytes());
        b[24..28].copy_from_slice(&self.duration.to_be_bytes());
        b[28..32].copy_from_slice(&self.margin.to_be_bytes());
        b[32..36].copy_from_slice(&self.qpn.to_be_bytes());
        b[36..40].copy_from_slice(&self.psn.to_be_bytes());
        b[40..42].copy_from_slice(&self.lid.to_be_bytes());
        b[42..58].copy_from_slice(&self.gid.0);
        b[58..66].copy_from_slice(&self.addr.to_be_bytes());
        b[66..70].copy_from_slice(&self.rkey.to_be_bytes());
        b[70..78].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Decodes [`Hello::encode`]'s form; anything else (another program on
    /// the port, another version) is refused.
    pub fn decode(b: &[u8; HELLO_LEN]) -> Result<Hello> {
        if &b[..8] != MAGIC {
            bail!(
                "the peer is not rverbs perf (or another version of it): \
                 rverbs perf only talks to rverbs perf, not to perftest"
            );
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[42..58]);
        let h = Hello {
            verb: b[8],
            kind: b[9],
            flags: b[10],
            mtu: b[11],
            size: u32_at(12),
            iters: u64_at(16),
            duration: u32_at(24),
            margin: u32_at(28),
            qpn: u32_at(32),
            psn: u32_at(36),
            lid: u16::from_be_bytes([b[40], b[41]]),
            gid: Gid(gid),
            addr: u64_at(58),
            rkey: u32_at(66),
            len: u64_at(70),
        };
        if h.qpn > 0xff_ffff || h.psn > 0xff_ffff {
            bail!(
                "the peer sent QPN {:#x} / PSN {:#x}: over 24 bits",
                h.qpn,
                h.psn
            );
        }
        Ok(h)
    }
}

/// Number of f64 fields of a [`Report`] on the wire.
const REPORT_F64S: usize = 14;
/// Size of an encoded [`Report`].
pub const REPORT_LEN: usize = 1 + 8 + 8 + 8 * REPORT_F64S;

/// One size's results, as measured by one side. Bandwidths are in bytes
/// per second, latencies in microseconds, CPU times in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    /// Bit 0: a latency report (else bandwidth); bit 1: a `-D` run; bit 2:
    /// the peak bandwidth was measured.
    pub flags: u8,
    /// Message size.
    pub size: u64,
    /// Messages (bandwidth) or exchanges (latency) measured.
    pub iters: u64,
    /// Measured time, seconds.
    pub elapsed: f64,
    /// Best bandwidth over any window of messages (0 when not measured).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Messages per second.
    pub msg_rate: f64,
    /// Smallest latency.
    pub t_min: f64,
    /// Largest latency (after dropping the two worst samples, as perftest).
    pub t_max: f64,
    /// Median latency.
    pub t_typical: f64,
    /// Mean latency.
    pub t_avg: f64,
    /// Standard deviation of the latency.
    pub t_stdev: f64,
    /// 99th percentile latency.
    pub p99: f64,
    /// 99.9th percentile latency.
    pub p999: f64,
    /// Transactions (round trips, reads) per second of a `-D` latency run.
    pub tps: f64,
    /// User CPU time of the measuring process during the run.
    pub cpu_user: f64,
    /// System CPU time of the measuring process during the run.
    pub cpu_sys: f64,
}

impl Report {
    /// Flag bit: latency report.
    pub const LAT: u8 = 1;
    /// Flag bit: `-D` run.
    pub const DURATION: u8 = 2;
    /// Flag bit: peak bandwidth measured.
    pub const PEAK: u8 = 4;

    fn f64s(&self) -> [f64; REPORT_F64S] {
        [
            self.elapsed,
            self.bw_peak,
            self.bw_avg,
            self.msg_rate,
            self.t_min,
            self.t_max,
            self.t_typical,
            self.t_avg,
            self.t_stdev,
            self.p99,
            self.p999,
            self.tps,
            self.cpu_user,
            self.cpu_sys,
        ]
    }

    /// Encodes the fixed big-endian form.
    pub fn encode(&self) -> [u8; REPORT_LEN] {
        let mut b = [0u8; REPORT_LEN];
        b[0] = self.flags;
        b[1..9].copy_from_slice(&self.size.to_be_bytes());
        b[9..17].copy_from_slice(&self.iters.to_be_bytes());
        for (i, v) in self.f64s().iter().enumerate() {
            b[17 + 8 * i..25 + 8 * i].copy_from_slice(&v.to_bits().to_be_bytes());
        }
        b
    }

    /// Decodes [`Report::encode`]'s form.
    pub fn decode(b: &[u8; REPORT_LEN]) -> Report {
        let u64_at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(a)
        };
        let f = |k: usize| f64::from_bits(u64_at(17 + 8 * k));
        Report {
            flags: b[0],
            size: u64_at(1),
            iters: u64_at(9),
            elapsed: f(0),
            bw_peak: f(1),
            bw_avg: f(2),
            msg_rate: f(3),
            t_min: f(4),
            t_max: f(5),
            t_typical: f(6),
            t_avg: f(7),
            t_stdev: f(8),
            p99: f(9),
            p999: f(10),
            tps: f(11),
            cpu_user: f(12),
            cpu_sys: f(13),
        }
    }

    /// Whether this is a latency report.
    pub fn is_lat(&self) -> bool {
        self.flags & Self::LAT != 0
    }
    /// Whether this comes from a `-D` run.
    pub fn is_duration(&self) -> bool {
        self.flags & Self::DURATION != 0
    }
    /// Whether the peak bandwidth was measured.
    pub fn has_peak(&self) -> bool {
        self.flags & Self::PEAK != 0
    }
}

/// A control message.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    /// Barrier.
    Sync,
    /// The client's progress: messages completed so far in this size.
    Progress(u64),
    /// A `-D` run ended after this many messages from the client.
    Done(u64),
    /// One size's results.
    Report(Report),
    /// The sender failed.
    Failed(String),
}

const MAX_FAIL_TEXT: usize = 1024;

/// Decodes the control message at the start of `buf` (bytes from the
/// peer): the message and how many bytes it took, `None` if `buf` holds
/// only part of one, an error for an unknown tag.
pub fn parse_msg(buf: &[u8]) -> Result<Option<(Msg, usize)>> {
    let Some(&tag) = buf.first() else {
        return Ok(None);
    };
    let need = match tag {
        b'S' => 1,
        b'P' | b'D' => 9,
        b'R' => 1 + REPORT_LEN,
        b'X' => match buf.get(1..3) {
            Some(&[hi, lo]) => 3 + usize::from(u16::from_be_bytes([hi, lo])),
            _ => return Ok(None),
        },
        other => bail!("unexpected control message {other:#04x} from the peer"),
    };
    let Some(body) = buf.get(1..need) else {
        return Ok(None);
    };
    let u64_of = |b: &[u8]| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        u64::from_be_bytes(a)
    };
    let m = match tag {
        b'S' => Msg::Sync,
        b'P' => Msg::Progress(u64_of(body)),
        b'D' => Msg::Done(u64_of(body)),
        b'R' => {
            let mut r = [0u8; REPORT_LEN];
            r.copy_from_slice(body);
            Msg::Report(Report::decode(&r))
        }
        _ => Msg::Failed(String::from_utf8_lossy(&body[2..]).into_owned()),
    };
    Ok(Some((m, need)))
}

/// The control connection: blocking reads bounded by the `--timeout`
/// (each read), non-blocking polls for the run loops.
pub struct Ctrl {
    s: TcpStream,
    buf: Vec<u8>,
    nonblocking: bool,
    limit: Option<Duration>,
}

impl Ctrl {
    fn new(s: TcpStream, limit: Option<Duration>) -> Result<Ctrl> {
        s.set_read_timeout(limit)?;
        s.set_write_timeout(limit)?;
        s.set_nodelay(true)?;
        Ok(Ctrl {
            s,
            buf: Vec::with_capacity(4096),
            nonblocking: false,
            limit,
        })
    }

    /// Client side: connects to `host:port` (bounded by `limit`).
    pub fn connect(host: &str, port: u16, limit: Option<Duration>) -> Result<Ctrl> {
        let addrs: Vec<_> = (host, port)
            .to_socket_addrs()
            .with_context(|| format!("cannot resolve {host}"))?
            .collect();
        let mut last = None;
        for a in &addrs {
            let r = match limit {
                Some(t) => TcpStream::connect_timeout(a, t),
                None => TcpStream::connect(a),
            };
            match r {
                Ok(s) => return Ctrl::new(s, limit),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => anyhow!("couldn't connect to {host}:{port}: {e}"),
            None => anyhow!("couldn't connect to {host}:{port}: no address"),
        })
    }

    /// Server side: binds `port` on every address.
    pub fn listen(port: u16) -> Result<TcpListener> {
        TcpListener::bind(("::", port))
            .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
            .with_context(|| format!("couldn't listen to port {port}"))
    }

    /// Server side: accepts one client (waiting without limit).
    pub fn accept(l: TcpListener, limit: Option<Duration>) -> Result<Ctrl> {
        let (s, _) = l.accept().context("accept() failed")?;
        Ctrl::new(s, limit)
    }

    fn set_nonblocking(&mut self, on: bool) -> Result<()> {
        if self.nonblocking != on {
            self.s.set_nonblocking(on)?;
            self.nonblocking = on;
        }
        Ok(())
    }

    fn write(&mut self, b: &[u8]) -> Result<()> {
        self.set_nonblocking(false)?;
        self.s
            .write_all(b)
            .map_err(|e| anyhow!("sending to the peer: {e}"))
    }

    /// Sends our [`Hello`].
    pub fn send_hello(&mut self, h: &Hello) -> Result<()> {
        self.write(&h.encode())
    }

    /// Reads the peer's [`Hello`].
    pub fn recv_hello(&mut self) -> Result<Hello> {
        self.set_nonblocking(false)?;
        while self.buf.len() < HELLO_LEN {
            self.fill()?;
        }
        let mut b = [0u8; HELLO_LEN];
        b.copy_from_slice(&self.buf[..HELLO_LEN]);
        self.buf.drain(..HELLO_LEN);
        Hello::decode(&b)
    }

    /// Sends a control message (no allocation).
    pub fn send(&mut self, m: &Msg) -> Result<()> {
        let mut b = [0u8; 1 + REPORT_LEN];
        let n = match m {
            Msg::Sync => {
                b[0] = b'S';
                1
            }
            Msg::Progress(v) | Msg::Done(v) => {
                b[0] = if matches!(m, Msg::Progress(_)) {
                    b'P'
                } else {
                    b'D'
                };
                b[1..9].copy_from_slice(&v.to_be_bytes());
                9
            }
            Msg::Report(r) => {
                b[0] = b'R';
                b[1..].copy_from_slice(&r.encode());
                1 + REPORT_LEN
            }
            Msg::Failed(text) => {
                let t = &text.as_bytes()[..text.len().min(MAX_FAIL_TEXT)];
                let mut v = Vec::with_capacity(3 + t.len());
                v.push(b'X');
                v.extend_from_slice(&(t.len() as u16).to_be_bytes());
                v.extend_from_slice(t);
                return self.write(&v);
            }
        };
        self.write(&b[..n])
    }

    /// Tells the peer we failed, best effort.
    pub fn send_failure(&mut self, e: &anyhow::Error) {
        let _ = self.send(&Msg::Failed(format!("{e:#}")));
    }

    /// Reads more bytes into the buffer (blocking or not, as set). Returns
    /// false when a non-blocking read found nothing.
    fn fill(&mut self) -> Result<bool> {
        let mut tmp = [0u8; 512];
        loop {
            match self.s.read(&mut tmp) {
                Ok(0) => bail!("the peer closed the connection"),
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock && self.nonblocking => {
                    return Ok(false)
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    bail!(
                        "no word from the peer for {}s",
                        self.limit.map_or(0, |d| d.as_secs())
                    )
                }
                Err(e) => bail!("reading from the peer: {e}"),
            }
        }
    }

    /// Takes one complete message off the buffer, if there is one.
    fn parse(&mut self) -> Result<Option<Msg>> {
        let Some((m, used)) = parse_msg(&self.buf)? else {
            return Ok(None);
        };
        self.buf.drain(..used);
        Ok(Some(m))
    }

    /// Waits for the next message (each read bounded by the timeout). A
    /// failure message from the peer becomes an error.
    pub fn recv(&mut self) -> Result<Msg> {
        self.set_nonblocking(false)?;
        loop {
            match self.parse()? {
                Some(Msg::Failed(t)) => bail!("the peer failed: {t}"),
                Some(m) => return Ok(m),
                None => {
                    self.fill()?;
                }
            }
        }
    }

    /// A look at the channel during a run, without waiting: drops the
    /// client's progress messages, returns the count of a `D` (end of a
    /// `-D` run), fails on an `X` or a closed connection, and leaves any
    /// other message queued for [`Ctrl::recv`].
    pub fn poll_done(&mut self) -> Result<Option<u64>> {
        loop {
            match self.buf.first() {
                Some(b'S') | Some(b'R') => return Ok(None),
                Some(_) => match self.parse()? {
                    Some(Msg::Progress(_)) => continue,
                    Some(Msg::Done(n)) => return Ok(Some(n)),
                    Some(Msg::Failed(t)) => bail!("the peer failed: {t}"),
                    Some(_) => return Ok(None),
                    None => {}
                },
                None => {}
            }
            self.set_nonblocking(true)?;
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    fn wait_sync(&mut self) -> Result<()> {
        loop {
            match self.recv()? {
                Msg::Sync => return Ok(()),
                Msg::Progress(_) => {}
                other => bail!("out of step with the peer: got {other:?} waiting for a sync"),
            }
        }
    }

    /// Barrier: the client sends `S` and waits for the server's; the
    /// server waits for the client's, notes the time, then answers. The
    /// returned instant (the server's taken before the client can go on)
    /// is when this side was released.
    pub fn sync(&mut self, client: bool) -> Result<Instant> {
        if client {
            self.send(&Msg::Sync)?;
            self.wait_sync()?;
            Ok(Instant::now())
        } else {
            self.wait_sync()?;
            let t = Instant::now();
            self.send(&Msg::Sync)?;
            Ok(t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_hello() -> Hello {
        Hello {
            verb: 1,
            kind: 0,
            flags: Hello::ALL,
            mtu: 3,
            size: 1 << 20,
            iters: 5000,
            duration: 0,
            margin: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            lid: 0,
            gid: "::ffff:10.0.0.1".parse().unwrap(),
            addr: 0x7f00_1234_5000,
            rkey: 0x1234,
            len: 2 << 20,
        }
    }

    #[test]
    fn hello_round_trips_and_refuses_strangers() {
        let h = sample_hello();
        let b = h.encode();
        assert_eq!(&b[..8], MAGIC);
        assert_eq!(Hello::decode(&b).unwrap(), h);
        let mut bad = b;
        bad[0] = b'0';
        let e = Hello::decode(&bad).unwrap_err().to_string();
        assert!(e.contains("not rverbs perf"), "{e}");
        let mut big = b;
        big[32] = 1;
        assert!(Hello::decode(&big).is_err());
    }

    #[test]
    fn report_round_trips() {
        let r = Report {
            flags: Report::LAT | Report::PEAK,
            size: 64,
            iters: 1000,
            elapsed: 1.5,
            t_min: 1.25,
            p999: 99.5,
            cpu_sys: 0.01,
            ..Default::default()
        };
        assert_eq!(Report::decode(&r.encode()), r);
        assert!(r.is_lat() && r.has_peak() && !r.is_duration());
    }

    #[test]
    fn control_messages_parse_whole_or_not_at_all() {
        assert_eq!(parse_msg(b"").unwrap(), None);
        assert_eq!(parse_msg(b"S").unwrap(), Some((Msg::Sync, 1)));
        assert_eq!(parse_msg(b"P\0\0\0\0\0\0\0").unwrap(), None);
        assert_eq!(
            parse_msg(b"D\0\0\0\0\0\0\x01\x02S").unwrap(),
            Some((Msg::Done(0x102), 9))
        );
        assert_eq!(parse_msg(b"X").unwrap(), None);
        assert_eq!(parse_msg(b"X\0\x03ab").unwrap(), None);
        assert_eq!(
            parse_msg(b"X\0\x03ab\xff").unwrap(),
            Some((Msg::Failed("ab\u{fffd}".into()), 6))
        );
        assert_eq!(parse_msg(&[b'R'; REPORT_LEN]).unwrap(), None);
        let e = parse_msg(b"?").unwrap_err().to_string();
        assert!(e.contains("unexpected control message 0x3f"), "{e}");
    }

    #[test]
    fn control_messages_over_loopback() {
        let l = Ctrl::listen(0).unwrap();
        let port = l.local_addr().unwrap().port();
        let lim = Some(Duration::from_secs(10));
        let t = std::thread::spawn(move || {
            let mut c = Ctrl::accept(l, lim).unwrap();
            let h = c.recv_hello().unwrap();
            c.send_hello(&h).unwrap();
            // Nothing sent yet: a non-blocking poll finds nothing.
            let first = c.poll_done().unwrap();
            c.sync(false).unwrap();
            // A report stays queued for recv(); progress is dropped.
            std::thread::sleep(Duration::from_millis(100));
            let queued = c.poll_done().unwrap();
            let report = c.recv().unwrap();
            let done = c.poll_done().unwrap();
            let err = c.poll_done().unwrap_err().to_string();
            (first, queued, report, done, err)
        });
        let mut c = Ctrl::connect("localhost", port, lim).unwrap();
        c.send_hello(&sample_hello()).unwrap();
        assert_eq!(c.recv_hello().unwrap(), sample_hello());
        std::thread::sleep(Duration::from_millis(50));
        c.send(&Msg::Progress(7)).unwrap();
        c.sync(true).unwrap();
        let r = Report {
            size: 8,
            iters: 5,
            bw_avg: 1e6,
            ..Default::default()
        };
        c.send(&Msg::Report(r)).unwrap();
        c.send(&Msg::Progress(8)).unwrap();
        c.send(&Msg::Done(42)).unwrap();
        c.send_failure(&anyhow!("boom"));
        let (first, queued, report, done, err) = t.join().unwrap();
        assert_eq!(first, None);
        assert_eq!(queued, None);
        assert_eq!(report, Msg::Report(r));
        assert_eq!(done, Some(42));
        assert!(err.contains("the peer failed: boom"), "{err}");
    }

    #[test]
    fn a_closed_peer_is_an_error_not_a_hang() {
        let l = Ctrl::listen(0).unwrap();
        let port = l.local_addr().unwrap().port();
        let lim = Some(Duration::from_secs(10));
        let t = std::thread::spawn(move || {
            let mut c = Ctrl::accept(l, lim).unwrap();
            c.sync(false).unwrap_err().to_string()
        });
        let c = Ctrl::connect("127.0.0.1", port, lim).unwrap();
        drop(c);
        let e = t.join().unwrap();
        assert!(e.contains("closed"), "{e}");
    }
}
