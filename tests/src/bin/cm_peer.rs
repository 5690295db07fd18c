//! A peer process for `tests/cm.rs`'s "peer killed mid-transfer" test:
//! listens on `ADDR` (a port the kernel picks), prints `listening PORT`,
//! accepts one RC connection whose private data is its MR's address and
//! rkey (RDMA WRITE target), prints `connected`, then waits to be killed.
//! It exits by itself after 60 s so that a failed test leaves nothing
//! behind.

#![forbid(unsafe_code)]

use std::io::Write;
use std::time::Duration;

use rverbs::{QpCap, QpInitAttr, QpType};
use rverbs_cm::{ConnParams, Listener};

fn main() {
    let ip = std::env::args().nth(1).expect("usage: cm_peer ADDR");
    let l = Listener::bind(format!("{ip}:0").parse().expect("an IP address"), 4).expect("listen");
    println!("listening {}", l.local_addr().port());
    std::io::stdout().flush().expect("stdout");
    let req = l
        .get_request(Some(Duration::from_secs(30)))
        .expect("get_request")
        .expect("a request within 30 s");
    let ctx = req.device().open().expect("open");
    let pd = ctx.alloc_pd().expect("pd");
    let cq = ctx.create_cq(16).expect("cq");
    let mr = pd.alloc_mr(1 << 20, verbs_tests::all_access()).expect("mr");
    let qp = pd
        .create_qp(&QpInitAttr::new(QpType::Rc, &cq).cap(QpCap::default()))
        .expect("qp");
    let p = ConnParams {
        private_data: mr.remote().to_bytes().to_vec(),
        ..ConnParams::default()
    };
    let _conn = req.accept(qp, &p).expect("accept");
    println!("connected");
    std::io::stdout().flush().expect("stdout");
    std::thread::sleep(Duration::from_secs(60));
}
