//! An async RC echo server serving many clients at once, and its client,
//! on tokio (build with `--features tokio`).
//!
//! Each connection: the client sends its [`Endpoint`] and the number of
//! rounds over TCP, the server creates a QP on a CQ of its own
//! ([`AsyncCq`]), posts a receive, connects and answers with its endpoint;
//! then, round after round, the client SENDs a message and the server
//! SENDs it back. Completions are awaited through completion channels
//! (no busy polling); the server also logs the device's async events
//! ([`AsyncEvents`]). The client checks every echoed byte.
//!
//! Usage: `async_echo server [-d DEV] [-p PORT] [-c CONNECTIONS]` (exits 0
//! after serving CONNECTIONS clients, forever without `-c`);
//! `async_echo client HOST [-d DEV] [-p PORT] [-n ROUNDS] [-s SIZE] [-i ID]`.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use rverbs::tokio::{AsyncCq, AsyncEvents};
use rverbs::{
    AccessFlags, ConnectOpts, Context, Endpoint, Pd, Qp, QpInitAttr, QpType, RecvWr, SendWr, Wc,
    WcOpcode,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// Largest message, and the server's buffer size.
const MAX_SIZE: usize = 1 << 16;
/// Time allowed for one completion.
const WAIT: Duration = Duration::from_secs(20);

struct Args {
    server: bool,
    host: Option<String>,
    dev: Option<String>,
    port: u16,
    conns: Option<u32>,
    rounds: u32,
    size: usize,
    id: u32,
}

fn parse() -> Res<Args> {
    let mut it = std::env::args().skip(1);
    let server = match it.next().as_deref() {
        Some("server") => true,
        Some("client") => false,
        _ => return Err("usage: async_echo server|client ...".into()),
    };
    let mut a = Args {
        server,
        host: None,
        dev: None,
        port: 18600,
        conns: None,
        rounds: 100,
        size: 4096,
        id: 0,
    };
    while let Some(x) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{x} needs a value"));
        match x.as_str() {
            "-d" => a.dev = Some(val()?),
            "-p" => a.port = val()?.parse()?,
            "-c" => a.conns = Some(val()?.parse()?),
            "-n" => a.rounds = val()?.parse()?,
            "-s" => a.size = val()?.parse()?,
            "-i" => a.id = val()?.parse()?,
            h if !h.starts_with('-') && a.host.is_none() && !server => a.host = Some(h.into()),
            o => return Err(format!("unknown argument {o}").into()),
        }
    }
    if a.size == 0 || a.size > MAX_SIZE {
        return Err(format!("size must be 1..={MAX_SIZE}").into());
    }
    if !a.server && a.host.is_none() {
        return Err("the client needs the server's host".into());
    }
    Ok(a)
}

fn open(dev: Option<&str>) -> Res<Context> {
    let devs = rverbs::devices()?;
    let d = match dev {
        Some(n) => devs
            .iter()
            .find(|d| d.name() == n)
            .ok_or(format!("no device {n}"))?,
        None => devs.first().ok_or("no RDMA device found")?,
    };
    Ok(d.open()?)
}

/// A QP on `cq`, its endpoint, and the options to connect it with.
fn new_qp(ctx: &Context, pd: &Pd, cq: &AsyncCq, psn: u32) -> Res<(Qp, Endpoint, ConnectOpts)> {
    let qp = pd.create_qp(&QpInitAttr::new(QpType::Rc, cq.cq()))?;
    let opts = ConnectOpts {
        sgid_index: ctx.default_gid_index(1)?,
        sq_psn: psn & 0xff_ffff,
        ..Default::default()
    };
    let me = qp.endpoint(&opts)?;
    Ok((qp, me, opts))
}

/// Serves one client: exchange, then echo every message back.
async fn serve(ctx: Context, pd: Pd, mut tcp: TcpStream, n: u32) -> Res<u32> {
    let mut hello = [0u8; Endpoint::WIRE_LEN + 4];
    tcp.read_exact(&mut hello).await?;
    let (ep, rounds) = hello.split_at(Endpoint::WIRE_LEN);
    let peer = Endpoint::from_bytes(ep.try_into()?);
    let rounds = u32::from_be_bytes(rounds.try_into()?);
    let mut cq = AsyncCq::new(&ctx, 16)?;
    let (mut qp, me, opts) = new_qp(&ctx, &pd, &cq, 0x1000 + n)?;
    let recv = pd.alloc_mr(MAX_SIZE, AccessFlags::LOCAL_WRITE)?;
    let mut send = pd.alloc_mr(MAX_SIZE, AccessFlags::LOCAL_WRITE)?;
    let rsge = [recv.sge(..)?];
    // INIT, a receive posted, RTR and RTS before the client learns our
    // endpoint: its first SEND finds the receive waiting.
    qp.to_init(AccessFlags::empty(), &opts)?;
    qp.post_recv(&[RecvWr::new(0, &rsge)])?;
    qp.connect(&peer, AccessFlags::empty(), &opts)?;
    tcp.write_all(&me.to_bytes()).await?;
    let mut buf = vec![0u8; MAX_SIZE];
    // Completions in whatever order they come: the client may get an echo,
    // and send its next message, before our send's completion is polled.
    let (mut echoed, mut sent) = (0u32, 0u32);
    let mut wcs = [Wc::default(); 4];
    while sent < rounds {
        let n = tokio::time::timeout(WAIT, cq.wait(&mut wcs))
            .await
            .map_err(|_| format!("after {echoed} echoes: no completion within {WAIT:?}"))??;
        for w in &wcs[..n] {
            if !w.is_success() {
                return Err(format!("after {echoed} echoes: {w:?}").into());
            }
            match w.opcode() {
                WcOpcode::RECV if echoed < rounds => {
                    let len = w.byte_len() as usize;
                    let msg = buf.get_mut(..len).ok_or("message longer than the buffer")?;
                    recv.read_at(0, msg)?;
                    send.write_at(0, msg)?;
                    echoed += 1;
                    // The next receive goes up before the echo: the
                    // client's next message follows the echo.
                    if echoed < rounds {
                        qp.post_recv(&[RecvWr::new(u64::from(echoed), &rsge)])?;
                    }
                    let ssge = [send.sge(..len)?];
                    qp.post_send(&[SendWr::send(u64::from(echoed), &ssge).signaled()])?;
                }
                WcOpcode::SEND => sent += 1,
                _ => return Err(format!("unexpected completion {w:?}").into()),
            }
        }
    }
    Ok(rounds)
}

async fn server(a: &Args) -> Res<()> {
    let ctx = open(a.dev.as_deref())?;
    let pd = ctx.alloc_pd()?;
    let mut events = AsyncEvents::new(&ctx)?;
    tokio::spawn(async move {
        while let Ok(ev) = events.next_event().await {
            println!("server: async event {ev}");
        }
    });
    let listener = TcpListener::bind(("0.0.0.0", a.port)).await?;
    println!(
        "server: {} listening on TCP port {}",
        ctx.device().name(),
        a.port
    );
    let mut tasks = tokio::task::JoinSet::new();
    let mut accepted = 0u32;
    while a.conns.is_none_or(|c| accepted < c) {
        let (tcp, peer) = listener.accept().await?;
        accepted += 1;
        println!("server: connection {accepted} from {peer}");
        let (ctx, pd) = (ctx.clone(), pd.clone());
        tasks.spawn(async move { (peer, serve(ctx, pd, tcp, accepted).await) });
    }
    let mut failed = 0;
    while let Some(done) = tasks.join_next().await {
        match done? {
            (peer, Ok(rounds)) => println!("server: {peer}: {rounds} messages echoed"),
            (peer, Err(e)) => {
                eprintln!("server: {peer}: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        return Err(format!("{failed} connections failed").into());
    }
    println!("server: OK");
    Ok(())
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(seed.wrapping_mul(7919)) as u8
        })
        .collect()
}

async fn client(a: &Args) -> Res<()> {
    let host = a.host.as_deref().ok_or("no host")?;
    let ctx = open(a.dev.as_deref())?;
    let pd = ctx.alloc_pd()?;
    let mut cq = AsyncCq::new(&ctx, 16)?;
    let (mut qp, me, opts) = new_qp(&ctx, &pd, &cq, 0x8000 + a.id)?;
    let mut tries = 0;
    let mut tcp = loop {
        match TcpStream::connect((host, a.port)).await {
            Ok(s) => break s,
            Err(e) if tries < 100 && e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(format!("connecting to {host}:{}: {e}", a.port).into()),
        }
    };
    let mut hello = [0u8; Endpoint::WIRE_LEN + 4];
    hello[..Endpoint::WIRE_LEN].copy_from_slice(&me.to_bytes());
    hello[Endpoint::WIRE_LEN..].copy_from_slice(&a.rounds.to_be_bytes());
    tcp.write_all(&hello).await?;
    let mut ep = [0u8; Endpoint::WIRE_LEN];
    tcp.read_exact(&mut ep).await?;
    let peer = Endpoint::from_bytes(&ep);
    let mut msg = pd.alloc_mr(a.size, AccessFlags::LOCAL_WRITE)?;
    let mut echo = pd.alloc_mr(a.size, AccessFlags::LOCAL_WRITE)?;
    qp.connect(&peer, AccessFlags::empty(), &opts)?;
    let (msge, esge) = ([msg.sge(..)?], [echo.sge(..)?]);
    let mut got = vec![0u8; a.size];
    for round in 0..a.rounds {
        let want = pattern(a.size, a.id.wrapping_mul(1_000_003).wrapping_add(round));
        msg.write_at(0, &want)?;
        echo.fill(.., 0)?;
        qp.post_recv(&[RecvWr::new(1, &esge)])?;
        qp.post_send(&[SendWr::send(2, &msge).signaled()])?;
        // The send's completion and the echo, in either order.
        let mut seen = (false, false);
        while !(seen.0 && seen.1) {
            let mut wc = [Wc::default(); 2];
            let n = tokio::time::timeout(WAIT, cq.wait(&mut wc))
                .await
                .map_err(|_| format!("round {round}: no completion within {WAIT:?}"))??;
            for w in &wc[..n] {
                if !w.is_success() {
                    return Err(format!("round {round}: {w:?}").into());
                }
                match w.opcode() {
                    WcOpcode::SEND => seen.0 = true,
                    WcOpcode::RECV if w.byte_len() as usize == a.size => seen.1 = true,
                    _ => return Err(format!("round {round}: unexpected {w:?}").into()),
                }
            }
        }
        echo.read_at(0, &mut got)?;
        if got != want {
            return Err(format!("round {round}: the echo differs from what was sent").into());
        }
    }
    println!(
        "client {}: {} rounds of {} bytes echoed intact; OK",
        a.id, a.rounds, a.size
    );
    Ok(())
}

fn main() -> ExitCode {
    let run = || -> Res<()> {
        let a = parse()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            if a.server {
                server(&a).await
            } else {
                client(&a).await
            }
        })
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("async_echo: {e}");
            ExitCode::FAILURE
        }
    }
}
