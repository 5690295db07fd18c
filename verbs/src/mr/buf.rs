//! Memory an [`Mr`](super::Mr) may own: the [`MrBuf`] contract, its
//! implementations for the standard owners of bytes, and [`PageBuf`], a
//! page- or huge-page-aligned anonymous mapping.

use std::ops::{Deref, DerefMut};

use memmap2::MmapMut;

use crate::error::{Error, InvalidKind, Result};

/// A value that owns a range of memory at a stable address, so that an
/// [`Mr`](super::Mr) can own it for as long as the device may reach it.
///
/// Registration moves the value into the MR and gives it back only after
/// deregistration succeeded ([`Mr::into_inner`](super::Mr::into_inner)).
/// Forgetting the MR (`std::mem::forget` is safe) forgets the value with it:
/// the memory leaks and stays registered, which is sound, because nothing
/// else can reach it.
///
/// # Safety
/// An implementor promises, for every value `b` of the type:
/// - [`mr_ptr`](MrBuf::mr_ptr) and [`mr_len`](MrBuf::mr_len) describe one
///   range of `b.mr_len()` bytes that is valid for reads and writes, and
///   return the same pointer and length every time they are called on the
///   same value;
/// - the range keeps its address while `b` lives, including when `b` itself
///   is moved (heap or mapped memory, never bytes stored inline in `b`);
/// - `b` owns the range exclusively: while `b` lives, nothing but `b`
///   reaches it (no other handle, clone or mapping of the same memory that
///   safe code could use), and `b` itself touches it only when its own
///   methods are called, which the MR never does while registered;
/// - the range stays valid until `b` is dropped (dropping may free it).
// Public API, outside `sys`: the contract is the implementer's.
#[allow(unsafe_code)]
pub unsafe trait MrBuf: Send {
    /// Start of the owned range. Called once, before registration.
    fn mr_ptr(&mut self) -> *mut u8;
    /// Length of the owned range in bytes.
    fn mr_len(&self) -> usize;
}

// SAFETY: a Vec's elements live on the heap at an address that does not
// change while the Vec is not resized (the MR never resizes it), the Vec
// owns them exclusively, and they are freed only when the Vec drops.
#[allow(unsafe_code)]
unsafe impl MrBuf for Vec<u8> {
    fn mr_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    fn mr_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: as for Vec: heap memory owned by the box, freed on drop.
#[allow(unsafe_code)]
unsafe impl MrBuf for Box<[u8]> {
    fn mr_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    fn mr_len(&self) -> usize {
        self.len()
    }
}

// SAFETY: a private writable mapping (memmap2's `MmapMut` is only made by
// mapping, and its mapping is unmapped only on drop) lives at a fixed
// address and is reached only through the value. A shared file mapping can
// also be written by other processes mapping the same file; that changes
// the bytes the device sees, as any DMA-visible file page would, but never
// the validity of the range, which is what registration needs.
#[allow(unsafe_code)]
unsafe impl MrBuf for MmapMut {
    fn mr_ptr(&mut self) -> *mut u8 {
        self.as_mut_ptr()
    }
    fn mr_len(&self) -> usize {
        self.len()
    }
}

/// Zeroed anonymous memory aligned to pages ([`PageBuf::new`]) or huge pages
/// ([`PageBuf::huge`]): the buffer [`Pd::alloc_mr`](crate::Pd::alloc_mr)
/// registers. Before registration (and after [`Mr::into_inner`]) it is plain
/// memory, reachable as a slice.
///
/// [`Mr::into_inner`]: super::Mr::into_inner
pub struct PageBuf {
    map: MmapMut,
    len: usize,
}

impl PageBuf {
    /// Maps `len` zeroed, page-aligned bytes. A zero length is refused.
    pub fn new(len: usize) -> Result<PageBuf> {
        if len == 0 {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "cannot allocate a zero-length buffer",
            ));
        }
        let map = MmapMut::map_anon(len).map_err(|source| Error::Io {
            what: format!("anonymous mmap of {len} bytes"),
            source,
        })?;
        Ok(PageBuf { map, len })
    }

    /// Maps `len` zeroed bytes backed by huge pages (`MAP_HUGETLB`, the
    /// system's default huge page size), rounded up to whole huge pages
    /// (the slice is `len` bytes long). Fails with a clear error (ENOMEM)
    /// when the system has no free huge pages: reserve them with
    /// `vm.nr_hugepages`.
    pub fn huge(len: usize) -> Result<PageBuf> {
        if len == 0 {
            return Err(Error::invalid_as(
                InvalidKind::Empty,
                "cannot allocate a zero-length buffer",
            ));
        }
        let huge = default_huge_page_size()?;
        // hugetlb mappings are made and unmapped in whole huge pages.
        let map_len = len.checked_next_multiple_of(huge).ok_or_else(|| {
            Error::invalid_as(
                InvalidKind::TooLarge,
                "length overflows when rounded to huge pages",
            )
        })?;
        let map = memmap2::MmapOptions::new()
            .len(map_len)
            .huge(None)
            .map_anon()
            .map_err(|source| Error::Io {
                what: format!("mapping {map_len} bytes of huge pages ({huge}-byte pages)"),
                source,
            })?;
        Ok(PageBuf { map, len })
    }
}

impl Deref for PageBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map[..self.len]
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.map[..self.len]
    }
}

impl std::fmt::Debug for PageBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageBuf")
            .field("addr", &self.map.as_ptr())
            .field("len", &self.len)
            .finish()
    }
}

// SAFETY: the private anonymous mapping is made in `new`/`huge`, never
// shared, lives at a fixed address, and is unmapped only when the PageBuf
// drops; `len` never exceeds the mapping's length.
#[allow(unsafe_code)]
unsafe impl MrBuf for PageBuf {
    fn mr_ptr(&mut self) -> *mut u8 {
        self.map.as_mut_ptr()
    }
    fn mr_len(&self) -> usize {
        self.len
    }
}

/// The default huge page size (`Hugepagesize` in /proc/meminfo).
fn default_huge_page_size() -> Result<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").map_err(|source| Error::Io {
        what: "/proc/meminfo".into(),
        source,
    })?;
    info.lines()
        .find_map(|l| l.strip_prefix("Hugepagesize:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<usize>().ok())
        .and_then(|kb| kb.checked_mul(1024))
        .ok_or_else(|| {
            Error::invalid_as(
                InvalidKind::NotPresent,
                "this kernel reports no huge page size",
            )
        })
}
