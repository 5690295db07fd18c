//! Two RC QPs on one device, connected to each other: SEND/RECV, RDMA WRITE
//! and RDMA READ of a few KiB each, verified byte for byte. Exits non-zero on
//! any mismatch or error completion.
//!
//! Usage: `loopback [DEVICE]` (default: the first device).

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::Duration;

use rverbs::{
    AccessFlags, ConnectOpts, Cq, Mr, QpCap, QpInitAttr, QpType, RecvWr, SendWr, Wc, WcOpcode,
};

const LEN: usize = 4096;
const TIMEOUT: Duration = Duration::from_secs(10);

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn wait(cq: &mut Cq, what: &str, opcode: WcOpcode) -> Result<Wc, String> {
    let mut wc = [Wc::default(); 1];
    cq.poll_until(&mut wc, 1, TIMEOUT)
        .map_err(|e| format!("{what}: {e}"))?;
    let wc = wc[0];
    if !wc.is_success() {
        return Err(format!("{what}: completion status {}", wc.status()));
    }
    if wc.opcode() != opcode {
        return Err(format!(
            "{what}: opcode {:?}, expected {:?}",
            wc.opcode(),
            opcode
        ));
    }
    Ok(wc)
}

fn check(what: &str, mr: &Mr, expected: &[u8]) -> Result<(), String> {
    let got = mr.to_vec();
    match got[..expected.len()]
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
    {
        None => {
            println!("{what}: {} bytes verified", expected.len());
            Ok(())
        }
        Some(i) => Err(format!(
            "{what}: byte {i} is {:#x}, expected {:#x}",
            got[i], expected[i]
        )),
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let name = std::env::args().nth(1);
    let devs = rverbs::devices()?;
    let dev = match &name {
        Some(n) => devs
            .iter()
            .find(|d| d.name() == n)
            .ok_or(format!("no device {n}"))?,
        None => devs.first().ok_or("no RDMA device found")?,
    };
    let ctx = dev.open()?;
    let pd = ctx.alloc_pd()?;
    let mut cq_a = ctx.create_cq(16)?;
    let mut cq_b = ctx.create_cq(16)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mut mr_a = pd.alloc_mr(LEN, access)?;
    let mut mr_b = pd.alloc_mr(LEN, access)?;
    let init = |cq| QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        qp_type: QpType::Rc,
        cap: QpCap::default(),
        sq_sig_all: false,
    };
    let mut qp_a = pd.create_qp(&init(&cq_a))?;
    let mut qp_b = pd.create_qp(&init(&cq_b))?;
    let gid_index = ctx.default_gid_index(1)?;
    let opts_a = ConnectOpts {
        sgid_index: gid_index,
        sq_psn: 0x1234,
        ..Default::default()
    };
    let opts_b = ConnectOpts {
        sgid_index: gid_index,
        sq_psn: 0x5678,
        ..Default::default()
    };
    let ep_a = qp_a.endpoint(&opts_a)?;
    let ep_b = qp_b.endpoint(&opts_b)?;
    println!(
        "{}: QP {:#x} <-> QP {:#x}, GID {} (index {gid_index})",
        dev.name(),
        ep_a.qpn,
        ep_b.qpn,
        ep_a.gid
    );
    qp_a.connect(&ep_b, access, &opts_a)?;
    qp_b.connect(&ep_a, access, &opts_b)?;

    // SEND/RECV: A sends its buffer into B's.
    let data = pattern(1);
    mr_a.write_at(0, &data)?;
    let rsge = [mr_b.sge(..)?];
    qp_b.post_recv(&[RecvWr::new(10, &rsge)])?;
    let ssge = [mr_a.sge(..)?];
    qp_a.post_send(&[SendWr::send(11, &ssge).signaled()])?;
    wait(&mut cq_a, "send", WcOpcode::SEND)?;
    let wc = wait(&mut cq_b, "recv", WcOpcode::RECV)?;
    if wc.byte_len() as usize != LEN {
        return Err(format!("recv: byte_len {} != {LEN}", wc.byte_len()).into());
    }
    check("send/recv", &mr_b, &data)?;

    // RDMA WRITE: A writes a new pattern into B.
    let data = pattern(2);
    mr_a.write_at(0, &data)?;
    let rb = mr_b.remote();
    qp_a.post_send(&[SendWr::rdma_write(12, &ssge, rb.addr, rb.rkey).signaled()])?;
    wait(&mut cq_a, "rdma write", WcOpcode::RDMA_WRITE)?;
    check("rdma write", &mr_b, &data)?;

    // RDMA READ: A reads B's buffer after B changed it locally.
    let data = pattern(3);
    mr_b.write_at(0, &data)?;
    mr_a.fill(.., 0)?;
    qp_a.post_send(&[SendWr::rdma_read(13, &ssge, rb.addr, rb.rkey).signaled()])?;
    wait(&mut cq_a, "rdma read", WcOpcode::RDMA_READ)?;
    check("rdma read", &mr_a, &data)?;
    println!("loopback: OK");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loopback: {e}");
            ExitCode::FAILURE
        }
    }
}
