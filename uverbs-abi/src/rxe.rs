//! The soft-RoCE (rxe) driver ABI (`rdma_user_rxe.h`): the mmap descriptors
//! the kernel returns in create responses, the shared ring header, and the
//! send/receive WQE layouts user space writes into the rings.

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// `struct mminfo`: where to mmap a queue on the command fd.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct MmInfo {
    /// mmap offset on the uverbs fd.
    pub offset: u64,
    /// Bytes to map.
    pub size: u32,
    /// Zero.
    pub pad: u32,
}

/// `struct rxe_create_cq_resp`: driver data after `ib_uverbs_create_cq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateCqResp {
    /// The completion ring.
    pub mi: MmInfo,
}

/// `struct rxe_resize_cq_resp`: driver data after `ib_uverbs_resize_cq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ResizeCqResp {
    /// The new completion ring.
    pub mi: MmInfo,
}

/// `struct rxe_create_qp_resp`: driver data after `ib_uverbs_create_qp_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct CreateQpResp {
    /// The receive ring (size 0 when the QP uses an SRQ).
    pub rq_mi: MmInfo,
    /// The send ring.
    pub sq_mi: MmInfo,
}

/// `struct rxe_create_srq_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct CreateSrqResp {
    pub mi: MmInfo,
    pub srq_num: u32,
    pub reserved: u32,
}

/// `struct rxe_modify_srq_cmd`: driver data of MODIFY_SRQ.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
pub struct ModifySrqCmd {
    /// User address where the kernel writes a new [`MmInfo`] on resize.
    pub mmap_info_addr: u64,
}

/// `struct rxe_create_ah_resp`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct CreateAhResp {
    pub ah_num: u32,
    pub reserved: u32,
}

/// `struct rxe_queue_buf` without its flexible `data`: the header at the
/// start of every mapped rxe ring. Producer and consumer indices sit in
/// cache lines of their own; both are kept masked by `index_mask`.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct QueueBuf {
    pub log2_elem_size: u32,
    pub index_mask: u32,
    pub pad_1: [u32; 30],
    pub producer_index: u32,
    pub pad_2: [u32; 31],
    pub consumer_index: u32,
    pub pad_3: [u32; 31],
}

/// Byte offset of the ring's element array (`offsetof(struct rxe_queue_buf, data)`).
pub const QUEUE_DATA_OFFSET: usize = size_of::<QueueBuf>();

/// `union rxe_gid` / `struct rxe_global_route`. Aligned to 8 like the C
/// struct, whose `union rxe_gid` has a `__be64` arm; [`Av`] and [`WrUd`]
/// inherit that alignment.
#[repr(C, align(8))]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct GlobalRoute {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// Tail padding of the C struct, made explicit.
    pub pad: u8,
}

/// `struct rxe_av`: an address vector (used in UD WQEs by old kernels only).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct Av {
    pub port_num: u8,
    pub network_type: u8,
    pub dmac: [u8; 6],
    pub grh: GlobalRoute,
    /// `sockaddr_in`/`sockaddr_in6` union, 28 bytes.
    pub sgid_addr: [u32; 7],
    /// `sockaddr_in`/`sockaddr_in6` union, 28 bytes.
    pub dgid_addr: [u32; 7],
}

/// The `rdma` arm of `rxe_send_wr.wr`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct WrRdma {
    pub remote_addr: u64,
    pub rkey: u32,
    pub reserved: u32,
}

/// The `atomic` arm of `rxe_send_wr.wr`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct WrAtomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
    pub reserved: u32,
}

/// The `flush` arm of `rxe_send_wr.wr` (kernels from 6.2): an RDMA FLUSH
/// of `length` bytes at `remote_addr` under `rkey`, with the placement
/// `type_` (`flush_type` bits) and the selectivity `level`
/// (`flush_level`). The kernel takes the length from the WQE's `dma`, as
/// rdma-core's provider writes it; `length` here is kept equal.
///
/// Debian 12's uapi headers predate this arm, so the layout test cannot
/// compare it with C there; the offsets below are asserted against the
/// kernel's definition instead.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct WrFlush {
    pub remote_addr: u64,
    pub length: u32,
    pub rkey: u32,
    pub type_: u8,
    pub level: u8,
    /// Tail padding of the C struct, made explicit.
    pub pad: [u8; 6],
}

const _: () = {
    assert!(std::mem::offset_of!(WrFlush, length) == 8);
    assert!(std::mem::offset_of!(WrFlush, rkey) == 12);
    assert!(std::mem::offset_of!(WrFlush, type_) == 16);
    assert!(std::mem::offset_of!(WrFlush, level) == 17);
    assert!(size_of::<WrFlush>() == 24);
};

/// The `mw` arm of `rxe_send_wr.wr`: a BIND_MW request binding window
/// `mw_rkey` to `length` bytes at `addr` of the MR `mr_lkey`, under the new
/// key `rkey` (the window's index with a new low byte) and the remote
/// `access` flags (`IB_ACCESS_*`). Length 0 unbinds a type 1 window.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct WrMw {
    pub addr: u64,
    pub length: u64,
    pub mr_lkey: u32,
    pub mw_rkey: u32,
    pub rkey: u32,
    pub access: u32,
}

/// The `ud` arm of `rxe_send_wr.wr`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct WrUd {
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    pub pkey_index: u16,
    pub reserved: u16,
    pub ah_num: u32,
    pub pad: [u32; 4],
    pub av: Av,
}

/// Size of the `wr` union of `struct rxe_send_wr` (its `ud` arm is largest).
pub const SEND_WR_UNION_BYTES: usize = size_of::<WrUd>();

/// `struct rxe_send_wr`. The `wr` union is kept as raw words; [`SendWr::rdma`],
/// [`SendWr::atomic`] and [`SendWr::ud`] view it as one of its arms.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct SendWr {
    pub wr_id: u64,
    pub reserved: u32,
    pub opcode: u32,
    pub send_flags: u32,
    /// `imm_data` (big-endian) or `invalidate_rkey`.
    pub ex: u32,
    pub wr: [u64; SEND_WR_UNION_BYTES / 8],
}

impl SendWr {
    fn arm<T: FromBytes + IntoBytes + KnownLayout>(&mut self) -> &mut T {
        // The arms are all no larger than the union (checked at compile time below).
        match T::mut_from_prefix(self.wr.as_mut_bytes()) {
            Ok((arm, _)) => arm,
            Err(_) => unreachable!("union arm larger than the union"),
        }
    }
    /// The union as its RDMA arm.
    pub fn rdma(&mut self) -> &mut WrRdma {
        self.arm()
    }
    /// The union as its atomic arm.
    pub fn atomic(&mut self) -> &mut WrAtomic {
        self.arm()
    }
    /// The union as its UD arm.
    pub fn ud(&mut self) -> &mut WrUd {
        self.arm()
    }
}

const _: () = assert!(size_of::<WrRdma>() <= SEND_WR_UNION_BYTES);
const _: () = assert!(size_of::<WrAtomic>() <= SEND_WR_UNION_BYTES);
const _: () = assert!(size_of::<WrMw>() <= SEND_WR_UNION_BYTES);
const _: () = assert!(size_of::<WrFlush>() <= SEND_WR_UNION_BYTES);
const _: () = assert!(SEND_WR_UNION_BYTES % 8 == 0);

/// `struct rxe_dma_info` without its flexible SGE/inline array.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct DmaInfo {
    pub length: u32,
    pub resid: u32,
    pub cur_sge: u32,
    pub num_sge: u32,
    pub sge_offset: u32,
    pub reserved: u32,
}

/// `struct rxe_send_wqe` without the flexible array that follows `dma`
/// (SGEs, or inline data). Elements of a send ring start with this.
#[repr(C)]
#[derive(Debug, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct SendWqe {
    pub wr: SendWr,
    pub status: u32,
    pub state: u32,
    pub iova: u64,
    pub mask: u32,
    pub first_psn: u32,
    pub last_psn: u32,
    pub ack_length: u32,
    pub ssn: u32,
    pub has_rd_atomic: u32,
    pub dma: DmaInfo,
}

/// `struct rxe_recv_wqe` without its flexible SGE array.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[allow(missing_docs)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub reserved: u32,
    pub padding: u32,
    pub dma: DmaInfo,
}

/// `RXE_NETWORK_TYPE_IPV4`.
pub const RXE_NETWORK_TYPE_IPV4: u8 = 1;
/// `RXE_NETWORK_TYPE_IPV6`.
pub const RXE_NETWORK_TYPE_IPV6: u8 = 2;
