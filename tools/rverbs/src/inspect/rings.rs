//! The rxe rings a process has mapped, read from outside: its
//! `/dev/infiniband/uverbs*` mappings in `/proc/PID/maps`, read with
//! `process_vm_readv` (read-only; nothing is written to the process), each
//! decoded as an rxe ring (`struct rxe_queue_buf` header, then elements),
//! classified as send queue, receive queue / SRQ or completion queue, and
//! tied to its QP, SRQ or CQ number where the kernel's resource dump
//! allows.
//!
//! Classification, per device and in mmap-offset order (the kernel hands
//! out rxe mmap offsets in creation order):
//! 1. a ring whose capacity equals the `cqe` of a CQ the process owns
//!    (rxe grants `cqe` = slots - 1) and whose elements fit a work
//!    completion is that CQ;
//! 2. a ring whose elements hold at least a `struct rxe_send_wqe` is a send
//!    queue; the process's QPs, in QP-number (creation) order, own the send
//!    queues in offset order when the counts agree;
//! 3. the ring mapped right after a send queue, with elements of a receive
//!    WQE, is that QP's receive queue (rxe creates a QP's send queue, then
//!    its receive queue), unless the kernel lists the QP on an SRQ;
//! 4. other receive-shaped rings are the process's SRQs (in SRQ-number
//!    order when the counts agree), or plain receive queues if it owns no
//!    SRQ;
//! 5. without kernel data, small rings are told apart by their contents
//!    (work completions vs receive WQEs).
//!
//! The reading is a snapshot of a live process: indices and elements may
//! move while they are read. Stop the process (SIGSTOP) for a consistent
//! picture.

mod classify;
mod entries;
mod names;
mod ring;

pub use classify::{classify, plausible_cqe, plausible_recv, plausible_send};
pub(crate) use entries::sge_text;
pub use entries::{cq_entry, entries, entries_limited, entry_text, recv_entry, send_entry};
pub use names::{wc_opcode_name, wc_status_name, wr_opcode_name};
pub use ring::{Header, Kind, Ring};

use std::io;

use super::guard::{self};

/// One `/dev/infiniband/uverbs*` mapping of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// The mmap offset on the uverbs file (bytes).
    pub offset: u64,
    /// The uverbs node, such as `uverbs0`.
    pub uverbs: String,
    /// The RDMA device behind it (sysfs `ibdev`), if known.
    pub dev: Option<String>,
}

impl Mapping {
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
    /// Whether the mapping is empty (never, for [`parse_maps`]'s).
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// Why a process could not be inspected.
#[derive(Debug)]
pub enum Refused {
    /// No such process.
    NoProcess(u32),
    /// The kernel refused access (needs ptrace rights on the process).
    Denied(u32, String),
    /// Another I/O error.
    Other(u32, io::Error),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::NoProcess(pid) => write!(f, "no process with pid {pid}"),
            Refused::Denied(pid, what) => write!(
                f,
                "not allowed to {what} of process {pid}: reading another process needs \
                 ptrace access to it (the same user and a permissive \
                 kernel.yama.ptrace_scope, or CAP_SYS_PTRACE)"
            ),
            Refused::Other(pid, e) => write!(f, "cannot inspect process {pid}: {e}"),
        }
    }
}

impl std::error::Error for Refused {}

fn refuse(pid: u32, what: &str, e: io::Error) -> Refused {
    match e.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => Refused::Denied(pid, what.into()),
        Some(libc::ESRCH | libc::ENOENT) => Refused::NoProcess(pid),
        _ => Refused::Other(pid, e),
    }
}

/// Parse the uverbs mappings out of the text of `/proc/PID/maps`.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(_perms), Some(off), Some(_dev), Some(_ino)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let Some(path) = it.next() else { continue };
        let Some(node) = path.strip_prefix("/dev/infiniband/") else {
            continue;
        };
        // uverbsN: the name also makes a sysfs path.
        let Some(n) = node.strip_prefix("uverbs") else {
            continue;
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(s, 16),
            u64::from_str_radix(e, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        if end <= start {
            continue;
        }
        out.push(Mapping {
            start,
            end,
            offset,
            uverbs: node.to_string(),
            dev: None,
        });
    }
    out
}

/// The uverbs mappings of process `pid`, each with its device name (from
/// the first [`guard::MAX_MAPS_BYTES`] of its memory map).
pub fn mappings(pid: u32) -> Result<Vec<Mapping>, Refused> {
    if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
        return Err(Refused::NoProcess(pid));
    }
    let (bytes, _) = guard::read_proc(&format!("/proc/{pid}/maps"), guard::MAX_MAPS_BYTES)
        .map_err(|e| refuse(pid, "read the memory map", e))?;
    // The lines of uverbs nodes are ASCII; other paths do not matter here.
    let mut maps = parse_maps(&String::from_utf8_lossy(&bytes));
    for m in &mut maps {
        m.dev = std::fs::read_to_string(format!("/sys/class/infiniband_verbs/{}/ibdev", m.uverbs))
            .ok()
            .map(|s| s.trim().to_string());
    }
    Ok(maps)
}

/// Read `len` bytes at `addr` of process `pid` with `process_vm_readv`.
pub fn read_mem(pid: u32, addr: u64, len: usize) -> Result<Vec<u8>, Refused> {
    if addr.checked_add(len as u64).is_none() {
        return Err(Refused::Other(
            pid,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{len} bytes at {addr:#x} run past the end of the address space"),
            ),
        ));
    }
    let mut buf = vec![0u8; len];
    let mut done = 0usize;
    while done < len {
        let local = libc::iovec {
            iov_base: buf[done..].as_mut_ptr().cast(),
            iov_len: len - done,
        };
        let remote = libc::iovec {
            // Cannot overflow: addr + len does not (checked above).
            iov_base: (addr + done as u64) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `local` describes the unread tail of `buf`, which is live
        // and writable for its length; the remote iovec is only an address
        // in the other process, which the kernel checks.
        let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(refuse(pid, "read the memory", e));
        }
        if n == 0 {
            return Err(Refused::Other(
                pid,
                io::Error::new(io::ErrorKind::UnexpectedEof, "short read of a mapping"),
            ));
        }
        done += n as usize;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests;
