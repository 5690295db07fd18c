//! Batch posting (`Qp::post_send_batch`) end to end on a connected RC
//! [`Pair`]: RDMA WRITE, SEND with immediate, RDMA READ, a batch longer
//! than the send queue, an entry too long, a QP not ready. Every scenario
//! checks the bytes that arrived and the completions, and returns what
//! went wrong instead of panicking, so that both the rxe suite
//! (`tests/tests/batch.rs`, in the VM) and the emulated mlx5's program
//! (`src/bin/mlx5_batch.rs`, on the host) run the same steps.

use rverbs::{
    BatchSignal, BatchWr, Mr, PostError, QpInitAttr, QpType, RecvWr, SendBatch, WcOpcode,
};

use crate::{all_access, pattern, Pair, TIMEOUT};

/// A scenario's outcome: what went wrong.
pub type Outcome = Result<(), String>;

/// One scenario, on a connected pair.
pub type Scenario = fn(&mut Pair) -> Outcome;

/// The scenarios in order, by name.
pub const SCENARIOS: &[(&str, Scenario)] = &[
    ("batch_rdma_write", rdma_write),
    ("batch_send_imm", send_imm),
    ("batch_rdma_read", rdma_read),
    ("batch_queue_full", queue_full),
    ("batch_too_long", too_long),
    ("batch_not_ready", not_ready),
    ("batch_every_n", every_n),
];

fn check(ok: bool, what: impl FnOnce() -> String) -> Outcome {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

fn e(err: impl std::fmt::Display) -> String {
    err.to_string()
}

/// Polls exactly `n` completions of `cq` (bounded) and checks each
/// succeeded with `opcode`; returns their `wr_id`s.
fn completions(cq: &mut rverbs::Cq, n: usize, opcode: WcOpcode) -> Result<Vec<rverbs::Wc>, String> {
    let mut wc = vec![rverbs::Wc::default(); n];
    let got = cq.poll_until(&mut wc, n, TIMEOUT).map_err(e)?;
    check(got == n, || format!("{got} completions, expected {n}"))?;
    for w in &wc {
        check(w.is_success() && w.opcode() == opcode, || {
            format!("completion {w:?}, expected success / {opcode:?}")
        })?;
    }
    // Nothing more.
    let mut more = [rverbs::Wc::default(); 1];
    let extra = cq.poll(&mut more).map_err(e)?;
    check(extra == 0, || {
        format!("unexpected completion {:?}", more[0])
    })?;
    Ok(wc)
}

/// Entries `k` of `lens` moving `lens[k]` bytes from `src` at `at(k)` to
/// the same offset of the remote region at `raddr`.
fn entries(
    src: &Mr,
    lens: &[usize],
    at: impl Fn(usize) -> usize,
    raddr: u64,
) -> Result<Vec<BatchWr>, String> {
    lens.iter()
        .enumerate()
        .map(|(k, &len)| {
            let off = at(k);
            let sge = src.sge(off..off + len).map_err(e)?;
            Ok(BatchWr::new(1000 + k as u64, sge, raddr + off as u64))
        })
        .collect()
}

/// 24 RDMA WRITEs of assorted lengths (one of them 0) to assorted places,
/// only the last signaled: one completion, every byte where it belongs.
pub fn rdma_write(p: &mut Pair) -> Outcome {
    let mut src = p.pd.alloc_mr(65536, all_access()).map_err(e)?;
    let dst = p.pd.alloc_mr(65536, all_access()).map_err(e)?;
    let data = pattern(65536, 11);
    src.write_at(0, &data).map_err(e)?;
    let lens: Vec<usize> = (0..24)
        .map(|k| if k == 5 { 0 } else { 1 + (k * 397) % 2000 })
        .collect();
    let at = |k: usize| k * 2048 + (k % 7) * 3;
    let rd = dst.remote();
    let wrs = entries(&src, &lens, at, rd.addr)?;
    p.a.post_send_batch(&SendBatch::rdma_write(rd.rkey), &wrs)
        .map_err(e)?;
    let wc = completions(&mut p.cq_a, 1, WcOpcode::RDMA_WRITE)?;
    check(wc[0].wr_id() == 1023, || format!("wr_id {}", wc[0].wr_id()))?;
    let got = dst.to_vec();
    let mut want = vec![0u8; 65536];
    for (k, &len) in lens.iter().enumerate() {
        let o = at(k);
        want[o..o + len].copy_from_slice(&data[o..o + len]);
    }
    check(got == want, || "the written bytes differ".into())
}

/// 8 SENDs with immediate data, each signaled, into 8 receives: 8 send
/// completions in order, 8 receives with the immediate and the bytes.
pub fn send_imm(p: &mut Pair) -> Outcome {
    let mut src = p.pd.alloc_mr(8192, all_access()).map_err(e)?;
    let dst = p.pd.alloc_mr(8192, all_access()).map_err(e)?;
    let data = pattern(8192, 12);
    src.write_at(0, &data).map_err(e)?;
    let rsges: Vec<[rverbs::Sge; 1]> = (0..8)
        .map(|k| dst.sge(k * 1024..(k + 1) * 1024).map(|s| [s]))
        .collect::<rverbs::Result<_>>()
        .map_err(e)?;
    let recvs: Vec<RecvWr<'_>> = rsges
        .iter()
        .enumerate()
        .map(|(k, s)| RecvWr::new(2000 + k as u64, s))
        .collect();
    p.b.post_recv(&recvs).map_err(e)?;
    let lens: Vec<usize> = (0..8).map(|k| 100 + k * 111).collect();
    let wrs = entries(&src, &lens, |k| k * 1024, 0)?;
    let batch = SendBatch::send_with_imm(0xfeed_0001).signal(BatchSignal::Each);
    p.a.post_send_batch(&batch, &wrs).map_err(e)?;
    let sent = completions(&mut p.cq_a, 8, WcOpcode::SEND)?;
    let ids: Vec<u64> = sent.iter().map(|w| w.wr_id()).collect();
    check(ids == (1000..1008).collect::<Vec<_>>(), || {
        format!("send wr_ids {ids:?}")
    })?;
    let got = completions(&mut p.cq_b, 8, WcOpcode::RECV)?;
    for (k, w) in got.iter().enumerate() {
        check(
            w.wr_id() == 2000 + k as u64
                && w.byte_len() as usize == lens[k]
                && w.imm_data() == Some(0xfeed_0001),
            || format!("receive {k}: {w:?}"),
        )?;
    }
    let bytes = dst.to_vec();
    for (k, &len) in lens.iter().enumerate() {
        let o = k * 1024;
        check(bytes[o..o + len] == data[o..o + len], || {
            format!("message {k} differs")
        })?;
    }
    Ok(())
}

/// 10 RDMA WRITEs signaled every 4th and the last: completions for
/// entries 3, 7 and 9 only, every byte where it belongs.
pub fn every_n(p: &mut Pair) -> Outcome {
    let mut src = p.pd.alloc_mr(10 * 512, all_access()).map_err(e)?;
    let dst = p.pd.alloc_mr(10 * 512, all_access()).map_err(e)?;
    let data = pattern(10 * 512, 14);
    src.write_at(0, &data).map_err(e)?;
    let lens: Vec<usize> = (0..10).map(|k| 100 + k * 40).collect();
    let rd = dst.remote();
    let wrs = entries(&src, &lens, |k| k * 512, rd.addr)?;
    let batch = SendBatch::rdma_write(rd.rkey).signal(BatchSignal::Every(4));
    p.a.post_send_batch(&batch, &wrs).map_err(e)?;
    let wc = completions(&mut p.cq_a, 3, WcOpcode::RDMA_WRITE)?;
    let ids: Vec<u64> = wc.iter().map(|w| w.wr_id()).collect();
    check(ids == [1003, 1007, 1009], || format!("wr_ids {ids:?}"))?;
    let got = dst.to_vec();
    for (k, &len) in lens.iter().enumerate() {
        let o = k * 512;
        check(got[o..o + len] == data[o..o + len], || {
            format!("write {k} differs")
        })?;
    }
    Ok(())
}

/// 8 RDMA READs of the peer's memory, the last signaled.
pub fn rdma_read(p: &mut Pair) -> Outcome {
    let local = p.pd.alloc_mr(16384, all_access()).map_err(e)?;
    let mut remote = p.pd.alloc_mr(16384, all_access()).map_err(e)?;
    let data = pattern(16384, 13);
    remote.write_at(0, &data).map_err(e)?;
    let lens: Vec<usize> = (0..8).map(|k| 64 + k * 250).collect();
    let rr = remote.remote();
    let wrs = entries(&local, &lens, |k| k * 2048, rr.addr)?;
    p.a.post_send_batch(&SendBatch::rdma_read(rr.rkey), &wrs)
        .map_err(e)?;
    let wc = completions(&mut p.cq_a, 1, WcOpcode::RDMA_READ)?;
    check(wc[0].wr_id() == 1007, || format!("wr_id {}", wc[0].wr_id()))?;
    let got = local.to_vec();
    for (k, &len) in lens.iter().enumerate() {
        let o = k * 2048;
        check(got[o..o + len] == data[o..o + len], || {
            format!("read {k} differs")
        })?;
    }
    Ok(())
}

/// A batch 5 longer than the send queue: what fits is posted, the last of
/// it signaled (its completion arrives), `QueueFull` at the first that did
/// not; then the rest goes in.
pub fn queue_full(p: &mut Pair) -> Outcome {
    let cap = p.a.cap().max_send_wr as usize;
    let n = cap + 5;
    let mut src = p.pd.alloc_mr(n * 64, all_access()).map_err(e)?;
    let dst = p.pd.alloc_mr(n * 64, all_access()).map_err(e)?;
    let data = pattern(n * 64, 14);
    src.write_at(0, &data).map_err(e)?;
    let rd = dst.remote();
    let wrs = entries(&src, &vec![64; n], |k| k * 64, rd.addr)?;
    let batch = SendBatch::rdma_write(rd.rkey);
    match p
        .a
        .post_send_batch(&batch, &wrs)
        .map_err(|f| (f.index(), f.error()))
    {
        Err((index, PostError::QueueFull)) if index == cap => {}
        other => return Err(format!("{other:?}, expected QueueFull at {cap}")),
    }
    let wc = completions(&mut p.cq_a, 1, WcOpcode::RDMA_WRITE)?;
    check(wc[0].wr_id() == 1000 + cap as u64 - 1, || {
        format!("wr_id {}", wc[0].wr_id())
    })?;
    p.a.post_send_batch(&batch, &wrs[cap..]).map_err(e)?;
    let wc = completions(&mut p.cq_a, 1, WcOpcode::RDMA_WRITE)?;
    check(wc[0].wr_id() == 1000 + n as u64 - 1, || {
        format!("wr_id {}", wc[0].wr_id())
    })?;
    check(dst.to_vec() == data, || "the written bytes differ".into())
}

/// An entry longer than 2^31 bytes: refused at its index, the ones before
/// it posted (the last of them signaled), nothing of it sent.
pub fn too_long(p: &mut Pair) -> Outcome {
    let mut src = p.pd.alloc_mr(4096, all_access()).map_err(e)?;
    let dst = p.pd.alloc_mr(4096, all_access()).map_err(e)?;
    let data = pattern(4096, 15);
    src.write_at(0, &data).map_err(e)?;
    let rd = dst.remote();
    let mut wrs = entries(&src, &[100; 4], |k| k * 1000, rd.addr)?;
    wrs[2].sge.length = (1 << 31) + 1;
    match p
        .a
        .post_send_batch(&SendBatch::rdma_write(rd.rkey), &wrs)
        .map_err(|f| (f.index(), f.error()))
    {
        Err((2, PostError::MessageTooLong)) => {}
        other => return Err(format!("{other:?}, expected MessageTooLong at 2")),
    }
    let wc = completions(&mut p.cq_a, 1, WcOpcode::RDMA_WRITE)?;
    check(wc[0].wr_id() == 1001, || format!("wr_id {}", wc[0].wr_id()))?;
    let got = dst.to_vec();
    let mut want = vec![0u8; 4096];
    want[..100].copy_from_slice(&data[..100]);
    want[1000..1100].copy_from_slice(&data[1000..1100]);
    check(got == want, || "the written bytes differ".into())
}

/// A QP that is not ready to send (RESET) refuses a batch at index 0.
pub fn not_ready(p: &mut Pair) -> Outcome {
    let mut qp =
        p.pd.create_qp(&QpInitAttr {
            send_cq: &p.cq_a,
            recv_cq: &p.cq_a,
            qp_type: QpType::Rc,
            cap: p.a.cap(),
            sq_sig_all: false,
        })
        .map_err(e)?;
    let src = p.pd.alloc_mr(64, all_access()).map_err(e)?;
    let wrs = entries(&src, &[8], |_| 0, 0)?;
    match qp
        .post_send_batch(&SendBatch::send(), &wrs)
        .map_err(|f| (f.index(), f.error()))
    {
        Err((0, PostError::InvalidState)) => Ok(()),
        other => Err(format!("{other:?}, expected InvalidState at 0")),
    }
}
