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

use std::collections::{BTreeMap, HashSet};
use std::io;

use rverbs_abi::rxe::{
    DmaInfo, QueueBuf, RecvWqe, SendWqe, WrAtomic, WrRdma, WrUd, QUEUE_DATA_OFFSET,
};
use rverbs_abi::wr::{Sge, Wc};
use serde_json::{json, Map, Value};
use zerocopy::{FromBytes, IntoBytes};

use super::guard::{self, Budget};
use super::res::{qpn_of, Qpn, Snapshot};

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

/// The decoded ring header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// log2 of the element size.
    pub log2_elem_size: u32,
    /// Slots - 1 (indices are kept masked).
    pub index_mask: u32,
    /// Producer index.
    pub producer: u32,
    /// Consumer index.
    pub consumer: u32,
}

impl Header {
    /// Decode and check a header against the mapping length: the element
    /// size must be 2^4..2^16 bytes, the slot count a power of two that fits
    /// the mapping, and both indices inside the mask.
    pub fn parse(bytes: &[u8], map_len: u64) -> Result<Header, String> {
        let q = QueueBuf::read_from_prefix(bytes)
            .map_err(|_| "shorter than a ring header".to_string())?
            .0;
        let h = Header {
            log2_elem_size: q.log2_elem_size,
            index_mask: q.index_mask,
            producer: q.producer_index,
            consumer: q.consumer_index,
        };
        if !(4..=16).contains(&h.log2_elem_size) {
            return Err(format!(
                "element size 2^{} is implausible",
                h.log2_elem_size
            ));
        }
        let slots = u64::from(h.index_mask) + 1;
        if !slots.is_power_of_two() || slots < 2 {
            return Err(format!("index mask {:#x} is not 2^n - 1", h.index_mask));
        }
        // slots <= 2^32, elements <= 2^16 bytes: no overflow.
        let need = h.ring_bytes();
        if need > map_len {
            return Err(format!(
                "{slots} slots of {} bytes need {need} bytes, the mapping has {map_len}",
                h.elem_size()
            ));
        }
        if h.producer > h.index_mask || h.consumer > h.index_mask {
            return Err("an index is outside the mask".into());
        }
        Ok(h)
    }

    /// Bytes of the ring: header and every slot.
    pub fn ring_bytes(&self) -> u64 {
        let slots = u64::from(self.index_mask) + 1;
        QUEUE_DATA_OFFSET as u64 + (slots << self.log2_elem_size.min(16))
    }
    /// Element size in bytes.
    pub fn elem_size(&self) -> usize {
        1 << self.log2_elem_size
    }
    /// Slot count (0 for a mask of all ones, which only a mapping of
    /// 64 GiB or more could pass [`Header::parse`] with).
    pub fn slots(&self) -> u32 {
        self.index_mask.wrapping_add(1)
    }
    /// Capacity: at most slots - 1 elements are ever queued.
    pub fn capacity(&self) -> u32 {
        self.index_mask
    }
    /// Queued elements: producer - consumer.
    pub fn fill(&self) -> u32 {
        self.producer.wrapping_sub(self.consumer) & self.index_mask
    }
    /// The slots of the queued elements, oldest first.
    pub fn queued(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.fill()).map(|i| self.consumer.wrapping_add(i) & self.index_mask)
    }
}

/// What a ring is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A QP's send queue.
    Sq,
    /// A QP's receive queue.
    Rq,
    /// A shared receive queue.
    Srq,
    /// A receive queue or an SRQ (not told apart).
    RqOrSrq,
    /// A completion queue.
    Cq,
    /// Not an rxe ring, or not classified.
    Unknown,
}

impl Kind {
    /// The name used in the output.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Sq => "SQ",
            Kind::Rq => "RQ",
            Kind::Srq => "SRQ",
            Kind::RqOrSrq => "RQ/SRQ",
            Kind::Cq => "CQ",
            Kind::Unknown => "unknown",
        }
    }
    fn is_recv(self) -> bool {
        matches!(self, Kind::Rq | Kind::Srq | Kind::RqOrSrq)
    }
}

/// One mapped ring of the process.
#[derive(Debug, Clone)]
pub struct Ring {
    /// The mapping.
    pub map: Mapping,
    /// The header, or why the mapping is not an rxe ring.
    pub header: Result<Header, String>,
    /// The ring (header and every slot), when it was read.
    pub data: Option<Vec<u8>>,
    /// The classification.
    pub kind: Kind,
    /// The evidence for the classification, in words.
    pub basis: Vec<String>,
    /// The owning QP (SQ, RQ).
    pub qpn: Option<u32>,
    /// The CQ number (CQ).
    pub cqn: Option<u32>,
    /// The SRQ number (SRQ).
    pub srqn: Option<u32>,
}

impl Ring {
    /// Read the header of `map` in process `pid` and, if it is a ring
    /// that fits `budget` (its header and slots: one queue's share, and
    /// what the run has left), the ring; otherwise the header only, with a
    /// note in [`Ring::basis`]. A mapping that cannot be read (unmapped
    /// meanwhile: `EFAULT`) is kept, with the reason as its header error;
    /// a refusal or a vanished process is an error.
    pub fn read(pid: u32, map: Mapping, budget: &mut Budget) -> Result<Ring, Refused> {
        let mut ring = Ring {
            map,
            header: Err(String::new()),
            data: None,
            kind: Kind::Unknown,
            basis: Vec::new(),
            qpn: None,
            cqn: None,
            srqn: None,
        };
        let (start, len) = (ring.map.start, ring.map.len());
        let head_len = QUEUE_DATA_OFFSET.min(usize::try_from(len).unwrap_or(usize::MAX));
        if let Err(e) = budget.charge(head_len as u64) {
            ring.header = Err(format!("not read: {e}"));
            return Ok(ring);
        }
        let mut basis = None;
        let got = read_mem(pid, start, head_len).and_then(|head| {
            match Header::parse(&head, len) {
                // Indices and elements from one read of the whole ring.
                Ok(h) => {
                    // parse checked that this fits the mapping.
                    let need = h.ring_bytes();
                    let mut queue = 0;
                    match budget.charge_queue(&mut queue, need) {
                        Ok(()) => {
                            let n = usize::try_from(need).unwrap_or(usize::MAX);
                            let d = read_mem(pid, start, n)?;
                            Ok((Header::parse(&d, len), Some(d)))
                        }
                        Err(e) => {
                            basis =
                                Some(format!("ring of {need} bytes not read (header only): {e}"));
                            Ok((Ok(h), None))
                        }
                    }
                }
                h => Ok((h, None)),
            }
        });
        ring.basis.extend(basis);
        match got {
            Ok((header, data)) => {
                ring.header = header;
                ring.data = data;
            }
            Err(Refused::Other(_, e)) if e.raw_os_error() == Some(libc::EFAULT) => {
                ring.header = Err(format!("could not be read: {e}"));
            }
            Err(e) => return Err(e),
        }
        Ok(ring)
    }

    /// The element in `slot`, if the ring was read.
    pub fn elem(&self, slot: u32) -> Option<&[u8]> {
        let h = self.header.as_ref().ok()?;
        let d = self.data.as_ref()?;
        let es = h.elem_size();
        let start = (slot as usize)
            .checked_mul(es)?
            .checked_add(QUEUE_DATA_OFFSET)?;
        d.get(start..start.checked_add(es)?)
    }

    fn elems(&self) -> impl Iterator<Item = &[u8]> {
        let slots = self.header.as_ref().map_or(0, |h| h.slots());
        (0..slots).filter_map(move |s| self.elem(s))
    }
}

/// Whether `e` reads as a receive WQE of an element of its size: zero
/// reserved words, an SGE count that fits, and a length equal to the sum of
/// the SGE lengths.
pub fn plausible_recv(e: &[u8]) -> bool {
    let Ok((w, rest)) = RecvWqe::read_from_prefix(e) else {
        return false;
    };
    let room = rest.len() / size_of::<Sge>();
    if w.reserved != 0 || w.padding != 0 || w.dma.reserved != 0 || w.dma.num_sge as usize > room {
        return false;
    }
    let sum: u64 = sges(rest, w.dma.num_sge)
        .iter()
        .map(|s| u64::from(s.length))
        .sum();
    sum == u64::from(w.dma.length)
}

/// Whether `e` reads as a work completion: known status and opcode, no
/// vendor error on success, a 24-bit QP number, zero reserved byte.
pub fn plausible_cqe(e: &[u8]) -> bool {
    let Ok((c, _)) = Wc::read_from_prefix(e) else {
        return false;
    };
    let opcode_ok = c.opcode <= 9 || (128..=129).contains(&c.opcode);
    c.status <= 21
        && opcode_ok
        && (c.status != 0 || c.vendor_err == 0)
        && c.qp_num < (1 << 24)
        && c.src_qp < (1 << 24)
        && c.reserved == 0
        && c.sl < 16
}

/// Whether `e` reads as a send WQE.
pub fn plausible_send(e: &[u8]) -> bool {
    let Ok((w, rest)) = SendWqe::read_from_prefix(e) else {
        return false;
    };
    let inline = w.wr.send_flags & rverbs_abi::wr::send_flags::INLINE != 0;
    w.wr.reserved == 0
        && (w.wr.opcode <= 15 || (0x20..=0x22).contains(&w.wr.opcode))
        && w.wr.send_flags < 32
        && w.state <= 4
        && (inline || w.dma.num_sge as usize <= rest.len() / size_of::<Sge>())
}

/// The first `n` SGEs in `b` (as many as fit).
fn sges(b: &[u8], n: u32) -> Vec<Sge> {
    b.chunks_exact(size_of::<Sge>())
        .take(n as usize)
        .filter_map(|c| Sge::read_from_bytes(c).ok())
        .collect()
}

/// How the queued elements of a classified ring read: `(plausible, total)`.
fn content_check(r: &Ring) -> (usize, usize) {
    let Ok(h) = &r.header else { return (0, 0) };
    let check: fn(&[u8]) -> bool = match r.kind {
        Kind::Sq => plausible_send,
        Kind::Cq => plausible_cqe,
        k if k.is_recv() => plausible_recv,
        _ => return (0, 0),
    };
    let mut ok = 0;
    let mut n = 0;
    for slot in h.queued() {
        if let Some(e) = r.elem(slot) {
            n += 1;
            ok += usize::from(check(e));
        }
    }
    (ok, n)
}

/// Classify the rings of process `pid` (see the module docs), using the
/// kernel's resource dump `res` where it knows the process.
pub fn classify(rings: &mut [Ring], res: &Snapshot, pid: u32) {
    let send_min = size_of::<SendWqe>();
    let recv_min = size_of::<RecvWqe>();
    let cqe_min = size_of::<Wc>();
    // Devices in first-seen order, each with its rings in offset order.
    let mut by_dev: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in rings.iter_mut().enumerate() {
        if let Err(why) = &r.header {
            let why = format!("not an rxe ring: {why}");
            r.basis.push(why);
            continue;
        }
        let dev = r.map.dev.clone().unwrap_or_else(|| r.map.uverbs.clone());
        by_dev.entry(dev).or_default().push(i);
    }
    for (dev, mut idx) in by_dev {
        idx.sort_by_key(|&i| rings[i].map.offset);
        let mine = |o: &super::res::Owner| o.pid == Some(pid);
        let mut cqs: Vec<_> = res
            .cqs
            .iter()
            .filter(|c| c.dev == dev && mine(&c.owner))
            .collect();
        cqs.sort_by_key(|c| c.cqn);
        let mut qps: Vec<_> = res
            .qps
            .iter()
            .filter(|q| q.dev == dev && mine(&q.owner))
            .collect();
        qps.sort_by_key(|q| q.lqpn);
        let mut srqs: Vec<_> = res
            .srqs
            .iter()
            .filter(|s| s.dev == dev && mine(&s.owner))
            .collect();
        srqs.sort_by_key(|s| s.srqn);
        let known = !cqs.is_empty() || !qps.is_empty();

        // 1. CQs by capacity.
        let mut used_cq = HashSet::new();
        for &i in &idx {
            let h = *rings[i].header.as_ref().expect("filtered above");
            if h.elem_size() < cqe_min || h.elem_size() > 256 {
                continue;
            }
            if let Some((k, c)) = cqs
                .iter()
                .enumerate()
                .find(|(k, c)| !used_cq.contains(k) && c.cqe == Some(h.capacity()))
            {
                used_cq.insert(k);
                let r = &mut rings[i];
                r.kind = Kind::Cq;
                r.cqn = c.cqn;
                r.basis.push(format!(
                    "capacity {} = cqe of CQ {} (kernel resource dump)",
                    h.capacity(),
                    super::res::opt(c.cqn)
                ));
            }
        }

        // 2. Send queues by element size.
        let mut sqs = Vec::new();
        for &i in &idx {
            let h = *rings[i].header.as_ref().expect("filtered above");
            if rings[i].kind == Kind::Unknown && h.elem_size() >= send_min {
                rings[i].kind = Kind::Sq;
                rings[i].basis.push(format!(
                    "{}-byte elements hold a send WQE ({send_min} bytes)",
                    h.elem_size()
                ));
                sqs.push(i);
            }
        }
        if !qps.is_empty() && sqs.len() == qps.len() {
            for (&i, q) in sqs.iter().zip(&qps) {
                rings[i].qpn = Some(q.lqpn);
                rings[i].basis.push(format!(
                    "QP {} by creation order ({} QPs, {} send queues)",
                    Qpn(q.lqpn),
                    qps.len(),
                    sqs.len()
                ));
            }
        } else if !sqs.is_empty() {
            for &i in &sqs {
                rings[i].basis.push(format!(
                    "owner unknown: the kernel lists {} QPs of this process for {} send queues",
                    qps.len(),
                    sqs.len()
                ));
            }
        }

        // 3. A QP's receive queue follows its send queue.
        for (pos, &i) in idx.iter().enumerate() {
            if rings[i].kind != Kind::Sq {
                continue;
            }
            let qpn = rings[i].qpn;
            if qpn.is_some_and(|n| srqs.iter().any(|s| s.has_qp(n))) {
                rings[i].basis.push("its QP receives from an SRQ".into());
                continue;
            }
            let Some(&j) = idx.get(pos + 1) else { continue };
            let hj = *rings[j].header.as_ref().expect("filtered above");
            if rings[j].kind == Kind::Unknown
                && hj.elem_size() >= recv_min
                && hj.elem_size() < send_min
            {
                if !known && !looks_recv_not_cq(&rings[j]) {
                    continue;
                }
                rings[j].kind = Kind::Rq;
                rings[j].qpn = qpn;
                rings[j].basis.push(format!(
                    "{}-byte elements hold a receive WQE, mapped right after {}",
                    hj.elem_size(),
                    qpn.map_or("a send queue".into(), |n| format!(
                        "QP {}'s send queue",
                        Qpn(n)
                    ))
                ));
            }
        }

        // 4./5. Other rings.
        let unmatched_cqs = cqs.len() > used_cq.len();
        let mut recv = Vec::new();
        for &i in &idx {
            let h = *rings[i].header.as_ref().expect("filtered above");
            if rings[i].kind != Kind::Unknown || h.elem_size() < recv_min {
                continue;
            }
            let cq_sized = h.elem_size() >= cqe_min && h.elem_size() <= 256;
            if cq_sized && (unmatched_cqs || !known) && looks_cq(&rings[i]) {
                rings[i].kind = Kind::Cq;
                rings[i].basis.push(if known {
                    "contents read as work completions; a CQ of this process matched no ring by capacity".into()
                } else {
                    "contents read as work completions (no kernel data)".into()
                });
            } else if known || looks_recv_not_cq(&rings[i]) {
                recv.push(i);
            }
        }
        for (k, &i) in recv.iter().enumerate() {
            let r = &mut rings[i];
            if srqs.is_empty() {
                r.kind = Kind::Rq;
                r.basis.push(if known {
                    "receive-WQE-sized, not a CQ of this process, and it owns no SRQ".into()
                } else {
                    "contents read as receive WQEs (no kernel data)".into()
                });
            } else if recv.len() == srqs.len() {
                r.kind = Kind::Srq;
                r.srqn = srqs[k].srqn;
                r.basis.push(format!(
                    "SRQ {} by creation order ({} SRQs, {} receive rings)",
                    super::res::opt(srqs[k].srqn),
                    srqs.len(),
                    recv.len()
                ));
            } else {
                r.kind = Kind::RqOrSrq;
                r.basis
                    .push("receive-WQE-sized; the process owns SRQs and QPs".into());
            }
        }
        for &i in &idx {
            if rings[i].kind == Kind::Unknown && rings[i].basis.is_empty() {
                rings[i]
                    .basis
                    .push("matches no queue of this process".into());
            }
        }
    }
    // The contents of the queued elements, as a check of the above.
    for r in rings.iter_mut() {
        let (ok, n) = content_check(r);
        if n > 0 {
            r.basis.push(if ok == n {
                format!("all {n} queued elements decode plausibly")
            } else {
                format!("only {ok} of {n} queued elements decode plausibly")
            });
        }
    }
}

/// The non-zero elements read as receive WQEs more often than as work
/// completions.
fn looks_recv_not_cq(r: &Ring) -> bool {
    let (mut recv, mut cq) = (0, 0);
    for e in r.elems().filter(|e| e.iter().any(|&b| b != 0)) {
        recv += usize::from(plausible_recv(e));
        cq += usize::from(plausible_cqe(e));
    }
    recv > cq
}

fn looks_cq(r: &Ring) -> bool {
    let (mut recv, mut cq) = (0, 0);
    for e in r.elems().filter(|e| e.iter().any(|&b| b != 0)) {
        recv += usize::from(plausible_recv(e));
        cq += usize::from(plausible_cqe(e));
    }
    cq > recv
}

/// `IB_WR_*` names (the kernel's, which the rxe ring carries).
pub fn wr_opcode_name(op: u32) -> String {
    match op {
        0 => "RDMA_WRITE".into(),
        1 => "RDMA_WRITE_WITH_IMM".into(),
        2 => "SEND".into(),
        3 => "SEND_WITH_IMM".into(),
        4 => "RDMA_READ".into(),
        5 => "ATOMIC_CMP_AND_SWP".into(),
        6 => "ATOMIC_FETCH_AND_ADD".into(),
        7 => "LOCAL_INV".into(),
        8 => "BIND_MW".into(),
        9 => "SEND_WITH_INV".into(),
        10 => "TSO".into(),
        11 => "RDMA_READ_WITH_INV".into(),
        12 => "MASKED_ATOMIC_CMP_AND_SWP".into(),
        13 => "MASKED_ATOMIC_FETCH_AND_ADD".into(),
        14 => "FLUSH".into(),
        15 => "ATOMIC_WRITE".into(),
        0x20 => "REG_MR".into(),
        o => format!("opcode {o}"),
    }
}

fn send_flag_names(f: u32) -> Vec<String> {
    const NAMES: [&str; 5] = ["FENCE", "SIGNALED", "SOLICITED", "INLINE", "IP_CSUM"];
    let mut v: Vec<String> = NAMES
        .iter()
        .enumerate()
        .filter(|(b, _)| f & (1 << b) != 0)
        .map(|(_, n)| (*n).to_string())
        .collect();
    if f & !0x1f != 0 {
        v.push(format!("{:#x}", f & !0x1f));
    }
    v
}

fn wqe_state_name(s: u32) -> String {
    const NAMES: [&str; 5] = ["posted", "processing", "pending", "done", "error"];
    NAMES
        .get(s as usize)
        .map_or_else(|| format!("state {s}"), |n| (*n).into())
}

/// `IB_WC_*` status names.
pub fn wc_status_name(s: u32) -> String {
    const NAMES: [&str; 22] = [
        "SUCCESS",
        "LOC_LEN_ERR",
        "LOC_QP_OP_ERR",
        "LOC_EEC_OP_ERR",
        "LOC_PROT_ERR",
        "WR_FLUSH_ERR",
        "MW_BIND_ERR",
        "BAD_RESP_ERR",
        "LOC_ACCESS_ERR",
        "REM_INV_REQ_ERR",
        "REM_ACCESS_ERR",
        "REM_OP_ERR",
        "RETRY_EXC_ERR",
        "RNR_RETRY_EXC_ERR",
        "LOC_RDD_VIOL_ERR",
        "REM_INV_RD_REQ_ERR",
        "REM_ABORT_ERR",
        "INV_EECN_ERR",
        "INV_EEC_STATE_ERR",
        "FATAL_ERR",
        "RESP_TIMEOUT_ERR",
        "GENERAL_ERR",
    ];
    NAMES
        .get(s as usize)
        .map_or_else(|| format!("status {s}"), |n| (*n).into())
}

/// Work completion opcode names.
pub fn wc_opcode_name(o: u32) -> String {
    match o {
        0 => "SEND".into(),
        1 => "RDMA_WRITE".into(),
        2 => "RDMA_READ".into(),
        3 => "COMP_SWAP".into(),
        4 => "FETCH_ADD".into(),
        5 => "BIND_MW".into(),
        6 => "LOCAL_INV".into(),
        7 => "TSO".into(),
        8 => "FLUSH".into(),
        9 => "ATOMIC_WRITE".into(),
        128 => "RECV".into(),
        129 => "RECV_RDMA_WITH_IMM".into(),
        o => format!("opcode {o}"),
    }
}

fn sge_json(s: &Sge) -> Value {
    json!({"addr": s.addr, "length": s.length, "lkey": s.lkey})
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Decode a send WQE. `qp_type` (`IB_QPT_*`), when known, tells whether
/// the UD arm of the request is meaningful; otherwise it is shown when it
/// carries a Q_Key or an AH.
pub fn send_entry(slot: u32, e: &[u8], qp_type: Option<u8>) -> Value {
    let Ok((w, rest)) = SendWqe::read_from_prefix(e) else {
        return json!({"index": slot, "error": "element shorter than a send WQE"});
    };
    let mut m = Map::new();
    m.insert("index".into(), json!(slot));
    m.insert("wr_id".into(), json!(w.wr.wr_id));
    m.insert("opcode".into(), json!(wr_opcode_name(w.wr.opcode)));
    m.insert("opcode_raw".into(), json!(w.wr.opcode));
    m.insert("flags".into(), json!(send_flag_names(w.wr.send_flags)));
    m.insert("state".into(), json!(wqe_state_name(w.state)));
    m.insert("length".into(), json!(w.dma.length));
    let op = w.wr.opcode;
    let union = w.wr.wr.as_bytes();
    match op {
        0 | 1 | 4 | 11 | 14 | 15 => {
            if let Ok((r, _)) = WrRdma::read_from_prefix(union) {
                m.insert("remote_addr".into(), json!(r.remote_addr));
                m.insert("rkey".into(), json!(r.rkey));
            }
        }
        5 | 6 | 12 | 13 => {
            if let Ok((a, _)) = WrAtomic::read_from_prefix(union) {
                m.insert("remote_addr".into(), json!(a.remote_addr));
                m.insert("rkey".into(), json!(a.rkey));
                m.insert("compare_add".into(), json!(a.compare_add));
                m.insert("swap".into(), json!(a.swap));
            }
        }
        _ => {}
    }
    if matches!(op, 1 | 3) {
        m.insert("imm_data".into(), json!(u32::from_be(w.wr.ex)));
    }
    if matches!(op, 7 | 9 | 11) {
        m.insert("invalidate_rkey".into(), json!(w.wr.ex));
    }
    if matches!(op, 2 | 3 | 9) {
        // Sends on UD QPs carry the destination.
        if let Ok((u, _)) = WrUd::read_from_prefix(union) {
            let ud = match qp_type {
                Some(t) => t == UD_QP,
                None => u.remote_qkey != 0 || u.ah_num != 0,
            };
            if ud {
                m.insert(
                    "ud".into(),
                    json!({"remote_qpn": u.remote_qpn, "remote_qkey": u.remote_qkey, "ah_num": u.ah_num}),
                );
            }
        }
    }
    if w.state != 0 {
        m.insert("first_psn".into(), json!(w.first_psn));
        m.insert("last_psn".into(), json!(w.last_psn));
    }
    if w.wr.send_flags & rverbs_abi::wr::send_flags::INLINE != 0 {
        let n = (w.dma.length as usize).min(rest.len());
        m.insert("inline".into(), json!(hex(&rest[..n])));
    } else {
        m.insert("num_sge".into(), json!(w.dma.num_sge));
        let s: Vec<Value> = sges(rest, w.dma.num_sge).iter().map(sge_json).collect();
        m.insert("sges".into(), Value::Array(s));
    }
    Value::Object(m)
}

/// Decode a receive WQE.
pub fn recv_entry(slot: u32, e: &[u8]) -> Value {
    let Ok((w, rest)) = RecvWqe::read_from_prefix(e) else {
        return json!({"index": slot, "error": "element shorter than a receive WQE"});
    };
    let dma: DmaInfo = w.dma;
    let s: Vec<Value> = sges(rest, dma.num_sge).iter().map(sge_json).collect();
    json!({
        "index": slot,
        "wr_id": w.wr_id,
        "length": dma.length,
        "num_sge": dma.num_sge,
        "sges": s,
    })
}

/// Decode a work completion.
pub fn cq_entry(slot: u32, e: &[u8]) -> Value {
    let Ok((c, _)) = Wc::read_from_prefix(e) else {
        return json!({"index": slot, "error": "element shorter than a work completion"});
    };
    let mut m = Map::new();
    m.insert("index".into(), json!(slot));
    m.insert("wr_id".into(), json!(c.wr_id));
    m.insert("status".into(), json!(wc_status_name(c.status)));
    m.insert("status_raw".into(), json!(c.status));
    m.insert("opcode".into(), json!(wc_opcode_name(c.opcode)));
    m.insert("opcode_raw".into(), json!(c.opcode));
    m.insert("byte_len".into(), json!(c.byte_len));
    m.insert("qp_num".into(), json!(c.qp_num));
    m.insert("src_qp".into(), json!(c.src_qp));
    m.insert("wc_flags".into(), json!(c.wc_flags));
    if c.wc_flags & rverbs_abi::wr::wc_flags::WITH_IMM != 0 {
        m.insert("imm_data".into(), json!(u32::from_be(c.ex)));
    }
    if c.wc_flags & rverbs_abi::wr::wc_flags::WITH_INVALIDATE != 0 {
        m.insert("invalidated_rkey".into(), json!(c.ex));
    }
    if c.vendor_err != 0 {
        m.insert("vendor_err".into(), json!(c.vendor_err));
    }
    Value::Object(m)
}

/// `IB_QPT_UD`.
const UD_QP: u8 = 4;

/// The queued entries of a classified ring, decoded (oldest first);
/// `qp_type` is the type of the QP owning a send queue, if known.
pub fn entries(r: &Ring, qp_type: Option<u8>) -> Vec<Value> {
    entries_limited(r, qp_type, usize::MAX).0
}

/// [`entries`], at most `max` of them; also how many more there were.
pub fn entries_limited(r: &Ring, qp_type: Option<u8>, max: usize) -> (Vec<Value>, u64) {
    let Ok(h) = &r.header else {
        return (Vec::new(), 0);
    };
    let kind = r.kind;
    let decode = |slot: u32, e: &[u8]| match kind {
        Kind::Sq => send_entry(slot, e, qp_type),
        Kind::Cq => cq_entry(slot, e),
        _ => recv_entry(slot, e),
    };
    if !(kind == Kind::Sq || kind == Kind::Cq || kind.is_recv()) {
        return (Vec::new(), 0);
    }
    let mut out = Vec::new();
    let mut more = 0u64;
    for slot in h.queued() {
        let Some(e) = r.elem(slot) else { continue };
        if out.len() < max {
            out.push(decode(slot, e));
        } else {
            more += 1;
        }
    }
    (out, more)
}

/// One decoded entry as a line of text.
pub fn entry_text(kind: Kind, v: &Value) -> String {
    let g = |k: &str| v.get(k).cloned().unwrap_or(Value::Null);
    let num = |k: &str| g(k).as_u64();
    let s = |k: &str| g(k).as_str().map(str::to_owned).unwrap_or_default();
    let mut out = format!(
        "[{:>5}] wr_id {:#x}",
        num("index").unwrap_or(0),
        num("wr_id").unwrap_or(0)
    );
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        out.push_str(&format!(" ({e})"));
        return out;
    }
    match kind {
        Kind::Sq => {
            out.push_str(&format!(
                " {} len {}",
                s("opcode"),
                num("length").unwrap_or(0)
            ));
            let flags: Vec<String> = g("flags")
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            if !flags.is_empty() {
                out.push_str(&format!(" flags {}", flags.join("|")));
            }
            out.push_str(&format!(" state {}", s("state")));
            if let (Some(a), Some(b)) = (num("first_psn"), num("last_psn")) {
                out.push_str(&format!(" psn {a}-{b}"));
            }
            if let (Some(a), Some(k)) = (num("remote_addr"), num("rkey")) {
                out.push_str(&format!(" remote {a:#x} rkey {k:#x}"));
            }
            if let Some(i) = num("imm_data") {
                out.push_str(&format!(" imm {i:#x}"));
            }
            if let Some(u) = v.get("ud") {
                out.push_str(&format!(
                    " ud qpn {} qkey {:#x} ah {}",
                    qpn_of(&u["remote_qpn"]),
                    u["remote_qkey"].as_u64().unwrap_or(0),
                    u["ah_num"]
                ));
            }
            if let Some(i) = v.get("inline").and_then(Value::as_str) {
                out.push_str(&format!(" inline {i}"));
            } else {
                out.push_str(&format!(" sge [{}]", sge_text(&g("sges"))));
            }
        }
        Kind::Cq => {
            out.push_str(&format!(
                " {} {} len {} qp {}",
                s("status"),
                s("opcode"),
                num("byte_len").unwrap_or(0),
                qpn_of(&g("qp_num"))
            ));
            if let Some(i) = num("imm_data") {
                out.push_str(&format!(" imm {i:#x}"));
            }
        }
        _ => {
            out.push_str(&format!(
                " len {} sge [{}]",
                num("length").unwrap_or(0),
                sge_text(&g("sges"))
            ));
        }
    }
    out
}

/// A decoded scatter list (`[{addr, length, lkey}...]`) as text, the same
/// for rxe rings and mlx5 queues.
pub(crate) fn sge_text(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    format!(
                        "{:#x}+{} lkey {:#x}",
                        s["addr"].as_u64().unwrap_or(0),
                        s["length"].as_u64().unwrap_or(0),
                        s["lkey"].as_u64().unwrap_or(0)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::res::{CqRes, Owner, QpRes, SrqRes};
    use super::*;

    fn header(log2: u32, mask: u32, prod: u32, cons: u32) -> Vec<u8> {
        let mut q = QueueBuf::read_from_bytes(&[0u8; QUEUE_DATA_OFFSET][..]).unwrap();
        q.log2_elem_size = log2;
        q.index_mask = mask;
        q.producer_index = prod;
        q.consumer_index = cons;
        q.as_bytes().to_vec()
    }

    fn ring(offset: u64, log2: u32, mask: u32, prod: u32, cons: u32) -> Ring {
        let mut data = header(log2, mask, prod, cons);
        data.resize(QUEUE_DATA_OFFSET + ((mask as usize + 1) << log2), 0);
        let len = data.len().next_multiple_of(4096) as u64;
        data.resize(len as usize, 0);
        let map = Mapping {
            start: 0x7000_0000 + offset,
            end: 0x7000_0000 + offset + len,
            offset,
            uverbs: "uverbs0".into(),
            dev: Some("rxe0".into()),
        };
        Ring {
            header: Header::parse(&data, len),
            data: Some(data),
            map,
            kind: Kind::Unknown,
            basis: Vec::new(),
            qpn: None,
            cqn: None,
            srqn: None,
        }
    }

    fn put(r: &mut Ring, slot: u32, bytes: &[u8]) {
        let es = r.header.as_ref().unwrap().elem_size();
        let off = QUEUE_DATA_OFFSET + slot as usize * es;
        r.data.as_mut().unwrap()[off..off + bytes.len()].copy_from_slice(bytes);
    }

    fn owner(pid: u32) -> Owner {
        Owner {
            pid: Some(pid),
            comm: None,
            kernel: false,
        }
    }

    #[test]
    fn maps_lines() {
        let text = "\
7fe42bc7c000-7fe42bc85000 rw-s 0002e000 00:05 101                        /dev/infiniband/uverbs0
7fe42bc85000-7fe42bc96000 rw-s 0001c000 00:05 101                        /dev/infiniband/uverbs1
55d0c0a00000-55d0c0a21000 rw-p 00000000 00:00 0                          [heap]
7fe42c06e000-7fe42c06f000 rw-s 0002d000 00:05 101                        /dev/infiniband/rdma_cm
garbage line
7fe4-7fe3 rw-s 0 00:05 1 /dev/infiniband/uverbs0
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[0].start, m[0].end, m[0].offset, m[0].uverbs.as_str()),
            (0x7fe42bc7c000, 0x7fe42bc85000, 0x2e000, "uverbs0")
        );
        assert_eq!(m[1].uverbs, "uverbs1");
        assert_eq!(m[0].len(), 0x9000);
    }

    #[test]
    fn headers() {
        let h = Header::parse(&header(6, 511, 10, 500), 0x9000).unwrap();
        assert_eq!(
            (h.elem_size(), h.slots(), h.capacity(), h.fill()),
            (64, 512, 511, 22)
        );
        assert_eq!(h.queued().take(3).collect::<Vec<_>>(), vec![500, 501, 502]);
        assert_eq!(h.queued().last(), Some(9));
        // Does not fit the mapping, bad mask, bad element size, bad index.
        assert!(Header::parse(&header(6, 511, 0, 0), 0x8000).is_err());
        assert!(Header::parse(&header(6, 500, 0, 0), 0x9000).is_err());
        assert!(Header::parse(&header(2, 1, 0, 0), 0x9000).is_err());
        assert!(Header::parse(&header(30, 1, 0, 0), 0x9000).is_err());
        assert!(Header::parse(&header(6, 511, 512, 0), 0x9000).is_err());
        assert!(Header::parse(&[0; 10], 0x9000).is_err());
        assert!(Header::parse(&header(6, 0, 0, 0), 0x9000).is_err());
    }

    fn recv_wqe(wr_id: u64, len: u32) -> Vec<u8> {
        let mut w = RecvWqe {
            wr_id,
            ..Default::default()
        };
        w.dma.length = len;
        w.dma.resid = len;
        w.dma.num_sge = 1;
        let mut b = w.as_bytes().to_vec();
        b.extend_from_slice(
            Sge {
                addr: 0x7f00_1234_5000,
                length: len,
                lkey: 0x365,
            }
            .as_bytes(),
        );
        b
    }

    fn cqe(wr_id: u64, qpn: u32, opcode: u32) -> Vec<u8> {
        Wc {
            wr_id,
            opcode,
            byte_len: 4096,
            qp_num: qpn,
            port_num: 1,
            ..Default::default()
        }
        .as_bytes()
        .to_vec()
    }

    fn send_wqe(wr_id: u64, opcode: u32, flags: u32) -> Vec<u8> {
        let mut w = SendWqe::read_from_bytes(&[0u8; size_of::<SendWqe>()][..]).unwrap();
        w.wr.wr_id = wr_id;
        w.wr.opcode = opcode;
        w.wr.send_flags = flags;
        w.dma.length = 4096;
        w.dma.resid = 4096;
        w.dma.num_sge = 1;
        w.wr.rdma().remote_addr = 0xdead_0000;
        w.wr.rdma().rkey = 0x77;
        let mut b = w.as_bytes().to_vec();
        b.extend_from_slice(
            Sge {
                addr: 0x1000,
                length: 4096,
                lkey: 5,
            }
            .as_bytes(),
        );
        b
    }

    fn snapshot_for(pid: u32) -> Snapshot {
        Snapshot {
            qps: vec![QpRes {
                dev: "rxe0".into(),
                lqpn: 18,
                qp_type: Some(2),
                state: Some(3),
                owner: owner(pid),
                ..Default::default()
            }],
            cqs: vec![CqRes {
                dev: "rxe0".into(),
                cqn: Some(2),
                cqe: Some(511),
                owner: owner(pid),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// The rings of a paused `ibv_rc_pingpong` client: a CQ (512 x 128),
    /// the SQ (2 x 512) and the RQ (512 x 64), in creation order.
    fn pingpong_rings() -> Vec<Ring> {
        let mut cq = ring(0x1c000, 7, 511, 3, 1);
        put(&mut cq, 1, &cqe(1, 18, 128));
        put(&mut cq, 2, &cqe(2, 18, 0));
        let mut sq = ring(0x2d000, 9, 1, 1, 0);
        put(&mut sq, 0, &send_wqe(2, 2, 2));
        let mut rq = ring(0x2e000, 6, 511, 499, 0);
        for s in 0..499 {
            put(&mut rq, s, &recv_wqe(1, 4096));
        }
        // Listed out of order, as /proc may.
        vec![rq, cq, sq]
    }

    #[test]
    fn classify_with_kernel_data() {
        let mut rings = pingpong_rings();
        classify(&mut rings, &snapshot_for(150), 150);
        let got: Vec<_> = rings.iter().map(|r| (r.kind, r.qpn, r.cqn)).collect();
        assert_eq!(
            got,
            vec![
                (Kind::Rq, Some(18), None),
                (Kind::Cq, None, Some(2)),
                (Kind::Sq, Some(18), None),
            ],
            "{:#?}",
            rings.iter().map(|r| &r.basis).collect::<Vec<_>>()
        );
        assert!(rings[0]
            .basis
            .iter()
            .any(|b| b == "all 499 queued elements decode plausibly"));
        // Another pid's resources say nothing about these rings: contents
        // decide the small ones.
        let mut rings = pingpong_rings();
        classify(&mut rings, &snapshot_for(7), 150);
        let kinds: Vec<_> = rings.iter().map(|r| r.kind).collect();
        assert_eq!(kinds, vec![Kind::Rq, Kind::Cq, Kind::Sq]);
        assert_eq!(rings[2].qpn, None);
    }

    #[test]
    fn classify_srq_and_unknowns() {
        // An SRQ (64-byte elements) before two QPs that use it.
        let mut snap = snapshot_for(9);
        snap.qps.push(QpRes {
            lqpn: 19,
            ..snap.qps[0].clone()
        });
        snap.srqs.push(SrqRes {
            dev: "rxe0".into(),
            srqn: Some(1),
            qpns: vec![(18, 19)],
            owner: owner(9),
            ..Default::default()
        });
        let mut rings = vec![
            ring(0x1c000, 7, 511, 0, 0),
            ring(0x2d000, 6, 1023, 5, 0),
            ring(0x40000, 9, 15, 0, 0),
            ring(0x42000, 9, 15, 0, 0),
            // Right after QP 19's SQ, but QP 19 is on the SRQ.
            ring(0x44000, 6, 63, 0, 0),
        ];
        for s in 0..5 {
            put(&mut rings[1], s, &recv_wqe(s.into(), 100));
        }
        // Not a ring at all.
        let mut junk = ring(0x50000, 6, 63, 0, 0);
        junk.data.as_mut().unwrap()[..4].copy_from_slice(&40u32.to_ne_bytes());
        junk.header = Header::parse(junk.data.as_ref().unwrap(), junk.map.len());
        rings.push(junk);
        classify(&mut rings, &snap, 9);
        let got: Vec<_> = rings.iter().map(|r| (r.kind, r.qpn, r.srqn)).collect();
        assert_eq!(
            got,
            vec![
                (Kind::Cq, None, None),
                (Kind::RqOrSrq, None, None),
                (Kind::Sq, Some(18), None),
                (Kind::Sq, Some(19), None),
                (Kind::RqOrSrq, None, None),
                (Kind::Unknown, None, None),
            ]
        );
        assert!(rings[5].basis[0].starts_with("not an rxe ring"));
    }

    #[test]
    fn decode_entries() {
        let mut rings = pingpong_rings();
        classify(&mut rings, &snapshot_for(150), 150);
        let sq = entries(&rings[2], Some(2));
        assert_eq!(sq.len(), 1);
        assert_eq!(sq[0]["opcode"], "SEND");
        assert_eq!(sq[0]["flags"], json!(["SIGNALED"]));
        assert_eq!(sq[0]["sges"][0]["length"], 4096);
        assert_eq!(sq[0].get("remote_addr"), None);
        let cq = entries(&rings[1], None);
        assert_eq!(cq.len(), 2);
        assert_eq!(
            (&cq[0]["opcode"], &cq[0]["status"]),
            (&json!("RECV"), &json!("SUCCESS"))
        );
        assert_eq!(cq[1]["wr_id"], 2);
        let rq = entries(&rings[0], None);
        assert_eq!(rq.len(), 499);
        assert_eq!(rq[0]["sges"][0]["lkey"], 0x365);
        let t = entry_text(Kind::Sq, &sq[0]);
        assert!(
            t.contains("SEND len 4096 flags SIGNALED state posted sge [0x1000+4096 lkey 0x5]"),
            "{t}"
        );
        // An RDMA write shows its remote end; inline data its bytes.
        let w = send_entry(3, &send_wqe(9, 0, 8 | 2), None);
        assert_eq!(
            (w["remote_addr"].as_u64(), w["rkey"].as_u64()),
            (Some(0xdead_0000), Some(0x77))
        );
        assert_eq!(w["flags"], json!(["SIGNALED", "INLINE"]));
        assert!(w["inline"]
            .as_str()
            .unwrap()
            .starts_with("0010000000000000"));
        // Short elements are reported, not a panic.
        assert!(send_entry(0, &[0; 8], None).get("error").is_some());
        assert!(recv_entry(0, &[0; 8]).get("error").is_some());
        assert!(cq_entry(0, &[0; 8]).get("error").is_some());
    }

    #[test]
    fn plausibility() {
        assert!(plausible_recv(&{
            let mut b = recv_wqe(1, 100);
            b.resize(64, 0);
            b
        }));
        assert!(!plausible_recv(&cqe(1, 18, 128)));
        assert!(plausible_cqe(&cqe(1, 18, 128)));
        assert!(!plausible_cqe(&recv_wqe(1, 4096)));
        assert!(plausible_send(&send_wqe(1, 2, 2)));
        assert!(!plausible_send(&send_wqe(1, 99, 2)));
    }

    #[test]
    fn a_ring_is_read_within_the_budget_and_no_further() {
        // A ring of 1024 slots of 64 bytes in this very process, inside a
        // "mapping" four times as long.
        let mut mem = header(6, 1023, 3, 1);
        let ring_len = mem.len() + (1024 << 6);
        mem.resize(ring_len * 4, 0);
        let start = mem.as_ptr() as u64;
        let map = Mapping {
            start,
            end: start + mem.len() as u64,
            offset: 0,
            uverbs: "uverbs0".into(),
            dev: None,
        };
        let pid = std::process::id();
        let mut b = Budget::default();
        let r = Ring::read(pid, map.clone(), &mut b).unwrap();
        // The ring, not the whole mapping.
        assert_eq!(r.data.as_ref().map(Vec::len), Some(ring_len));
        assert_eq!(r.header.as_ref().unwrap().fill(), 2);
        assert_eq!(b.used(), (QUEUE_DATA_OFFSET + ring_len) as u64);
        // Over a queue's share: the header only, and why.
        let mut b = Budget::new(4096, 1 << 20);
        let r = Ring::read(pid, map.clone(), &mut b).unwrap();
        assert!(r.data.is_none() && r.header.is_ok());
        assert!(
            r.basis[0].contains("not read (header only)")
                && r.basis[0].contains("--max-queue-bytes 4096"),
            "{:?}",
            r.basis
        );
        // The run's budget spent: not even the header.
        let mut b = Budget::new(1 << 20, 100);
        let r = Ring::read(pid, map, &mut b).unwrap();
        assert!(r.header.unwrap_err().contains("--max-total-bytes 100"));
        drop(mem);
    }

    #[test]
    fn only_uverbs_nodes_by_number() {
        let text = "\
7f00-7f01 rw-s 0 00:05 1 /dev/infiniband/uverbs0
7f01-7f02 rw-s 0 00:05 1 /dev/infiniband/uverbs12
7f02-7f03 rw-s 0 00:05 1 /dev/infiniband/uverbs
7f03-7f04 rw-s 0 00:05 1 /dev/infiniband/uverbs0x
7f04-7f05 rw-s 0 00:05 1 /dev/infiniband/rdma_cm
";
        let m: Vec<String> = parse_maps(text).into_iter().map(|m| m.uverbs).collect();
        assert_eq!(m, ["uverbs0", "uverbs12"]);
    }
}
