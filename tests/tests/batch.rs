//! Batch posting (`Qp::post_send_batch`) on a real rxe device: the
//! scenarios of `verbs_tests::batch` (RDMA WRITE, SEND with immediate,
//! RDMA READ, a batch longer than the queue, an entry too long, a QP not
//! ready), each on a fresh connected RC pair. The emulated mlx5 runs the
//! same scenarios (`src/bin/mlx5_batch.rs`, `cargo xtask mlx5`).

#![forbid(unsafe_code)]

use verbs_tests::batch::SCENARIOS;
use verbs_tests::Pair;

fn run(name: &str) {
    let (_, f) = SCENARIOS
        .iter()
        .find(|(n, _)| *n == name)
        .expect("scenario");
    let mut p = Pair::new();
    if let Err(why) = f(&mut p) {
        panic!("{name}: {why}");
    }
}

#[test]
fn batch_rdma_write() {
    run("batch_rdma_write");
}

#[test]
fn batch_send_imm() {
    run("batch_send_imm");
}

#[test]
fn batch_rdma_read() {
    run("batch_rdma_read");
}

#[test]
fn batch_queue_full() {
    run("batch_queue_full");
}

#[test]
fn batch_too_long() {
    run("batch_too_long");
}

#[test]
fn batch_not_ready() {
    run("batch_not_ready");
}

#[test]
fn batch_every_n() {
    run("batch_every_n");
}

/// Every scenario has its test above.
#[test]
fn every_scenario_is_run() {
    assert_eq!(SCENARIOS.len(), 7);
}
