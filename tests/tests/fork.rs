//! `fork()` while RDMA runs: registered memory must stay correct in the
//! parent, whatever the child does with its copy.
//!
//! One thread moves data in a loop (CPU writes a fresh pattern into a
//! registered source, clears the registered targets, RDMA WRITEs and SENDs
//! the source into them, verifies every byte). Another thread forks
//! repeatedly; each child writes over its view of the parent's registered
//! pages (or, where the crate marked them `MADV_DONTFORK`, checks that it
//! has no such pages) and over its own memory, verifies what it wrote, and
//! reports through its exit status. The parent checks its data, a
//! registered sentinel the child scribbled over, and its own memory.
//!
//! The fork thread waits, per child, until the data thread has completed
//! whole iterations after the fork, so every fork is followed by CPU writes
//! to registered pages and by RDMA: on a kernel without copy-on-fork for
//! pinned pages and without the marking, those writes would land in a copy
//! the device never sees and the verification would fail.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rverbs::fork::{enable_dontfork, fork_safety, kernel_copies_on_fork, ForkSafety};
use rverbs::{RecvWr, SendWr, WcOpcode};
use verbs_tests::{pattern, wait_ok, Pair};

// The few libc calls the test needs (std links libc; pid_t is i32 on Linux).
extern "C" {
    fn fork() -> i32;
    fn _exit(status: i32) -> !;
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
    fn mincore(addr: *mut u8, length: usize, vec: *mut u8) -> i32;
    fn getpagesize() -> i32;
}

const ENOMEM: i32 = 12;
const MR_LEN: usize = 64 * 1024;
const FORKS: usize = 24;

fn page_size() -> usize {
    // SAFETY: getpagesize has no preconditions.
    let ps = unsafe { getpagesize() };
    usize::try_from(ps).expect("page size")
}

/// The process's mappings from /proc/self/smaps, in address order: start,
/// end, and whether VM_DONTCOPY is set (`dc` in VmFlags, i.e. marked
/// MADV_DONTFORK).
fn mappings() -> Vec<(usize, usize, bool)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("reading smaps");
    let mut out = Vec::new();
    for line in smaps.lines() {
        let head = line.split_whitespace().next().unwrap_or("");
        if let Some((s, e)) = head.split_once('-') {
            if let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) {
                out.push((s, e, false));
                continue;
            }
        }
        if let (Some(flags), Some(last)) = (line.strip_prefix("VmFlags:"), out.last_mut()) {
            last.2 = flags.split_whitespace().any(|f| f == "dc");
        }
    }
    out
}

/// Whether `addr` is marked MADV_DONTFORK in `maps`; `None` if unmapped.
fn marked_in(maps: &[(usize, usize, bool)], addr: usize) -> Option<bool> {
    let i = maps.partition_point(|&(_, e, _)| e <= addr);
    maps.get(i).filter(|m| m.0 <= addr).map(|m| m.2)
}

/// Whether the mapping holding `addr` is marked MADV_DONTFORK.
fn dontcopy(addr: usize) -> bool {
    marked_in(&mappings(), addr).unwrap_or_else(|| panic!("address {addr:#x} is not mapped"))
}

/// What a child is told before the fork (plain data: the child must not
/// allocate, lock or unwind).
#[derive(Clone, Copy)]
struct ChildWork {
    /// The parent's registered ranges (start, len), page-aligned.
    regions: [(usize, usize); 4],
    /// Whether those ranges are marked MADV_DONTFORK (absent in the child).
    marked: bool,
    /// Memory of the child's own (a copy of the parent's scratch buffer).
    scratch: *mut u8,
    scratch_len: usize,
    /// mincore's output vector, big enough for any region.
    vec: *mut u8,
    /// The byte the child writes.
    byte: u8,
}

/// Runs in the child: async-signal-safe work only (raw memory access and
/// syscalls). Returns the exit status: 0, or which check failed.
///
/// # Safety
/// Only in a freshly forked child; `w` describes mappings of the parent.
unsafe fn child(w: &ChildWork) -> i32 {
    for (i, &(start, len)) in w.regions.iter().enumerate() {
        let code = 10 * (i as i32 + 1);
        if w.marked {
            // The marked pages were not inherited: mincore reports ENOMEM.
            // SAFETY: mincore only reads the page tables; `vec` has room.
            let rc = unsafe { mincore(start as *mut u8, len, w.vec) };
            let errno = std::io::Error::last_os_error().raw_os_error();
            if rc != -1 || errno != Some(ENOMEM) {
                return code + 1;
            }
        } else {
            // Our copy of the registered pages: write it and read it back.
            let p = start as *mut u8;
            for k in 0..len {
                // SAFETY: the child's private copy of a mapping of `len` bytes.
                unsafe { p.add(k).write_volatile(w.byte) };
            }
            for k in 0..len {
                // SAFETY: as above.
                if unsafe { p.add(k).read_volatile() } != w.byte {
                    return code + 2;
                }
            }
        }
    }
    // The child's own memory (mapped, writable, private).
    // SAFETY: `scratch` is mapped in the child, page-aligned region inside
    // a live Vec of the parent; `vec` has room for its pages.
    if unsafe { mincore(w.scratch, w.scratch_len, w.vec) } != 0 {
        return 3;
    }
    for k in 0..w.scratch_len {
        // SAFETY: the child's copy of the parent's scratch buffer.
        unsafe { w.scratch.add(k).write_volatile(w.byte ^ (k as u8)) };
    }
    for k in 0..w.scratch_len {
        // SAFETY: as above.
        if unsafe { w.scratch.add(k).read_volatile() } != w.byte ^ (k as u8) {
            return 4;
        }
    }
    0
}

/// One fork: runs [`child`] in the child, returns the child's pid.
fn spawn(w: &ChildWork) -> i32 {
    // SAFETY: the child runs only `child` (no allocation, locks or
    // unwinding) and leaves with _exit.
    let pid = unsafe { fork() };
    assert!(pid >= 0, "fork failed: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: we are the freshly forked child.
        let code = unsafe { child(w) };
        // SAFETY: leaving the child without running the parent's atexit
        // handlers or destructors.
        unsafe { _exit(code) };
    }
    pid
}

/// Waits for `pid` and returns its exit status (panics if it was killed).
fn reap(pid: i32) -> i32 {
    let mut status = 0;
    // SAFETY: `status` is a live i32.
    let rc = unsafe { waitpid(pid, &mut status, 0) };
    assert_eq!(rc, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert_eq!(status & 0x7f, 0, "child killed by signal {}", status & 0x7f);
    (status >> 8) & 0xff
}

/// Moves data in one thread and forks `FORKS` children in another; checks
/// everything. `expect_marked` is whether the MRs must be MADV_DONTFORK.
fn fork_while_rdma_runs(expect_marked: bool) {
    let mut p = Pair::new();
    let acc = verbs_tests::all_access();
    let mut src = p.pd.alloc_mr(MR_LEN, acc).unwrap();
    let mut dst = p.pd.alloc_mr(MR_LEN, acc).unwrap();
    let mut rdst = p.pd.alloc_mr(MR_LEN, acc).unwrap();
    let mut sentinel = p.pd.alloc_mr(MR_LEN, acc).unwrap();
    sentinel.fill(.., 0x77).unwrap();
    for mr in [&src, &dst, &rdst, &sentinel] {
        assert_eq!(
            dontcopy(mr.addr() as usize),
            expect_marked,
            "MADV_DONTFORK marking of an MR under {:?}",
            fork_safety()
        );
    }

    let ps = page_size();
    let mut scratch_vec = vec![0x11u8; 4 * ps];
    let off = scratch_vec.as_ptr().align_offset(ps);
    let scratch_len = 2 * ps;
    let mut mincore_vec = vec![0u8; MR_LEN / ps + 1];
    let work = ChildWork {
        regions: [&src, &dst, &rdst, &sentinel].map(|m| (m.addr() as usize, m.len())),
        marked: expect_marked,
        // SAFETY: `off + scratch_len` is within the Vec (4 pages, aligned
        // start at most one page in).
        scratch: unsafe { scratch_vec.as_mut_ptr().add(off) },
        scratch_len,
        vec: mincore_vec.as_mut_ptr(),
        byte: 0xc5,
    };

    let done = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let rm = dst.remote();
    std::thread::scope(|s| {
        let data = s.spawn(|| {
            let mut i = 0u32;
            while !stop.load(Ordering::Acquire) {
                let data = pattern(MR_LEN, 1000 + i);
                // CPU writes to registered pages (after a fork, on a kernel
                // with neither protection, these would break COW away from
                // the pages the device uses).
                src.write_at(0, &data).unwrap();
                dst.fill(.., 0).unwrap();
                rdst.fill(.., 0).unwrap();
                let r = [rdst.sge(..).unwrap()];
                p.b.post_recv(&[RecvWr::new(u64::from(i), &r)]).unwrap();
                let sg = [src.sge(..).unwrap()];
                p.a.post_send(&[
                    SendWr::rdma_write(u64::from(i) << 1, &sg, rm.addr, rm.rkey).signaled(),
                    SendWr::send((u64::from(i) << 1) | 1, &sg).signaled(),
                ])
                .unwrap();
                let w1 = wait_ok(&mut p.cq_a);
                let w2 = wait_ok(&mut p.cq_a);
                assert_eq!(
                    (w1.wr_id(), w1.opcode(), w2.wr_id(), w2.opcode()),
                    (
                        u64::from(i) << 1,
                        WcOpcode::RDMA_WRITE,
                        (u64::from(i) << 1) | 1,
                        WcOpcode::SEND
                    )
                );
                let wr = wait_ok(&mut p.cq_b);
                assert_eq!((wr.wr_id(), wr.byte_len()), (u64::from(i), MR_LEN as u32));
                assert!(
                    dst.to_vec() == data,
                    "RDMA WRITE target wrong in iteration {i}"
                );
                assert!(rdst.to_vec() == data, "SEND target wrong in iteration {i}");
                i += 1;
                done.store(i as usize, Ordering::Release);
            }
            i
        });

        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for n in 0..FORKS {
                let before = done.load(Ordering::Acquire);
                let pid = spawn(&work);
                // Let the parent write and move data after this fork, with
                // the child (possibly) still running.
                let t = Instant::now();
                while done.load(Ordering::Acquire) < before + 2 {
                    assert!(
                        !data.is_finished(),
                        "the data thread stopped (see its panic)"
                    );
                    assert!(t.elapsed() < verbs_tests::TIMEOUT, "data thread stuck");
                    std::thread::sleep(Duration::from_millis(1));
                }
                let code = reap(pid);
                assert_eq!(code, 0, "child {n} reported failed check {code}");
                // The child's writes stayed in the child.
                assert!(
                    sentinel.to_vec().iter().all(|&b| b == 0x77),
                    "child {n}'s writes reached the parent's registered memory"
                );
                // SAFETY: reading the parent's own buffer, which nothing else
                // writes.
                let mine = unsafe { std::slice::from_raw_parts(work.scratch, scratch_len) };
                assert!(
                    mine.iter().all(|&b| b == 0x11),
                    "child {n}'s writes reached the parent's memory"
                );
            }
        }));
        stop.store(true, Ordering::Release);
        let iterations = data.join().expect("data thread panicked");
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
        assert!(iterations as usize >= 2 * FORKS);
        eprintln!("{FORKS} forks during {iterations} RDMA iterations, marked: {expect_marked}");
    });
    drop(scratch_vec);
}

#[test]
fn kernel_reports_copy_on_fork_from_5_13() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut it = release
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .map(|x| x.parse::<u32>().unwrap_or(0));
    let version = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    assert_eq!(
        kernel_copies_on_fork(),
        version >= (5, 13),
        "kernel {release:?}: RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK reported from 5.13 on"
    );
}

#[test]
fn fork_during_rdma_keeps_parent_data_intact() {
    // Phase 1: whatever this kernel needs.
    let detected = fork_safety();
    let expected = if kernel_copies_on_fork() {
        ForkSafety::KernelCopiesOnFork
    } else {
        ForkSafety::MadviseDontfork
    };
    assert_eq!(detected, expected);
    fork_while_rdma_runs(detected == ForkSafety::MadviseDontfork);

    // Phase 2: MADV_DONTFORK forced; children no longer see the MRs.
    enable_dontfork().unwrap();
    assert_eq!(fork_safety(), ForkSafety::MadviseDontfork);
    fork_while_rdma_runs(true);

    // Phase 3: the marks follow registrations of caller buffers, rounded
    // to pages and counted per page.
    dontfork_marks_follow_registrations_of_caller_buffers();
}

fn dontfork_marks_follow_registrations_of_caller_buffers() {
    let ctx = verbs_tests::open_rxe();
    let pd = ctx.alloc_pd().unwrap();
    let ps = page_size();
    let mut v = vec![0u8; 6 * ps];
    let off = v.as_ptr().align_offset(ps);
    let base = v.as_ptr() as usize + off;
    let page = |i: usize| base + i * ps;
    let buf = &mut v[off..off + 4 * ps];
    let (first, rest) = buf.split_at_mut(ps + 100);
    // MR 1 covers page 0 and part of page 1; MR 2 the rest of page 1 and
    // page 2. Page 1 is shared; page 3 is not registered. Both are scoped
    // registrations of parts of one caller buffer; MR 1's scope ends first.
    pd.register_scoped(
        &mut rest[..2 * ps - 200],
        verbs_tests::all_access(),
        |_mr2| {
            pd.register_scoped(&mut first[50..], verbs_tests::all_access(), |_mr1| {
                assert!(dontcopy(page(0)) && dontcopy(page(1)) && dontcopy(page(2)));
                assert!(!dontcopy(page(3)));
            })
            .unwrap();
            assert!(!dontcopy(page(0)), "page 0 unmarked with its last MR");
            assert!(dontcopy(page(1)), "page 1 still registered by MR 2");
        },
    )
    .unwrap();
    for i in 0..4 {
        assert!(!dontcopy(page(i)), "page {i} still marked");
    }

    // 4096 registrations of heap buffers smaller than a page, so that
    // neighbours share pages (overlapping marks), deregistered in a
    // scrambled order: every page stays marked while any MR covers it and
    // none is marked after the last.
    let n = 4096;
    let mut mrs: Vec<Option<rverbs::Mr<Vec<u8>>>> = (0..n)
        .map(|_| {
            Some(
                pd.register(vec![0u8; 3000], verbs_tests::all_access())
                    .unwrap(),
            )
        })
        .collect();
    let addrs: Vec<usize> = mrs
        .iter()
        .map(|m| m.as_ref().unwrap().addr() as usize)
        .collect();
    let all_marked = |mrs: &[Option<rverbs::Mr<Vec<u8>>>]| {
        let maps = mappings();
        for (j, m) in mrs.iter().enumerate() {
            if m.is_some() {
                for a in [addrs[j], addrs[j] + 2999] {
                    assert_eq!(marked_in(&maps, a), Some(true), "MR {j} at {a:#x}");
                }
            }
        }
    };
    all_marked(&mrs);
    for k in 0..n {
        let i = (k * 2_654_435_761) % n;
        let mr = mrs[i].take().expect("each index once");
        drop(mr);
        if k % 1024 == 1023 {
            all_marked(&mrs);
        }
    }
    // The buffers went with their MRs; of their pages still mapped (the
    // allocator keeps most of its heap), none is marked any more.
    let maps = mappings();
    let still: Vec<bool> = addrs.iter().filter_map(|&a| marked_in(&maps, a)).collect();
    assert!(
        still.len() > n / 2,
        "only {} of the heap still mapped",
        still.len()
    );
    assert!(
        still.iter().all(|&m| !m),
        "pages still marked after the last MR"
    );
}
