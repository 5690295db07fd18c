//! Protection domains, thread domains, parent domains and memory regions:
//! `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_alloc_td`, `ibv_dealloc_td`,
//! `ibv_alloc_parent_domain`, `ibv_reg_mr`, `ibv_reg_mr_iova`, `ibv_reg_mr_iova2`,
//! `ibv_dereg_mr`.
//!
//! A C object is a record whose first field is the C struct, so the
//! pointer a program holds is the record's. Records are boxed and freed
//! only by the matching destroy call; a PD counts the objects created on
//! it, and `ibv_dealloc_pd` refuses (`EBUSY`, as the kernel answers
//! libibverbs) while any remains.
//!
//! A parent domain is a PD record of its own whose Rust PD is its
//! protection domain's (the same kernel PD and handle, as libibverbs'
//! `ibv_initialize_parent_domain` makes it), with the thread domain and
//! allocators it was given. Everything created on it counts on it (and a
//! CQ created with `IBV_CQ_INIT_ATTR_MASK_PD` too), so `ibv_dealloc_pd`
//! frees it only once all are destroyed; libmlx5 counts only its QPs and
//! CQs, but here each object's record points to the parent domain's, which
//! must outlive it. The parent domain counts on its protection domain and
//! its thread domain: neither can be deallocated before it (`EBUSY`).
//! Both providers offer parent and thread domains; on rxe, whose rings are
//! the kernel's memory, the allocators are never called (librxe has no
//! parent domains at all: its programs get `EOPNOTSUPP`).

use std::ffi::{c_int, c_void};
use std::os::fd::BorrowedFd;
use std::ptr;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rverbs::{AccessFlags, Allocation, BufferKind, DmabufMr, Mr, Pd, QueueAllocator};

use super::{context_rec, errno_of, guard, null_with, set_errno, IbvContext};

/// `struct ibv_pd`.
#[repr(C)]
pub struct IbvPd {
    /// The context it was allocated on.
    pub context: *mut IbvContext,
    /// The kernel's handle.
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct IbvMr {
    /// The context.
    pub context: *mut IbvContext,
    /// The PD it was registered on.
    pub pd: *mut IbvPd,
    /// The registered address.
    pub addr: *mut c_void,
    /// The registered length.
    pub length: usize,
    /// The kernel's handle.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// `struct ibv_td`.
#[repr(C)]
pub struct IbvTd {
    /// The context it was allocated on.
    pub context: *mut IbvContext,
}

/// `struct ibv_td_init_attr`.
#[repr(C)]
pub struct IbvTdInitAttr {
    /// No field is defined: must be 0.
    pub comp_mask: u32,
}

/// `ibv_parent_domain_init_attr.alloc`.
pub type PdAllocFn =
    unsafe extern "C" fn(*mut IbvPd, *mut c_void, usize, usize, u64) -> *mut c_void;
/// `ibv_parent_domain_init_attr.free`.
pub type PdFreeFn = unsafe extern "C" fn(*mut IbvPd, *mut c_void, *mut c_void, u64);

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
pub struct IbvParentDomainInitAttr {
    /// The protection domain (not NULL).
    pub pd: *mut IbvPd,
    /// A thread domain, or NULL.
    pub td: *mut IbvTd,
    /// `IBV_PARENT_DOMAIN_INIT_ATTR_*`.
    pub comp_mask: u32,
    /// The queue-buffer allocator (with `..._ALLOCATORS`).
    pub alloc: Option<PdAllocFn>,
    /// Its free (with `..._ALLOCATORS`).
    pub free: Option<PdFreeFn>,
    /// What the allocators are passed (with `..._PD_CONTEXT`).
    pub pd_context: *mut c_void,
}

/// `verbs_context.alloc_td`.
pub type AllocTdFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvTdInitAttr) -> *mut IbvTd;
/// `verbs_context.dealloc_td`.
pub type DeallocTdFn = unsafe extern "C" fn(*mut IbvTd) -> c_int;
/// `verbs_context.alloc_parent_domain`.
pub type AllocParentDomainFn =
    unsafe extern "C" fn(*mut IbvContext, *mut IbvParentDomainInitAttr) -> *mut IbvPd;

/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS`.
const PD_INIT_ALLOCATORS: u32 = 1 << 0;
/// `IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT`.
const PD_INIT_PD_CONTEXT: u32 = 1 << 1;
/// `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOW_CC_UNPROTECTED_ALLOC`: leave to use
/// shared memory in a confidential-computing guest on a device that
/// bounces DMA; no device of ours does (libmlx5 then uses plain memory
/// too), so it is accepted and changes nothing.
const PD_INIT_ALLOW_CC: u32 = 1 << 2;

/// A thread domain handed out.
#[repr(C)]
struct TdRec {
    c: IbvTd,
    /// Parent domains using it and not deallocated.
    users: AtomicUsize,
}

/// What makes a PD record a parent domain.
struct Parent {
    /// Its protection domain's record, which counts this one.
    protection: *mut IbvPd,
    /// Its thread domain, or NULL; counts this one.
    td: *mut IbvTd,
}

/// A PD handed out: the C struct first.
#[repr(C)]
pub(crate) struct PdRec {
    c: IbvPd,
    pub(crate) pd: Pd,
    /// MRs, QPs, SRQs, AHs, MWs (and, for a parent domain, CQs and parent
    /// domains on a protection domain) not yet destroyed.
    users: AtomicUsize,
    /// `Some` for a parent domain.
    parent: Option<Parent>,
}

impl PdRec {
    /// Counts one more object created on the PD.
    pub(crate) fn hold(&self) {
        self.users.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one object on the PD destroyed.
    pub(crate) fn release(&self) {
        self.users.fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether this PD is a parent domain.
    pub(crate) fn is_parent_domain(&self) -> bool {
        self.parent.is_some()
    }

    /// Whether objects created on this PD are single-threaded: it is a
    /// parent domain with a thread domain (the program's promise, see
    /// `ffi::lock`).
    pub(crate) fn single_threaded(&self) -> bool {
        self.parent.as_ref().is_some_and(|p| !p.td.is_null())
    }
}

/// An MR handed out.
#[repr(C)]
struct MrRec {
    c: IbvMr,
    /// `None` only while `ibv_dereg_mr` runs.
    reg: Option<Reg>,
}

/// What an MR registers.
enum Reg {
    /// Process memory (`ibv_reg_mr` and its forms).
    Mem(Mr<rverbs::Raw>),
    /// A dma-buf (`ibv_reg_dmabuf_mr`).
    Dmabuf(DmabufMr),
}

/// The lkey of `mr`, if it is not NULL.
///
/// # Safety
/// `mr` is NULL or a live MR of this library.
pub(crate) unsafe fn mr_lkey(mr: *mut IbvMr) -> Option<u32> {
    // SAFETY: NULL or a live IbvMr (the contract), read in place.
    unsafe { mr.as_ref().map(|m| m.lkey) }
}

/// The record behind a PD pointer.
///
/// # Safety
/// `pd` is null or a PD this library handed out and not yet deallocated
/// (libibverbs' contract), not deallocated while the reference lives.
pub(crate) unsafe fn pd_rec<'a>(pd: *mut IbvPd) -> Option<&'a PdRec> {
    // SAFETY: per the contract, a non-null `pd` is the first field of a
    // live PdRec (repr(C)), so the cast pointer is that record.
    unsafe { pd.cast::<PdRec>().as_ref() }
}

/// `ibv_alloc_pd`: a PD, or NULL with errno.
///
/// # Safety
/// None beyond passing any pointer: `context` is checked before use.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut IbvContext) -> *mut IbvPd {
    guard(ptr::null_mut(), || {
        let Some(rec) = context_rec(context) else {
            set_errno(libc::EINVAL);
            return ptr::null_mut();
        };
        match rec.ctx.alloc_pd() {
            Ok(pd) => {
                let rec = Box::new(PdRec {
                    c: IbvPd {
                        context,
                        handle: pd.handle(),
                    },
                    pd,
                    users: AtomicUsize::new(0),
                    parent: None,
                });
                Box::into_raw(rec).cast::<IbvPd>()
            }
            Err(e) => {
                set_errno(errno_of(&e));
                ptr::null_mut()
            }
        }
    })
}

/// `ibv_dealloc_pd`: 0, `EBUSY` while an object created on it remains
/// (for a protection domain, a parent domain on it too), `EINVAL` for
/// NULL. A parent domain is freed here, and stops counting on its
/// protection and thread domains.
///
/// # Safety
/// `pd` is NULL or a PD from [`ibv_alloc_pd`] or a parent domain not yet
/// deallocated; no other call uses it during or after this one.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut IbvPd) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: forwarded from this function's contract.
        let Some(rec) = (unsafe { pd_rec(pd) }) else {
            return libc::EINVAL;
        };
        if rec.users.load(Ordering::Relaxed) != 0 {
            return libc::EBUSY;
        }
        if let Some(p) = &rec.parent {
            // SAFETY: the protection and thread domains outlive the parent
            // domain (each refuses deallocation while it counts it).
            unsafe {
                if let Some(prot) = pd_rec(p.protection) {
                    prot.release();
                }
                if let Some(td) = p.td.cast::<TdRec>().as_ref() {
                    td.users.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
        // SAFETY: `pd` came from Box::into_raw in ibv_alloc_pd or
        // alloc_parent_domain (the contract) and nothing holds it any more
        // (no users, and the caller makes no other call on it).
        drop(unsafe { Box::from_raw(pd.cast::<PdRec>()) });
        0
    })
}

/// `verbs_context.alloc_td`, behind `verbs.h`'s inline `ibv_alloc_td`: a
/// thread domain, or NULL with errno (`EINVAL` for a NULL `init_attr` or
/// a nonzero `comp_mask`, as libmlx5 answers). It holds no kernel object:
/// what it changes is that QPs and CQs created on a parent domain with it
/// take no lock in this library (see `ffi::lock`).
///
/// # Safety
/// `init_attr` is NULL or points to a readable `struct ibv_td_init_attr`.
pub unsafe extern "C" fn alloc_td(
    context: *mut IbvContext,
    init_attr: *mut IbvTdInitAttr,
) -> *mut IbvTd {
    guard(ptr::null_mut(), || {
        // SAFETY: NULL or readable (the contract).
        let attr = unsafe { init_attr.as_ref() };
        if context_rec(context).is_none() || attr.is_none_or(|a| a.comp_mask != 0) {
            return null_with(libc::EINVAL);
        }
        Box::into_raw(Box::new(TdRec {
            c: IbvTd { context },
            users: AtomicUsize::new(0),
        }))
        .cast::<IbvTd>()
    })
}

/// `verbs_context.dealloc_td`, behind `ibv_dealloc_td`: 0, `EBUSY` while a
/// parent domain uses it.
///
/// # Safety
/// `td` is a thread domain of this library not yet deallocated; no other
/// call uses it during or after a successful call.
pub unsafe extern "C" fn dealloc_td(td: *mut IbvTd) -> c_int {
    guard(libc::EIO, || {
        // SAFETY: NULL or a live TdRec (the contract), first field first.
        let Some(rec) = (unsafe { td.cast::<TdRec>().as_ref() }) else {
            return libc::EINVAL;
        };
        if rec.users.load(Ordering::Relaxed) != 0 {
            return libc::EBUSY;
        }
        // SAFETY: from Box::into_raw in alloc_td; no parent domain refers
        // to it and the caller makes no other call on it.
        drop(unsafe { Box::from_raw(td.cast::<TdRec>()) });
        0
    })
}

/// `verbs_context.alloc_parent_domain`, behind `verbs.h`'s inline
/// `ibv_alloc_parent_domain`: a parent domain on `attr->pd` (a PD, not a
/// parent domain) with the thread domain `attr->td` (or none), usable
/// wherever a PD is, or NULL with errno: `EINVAL` for a NULL `attr` or
/// `pd`, unknown `comp_mask` bits, or a PD or TD of another context.
/// With `IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS` and both functions given,
/// mlx5 allocates the queue buffers and doorbell records of the QPs, SRQs
/// and CQs made on it with `alloc` (libmlx5's `MLX5DV_RES_TYPE_*`), and
/// frees them with `free`; rxe never calls them.
///
/// # Safety
/// `attr` is NULL or points to a readable `struct
/// ibv_parent_domain_init_attr` whose `pd` and `td` are NULL or live
/// objects of this library; the allocators behave as
/// `ibv_alloc_parent_domain(3)` says.
pub unsafe extern "C" fn alloc_parent_domain(
    context: *mut IbvContext,
    attr: *mut IbvParentDomainInitAttr,
) -> *mut IbvPd {
    guard(ptr::null_mut(), || {
        // SAFETY: NULL or readable (the contract).
        let Some(a) = (unsafe { attr.as_ref() }) else {
            return null_with(libc::EINVAL);
        };
        if context_rec(context).is_none()
            || a.comp_mask & !(PD_INIT_ALLOCATORS | PD_INIT_PD_CONTEXT | PD_INIT_ALLOW_CC) != 0
        {
            return null_with(libc::EINVAL);
        }
        // SAFETY: NULL or live objects of this library (the contract).
        let (prot, td) = unsafe { (pd_rec(a.pd), a.td.cast::<TdRec>().as_ref()) };
        let Some(prot) = prot.filter(|p| !p.is_parent_domain() && p.c.context == context) else {
            return null_with(libc::EINVAL);
        };
        if td.is_some_and(|t| t.c.context != context) {
            return null_with(libc::EINVAL);
        }
        let rec = Box::into_raw(Box::new(PdRec {
            c: IbvPd {
                context,
                handle: prot.c.handle,
            },
            pd: prot.pd.clone(),
            users: AtomicUsize::new(0),
            parent: Some(Parent {
                protection: a.pd,
                td: a.td,
            }),
        }));
        if a.comp_mask & PD_INIT_ALLOCATORS != 0 {
            if let (Some(alloc), Some(free)) = (a.alloc, a.free) {
                let pd_context = if a.comp_mask & PD_INIT_PD_CONTEXT != 0 {
                    a.pd_context
                } else {
                    ptr::null_mut()
                };
                let c = CAllocator {
                    parent: rec.cast::<IbvPd>(),
                    pd_context,
                    alloc,
                    free,
                };
                // SAFETY: `rec` was just allocated and is not shared yet.
                let r = unsafe { &mut *rec };
                r.pd = r.pd.with_allocator(Arc::new(c));
            }
        }
        prot.hold();
        if let Some(t) = td {
            t.users.fetch_add(1, Ordering::Relaxed);
        }
        rec.cast::<IbvPd>()
    })
}

/// A parent domain's C allocators, as the providers' [`QueueAllocator`].
#[derive(Debug)]
struct CAllocator {
    /// The parent domain, which the functions are passed (as libmlx5
    /// passes its own).
    parent: *mut IbvPd,
    pd_context: *mut c_void,
    alloc: PdAllocFn,
    free: PdFreeFn,
}

// SAFETY: the pointers are only passed back to the program's functions,
// which libibverbs lets any thread call (the program's allocators take
// whatever lock they need: rdma-core's providers call them from whichever
// thread creates or destroys the object).
unsafe impl Send for CAllocator {}
// SAFETY: as above; `&CAllocator` only reads the pointers.
unsafe impl Sync for CAllocator {}

/// `IBV_ALLOCATOR_USE_DEFAULT`.
const ALLOCATOR_USE_DEFAULT: *mut c_void = usize::MAX as *mut c_void;

// SAFETY: what `alloc` returns, when not NULL or USE_DEFAULT, is the
// program's promise of ibv_alloc_parent_domain(3): `size` bytes aligned to
// `align`, the provider's until passed to `free`, and not copied on write
// in a forked child (the callback's duty, the man page says).
unsafe impl QueueAllocator for CAllocator {
    fn alloc(&self, size: usize, align: usize, kind: BufferKind) -> Allocation {
        // SAFETY: the program's function, called as libibverbs documents.
        let p = unsafe {
            (self.alloc)(
                self.parent,
                self.pd_context,
                size,
                align,
                kind.mlx5dv_res_type(),
            )
        };
        if p == ALLOCATOR_USE_DEFAULT {
            Allocation::UseDefault
        } else {
            match NonNull::new(p.cast::<u8>()) {
                Some(p) => Allocation::Memory(p),
                None => Allocation::Failed,
            }
        }
    }

    unsafe fn free(&self, ptr: NonNull<u8>, _size: usize, kind: BufferKind) {
        // SAFETY: `ptr` came from this allocator's `alloc` (the caller's
        // contract) and is freed once.
        unsafe {
            (self.free)(
                self.parent,
                self.pd_context,
                ptr.as_ptr().cast(),
                kind.mlx5dv_res_type(),
            )
        }
    }
}

/// The access flags `IBV_ACCESS_OPTIONAL_RANGE` covers: hints a device
/// may ignore (relaxed ordering), dropped here as libibverbs drops those
/// a device lacks.
const ACCESS_OPTIONAL_RANGE: u32 = 0x3ff0_0000;

fn reg_mr(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> Result<*mut IbvMr, c_int> {
    // SAFETY: libibverbs' contract: `pd` is a live PD of this library.
    let rec = unsafe { pd_rec(pd) }.ok_or(libc::EINVAL)?;
    if iova != addr as u64 {
        // Registering at another IOVA is not implemented here yet.
        return Err(libc::EOPNOTSUPP);
    }
    let access = AccessFlags::from_bits(access & !ACCESS_OPTIONAL_RANGE).ok_or(libc::EINVAL)?;
    // SAFETY: ibv_reg_mr's contract: the caller keeps `addr..addr+length`
    // mapped until it deregisters the MR (ibv_dereg_mr returns 0: with a
    // window bound, the kernel refuses and the MR stays), and the device
    // may read and write it meanwhile (the program's own memory, which
    // Rust holds no reference to).
    let mr = unsafe { rec.pd.register_raw(addr.cast::<u8>(), length, access) }
        .map_err(|e| errno_of(&e))?;
    rec.hold();
    let c = IbvMr {
        context: rec.c_context(),
        pd,
        addr,
        length,
        handle: mr.handle(),
        lkey: mr.lkey(),
        rkey: mr.rkey(),
    };
    Ok(Box::into_raw(Box::new(MrRec {
        c,
        reg: Some(Reg::Mem(mr)),
    }))
    .cast::<IbvMr>())
}

impl PdRec {
    /// The context pointer the program passed to `ibv_alloc_pd`.
    pub(crate) fn c_context(&self) -> *mut IbvContext {
        self.c.context
    }
}

/// `ibv_reg_mr` (`IBVERBS_1.1`): registers `length` bytes at `addr`; the
/// MR, or NULL with errno.
///
/// # Safety
/// `pd` is a live PD of this library; `addr..addr+length` stays mapped
/// until the MR is deregistered (the device reads and writes it as the
/// access flags allow).
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut IbvMr {
    guard(ptr::null_mut(), || {
        reg_mr(pd, addr, length, addr as u64, access as u32).unwrap_or_else(null_with)
    })
}

/// `ibv_reg_mr_iova2`: as [`ibv_reg_mr`] at IOVA `iova` (only `iova ==
/// addr` so far: else NULL with `EOPNOTSUPP`).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut IbvMr {
    guard(ptr::null_mut(), || {
        reg_mr(pd, addr, length, iova, access).unwrap_or_else(null_with)
    })
}

/// `ibv_reg_mr_iova` (`IBVERBS_1.7`): [`ibv_reg_mr_iova2`] with the
/// access flags as an `int`, as libibverbs forwards it. A program calls it
/// through `verbs.h`'s macro of that name whenever the flags are a
/// constant with no optional-range bit (the macro calls
/// `ibv_reg_mr_iova2` otherwise).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut IbvMr {
    guard(ptr::null_mut(), || {
        reg_mr(pd, addr, length, iova, access as u32).unwrap_or_else(null_with)
    })
}

/// `ibv_reg_dmabuf_mr`: registers `length` bytes of the dma-buf `fd` from
/// `offset` on, addressed from `iova`; the MR (its `addr` is `offset`, as
/// libibverbs sets it), or NULL with errno. The fd is only read during
/// the call: the kernel holds the dma-buf while it is registered. rxe has
/// no dmabuf registration (`EOPNOTSUPP`).
///
/// # Safety
/// `pd` is a live PD of this library.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut IbvPd,
    offset: u64,
    length: usize,
    iova: u64,
    fd: c_int,
    access: c_int,
) -> *mut IbvMr {
    guard(ptr::null_mut(), || {
        // SAFETY: libibverbs' contract: `pd` is a live PD of this library.
        let Some(rec) = (unsafe { pd_rec(pd) }) else {
            return null_with(libc::EINVAL);
        };
        if fd < 0 {
            return null_with(libc::EBADF);
        }
        let Some(access) = u32::try_from(access)
            .ok()
            .and_then(|a| AccessFlags::from_bits(a & !ACCESS_OPTIONAL_RANGE))
        else {
            return null_with(libc::EINVAL);
        };
        // SAFETY: `fd` is not -1; it is only passed to the kernel during
        // this call, which answers EBADF for one that is not open (no Rust
        // object owns or closes it).
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        let d = match rec
            .pd
            .reg_dmabuf_mr(borrowed, offset, length as u64, iova, access)
        {
            Ok(d) => d,
            Err(e) => return null_with(errno_of(&e)),
        };
        rec.hold();
        let c = IbvMr {
            context: rec.c_context(),
            pd,
            addr: offset as usize as *mut c_void,
            length,
            handle: d.handle(),
            lkey: d.lkey(),
            rkey: d.rkey(),
        };
        Box::into_raw(Box::new(MrRec {
            c,
            reg: Some(Reg::Dmabuf(d)),
        }))
        .cast::<IbvMr>()
    })
}

/// `ibv_dereg_mr`: 0, or the errno (the MR stays registered and valid
/// then, as with libibverbs).
///
/// # Safety
/// `mr` is NULL or an MR of this library not yet deregistered; no other
/// call uses it during or after a successful call.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int {
    guard(libc::EIO, || {
        if mr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: `mr` is the first field of a live MrRec boxed by
        // reg_mr (the contract), which no other call uses meanwhile.
        let rec = unsafe { &mut *mr.cast::<MrRec>() };
        let deregistered = match rec.reg.take() {
            None => return libc::EINVAL,
            // Dropping it deregisters it; the dma-buf is its exporter's.
            Some(Reg::Dmabuf(d)) => {
                drop(d);
                Ok(())
            }
            Some(Reg::Mem(inner)) => inner.deregister_raw().map(drop),
        };
        match deregistered {
            Ok(()) => {
                // SAFETY: the PD outlives its MRs (ibv_dealloc_pd refuses
                // while this one is counted).
                if let Some(pd) = unsafe { pd_rec(rec.c.pd) } {
                    pd.release();
                }
                // SAFETY: from Box::into_raw in reg_mr; freed once, here,
                // and the caller makes no call on it after success.
                drop(unsafe { Box::from_raw(mr.cast::<MrRec>()) });
                0
            }
            Err(e) => {
                // Still registered: the program's pointer stays valid.
                let errno = errno_of(&e.error);
                rec.reg = Some(Reg::Mem(e.mr));
                errno
            }
        }
    })
}

/// `IBV_REREG_MR_CHANGE_TRANSLATION`.
const REREG_TRANSLATION: c_int = 1 << 0;
/// `IBV_REREG_MR_CHANGE_PD`.
const REREG_PD: c_int = 1 << 1;
/// `IBV_REREG_MR_CHANGE_ACCESS`.
const REREG_ACCESS: c_int = 1 << 2;
/// `IBV_REREG_MR_ERR_INPUT`: bad arguments, the MR unchanged.
const REREG_ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_ERR_CMD`: the kernel refused.
const REREG_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr`: moves the MR to `pd` (`IBV_REREG_MR_CHANGE_PD`),
/// changes its access (`IBV_REREG_MR_CHANGE_ACCESS`) and moves it to
/// `length` bytes at `addr` (`IBV_REREG_MR_CHANGE_TRANSLATION`); 0, or one of
/// libibverbs' `IBV_REREG_MR_ERR_*` codes with errno. Everything is
/// checked first and both changes go to the kernel as one command, which
/// it checks whole: on any failure the MR is as it was (its PD, keys and
/// access), `IBV_REREG_MR_ERR_INPUT` when this library found the fault
/// (unknown flags or access bits, `access` without `CHANGE_ACCESS`, no
/// PD, access the MR cannot have), `IBV_REREG_MR_ERR_CMD` when the kernel
/// refused (rxe's kernel cannot move an MR: `EOPNOTSUPP`).
///
/// # Safety
/// `mr` is a live MR of this library, `pd` NULL or a live PD of this
/// library; no other call uses the MR meanwhile.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut IbvMr,
    flags: c_int,
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    guard(REREG_ERR_INPUT, || {
        let fail = |code: c_int, e: c_int| {
            set_errno(e);
            code
        };
        if mr.is_null() || flags == 0 || flags & !(REREG_TRANSLATION | REREG_PD | REREG_ACCESS) != 0
        {
            return fail(REREG_ERR_INPUT, libc::EINVAL);
        }
        if flags & REREG_TRANSLATION != 0 && (addr.is_null() || length == 0) {
            return fail(REREG_ERR_INPUT, libc::EINVAL);
        }
        // libibverbs' rule: access bits are only taken with CHANGE_ACCESS.
        if access != 0 && flags & REREG_ACCESS == 0 {
            return fail(REREG_ERR_INPUT, libc::EINVAL);
        }
        // SAFETY: a live MrRec (the contract), used by this call alone.
        let rec = unsafe { &mut *mr.cast::<MrRec>() };
        let inner = match rec.reg.as_mut() {
            Some(Reg::Mem(m)) => m,
            // The kernel re-registers memory only, not a dma-buf region.
            Some(Reg::Dmabuf(_)) => return fail(REREG_ERR_CMD, libc::EOPNOTSUPP),
            None => return fail(REREG_ERR_INPUT, libc::EINVAL),
        };
        let new_pd = if flags & REREG_PD != 0 {
            // SAFETY: NULL or a live PD (the contract).
            match unsafe { pd_rec(pd) } {
                Some(p) => Some(p),
                None => return fail(REREG_ERR_INPUT, libc::EINVAL),
            }
        } else {
            None
        };
        let new_access = if flags & REREG_ACCESS != 0 {
            match AccessFlags::from_bits(access as u32 & !ACCESS_OPTIONAL_RANGE) {
                Some(a) => Some(a),
                None => return fail(REREG_ERR_INPUT, libc::EINVAL),
            }
        } else {
            None
        };
        let translation = flags & REREG_TRANSLATION != 0;
        let done = match (new_pd, new_access) {
            // SAFETY: ibv_rereg_mr's contract with CHANGE_TRANSLATION: the
            // program keeps addr..addr+length mapped until it deregisters
            // the MR (the device may read and write it meanwhile, memory
            // Rust holds no reference to), and the old range until this
            // returns.
            _ if translation => unsafe {
                inner.rereg_translation(
                    addr.cast::<u8>(),
                    length,
                    new_pd.map(|p| &p.pd),
                    new_access,
                )
            },
            (Some(p), Some(a)) => inner.rereg_pd_access(&p.pd, a),
            (Some(p), None) => inner.rereg_pd(&p.pd),
            (None, Some(a)) => inner.rereg_access(a),
            // flags is one of the two at least (checked above).
            (None, None) => return fail(REREG_ERR_INPUT, libc::EINVAL),
        };
        if let Err(e) = done {
            // rverbs' own checks come before any command: the MR is
            // untouched. The kernel's refusal comes from the one command.
            let code = if matches!(e, rverbs::Error::Kernel { .. }) {
                REREG_ERR_CMD
            } else {
                REREG_ERR_INPUT
            };
            return fail(code, errno_of(&e));
        }
        if let Some(new_pd) = new_pd {
            new_pd.hold();
            // SAFETY: the old PD outlives its MRs (it counted this one).
            if let Some(old) = unsafe { pd_rec(rec.c.pd) } {
                old.release();
            }
            rec.c.pd = pd;
        }
        if translation {
            rec.c.addr = addr;
            rec.c.length = length;
        }
        rec.c.lkey = inner.lkey();
        rec.c.rkey = inner.rkey();
        0
    })
}
