//! Memory regions, built around ownership: an [`Mr`] owns the memory it
//! registers (a `Vec<u8>`, `Box<[u8]>`, `memmap2::MmapMut`, a [`PageBuf`],
//! or any type implementing the `unsafe` [`MrBuf`] contract) and gives it
//! back only once deregistration succeeded ([`Mr::into_inner`]). Forgetting
//! an MR (`std::mem::forget` is safe) leaks the memory together with its
//! registration, so the device can never write memory that safe code got
//! back. Borrowed memory is registered only where forgetting cannot break
//! that: [`Pd::register_scoped`] deregisters before it returns, and
//! [`Pd::register_raw`] is `unsafe`, with its contract written down.
//!
//! While memory is registered the device may write it at any time, so an MR
//! never hands out a plain `&[u8]`/`&mut [u8]` to it: data moves in and out
//! through [`Mr::write_at`] and [`Mr::read_at`] (or the `unsafe` slice views,
//! for callers who know no work request is outstanding on the range).
//!
//! What is checked where: [`Mr::sge`] and [`RemoteMr::at`] check ranges on
//! the host, but an [`Sge`] or a remote address is a plain value that anyone
//! can build; the device checks every key, range and access right when it
//! executes a request, and fails the request (a completion with an error
//! status) rather than touch memory outside a registration.

// `MrBuf` is an `unsafe trait` of the public API, with its implementations
// for the buffer types; each is allowed where it stands, as are
// `register`'s calls of the registration commands (`sys::mr`).
mod buf;
mod register;

use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};

pub use buf::{MrBuf, PageBuf};
use rverbs_abi::device::{device_cap_ex, odp_general};
use rverbs_abi::ioctl::{advise_mr_advice, ADVISE_MR_FLAG_FLUSH};
pub use rverbs_abi::mr::AccessFlags;
use rverbs_abi::mr::{RegMrResp, ReregMrResp};
use rverbs_abi::wr::Sge;
use rverbs_provider::wr::{opcode, FlushType, SendWr};

use crate::context::Caps;
use crate::error::Feature;
use crate::error::{Errno, Error, InvalidKind, Result};
use crate::pd::Pd;
use crate::sys;
use crate::sys::mem::TakeOnce;
use crate::sys::mr::{Region, REREG_ACCESS, REREG_PD};

/// A registered memory region that owns its memory `B` (a [`PageBuf`] by
/// default: what [`Pd::alloc_mr`] returns). Dropping it deregisters the
/// region, then drops `B`; [`Mr::into_inner`] deregisters and hands `B`
/// back.
///
/// # Why copies (`read_at`/`write_at`) and not `&[u8]`
///
/// While the region is registered, the device may write it at any moment:
/// a receive or RDMA READ landing in it, and, with remote access, a peer's
/// RDMA WRITE or atomic that this process does not even see coming. A
/// Rust `&[u8]` promises that the bytes do not change while it lives, and
/// `&mut [u8]` that nothing else touches them; memory written behind a
/// reference's back is undefined behaviour, whatever the bytes. No borrow
/// of the `Mr` can rule the device out: an [`Sge`] is a plain value that
/// outlives any borrow, and a peer needs none. So safe code moves data in
/// and out with [`Mr::write_at`], [`Mr::read_at`], [`Mr::fill`] and
/// [`Mr::to_vec`], which copy through raw pointers (a `memcpy`, the same
/// cost as filling the buffer in the first place).
///
/// Zero-copy where the caller can vouch for it: [`Mr::as_slice`] and
/// [`Mr::as_mut_slice`] are `unsafe`, sound while no request that writes
/// the range is outstanding and (for regions with remote write access) no
/// peer writes it, which the application protocol knows and the library
/// cannot. The data path itself is zero-copy either way: requests send
/// from and receive into the registered memory directly; only the CPU's
/// own look at the bytes goes through a copy.
///
/// `B` is [`Scoped`] for a region of [`Pd::register_scoped`] and [`Raw`] for
/// one of [`Pd::register_raw`]: those borrow memory rather than own it.
pub struct Mr<B = PageBuf> {
    pd: Pd,
    handle: u32,
    lkey: u32,
    rkey: u32,
    /// The memory: `len` bytes at `addr`.
    mem: Region,
    /// The address the device knows the start by (`addr` unless registered
    /// with [`Pd::register_at`]).
    iova: u64,
    access: AccessFlags,
    // Released right after DEREG_MR succeeds (in `deregister`), before the
    // buffer goes; kept for good if it fails.
    fork: crate::fork::Guard,
    // The owner of the memory, held so that moving the MR never asserts
    // uniqueness of the owner (a `Box`'s pointer, say) over memory the
    // device and `mem` still reach; taken out once: in `Drop` or in
    // `into_inner` (never, if deregistration fails: leaked).
    buf: TakeOnce<B>,
    // Who owns the memory: if it is borrowed ([`Scoped`], [`Raw`]) and
    // deregistration fails, it cannot be kept away from its owner, so the
    // process aborts; a scoped borrow never allows windows.
    backing: Backing,
    // `into_inner` has run: the region is deregistered (or leaked) and
    // `buf` is moved out or deliberately leaked.
    finished: bool,
}

/// The buffer type of an MR made by [`Pd::register_scoped`]: the memory is
/// borrowed for the call, and `'s` brands the MR so that it cannot leave the
/// closure nor be swapped with another scope's MR.
pub struct Scoped<'s>(PhantomData<fn(&'s ()) -> &'s ()>);

impl Scoped<'_> {
    /// The brand of a new scoped registration.
    pub(crate) fn new() -> Self {
        Scoped(PhantomData)
    }
}

/// The buffer type of an MR made by [`Pd::register_raw`]: memory the caller
/// keeps valid by contract.
#[derive(Debug)]
pub struct Raw(());

impl Raw {
    /// The marker of a new raw registration.
    pub(crate) fn new() -> Self {
        Raw(())
    }
}

// Public API, outside `sys`: the bounds are part of it (an automatic
// implementation would follow the fields, `Region`'s pointer among them).
// SAFETY: the MR's memory is only reached through `&self` reads and `&mut
// self` writes (or unsafe views whose contract covers sharing); the raw
// pointer is not tied to any thread, and the owner `B` moves with the MR
// (hence `B: Send`).
#[allow(unsafe_code)]
unsafe impl<B: Send> Send for Mr<B> {}
// SAFETY: `&Mr` allows reads of the memory and of plain fields only; it
// never hands out `&B`, but `B: Sync` is asked for all the same.
#[allow(unsafe_code)]
unsafe impl<B: Send + Sync> Sync for Mr<B> {}

impl<B> fmt::Debug for Mr<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mr")
            .field("addr", &self.mem.addr())
            .field("len", &self.mem.len())
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .field("access", &self.access)
            .finish()
    }
}

/// What a peer needs to reach an MR with RDMA: exchange it out of band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteMr {
    /// Start address in the peer's MR.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The peer MR's rkey.
    pub rkey: u32,
}

impl RemoteMr {
    /// Length of the encoding of [`RemoteMr::to_bytes`].
    pub const WIRE_LEN: usize = 20;

    /// Encodes as 20 bytes (addr, len, rkey; big-endian).
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut b = [0u8; Self::WIRE_LEN];
        b[..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..16].copy_from_slice(&self.len.to_be_bytes());
        b[16..].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }

    /// Decodes [`RemoteMr::to_bytes`]'s form. Any 20 bytes decode: the
    /// values are the peer's word, checked by [`RemoteMr::at`] and, in the
    /// end, by the peer's device.
    pub fn from_bytes(b: &[u8; Self::WIRE_LEN]) -> RemoteMr {
        let (a, rest) = b.split_at(8);
        let (l, k) = rest.split_at(8);
        RemoteMr {
            addr: u64::from_be_bytes(a.try_into().unwrap_or_default()),
            len: u64::from_be_bytes(l.try_into().unwrap_or_default()),
            rkey: u32::from_be_bytes(k.try_into().unwrap_or_default()),
        }
    }

    /// The part of the region `offset` bytes in, `len` bytes long, checked
    /// against the length and the address space: address a request at an
    /// offset with `remote.slice(off, len)?.rdma_write(id, &sges)?`.
    pub fn slice(&self, offset: u64, len: u64) -> Result<RemoteMr> {
        Ok(RemoteMr {
            addr: self.at(offset, len)?,
            len,
            rkey: self.rkey,
        })
    }

    /// Checks that `sges` (their total length) fit in this region.
    fn fits(&self, sges: &[Sge]) -> Result<()> {
        let total = sges
            .iter()
            .try_fold(0u64, |t, s| t.checked_add(u64::from(s.length)));
        match total {
            Some(t) if self.span(0, t).is_some() => Ok(()),
            Some(t) if t <= self.len => Err(Error::invalid_as(
                InvalidKind::OutOfRange,
                format!(
                    "the remote region at {:#x} passes the end of the address space",
                    self.addr
                ),
            )),
            _ => Err(Error::invalid_as(
                InvalidKind::OutOfRange,
                format!(
                    "the gather list is longer than the {}-byte remote region",
                    self.len
                ),
            )),
        }
    }

    /// An RDMA WRITE of `sges` to the start of this region (see
    /// [`RemoteMr::slice`]); refused if they are longer than the region.
    pub fn rdma_write<'a>(&self, wr_id: u64, sges: &'a [Sge]) -> Result<SendWr<'a>> {
        self.fits(sges)?;
        Ok(SendWr::rdma_write(wr_id, sges, self.addr, self.rkey))
    }

    /// An RDMA READ of this region's start into `sges`; refused if they are
    /// longer than the region.
    pub fn rdma_read<'a>(&self, wr_id: u64, sges: &'a [Sge]) -> Result<SendWr<'a>> {
        self.fits(sges)?;
        Ok(SendWr::rdma_read(wr_id, sges, self.addr, self.rkey))
    }

    /// A 64-bit compare-and-swap on the region's first 8 bytes, the
    /// original value landing in `sge` (8 bytes). Refused if the region is
    /// shorter than 8 bytes or not 8-byte aligned.
    pub fn cmp_swap<'a>(
        &self,
        wr_id: u64,
        sge: &'a Sge,
        compare: u64,
        swap: u64,
    ) -> Result<SendWr<'a>> {
        self.atomic_target()?;
        Ok(SendWr::cmp_swap(
            wr_id, sge, self.addr, self.rkey, compare, swap,
        ))
    }

    /// A 64-bit fetch-and-add of `add` on the region's first 8 bytes, the
    /// original value landing in `sge` (8 bytes). Refused if the region is
    /// shorter than 8 bytes or not 8-byte aligned.
    pub fn fetch_add<'a>(&self, wr_id: u64, sge: &'a Sge, add: u64) -> Result<SendWr<'a>> {
        self.atomic_target()?;
        Ok(SendWr::fetch_add(wr_id, sge, self.addr, self.rkey, add))
    }

    /// An ATOMIC_WRITE of `value` (its bytes as they are) to the region's
    /// first 8 bytes, which must be 8-byte aligned; the peer's MR needs
    /// `REMOTE_WRITE`. The device must offer ATOMIC_WRITE (rxe on Linux
    /// 6.2 and later): elsewhere the post is refused with
    /// [`PostError::OpcodeUnsupported`](crate::PostError::OpcodeUnsupported).
    pub fn atomic_write(&self, wr_id: u64, value: [u8; 8]) -> Result<SendWr<'static>> {
        self.atomic_target()?;
        Ok(SendWr::atomic_write(wr_id, self.addr, self.rkey, value))
    }

    /// An RDMA FLUSH of this whole region (at most 4 GiB - 1 bytes; slice
    /// it first) to `kind`'s placement: data earlier RDMA WRITEs placed in
    /// it are then globally visible (or persistent). The peer's MR needs
    /// the matching `FLUSH_*` access; the device must offer FLUSH.
    pub fn flush(&self, wr_id: u64, kind: FlushType) -> Result<SendWr<'static>> {
        let length = u32::try_from(self.len).map_err(|_| {
            Error::invalid_as(
                InvalidKind::TooLarge,
                format!(
                    "a FLUSH range is at most 4 GiB - 1 bytes; this one is {}",
                    self.len
                ),
            )
        })?;
        Ok(SendWr::rdma_flush(
            wr_id, self.addr, self.rkey, length, kind,
        ))
    }

    /// An RDMA FLUSH of the whole MR this region's rkey names, whatever
    /// the region's bounds ([`FlushLevel::Mr`](crate::FlushLevel::Mr)).
    pub fn flush_mr(&self, wr_id: u64, kind: FlushType) -> SendWr<'static> {
        opcode::Flush::new(wr_id, self.addr, self.rkey, 0, kind)
            .whole_mr()
            .build()
    }

    fn atomic_target(&self) -> Result<()> {
        if self.span(0, 8).is_none() || self.addr % 8 != 0 {
            return Err(Error::invalid_as(
                InvalidKind::Alignment,
                format!(
                    "an atomic needs 8 aligned bytes; the remote region is {} bytes at {:#x}",
                    self.len, self.addr
                ),
            ));
        }
        Ok(())
    }

    /// The address `offset` bytes in, for `len` bytes, checked against the
    /// length and the address space: the range ends inside the region, and
    /// its last byte's address does not pass the end of the 64-bit address
    /// space (a peer's descriptor may hold any numbers).
    pub fn at(&self, offset: u64, len: u64) -> Result<u64> {
        match self.span(offset, len) {
            Some(addr) => Ok(addr),
            None => Err(Error::invalid_as(
                InvalidKind::OutOfRange,
                format!(
                    "remote range {offset}+{len} outside the peer's {}-byte MR at {:#x}{}",
                    self.len,
                    self.addr,
                    if offset.checked_add(len).is_some_and(|e| e <= self.len) {
                        " (its end passes the end of the address space)"
                    } else {
                        ""
                    }
                ),
            )),
        }
    }

    /// The address `offset` bytes in if `offset..offset + len` lies inside
    /// the region and inside the address space (its last byte at most at
    /// `u64::MAX`).
    fn span(&self, offset: u64, len: u64) -> Option<u64> {
        let end = offset.checked_add(len).filter(|&e| e <= self.len)?;
        if u128::from(self.addr) + u128::from(end) > 1 << 64 {
            return None;
        }
        self.addr.checked_add(offset)
    }
}

/// What [`Mr::advise`] asks of an on-demand MR's range
/// (`enum ib_uverbs_advise_mr_advice`).
#[repr(u32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OdpAdvice {
    /// Fault the pages in, readable by the device.
    Prefetch = advise_mr_advice::PREFETCH,
    /// Fault the pages in, writable by the device.
    PrefetchWrite = advise_mr_advice::PREFETCH_WRITE,
    /// Map the pages already present; fault none in.
    PrefetchNoFault = advise_mr_advice::PREFETCH_NO_FAULT,
}

/// A registration refused by [`Pd::register`]: the error, and the buffer,
/// handed back unregistered. Converts into [`Error`] (dropping the buffer),
/// so `?` works in functions returning [`Result`].
pub struct RegisterError<B> {
    /// Why the registration failed.
    pub error: Error,
    /// The buffer, never registered.
    pub buf: B,
}

impl<B> fmt::Debug for RegisterError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisterError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

impl<B> fmt::Display for RegisterError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<B> std::error::Error for RegisterError<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<B> From<RegisterError<B>> for Error {
    fn from(e: RegisterError<B>) -> Error {
        e.error
    }
}

/// Who owns a registered range, which decides what a failed
/// deregistration does and whether windows may be bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backing {
    /// The MR owns it (`B: MrBuf`): leaked if deregistration fails.
    Owned,
    /// The caller keeps it valid until deregistration ([`Pd::register_raw`]):
    /// a drop whose deregistration fails aborts.
    Raw,
    /// Borrowed for a closure's call ([`Pd::register_scoped`]): the drop
    /// at its end must deregister, or abort; no windows.
    Scoped,
}

impl Backing {
    /// Whether the memory is someone else's.
    pub(crate) fn borrowed(self) -> bool {
        self != Backing::Owned
    }
}

/// `Ok` unless `access` allows binding memory windows, which a scoped
/// registration ([`Pd::register_scoped`]) must not: the kernel refuses to
/// deregister an MR while a window is bound to it, and the scoped borrow
/// ends when its closure returns. Without `MW_BIND` on the MR the device
/// refuses every bind to it, however the request was built.
pub(crate) fn check_scoped_access(access: AccessFlags) -> Result<()> {
    if access.contains(AccessFlags::MW_BIND) {
        return Err(Error::invalid_as(
            InvalidKind::Access,
            "a scoped registration (register_scoped) cannot allow memory windows (MW_BIND): \
             a bound window keeps the kernel from deregistering it; register an owned \
             buffer (Pd::register, Pd::alloc_mr), or memory you keep (Pd::register_raw)",
        ));
    }
    Ok(())
}

pub(crate) fn check_access(access: AccessFlags) -> Result<()> {
    let needs_local_write = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
    if access.intersects(needs_local_write) && !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(Error::invalid_as(
            InvalidKind::Access,
            "REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE",
        ));
    }
    Ok(())
}

/// `Ok` unless `access` (an MR's or a QP's) asks for a FLUSH type or
/// on-demand paging the device does not offer ([`Error::NotOffered`]);
/// `caps` is asked only if it asks for one of them.
pub(crate) fn check_offered(access: AccessFlags, caps: impl FnOnce() -> Caps) -> Result<()> {
    let flush = AccessFlags::FLUSH_GLOBAL | AccessFlags::FLUSH_PERSISTENT;
    if !access.intersects(flush | AccessFlags::ON_DEMAND) {
        return Ok(());
    }
    let caps = caps();
    if access.contains(AccessFlags::ON_DEMAND) && caps.odp_general & odp_general::SUPPORT == 0 {
        return Err(Error::NotOffered {
            what: "on-demand paging (AccessFlags::ON_DEMAND)",
        });
    }
    for (flag, bit, what) in [
        (
            AccessFlags::FLUSH_GLOBAL,
            device_cap_ex::FLUSH_GLOBAL,
            "RDMA FLUSH to global visibility (AccessFlags::FLUSH_GLOBAL)",
        ),
        (
            AccessFlags::FLUSH_PERSISTENT,
            device_cap_ex::FLUSH_PERSISTENT,
            "RDMA FLUSH to persistence (AccessFlags::FLUSH_PERSISTENT)",
        ),
    ] {
        if access.contains(flag) && caps.cap_flags_ex & bit == 0 {
            return Err(Error::NotOffered { what });
        }
    }
    Ok(())
}

/// Runs `reg` (a registration command) with `access`; if the kernel
/// answers EINVAL and `access` holds optional flags
/// ([`AccessFlags::OPTIONAL_RANGE`], relaxed ordering first), runs it
/// again without them. Kernels from 5.9 accept optional flags (ignoring
/// those the device does not honour); older ones refuse any unknown flag
/// with EINVAL. libibverbs decides from the context's core-support bits,
/// which only the ioctl form of GET_CONTEXT reports; this asks the kernel
/// itself, at the cost of a second command only where the first failed.
/// Returns the result and the flags that were used.
pub(crate) fn with_optional_fallback<T>(
    access: AccessFlags,
    mut reg: impl FnMut(AccessFlags) -> std::result::Result<T, Errno>,
) -> (std::result::Result<T, Errno>, AccessFlags) {
    match reg(access) {
        Err(Errno::EINVAL) if access.intersects(AccessFlags::OPTIONAL_RANGE) => {
            let plain = access.difference(AccessFlags::OPTIONAL_RANGE);
            (reg(plain), plain)
        }
        r => (r, access),
    }
}

impl Pd {
    /// Registers `buf` and takes ownership of it: the MR gives it back from
    /// [`Mr::into_inner`] after deregistration, or drops it after
    /// deregistering when it is dropped. A zero-length buffer is refused; on
    /// any failure the buffer comes back in the error, unregistered.
    ///
    /// ```no_run
    /// # fn main() -> rverbs::Result<()> {
    /// # let pd = rverbs::devices()?.first().unwrap().open()?.alloc_pd()?;
    /// use rverbs::AccessFlags;
    /// let mr = pd.register(vec![0u8; 4096], AccessFlags::LOCAL_WRITE)?;
    /// // ... post work requests with mr.sge(..) ...
    /// let buf: Vec<u8> = mr.into_inner()?; // deregistered: plain memory again
    /// # let _ = buf; Ok(()) }
    /// ```
    pub fn register<B: MrBuf>(
        &self,
        buf: B,
        access: AccessFlags,
    ) -> Result<Mr<B>, RegisterError<B>> {
        register::register_owned(self, buf, access, None)
            .map_err(|(error, buf)| RegisterError { error, buf })
    }

    /// Registers `buf` as [`Pd::register`] does, but so that the device
    /// addresses it from `iova` (an I/O virtual address of the caller's
    /// choosing) rather than from its virtual address: SGEs
    /// ([`Mr::sge`]) and peers ([`Mr::remote`]) then name `iova + offset`.
    /// Useful to give a peer offsets from 0, or the same addresses for
    /// buffers that live at different places in different processes.
    ///
    /// `iova` must lie at the same offset within a page as the buffer
    /// (the kernel maps whole pages; it answers EINVAL otherwise, and this
    /// refuses first), and `iova + len` must not pass `u64::MAX`.
    pub fn register_at<B: MrBuf>(
        &self,
        buf: B,
        access: AccessFlags,
        iova: u64,
    ) -> Result<Mr<B>, RegisterError<B>> {
        register::register_owned(self, buf, access, Some(iova))
            .map_err(|(error, buf)| RegisterError { error, buf })
    }

    /// Allocates `len` zeroed, page-aligned bytes (a [`PageBuf`]) and
    /// registers them.
    pub fn alloc_mr(&self, len: usize, access: AccessFlags) -> Result<Mr<PageBuf>> {
        Ok(self.register(PageBuf::new(len)?, access)?)
    }

    /// Allocates `len` zeroed bytes backed by huge pages ([`PageBuf::huge`])
    /// and registers them. Fails with a clear error (ENOMEM) when the system
    /// has no free huge pages: reserve them with `vm.nr_hugepages`.
    pub fn alloc_mr_huge(&self, len: usize, access: AccessFlags) -> Result<Mr<PageBuf>> {
        Ok(self.register(PageBuf::huge(len)?, access)?)
    }

    /// Registers memory the caller already has, borrowed for the duration of
    /// `f` only: the region is deregistered before this returns (also when
    /// `f` panics), so the borrow can end safely whatever `f` does. The MR
    /// cannot leave `f` (its type is branded with a lifetime of this call).
    /// Work requests still outstanding on it when `f` returns fail on the
    /// device with a protection error; they never reach the memory again.
    ///
    /// `access` may not include [`AccessFlags::MW_BIND`]: a window bound
    /// to the region would make the kernel refuse to deregister it. So a
    /// healthy kernel always deregisters it; if a failing one refuses, the
    /// process aborts: the borrow cannot be kept from ending.
    ///
    /// ```no_run
    /// # fn main() -> rverbs::Result<()> {
    /// # let pd = rverbs::devices()?.first().unwrap().open()?.alloc_pd()?;
    /// let mut header = [0u8; 64];
    /// let lkey = pd.register_scoped(&mut header, rverbs::AccessFlags::LOCAL_WRITE, |mr| {
    ///     // post and complete work requests on mr.sge(..) here
    ///     mr.lkey()
    /// })?;
    /// # let _ = lkey; Ok(()) }
    /// ```
    pub fn register_scoped<R>(
        &self,
        buf: &mut [u8],
        access: AccessFlags,
        f: impl for<'s> FnOnce(&mut Mr<Scoped<'s>>) -> R,
    ) -> Result<R> {
        check_scoped_access(access)?;
        register::register_scoped(self, buf, access, f)
    }

    /// [`Pd::register_scoped`] for several buffers at once, one closure for
    /// all of them (a scatter into three caller buffers needs no nesting),
    /// with a flat result: `f` returns `Result<R, E>` for any error type
    /// `E` this crate's [`Error`] converts into, and so does this call.
    /// The regions are registered in order (one that fails deregisters the
    /// ones before it) and all deregistered before this returns.
    ///
    /// ```no_run
    /// # fn main() -> rverbs::Result<()> {
    /// # let pd = rverbs::devices()?.first().unwrap().open()?.alloc_pd()?;
    /// let (mut header, mut body, mut trailer) = ([0u8; 64], vec![0u8; 4096], [0u8; 16]);
    /// let lkeys = pd.register_scoped_all(
    ///     [&mut header[..], &mut body[..], &mut trailer[..]],
    ///     rverbs::AccessFlags::LOCAL_WRITE,
    ///     |[h, b, t]| {
    ///         // one receive scattering into all three: [h.sge(..)?, b.sge(..)?, t.sge(..)?]
    ///         Ok::<_, rverbs::Error>([h.lkey(), b.lkey(), t.lkey()])
    ///     },
    /// )?;
    /// # let _ = lkeys; Ok(()) }
    /// ```
    pub fn register_scoped_all<const N: usize, R, E: From<Error>>(
        &self,
        bufs: [&mut [u8]; N],
        access: AccessFlags,
        f: impl for<'s> FnOnce(&mut [Mr<Scoped<'s>>; N]) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        check_scoped_access(access)?;
        register::register_scoped_all(self, bufs, access, f)
    }

    /// Registers `len` bytes at `addr`, which the caller keeps valid: for
    /// memory no owning type describes (a device-shared mapping, a region
    /// inside a larger allocation managed elsewhere).
    ///
    /// # Safety
    /// Until the returned MR has been dropped, `addr..addr+len` must stay
    /// mapped and valid for reads and writes, and nothing but the MR may
    /// read or write it in a way that assumes exclusive access (no Rust
    /// reference to it may be live while the device can write it).
    /// Forgetting the MR (`std::mem::forget`) keeps the region registered
    /// forever: the memory must then never be freed or reused. If
    /// deregistration fails when the MR drops, the process aborts.
    ///
    /// With [`AccessFlags::MW_BIND`], memory windows may be bound to it
    /// ([`Mr::mw_bind`]), and while one is bound the kernel refuses to
    /// deregister it (rxe answers `EINVAL`): deallocate or invalidate the windows first,
    /// or deregister with [`Mr::deregister_raw`], which hands the MR back
    /// on a refusal (the memory then stays the device's until a later call
    /// succeeds); dropping it then aborts the process.
    // Public API, outside `sys`: the contract is the caller's.
    #[allow(unsafe_code)]
    pub unsafe fn register_raw(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Mr<Raw>> {
        // SAFETY: forwarded from this function's contract, which is
        // register::register_raw's.
        unsafe { register::register_raw(self, addr, len, access) }
    }
}

/// The IOVA to register `len` bytes at `addr` under: `iova` if given and
/// usable (same offset within a page as `addr`, end within `u64`), else
/// `addr` itself.
pub(crate) fn check_iova(addr: u64, len: usize, iova: Option<u64>) -> Result<u64> {
    let Some(iova) = iova else {
        return Ok(addr);
    };
    let page = crate::fork::page_size() as u64;
    if iova % page != addr % page {
        return Err(Error::invalid_as(
            InvalidKind::Alignment,
            format!(
            "IOVA {iova:#x} is at offset {:#x} within a page, the buffer at {:#x}: they must match",
            iova % page,
            addr % page
        ),
        ));
    }
    if iova.checked_add(len as u64).is_none() {
        return Err(Error::invalid_as(
            InvalidKind::OutOfRange,
            format!("IOVA {iova:#x} + {len} bytes passes the end of the address space"),
        ));
    }
    Ok(iova)
}

impl<B: MrBuf> Mr<B> {
    /// Deregisters the region and gives its memory back, now plain memory
    /// that no work request or peer can reach. If the kernel refuses to
    /// deregister (a memory window is still bound to the region, which the
    /// kernel answers with `EINVAL` or `EBUSY`; or a failing kernel), the
    /// MR comes back in the error, still registered: deallocate or
    /// invalidate its windows and try again, or drop it (which tries once
    /// more and, failing again, leaks the memory rather than free what the
    /// device may still write).
    // The error is the MR itself, handed back by value (as RegisterError
    // hands back the buffer); boxing it would allocate on that rare path
    // for nothing.
    #[allow(clippy::result_large_err)]
    pub fn into_inner(self) -> std::result::Result<B, DeregisterError<B>> {
        self.unregister()
    }
}

impl Mr<Raw> {
    /// Deregisters a raw registration ([`Pd::register_raw`]) and reports
    /// the outcome instead of aborting on failure as dropping it would:
    /// on success the device no longer touches the memory; on a refusal
    /// the MR comes back in the error, still registered, and the memory
    /// must stay untouched and mapped until a later attempt succeeds.
    #[allow(clippy::result_large_err)]
    pub fn deregister_raw(self) -> std::result::Result<(), DeregisterError<Raw>> {
        self.unregister().map(|_| ())
    }

    /// Moves the MR to `len` bytes at `addr` in one REREG_MR
    /// (`IBV_REREG_MR_CHANGE_TRANSLATION`), on `pd` and with `access` if
    /// given (else its own), known to the device by the new address. The
    /// kernel checks the command whole: on an error the MR is as it was,
    /// over its old memory. On success the keys may change (send peers the
    /// new [`Mr::remote`]) and the old memory is the caller's again.
    /// Refused by the kernel where the driver cannot move a registration
    /// (rxe: `EOPNOTSUPP`).
    ///
    /// # Safety
    ///
    /// As for [`Pd::register_raw`], for the new range: `addr..addr+len`
    /// must stay valid, and untouched except through the MR, until the MR
    /// is deregistered (forever if it is forgotten or its deregistration
    /// fails). The old range must stay so until this returns.
    // Public API, outside `sys`: the contract is the caller's.
    #[allow(unsafe_code)]
    pub unsafe fn rereg_translation(
        &mut self,
        addr: *mut u8,
        len: usize,
        pd: Option<&Pd>,
        access: Option<AccessFlags>,
    ) -> Result<()> {
        let mut flags = 0;
        let pd = match pd {
            Some(pd) => {
                self.check_rereg_pd(pd)?;
                flags |= sys::mr::REREG_PD;
                pd.clone()
            }
            None => self.pd.clone(),
        };
        let access = match access {
            Some(a) => {
                self.check_rereg_access(a)?;
                flags |= sys::mr::REREG_ACCESS;
                a
            }
            None => self.access,
        };
        // SAFETY: forwarded from this function's contract, which is
        // register::rereg_translation's.
        unsafe { register::rereg_translation(self, addr, len, &pd, access, flags) }
    }
}

impl<B> Mr<B> {
    /// [`Mr::into_inner`]'s work, for every kind of MR.
    #[allow(clippy::result_large_err)]
    fn unregister(mut self) -> std::result::Result<B, DeregisterError<B>> {
        if let Err(error) = self.deregister() {
            return Err(DeregisterError { error, mr: self });
        }
        // Drop must not deregister again nor touch `buf`.
        self.finished = true;
        match self.buf.take() {
            Some(buf) => Ok(buf),
            // Taken only here or in Drop, once.
            None => unreachable!("an MR's buffer is taken once"),
        }
    }
}

/// A deregistration refused by [`Mr::into_inner`]: the error, and the MR,
/// still registered. Converts into [`Error`] (dropping the MR, which tries
/// to deregister once more and leaks the memory if that fails too), so `?`
/// works in functions returning [`Result`].
pub struct DeregisterError<B> {
    /// Why the kernel refused.
    pub error: Error,
    /// The memory region, still registered.
    pub mr: Mr<B>,
}

impl<B> fmt::Debug for DeregisterError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeregisterError")
            .field("error", &self.error)
            .field("mr", &self.mr)
            .finish()
    }
}

impl<B> fmt::Display for DeregisterError<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<B> std::error::Error for DeregisterError<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<B> From<DeregisterError<B>> for Error {
    fn from(e: DeregisterError<B>) -> Error {
        e.error
    }
}

impl<B> Mr<B> {
    /// The MR REG_MR answered `resp` for, over `mem` (whose making in
    /// `sys::mr` carries the memory's contract), owning `buf`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_registration(
        pd: Pd,
        resp: &RegMrResp,
        mem: Region,
        iova: u64,
        access: AccessFlags,
        fork: crate::fork::Guard,
        buf: B,
        backing: Backing,
    ) -> Mr<B> {
        Mr {
            pd,
            handle: resp.mr_handle,
            lkey: resp.lkey,
            rkey: resp.rkey,
            mem,
            iova,
            access,
            fork,
            buf: TakeOnce::new(buf),
            backing,
            finished: false,
        }
    }
}

impl<B> Mr<B> {
    /// DEREG_MR. On success the device no longer touches the memory. EIO and
    /// ENODEV mean the device is gone and the kernel already tore the
    /// registration down. On any other failure the pages stay marked
    /// against fork (the registration may live on) and the error is
    /// returned: the caller must keep the memory from being reused.
    fn deregister(&mut self) -> Result<()> {
        match sys::cmd::dereg_mr(self.pd.context().fd(), self.handle) {
            Ok(_) | Err(Errno::EIO | Errno::ENODEV) => {
                // Unmarked before the owner can free the pages.
                self.fork.release();
                Ok(())
            }
            Err(errno) => {
                self.fork.keep();
                Err(Error::kernel("dereg_mr")(errno))
            }
        }
    }
}

impl<B> Mr<B> {
    /// Local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// The kernel's handle for the MR (`ibv_mr.handle`).
    pub fn handle(&self) -> u32 {
        self.handle
    }
    /// Remote key, for peers.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// Start address (in this process).
    pub fn addr(&self) -> u64 {
        self.mem.addr() as u64
    }
    /// The address the device knows the start by: what SGEs and peers
    /// name. Equal to [`Mr::addr`] unless registered with
    /// [`Pd::register_at`].
    pub fn iova(&self) -> u64 {
        self.iova
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }
    /// Always false: zero-length MRs are refused.
    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }
    /// Access flags it was registered with (without the optional ones
    /// where the kernel does not take them: see [`AccessFlags::OPTIONAL_RANGE`]).
    pub fn access(&self) -> AccessFlags {
        self.access
    }
    /// The PD it belongs to.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    pub(crate) fn bounds(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.mem.len(),
        };
        if start > end || end > self.mem.len() {
            return Err(Error::invalid_as(
                InvalidKind::OutOfRange,
                format!(
                    "range {start}..{end} outside the {}-byte memory region",
                    self.mem.len()
                ),
            ));
        }
        Ok((start, end))
    }

    /// An SGE covering `range` of the MR (bounds-checked; at most 4 GiB - 1).
    pub fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge> {
        let (s, e) = self.bounds(range)?;
        let length = u32::try_from(e - s).map_err(|_| {
            Error::invalid_as(InvalidKind::TooLarge, "an SGE covers at most 4 GiB - 1")
        })?;
        Ok(Sge {
            // `iova + len` fits a u64 (checked at registration).
            addr: self.iova + s as u64,
            length,
            lkey: self.lkey,
        })
    }

    /// Changes the MR's access flags in place (REREG_MR); the keys may
    /// change, so send peers the new [`Mr::remote`]. A scoped
    /// registration cannot gain [`AccessFlags::MW_BIND`] (see
    /// [`Pd::register_scoped`]). Refused by the kernel
    /// with `EOPNOTSUPP` where the driver cannot re-register (rxe before
    /// Linux 6.4 or so has no re-registration at all).
    pub fn rereg_access(&mut self, access: AccessFlags) -> Result<()> {
        self.check_rereg_access(access)?;
        self.rereg(REREG_ACCESS, self.pd.clone(), access)
    }

    /// Moves the MR to another PD of the same context (REREG_MR).
    pub fn rereg_pd(&mut self, pd: &Pd) -> Result<()> {
        self.check_rereg_pd(pd)?;
        self.rereg(REREG_PD, pd.clone(), self.access)
    }

    /// Moves the MR to `pd` and changes its access flags to `access` in
    /// one REREG_MR command, which the kernel checks whole: either both
    /// change or neither does. Every check of [`Mr::rereg_pd`] and
    /// [`Mr::rereg_access`] is made before the kernel is asked; the keys
    /// may change.
    pub fn rereg_pd_access(&mut self, pd: &Pd, access: AccessFlags) -> Result<()> {
        self.check_rereg_pd(pd)?;
        self.check_rereg_access(access)?;
        self.rereg(REREG_PD | REREG_ACCESS, pd.clone(), access)
    }

    /// What [`Mr::rereg_access`] refuses before asking the kernel.
    fn check_rereg_access(&self, access: AccessFlags) -> Result<()> {
        check_access(access)?;
        if self.backing == Backing::Scoped {
            check_scoped_access(access)?;
        }
        check_offered(access, || self.pd.context().caps())
    }

    /// What [`Mr::rereg_pd`] refuses before asking the kernel.
    fn check_rereg_pd(&self, pd: &Pd) -> Result<()> {
        if !pd.context().same(self.pd.context()) {
            return Err(Error::invalid_as(
                InvalidKind::Foreign,
                "the PD belongs to another device context",
            ));
        }
        Ok(())
    }

    /// After a REREG_MR that moved the MR ([`register::rereg_translation`]):
    /// its new keys, memory, address, PD, access and fork marking (the
    /// old marking is released).
    pub(crate) fn moved(
        &mut self,
        resp: &ReregMrResp,
        mem: Region,
        iova: u64,
        pd: Pd,
        access: AccessFlags,
        fork: crate::fork::Guard,
    ) {
        self.lkey = resp.lkey;
        self.rkey = resp.rkey;
        self.mem = mem;
        self.iova = iova;
        self.pd = pd;
        self.access = access;
        // The old range's pages leave the kernel with the move.
        self.fork = fork;
    }

    fn rereg(&mut self, flags: u32, pd: Pd, access: AccessFlags) -> Result<()> {
        // The kernel checks the flags before it touches the MR: an EINVAL
        // for optional flags leaves it as it was, and may be retried.
        let (resp, access) = with_optional_fallback(access, |access| {
            sys::mr::rereg_mr(
                self.pd.context().fd(),
                &self.mem,
                self.handle,
                flags,
                self.iova,
                pd.handle(),
                access.bits(),
            )
        });
        let resp: ReregMrResp = resp.map_err(Error::kernel("rereg_mr"))?;
        self.lkey = resp.lkey;
        self.rkey = resp.rkey;
        self.access = access;
        self.pd = pd;
        Ok(())
    }

    /// Advises the device about `range` of an on-demand (ODP) MR
    /// (`ibv_advise_mr`): fault its pages in now, for reading or for
    /// writing, or map those already present ([`OdpAdvice`]), so that the
    /// first requests on it do not wait for page faults. With `sync` the
    /// call returns once that is done, else the kernel may finish after it
    /// returns. Refused by the kernel (EOPNOTSUPP) where the driver has no
    /// advice, and (EINVAL) for an MR that is not on-demand. On rxe it is
    /// refused before the kernel is asked ([`Error::Unsupported`]): rxe's
    /// prefetch crashes the 7.3 kernel.
    pub fn advise(
        &self,
        range: impl RangeBounds<usize>,
        advice: OdpAdvice,
        sync: bool,
    ) -> Result<()> {
        let sge = self.sge(range)?;
        let ctx = self.pd.context();
        ctx.provider().require(Feature::OdpAdvice)?;
        let flags = if sync { ADVISE_MR_FLAG_FLUSH } else { 0 };
        sys::cmd::advise_mr(
            ctx.fd(),
            ctx.device().driver().id().unwrap_or(0),
            self.pd.handle(),
            advice as u64,
            flags,
            &sge,
        )
        .map_err(Error::kernel("advise_mr"))
    }

    /// The descriptor a peer needs for RDMA on the whole MR.
    pub fn remote(&self) -> RemoteMr {
        RemoteMr {
            addr: self.iova,
            len: self.mem.len() as u64,
            rkey: self.rkey,
        }
    }

    /// Copies `data` into the MR at `offset`.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        let (s, _) = self.bounds(offset..offset.saturating_add(data.len()))?;
        self.mem.write(s, data);
        Ok(())
    }

    /// Copies from the MR at `offset` into `out`.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let (s, _) = self.bounds(offset..offset.saturating_add(out.len()))?;
        self.mem.read(s, out);
        Ok(())
    }

    /// Fills `range` with `byte`.
    pub fn fill(&mut self, range: impl RangeBounds<usize>, byte: u8) -> Result<()> {
        let (s, e) = self.bounds(range)?;
        self.mem.fill(s, e, byte);
        Ok(())
    }

    /// Copies the whole MR out.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.mem.len()];
        // read_at cannot fail on the MR's own length.
        let _ = self.read_at(0, &mut v);
        v
    }

    /// The MR's memory as a slice.
    ///
    /// # Safety
    /// No work request that writes this memory (receive, RDMA READ target,
    /// remote WRITE or atomic) may be outstanding while the slice lives.
    // Public API, outside `sys`: the contract is the caller's.
    #[allow(unsafe_code)]
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller excludes writes while the slice lives, which
        // is Region::as_slice's contract.
        unsafe { self.mem.as_slice() }
    }

    /// The MR's memory as a mutable slice.
    ///
    /// # Safety
    /// No work request that reads or writes this memory may be outstanding
    /// while the slice lives.
    // Public API, outside `sys`: the contract is the caller's.
    #[allow(unsafe_code)]
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the caller excludes any other access while the slice
        // lives, which is Region::as_mut_slice's contract.
        unsafe { self.mem.as_mut_slice() }
    }
}

impl<B> Drop for Mr<B> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        match self.deregister() {
            // `into_inner` took the buffer only if it set `finished`.
            Ok(()) => drop(self.buf.take()),
            // The device may still write the memory: an owned buffer is
            // leaked (it stays in the MaybeUninit, never dropped).
            Err(_) if !self.backing.borrowed() => {}
            Err(e) => {
                // A borrowed range cannot be kept from its owner once this
                // frame returns: stop before anything can reuse it.
                eprintln!("verbs: cannot deregister a borrowed memory region ({e}); aborting");
                std::process::abort();
            }
        }
    }
}

#[cfg(test)]
mod remote_tests;
