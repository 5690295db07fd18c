//! The mlx5 driver-data rules: what the mlx5 kernel driver (Linux 6.12)
//! refuses in the driver data of each command, with its errno. Each helper
//! names the kernel function whose rule it plays (see
//! tests/mlx5-emu/notes/driver-data-rules.md).

use rverbs_abi::mlx5;
use rverbs_abi::Errno;

use super::lookup::zero_or_pow2;
use crate::device;
use crate::emu::WorkQueue;
use crate::mem::{all_zero, read_padded};

/// `MLX5_IB_DEFAULT_UIDX`: "no user index" (CQE version 0).
pub(super) const DEFAULT_UIDX: u32 = 0xff_ffff;
/// `MLX5_USER_ASSIGNED_UIDX_MASK`: user indexes are 24 bits.
pub(super) const UIDX_MASK: u32 = 0xff_ffff;
/// The granularity of a queue buffer's offset in its first page: the
/// quantized `page_offset` of the QP, CQ and SRQ contexts counts 64ths of
/// a 4 KiB page.
pub(super) const BUF_OFFSET_QUANTUM: u64 = 64;
/// `MLX5_QP_FLAG_ALLOW_SCATTER_CQE`.
pub(super) const QP_FLAG_ALLOW_SCATTER_CQE: u32 = 1 << 8;
/// `sizeof(struct mlx5_ib_modify_qp)`: `comp_mask`, the burst information
/// (`max_burst_sz`, `typical_pkt_sz`, `reserved`) and `ece_options`.
pub(super) const MODIFY_QP_UDATA: usize = 16;

/// The GET_CONTEXT driver data (`mlx5_ib_alloc_ucontext`): exactly the
/// 8-byte original request, or the v2 request at least up to
/// `max_cqe_version` (`EINVAL` otherwise); whether it is v2. The kernel
/// copies at most the v2 struct: later bytes are not read. Unknown flags
/// (only DEVX exists), a `comp_mask` or non-zero reserved fields:
/// `EOPNOTSUPP`. `lib_caps` is not checked (the kernel does not either).
pub(super) fn ucontext_req(drv: &[u8]) -> Result<(mlx5::AllocUcontextReqV2, bool), Errno> {
    const V2_MIN: usize = std::mem::offset_of!(mlx5::AllocUcontextReqV2, max_cqe_version);
    let v2 = match drv.len() {
        8 => false,
        n if n >= V2_MIN => true,
        _ => return Err(Errno::EINVAL),
    };
    let req: mlx5::AllocUcontextReqV2 = read_padded(drv);
    if req.flags & !mlx5::MLX5_IB_ALLOC_UCTX_DEVX != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if req.comp_mask != 0 || req.reserved0 != 0 || req.reserved1 != 0 || req.reserved2 != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok((req, v2))
}

/// The static bfregs of a new ucontext (`mlx5_ib_alloc_ucontext` and
/// `calc_total_bfregs`): the count rounds up to whole UARs in 32-bit
/// arithmetic (so `u32::MAX` wraps to 0); more low-latency bfregs than
/// that count less one is `EINVAL` (checked first, with the same wrapping
/// subtraction, so a zero count passes it); then zero is `EINVAL` and more
/// than [`device::MAX_TOTAL_BFREGS`] `ENOMEM`. (A library asking for
/// dynamic UARs, `MLX5_LIB_CAP_DYN_UAR`, skips the last two on the
/// kernel; the emulator has no dynamic UAR object and serves every
/// context from static UARs, as a kernel without that capability does.)
pub(super) fn ucontext_bfregs(total: u32, low_latency: u32) -> Result<u32, Errno> {
    let per_uar = device::BFREGS_PER_UAR;
    let total = total.wrapping_add(per_uar - 1) & !(per_uar - 1);
    if low_latency > total.wrapping_sub(1) {
        return Err(Errno::EINVAL);
    }
    if total == 0 {
        return Err(Errno::EINVAL);
    }
    if total > device::MAX_TOTAL_BFREGS {
        return Err(Errno::ENOMEM);
    }
    Ok(total)
}

/// A queue buffer's start (`mlx5_umem_find_best_quantized_pgoff`, used by
/// `create_cq_user`, `mlx5_ib_resize_cq`, `_create_user_qp` and the SRQ
/// creation): its offset in the first 4 KiB page must be a whole number
/// of 64-byte quanta, or no page size fits the context and the kernel
/// answers `EINVAL`.
pub(super) fn check_buf_offset(addr: u64) -> Result<(), Errno> {
    if addr % BUF_OFFSET_QUANTUM != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The CREATE_CQ driver data (`create_cq_user`): at least up to `flags`
/// (`EINVAL`); at most the struct is read, later bytes are ignored (6.12;
/// the 7.x `ib_copy_validate_udata_in` answers `EOPNOTSUPP` to non-zero
/// ones). Unknown flags, a CQE size other than 64 or 128, and non-zero
/// reserved fields: `EINVAL`.
pub(super) fn create_cq_req(drv: &[u8]) -> Result<mlx5::CreateCq, Errno> {
    const MIN: usize = std::mem::offset_of!(mlx5::CreateCq, flags);
    if drv.len() < MIN {
        return Err(Errno::EINVAL);
    }
    let ucmd: mlx5::CreateCq = read_padded(drv);
    let known = mlx5::MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD
        | mlx5::MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX
        | mlx5::MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS;
    if ucmd.flags & !known != 0 {
        return Err(Errno::EINVAL);
    }
    check_cqe_size(ucmd.cqe_size)?;
    if ucmd.reserved0 != 0 || ucmd.reserved1 != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(ucmd)
}

/// The CQ features CREATE_CQ may ask for beyond the ring
/// (`create_cq_user`), against the emulated device's capabilities:
/// compression (`cqe_comp_en == 1`; other values are ignored), 128-byte
/// padding and real-time stamps are not offered: `EOPNOTSUPP`. A dynamic
/// UAR page for the arm doorbell names an object the emulator has not
/// got: `EINVAL`, the firmware's answer to a foreign UAR.
pub(super) fn check_cq_features(ucmd: &mlx5::CreateCq) -> Result<(), Errno> {
    if ucmd.cqe_comp_en == 1 {
        return Err(Errno::EOPNOTSUPP);
    }
    if ucmd.flags & mlx5::MLX5_IB_CREATE_CQ_FLAGS_CQE_128B_PAD != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    // The kernel takes the flag here and refuses it when a QP is created
    // on the CQ (get_qp_ts_format); the emulator, keeping no such state,
    // refuses it at once with the same errno.
    if ucmd.flags & mlx5::MLX5_IB_CREATE_CQ_FLAGS_REAL_TIME_TS != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    if ucmd.flags & mlx5::MLX5_IB_CREATE_CQ_FLAGS_UAR_PAGE_INDEX != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The RESIZE_CQ driver data (`resize_user`): the whole struct (shorter
/// data is `EINVAL` here; 6.12 reads past it, 7.x refuses it likewise),
/// later bytes ignored; non-zero reserved fields `EINVAL`. The CQE size
/// must be 64 or 128 (`EINVAL`, the firmware's answer to any other).
pub(super) fn resize_cq_req(drv: &[u8]) -> Result<mlx5::ResizeCq, Errno> {
    if drv.len() < size_of::<mlx5::ResizeCq>() {
        return Err(Errno::EINVAL);
    }
    let ucmd: mlx5::ResizeCq = read_padded(drv);
    if ucmd.reserved0 != 0 || ucmd.reserved1 != 0 {
        return Err(Errno::EINVAL);
    }
    check_cqe_size(u32::from(ucmd.cqe_size))?;
    Ok(ucmd)
}

/// The CREATE_QP driver data (`process_udata_size`, `check_ucmd_data`):
/// at least up to `ece_options` (`EINVAL`); from `reserved` on, every byte
/// sent must be zero (`EINVAL`).
pub(super) fn create_qp_req(drv: &[u8]) -> Result<mlx5::CreateQp, Errno> {
    const MIN: usize = std::mem::offset_of!(mlx5::CreateQp, ece_options);
    const LAST: usize = std::mem::offset_of!(mlx5::CreateQp, reserved);
    if drv.len() < MIN {
        return Err(Errno::EINVAL);
    }
    if drv.len() > LAST && !all_zero(&drv[LAST..]) {
        return Err(Errno::EINVAL);
    }
    Ok(read_padded(drv))
}

/// The vendor flags of an RC, UC or UD QP (`process_vendor_flags`):
/// signatures are always granted; scatter-to-CQE (either flag) is granted
/// or silently dropped by the device's capability, never refused; a
/// caller-chosen bfreg or UAR page passes here and is refused by
/// [`check_qp_uar`]. Everything else (DC types, DCI streams, raw-packet
/// offloads, packet-based credits, unknown bits) is `EINVAL` on this
/// device.
pub(super) fn check_qp_flags(flags: u32) -> Result<(), Errno> {
    let granted = mlx5::MLX5_QP_FLAG_SIGNATURE
        | mlx5::MLX5_QP_FLAG_SCATTER_CQE
        | QP_FLAG_ALLOW_SCATTER_CQE
        | mlx5::MLX5_QP_FLAG_BFREG_INDEX
        | mlx5::MLX5_QP_FLAG_UAR_PAGE_INDEX;
    if flags & !granted != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The QP's doorbell register (`_create_user_qp`): with neither flag the
/// kernel allocates a bfreg. Both flags are `EINVAL`; a bfreg index names
/// a dynamic bfreg, of which an emulated context has none, and a UAR page
/// index names a dynamic UAR object the emulator has not got: `EINVAL`.
pub(super) fn check_qp_uar(flags: u32) -> Result<(), Errno> {
    if flags & (mlx5::MLX5_QP_FLAG_BFREG_INDEX | mlx5::MLX5_QP_FLAG_UAR_PAGE_INDEX) != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(())
}

/// The user index of a QP (`get_qp_user_index`, `verify_assign_uidx`).
/// With CQE version 0 the library must send [`DEFAULT_UIDX`] (`EINVAL`
/// otherwise); with version 1 it must send a 24-bit index other than that
/// one (`EINVAL`).
pub(super) fn qp_user_index(cqe_version: u8, uidx: u32) -> Result<u32, Errno> {
    if cqe_version == 0 {
        return if uidx == DEFAULT_UIDX {
            Ok(DEFAULT_UIDX)
        } else {
            Err(Errno::EINVAL)
        };
    }
    if uidx == DEFAULT_UIDX || uidx & !UIDX_MASK != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(uidx)
}

/// The receive queue a QP's driver data describes (`set_rq_size` with the
/// library's sizes, then `create_user_qp`'s comparison). A QP has one
/// when it has no SRQ and asked for receive WRs; with none, the WQE count
/// and shift must be 0 (`EINVAL`). With one, a shift past 32 and, with
/// signatures, a WQE too small for the signature are `EINVAL`. The
/// emulator also refuses, with the `EINVAL` the firmware gives a context
/// it cannot build, a WQE count that is not 0 or a power of two (the
/// kernel passes its log, rounded down) or above the device limit, and a
/// WQE size outside 16 bytes..`max_rq_desc_sz`.
pub(super) fn qp_rq(ucmd: &mlx5::CreateQp, has_rq: bool) -> Result<WorkQueue, Errno> {
    if !has_rq {
        if ucmd.rq_wqe_count != 0 || ucmd.rq_wqe_shift != 0 {
            return Err(Errno::EINVAL);
        }
        return Ok(WorkQueue::default());
    }
    if ucmd.rq_wqe_shift > u32::BITS {
        return Err(Errno::EINVAL);
    }
    let sig = ucmd.flags & mlx5::MLX5_QP_FLAG_SIGNATURE != 0;
    if sig && ucmd.rq_wqe_shift < 4 {
        return Err(Errno::EINVAL);
    }
    if !zero_or_pow2(ucmd.rq_wqe_count) || ucmd.rq_wqe_count > device::MAX_QP_WR {
        return Err(Errno::EINVAL);
    }
    let max_shift = u32::from(device::MAX_RQ_DESC_SZ).trailing_zeros();
    if ucmd.rq_wqe_count > 0 && !(4..=max_shift).contains(&ucmd.rq_wqe_shift) {
        return Err(Errno::EINVAL);
    }
    Ok(WorkQueue {
        buf: ucmd.buf_addr,
        wqe_cnt: ucmd.rq_wqe_count,
        wqe_shift: if ucmd.rq_wqe_count > 0 {
            ucmd.rq_wqe_shift
        } else {
            0
        },
    })
}

/// The MODIFY_QP driver data (`mlx5_ib_modify_qp`): none, or at least up
/// to `ece_options` (`EINVAL`); bytes past the struct must be zero
/// (`EOPNOTSUPP`); a `comp_mask` (only out-of-order data placement exists,
/// which the device does not offer) or a non-zero burst `reserved`:
/// `EOPNOTSUPP`. The burst sizes (raw-packet rate limits) and the ECE
/// options (without the firmware's ECE support) are not used.
pub(super) fn check_modify_qp_udata(drv: &[u8]) -> Result<(), Errno> {
    if drv.is_empty() {
        return Ok(());
    }
    if drv.len() < MODIFY_QP_UDATA {
        return Err(Errno::EINVAL);
    }
    if !all_zero(&drv[MODIFY_QP_UDATA..]) {
        return Err(Errno::EOPNOTSUPP);
    }
    let word = |at: usize| u32::from_ne_bytes([drv[at], drv[at + 1], drv[at + 2], drv[at + 3]]);
    let comp_mask = word(0);
    let burst_reserved = u16::from_ne_bytes([drv[10], drv[11]]);
    if comp_mask != 0 || burst_reserved != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(())
}

/// The CREATE_SRQ driver data of a basic SRQ (`create_srq_user`): fields
/// not sent count as zero (6.12 has no minimum; 7.x wants up to `flags`);
/// non-zero reserved fields and non-zero bytes past the struct are
/// `EINVAL` (7.x: `EOPNOTSUPP` for the latter). The kernel reads only the
/// signature flag and checks the user index only for XRC and
/// tag-matching SRQs, so neither unknown flags nor the index are refused.
pub(super) fn create_srq_req(drv: &[u8]) -> Result<mlx5::CreateSrq, Errno> {
    let size = size_of::<mlx5::CreateSrq>();
    if drv.len() > size && !all_zero(&drv[size..]) {
        return Err(Errno::EINVAL);
    }
    let ucmd: mlx5::CreateSrq = read_padded(drv);
    if ucmd.reserved0 != 0 || ucmd.reserved1 != 0 {
        return Err(Errno::EINVAL);
    }
    Ok(ucmd)
}

pub(super) fn check_cqe_size(size: u32) -> Result<(), Errno> {
    match size {
        64 | 128 => Ok(()),
        _ => Err(Errno::EINVAL),
    }
}
