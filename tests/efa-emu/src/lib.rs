//! `efa-emu`: the "kernel side" of an emulated EFA (AWS Elastic Fabric
//! Adapter) RDMA device, as an `LD_PRELOAD` library, so that unmodified
//! rdma-core (libibverbs + libefa) finds and drives a device named
//! `efa_0` at `/dev/infiniband/uverbs0` on a machine without one.
//!
//! **Test-only.** No product crate may depend on this package. x86-64
//! Linux with glibc only (as `emu-core`, which holds the interposed libc
//! calls, the fd table, user-memory checks, the sysfs installer and the
//! QP state machine this emulator shares with `mlx5-emu`).
//!
//! Use: `LD_PRELOAD=target/debug/libefa_emu.so ibv_devinfo -v`.
//!
//! What it does, in one process:
//! - **Discovery.** A constructor writes a fake sysfs tree for `efa_0`
//!   (Amazon's PCI ids, so libefa's match table claims it; module
//!   [`device`]) and points `SYSFS_PATH` at it unless already set
//!   (`EFA_EMU_SYSFS=<dir>` chooses the place).
//! - **Commands.** `write()` on the device fd is decoded as the kernel's
//!   uverbs layer does and answered by a model of the EFA driver (module
//!   `dispatch`): context (with `max_tx_batch`, `min_sq_wr`, the LLQ size
//!   and sub-CQs), device and port queries (with EFA's `max_rdma_size` and
//!   `device_caps`), PDs, MRs, CQs (entry size 16, or 32 with the source
//!   GID), UD and SRD QPs, AHs with the device's address handle. `ioctl`
//!   is `ENOTTY`, so libibverbs uses `write()` for everything.
//! - **Memory.** CQ rings, receive rings, the LLQ (send descriptors) and
//!   doorbell pages are regions of the command fd's memfd, mapped by the
//!   key the command returned, at exactly their length (module `cdev`).
//!
//! - **The device.** From the first QP on, a daemon thread (module
//!   [`hw`]) watches the doorbells, reads the send descriptors from the
//!   LLQ and the receive descriptors from the rings, delivers SRD and UD
//!   messages between QPs of this process (any of its contexts), executes
//!   RDMA READ and WRITE, and writes completion entries with the phase
//!   bit.
//!
//! Not modelled: other nodes (every AH names this device; the real one
//! has no same-node loopback, so programs that talk to themselves work
//! here and not on EFA hardware), packet loss and SRD's reordering,
//! completion channels (no `CQ_NOTIFICATIONS`), dmabuf MRs, the device's
//! per-queue limits beyond those of the commands.
//!
//! Environment: `EFA_EMU_LOG=1` prints one line per command to stderr;
//! `EFA_EMU_SYSFS=<dir>` chooses where the sysfs tree is written;
//! `EFA_EMU_CMD_LOG=<path>` and `EFA_EMU_DESC_LOG=<path>` record the
//! commands and the descriptors (module [`record`]).

#![warn(missing_docs)]

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod cdev;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod device;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod dispatch;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod emu;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod hw;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use emu_core::{fdtable, log, mem, qp_fsm, real};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod record;

/// The sysfs tree of `efa_0`, installed where `EFA_EMU_SYSFS` says (or
/// under `/tmp/efa-emu-<uid>/`), `SYSFS_PATH` pointed at it.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn setup() -> std::io::Result<std::path::PathBuf> {
    emu_core::sysfs::Tree {
        name: "efa-emu",
        env: "EFA_EMU_SYSFS",
        layout_version: 1,
        files: device::sysfs_files(),
    }
    .setup()
}

/// This emulator's half of the interposed calls (`emu_core::interpose`),
/// installed by the library's constructor.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub static DRIVER: emu_core::interpose::Driver = emu_core::interpose::Driver {
    name: "efa-emu",
    log_env: "EFA_EMU_LOG",
    dev_path: device::DEV_PATH,
    setup,
    open: cdev::open,
    close: cdev::close,
    write: dispatch::write,
    ioctl: dispatch::ioctl,
    mmap: cdev::mmap,
    munmap: cdev::munmap,
    device_stat: cdev::device_stat,
    fstat: cdev::fstat,
    event_read: cdev::event_read,
};

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
emu_core::emulator_init!(DRIVER);
