//! Memory regions: REG_MR, REREG_MR, DEREG_MR and the access flags.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct ib_uverbs_reg_mr`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RegMr {
    /// Response pointer.
    pub response: u64,
    /// Start of the user range.
    pub start: u64,
    /// Length of the range in bytes.
    pub length: u64,
    /// The address the HCA uses for the range (normally `start`).
    pub hca_va: u64,
    /// Owning PD.
    pub pd_handle: u32,
    /// `IB_UVERBS_ACCESS_*`.
    pub access_flags: u32,
}

/// `struct ib_uverbs_reg_mr_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct RegMrResp {
    /// Kernel handle.
    pub mr_handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ib_uverbs_rereg_mr`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ReregMr {
    pub response: u64,
    pub mr_handle: u32,
    pub flags: u32,
    pub start: u64,
    pub length: u64,
    pub hca_va: u64,
    pub pd_handle: u32,
    pub access_flags: u32,
}

/// `struct ib_uverbs_rereg_mr_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct ReregMrResp {
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ib_uverbs_dereg_mr`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct DeregMr {
    /// The MR to deregister.
    pub mr_handle: u32,
}

bitflags::bitflags! {
    /// `enum ib_uverbs_access_flags`: what an MR (or QP) allows.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AccessFlags: u32 {
        /// The local HCA may write (required for receive buffers and RDMA READ targets).
        const LOCAL_WRITE = 1 << 0;
        /// Remote peers may RDMA WRITE (needs `LOCAL_WRITE`).
        const REMOTE_WRITE = 1 << 1;
        /// Remote peers may RDMA READ.
        const REMOTE_READ = 1 << 2;
        /// Remote peers may perform atomics (needs `LOCAL_WRITE`).
        const REMOTE_ATOMIC = 1 << 3;
        /// Memory windows may be bound.
        const MW_BIND = 1 << 4;
        /// Addresses are offsets from the MR start.
        const ZERO_BASED = 1 << 5;
        /// On-demand paging: the pages are not pinned; the device faults
        /// them in as it reaches them (where the device offers ODP: see
        /// `odp_caps` of the extended device query).
        const ON_DEMAND = 1 << 6;
        /// Hint: the range is huge-page backed.
        const HUGETLB = 1 << 7;
        /// Remote peers may RDMA FLUSH the range to global visibility
        /// (kernels from 6.2, where the device has the capability).
        const FLUSH_GLOBAL = 1 << 8;
        /// Remote peers may RDMA FLUSH the range to persistence (only
        /// memory that is persistent, such as pmem, can be registered so).
        const FLUSH_PERSISTENT = 1 << 9;
        /// PCIe relaxed ordering (optional: ignored where unsupported).
        const RELAXED_ORDERING = 1 << 20;
    }
}

impl AccessFlags {
    /// The optional range (`IB_UVERBS_ACCESS_OPTIONAL_FIRST` to `_LAST`,
    /// bits 20 to 29): flags a kernel or device may ignore rather than
    /// refuse, where the kernel says it accepts optional flags.
    pub const OPTIONAL_RANGE: AccessFlags = AccessFlags::from_bits_retain(0x3ff0_0000);
}
