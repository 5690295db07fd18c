//! The out-of-band TCP exchange of the pingpong tools: each side's
//! destination (LID, QPN, PSN, GID) as a fixed 52-byte text message, in the
//! format rdma-core's `ibv_*_pingpong` examples use, so either side can be
//! ours or theirs.
//!
//! The message is `LLLL:QQQQQQ:PPPPPP:GGGG...` (hex LID, QPN and PSN, then
//! the 16 GID bytes as 32 hex digits in wire order) followed by a NUL. The
//! client connects and sends its messages; the server reads them, connects
//! its QPs, answers with its own; the client then sends `done` plus a NUL.
//! The single-QP tools send one message each way, the SRQ tool
//! [`SRQ_LINES`].

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use rverbs::Gid;

/// Size of one destination message, NUL included.
pub const MSG_LEN: usize = 52;
/// The client's closing message: `done` and its NUL.
pub const DONE: &[u8; 5] = b"done\0";
/// How many destination messages the SRQ tool exchanges each way, whatever
/// the number of QPs in use (the unused ones are all zero).
pub const SRQ_LINES: usize = 256;

/// One QP's address as the pingpong tools exchange it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN the QP sends (24 bits).
    pub psn: u32,
    /// Port GID (zero when no GID index was given).
    pub gid: Gid,
}

/// The GID as 32 lowercase hex digits, its bytes in order.
pub fn gid_to_wire(gid: &Gid) -> String {
    gid.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses [`gid_to_wire`]'s form (exactly 32 hex digits).
pub fn gid_from_wire(s: &str) -> Result<Gid> {
    if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        bail!("bad GID {s:?} in the peer's address: want 32 hex digits");
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
            .map_err(|e| anyhow!("bad GID {s:?}: {e}"))?;
    }
    Ok(Gid(g))
}

impl Dest {
    /// Encodes the 52-byte message (text, then NUL padding).
    pub fn encode(&self) -> Result<[u8; MSG_LEN]> {
        if self.qpn > 0xff_ffff || self.psn > 0xff_ffff {
            bail!("QPN {:#x} or PSN {:#x} exceeds 24 bits", self.qpn, self.psn);
        }
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn,
            self.psn,
            gid_to_wire(&self.gid)
        );
        let mut msg = [0u8; MSG_LEN];
        // 4 + 6 + 6 + 32 digits and 3 colons: 51 bytes, then the NUL.
        msg[..text.len()].copy_from_slice(text.as_bytes());
        Ok(msg)
    }

    /// Decodes a message: text up to the first NUL, four `:`-separated
    /// fields, the first three hex numbers.
    pub fn decode(msg: &[u8]) -> Result<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end])
            .map_err(|_| anyhow!("the peer's address is not text"))?;
        let fields: Vec<&str> = text.split(':').collect();
        if fields.len() != 4 {
            bail!("malformed peer address {text:?}: want LID:QPN:PSN:GID");
        }
        let hex = |what: &str, s: &str, max: u32| -> Result<u32> {
            let v = u32::from_str_radix(s, 16)
                .map_err(|_| anyhow!("malformed {what} {s:?} in peer address {text:?}"))?;
            if v > max {
                bail!("{what} {v:#x} out of range in peer address {text:?}");
            }
            Ok(v)
        };
        Ok(Dest {
            lid: hex("LID", fields[0], 0xffff)? as u16,
            qpn: hex("QPN", fields[1], 0xff_ffff)?,
            psn: hex("PSN", fields[2], 0xff_ffff)?,
            gid: gid_from_wire(fields[3])?,
        })
    }
}

/// Timeouts of the exchange: `None` waits forever.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bound on each read and write once connected (and on connecting).
    pub io: Option<Duration>,
}

fn read_msgs(s: &mut TcpStream, n: usize) -> Result<Vec<Dest>> {
    let mut out = Vec::with_capacity(n);
    let mut msg = [0u8; MSG_LEN];
    for i in 0..n {
        s.read_exact(&mut msg).map_err(|e| {
            if e.kind() == ErrorKind::UnexpectedEof {
                anyhow!("the peer closed the connection after {i} of {n} address messages")
            } else {
                anyhow!("reading the peer's address {i}: {e}")
            }
        })?;
        out.push(Dest::decode(&msg)?);
    }
    Ok(out)
}

fn write_msgs(s: &mut TcpStream, mine: &[Dest]) -> Result<()> {
    let mut buf = Vec::with_capacity(mine.len() * MSG_LEN);
    for d in mine {
        buf.extend_from_slice(&d.encode()?);
    }
    s.write_all(&buf).context("sending our address")
}

/// Connects to `host:port` over TCP (each address tried in turn, each
/// attempt bounded by `limit`).
pub fn connect(host: &str, port: u16, limit: Option<Duration>) -> Result<TcpStream> {
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
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => anyhow!("couldn't connect to {host}:{port}: {e}"),
        None => anyhow!("couldn't connect to {host}:{port}: no address"),
    })
}

/// Client side: connects to `host:port`, sends `mine`, reads as many
/// messages back and sends `done`.
pub fn client_exchange(host: &str, port: u16, mine: &[Dest], lim: Limits) -> Result<Vec<Dest>> {
    let mut s = connect(host, port, lim.io)?;
    s.set_read_timeout(lim.io)?;
    s.set_write_timeout(lim.io)?;
    s.set_nodelay(true)?;
    write_msgs(&mut s, mine)?;
    let theirs = read_msgs(&mut s, mine.len())?;
    s.write_all(DONE).context("sending done")?;
    Ok(theirs)
}

/// Binds the server's listening socket on every address (IPv6 and IPv4).
pub fn listen(port: u16) -> Result<TcpListener> {
    TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .with_context(|| format!("couldn't listen to port {port}"))
}

/// Server side: accepts one client on `listener`, reads `mine.len()`
/// messages, calls `connect` with them (the QPs must be ready before we
/// answer), sends `mine` and waits for `done`.
pub fn server_exchange(
    listener: TcpListener,
    mine: &[Dest],
    lim: Limits,
    connect: impl FnOnce(&[Dest]) -> Result<()>,
) -> Result<Vec<Dest>> {
    let (mut s, _) = listener.accept().context("accept() failed")?;
    drop(listener);
    s.set_read_timeout(lim.io)?;
    s.set_write_timeout(lim.io)?;
    s.set_nodelay(true)?;
    let theirs = read_msgs(&mut s, mine.len())?;
    connect(&theirs).context("couldn't connect to the remote QP")?;
    write_msgs(&mut s, mine)?;
    let mut got = Vec::new();
    let mut buf = [0u8; MSG_LEN];
    while got.len() < DONE.len() {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(anyhow!("waiting for the client's done: {e}")),
        }
    }
    if !got.starts_with(b"done") {
        bail!("the client did not confirm the exchange (got {got:?}, want \"done\")");
    }
    Ok(theirs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_layout_matches_the_pingpong_tools() {
        let d = Dest {
            lid: 0x12,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: "::ffff:10.0.0.1".parse().unwrap(),
        };
        let m = d.encode().unwrap();
        let want = b"0012:000011:abcdef:00000000000000000000ffff0a000001\0";
        assert_eq!(want.len(), MSG_LEN);
        assert_eq!(&m, want);
        assert_eq!(Dest::decode(&m).unwrap(), d);
    }

    #[test]
    fn gid_wire_form_is_the_bytes_in_order() {
        let g = Gid([
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56,
        ]);
        assert_eq!(gid_to_wire(&g), "fe80000000000000505400fffe123456");
        assert_eq!(
            gid_from_wire("fe80000000000000505400fffe123456").unwrap(),
            g
        );
        assert_eq!(
            gid_from_wire("FE80000000000000505400FFFE123456").unwrap(),
            g
        );
    }

    #[test]
    fn malformed_messages_are_refused() {
        let cases: [&[u8]; 6] = [
            b"0012:000011:abcdef\0",
            b"0012:000011:abcdef:0000\0",
            b"zz12:000011:abcdef:00000000000000000000ffff0a000001\0",
            b"0012:1000000:000000:00000000000000000000ffff0a000001\0",
            b"10000:000011:000000:00000000000000000000ffff0a000001\0",
            b"\xff\xfe:000011:000000:00000000000000000000ffff0a000001\0",
        ];
        for c in cases {
            assert!(Dest::decode(c).is_err(), "{:?}", String::from_utf8_lossy(c));
        }
        let big = Dest {
            qpn: 0x100_0000,
            ..Default::default()
        };
        assert!(big.encode().is_err());
    }

    #[test]
    fn exchange_over_loopback_both_directions() {
        let listener = listen(0).unwrap();
        let port = listener.local_addr().unwrap().port();
        let lim = Limits {
            io: Some(Duration::from_secs(10)),
        };
        let srv: Vec<Dest> = (0..3)
            .map(|i| Dest {
                lid: 0,
                qpn: 0x100 + i,
                psn: 0x200 + i,
                gid: Gid([i as u8; 16]),
            })
            .collect();
        let cli: Vec<Dest> = (0..3)
            .map(|i| Dest {
                lid: 1,
                qpn: 0x300 + i,
                psn: 0x400 + i,
                gid: Gid([0x80 | i as u8; 16]),
            })
            .collect();
        let srv2 = srv.clone();
        let cli2 = cli.clone();
        let t = std::thread::spawn(move || {
            server_exchange(listener, &srv2, lim, |got| {
                assert_eq!(got, &cli2[..]);
                Ok(())
            })
        });
        let got = client_exchange("localhost", port, &cli, lim).unwrap();
        assert_eq!(got, srv);
        assert_eq!(t.join().unwrap().unwrap(), cli);
    }

    #[test]
    fn server_fails_when_the_client_hangs_up_early() {
        let listener = listen(0).unwrap();
        let port = listener.local_addr().unwrap().port();
        let lim = Limits {
            io: Some(Duration::from_secs(10)),
        };
        let t = std::thread::spawn(move || {
            server_exchange(listener, &[Dest::default()], lim, |_| Ok(()))
        });
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.write_all(b"0000:000001").unwrap();
        drop(s);
        let err = t.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("closed the connection"), "{err}");
    }
}
