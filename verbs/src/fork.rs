//! Fork safety of registered memory: what happens to memory regions when the
//! process calls `fork()`, how this crate finds out, and the
//! `MADV_DONTFORK` marking it applies when the kernel does not help.
//!
//! # The problem
//!
//! Registering memory pins its pages: the device keeps using those physical
//! pages until the MR is deregistered. `fork()` makes private anonymous
//! memory copy-on-write in parent and child. On old kernels the *parent*
//! could be the one that got a fresh copy on its next write to a registered
//! page, while the device kept reading and writing the old, pinned page: the
//! parent then silently sent stale data and never saw what the device wrote.
//!
//! # What C users get
//!
//! libibverbs offers `ibv_fork_init()` (or the environment variable
//! `RDMAV_FORK_SAFE`): from then on every registered range, rounded out to
//! whole pages, is marked `madvise(MADV_DONTFORK)` while registered (with a
//! reference count per range, so overlapping registrations keep the mark
//! until the last one goes), and `MADV_DOFORK` again afterwards. The child
//! then simply has no mapping there, and the parent keeps its pages.
//! `ibv_is_fork_initialized()` reports `IBV_FORK_UNNEEDED` when the kernel
//! says it copies pinned pages on fork; it asks with the RDMA netlink
//! command `RDMA_NLDEV_CMD_SYS_GET` and reads the u8 attribute
//! `RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK` (Linux 5.13 and later report 1; older
//! kernels do not send the attribute at all). With such a kernel
//! `ibv_fork_init()` does nothing.
//!
//! Since Linux 5.8/5.9 ("mm: Do early cow for pinned pages during fork()
//! for ptes", and the hugetlb counterpart), `fork()` gives the *child* a
//! private copy of every page that may be DMA-pinned (`FOLL_PIN`, which
//! `ib_umem_get` uses with `FOLL_LONGTERM`), so the parent keeps the pinned
//! page and both processes see consistent memory. The netlink attribute is
//! the kernel's promise of that behaviour.
//!
//! # What this crate does
//!
//! The decision is automatic, made once per process ([`fork_safety`]):
//!
//! * [`ForkSafety::KernelCopiesOnFork`]: the kernel reports copy-on-fork.
//!   Nothing is marked; after `fork()` the child has copies of registered
//!   memory (it may read and write them; they are not registered in the
//!   child), the parent keeps its registrations intact.
//! * [`ForkSafety::MadviseDontfork`]: the kernel does not report it, but
//!   `MADV_DONTFORK` works. [`Pd::register`](crate::Pd::register) and
//!   [`Pd::alloc_mr`](crate::Pd::alloc_mr) mark the registered range, rounded
//!   out to whole pages, before registering it and unmark it (`MADV_DOFORK`)
//!   after deregistering it, with the same per-range reference counting as
//!   libibverbs. In a child, those pages are not mapped at all: touching them
//!   faults. Beware that the rounding covers whatever else shares the first
//!   and last page of a registered caller buffer (heap neighbours, for
//!   example), exactly as with `ibv_fork_init()`. [`Pd::alloc_mr`](crate::Pd::alloc_mr)
//!   buffers are page-aligned mappings of their own, so they share nothing.
//!   Each mark may split a mapping, which counts against `vm.max_map_count`.
//! * [`ForkSafety::Unsafe`]: neither; registered memory is not protected
//!   and a process that forks must not write registered pages afterwards.
//!
//! [`enable_dontfork`] opts in to the marking even on a kernel that copies
//! on fork (for MRs registered afterwards): with very large registrations
//! the copy that kernel makes at every `fork()` costs time and memory,
//! while marked pages are simply left out of the child.
//!
//! Hugetlb-backed caller buffers: `madvise` needs huge-page alignment there
//! and fails with `EINVAL`; on a kernel that needs the marking such a
//! registration fails with [`Error::Kernel`] `op: "madvise(MADV_DONTFORK)"`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use nix::unistd::{sysconf, SysconfVar};
use rverbs_abi::Errno;
use rverbs_netlink::NlSocket;

use crate::error::{Error, InvalidKind, Result};
use crate::sys::mem::{madvise_fork, ForkAdvice::*};

/// What protects registered memory across `fork()` in this process (see
/// the [module documentation](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ForkSafety {
    /// The kernel copies DMA-pinned pages for the child at `fork()` (it
    /// reports `RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK`): nothing else is needed.
    KernelCopiesOnFork,
    /// Registered ranges (rounded to pages) are marked `MADV_DONTFORK`
    /// while registered: the child does not inherit them.
    MadviseDontfork,
    /// Nothing protects registered memory: after `fork()` the parent must
    /// not write registered pages.
    Unsafe,
}

static KERNEL_COF: OnceLock<bool> = OnceLock::new();
static DETECTED: OnceLock<ForkSafety> = OnceLock::new();
static FORCED: AtomicBool = AtomicBool::new(false);
static TRACKER: Mutex<Tracker> = Mutex::new(Tracker::new());

/// Whether the running kernel reports that it copies DMA-pinned pages for
/// the child at `fork()`: the RDMA netlink `RDMA_NLDEV_CMD_SYS_GET` reply
/// carries `RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK` = 1 (Linux 5.13 and later).
/// `false` when the attribute is missing or the question cannot be asked
/// (no RDMA netlink). Asked once per process.
pub fn kernel_copies_on_fork() -> bool {
    *KERNEL_COF.get_or_init(|| query_copy_on_fork().unwrap_or(false))
}

fn query_copy_on_fork() -> std::result::Result<bool, Errno> {
    let mut sock = NlSocket::open()?;
    let mut cof = false;
    sock.request(
        rverbs_netlink::nldev_type(rverbs_netlink::cmd::SYS_GET),
        &[],
        |attrs| {
            if let Some(a) =
                rverbs_netlink::Attrs::new(attrs).get(rverbs_netlink::attr::SYS_COPY_ON_FORK)?
            {
                cof = a.u8() == Some(1);
            }
            Ok(())
        },
    )?;
    Ok(cof)
}

/// What protects registered memory across `fork()` for memory regions
/// registered from now on: [`ForkSafety::KernelCopiesOnFork`] if the kernel
/// reports it (see [`kernel_copies_on_fork`]), else
/// [`ForkSafety::MadviseDontfork`] if `madvise(MADV_DONTFORK)` works, else
/// [`ForkSafety::Unsafe`]. After [`enable_dontfork`] it is
/// [`ForkSafety::MadviseDontfork`].
pub fn fork_safety() -> ForkSafety {
    if FORCED.load(Ordering::Acquire) {
        return ForkSafety::MadviseDontfork;
    }
    detected()
}

fn detected() -> ForkSafety {
    *DETECTED.get_or_init(|| {
        if kernel_copies_on_fork() {
            ForkSafety::KernelCopiesOnFork
        } else if madvise_works() {
            ForkSafety::MadviseDontfork
        } else {
            ForkSafety::Unsafe
        }
    })
}

/// Marks every memory region registered from now on `MADV_DONTFORK`, even
/// on a kernel that copies pinned pages on fork (so that `fork()` does not
/// copy them for the child at all). Regions registered before keep what
/// they had. Fails with [`Error::Kernel`] if `madvise(MADV_DONTFORK)` does
/// not work here.
pub fn enable_dontfork() -> Result<()> {
    if !madvise_works() {
        return Err(Error::Kernel {
            op: "madvise(MADV_DONTFORK)",
            errno: Errno::ENOSYS,
        });
    }
    FORCED.store(true, Ordering::Release);
    Ok(())
}

/// The system's page size (asked once; 4096 if the answer is unusable).
pub(crate) fn page_size() -> usize {
    static PS: OnceLock<usize> = OnceLock::new();
    *PS.get_or_init(|| {
        let ps = sysconf(SysconfVar::PAGE_SIZE);
        ps.ok()
            .flatten()
            .and_then(|ps| usize::try_from(ps).ok())
            .filter(|p| p.is_power_of_two())
            .unwrap_or(4096)
    })
}

/// Whether `madvise(MADV_DONTFORK)` and `MADV_DOFORK` work on a private
/// anonymous page.
fn madvise_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let ps = page_size();
        // A fresh private anonymous page, unmapped when `page` drops.
        let Ok(page) = memmap2::MmapMut::map_anon(ps) else {
            return false;
        };
        let start = page.as_ptr() as usize;
        madvise_fork(start, start + ps, DontFork).is_ok()
            && madvise_fork(start, start + ps, DoFork).is_ok()
    })
}

/// The page-aligned range covering `addr..addr + len`, or `None` if it
/// would overflow.
fn page_range(addr: usize, len: usize, ps: usize) -> Option<(usize, usize)> {
    let start = addr & !(ps - 1);
    let end = addr.checked_add(len)?.checked_add(ps - 1)? & !(ps - 1);
    Some((start, end))
}

/// The page ranges currently marked `MADV_DONTFORK` for registrations.
///
/// `records` counts the registrations per range (a multiset: releasing a
/// range never recorded changes nothing). `cover` holds the marked pages as
/// disjoint segments, each with the number of registrations covering it;
/// every boundary between segments is a boundary of a live registration
/// (segments left equal by a release are merged), so there are at most
/// two segments per registration. Protecting or releasing a range costs
/// O((k + 1) log n) for n registrations and k segments inside the range
/// (k = 1 for registrations that do not overlap), and allocates only when
/// the maps grow.
#[derive(Debug)]
struct Tracker {
    records: BTreeMap<(usize, usize), usize>,
    /// Segment start -> (segment end, registrations covering it).
    cover: BTreeMap<usize, (usize, usize)>,
}

impl Tracker {
    const fn new() -> Tracker {
        Tracker {
            records: BTreeMap::new(),
            cover: BTreeMap::new(),
        }
    }

    /// Marks `start..end` (page-aligned, non-empty) and records it.
    fn protect(&mut self, start: usize, end: usize) -> std::result::Result<(), Errno> {
        madvise_fork(start, end, DontFork)?;
        *self.records.entry((start, end)).or_insert(0) += 1;
        self.split_at(start);
        self.split_at(end);
        let mut at = start;
        while at < end {
            match self.cover.range(at..end).next().map(|(&s, &v)| (s, v)) {
                Some((s, (e, n))) => {
                    if s > at {
                        self.cover.insert(at, (s, 1));
                    }
                    self.cover.insert(s, (e, n + 1));
                    at = e;
                }
                None => {
                    self.cover.insert(at, (end, 1));
                    at = end;
                }
            }
        }
        Ok(())
    }

    /// Forgets one record of `start..end` and unmarks the pages no other
    /// record covers. Unmarking errors (the range was unmapped already) are
    /// ignored: there is nothing left to unmark.
    fn release(&mut self, start: usize, end: usize) {
        match self.records.get_mut(&(start, end)) {
            None => return,
            Some(1) => {
                self.records.remove(&(start, end));
            }
            Some(n) => *n -= 1,
        }
        // Protecting the range split the segments at its ends, and only a
        // release of a range with the same boundary merges them again.
        self.split_at(start);
        self.split_at(end);
        // Contiguous segments that nothing covers any more, unmarked at once.
        let mut unmark: Option<(usize, usize)> = None;
        let mut at = start;
        while let Some((s, (e, n))) = self.cover.range(at..end).next().map(|(&s, &v)| (s, v)) {
            if n > 1 {
                self.cover.insert(s, (e, n - 1));
            } else {
                self.cover.remove(&s);
                unmark = match unmark {
                    Some((us, ue)) if ue == s => Some((us, e)),
                    Some((us, ue)) => {
                        let _ = madvise_fork(us, ue, DoFork);
                        Some((s, e))
                    }
                    None => Some((s, e)),
                };
            }
            at = e;
        }
        if let Some((us, ue)) = unmark {
            let _ = madvise_fork(us, ue, DoFork);
        }
        self.merge_at(start);
        self.merge_at(end);
    }

    /// Splits the segment that strictly contains `at`, if any, in two.
    fn split_at(&mut self, at: usize) {
        if let Some((&s, &(e, n))) = self.cover.range(..at).next_back() {
            if e > at {
                self.cover.insert(s, (at, n));
                self.cover.insert(at, (e, n));
            }
        }
    }

    /// Merges the segment starting at `at` into the one ending there when
    /// both are covered by as many registrations.
    fn merge_at(&mut self, at: usize) {
        let Some(&(e, n)) = self.cover.get(&at) else {
            return;
        };
        if let Some((&s, &(pe, pn))) = self.cover.range(..at).next_back() {
            if pe == at && pn == n {
                self.cover.remove(&at);
                self.cover.insert(s, (e, n));
            }
        }
    }
}

fn tracker() -> std::sync::MutexGuard<'static, Tracker> {
    // A panic while holding the lock leaves the records consistent (each
    // operation records only after its madvise succeeded).
    TRACKER.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `MADV_DONTFORK` mark of one registration, if it got one; dropping it
/// removes the mark from pages no other registration covers.
#[derive(Debug)]
pub(crate) struct Guard {
    range: Option<(usize, usize)>,
}

/// Applies the process's [`fork_safety`] to the memory `addr..addr + len`
/// about to be registered: marks its pages `MADV_DONTFORK` if that is the
/// policy. Call before registering; drop the guard after deregistering.
pub(crate) fn protect(addr: *const u8, len: usize) -> Result<Guard> {
    if fork_safety() != ForkSafety::MadviseDontfork {
        return Ok(Guard { range: None });
    }
    let Some((start, end)) = page_range(addr as usize, len, page_size()) else {
        return Err(Error::invalid_as(
            InvalidKind::OutOfRange,
            "memory region range overflows the address space",
        ));
    };
    tracker()
        .protect(start, end)
        .map_err(Error::kernel("madvise(MADV_DONTFORK)"))?;
    Ok(Guard {
        range: Some((start, end)),
    })
}

impl Guard {
    /// Keeps the pages marked for good: for a registration the kernel may
    /// still hold (deregistration failed), so its pages stay out of children.
    pub(crate) fn keep(&mut self) {
        self.range = None;
    }

    /// Removes the mark now (deregistration succeeded), while the memory is
    /// still mapped: before its owner may free or unmap it.
    pub(crate) fn release(&mut self) {
        if let Some((s, e)) = self.range.take() {
            tracker().release(s, e);
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anonymous private mapping of `pages` pages, unmapped on drop.
    struct Map {
        base: usize,
        _map: memmap2::MmapMut,
    }

    impl Map {
        fn new(pages: usize) -> Map {
            let map = memmap2::MmapMut::map_anon(pages * page_size()).expect("mmap");
            Map {
                base: map.as_ptr() as usize,
                _map: map,
            }
        }
        fn page(&self, i: usize) -> usize {
            self.base + i * page_size()
        }
    }

    /// Whether the page at `addr` is in a mapping with VM_DONTCOPY (`dc` in
    /// /proc/self/smaps VmFlags).
    fn dontcopy(addr: usize) -> bool {
        let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
        let mut inside = false;
        for line in smaps.lines() {
            let head = line.split_whitespace().next().unwrap_or("");
            if let Some((s, e)) = head.split_once('-') {
                if let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16))
                {
                    inside = s <= addr && addr < e;
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return flags.split_whitespace().any(|f| f == "dc");
                }
            }
        }
        panic!("address {addr:#x} not mapped");
    }

    #[test]
    fn page_range_rounds_out() {
        assert_eq!(page_range(4096, 1, 4096), Some((4096, 8192)));
        assert_eq!(page_range(4097, 4095, 4096), Some((4096, 8192)));
        assert_eq!(page_range(4097, 4096, 4096), Some((4096, 12288)));
        assert_eq!(page_range(8191, 2, 4096), Some((4096, 12288)));
        assert_eq!(page_range(usize::MAX - 10, 5, 4096), None);
    }

    /// Checks the segments against the records: both, as runs of equal
    /// coverage with adjacent equal runs joined, must be the same; and
    /// there are at most two segments per registration.
    fn check(t: &Tracker) {
        fn joined(runs: impl Iterator<Item = (usize, usize, usize)>) -> Vec<(usize, usize, usize)> {
            let mut out: Vec<(usize, usize, usize)> = Vec::new();
            for (s, e, n) in runs.filter(|r| r.2 > 0) {
                match out.last_mut() {
                    Some(last) if last.1 == s && last.2 == n => last.1 = e,
                    _ => out.push((s, e, n)),
                }
            }
            out
        }
        let mut prev_end = 0;
        for (&s, &(e, n)) in &t.cover {
            assert!(
                s < e && n > 0 && prev_end <= s,
                "segment {s:#x}..{e:#x} x{n}"
            );
            prev_end = e;
        }
        let mut delta: BTreeMap<usize, isize> = BTreeMap::new();
        for (&(s, e), &c) in &t.records {
            *delta.entry(s).or_default() += c as isize;
            *delta.entry(e).or_default() -= c as isize;
        }
        let mut level = 0isize;
        let mut sweep = Vec::new();
        let points: Vec<(usize, isize)> = delta.into_iter().collect();
        for w in points.windows(2) {
            level += w[0].1;
            sweep.push((w[0].0, w[1].0, level as usize));
        }
        let segments = t.cover.iter().map(|(&s, &(e, n))| (s, e, n));
        assert_eq!(joined(segments), joined(sweep.into_iter()));
        assert!(t.cover.len() <= 2 * t.records.values().sum::<usize>());
    }

    #[test]
    fn segments_follow_overlapping_records() {
        let m = Map::new(64);
        let p = |i| m.page(i);
        let mut t = Tracker::new();
        t.protect(p(0), p(10)).unwrap();
        t.protect(p(20), p(30)).unwrap();
        t.protect(p(25), p(40)).unwrap();
        t.protect(p(5), p(6)).unwrap();
        check(&t);
        assert_eq!(t.cover.len(), 6);
        t.release(p(5), p(6));
        check(&t);
        assert_eq!(t.cover.len(), 4, "{:?}", t.cover);
        t.release(p(20), p(30));
        t.release(p(25), p(40));
        check(&t);
        assert_eq!(t.cover.len(), 1);
        t.release(p(0), p(10));
        assert!(t.cover.is_empty() && t.records.is_empty());
    }

    #[test]
    fn four_thousand_registrations() {
        // 4096 one-page registrations, every 8th also covered by a
        // four-page one, released in a scrambled order.
        let n = 4096;
        let m = Map::new(n + 4);
        let mut t = Tracker::new();
        let mut ranges: Vec<(usize, usize)> = (0..n).map(|i| (m.page(i), m.page(i + 1))).collect();
        ranges.extend((0..n).step_by(8).map(|i| (m.page(i), m.page(i + 4))));
        for &(s, e) in &ranges {
            t.protect(s, e).unwrap();
        }
        check(&t);
        assert!(dontcopy(m.page(n - 1)) && !dontcopy(m.page(n)));
        // A multiplicative scramble of the indices (odd factor: a bijection).
        let len = ranges.len();
        for k in 0..len {
            let (s, e) = ranges[(k * 2_654_435_761) % len];
            t.release(s, e);
            if k % 512 == 0 {
                check(&t);
            }
        }
        assert!(t.cover.is_empty() && t.records.is_empty());
        for i in [0, 1, 8, n / 2, n - 1] {
            assert!(!dontcopy(m.page(i)), "page {i} still marked");
        }
    }

    #[test]
    fn overlapping_marks_are_reference_counted() {
        assert!(
            madvise_works(),
            "madvise(MADV_DONTFORK) should work on Linux"
        );
        let m = Map::new(4);
        let ps = page_size();
        let mut t = Tracker::new();
        // Registrations on pages 0..2 and 1..3 share page 1.
        t.protect(m.page(0), m.page(2)).unwrap();
        t.protect(m.page(1), m.page(3)).unwrap();
        assert!(dontcopy(m.page(0)) && dontcopy(m.page(1)) && dontcopy(m.page(2)));
        assert!(!dontcopy(m.page(3)));
        t.release(m.page(0), m.page(2));
        // Page 0 is free again; page 1 is still covered by the second one.
        assert!(!dontcopy(m.page(0)));
        assert!(dontcopy(m.page(1)) && dontcopy(m.page(2)));
        // Releasing something never recorded changes nothing.
        t.release(m.page(0), m.page(0) + ps);
        assert!(dontcopy(m.page(1)));
        t.release(m.page(1), m.page(3));
        for i in 0..4 {
            assert!(!dontcopy(m.page(i)), "page {i} still marked");
        }
        assert!(t.records.is_empty() && t.cover.is_empty());
    }

    #[test]
    fn duplicate_registrations_keep_the_mark_until_the_last() {
        let m = Map::new(1);
        let mut t = Tracker::new();
        t.protect(m.page(0), m.page(1)).unwrap();
        t.protect(m.page(0), m.page(1)).unwrap();
        t.release(m.page(0), m.page(1));
        assert!(dontcopy(m.page(0)));
        t.release(m.page(0), m.page(1));
        assert!(!dontcopy(m.page(0)));
    }

    #[test]
    fn marking_an_unmapped_range_fails_with_enomem() {
        // Page 0 is never mapped (vm.mmap_min_addr).
        let mut t = Tracker::new();
        assert_eq!(t.protect(0, page_size()), Err(Errno::ENOMEM));
        assert!(t.records.is_empty() && t.cover.is_empty());
    }
}
