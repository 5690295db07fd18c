//! The one way this provider maps memory: [`Mapping`], an `mmap` of whole
//! pages unmapped on drop. Queue buffers and doorbell pages are anonymous
//! private memory the kernel pins for the device; UAR pages are the
//! device's registers, mapped from the command fd. A queue buffer or
//! doorbell record may instead come from the program's allocator (a parent
//! domain's, [`Mapping::queue_in`]), which gets it back on drop.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use rverbs_abi::Errno;
use rverbs_provider::{Allocation, BufferKind, SharedAllocator};

/// The system page size (queue buffers and doorbell pages are multiples).
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n <= 0 {
        4096
    } else {
        n as usize
    }
}

/// The huge page size [`Mapping::queue`] rounds to (x86-64's default,
/// the one libmlx5 and rdma-core's tests assume).
const HUGE_PAGE: usize = 2 << 20;

/// Which queue a buffer is for: the environment variable naming its
/// allocation type.
#[derive(Debug, Clone, Copy)]
pub(crate) enum QueueKind {
    /// A CQ's CQE ring (`MLX_CQ_ALLOC_TYPE`).
    Cq,
    /// A QP's work queues (`MLX_QP_ALLOC_TYPE`).
    Qp,
    /// An SRQ's WQE list (`MLX_SRQ_ALLOC_TYPE`).
    Srq,
}

/// Where a queue buffer's pages come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AllocType {
    /// Small anonymous pages (the default).
    Anon,
    /// Huge pages only.
    Huge,
    /// Huge pages, else small ones.
    PreferHuge,
}

impl AllocType {
    /// The allocation type the environment asks for `queue`.
    fn from_env(queue: QueueKind) -> AllocType {
        let var = match queue {
            QueueKind::Cq => "MLX_CQ_ALLOC_TYPE",
            QueueKind::Qp => "MLX_QP_ALLOC_TYPE",
            QueueKind::Srq => "MLX_SRQ_ALLOC_TYPE",
        };
        AllocType::parse(std::env::var_os(var).as_deref().and_then(|v| v.to_str()))
    }

    /// The value of an `MLX_*_ALLOC_TYPE` variable.
    fn parse(value: Option<&str>) -> AllocType {
        match value {
            Some("HUGE") => AllocType::Huge,
            Some("PREFER_HUGE") => AllocType::PreferHuge,
            _ => AllocType::Anon,
        }
    }
}

/// Whole pages mapped by [`Mapping::map`], unmapped on drop.
///
/// The bytes are shared with the device (or, for a UAR page, are its
/// registers): no Rust reference to them is ever made; the rest of this
/// module reads and writes them through raw pointers and atomics.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    /// The allocator the bytes came from (freed through it on drop), or
    /// `None`: our own `mmap`.
    from: Option<(SharedAllocator, BufferKind)>,
}

// SAFETY: `Mapping` owns its mapping exclusively; the pointer is only an
// address. Concurrent access to the bytes goes through the raw-pointer
// and atomic operations of `hw`, whose SAFETY comments cover it.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` only hands out the address.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// The one `mmap` call: `len` bytes (a nonzero multiple of the page
    /// size) with protection `prot` and flags `flags`, of `fd` at `offset`
    /// (anonymous without an fd).
    fn map(
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
        fd: Option<BorrowedFd<'_>>,
        offset: libc::off_t,
    ) -> Result<Mapping, Errno> {
        let raw_fd = fd.map_or(-1, |fd| fd.as_raw_fd());
        // SAFETY: a new mapping at an address of the kernel's choosing
        // (no MAP_FIXED): no existing memory is affected.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, raw_fd, offset) };
        if p == libc::MAP_FAILED {
            return Err(Errno::last());
        }
        let ptr = NonNull::new(p.cast()).ok_or(Errno::ENOMEM)?;
        Ok(Mapping {
            ptr,
            len,
            from: None,
        })
    }

    /// `len` bytes aligned to `align` for `kind` from `alloc`, zeroed;
    /// `None` where it answers [`Allocation::UseDefault`], `ENOMEM` where
    /// it fails. Its `fork()` safety is the allocator's duty
    /// ([`rverbs_provider::QueueAllocator`]'s contract, as
    /// `ibv_alloc_parent_domain(3)` puts it): no `madvise` here, which on
    /// memory not page-aligned would change its neighbours too.
    pub(crate) fn allocated(
        alloc: &SharedAllocator,
        len: usize,
        align: usize,
        kind: BufferKind,
    ) -> Result<Option<Mapping>, Errno> {
        let ptr = match alloc.alloc(len, align, kind) {
            Allocation::Memory(p) => p,
            Allocation::UseDefault => return Ok(None),
            Allocation::Failed => return Err(Errno::ENOMEM),
        };
        let m = Mapping {
            ptr,
            len,
            from: Some((std::sync::Arc::clone(alloc), kind)),
        };
        if ptr.as_ptr() as usize % align != 0 {
            // Not what was asked for: given back (by the drop), refused.
            return Err(Errno::EINVAL);
        }
        // SAFETY: `len` writable bytes the allocator handed over, which
        // nobody else uses (QueueAllocator's contract).
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        Ok(Some(m))
    }

    /// [`Mapping::queue`], from `alloc` where one is given (whole pages,
    /// page-aligned, as [`Mapping::queue`] maps them) unless it answers
    /// "use the default".
    pub(crate) fn queue_in(
        len: usize,
        queue: QueueKind,
        alloc: Option<&SharedAllocator>,
    ) -> Result<Mapping, Errno> {
        if let Some(a) = alloc {
            let page = page_size();
            let whole = len.max(1).checked_add(page - 1).ok_or(Errno::ENOMEM)? & !(page - 1);
            let kind = match queue {
                QueueKind::Cq => BufferKind::Cq,
                QueueKind::Qp => BufferKind::Qp,
                QueueKind::Srq => BufferKind::Srq,
            };
            if let Some(m) = Mapping::allocated(a, whole, page, kind)? {
                return Ok(m);
            }
        }
        Mapping::queue(len, queue)
    }

    /// Page-aligned, zeroed anonymous memory for the device: `len` bytes
    /// rounded up to whole pages (at least one), excluded from `fork()`
    /// children (the kernel pins it for the device; a copy-on-write fault
    /// in the parent would move the parent's pages away from the pinned
    /// ones).
    pub(crate) fn anon(len: usize) -> Result<Mapping, Errno> {
        Mapping::private(len, page_size(), 0)?.dontfork()
    }

    /// A fresh private anonymous read-write mapping of `len` bytes rounded
    /// up to whole `page`s (a power of two; at least one), with `flags`
    /// added to `MAP_PRIVATE | MAP_ANONYMOUS`.
    fn private(len: usize, page: usize, flags: libc::c_int) -> Result<Mapping, Errno> {
        let len = len.max(1).checked_add(page - 1).ok_or(Errno::ENOMEM)? & !(page - 1);
        Mapping::map(
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
            None,
            0,
        )
    }

    /// This fresh mapping, excluded from `fork()` children.
    fn dontfork(self) -> Result<Mapping, Errno> {
        // SAFETY: the range is exactly our fresh mapping.
        if unsafe { libc::madvise(self.ptr.as_ptr().cast(), self.len, libc::MADV_DONTFORK) } != 0 {
            return Err(Errno::last());
        }
        Ok(self)
    }

    /// A queue buffer of `len` bytes for `queue` ([`Mapping::anon`]), in
    /// 2 MiB huge pages where the program asks for them, as libmlx5 reads
    /// it: the environment variable `MLX_CQ_ALLOC_TYPE`, `MLX_QP_ALLOC_TYPE`
    /// or `MLX_SRQ_ALLOC_TYPE` set to `HUGE` (huge pages or `ENOMEM`) or
    /// `PREFER_HUGE` (huge pages if the system has them free, else small
    /// ones); anything else, or unset, small pages.
    pub(crate) fn queue(len: usize, queue: QueueKind) -> Result<Mapping, Errno> {
        match AllocType::from_env(queue) {
            AllocType::Anon => Mapping::anon(len),
            AllocType::Huge => Mapping::huge(len),
            AllocType::PreferHuge => Mapping::huge(len).or_else(|_| Mapping::anon(len)),
        }
    }

    /// [`Mapping::anon`] in huge pages (the system's default size, 2 MiB
    /// on x86-64): `len` rounded up to whole huge pages; `ENOMEM` where
    /// none are free.
    fn huge(len: usize) -> Result<Mapping, Errno> {
        Mapping::private(len, HUGE_PAGE, libc::MAP_HUGETLB)
            .map_err(|_| Errno::ENOMEM)?
            .dontfork()
    }

    /// One page of the device's registers (a UAR page), write-only,
    /// mapped from the command fd `fd` at `offset`.
    pub(crate) fn uar(fd: BorrowedFd<'_>, offset: usize) -> Result<Mapping, Errno> {
        let offset = libc::off_t::try_from(offset).map_err(|_| Errno::EINVAL)?;
        Mapping::map(
            page_size(),
            libc::PROT_WRITE,
            libc::MAP_SHARED,
            Some(fd),
            offset,
        )
    }

    /// User address of the first byte (what the kernel is given).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// Pointer to the first byte (for the rest of `hw`).
    pub(super) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Mapped length in bytes (whole pages).
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A copy of bytes `at..at + len` (test inspection of what the
    /// provider wrote for the device).
    ///
    /// # Panics
    /// If the range is not inside the mapping.
    #[cfg(test)]
    pub(crate) fn read_bytes(&self, at: usize, len: usize) -> Vec<u8> {
        assert!(at.checked_add(len).is_some_and(|end| end <= self.len));
        let mut v = vec![0u8; len];
        // SAFETY: in bounds (asserted), readable (anonymous read-write
        // memory in tests), copied through the raw pointer into a fresh
        // vector (no reference to the mapping).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), v.as_mut_ptr(), len) };
        v
    }

    /// Sets every byte to `byte` (tests: makes stale bytes visible).
    #[cfg(test)]
    pub(crate) fn fill(&self, byte: u8) {
        // SAFETY: the whole mapping, writable anonymous memory in tests,
        // written through the raw pointer.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), byte, self.len) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        match &self.from {
            // SAFETY: from this allocator's `alloc` with this size and
            // kind, freed once (here), and nothing refers to it any more
            // (holders of pointers into it keep the `Mapping` alive).
            Some((alloc, kind)) => unsafe { alloc.free(self.ptr, self.len, *kind) },
            // SAFETY: we own this mapping and nothing refers to it any
            // more (as above).
            None => unsafe {
                libc::munmap(self.ptr.as_ptr().cast(), self.len);
            },
        }
    }
}

/// A read-only anonymous mapping of a power of two of bytes (up to 64 TiB)
/// that is never written: the kernel commits no memory for it and every
/// read sees zeros. Tests use it for real `&[u8]`s long enough that a few
/// hundred thousand of them add up past `usize::MAX`.
#[cfg(test)]
pub(crate) struct Reserved(Mapping);

#[cfg(test)]
impl Reserved {
    /// The largest such mapping from 64 TiB down to 1 TiB.
    ///
    /// # Panics
    /// If none can be mapped.
    pub(crate) fn new() -> Reserved {
        for shift in (40..=46).rev() {
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
            if let Ok(m) = Mapping::map(1 << shift, libc::PROT_READ, flags, None, 0) {
                return Reserved(m);
            }
        }
        panic!("no room for a 1 TiB read-only mapping");
    }

    /// The whole mapping: readable, initialised (zero) memory.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes mapped until `self` drops; nothing
        // writes them (read-only, and not shared with any device).
        unsafe { std::slice::from_raw_parts(self.0.as_ptr(), self.0.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anon_is_page_aligned_and_zeroed() {
        let b = Mapping::anon(100).unwrap();
        assert_eq!(b.addr() as usize % page_size(), 0);
        assert_eq!(b.len(), page_size());
        assert!(b.read_bytes(0, b.len()).iter().all(|&x| x == 0));
        let b2 = Mapping::anon(page_size() + 1).unwrap();
        assert_eq!(b2.len(), 2 * page_size());
    }

    #[test]
    fn alloc_type_values_as_libmlx5_names_them() {
        assert_eq!(AllocType::parse(None), AllocType::Anon);
        assert_eq!(AllocType::parse(Some("ANON")), AllocType::Anon);
        assert_eq!(AllocType::parse(Some("HUGE")), AllocType::Huge);
        assert_eq!(AllocType::parse(Some("PREFER_HUGE")), AllocType::PreferHuge);
        assert_eq!(AllocType::parse(Some("huge")), AllocType::Anon);
    }

    /// Huge pages where the system has them free (whole 2 MiB pages),
    /// `ENOMEM` where it has none; never small pages in their place.
    #[test]
    fn huge_is_whole_huge_pages_or_enomem() {
        match Mapping::huge(100) {
            Ok(m) => {
                assert_eq!(m.len(), HUGE_PAGE);
                assert_eq!(m.addr() as usize % HUGE_PAGE, 0);
            }
            Err(e) => assert_eq!(e, Errno::ENOMEM),
        }
    }

    /// An allocator handing out dirty, page-aligned heap blocks and
    /// recording what it was asked for and given back; `answer` 1 says
    /// "use the default", 2 fails.
    #[derive(Debug, Default)]
    struct Recorder {
        answer: u8,
        asked: std::sync::Mutex<Vec<(usize, usize, BufferKind)>>,
        freed: std::sync::Mutex<Vec<(usize, usize, BufferKind)>>,
    }

    // SAFETY: Memory is a fresh block of `size` bytes aligned to `align`
    // from the global allocator, only freed through `free`.
    unsafe impl rverbs_provider::QueueAllocator for Recorder {
        fn alloc(&self, size: usize, align: usize, kind: BufferKind) -> Allocation {
            self.asked.lock().unwrap().push((size, align, kind));
            match self.answer {
                1 => return Allocation::UseDefault,
                2 => return Allocation::Failed,
                _ => {}
            }
            let layout = std::alloc::Layout::from_size_align(size, align).unwrap();
            // SAFETY: a nonzero size (asserted by the callers below).
            let p = unsafe { std::alloc::alloc(layout) };
            // SAFETY: `size` writable bytes just allocated.
            unsafe { std::ptr::write_bytes(p, 0xa5, size) };
            Allocation::Memory(NonNull::new(p).unwrap())
        }

        unsafe fn free(&self, ptr: NonNull<u8>, size: usize, kind: BufferKind) {
            self.freed
                .lock()
                .unwrap()
                .push((ptr.as_ptr() as usize, size, kind));
            // Every request of this test is page-aligned (asserted there).
            let layout = std::alloc::Layout::from_size_align(size, page_size()).unwrap();
            // SAFETY: from `alloc` with this size and alignment, freed once.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), layout) };
        }
    }

    /// A queue buffer from an allocator is whole pages, page-aligned,
    /// zeroed, of the queue's kind, and goes back to it on drop; "use the
    /// default" maps our own; a failure is ENOMEM.
    #[test]
    fn queue_buffers_from_an_allocator() {
        let rec = std::sync::Arc::new(Recorder::default());
        let alloc: SharedAllocator = rec.clone();
        let m = Mapping::queue_in(100, QueueKind::Qp, Some(&alloc)).unwrap();
        let page = page_size();
        assert_eq!(m.len(), page);
        assert_eq!(m.addr() % page as u64, 0);
        assert!(m.read_bytes(0, page).iter().all(|&b| b == 0));
        assert_eq!(*rec.asked.lock().unwrap(), [(page, page, BufferKind::Qp)]);
        let addr = m.addr() as usize;
        drop(m);
        assert_eq!(*rec.freed.lock().unwrap(), [(addr, page, BufferKind::Qp)]);

        let default = std::sync::Arc::new(Recorder {
            answer: 1,
            ..Recorder::default()
        });
        let alloc: SharedAllocator = default.clone();
        let m = Mapping::queue_in(100, QueueKind::Cq, Some(&alloc)).unwrap();
        assert!(m.from.is_none());
        drop(m);
        assert!(default.freed.lock().unwrap().is_empty());

        let failing: SharedAllocator = std::sync::Arc::new(Recorder {
            answer: 2,
            ..Recorder::default()
        });
        let e = Mapping::queue_in(100, QueueKind::Srq, Some(&failing)).unwrap_err();
        assert_eq!(e, Errno::ENOMEM);
    }
}
