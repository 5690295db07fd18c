//! The NVIDIA ConnectX (mlx5) userspace provider.
//!
//! Unlike rxe, mlx5 hands the queues to user space: this crate allocates
//! the CQ, QP and SRQ buffers and their doorbell records ([`buf`]), gives
//! their addresses to the kernel in the mlx5 driver data of the create
//! commands, builds send and receive WQEs in them as the PRM defines them,
//! rings the doorbells (doorbell record, then the UAR register or a
//! BlueFlame copy of the WQE) and parses the 64-byte CQEs the device
//! writes back into `ib_uverbs_wc` entries. The kernel is only involved
//! in creating and modifying objects.
//!
//! The user context ([`uctx::Uctx`], shared by every object of an open
//! device) owns the UAR pages mapped from the command fd, the doorbell
//! slots, and the table through which a CQ finds the QP or SRQ a CQE
//! belongs to ([`wq`]).
//!
//! It knows nothing of the public `verbs` API above it.

#![deny(missing_docs)]

/// Writes a PRM segment (a `rverbs_abi::mlx5::prm` struct) at the raw
/// pointer `p`, field by field in the order given, each value computed
/// right before its store: `put_seg!(p, DataSeg { byte_count: .., .. })`.
/// No reference to the ring is made, and the stores keep the shape of
/// hand-written ones (a whole-struct write makes the compiler load every
/// value first, which costs register moves on the posting path). Every
/// field must be named: a never-run struct literal makes the compiler
/// check that the list is exhaustive.
///
/// Expands to unsafe operations: use it inside an `unsafe` block whose
/// SAFETY comment shows `p` valid for writes of the segment and aligned
/// for it, and the bytes not read by the device until a doorbell covers
/// them.
macro_rules! put_seg {
    ($p:expr, $T:ident { $($f:ident: $v:expr),* $(,)? }) => {{
        let p: *mut $T = $p.cast::<$T>();
        $( ::std::ptr::addr_of_mut!((*p).$f).write($v); )*
        if false {
            // Never runs: fails to compile if a field is not listed.
            let _ = $T { $($f: ::zerocopy::FromZeros::new_zeroed()),* };
        }
    }};
}

pub mod ah;
pub mod buf;
pub mod contract;
pub mod cq;
mod mmio;
pub mod qp;
pub mod srq;
pub mod uctx;
pub mod wq;

pub use contract::Mlx5;
pub use rverbs_provider::PostError;

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
