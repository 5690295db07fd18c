//! A registered region's memory ([`Region`]), and the commands that
//! register it (REG_MR, REREG_MR), whose user addresses make them
//! `unsafe`. What builds an [`crate::Mr`] from them is `crate::mr`'s
//! (`mr/register.rs`): this module imports nothing of the crate above it
//! but its error type.

use std::os::fd::BorrowedFd;

use rverbs_abi::cmd::{nr, write_cmd_fixed};
use rverbs_abi::mr::{RegMr, RegMrResp, ReregMr, ReregMrResp};
use rverbs_abi::Errno;

/// `IB_MR_REREG_TRANS`: REREG_MR moves the MR to a new address range.
pub(crate) const REREG_TRANS: u32 = 1 << 0;
/// `IB_MR_REREG_PD`: REREG_MR changes the PD.
pub(crate) const REREG_PD: u32 = 1 << 1;
/// `IB_MR_REREG_ACCESS`: REREG_MR changes the access flags.
pub(crate) const REREG_ACCESS: u32 = 1 << 2;

/// `len` bytes at `addr` that the device may read and write at any time:
/// the memory of an [`crate::Mr`]. The CPU reaches it only through copies
/// ([`Region::write`], [`Region::read`], [`Region::fill`]) and the
/// `unsafe` views, never through a reference it could invalidate.
///
/// Made only by `crate::mr`'s registration, whose contract is the one of
/// [`Region::new`].
pub(crate) struct Region {
    addr: *mut u8,
    len: usize,
}

impl Region {
    /// # Safety
    ///
    /// `addr..addr + len` must stay valid for reads and writes for as
    /// long as the region lives, and no Rust reference to any of it may be
    /// live meanwhile but those the region's own `unsafe` views hand out.
    pub(crate) unsafe fn new(addr: *mut u8, len: usize) -> Region {
        Region { addr, len }
    }

    /// Start address.
    pub(crate) fn addr(&self) -> *mut u8 {
        self.addr
    }

    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Panics unless `offset..offset + n` lies in the region (the callers
    /// checked it already, with an error of their own).
    #[inline]
    fn check(&self, offset: usize, n: usize) {
        assert!(
            offset <= self.len && n <= self.len - offset,
            "range {offset}+{n} outside the {}-byte region",
            self.len
        );
    }

    /// Copies `data` in at `offset`.
    pub(crate) fn write(&mut self, offset: usize, data: &[u8]) {
        self.check(offset, data.len());
        // SAFETY: in bounds (checked): `offset` is within the region.
        let dst = unsafe { self.addr.add(offset) };
        // SAFETY: in bounds (checked); the memory is valid for writes and
        // no Rust reference to it is live (Region::new's contract), and
        // `data`, a live Rust borrow, cannot overlap it.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
    }

    /// Copies out from `offset` into `out`.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: in bounds (checked): `offset` is within the region.
        let src = unsafe { self.addr.add(offset) };
        // SAFETY: in bounds (checked); the memory is valid for reads, and
        // `out` is a distinct, exclusively borrowed Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
    }

    /// Sets `start..end` to `byte`.
    pub(crate) fn fill(&mut self, start: usize, end: usize, byte: u8) {
        assert!(start <= end, "range {start}..{end} is reversed");
        self.check(start, end - start);
        // SAFETY: in bounds (checked): `start` is within the region.
        let dst = unsafe { self.addr.add(start) };
        // SAFETY: in bounds (checked); valid for writes, no reference live.
        unsafe { std::ptr::write_bytes(dst, byte, end - start) };
    }

    /// The memory as a slice.
    ///
    /// # Safety
    ///
    /// Nothing may write the memory while the slice lives: no work
    /// request that writes it (receive, RDMA READ target, remote WRITE or
    /// atomic) may be outstanding.
    pub(crate) unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: valid for `len` bytes (Region::new's contract); the
        // caller excludes writes while the slice lives.
        unsafe { std::slice::from_raw_parts(self.addr, self.len) }
    }

    /// The memory as a mutable slice.
    ///
    /// # Safety
    ///
    /// Nothing else may read or write the memory while the slice lives:
    /// no work request on it may be outstanding.
    pub(crate) unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: valid for `len` bytes (Region::new's contract); the
        // caller excludes any other access while the slice lives, and
        // `&mut self` any other view.
        unsafe { std::slice::from_raw_parts_mut(self.addr, self.len) }
    }
}

/// REG_MR of `len` bytes at `addr` in the PD `pd_handle` of the context
/// `fd`, known to the device from `iova`, with the access bits `access`.
///
/// # Safety
///
/// `addr..addr+len` must stay valid, and untouched except through the MR
/// made of the answer, until that MR is deregistered (DEREG_MR succeeded),
/// and forever if it never is.
pub(crate) unsafe fn reg_mr(
    fd: BorrowedFd<'_>,
    pd_handle: u32,
    addr: *mut u8,
    len: usize,
    iova: u64,
    access: u32,
) -> std::result::Result<RegMrResp, Errno> {
    let cmd = RegMr {
        response: 0,
        start: addr as u64,
        length: len as u64,
        hca_va: iova,
        pd_handle,
        access_flags: access,
    };
    // SAFETY: REG_MR's start..start+length is addr..addr+len, which this
    // function's caller keeps valid, and untouched but through the MR,
    // until the MR is deregistered, or forever if it never is; the
    // response pointer is write_cmd_fixed's own (REG_MR starts with it).
    unsafe { write_cmd_fixed(fd, nr::REG_MR, &cmd) }
}

/// REREG_MR of the MR `mr_handle` with IB_MR_REREG_TRANS (and `flags`),
/// moving it to `len` bytes at `addr`, known to the device from `iova`, in
/// the PD `pd_handle` with the access bits `access`.
///
/// # Safety
///
/// As [`reg_mr`] for the new range: `addr..addr+len` must stay valid, and
/// untouched except through the MR, until it is deregistered (or forever
/// if it never is). The kernel releases the old pages only once it has
/// moved the MR.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn rereg_trans(
    fd: BorrowedFd<'_>,
    mr_handle: u32,
    flags: u32,
    addr: *mut u8,
    len: usize,
    iova: u64,
    pd_handle: u32,
    access: u32,
) -> std::result::Result<ReregMrResp, Errno> {
    let cmd = ReregMr {
        response: 0,
        mr_handle,
        flags: flags | REREG_TRANS,
        start: addr as u64,
        length: len as u64,
        hca_va: iova,
        pd_handle,
        access_flags: access,
    };
    // SAFETY: the new start..start+length is addr..addr+len, which this
    // function's caller keeps valid and untouched but through the MR until
    // it is deregistered; the kernel releases the old pages only once it
    // has moved the MR. The response pointer is write_cmd_fixed's own
    // (REREG_MR starts with it).
    unsafe { write_cmd_fixed(fd, nr::REREG_MR, &cmd) }
}

/// REREG_MR of the MR `mr_handle`, whose memory is `region`, changing its
/// PD and/or its access flags (`access`, bits; `flags`: [`REREG_PD`], [`REREG_ACCESS`],
/// nothing else).
pub(crate) fn rereg_mr(
    fd: BorrowedFd<'_>,
    region: &Region,
    mr_handle: u32,
    flags: u32,
    iova: u64,
    pd_handle: u32,
    access: u32,
) -> std::result::Result<ReregMrResp, Errno> {
    assert_eq!(
        flags & !(REREG_PD | REREG_ACCESS),
        0,
        "REREG_MR here changes the PD or the access flags only"
    );
    let cmd = ReregMr {
        response: 0,
        mr_handle,
        flags,
        start: region.addr() as u64,
        length: region.len() as u64,
        hca_va: iova,
        pd_handle,
        access_flags: access,
    };
    // SAFETY: without IB_MR_REREG_TRANS (refused above) the kernel keeps
    // the MR's pages as they are: the start..start+length it carries is
    // the MR's own memory (`region`), already registered and held until
    // DEREG_MR, and no new range is pinned. The response pointer is
    // write_cmd_fixed's own (REREG_MR starts with it).
    unsafe { write_cmd_fixed(fd, nr::REREG_MR, &cmd) }
}
