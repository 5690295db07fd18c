//! The mlx5 emulator's scenario programs (`tests/mlx5-emu/c/objects.c` and
//! `datapath.c`, which rdma-core's libmlx5 passes) ported to the `verbs`
//! API, so the same steps run through our own provider (provider-mlx5).
//!
//! Run by `cargo xtask mlx5` with the emulator preloaded (`LD_PRELOAD` of
//! `libmlx5_emu.so`, `SYSFS_PATH`/`MLX5_EMU_SYSFS`). Opens the device named
//! by the first argument, else the first device whose driver is mlx5.
//!
//! Prints `PASS <group>/<step>` or `FAIL <group>/<step>: <why>` for every
//! step of both programs (same step names as the C programs; a step that
//! could not run because an earlier one of its scenario failed is a `FAIL`
//! saying so) and exits 1 if any step failed. Every wait is bounded, and
//! the whole run stops (reporting the rest as not run) after
//! [`BUDGET`](report::BUDGET).
//!
//! Where our API differs from libibverbs the step asserts our documented
//! behaviour instead and its line says so:
//! * objects are destroyed by `Drop`, which reports no error: the destroy
//!   steps drop in the C program's order, and `destroy_comp_channel` and
//!   `close` check that the channel's and then every fd of the device are
//!   closed (the emulator's fds are real memfds and sockets);
//! * a PD or CQ that is still in use cannot be destroyed (its users hold
//!   it): `dealloc_pd_in_use` drops our handle and checks the PD still
//!   works, `destroy_cq_in_use` drops our handle and checks the QPs on it
//!   are intact;
//! * an MR with REMOTE_WRITE but not LOCAL_WRITE is refused before the
//!   kernel with `Error::InvalidArgument` (libibverbs: EINVAL from the kernel);
//! * completion events name the CQ by its `EventId` and need no ack.
//!
//! Layout: [`report`] (what every step reports through),
//! [`objects`](mod@objects) (objects.c), [`datapath`](mod@datapath)
//! (datapath.c's fixture, helpers and the order its scenarios run in) and
//! one module per group of those scenarios ([`rc_ops`], [`send_queue`],
//! [`srq`], [`ud_uc`], [`events`], [`errors`], [`resize`], [`reset`]).

mod datapath;
mod errors;
mod events;
mod objects;
mod rc_ops;
mod report;
mod reset;
mod resize;
mod send_queue;
mod srq;
mod ud_uc;

use std::process::ExitCode;
use std::time::Instant;

use datapath::{datapath, DATAPATH_STEPS};
use objects::{objects, OBJECT_STEPS};
use report::Report;

pub(crate) const UD_QKEY: u32 = 0x1111_1111;

/// Open file descriptors of this process (the emulator's device, async
/// and channel fds are real ones).
pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

fn main() -> ExitCode {
    let start = Instant::now();
    let dev = verbs_tests::mlx5_device(std::env::args().nth(1).as_deref());

    let mut rep = Report::new("objects", OBJECT_STEPS, start);
    if let Err(f) = objects(&mut rep, &dev) {
        rep.fail(&f);
    }
    let mut failed = rep.finish();

    let mut rep = Report::new("datapath", DATAPATH_STEPS, start);
    datapath(&mut rep, &dev);
    failed += rep.finish();

    if failed == 0 {
        println!(
            "mlx5_scenarios: all {} steps passed",
            OBJECT_STEPS.len() + DATAPATH_STEPS.len()
        );
        ExitCode::SUCCESS
    } else {
        println!("mlx5_scenarios: {failed} step(s) failed");
        ExitCode::FAILURE
    }
}
