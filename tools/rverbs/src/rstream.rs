//! `rverbs rstream`: librdmacm's `rstream` (rdmacm-utils) on
//! `rverbs_cm::stream`: the same options, the same test series (ping-pong
//! latency, then bandwidth, over one rsocket each), the same columns, and
//! the same wire, so either side can be rdma-core's.
//!
//! Each test: a 16-byte exchange to start together, then `-I` iterations
//! of `-C` transfers of `-S` bytes from the client followed by as many
//! back. `-T v` fills what is sent with a running byte counter and checks
//! what arrives against it, as rstream does (one counter per direction
//! over the whole run, so the two interoperate). `-T s` runs the same
//! over TCP sockets, the baseline; `-T f` too (rstream's "fork server
//! processing", which implies sockets), the server running each
//! connection's tests in a child process. Unlike rstream, every wait is bounded
//! (`--timeout`): a peer that stops or vanishes ends the run with an
//! error instead of a hang.
//!
//! `rverbs riostream` is librdmacm's `riostream` the same way: each side
//! maps a region of the test's size for the peer (`iomap` at offset 0),
//! and the transfers are `iowrite`s into the peer's region, the last of
//! each turn carrying a marker in its last byte that the receiver polls
//! for (its process sees nothing else); `-T v` checks all but that byte.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use rverbs::{AccessFlags, Mr, PageBuf};
use rverbs_cm::stream::{RdmaListener, RdmaStream, StreamOptions};

use crate::common::{num, timeout_secs};
use crate::rping::resolve;

/// rstream's port (`-p`).
pub const DEFAULT_PORT: u16 = 7471;
/// rstream's socket buffer size when `-B` is not given (its SO_SNDBUF and
/// SO_RCVBUF; rsockets doubles them).
const DEFAULT_SOCKET_BUF: u32 = 1 << 19;
/// The largest transfer (`-S`).
const MAX_SIZE: u32 = 1 << 30;

/// The default series: (size, needs `-S all`), as rstream's table.
const TEST_SIZES: &[(u32, bool)] = &[
    (1 << 6, false),
    (1 << 7, true),
    ((1 << 7) + (1 << 6), true),
    (1 << 8, true),
    ((1 << 8) + (1 << 7), true),
    (1 << 9, true),
    ((1 << 9) + (1 << 8), true),
    (1 << 10, true),
    ((1 << 10) + (1 << 9), true),
    (1 << 11, true),
    ((1 << 11) + (1 << 10), true),
    (1 << 12, false),
    ((1 << 12) + (1 << 11), true),
    (1 << 13, true),
    ((1 << 13) + (1 << 12), true),
    (1 << 14, true),
    ((1 << 14) + (1 << 13), true),
    (1 << 15, true),
    ((1 << 15) + (1 << 14), true),
    (1 << 16, false),
    ((1 << 16) + (1 << 15), true),
    (1 << 17, true),
    ((1 << 17) + (1 << 16), true),
    (1 << 18, true),
    ((1 << 18) + (1 << 17), true),
    (1 << 19, true),
    ((1 << 19) + (1 << 18), true),
    (1 << 20, false),
    ((1 << 20) + (1 << 19), true),
    (1 << 21, true),
    ((1 << 21) + (1 << 20), true),
    (1 << 22, true),
    ((1 << 22) + (1 << 21), true),
];

/// The options of `rverbs rstream` (rstream's own letters).
#[derive(Debug, Clone, clap::Args)]
pub struct RstreamArgs {
    /// Be the client of the server at this address (without it: the
    /// server).
    #[arg(short = 's', long = "server", value_name = "ADDR")]
    pub server: Option<String>,
    /// Local address to bind to (server) or connect from (client).
    #[arg(short = 'b', long = "bind", value_name = "ADDR")]
    pub bind: Option<String>,
    /// Address format: name, ip or ipv6 (gid, AF_IB, is not supported).
    #[arg(short = 'f', long = "format", value_name = "FORMAT")]
    pub format: Option<String>,
    /// Socket buffer size (rsockets' SO_SNDBUF and SO_RCVBUF, which it
    /// doubles); default 512 KiB as rstream's.
    #[arg(short = 'B', long = "buffer-size", value_parser = num::<u32>)]
    pub buffer_size: Option<u32>,
    /// Inline size of the latency tests.
    #[arg(short = 'i', long = "inline", default_value_t = 64, value_parser = num::<u16>)]
    pub inline: u16,
    /// Iterations (a custom test).
    #[arg(short = 'I', long = "iterations", value_parser = num::<u32>)]
    pub iterations: Option<u32>,
    /// Transfers each way per iteration (a custom test).
    #[arg(short = 'C', long = "count", value_parser = num::<u32>)]
    pub count: Option<u32>,
    /// Transfer size (a custom test), or `all` for every size of the
    /// default series.
    #[arg(short = 'S', long = "size", value_name = "SIZE|all")]
    pub size: Option<String>,
    /// Port.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Keep-alive time in seconds: a blocking wait (`-T b`) probes a
    /// quiet peer this often, and fails when a probe cannot be delivered.
    #[arg(short = 'k', long = "keepalive", value_parser = num::<u32>)]
    pub keepalive: Option<u32>,
    /// Test options, as rstream's: s|socket (TCP), a|async, b|blocking,
    /// f|fork (TCP, the server runs each connection in a child process),
    /// n|nonblocking, r|resolve, v|verify.
    #[arg(short = 'T', long = "test-option", value_name = "OPT")]
    pub test_options: Vec<String>,
    /// The longest wait for the peer in any one step (a client to
    /// connect, data or room to arrive), in seconds (rstream waits
    /// forever).
    #[arg(long = "timeout", default_value_t = 30, value_parser = timeout_secs)]
    pub timeout: u64,
}

/// The options, checked.
#[derive(Debug, Clone)]
struct Opts {
    server: Option<String>,
    bind: Option<String>,
    port: u16,
    socket_buf: u32,
    inline: u16,
    custom: Option<(u32, u32, u32)>,
    all_sizes: bool,
    tcp: bool,
    /// `-T f`: the server forks per connection.
    fork: bool,
    blocking: bool,
    verify: bool,
    timeout: Duration,
    keepalive: Option<Duration>,
    /// riostream: direct placement.
    io: bool,
}

impl Opts {
    fn from_args(a: &RstreamArgs, io: bool) -> Result<Opts> {
        if let Some(f) = &a.format {
            let f = f.to_ascii_lowercase();
            if f.starts_with("gid") {
                bail!("-f gid (AF_IB addresses) is not supported by rverbs");
            }
            if !(f.starts_with("ip") || f.starts_with("name")) {
                eprintln!("Warning: unknown address format");
            }
        }
        let (mut tcp, mut fork, mut blocking, mut verify) = (false, false, false, false);
        for t in &a.test_options {
            let t = t.to_ascii_lowercase();
            let is = |short: &str, long: &str| t == short || (t.len() > 1 && t.starts_with(long));
            if is("s", "socket") && !io {
                tcp = true;
            } else if is("a", "async") || is("b", "block") {
                blocking = true;
            } else if is("n", "nonblock") {
                blocking = false;
            } else if is("r", "resolve") && !io {
            } else if is("v", "verify") {
                verify = true;
            } else if is("f", "fork") && !io {
                // rstream's fork mode is its socket mode with a forking
                // server (rsockets fork only under its preload library).
                tcp = true;
                fork = true;
            } else {
                bail!("unknown test option -T {t}");
            }
        }
        let mut all_sizes = false;
        let mut size = None;
        if let Some(s) = &a.size {
            if s.to_ascii_lowercase().starts_with("all") {
                all_sizes = true;
            } else {
                size = Some(num::<u32>(s).map_err(anyhow::Error::msg)?);
            }
        }
        let custom = (a.iterations.is_some() || a.count.is_some() || size.is_some()).then(|| {
            (
                a.iterations.unwrap_or(1),
                a.count.unwrap_or(1000),
                size.unwrap_or(1000),
            )
        });
        if let Some((i, c, s)) = custom {
            if i == 0 || c == 0 || s == 0 || s > MAX_SIZE {
                bail!("-I, -C and -S must be at least 1 (and -S at most {MAX_SIZE})");
            }
        }
        if fork && verify && custom.is_none() && a.server.is_none() {
            // The counters live in the process: the second child would
            // start from the parent's, not from where the first ended
            // (rstream's verification fails the same way).
            bail!(
                "-T f with -T v checks one connection only: give a custom test (-S/-C/-I), \
                 not the default series of two"
            );
        }
        if io && a.keepalive.is_some() {
            bail!("riostream has no -k");
        }
        let socket_buf = a.buffer_size.unwrap_or(DEFAULT_SOCKET_BUF);
        if !(2048..=1 << 29).contains(&socket_buf) {
            bail!("-B {socket_buf}: 2048 to 512 MiB supported");
        }
        Ok(Opts {
            server: a.server.clone(),
            bind: a.bind.clone(),
            port: a.port,
            socket_buf,
            inline: a.inline,
            custom,
            all_sizes,
            tcp,
            fork,
            blocking,
            verify,
            timeout: Duration::from_secs(a.timeout.max(1)),
            keepalive: a
                .keepalive
                .filter(|&k| k > 0)
                .map(|k| Duration::from_secs(u64::from(k))),
            io,
        })
    }

    /// The stream options of a connection tuned for latency (rstream's
    /// `-i` inline size), bandwidth (no inline) or neither.
    fn stream(&self, inline: Option<u16>) -> StreamOptions {
        let mut o = StreamOptions::new()
            .send_buffer(self.socket_buf * 2)
            .recv_buffer(self.socket_buf * 2)
            .timeout(self.timeout)
            .keepalive(self.keepalive);
        if let Some(i) = inline {
            o = o.inline_size(i);
        }
        if self.io {
            // riostream's RDMA_IOMAPSIZE: one region each way.
            o = o.iomap_size(1);
        }
        o
    }
}

/// A connection of either kind.
enum Conn {
    Rdma(Box<RdmaStream>),
    Tcp(TcpStream),
}

impl Conn {
    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Conn::Rdma(s) => s.as_mut(),
            Conn::Tcp(s) => s,
        }
    }

    fn set_nonblocking(&mut self, on: bool) -> io::Result<()> {
        match self {
            Conn::Rdma(s) => s.set_nonblocking(on),
            Conn::Tcp(s) => s.set_nonblocking(on),
        }
    }

    fn close(self) {
        match self {
            Conn::Rdma(s) => {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            Conn::Tcp(s) => {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// The listening side of either kind.
enum Listening {
    Rdma(RdmaListener),
    Tcp(TcpListener),
}

/// rstream's running byte counters (`format_buf` / `verify_buf`): one for
/// what is sent, one for what is received, over the whole run.
#[derive(Debug, Default)]
struct Counters {
    send: u8,
    recv: u8,
    checked: u64,
}

/// One test's parameters.
struct Test {
    name: String,
    size: u32,
    count: u32,
    iterations: u32,
}

/// The run's state: its buffer, counters and the side it plays.
struct Run<'a> {
    o: &'a Opts,
    client: bool,
    buf: Vec<u8>,
    ctr: Counters,
}

impl Run<'_> {
    /// Sends `size` bytes (pattern-filled if `verify`), all of them.
    fn send_xfer(&mut self, c: &mut Conn, size: usize, verify: bool) -> Result<()> {
        if verify {
            self.format(size);
        }
        let buf = &self.buf;
        all_of("rsend", self.o.timeout, size, |off| {
            c.io().write(&buf[off..size])
        })
    }

    /// Receives exactly `size` bytes (and checks them if `verify`).
    fn recv_xfer(&mut self, c: &mut Conn, size: usize, verify: bool) -> Result<()> {
        let buf = &mut self.buf;
        all_of("rrecv", self.o.timeout, size, |off| {
            c.io().read(&mut buf[off..size])
        })?;
        if verify {
            self.verify(size)?;
        }
        Ok(())
    }

    /// rstream's `format_buf`: the buffer's first `len` bytes from the
    /// send counter.
    fn format(&mut self, len: usize) {
        for b in &mut self.buf[..len] {
            *b = self.ctr.send;
            self.ctr.send = self.ctr.send.wrapping_add(1);
        }
    }

    /// rstream's `verify_buf`: the buffer's first `len` bytes against the
    /// receive counter.
    fn verify(&mut self, len: usize) -> Result<()> {
        for &b in &self.buf[..len] {
            if b != self.ctr.recv {
                println!("data verification failed byte {}", self.ctr.checked);
                bail!("data verification failed byte {}", self.ctr.checked);
            }
            self.ctr.recv = self.ctr.recv.wrapping_add(1);
            self.ctr.checked += 1;
        }
        Ok(())
    }

    fn out(&mut self, c: &mut Conn, size: u32) -> Result<()> {
        self.send_xfer(c, size as usize, self.o.verify)
    }

    fn back(&mut self, c: &mut Conn, size: u32) -> Result<()> {
        self.recv_xfer(c, size as usize, self.o.verify)
    }

    /// rstream's `run_test`: the 16-byte start, then the timed loop; prints
    /// the line.
    fn run_test(&mut self, c: &mut Conn, t: &Test) -> Result<()> {
        if self.o.io {
            return self.run_io_test(c, t);
        }
        // The client speaks first, each way.
        if self.client {
            self.out(c, 16)?;
            self.back(c, 16)?;
        } else {
            self.back(c, 16)?;
            self.out(c, 16)?;
        }
        let start = Instant::now();
        for _ in 0..t.iterations {
            for _ in 0..t.count {
                if self.client {
                    self.out(c, t.size)?;
                } else {
                    self.back(c, t.size)?;
                }
            }
            for _ in 0..t.count {
                if self.client {
                    self.back(c, t.size)?;
                } else {
                    self.out(c, t.size)?;
                }
            }
        }
        show_perf(t, start.elapsed());
        Ok(())
    }
}

impl Run<'_> {
    /// riostream's `run_test`: a region of the test's size mapped for the
    /// peer (its last byte, the marker the peer's last write of a turn
    /// sets, starts at 0xff), the 16-byte start (which also carries each
    /// side's descriptor before it), then turns of `-C` direct writes each
    /// way; prints the line.
    fn run_io_test(&mut self, c: &mut Conn, t: &Test) -> Result<()> {
        let Conn::Rdma(s) = c else {
            bail!("riostream runs over rsockets only");
        };
        let size = t.size as usize;
        let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mut region = s.pd().alloc_mr(size, remote).context("riomap: register")?;
        region.write_at(size - 1, &[0xff])?;
        let map = s.iomap(&region, Some(0)).context("riomap")?;
        // riostream's start is not pattern-checked.
        if self.client {
            self.send_xfer(c, 16, false)?;
            self.recv_xfer(c, 16, false)?;
        } else {
            self.recv_xfer(c, 16, false)?;
            self.send_xfer(c, 16, false)?;
        }
        let Conn::Rdma(s) = c else {
            bail!("riostream runs over rsockets only");
        };
        // What is written carries the buffer's last byte: as in
        // riostream, whose buffer is its own region, that is 0xff, then
        // the marker last seen, never the one the peer waits for.
        self.buf[size - 1] = 0xff;
        let mut marker = 0u8;
        let start = Instant::now();
        for _ in 0..t.iterations {
            if !self.client {
                self.wait_marker(&region, marker)?;
                self.buf[size - 1] = marker;
                marker = marker.wrapping_add(1);
            }
            for _ in 1..t.count {
                self.io_xfer(s, size)?;
            }
            if self.o.verify {
                self.format(size - 1);
            }
            self.buf[size - 1] = marker;
            marker = marker.wrapping_add(1);
            self.io_xfer(s, size)?;
            if self.client {
                self.wait_marker(&region, marker)?;
                self.buf[size - 1] = marker;
                marker = marker.wrapping_add(1);
            }
        }
        show_perf(t, start.elapsed());
        s.iounmap(map).context("riounmap")?;
        Ok(())
    }

    /// riostream's `send_xfer`: `size` bytes of the buffer into the
    /// peer's region at offset 0, all of them.
    fn io_xfer(&mut self, s: &mut RdmaStream, size: usize) -> Result<()> {
        let buf = &self.buf;
        all_of("riowrite", self.o.timeout, size, |off| {
            s.iowrite(&buf[off..size], off as u64)
        })
    }

    /// riostream's `recv_xfer`: polls the region's last byte until the
    /// peer's marker lands there (at most `--timeout`), then checks the
    /// rest with `-T v`.
    fn wait_marker(&mut self, region: &Mr<PageBuf>, marker: u8) -> Result<()> {
        let size = region.len();
        let deadline = Instant::now() + self.o.timeout;
        let mut b = [0u8; 1];
        let mut spins = 0u32;
        loop {
            region.read_at(size - 1, &mut b)?;
            if b[0] == marker {
                break;
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 && Instant::now() > deadline {
                bail!(
                    "riostream: the peer's marker {marker} did not arrive within {:?}",
                    self.o.timeout
                );
            }
            std::hint::spin_loop();
        }
        if self.o.verify {
            region.read_at(0, &mut self.buf[..size - 1])?;
            self.verify(size - 1)?;
        }
        Ok(())
    }
}

/// `WouldBlock`s in a row between two looks at the clock in [`all_of`].
const SPINS_PER_CLOCK: u32 = 1024;

/// Runs `op` (a read or write from offset `off`) until `size` bytes went,
/// spinning on `WouldBlock` for at most `timeout` without progress, as
/// rstream's loops spin on EWOULDBLOCK (but bounded). The clock is read
/// only every [`SPINS_PER_CLOCK`] spins, and the idle time counts from
/// the first such read: where reading it is a system call (a clock
/// source without a vDSO path, HPET under QEMU TCG), one read per spin
/// slows the very spin whose latency rstream measures (rstream reads no
/// clock there).
fn all_of(
    what: &str,
    timeout: Duration,
    size: usize,
    mut op: impl FnMut(usize) -> io::Result<usize>,
) -> Result<()> {
    // Since when no progress was made (at the first look at the clock).
    let mut idle_since: Option<Instant> = None;
    let mut spins = 0u32;
    let mut off = 0;
    while off < size {
        match op(off) {
            Ok(0) => bail!("{what}: the peer closed after {off} of {size} bytes"),
            Ok(n) => {
                off += n;
                idle_since = None;
                spins = 0;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                spins += 1;
                if spins >= SPINS_PER_CLOCK {
                    spins = 0;
                    let now = Instant::now();
                    match idle_since {
                        None => idle_since = Some(now),
                        Some(t) if now.duration_since(t) > timeout => {
                            bail!("{what}: no progress for {timeout:?}")
                        }
                        Some(_) => {}
                    }
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).context(what.to_string()),
        }
    }
    Ok(())
}

/// rstream's `size_str`: 1 decimal below 10 of a unit, k/m/g suffixes.
pub fn size_str(size: u64) -> String {
    let (base, mag) = if size >= 1 << 30 {
        (1u64 << 30, "g")
    } else if size >= 1 << 20 {
        (1 << 20, "m")
    } else if size >= 1 << 10 {
        (1 << 10, "k")
    } else {
        (1, "")
    };
    let fraction = if size / base < 10 {
        (size % base) * 10 / base
    } else {
        0
    };
    if fraction != 0 {
        format!("{}.{}{mag}", size / base, fraction)
    } else {
        format!("{}{mag}", size / base)
    }
}

/// rstream's `cnt_str`.
pub fn cnt_str(cnt: u64) -> String {
    if cnt >= 1_000_000_000 {
        format!("{}b", cnt / 1_000_000_000)
    } else if cnt >= 1_000_000 {
        format!("{}m", cnt / 1_000_000)
    } else if cnt >= 1000 {
        format!("{}k", cnt / 1000)
    } else {
        format!("{cnt}")
    }
}

/// rstream's `size_to_count`: transfers (or iterations) per test size.
pub fn size_to_count(size: u32) -> u32 {
    if size >= 1 << 20 {
        100
    } else if size >= 1 << 16 {
        1000
    } else if size >= 1 << 10 {
        10000
    } else {
        100000
    }
}

/// A test's name as rstream makes it (its size string cut to 4
/// characters, then `_lat` or `_bw`).
fn test_name(size: u32, suffix: &str) -> String {
    let s = size_str(u64::from(size));
    format!("{}{suffix}", &s[..s.len().min(4)])
}

fn show_perf(t: &Test, elapsed: Duration) {
    let usec = (elapsed.as_secs_f64() * 1e6).max(1.0);
    let bytes = u64::from(t.iterations) * u64::from(t.count) * u64::from(t.size) * 2;
    println!(
        "{:<10}{:<8}{:<8}{:<8}{:<8}{:8.2}s{:10.2}{:11.2}",
        t.name,
        size_str(u64::from(t.size)),
        cnt_str(u64::from(t.count)),
        cnt_str(u64::from(t.iterations)),
        size_str(bytes),
        usec / 1e6,
        (bytes as f64 * 8.0) / (1000.0 * usec),
        (usec / f64::from(t.iterations)) / (f64::from(t.count) * 2.0),
    );
}

/// Runs `rverbs rstream`.
pub fn run(a: &RstreamArgs) -> Result<()> {
    run_opts(Opts::from_args(a, false)?)
}

/// Runs `rverbs riostream`.
pub fn run_io(a: &RstreamArgs) -> Result<()> {
    run_opts(Opts::from_args(a, true)?)
}

fn run_opts(o: Opts) -> Result<()> {
    let max = match o.custom {
        Some((_, _, s)) => s,
        None => TEST_SIZES.last().map_or(1 << 22, |t| t.0),
    };
    let mut r = Run {
        o: &o,
        client: o.server.is_some(),
        // At least the 16 bytes of the start exchange.
        buf: vec![0u8; max.max(16) as usize],
        ctr: Counters::default(),
    };
    let mut listening = match &o.server {
        Some(_) => None,
        None => Some(listen(&o)?),
    };
    println!(
        "{:<10}{:<8}{:<8}{:<8}{:<8}{:>8} {:>10}{:>13}",
        "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer"
    );
    let sizes = || {
        TEST_SIZES
            .iter()
            .filter(|(_, all)| !*all || o.all_sizes)
            .map(|t| t.0)
    };
    match o.custom {
        None => {
            let lat: Vec<Test> = sizes()
                .map(|size| Test {
                    name: test_name(size, "_lat"),
                    size,
                    count: 1,
                    iterations: size_to_count(size),
                })
                .collect();
            let c = open(&o, listening.as_mut(), Some(o.inline))?;
            r.serve(c, &lat)?;
            let bw: Vec<Test> = sizes()
                .map(|size| Test {
                    name: test_name(size, "_bw"),
                    size,
                    count: size_to_count(size),
                    iterations: 1,
                })
                .collect();
            let c = open(&o, listening.as_mut(), Some(0))?;
            r.serve(c, &bw)?;
        }
        Some((iterations, count, size)) => {
            let t = Test {
                name: "custom".into(),
                size,
                count,
                iterations,
            };
            let c = open(&o, listening.as_mut(), None)?;
            r.serve(c, std::slice::from_ref(&t))?;
        }
    }
    Ok(())
}

impl Run<'_> {
    /// Runs `tests` on the connection `c`, then closes it: here, or with
    /// `-T f` on the server in a child process this one waits for.
    fn serve(&mut self, c: Conn, tests: &[Test]) -> Result<()> {
        let work = |r: &mut Self, mut c: Conn| -> Result<()> {
            for t in tests {
                r.run_test(&mut c, t)?;
            }
            c.close();
            Ok(())
        };
        if self.o.fork && !self.client {
            forked(c, |c| work(self, c))
        } else {
            work(self, c)
        }
    }
}

/// `-T f`: runs `work` on `c` in a child process (fork) and waits for it
/// to end; its failure is ours. Only TCP connections come here (`-T f`
/// implies sockets): a socket is all the child needs.
fn forked(c: Conn, work: impl FnOnce(Conn) -> Result<()>) -> Result<()> {
    let threads = std::fs::read_dir("/proc/self/task")
        .context("-T f: counting this process's threads")?
        .count();
    if threads != 1 {
        bail!("-T f: this process has {threads} threads; it forks only with one");
    }
    // What is buffered is printed once, not by both processes.
    let _ = io::stdout().flush();
    // SAFETY: fork has no precondition of its own; what makes running
    // ordinary code in the child sound is that the parent has a single
    // thread (counted just above, and nothing since has started one), so
    // no lock (the allocator's, stdout's) can be held by a thread the
    // child does not have.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()).context("-T f: fork"),
        0 => {
            let code = match work(c) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("rstream (forked server process): {e:#}");
                    1
                }
            };
            let _ = io::stdout().flush();
            std::process::exit(code)
        }
        child => {
            // The child has its own copy of the socket.
            drop(c);
            let mut status = 0;
            loop {
                // SAFETY: `status` is a valid place for the kernel to
                // write the child's status into; `child` is our child.
                let rc = unsafe { libc::waitpid(child, &mut status, 0) };
                if rc == child {
                    break;
                }
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e).context("-T f: waiting for the server's child");
                }
            }
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                Ok(())
            } else {
                bail!("-T f: the server's child process failed (wait status {status:#x})")
            }
        }
    }
}

fn listen(o: &Opts) -> Result<Listening> {
    let addr = match &o.bind {
        Some(b) => resolve(b, o.port)?,
        None => SocketAddr::from(([0, 0, 0, 0], o.port)),
    };
    if o.tcp {
        let l = TcpListener::bind(addr).with_context(|| format!("rbind {addr}"))?;
        return Ok(Listening::Tcp(l));
    }
    // The server's sizes go with the listener (rstream sets its options
    // there before accepting); each accept tunes its own inline size.
    Ok(Listening::Rdma(
        o.stream(None)
            .bind(addr)
            .with_context(|| format!("rbind {addr}"))?,
    ))
}

/// The next connection: accepted from `l` (the server) or made to `-s`.
fn open(o: &Opts, l: Option<&mut Listening>, inline: Option<u16>) -> Result<Conn> {
    let mut c = match (l, &o.server) {
        (Some(Listening::Tcp(l)), _) => {
            // Bounded as the RDMA accept is.
            l.set_nonblocking(true)?;
            let deadline = Instant::now() + o.timeout;
            let s = loop {
                match l.accept() {
                    Ok((s, _)) => break s,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            bail!("raccept: no client within --timeout");
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(e) => return Err(e).context("raccept"),
                }
            };
            s.set_nonblocking(false)?;
            s.set_nodelay(true)?;
            Conn::Tcp(s)
        }
        (Some(Listening::Rdma(l)), _) => {
            // rstream tunes the listener before each accept.
            l.set_options(o.stream(inline));
            let (s, _) = l
                .accept_timeout(o.timeout)
                .context("raccept (no client within --timeout)")?;
            Conn::Rdma(Box::new(s))
        }
        (None, Some(server)) => {
            let dst = resolve(server, o.port)?;
            if o.tcp {
                let s = TcpStream::connect_timeout(&dst, o.timeout)
                    .with_context(|| format!("rconnect {dst}"))?;
                s.set_nodelay(true)?;
                Conn::Tcp(s)
            } else {
                let mut so = o.stream(inline);
                if let Some(b) = &o.bind {
                    so = so.source(resolve(b, 0)?);
                }
                Conn::Rdma(Box::new(
                    so.connect(dst).with_context(|| format!("rconnect {dst}"))?,
                ))
            }
        }
        (None, None) => bail!("neither a listener nor a server to connect to"),
    };
    c.set_nonblocking(!o.blocking)?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_as_rstream_prints_them() {
        assert_eq!(size_str(64), "64");
        assert_eq!(size_str(192), "192");
        assert_eq!(size_str(1536), "1.5k");
        assert_eq!(size_str(4096), "4k");
        assert_eq!(size_str(6144), "6k");
        assert_eq!(size_str(65536), "64k");
        assert_eq!(size_str(98304), "96k");
        assert_eq!(size_str(3 << 20), "3m");
        assert_eq!(size_str(12_800_000), "12m");
        assert_eq!(cnt_str(100_000), "100k");
        assert_eq!(cnt_str(999), "999");
        assert_eq!(test_name(1 << 6, "_lat"), "64_lat");
        assert_eq!(test_name((1 << 20) + (1 << 19), "_bw"), "1.5m_bw");
        assert_eq!(size_to_count(64), 100000);
        assert_eq!(size_to_count(1 << 20), 100);
    }

    fn args(words: &[&str]) -> RstreamArgs {
        crate::common::parse_args("rstream", words).unwrap()
    }

    #[test]
    fn riostream_takes_riostream_options_only() {
        let o = Opts::from_args(&args(&["-T", "v", "-T", "b", "-S", "4096"]), true).unwrap();
        assert!(o.io && o.verify && o.blocking && !o.tcp);
        assert_eq!(o.stream(Some(0)), o.stream(Some(0)).iomap_size(1));
        for bad in [&["-T", "s"][..], &["-T", "r"], &["-k", "1"], &["-T", "f"]] {
            let e = Opts::from_args(&args(bad), true).unwrap_err();
            assert!(!e.to_string().is_empty(), "{bad:?}");
        }
        // rstream keeps its TCP mode and keep-alive.
        let o = Opts::from_args(&args(&["-T", "s", "-k", "1"]), false).unwrap();
        assert!(o.tcp && !o.io && o.keepalive.is_some() && !o.fork);
        // -T f is rstream's socket mode with a forking server.
        let o = Opts::from_args(&args(&["-T", "fork", "-S", "64"]), false).unwrap();
        assert!(o.tcp && o.fork);
    }
}
