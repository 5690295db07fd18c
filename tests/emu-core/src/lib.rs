//! `emu-core`: the device-neutral half of the emulated uverbs devices
//! (`tests/mlx5-emu` plays a ConnectX-5, `tests/efa-emu` an EFA device).
//! Each emulator is an `LD_PRELOAD` library; this crate holds what they
//! would otherwise write twice:
//!
//! - [`interpose`]: the exported libc symbols (`open`, `close`, `write`,
//!   `read`, `ioctl`, `mmap`, `munmap`, `stat`, `fstat`, `socket`) that
//!   route calls on the emulated device to a [`interpose::Driver`] table
//!   and pass everything else through;
//! - [`cdev`]: the device node's stat, the command fd as a memfd;
//! - [`cmd`]: the uverbs `write()` header rules and command plumbing;
//! - [`fdtable`]: the lock-free table of descriptors the emulator owns;
//! - [`mem`]: user-memory access with the kernel's `EFAULT`;
//! - [`sysfs`]: the concurrency-safe installer of the fake sysfs tree;
//! - [`log`]: the one-line-per-command log;
//! - [`qp_fsm`]: the QP state machine of the InfiniBand specification;
//! - [`worker`]: the device thread and its idle back-off.
//!
//! **Test-only.** No product crate may depend on this package. x86-64
//! Linux with glibc only (see [`interpose`] for why); on other targets it
//! builds to an empty library.

#![warn(missing_docs)]

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod cdev;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod cmd;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod fdtable;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod interpose;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod log;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod mem;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod qp_fsm;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub use preload_libc as real;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod sysfs;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
pub mod worker;
