//! `rverbs rcopy`: librdmacm's `rcopy` (rdmacm-utils) on `rverbs_cm::stream`,
//! the same messages over the same rsockets wire, so either side can be
//! rdma-core's. The client sends a file (open, write, close, each
//! answered); the server stores it.
//!
//! rcopy's messages, host byte order (little-endian here, as on every
//! host rcopy runs on in practice): a 16-byte header (version 0, command,
//! total length, a 32-bit value, a 64-bit id); OPEN carries the
//! destination path (NUL-terminated, padded to 8 bytes) and the file mode
//! in the value; WRITE an 8-byte size, then the file's bytes; each
//! command is answered by a header with the command's 0x80 bit set and an
//! errno (0: done) as value.
//!
//! Unlike rcopy's server, which opens whatever path a client names, ours
//! stores only the path's last component, in `-d DIR` (default: the
//! current directory), never follows a symbolic link there, drops
//! set-id bits from the mode, refuses files over `--max-size`, and bounds
//! every wait (`--timeout`).

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};
use rverbs_cm::stream::{RdmaListener, RdmaStream, StreamOptions};

use crate::common::{num, timeout_secs};
use crate::rping::resolve;

/// rcopy's port (`-p`).
pub const DEFAULT_PORT: u16 = 7427;
/// The header's size.
pub const HDR_LEN: usize = 16;
/// The longest path an OPEN may carry.
pub const MAX_PATH: usize = 4096;

/// Commands.
pub const CMD_OPEN: u8 = 1;
/// Close the file.
pub const CMD_CLOSE: u8 = 2;
/// Write the file's bytes (its size follows the header).
pub const CMD_WRITE: u8 = 3;
/// The answer's bit.
pub const CMD_RESP: u8 = 0x80;

/// The options of `rverbs rcopy`.
#[derive(Debug, Clone, clap::Args)]
pub struct RcopyArgs {
    /// The file to send (without it: be the server).
    #[arg(value_name = "SOURCE")]
    pub source: Option<PathBuf>,
    /// The server, and the destination name after a colon (default: the
    /// source's path).
    #[arg(value_name = "SERVER[:DESTINATION]")]
    pub server: Option<String>,
    /// Port.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Server: the folder files are stored in.
    #[arg(short = 'd', long = "dir", default_value = ".")]
    pub dir: PathBuf,
    /// Server: the largest file accepted, in bytes.
    #[arg(long = "max-size", default_value_t = 4 << 30, value_parser = num::<u64>)]
    pub max_size: u64,
    /// Server: exit after one client (rcopy serves forever).
    #[arg(long = "once")]
    pub once: bool,
    /// The longest wait for the peer in any one step, in seconds.
    #[arg(long = "timeout", default_value_t = 30, value_parser = timeout_secs)]
    pub timeout: u64,
}

/// A message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hdr {
    /// 0.
    pub version: u8,
    /// A `CMD_*`, with `CMD_RESP` in answers.
    pub command: u8,
    /// The whole message's length (the header included).
    pub len: u16,
    /// Mode (OPEN) or errno (answers).
    pub data: u32,
    /// Echoed in the answer.
    pub id: u64,
}

impl Hdr {
    /// The 16 bytes.
    pub fn encode(&self) -> [u8; HDR_LEN] {
        let mut b = [0u8; HDR_LEN];
        b[0] = self.version;
        b[1] = self.command;
        b[2..4].copy_from_slice(&self.len.to_le_bytes());
        b[4..8].copy_from_slice(&self.data.to_le_bytes());
        b[8..16].copy_from_slice(&self.id.to_le_bytes());
        b
    }

    /// Reads a header from a peer: version 0 and a length that covers the
    /// header, as rcopy checks.
    pub fn decode(b: &[u8; HDR_LEN]) -> Result<Hdr> {
        let h = Hdr {
            version: b[0],
            command: b[1],
            len: u16::from_le_bytes([b[2], b[3]]),
            data: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            id: u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]),
        };
        ensure!(
            h.version == 0 && usize::from(h.len) >= HDR_LEN,
            "invalid version {} or length {}",
            h.version,
            h.len
        );
        Ok(h)
    }
}

/// The file name an OPEN's path bytes give: the last component of the
/// path before the first NUL. Refused: no name, `.` or `..`.
pub fn dest_name(path: &[u8]) -> Result<PathBuf> {
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    let p = Path::new(std::ffi::OsStr::from_bytes(&path[..end]));
    match p.file_name() {
        Some(n) if n != "." && n != ".." => Ok(PathBuf::from(n)),
        _ => bail!("no file name in the path {:?}", p),
    }
}

fn step_io<T>(r: std::io::Result<T>, what: &str) -> Result<T> {
    r.with_context(|| what.to_string())
}

/// Runs `rverbs rcopy`.
pub fn run(a: &RcopyArgs) -> Result<()> {
    let timeout = Duration::from_secs(a.timeout.max(1));
    match (&a.source, &a.server) {
        (None, None) => serve(a, timeout),
        (Some(src), Some(server)) => send(a, src, server, timeout),
        _ => bail!(
            "usage: rverbs rcopy SOURCE SERVER[:DESTINATION] (client) or rverbs rcopy (server)"
        ),
    }
}

/// Reads an answer to `cmd`: its errno.
fn get_resp(s: &mut RdmaStream, cmd: u8) -> Result<u32> {
    let mut b = [0u8; HDR_LEN];
    step_io(s.read_exact(&mut b), "receiving the answer")?;
    let h = Hdr::decode(&b)?;
    ensure!(
        usize::from(h.len) == HDR_LEN && h.command == cmd | CMD_RESP,
        "invalid length {} or bad command response {:x}:{:x}",
        h.len,
        h.command,
        cmd | CMD_RESP
    );
    Ok(h.data)
}

fn send(a: &RcopyArgs, src: &Path, server: &str, timeout: Duration) -> Result<()> {
    let (host, dest) = match server.split_once(':') {
        Some((h, d)) => (h, d.as_bytes().to_vec()),
        None => (server, src.as_os_str().as_bytes().to_vec()),
    };
    ensure!(dest.len() < MAX_PATH, "destination path too long");
    let mut file = File::open(src).with_context(|| format!("open {}", src.display()))?;
    let meta = file.metadata()?;
    let bytes = meta.len();
    let dst = resolve(host, a.port)?;
    let mut s = StreamOptions::new()
        .timeout(timeout)
        .connect(dst)
        .with_context(|| format!("rconnect {dst}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    print!("opening...");
    std::io::stdout().flush()?;
    // The path NUL-terminated, padded to 8 bytes, as rcopy pads it.
    let padded = (dest.len() + 8) & !7;
    let mut msg = Hdr {
        command: CMD_OPEN,
        len: u16::try_from(HDR_LEN + padded)?,
        data: std::os::unix::fs::PermissionsExt::mode(&meta.permissions()),
        ..Hdr::default()
    }
    .encode()
    .to_vec();
    msg.extend_from_slice(&dest);
    msg.resize(HDR_LEN + padded, 0);
    step_io(s.write_all(&msg), "sending OPEN")?;
    let st = get_resp(&mut s, CMD_OPEN)?;
    ensure!(st == 0, "the server could not open the file (errno {st})");
    print!("transferring");
    std::io::stdout().flush()?;
    let mut w = Hdr {
        command: CMD_WRITE,
        len: 24,
        ..Hdr::default()
    }
    .encode()
    .to_vec();
    w.extend_from_slice(&bytes.to_le_bytes());
    step_io(s.write_all(&w), "sending WRITE")?;
    print!("...");
    std::io::stdout().flush()?;
    let start = Instant::now();
    let mut buf = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = file.read(&mut buf[..left.min(1 << 20) as usize])?;
        ensure!(n > 0, "{} shrank while it was sent", src.display());
        step_io(s.write_all(&buf[..n]), "sending the file")?;
        left -= n as u64;
    }
    let st = get_resp(&mut s, CMD_WRITE)?;
    let took = start.elapsed();
    print!("closing...");
    std::io::stdout().flush()?;
    let close = Hdr {
        command: CMD_CLOSE,
        len: HDR_LEN as u16,
        ..Hdr::default()
    };
    step_io(s.write_all(&close.encode()), "sending CLOSE")?;
    let cst = get_resp(&mut s, CMD_CLOSE)?;
    ensure!(st == 0, "the server failed to store the file (errno {st})");
    ensure!(
        cst == 0,
        "the server failed to close the file (errno {cst})"
    );
    println!("done");
    let _ = s.shutdown(std::net::Shutdown::Both);
    let usec = took.as_secs_f64() * 1e6;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Gb/sec",
        usec / 1e6,
        (bytes as f64 * 8.0) / (1000.0 * usec.max(1.0))
    );
    Ok(())
}

fn serve(a: &RcopyArgs, timeout: Duration) -> Result<()> {
    ensure!(a.dir.is_dir(), "{} is not a folder", a.dir.display());
    let l = RdmaListener::bind(std::net::SocketAddr::from(([0, 0, 0, 0], a.port)))
        .with_context(|| format!("rbind port {}", a.port))?;
    loop {
        print!("waiting for connection...");
        std::io::stdout().flush()?;
        let (mut s, peer) = l.accept().context("raccept")?;
        println!("client: {}", peer.ip());
        s.set_read_timeout(Some(timeout))?;
        s.set_write_timeout(Some(timeout))?;
        let r = process(&mut s, a);
        let _ = s.shutdown(std::net::Shutdown::Both);
        if a.once {
            return r;
        }
        if let Err(e) = r {
            println!("client failed: {e:#}");
        }
    }
}

fn resp(s: &mut RdmaStream, h: &Hdr, status: u32) -> Result<()> {
    let r = Hdr {
        version: 0,
        command: h.command | CMD_RESP,
        len: HDR_LEN as u16,
        data: status,
        id: h.id,
    };
    step_io(s.write_all(&r.encode()), "sending an answer")
}

fn errno_of(e: &std::io::Error) -> u32 {
    e.raw_os_error()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(5)
}

/// One client's commands, until it closes the file or the stream.
fn process(s: &mut RdmaStream, a: &RcopyArgs) -> Result<()> {
    let mut file: Option<(File, PathBuf)> = None;
    loop {
        let mut b = [0u8; HDR_LEN];
        match s.read(&mut b[..1]) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(e).context("receiving a command"),
        }
        step_io(s.read_exact(&mut b[1..]), "receiving a command")?;
        let h = Hdr::decode(&b)?;
        match h.command {
            CMD_OPEN => {
                print!("opening: ");
                let len = usize::from(h.len) - HDR_LEN;
                ensure!(len <= MAX_PATH, "a path of {len} bytes");
                let mut path = vec![0u8; len];
                step_io(s.read_exact(&mut path), "receiving the path")?;
                if file.is_some() {
                    println!("cannot open another file");
                    resp(s, &h, 16)?; // EBUSY
                    continue;
                }
                let name = match dest_name(&path) {
                    Ok(n) => n,
                    Err(e) => {
                        println!("{e}");
                        resp(s, &h, 22)?; // EINVAL
                        continue;
                    }
                };
                let at = a.dir.join(&name);
                print!("{}, ", at.display());
                std::io::stdout().flush()?;
                match OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(h.data & 0o777)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(&at)
                {
                    Ok(f) => {
                        file = Some((f, at));
                        resp(s, &h, 0)?;
                    }
                    Err(e) => {
                        println!("unable to open destination file");
                        resp(s, &h, errno_of(&e))?;
                    }
                }
            }
            CMD_WRITE => {
                print!("transferring");
                std::io::stdout().flush()?;
                ensure!(
                    usize::from(h.len) == HDR_LEN + 8,
                    "...invalid message length {}",
                    h.len
                );
                let mut sz = [0u8; 8];
                step_io(s.read_exact(&mut sz), "receiving the size")?;
                let bytes = u64::from_le_bytes(sz);
                let Some((f, _)) = file.as_mut() else {
                    println!("...file not opened");
                    // The bytes follow anyway: the stream cannot go on.
                    resp(s, &h, 22)?;
                    bail!("WRITE before OPEN");
                };
                if bytes > a.max_size {
                    resp(s, &h, 27)?; // EFBIG
                    bail!("a file of {bytes} bytes (--max-size {})", a.max_size);
                }
                print!("...{bytes} bytes...");
                std::io::stdout().flush()?;
                let mut buf = vec![0u8; 1 << 20];
                let mut left = bytes;
                let mut status = 0;
                while left > 0 {
                    let n = left.min(buf.len() as u64) as usize;
                    step_io(s.read_exact(&mut buf[..n]), "receiving data")?;
                    if status == 0 {
                        if let Err(e) = f.write_all(&buf[..n]) {
                            status = errno_of(&e);
                        }
                    }
                    left -= n as u64;
                }
                resp(s, &h, status)?;
            }
            CMD_CLOSE => {
                print!("closing...");
                resp(s, &h, 0)?;
                if let Some((f, _)) = file.take() {
                    f.sync_all().ok();
                }
                println!("done");
                if a.once {
                    return Ok(());
                }
            }
            _ => {
                resp(s, &h, 22)?;
                bail!("unknown command {:#x}", h.command);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_checks() {
        let h = Hdr {
            version: 0,
            command: CMD_WRITE | CMD_RESP,
            len: 16,
            data: 2,
            id: 7,
        };
        assert_eq!(Hdr::decode(&h.encode()).unwrap(), h);
        let mut b = h.encode();
        b[0] = 1;
        assert!(Hdr::decode(&b).is_err());
        let mut b = h.encode();
        b[2] = 15;
        assert!(Hdr::decode(&b).is_err());
    }

    #[test]
    fn only_the_last_component_is_kept() {
        assert_eq!(
            dest_name(b"/etc/passwd\0\0\0").unwrap(),
            Path::new("passwd")
        );
        assert_eq!(dest_name(b"../../x\0").unwrap(), Path::new("x"));
        assert_eq!(dest_name(b"a/b/c").unwrap(), Path::new("c"));
        assert!(dest_name(b"..\0").is_err());
        assert!(dest_name(b"/\0").is_err());
        assert!(dest_name(b"\0abc").is_err());
        assert!(dest_name(b"").is_err());
    }
}
