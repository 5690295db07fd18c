//! The NVIDIA ConnectX (mlx5) userspace provider.
//!
//! Unlike rxe, mlx5 hands the queues to user space: this crate allocates
//! the CQ, QP and SRQ buffers and their doorbell records, gives
//! their addresses to the kernel in the mlx5 driver data of the create
//! commands, builds send and receive WQEs in them as the PRM defines them,
//! rings the doorbells (doorbell record, then the UAR register or a
//! BlueFlame copy of the WQE) and parses the 64-byte CQEs the device
//! writes back into `ib_uverbs_wc` entries. The kernel is only involved
//! in creating and modifying objects.
//!
//! The user context (the private `uctx` module, shared by every object of
//! an open device) owns the UAR pages mapped from the command fd, the
//! doorbell slots, and the table through which a CQ finds the QP or SRQ a
//! CQE belongs to (`wq`). Its one public face is the provider contract,
//! [`contract::Mlx5`].
//!
//! All raw memory and MMIO (mappings, doorbell records, UAR doorbells
//! and BlueFlame, WQE and CQE access, the barriers, and the commands that
//! hand memory to the kernel) lives in one module, `hw`, the only one
//! allowed `unsafe` code; everything else is safe Rust over its types.
//!
//! As libmlx5 does, the environment variables `MLX_CQ_ALLOC_TYPE`,
//! `MLX_QP_ALLOC_TYPE` and `MLX_SRQ_ALLOC_TYPE` set to `HUGE` put those
//! queue buffers in 2 MiB huge pages (creation fails with `ENOMEM` where
//! the system has none free), `PREFER_HUGE` where it can; other values
//! are small pages.
//!
//! It knows nothing of the public `verbs` API above it.

#![deny(missing_docs)]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

mod ah;
pub mod contract;
#[cfg(feature = "fuzz")]
#[doc(hidden)]
pub mod cq;
#[cfg(not(feature = "fuzz"))]
mod cq;
#[allow(unsafe_code)]
mod hw;
mod qp;
mod srq;
mod uctx;
mod wq;

pub use contract::Mlx5;
pub use rverbs_provider::{PostError, PostFailed};

/// Send WQE opcodes (`MLX5_OPCODE_*`): what a control segment carries and
/// what a requester CQE reports back (bits 31..24 of `sop_drop_qpn`).
pub(crate) mod wqe_op {
    pub use rverbs_abi::mlx5::prm::opcode::*;
    /// LOCAL_INV on older devices (not in `mlx5dv.h`).
    pub const LOCAL_INV_OLD: u8 = 0x27;
}

/// The driver ABI versions (the per-device sysfs `abi_version`) this
/// provider speaks: `MLX5_IB_UVERBS_ABI_VERSION`.
pub const DRIVER_ABI: std::ops::RangeInclusive<u32> = 1..=1;

/// PCI vendor id of Mellanox / NVIDIA networking.
pub const PCI_VENDOR_MELLANOX: u16 = 0x15b3;

/// Whether PCI device `device` of vendor [`PCI_VENDOR_MELLANOX`] is an mlx5
/// function (ConnectX-4 and later, their virtual functions, BlueField),
/// the devices the kernel's `mlx5_core` binds.
pub fn is_mlx5_pci_device(device: u16) -> bool {
    matches!(device, 0x1011..=0x1029 | 0xa2d2..=0xa2df)
}
