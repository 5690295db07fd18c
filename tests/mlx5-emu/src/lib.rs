//! `mlx5-emu`: the "kernel side" of an emulated mlx5 (ConnectX-5) RDMA
//! device, as an `LD_PRELOAD` library, so that unmodified rdma-core
//! (libibverbs + libmlx5) finds and drives a device named `mlx5_0` at
//! `/dev/infiniband/uverbs0` on a machine without RDMA hardware.
//!
//! **Test-only.** No product crate may depend on this package. It supports
//! x86-64 Linux with glibc only; on other targets it builds to an empty
//! library (every module and export is gated on
//! `cfg(all(target_os = "linux", target_arch = "x86_64"))`).
//!
//! Use: `LD_PRELOAD=target/debug/libmlx5_emu.so ibv_devinfo -v`.
//!
//! What it does, in one process:
//! - **Discovery.** A constructor writes a fake sysfs tree (the files
//!   libibverbs reads, generated from [`device`]) and points `SYSFS_PATH`
//!   at it unless `SYSFS_PATH` is already set. Without `MLX5_EMU_SYSFS` the
//!   tree lives at `/tmp/mlx5-emu-<uid>/sysfs-v<layout>-<hash>` (written
//!   to a temporary directory and renamed, so concurrent processes are
//!   safe; the layout version and a hash of the contents are part of the
//!   name, so a tree from another layout is never reused). With
//!   `MLX5_EMU_SYSFS=<dir>` the caller chooses the location and the library
//!   writes the tree there (replacing an older mlx5-emu tree, refusing to
//!   touch a non-empty directory that is not one); the caller then usually
//!   sets `SYSFS_PATH=<dir>` too.
//! - **The character device.** `stat`/`open`/`fstat`/`close`/`ioctl`/
//!   `mmap`/`munmap`/`write` and `socket` are interposed (`emu_core`'s
//!   `interpose`, routed to this emulator's [`DRIVER`] table). Opening `/dev/infiniband/uverbs0` returns a memfd of our
//!   own (so `close`/`poll`/fd numbering behave); `fstat` on it reports a
//!   character device whose `st_rdev` matches the sysfs `dev` file;
//!   `ioctl` on it answers the uverbs methods of module `ioctl` (among
//!   them `INVOKE_WRITE`, which libibverbs then uses for every `write()`
//!   command, as on a real kernel; methods not there are
//!   `EPROTONOSUPPORT`, for which it falls back to `write()` method by
//!   method); `socket(AF_NETLINK, *, NETLINK_RDMA)`
//!   fails with `EPROTONOSUPPORT` so discovery always takes the sysfs route.
//! - **Commands.** `write()` on the device fd is decoded like the kernel's
//!   uverbs layer does (header rules, errnos) and answered by a small
//!   model of the mlx5 driver (module `dispatch`), whose objects (PDs,
//!   MRs, CQs, QPs, SRQs, AHs, completion channels, UAR pages) live in one
//!   `Mutex<Emu>` (module `emu`).
//! - **The HCA.** From the first QP or SRQ creation on, a daemon thread
//!   (module `hca`) watches the doorbell records, executes the posted work
//!   requests between QPs of this process and writes CQEs and completion
//!   events.
//! - **dmabuf.** `UVERBS_METHOD_REG_DMABUF_MR` registers a stand-in for a
//!   dmabuf (a memfd sealed against shrinking, module `dmabuf`).
//!
//! Environment: `MLX5_EMU_LOG=1` prints one line per command to stderr;
//! `MLX5_EMU_SYSFS=<dir>` chooses where the sysfs tree is written;
//! `MLX5_EMU_WQE_LOG=<path>` records every WQE the HCA executes or
//! consumes (module `record`); `MLX5_EMU_LINK=eth` gives the port an
//! Ethernet link layer (RoCE: IP-based GIDs, destination MACs resolved by
//! CREATE_AH and MODIFY_QP, network headers in UD receives; see
//! `device::Link`) instead of InfiniBand.

#![warn(missing_docs)]

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod cdev;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod device;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod dispatch;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod dmabuf;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod emu;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod hca;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod ioctl;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use emu_core::{fdtable, log, mem, qp_fsm, real};
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod record;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod sysfs;

/// This emulator's half of the interposed calls (`emu_core::interpose`),
/// installed by the library's constructor.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub static DRIVER: emu_core::interpose::Driver = emu_core::interpose::Driver {
    name: "mlx5-emu",
    log_env: "MLX5_EMU_LOG",
    dev_path: device::DEV_PATH,
    setup: sysfs::setup,
    open: cdev::open,
    close: cdev::close,
    write: dispatch::write,
    ioctl: ioctl::ioctl,
    mmap: cdev::mmap,
    munmap: cdev::munmap,
    device_stat: cdev::device_stat,
    fstat: cdev::fstat,
    event_read: hca::event_read,
};

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
emu_core::emulator_init!(DRIVER);
