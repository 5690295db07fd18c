//! What every pingpong tool shares: the common options, opening the device
//! and reading the port's LID and GID, random PSNs, the completion loop
//! (busy polling or sleeping on a completion channel), the summary lines
//! and the buffer check of `-c`.

use std::hash::{BuildHasher, Hasher};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use rverbs::{CompChannel, Context, Cq, Gid, LinkLayer, Mtu, PortAttr, Wc};

use crate::wire::{Dest, Limits};

/// Parses `words` as the options `A` of a tool named `name` (tests of the
/// tools' option structs, which clap flattens into its subcommands).
#[cfg(test)]
pub fn parse_args<A: clap::Args + clap::FromArgMatches>(
    name: &'static str,
    words: &[&str],
) -> std::result::Result<A, clap::Error> {
    let cmd = A::augment_args(clap::Command::new(name));
    let m = cmd.try_get_matches_from(std::iter::once(name).chain(words.iter().copied()))?;
    A::from_arg_matches(&m)
}

/// `wr_id` of receives.
pub const RECV_WRID: u64 = 1;
/// `wr_id` of sends.
pub const SEND_WRID: u64 = 2;

/// Options every pingpong tool takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    /// Listen on / connect to TCP port PORT.
    #[arg(short = 'p', long = "port", default_value = "18515", value_parser = num::<u16>)]
    pub port: u16,
    /// Use RDMA device DEV (default: the first device found).
    #[arg(short = 'd', long = "ib-dev", value_name = "DEV")]
    pub dev: Option<String>,
    /// Use port PORT of the device.
    #[arg(short = 'i', long = "ib-port", value_name = "PORT", default_value = "1", value_parser = num::<u8>)]
    pub ib_port: u8,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value = "500", value_parser = num::<u32>)]
    pub rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long = "iters", default_value = "1000", value_parser = num::<u32>)]
    pub iters: u32,
    /// Service level.
    #[arg(short = 'l', long = "sl", default_value = "0", value_parser = num::<u8>)]
    pub sl: u8,
    /// Sleep on completion events instead of busy polling.
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Local port GID index (RoCE needs one).
    #[arg(short = 'g', long = "gid-idx", value_name = "INDEX", value_parser = num::<u8>)]
    pub gid_idx: Option<u8>,
    /// Validate the received buffer (server side), exit 1 on a mismatch.
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Give up after SECS seconds without progress (no completion, no
    /// byte of the address exchange); 0 waits forever. The server waits
    /// for its client without limit.
    #[arg(long = "timeout", value_name = "SECS", default_value = "60", value_parser = timeout_secs)]
    pub timeout: u64,
    /// Connect to the server on HOST; without it, be the server.
    #[arg(value_name = "HOST")]
    pub host: Option<String>,
}

/// The longest `--timeout` the tools take, in seconds (about 31 years): a
/// wait that long is as good as endless, and its deadline still fits the
/// clock (`Instant + Duration` panics past the clock's range).
pub const MAX_TIMEOUT_SECS: u64 = 1_000_000_000;

/// Parses a `--timeout` in seconds as [`num`] reads a number, refusing
/// more than [`MAX_TIMEOUT_SECS`].
pub fn timeout_secs(s: &str) -> std::result::Result<u64, String> {
    let v = num::<u64>(s)?;
    if v > MAX_TIMEOUT_SECS {
        return Err(format!(
            "{s} seconds is longer than the longest timeout, {MAX_TIMEOUT_SECS}"
        ));
    }
    Ok(v)
}

/// Parses a number the way `strtoul(s, NULL, 0)` reads it (`0x` hex,
/// leading-zero octal, else decimal), refusing trailing garbage and values
/// that do not fit `T`.
pub fn num<T: TryFrom<u64>>(s: &str) -> std::result::Result<T, String> {
    let t = s.trim();
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    let v = u64::from_str_radix(digits, radix).map_err(|_| format!("{s:?} is not a number"))?;
    T::try_from(v).map_err(|_| format!("{s} is out of range"))
}

/// Parses a path MTU in bytes (256, 512, 1024, 2048 or 4096; the number
/// as [`num`] reads it): the `-m` option of the pingpong tools and of
/// `rverbs perf`.
pub fn parse_mtu(s: &str) -> std::result::Result<Mtu, String> {
    let n: u32 = num(s)?;
    Mtu::from_bytes(n).ok_or_else(|| format!("MTU {s} is not one of 256, 512, 1024, 2048, 4096"))
}

impl Common {
    /// The timeout of `--timeout`, `None` for 0.
    pub fn limit(&self) -> Option<Duration> {
        (self.timeout > 0).then(|| Duration::from_secs(self.timeout))
    }
    /// Limits of the address exchange.
    pub fn wire_limits(&self) -> Limits {
        Limits { io: self.limit() }
    }
    /// Checks what the option parser cannot.
    pub fn validate(&self) -> Result<()> {
        if self.ib_port < 1 {
            bail!("-i/--ib-port must be at least 1");
        }
        if self.rx_depth < 1 {
            bail!("-r/--rx-depth must be at least 1");
        }
        if self.iters < 1 {
            bail!("-n/--iters must be at least 1");
        }
        if self.sl > 15 {
            bail!("-l/--sl must be 0..15");
        }
        Ok(())
    }
    /// The CQ depth: the `-r` receives plus `extra` entries (the sends);
    /// refused when the sum does not fit 32 bits.
    pub fn cq_depth(&self, extra: u32) -> Result<u32> {
        self.rx_depth.checked_add(extra).ok_or_else(|| {
            anyhow!(
                "-r/--rx-depth {} is too large: the CQ must hold it plus {extra} entries",
                self.rx_depth
            )
        })
    }
    /// The GID index to send from: `-g`, or 0 (unused without a GRH).
    pub fn sgid_index(&self) -> u8 {
        self.gid_idx.unwrap_or(0)
    }
}

/// A random 24-bit PSN.
pub fn random_psn() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    (h.finish() & 0xff_ffff) as u32
}

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}

/// The opened device, its port and our GID.
pub struct Device {
    /// The device context.
    pub ctx: Context,
    /// The port's attributes.
    pub port: PortAttr,
    /// The GID of `-g`, or zero.
    pub gid: Gid,
}

/// Opens `-d` (or the first device), queries `-i` and the GID of `-g`.
pub fn open(c: &Common) -> Result<Device> {
    let dev = match &c.dev {
        Some(name) => {
            rverbs::device(name).with_context(|| format!("IB device {name} not found"))?
        }
        None => rverbs::devices()
            .context("failed to get the RDMA device list")?
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("no RDMA devices found"))?,
    };
    let ctx = dev
        .open()
        .with_context(|| format!("couldn't get a context for {}", dev.name()))?;
    let port = ctx
        .query_port(c.ib_port)
        .with_context(|| format!("couldn't get info of port {}", c.ib_port))?;
    if port.link_layer() != LinkLayer::Ethernet && port.lid == 0 {
        bail!("couldn't get the local LID (port {} has none)", c.ib_port);
    }
    let gid = match c.gid_idx {
        Some(i) => ctx
            .query_gid(c.ib_port, i)
            .with_context(|| format!("can't read the sgid of index {i}"))?,
        None => Gid::ZERO,
    };
    Ok(Device { ctx, port, gid })
}

/// The GID as `inet_ntop` prints it.
pub fn gid_text(g: &Gid) -> String {
    std::net::Ipv6Addr::from(g.0).to_string()
}

/// Prints a `local address:` line (`ud` puts a colon before the GID).
pub fn print_local(d: &Dest, colon_before_gid: bool) {
    println!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{} GID {}",
        d.lid,
        d.qpn,
        d.psn,
        if colon_before_gid { ":" } else { "," },
        gid_text(&d.gid)
    );
}

/// Prints a `remote address:` line.
pub fn print_remote(d: &Dest) {
    println!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid,
        d.qpn,
        d.psn,
        gid_text(&d.gid)
    );
}

/// Whether a GID makes the peer reachable only through a GRH: its
/// interface id is set (the pingpong tools' rule).
pub fn needs_grh(g: &Gid) -> bool {
    g.interface_id() != 0
}

/// The two summary lines.
pub fn summary_lines(size: u32, iters: u32, elapsed: Duration) -> (String, String) {
    let usec = elapsed.as_secs_f64() * 1e6;
    // u32 * u32 * 2 may exceed u64.
    let bytes = u128::from(size) * u128::from(iters) * 2;
    (
        format!(
            "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
            usec / 1e6,
            bytes as f64 * 8.0 / usec
        ),
        format!(
            "{iters} iters in {:.2} seconds = {:.2} usec/iter",
            usec / 1e6,
            usec / iters as f64
        ),
    )
}

/// Prints the two summary lines.
pub fn print_summary(size: u32, iters: u32, elapsed: Duration) {
    let (bytes, iters) = summary_lines(size, iters, elapsed);
    println!("{bytes}");
    println!("{iters}");
}

/// Compares `got` with `want`, prints an `invalid data in page N` line for
/// every page (of `page` bytes) that differs, and fails if any did.
pub fn check_buffer(got: &[u8], want: &[u8], page: usize) -> Result<()> {
    let mut bad = 0;
    for (i, (g, w)) in got.chunks(page).zip(want.chunks(page)).enumerate() {
        if g != w {
            println!("invalid data in page {i}");
            bad += 1;
        }
    }
    if bad > 0 {
        bail!("{bad} page(s) of the received buffer hold unexpected data");
    }
    Ok(())
}

/// The data the pingpong clients send with `-c`: `fill` everywhere but the
/// first byte of each page, which is 0.
pub fn page_pattern(len: usize, page: usize, fill: u8) -> Vec<u8> {
    (0..len)
        .map(|i| if i % page == 0 { 0 } else { fill })
        .collect()
}

/// What one side of a pingpong does, for [`run_loop`].
pub trait PingPong {
    /// The CQ all QPs complete on.
    fn cq(&mut self) -> &mut Cq;
    /// Posts one signaled send on QP `qp`.
    fn post_send(&mut self, qp: usize) -> Result<()>;
    /// Posts `n` receives.
    fn post_recv(&mut self, n: u32) -> Result<()>;
    /// The index of the QP with number `qpn`.
    fn qp_index(&self, qpn: u32) -> Option<usize>;
}

/// Parameters of [`run_loop`].
pub struct LoopParams<'a> {
    /// Number of QPs.
    pub num_qp: usize,
    /// Exchanges (counted over all QPs).
    pub iters: u32,
    /// Receives kept posted.
    pub rx_depth: u32,
    /// Refill the receives when at most this many remain.
    pub refill_at: u32,
    /// Whether we send first.
    pub client: bool,
    /// Sleep on this channel instead of busy polling.
    pub channel: Option<&'a CompChannel>,
    /// Longest wait for a completion.
    pub limit: Option<Duration>,
    /// Completions polled at once.
    pub batch: usize,
}

fn wait_event(ch: &CompChannel, limit: Option<Duration>) -> Result<()> {
    let mut pfd = libc::pollfd {
        fd: ch.as_fd().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = limit.map_or(-1, |d| d.as_millis().min(i32::MAX as u128) as i32);
    loop {
        // SAFETY: one valid pollfd, for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r > 0 {
            break;
        }
        if r == 0 {
            bail!(
                "no completion event within {}s",
                limit.map_or(0, |d| d.as_secs())
            );
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(anyhow!("polling the completion channel: {e}"));
        }
    }
    ch.get_event().context("failed to get a CQ event")?;
    Ok(())
}

/// Runs the ping-pong: the client posts the first send on every QP; each
/// side then sends again on a QP once both its last send and a receive on
/// it completed, until `iters` sends and receives are done. Receives are
/// reposted in bulk when at most `refill_at` remain. Any error completion
/// fails. Returns the time from the first send to the last completion.
pub fn run_loop(pp: &mut impl PingPong, p: &LoopParams<'_>) -> Result<Duration> {
    let mut pending = vec![0u64; p.num_qp];
    if p.client {
        for (i, pend) in pending.iter_mut().enumerate() {
            pp.post_send(i).context("couldn't post send")?;
            *pend = SEND_WRID | RECV_WRID;
        }
    } else {
        pending.fill(RECV_WRID);
    }
    let start = Instant::now();
    let mut wc = vec![Wc::default(); p.batch.max(1)];
    let (mut scnt, mut rcnt, mut routs) = (0u32, 0u32, p.rx_depth);
    let mut last_progress = Instant::now();
    let mut spins = 0u32;
    while rcnt < p.iters || scnt < p.iters {
        if let Some(ch) = p.channel {
            wait_event(ch, p.limit)?;
            pp.cq()
                .req_notify(false)
                .context("couldn't request CQ notification")?;
        }
        loop {
            let n = pp.cq().poll(&mut wc).context("poll CQ failed")?;
            if n == 0 {
                if p.channel.is_some() {
                    break;
                }
                spins += 1;
                if spins >= 1024 {
                    spins = 0;
                    if let Some(l) = p.limit {
                        if last_progress.elapsed() > l {
                            bail!(
                                "no completion within {}s ({scnt} sends and {rcnt} receives done of {})",
                                l.as_secs(),
                                p.iters
                            );
                        }
                    }
                }
                std::hint::spin_loop();
                continue;
            }
            last_progress = Instant::now();
            for w in &wc[..n] {
                if !w.is_success() {
                    bail!(
                        "failed status {} ({}) for wr_id {}",
                        w.status().as_str(),
                        w.status().0,
                        w.wr_id()
                    );
                }
                let qi = pp
                    .qp_index(w.qp_num())
                    .ok_or_else(|| anyhow!("couldn't find QPN {:06x}", w.qp_num()))?;
                match w.wr_id() {
                    SEND_WRID => scnt = scnt.saturating_add(1),
                    RECV_WRID => {
                        routs = routs
                            .checked_sub(1)
                            .ok_or_else(|| anyhow!("a receive completed with none posted"))?;
                        if routs <= p.refill_at {
                            pp.post_recv(p.rx_depth - routs)
                                .context("couldn't post receive")?;
                            routs = p.rx_depth;
                        }
                        rcnt = rcnt.saturating_add(1);
                    }
                    other => bail!("completion for unknown wr_id {other}"),
                }
                pending[qi] &= !w.wr_id();
                if scnt < p.iters && pending[qi] == 0 {
                    pp.post_send(qi).context("couldn't post send")?;
                    pending[qi] = SEND_WRID | RECV_WRID;
                }
            }
            if p.channel.is_none() {
                break;
            }
        }
    }
    Ok(start.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_like_strtoul_base_0() {
        assert_eq!(num::<u32>("4096"), Ok(4096));
        assert_eq!(num::<u32>("0x1000"), Ok(4096));
        assert_eq!(num::<u32>("010"), Ok(8));
        assert_eq!(num::<u32>("0"), Ok(0));
        assert!(num::<u16>("65536").is_err());
        assert!(num::<u32>("12abc").is_err());
        assert!(num::<u32>("-1").is_err());
        assert!(num::<u8>("").is_err());
    }

    #[test]
    fn page_pattern_and_check() {
        let p = page_pattern(10, 4, 0x7b);
        assert_eq!(p, [0, 0x7b, 0x7b, 0x7b, 0, 0x7b, 0x7b, 0x7b, 0, 0x7b]);
        assert!(check_buffer(&p, &p, 4).is_ok());
        let mut q = p.clone();
        q[9] = 1;
        let e = check_buffer(&q, &p, 4).unwrap_err().to_string();
        assert!(e.contains("1 page"), "{e}");
    }

    #[test]
    fn grh_rule_and_gid_text() {
        let g: Gid = "::ffff:10.0.0.1".parse().unwrap();
        assert!(needs_grh(&g));
        assert_eq!(gid_text(&g), "::ffff:10.0.0.1");
        assert!(!needs_grh(&Gid::ZERO));
        assert_eq!(gid_text(&Gid::ZERO), "::");
    }

    #[test]
    fn summary_of_the_largest_run_does_not_overflow() {
        // -s and -n both 2^32 - 1: size * iters * 2 exceeds u64.
        let (bytes, iters) = summary_lines(u32::MAX, u32::MAX, Duration::from_secs(1));
        assert!(
            bytes.starts_with("36893488130239234050 bytes in 1.00 seconds"),
            "{bytes}"
        );
        assert!(
            iters.starts_with("4294967295 iters in 1.00 seconds"),
            "{iters}"
        );
    }

    #[test]
    fn psns_fit_24_bits() {
        for _ in 0..100 {
            assert!(random_psn() <= 0xff_ffff);
        }
    }
}
