//! HTTP/1.1 over RDMA: hyper, unchanged, on `rverbs_cm::stream`'s tokio
//! streams (rsockets' protocol on an RC QP). The server answers `GET
//! /hello` with a greeting and `POST /echo` with the body it got; the
//! client sends both, several requests on one connection and several
//! connections at once, and checks every answer byte for byte.
//!
//! ```text
//! http_stream server 10.0.0.1:8080 [-c CONNECTIONS]
//! http_stream client 10.0.0.1:8080 [-c CONNECTIONS] [-n REQUESTS] [-s BODY_BYTES]
//! ```
//!
//! Needs the `tokio` feature: `cargo run -p rverbs-cm --features tokio
//! --example http_stream -- server 10.0.0.1:8080`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rverbs_cm::stream::{AsyncRdmaListener, AsyncRdmaStream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The server's answers.
async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (parts, body) = req.into_parts();
    let answer = match (parts.method, parts.uri.path()) {
        (Method::GET, "/hello") => {
            Response::new(Full::new(Bytes::from_static(b"hello over rsockets\n")))
        }
        (Method::POST, "/echo") => match body.collect().await {
            Ok(b) => Response::new(Full::new(b.to_bytes())),
            Err(_) => status(StatusCode::BAD_REQUEST),
        },
        _ => status(StatusCode::NOT_FOUND),
    };
    Ok(answer)
}

fn status(s: StatusCode) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = s;
    r
}

/// Serves `conns` connections, each on its own task, then returns.
async fn server(addr: SocketAddr, conns: usize) -> Result<(), BoxError> {
    let l = AsyncRdmaListener::bind(addr)?;
    println!("server: listening on {}", l.local_addr()?);
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let (s, peer) = l.accept().await?;
        println!("server: connection from {peer}");
        tasks.push(tokio::spawn(async move {
            hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(s), hyper::service::service_fn(handle))
                .await
        }));
    }
    for t in tasks {
        t.await??;
    }
    println!("server: {conns} connections served");
    Ok(())
}

/// Byte `i` of request `k`'s body.
fn body_byte(k: usize, i: usize) -> u8 {
    (i.wrapping_mul(7) ^ k.wrapping_mul(31)) as u8
}

/// One connection: `n` rounds of GET /hello and POST /echo.
async fn client_conn(addr: SocketAddr, c: usize, n: usize, size: usize) -> Result<(), BoxError> {
    let s = AsyncRdmaStream::connect(addr).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(s)).await?;
    let driver = tokio::spawn(conn);
    for k in 0..n {
        let req = Request::get("/hello")
            .header("host", addr.to_string())
            .body(Full::new(Bytes::new()))?;
        let resp = sender.send_request(req).await?;
        if resp.status() != StatusCode::OK {
            return Err(format!("GET /hello: {}", resp.status()).into());
        }
        let body = resp.into_body().collect().await?.to_bytes();
        if &body[..] != b"hello over rsockets\n" {
            return Err(format!("GET /hello answered {body:?}").into());
        }
        let sent: Vec<u8> = (0..size).map(|i| body_byte(c * n + k, i)).collect();
        let req = Request::post("/echo")
            .header("host", addr.to_string())
            .body(Full::new(Bytes::from(sent.clone())))?;
        let resp = sender.send_request(req).await?;
        if resp.status() != StatusCode::OK {
            return Err(format!("POST /echo: {}", resp.status()).into());
        }
        let body = resp.into_body().collect().await?.to_bytes();
        if body[..] != sent[..] {
            return Err(
                format!("POST /echo: {} bytes back, not the {size} sent", body.len()).into(),
            );
        }
    }
    drop(sender);
    driver.await??;
    println!("client {c}: {n} GET and {n} POST of {size} bytes answered intact");
    Ok(())
}

async fn client(addr: SocketAddr, conns: usize, n: usize, size: usize) -> Result<(), BoxError> {
    let tasks: Vec<_> = (0..conns)
        .map(|c| tokio::spawn(client_conn(addr, c, n, size)))
        .collect();
    for t in tasks {
        t.await??;
    }
    println!("client: OK");
    Ok(())
}

fn usage() -> ! {
    eprintln!("usage: http_stream server ADDR:PORT [-c CONNS] | client ADDR:PORT [-c CONNS] [-n REQUESTS] [-s BYTES]");
    std::process::exit(2)
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(role), Some(addr)) = (args.first(), args.get(1)) else {
        usage()
    };
    let addr: SocketAddr = addr.parse().unwrap_or_else(|_| usage());
    let mut conns = 1usize;
    let mut n = 10usize;
    let mut size = 10_000usize;
    let mut it = args[2..].iter();
    while let Some(flag) = it.next() {
        let v: usize = it
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| usage());
        match flag.as_str() {
            "-c" => conns = v.max(1),
            "-n" => n = v,
            "-s" => size = v,
            _ => usage(),
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let work = async {
        match role.as_str() {
            "server" => server(addr, conns).await,
            "client" => client(addr, conns, n, size).await,
            _ => usage(),
        }
    };
    // Bounded: a peer that never answers ends the run with an error.
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(120), work)
            .await
            .map_err(|_| -> BoxError { "timed out after 120 s".into() })?
    })
}
