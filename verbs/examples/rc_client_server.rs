//! The classic two-process RC flow: server and client exchange QPN, PSN,
//! GID, buffer address and rkey over TCP, connect their QPs, then the client
//! RDMA-WRITEs the first half of the server's buffer and RDMA-READs the
//! second half, and they finish with a SEND/RECV handshake in which the
//! server confirms the written bytes. Both sides verify every byte and exit
//! non-zero on any mismatch or error completion.
//!
//! Usage: server `rc_client_server [-d DEV] [-p TCP_PORT] [-g GID_INDEX] [-s SIZE]`,
//! client the same plus the server's host name.

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Duration;

use rverbs::{
    AccessFlags, ConnectOpts, Cq, Endpoint, QpInitAttr, QpType, RecvWr, RemoteMr, SendWr, Wc,
    WcOpcode,
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Args {
    dev: Option<String>,
    port: u16,
    gid: Option<u8>,
    size: usize,
    server: Option<String>,
}

fn parse() -> Res<Args> {
    let mut a = Args {
        dev: None,
        port: 18515,
        gid: None,
        size: 8192,
        server: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{x} needs a value"));
        match x.as_str() {
            "-d" => a.dev = Some(val()?),
            "-p" => a.port = val()?.parse()?,
            "-g" => a.gid = Some(val()?.parse()?),
            "-s" => a.size = val()?.parse()?,
            h if !h.starts_with('-') && a.server.is_none() => a.server = Some(h.to_string()),
            o => return Err(format!("unknown argument {o}").into()),
        }
    }
    if a.size < 16 || a.size % 2 != 0 {
        return Err("size must be even and at least 16".into());
    }
    Ok(a)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect()
}

fn wait(cq: &mut Cq, what: &str, op: WcOpcode) -> Res<Wc> {
    let mut wc = [Wc::default()];
    cq.poll_until(&mut wc, 1, Duration::from_secs(20))
        .map_err(|e| format!("{what}: {e}"))?;
    if !wc[0].is_success() || wc[0].opcode() != op {
        return Err(format!("{what}: {:?}", wc[0]).into());
    }
    Ok(wc[0])
}

/// Sends our endpoint and MR, receives the peer's.
fn exchange(s: &mut TcpStream, me: &Endpoint, mr: &RemoteMr) -> Res<(Endpoint, RemoteMr)> {
    s.write_all(&me.to_bytes())?;
    s.write_all(&mr.to_bytes())?;
    let mut e = [0u8; Endpoint::WIRE_LEN];
    let mut m = [0u8; RemoteMr::WIRE_LEN];
    s.read_exact(&mut e)?;
    s.read_exact(&mut m)?;
    Ok((Endpoint::from_bytes(&e), RemoteMr::from_bytes(&m)))
}

fn run() -> Res<()> {
    let a = parse()?;
    let devs = rverbs::devices()?;
    let dev = match &a.dev {
        Some(n) => devs
            .iter()
            .find(|d| d.name() == n)
            .ok_or(format!("no device {n}"))?,
        None => devs.first().ok_or("no RDMA device found")?,
    };
    let ctx = dev.open()?;
    let pd = ctx.alloc_pd()?;
    let mut cq = ctx.create_cq(16)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mut mr = pd.alloc_mr(a.size, access)?;
    let mut msg = pd.alloc_mr(64, AccessFlags::LOCAL_WRITE)?;
    let mut qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, &cq))?;
    let gid_index = match a.gid {
        Some(g) => g,
        None => ctx.default_gid_index(1)?,
    };
    let psn = std::process::id() & 0xff_ffff;
    let opts = ConnectOpts {
        sgid_index: gid_index,
        sq_psn: psn,
        ..Default::default()
    };
    let me = qp.endpoint(&opts)?;
    let half = a.size / 2;
    let msg_sge = [msg.sge(..)?];
    // A receive is posted before anything reaches the peer.
    qp.to_init(access, &opts)?;
    qp.post_recv(&[RecvWr::new(1, &msg_sge)])?;

    match &a.server {
        None => {
            mr.write_at(half, &pattern(half, 0x5e))?;
            let listener = TcpListener::bind(("0.0.0.0", a.port))?;
            println!(
                "server: {} QPN {:#08x} PSN {psn:#08x} GID {}; waiting on TCP port {}",
                dev.name(),
                me.qpn,
                me.gid,
                a.port
            );
            let (mut s, peer) = listener.accept()?;
            let (remote, _) = exchange(&mut s, &me, &mr.remote())?;
            println!(
                "server: client {peer} QPN {:#08x} PSN {:#08x} GID {}",
                remote.qpn, remote.psn, remote.gid
            );
            qp.to_rtr(&remote, &opts)?;
            qp.to_rts(&opts)?;
            s.write_all(b"R")?; // ready: the client may start
            let wc = wait(&mut cq, "recv done", WcOpcode::RECV)?;
            let mut note = vec![0u8; wc.byte_len() as usize];
            msg.read_at(0, &mut note)?;
            println!("server: client says {:?}", String::from_utf8_lossy(&note));
            let mut written = vec![0u8; half];
            mr.read_at(0, &mut written)?;
            let ok = written == pattern(half, 0xc1);
            let reply: &[u8] = if ok {
                b"write verified"
            } else {
                b"write CORRUPT"
            };
            msg.write_at(0, reply)?;
            let s1 = [msg.sge(..reply.len())?];
            qp.post_send(&[SendWr::send(2, &s1).signaled()])?;
            wait(&mut cq, "send reply", WcOpcode::SEND)?;
            if !ok {
                return Err("the client's RDMA WRITE did not arrive intact".into());
            }
            println!("server: {half} bytes written by the client verified; OK");
        }
        Some(host) => {
            // The server may still be starting: retry for a while.
            let mut tries = 0;
            let mut s = loop {
                match TcpStream::connect((host.as_str(), a.port)) {
                    Ok(s) => break s,
                    Err(e) if tries < 100 && e.kind() == std::io::ErrorKind::ConnectionRefused => {
                        tries += 1;
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(format!("connecting to {host}:{}: {e}", a.port).into()),
                }
            };
            let (remote, rmr) = exchange(&mut s, &me, &mr.remote())?;
            println!(
                "client: server QPN {:#08x} PSN {:#08x} GID {} buffer {:#x} rkey {:#x}",
                remote.qpn, remote.psn, remote.gid, rmr.addr, rmr.rkey
            );
            qp.to_rtr(&remote, &opts)?;
            qp.to_rts(&opts)?;
            let mut ready = [0u8; 1];
            s.read_exact(&mut ready)?;
            // RDMA WRITE our pattern into the first half of the server's buffer.
            mr.write_at(0, &pattern(half, 0xc1))?;
            let w = [mr.sge(..half)?];
            qp.post_send(&[
                SendWr::rdma_write(10, &w, rmr.at(0, half as u64)?, rmr.rkey).signaled(),
            ])?;
            wait(&mut cq, "rdma write", WcOpcode::RDMA_WRITE)?;
            // RDMA READ the second half into our second half.
            let r = [mr.sge(half..)?];
            qp.post_send(&[SendWr::rdma_read(
                11,
                &r,
                rmr.at(half as u64, half as u64)?,
                rmr.rkey,
            )
            .signaled()])?;
            wait(&mut cq, "rdma read", WcOpcode::RDMA_READ)?;
            let mut got = vec![0u8; half];
            mr.read_at(half, &mut got)?;
            if got != pattern(half, 0x5e) {
                return Err("RDMA READ returned wrong bytes".into());
            }
            println!("client: RDMA WRITE {half} bytes, RDMA READ {half} bytes verified");
            let note = b"done";
            msg.write_at(0, note)?;
            let s1 = [msg.sge(..note.len())?];
            qp.post_send(&[SendWr::send(12, &s1).signaled()])?;
            // The server's reply and our send completion, in either order.
            let mut wcs = [Wc::default(); 2];
            cq.poll_until(&mut wcs, 2, Duration::from_secs(20))?;
            let reply_wc = wcs
                .iter()
                .find(|w| w.opcode() == WcOpcode::RECV)
                .ok_or("no reply received")?;
            if wcs.iter().any(|w| !w.is_success()) {
                return Err(format!("handshake failed: {wcs:?}").into());
            }
            let mut reply = vec![0u8; reply_wc.byte_len() as usize];
            msg.read_at(0, &mut reply)?;
            let reply = String::from_utf8_lossy(&reply);
            println!("client: server says {reply:?}");
            if reply != "write verified" {
                return Err("the server did not verify our write".into());
            }
            println!("client: OK");
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_client_server: {e}");
            ExitCode::FAILURE
        }
    }
}
