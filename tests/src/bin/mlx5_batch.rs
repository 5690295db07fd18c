//! Batch posting (`Qp::post_send_batch`) on the emulated ConnectX-5,
//! through provider-mlx5's batch loop: the scenarios of
//! `verbs_tests::batch` (the rxe suite `tests/tests/batch.rs` runs the same
//! ones in the VM), each on a fresh connected RC pair. Run by `cargo xtask
//! mlx5` with the emulator preloaded. Prints `PASS <scenario>` per
//! scenario, and on the first failure `FAIL <scenario>: <why>` (and exits
//! with status 1). Opens the device named by the first argument, else the
//! first mlx5 device.

use std::process::ExitCode;

use verbs_tests::batch::SCENARIOS;
use verbs_tests::step::{main_with, pass, At, Fail, R};
use verbs_tests::{Pair, PairOpts};

fn run() -> R {
    let dev = verbs_tests::mlx5_device(std::env::args().nth(1).as_deref())
        .map_err(|e| Fail("setup".into(), e))?;
    for (name, f) in SCENARIOS {
        let ctx = dev.open().at(name)?;
        let mut p = Pair::with_context(ctx, PairOpts::default());
        f(&mut p).map_err(|why| Fail(name.to_string(), why))?;
        pass(name);
    }
    Ok(())
}

fn main() -> ExitCode {
    main_with(run)
}
