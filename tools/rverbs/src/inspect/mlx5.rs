//! The mlx5 queues of a process on our mlx5 provider, read from outside.
//!
//! mlx5 queues are memory the process allocated and gave the device; the
//! kernel describes them nowhere a tool can read. Our provider lists them
//! in its queue directory (`rverbs_abi::mlx5::qdir`): a static exported
//! as `RVERBS_MLX5_QUEUE_DIR_V<layout>_<crate version>`. This module
//! finds that symbol in the ELF symbol tables (`.symtab` and `.dynsym`,
//! read in bounded pieces: [`elf`]) of the program (`/proc/PID/exe`) and
//! of every file it has mapped (each opened only as
//! [`guard::open_mapped`] allows), adds the load bias the mappings in
//! `/proc/PID/maps` give (zero for a fixed-address executable), reads the
//! directory and every listed queue with `process_vm_readv` within a
//! [`Budget`], checks all of it, and decodes it ([`decode`]), one queue
//! at a time: a queue's bytes are dropped once it is decoded, and a ring
//! that several slots name is read once.
//!
//! A process without the symbol (on rdma-core's libmlx5, or a stripped
//! binary) cannot be inspected this way: [`no_directory_message`] says so.
//!
//! Like the rxe rings, this is a snapshot of a live process: stop it
//! (SIGSTOP) for a consistent picture. A slot being rewritten while it is
//! read (its sequence counter odd or changed) is read again, a few times.

pub mod decode;
pub mod elf;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;

use rverbs_abi::mlx5::qdir::{self, kind, DirHeader, DirSlot};
use serde_json::{json, Value};
use zerocopy::FromBytes;

use super::guard::{self, Budget, FileId, NotOpened, Untrusted, ENTRY_COST, QUEUE_COST};
use super::res::qpn_of;
use super::rings::{read_mem, sge_text, Refused};
use decode::{check_slot, Decoded, Image};
pub use elf::ElfInfo;

/// Largest directory read (header and slots).
const MAX_DIR_BYTES: u64 = 16 << 20;
/// Reads of a directory until every slot reads the same twice.
const SLOT_ATTEMPTS: usize = 5;
/// Most directories taken from one process.
const MAX_DIRS: usize = 64;
/// Files named in the note of those not opened.
const MAX_REFUSED_NAMED: usize = 16;
/// Regions at least this long that several slots name are read once.
const DEDUP_BYTES: u64 = 4096;

/// Another process's memory (a trait so tests can supply bytes).
pub trait Memory {
    /// `len` bytes at `addr`, or why not.
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, String>;
}

/// A live process, read with `process_vm_readv`.
#[derive(Debug, Clone, Copy)]
pub struct Process(pub u32);

impl Memory for Process {
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, String> {
        read_mem(self.0, addr, len).map_err(|e| e.to_string())
    }
}

/// One line of `/proc/PID/maps` backed by a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMap {
    /// First address.
    pub start: u64,
    /// One past the last.
    pub end: u64,
    /// Offset in the file.
    pub offset: u64,
    /// Device major and minor.
    pub dev: (u32, u32),
    /// Inode.
    pub inode: u64,
    /// The path as the kernel shows it (the process chose it; the kernel
    /// shows a newline in it as `\012`).
    pub path: Untrusted,
}

/// The next field of a line of `/proc/PID/maps` (fields are ASCII,
/// separated by spaces), and what follows it.
fn field(rest: &[u8]) -> Option<(&str, &[u8])> {
    let start = rest.iter().position(|&b| b != b' ')?;
    let rest = &rest[start..];
    let end = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
    Some((std::str::from_utf8(&rest[..end]).ok()?, &rest[end..]))
}

/// The file-backed mappings in `/proc/PID/maps` (its bytes: a path is
/// whatever the process named a file, after the spaces that pad it).
pub fn parse_file_maps(text: &[u8]) -> Vec<FileMap> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let fields = (|| {
            let (range, rest) = field(line)?;
            let (_perms, rest) = field(rest)?;
            let (off, rest) = field(rest)?;
            let (dev, rest) = field(rest)?;
            let (ino, rest) = field(rest)?;
            let at = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
            Some((range, off, dev, ino, &rest[at..]))
        })();
        let Some((range, off, dev, ino, path)) = fields else {
            continue;
        };
        let Ok(inode) = ino.parse::<u64>() else {
            continue;
        };
        if inode == 0 || !path.starts_with(b"/") {
            continue;
        }
        let (Some((s, e)), Some((ma, mi))) = (range.split_once('-'), dev.split_once(':')) else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset), Ok(ma), Ok(mi)) = (
            u64::from_str_radix(s, 16),
            u64::from_str_radix(e, 16),
            u64::from_str_radix(off, 16),
            u32::from_str_radix(ma, 16),
            u32::from_str_radix(mi, 16),
        ) else {
            continue;
        };
        if end > start {
            out.push(FileMap {
                start,
                end,
                offset,
                dev: (ma, mi),
                inode,
                path: Untrusted::new(path),
            });
        }
    }
    out
}

/// The directory symbols of an ELF image in memory (from `.symtab`, and
/// `.dynsym`; see [`elf::read_info`]).
pub fn elf_info(data: &[u8]) -> Result<ElfInfo, String> {
    elf::read_info(data)?.ok_or_else(|| "not a 64-bit ELF file".into())
}

/// The load bias of a relocatable file: where a mapping of it shows one
/// of its loadable segments, the mapped address minus the segment's.
pub fn load_bias(info: &ElfInfo, maps: &[&FileMap]) -> Option<u64> {
    if !info.relocatable {
        return Some(0);
    }
    for m in maps {
        for &(vaddr, off, _) in &info.loads {
            let in_map = off >= m.offset && off - m.offset < m.end.saturating_sub(m.start);
            if in_map {
                // The file byte `off` is at `start + (off - offset)`.
                let at = m.start.checked_add(off - m.offset)?;
                return Some(at.wrapping_sub(vaddr));
            }
        }
    }
    None
}

/// A directory found in the process.
#[derive(Debug, Clone)]
pub struct Dir {
    /// The symbol (its name in the file).
    pub symbol: Untrusted,
    /// The file holding it (its path in the memory map).
    pub file: Untrusted,
    /// Its address in the process.
    pub addr: u64,
    /// The symbol's size (0: unknown).
    pub size: u64,
    /// The header, once read and checked.
    pub header: Option<DirHeader>,
    /// Why it could not be used.
    pub error: Option<String>,
    /// What of it was not read (the budget).
    pub notes: Vec<String>,
}

/// Finds the directory symbols of process `pid`: its program and every
/// mapped file, each ELF file once, each opened only as
/// [`guard::open_mapped`] allows (a regular file, the very one mapped).
/// Returns the directories and notes (files refused, tables not read).
pub fn locate(pid: u32) -> Result<(Vec<Dir>, Vec<String>), Refused> {
    let (text, cut) = guard::read_proc(&format!("/proc/{pid}/maps"), guard::MAX_MAPS_BYTES)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => Refused::Denied(pid, "read the memory map".into()),
            Some(libc::ENOENT | libc::ESRCH) => Refused::NoProcess(pid),
            _ => Refused::Other(pid, e),
        })?;
    let maps = parse_file_maps(&text);
    drop(text);
    let mut notes = Vec::new();
    if cut {
        notes.push(format!(
            "the memory map is longer than {} MiB: files mapped past that were not searched",
            guard::MAX_MAPS_BYTES >> 20
        ));
    }
    // stat (not open) of the program, to know it among the files.
    let exe = std::fs::metadata(format!("/proc/{pid}/exe"))
        .ok()
        .map(|md| FileId {
            dev: (libc::major(md.dev()), libc::minor(md.dev())),
            inode: md.ino(),
        });
    // Each file once, by device and inode.
    let mut files: BTreeMap<FileId, Vec<&FileMap>> = BTreeMap::new();
    for m in &maps {
        let id = FileId {
            dev: m.dev,
            inode: m.inode,
        };
        files.entry(id).or_default().push(m);
    }
    let mut dirs = Vec::new();
    let mut refused = Vec::new();
    for (&id, ms) in &files {
        let first = ms[0];
        // The device's own queue mappings: not files to search.
        if first.path.raw().starts_with(b"/dev/infiniband/") {
            continue;
        }
        if dirs.len() >= MAX_DIRS {
            notes.push(format!(
                "more than {MAX_DIRS} queue directories: the other files were not searched"
            ));
            break;
        }
        let is_exe = exe == Some(id);
        let file =
            match guard::open_mapped(pid, first.start, first.end, first.path.raw(), id, is_exe) {
                Ok(f) => f,
                Err(NotOpened::Refused(why)) => {
                    refused.push(format!("{} ({why})", first.path));
                    continue;
                }
                Err(NotOpened::Unreachable(why)) => {
                    if is_exe {
                        notes.push(format!("could not read the program {}: {why}", first.path));
                    }
                    continue;
                }
            };
        let Ok(src) = elf::FileAt::new(file) else {
            continue;
        };
        let info = match elf::read_info(&src) {
            Ok(Some(i)) => i,
            Ok(None) => continue,
            Err(e) => {
                notes.push(format!("{}: ELF headers not read: {e}", first.path));
                continue;
            }
        };
        notes.extend(info.notes.iter().map(|n| format!("{}: {n}", first.path)));
        if info.symbols.is_empty() {
            continue;
        }
        let Some(bias) = load_bias(&info, ms) else {
            notes.push(format!(
                "{}: no mapping shows where it was loaded",
                first.path
            ));
            continue;
        };
        for (name, value, size) in info.symbols {
            dirs.push(Dir {
                symbol: name,
                file: first.path.clone(),
                addr: value.wrapping_add(bias),
                size,
                header: None,
                error: None,
                notes: Vec::new(),
            });
        }
    }
    if !refused.is_empty() {
        let more = refused.len().saturating_sub(MAX_REFUSED_NAMED);
        refused.truncate(MAX_REFUSED_NAMED);
        notes.push(format!(
            "not opened (only a regular file that is the one mapped is read): {}{}",
            refused.join(", "),
            if more > 0 {
                format!(", and {more} more")
            } else {
                String::new()
            }
        ));
    }
    Ok((dirs, notes))
}

/// Checks a directory header (and the symbol's size, if known); returns
/// the bytes of header and slots.
pub fn check_header(h: &DirHeader, sym_size: u64) -> Result<u64, String> {
    if h.magic == 0 {
        return Err("not in use yet (the process created no mlx5 queue)".into());
    }
    if h.magic != qdir::MAGIC {
        return Err(format!("bad magic {:#x}", h.magic));
    }
    if h.version != qdir::LAYOUT_VERSION {
        return Err(format!(
            "layout version {} (this tool reads version {})",
            h.version,
            qdir::LAYOUT_VERSION
        ));
    }
    let header = u64::from(h.header_size);
    let slot = u64::from(h.slot_size);
    if !(size_of::<DirHeader>() as u64..=4096).contains(&header)
        || !(size_of::<DirSlot>() as u64..=4096).contains(&slot)
        || h.slot_count > qdir::MAX_SLOTS
    {
        return Err(format!(
            "implausible geometry: header {header} bytes, {} slots of {slot}",
            h.slot_count
        ));
    }
    // At most 4096 + 4096 * 2^16: no overflow.
    let total = header + slot * u64::from(h.slot_count);
    if total > MAX_DIR_BYTES || (sym_size != 0 && total > sym_size) {
        return Err(format!(
            "{total} bytes of directory do not fit its symbol ({sym_size} bytes)"
        ));
    }
    Ok(total)
}

/// A listed queue, read and decoded (its bytes dropped).
#[derive(Debug, Clone)]
pub struct Queue {
    /// Index of its directory in the list.
    pub dir: usize,
    /// Its slot.
    pub slot: u32,
    /// The slot as read: kind, number, geometry, addresses.
    pub listing: DirSlot,
    /// What its bytes decoded to.
    pub decoded: Decoded,
}

/// Reads the slots of `dir` until each non-free one reads the same twice
/// with an even sequence; returns them, and notes for the torn ones.
fn read_slots(mem: &dyn Memory, dir: &Dir, h: &DirHeader) -> Result<Vec<(u32, DirSlot)>, String> {
    let start = dir
        .addr
        .checked_add(u64::from(h.header_size))
        .ok_or("the directory runs past the end of the address space")?;
    let stride = h.slot_size as usize;
    let len = stride * h.slot_count as usize;
    let mut good: BTreeMap<u32, DirSlot> = BTreeMap::new();
    let mut pending: Option<Vec<u32>> = None;
    for _ in 0..SLOT_ATTEMPTS {
        let a = mem.read(start, len)?;
        let b = mem.read(start, len)?;
        let mut torn = Vec::new();
        for i in 0..h.slot_count {
            if pending.as_ref().is_some_and(|p| !p.contains(&i)) {
                continue;
            }
            let at = i as usize * stride;
            let (Some(x), Some(y)) = (a.get(at..at + stride), b.get(at..at + stride)) else {
                continue;
            };
            let Ok((s, _)) = DirSlot::read_from_prefix(x) else {
                continue;
            };
            if s.kind == kind::FREE && s.seq % 2 == 0 && x == y {
                continue;
            }
            if x != y || s.seq % 2 == 1 || s.kind == kind::CLAIMED {
                torn.push(i);
            } else {
                good.insert(i, s);
            }
        }
        if torn.is_empty() {
            pending = None;
            break;
        }
        pending = Some(torn);
    }
    if let Some(p) = pending {
        return Err(format!(
            "{} slot(s) changed on every read (being written)",
            p.len()
        ));
    }
    Ok(good.into_iter().collect())
}

/// Regions of [`DEDUP_BYTES`] or more already read (or refused), by
/// address and length: the directory and slot that named them first.
type Seen = HashMap<(u64, u64), (usize, u32)>;

/// Reads a queue's ring, doorbell record and bookkeeping within `budget`
/// (the ring and arrays count against the queue's share; the 64-byte
/// doorbell record and 4-byte counter only against the run's). A region
/// that an earlier slot named (`seen`) is not read again. `who`: this
/// queue's directory and slot.
fn read_queue(
    mem: &dyn Memory,
    s: DirSlot,
    budget: &mut Budget,
    seen: &mut Seen,
    who: (usize, u32),
) -> Image {
    let mut img = Image {
        slot: s,
        ..Image::default()
    };
    let Ok(bytes) = check_slot(&s) else {
        return img;
    };
    let mut queue = 0u64;
    let mut notes = Vec::new();
    let mut get = |what: &str, addr: u64, len: Option<u64>, shared: bool| -> Option<Vec<u8>> {
        if addr == 0 {
            return None;
        }
        let Some(len) = len else {
            notes.push(format!("{what} at {addr:#x}: its size overflows"));
            return None;
        };
        if len >= DEDUP_BYTES {
            if let Some(&(d, k)) = seen.get(&(addr, len)) {
                let dir = if d == who.0 {
                    String::new()
                } else {
                    format!(" of directory {d}")
                };
                notes.push(format!(
                    "{what} at {addr:#x} ({len} bytes) is slot {k}{dir}'s too: not read again"
                ));
                return None;
            }
            seen.insert((addr, len), who);
        }
        let charged = if shared {
            budget.charge(len)
        } else {
            budget.charge_queue(&mut queue, len)
        };
        if let Err(e) = charged {
            notes.push(format!("{what} at {addr:#x} not read: {e}"));
            return None;
        }
        let n = usize::try_from(len).ok()?;
        match mem.read(addr, n) {
            Ok(v) => Some(v),
            Err(e) => {
                notes.push(format!("{what} at {addr:#x} unreadable: {e}"));
                None
            }
        }
    };
    let n = u64::from(s.entries);
    let dbrec = get("doorbell record", s.dbrec, Some(64), true);
    let retired = if s.kind == kind::CQ {
        None
    } else {
        get("retired counter", s.retired, Some(4), true)
    };
    let ring = get("ring", s.buf, Some(bytes), false);
    let wrid = if s.kind == kind::CQ {
        None
    } else {
        get("wr_id array", s.wrid, n.checked_mul(8), false)
    };
    let extra = match s.kind {
        kind::SQ => get("WR counters", s.extra, n.checked_mul(4), false),
        kind::SRQ => get("WQE list ends", s.extra, Some(8), false),
        _ => None,
    };
    let extra2 = match s.kind {
        kind::SRQ => get(
            "completed bitmap",
            s.extra2,
            n.div_ceil(64).checked_mul(8),
            false,
        ),
        _ => None,
    };
    img.notes = notes;
    img.dbrec = dbrec;
    img.ring = ring;
    img.wrid = wrid;
    img.retired = retired.and_then(|b| Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?)));
    img.extra = extra;
    img.extra2 = extra2;
    img
}

/// Reads every directory of `dirs` (filling in its header or error) and
/// the queues they list, within `budget`: each queue is read, decoded
/// (`with_entries`: its queued entries too, as many as the budget holds
/// at [`ENTRY_COST`] each) and its bytes dropped before the next is read;
/// each queue listed costs [`QUEUE_COST`]. Queues past the budget are
/// counted in their directory's notes.
pub fn read_all(
    mem: &dyn Memory,
    dirs: &mut [Dir],
    budget: &mut Budget,
    with_entries: bool,
) -> Vec<Queue> {
    let mut queues = Vec::new();
    let mut seen = Seen::new();
    for (di, dir) in dirs.iter_mut().enumerate() {
        let h = match mem.read(dir.addr, size_of::<DirHeader>()) {
            Ok(b) => match DirHeader::read_from_bytes(&b) {
                Ok(h) => h,
                Err(_) => {
                    dir.error = Some("short read of the header".into());
                    continue;
                }
            },
            Err(e) => {
                dir.error = Some(format!("unreadable: {e}"));
                continue;
            }
        };
        if let Err(e) = check_header(&h, dir.size) {
            dir.error = Some(e);
            continue;
        }
        dir.header = Some(h);
        let slots = match read_slots(mem, dir, &h) {
            Ok(s) => s,
            Err(e) => {
                dir.error = Some(e);
                continue;
            }
        };
        let mut skipped = 0u64;
        for (i, s) in slots {
            if budget.charge(QUEUE_COST).is_err() {
                skipped += 1;
                continue;
            }
            let img = read_queue(mem, s, budget, &mut seen, (di, i));
            let (max, why) = budget.entries_for_queue();
            let mut decoded = decode::decode_limited(&img, with_entries, max);
            drop(img);
            let cost = (decoded.entries.len() as u64).saturating_mul(ENTRY_COST);
            // Within what was left (max), so this cannot fail.
            let _ = budget.charge(cost);
            if decoded.not_decoded > 0 {
                decoded.notes.push(format!(
                    "{} more queued entries not decoded: {why}",
                    decoded.not_decoded
                ));
            }
            queues.push(Queue {
                dir: di,
                slot: i,
                listing: s,
                decoded,
            });
        }
        if skipped > 0 {
            dir.notes.push(format!(
                "{skipped} listed queues not read: the run's budget is spent \
                 (--max-total-bytes {})",
                budget.total()
            ));
        }
    }
    queues
}

/// Why a process's mlx5 queues cannot be shown, when it has no directory.
pub fn no_directory_message(pid: u32, comm: &Untrusted) -> String {
    format!(
        "process {pid} ({comm}): mlx5 queues cannot be inspected: neither its program nor \
         any library it maps has the symbol {}* (the queue directory of the rverbs mlx5 \
         provider). mlx5 queues are memory the process allocated, which the kernel does not \
         describe; only processes on the rverbs mlx5 provider list theirs. Processes on \
         rdma-core's libmlx5, and stripped binaries, cannot be inspected this way.",
        qdir::SYMBOL_PREFIX
    )
}

/// The JSON of a directory.
pub fn dir_json(d: &Dir) -> Value {
    json!({
        "symbol": d.symbol,
        "file": d.file,
        "addr": format!("{:#x}", d.addr),
        "slots": d.header.map(|h| h.slot_count),
        "listed": d.header.map(|h| h.listed),
        "dropped": d.header.map(|h| h.dropped),
        "error": d.error,
        "notes": d.notes,
    })
}

/// The JSON of a decoded queue.
pub fn queue_json(q: &Queue, with_entries: bool) -> Value {
    q.clone().into_json(with_entries)
}

impl Queue {
    /// Its JSON (see [`queue_json`]), without a copy of what was decoded.
    pub fn into_json(self, with_entries: bool) -> Value {
        let d = self.decoded;
        let mut m = d.fields;
        m.insert("slot".into(), json!(self.slot));
        if with_entries {
            m.insert("entries_decoded".into(), Value::Array(d.entries));
        }
        m.insert("notes".into(), json!(d.notes));
        Value::Object(m)
    }
}

/// One decoded entry of a queue of kind `kind` as a line of text.
pub fn entry_text(kind_name: &str, v: &Value) -> String {
    let n = |k: &str| v.get(k).and_then(Value::as_u64);
    let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut out = format!("[{:>5}]", n("index").unwrap_or(0));
    if let Some(e) = v.get("error").and_then(Value::as_str) {
        out += &format!(" ({e})");
        return out;
    }
    match kind_name {
        "SQ" => {
            out += &format!(
                " bb {} wr_id {:#x} {} ds {}",
                n("bb").unwrap_or(0),
                n("wr_id").unwrap_or(0),
                s("opcode"),
                n("ds").unwrap_or(0)
            );
            let flags: Vec<&str> = v["flags"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if !flags.is_empty() {
                out += &format!(" flags {}", flags.join("|"));
            }
            if let (Some(a), Some(k)) = (n("remote_addr"), n("rkey")) {
                out += &format!(" remote {a:#x} rkey {k:#x}");
            }
            if let Some(i) = n("imm_data") {
                out += &format!(" imm {i:#x}");
            }
            if let Some(u) = v.get("ud") {
                out += &format!(
                    " ud qpn {} qkey {:#x} dlid {}",
                    qpn_of(&u["remote_qpn"]),
                    u["remote_qkey"].as_u64().unwrap_or(0),
                    u["dlid"].as_u64().unwrap_or(0)
                );
            }
            if v["sges"].as_array().is_some_and(|a| !a.is_empty()) {
                out += &format!(" sge [{}]", sge_text(&v["sges"]));
            }
            if let Some(i) = v.get("inline").and_then(Value::as_str) {
                out += &format!(" inline {i}");
            }
        }
        "CQ" => {
            out += &format!(
                " owner {} {} qp {} wqe {}",
                n("owner").unwrap_or(0),
                s("opcode"),
                qpn_of(&v["qpn"]),
                n("wqe_counter").unwrap_or(0)
            );
            if v.get("wqe_opcode").is_some() {
                out += &format!(" ({})", s("wqe_opcode"));
            }
            if let Some(b) = n("byte_cnt") {
                out += &format!(" len {b}");
            }
            if let Some(i) = n("imm_data") {
                out += &format!(" imm {i:#x}");
            }
            if v.get("syndrome").is_some() {
                out += &format!(
                    " syndrome {} ({:#x}) vendor {:#x}",
                    s("syndrome"),
                    n("syndrome_raw").unwrap_or(0),
                    n("vendor_syndrome").unwrap_or(0)
                );
            }
        }
        _ => {
            out += &format!(
                " wr_id {:#x} sge [{}]",
                n("wr_id").unwrap_or(0),
                sge_text(&v["sges"])
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use zerocopy::IntoBytes;

    /// Memory made of regions.
    struct Fake(HashMap<u64, Vec<u8>>);

    impl Memory for Fake {
        fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, String> {
            // A hostile size must never get here.
            assert!(len <= 64 << 20, "read of {len} bytes");
            for (&base, b) in &self.0 {
                if addr >= base && addr - base + len as u64 <= b.len() as u64 {
                    let at = (addr - base) as usize;
                    return Ok(b[at..at + len].to_vec());
                }
            }
            Err("EFAULT".into())
        }
    }

    #[test]
    fn maps_and_bias() {
        let text = "\
55d0c0a00000-55d0c0a21000 r--p 00000000 fd:01 1234    /usr/bin/app
55d0c0a21000-55d0c0b00000 r-xp 00021000 fd:01 1234    /usr/bin/app
7fe42bc7c000-7fe42bc85000 rw-s 0002e000 00:05 101     /dev/infiniband/uverbs0
7fe42c000000-7fe42c001000 rw-p 00000000 00:00 0 
7fe42d000000-7fe42d001000 r--p 00000000 08:02 77      /opt/my lib.so (deleted)
garbage
";
        let m = parse_file_maps(text.as_bytes());
        assert_eq!(m.len(), 4);
        assert_eq!(
            (m[1].offset, m[1].dev, m[1].inode),
            (0x21000, (0xfd, 1), 1234)
        );
        assert_eq!(m[3].path.raw(), b"/opt/my lib.so (deleted)");
        // A path is the bytes after the padding, spaces, controls and
        // all; the fields are checked.
        let odd = parse_file_maps(
            b"7f00-7f01 r--p 00000000 08:02 9    /a  b\x1b[2J\r\xff\n\
              7f00-7f01 r--p 0000zz00 08:02 9    /bad offset\n\
              7f00-7f01 r--p 00000000 08:02 9",
        );
        assert_eq!(odd.len(), 1);
        assert_eq!(odd[0].path.raw(), b"/a  b\x1b[2J\r\xff");
        assert_eq!(odd[0].path.to_string(), r"/a  b\x1b[2J\x0d\xff");
        let info = ElfInfo {
            relocatable: true,
            symbols: vec![],
            loads: vec![(0, 0, 0x21000), (0x22000, 0x21000, 0x1000)],
            notes: vec![],
        };
        assert_eq!(load_bias(&info, &[&m[0], &m[1]]), Some(0x55d0c0a00000));
        // A fixed-address program has none; a file not mapped, none known.
        assert_eq!(load_bias(&ElfInfo::default(), &[]), Some(0));
        assert_eq!(load_bias(&info, &[]), None);
    }

    #[test]
    fn this_test_binary_has_no_directory_symbol_but_parses() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let info = elf_info(&data).unwrap();
        assert!(info.relocatable || !info.loads.is_empty());
        assert!(elf_info(b"not an elf").is_err());
    }

    // The directory of the provider linked into this test program (the
    // workspace shares one version).
    extern "C" {
        #[link_name = concat!(
            "RVERBS_MLX5_QUEUE_DIR_V1_",
            env!("CARGO_PKG_VERSION_MAJOR"),
            "_",
            env!("CARGO_PKG_VERSION_MINOR"),
            "_",
            env!("CARGO_PKG_VERSION_PATCH")
        )]
        static DIRECTORY: [u8; 64];
    }

    #[test]
    fn finds_its_own_directory() {
        // Only the address of the extern static is taken (safe); it is
        // never read through Rust.
        let real = std::ptr::addr_of!(DIRECTORY) as u64;
        let pid = std::process::id();
        let (mut dirs, notes) = locate(pid).unwrap();
        let mine: Vec<&Dir> = dirs
            .iter()
            .filter(|d| d.symbol.raw().starts_with(b"RVERBS_MLX5_QUEUE_DIR_V1_"))
            .collect();
        // Found at its real address, whether this program is a PIE or a
        // static fixed-address executable (the musl build).
        assert_eq!(mine.len(), 1, "{dirs:?} {notes:?}");
        assert_eq!(mine[0].addr, real);
        assert!(mine[0].size >= 64);
        // No queue was created here: zero, so "not in use yet".
        let qs = read_all(&Process(pid), &mut dirs, &mut Budget::default(), false);
        assert!(qs.is_empty());
        assert!(dirs[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("not in use"));
    }

    fn header(slots: u32) -> DirHeader {
        DirHeader {
            magic: qdir::MAGIC,
            version: 1,
            header_size: 64,
            slot_size: 80,
            slot_count: slots,
            listed: 1,
            ..Default::default()
        }
    }

    #[test]
    fn headers_are_checked() {
        assert!(check_header(&header(4), 64 + 320).is_ok());
        assert!(check_header(&header(4), 100).is_err());
        assert!(check_header(&DirHeader::default(), 0)
            .unwrap_err()
            .contains("not in use"));
        assert!(check_header(
            &DirHeader {
                version: 2,
                ..header(4)
            },
            0
        )
        .is_err());
        assert!(check_header(
            &DirHeader {
                magic: 5,
                ..header(4)
            },
            0
        )
        .is_err());
        assert!(check_header(&header(qdir::MAX_SLOTS + 1), 0).is_err());
        assert!(check_header(
            &DirHeader {
                slot_size: 8,
                ..header(4)
            },
            0
        )
        .is_err());
    }

    #[test]
    fn reads_a_directory_and_its_cq() {
        let dir_addr = 0x1000u64;
        let mut dir = header(4).as_bytes().to_vec();
        let cq = DirSlot {
            seq: 2,
            kind: kind::CQ,
            num: 7,
            entries: 2,
            stride_shift: 6,
            buf: 0x10000,
            dbrec: 0x20000,
            ..Default::default()
        };
        let torn = DirSlot { seq: 3, ..cq };
        dir.extend(DirSlot::default().as_bytes());
        dir.extend(cq.as_bytes());
        dir.extend(DirSlot::default().as_bytes());
        dir.extend(DirSlot::default().as_bytes());
        let mut ring = vec![0u8; 128];
        ring[63] = 0x01; // REQ, owner 1? counter 0 wants owner 0: not sw.
        ring[127] = 0xf0;
        let mut db = vec![0u8; 64];
        db[..4].copy_from_slice(&0u32.to_be_bytes());
        let mut mem = Fake(HashMap::from([
            (dir_addr, dir.clone()),
            (0x10000, ring),
            (0x20000, db),
        ]));
        let mut dirs = vec![Dir {
            symbol: "RVERBS_MLX5_QUEUE_DIR_V1_0_1_0".into(),
            file: "/x".into(),
            addr: dir_addr,
            size: 64 + 320,
            header: None,
            error: None,
            notes: vec![],
        }];
        let qs = read_all(&mem, &mut dirs, &mut Budget::default(), true);
        assert_eq!(dirs[0].error, None);
        assert_eq!(qs.len(), 1);
        assert_eq!((qs[0].slot, qs[0].listing.num), (1, 7));
        let v = queue_json(&qs[0], true);
        assert_eq!(v["queued"], 0);
        assert_eq!(v["consumer"], 0);
        // A slot that stays odd is reported, not shown.
        let mut d2 = dir.clone();
        d2[64 + 80..64 + 160].copy_from_slice(torn.as_bytes());
        mem.0.insert(dir_addr, d2);
        let qs = read_all(&mem, &mut dirs, &mut Budget::default(), true);
        assert!(qs.is_empty());
        assert!(dirs[0].error.as_deref().unwrap().contains("being written"));
        // An unreadable directory is an error, not a panic.
        dirs[0].addr = 0x999_0000;
        dirs[0].error = None;
        assert!(read_all(&mem, &mut dirs, &mut Budget::default(), true).is_empty());
        assert!(dirs[0].error.is_some());
    }

    /// Counts the bytes read.
    struct Counting(Fake, std::cell::Cell<u64>);

    impl Memory for Counting {
        fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, String> {
            self.1.set(self.1.get() + len as u64);
            self.0.read(addr, len)
        }
    }

    /// A directory of `n` CQ slots, each of `entries` CQEs at `buf(i)`,
    /// at 0x1000; the rings are regions of zeros.
    fn cq_dir(n: u32, entries: u32, buf: impl Fn(u32) -> u64) -> (Counting, Vec<Dir>) {
        let mut dir = header(n).as_bytes().to_vec();
        let mut mem = HashMap::new();
        for i in 0..n {
            let b = buf(i);
            dir.extend(
                DirSlot {
                    seq: 2,
                    kind: kind::CQ,
                    num: i,
                    entries,
                    stride_shift: 6,
                    buf: b,
                    dbrec: 0x20000,
                    ..Default::default()
                }
                .as_bytes(),
            );
            mem.insert(b, vec![0u8; (entries as usize) << 6]);
        }
        mem.insert(0x1000, dir);
        mem.insert(0x20000, vec![0u8; 64]);
        let dirs = vec![Dir {
            symbol: "RVERBS_MLX5_QUEUE_DIR_V1_X".into(),
            file: "/x".into(),
            addr: 0x1000,
            size: 0,
            header: None,
            error: None,
            notes: vec![],
        }];
        (Counting(Fake(mem), std::cell::Cell::new(0)), dirs)
    }

    #[test]
    fn a_ring_named_by_many_slots_is_read_once() {
        let (mem, mut dirs) = cq_dir(1000, 1 << 10, |_| 0x100_0000);
        let qs = read_all(&mem, &mut dirs, &mut Budget::default(), false);
        assert_eq!(qs.len(), 1000);
        // The header, the slots (twice), one ring, and the doorbell records.
        let dir_bytes = 64 + 2 * 80 * 1000;
        assert_eq!(mem.1.get(), dir_bytes + (64 << 10) + 1000 * 64);
        assert!(qs[0].decoded.notes.is_empty(), "{:?}", qs[0].decoded.notes);
        assert!(qs[1].decoded.notes[0].contains("is slot 0's too: not read again"));
    }

    #[test]
    fn the_budget_bounds_queues_rings_and_entries() {
        // Per queue: a ring over it is not read.
        let (mem, mut dirs) = cq_dir(2, 1 << 10, |i| 0x100_0000 + u64::from(i) * 0x10_0000);
        let qs = read_all(&mem, &mut dirs, &mut Budget::new(32 << 10, 1 << 30), true);
        assert_eq!(qs.len(), 2);
        assert!(
            qs[0].decoded.notes[0].contains("--max-queue-bytes 32768"),
            "{:?}",
            qs[0].decoded.notes
        );
        assert!(qs[0].decoded.entries.is_empty());
        // The run: distinct rings, read until the total is spent; the
        // other queues are counted, not read.
        let (mem, mut dirs) = cq_dir(100, 1 << 10, |i| 0x100_0000 + u64::from(i) * 0x10_0000);
        let mut b = Budget::new(1 << 20, 1 << 20);
        let qs = read_all(&mem, &mut dirs, &mut b, false);
        assert!(b.used() <= b.total());
        assert!(mem.1.get() <= 2 * (64 + 80 * 100) + (1 << 20));
        let read = qs.iter().filter(|q| q.decoded.notes.is_empty()).count();
        assert!((1..16).contains(&read), "{read}");
        assert!(
            dirs[0]
                .notes
                .iter()
                .any(|n| n.contains("listed queues not read")
                    && n.contains("--max-total-bytes 1048576")),
            "{:?}",
            dirs[0].notes
        );
        // Entries: all-zero CQEs read as 1024 queued completions; the
        // budget decodes what it can hold and counts the rest.
        let (mem, mut dirs) = cq_dir(1, 1 << 10, |_| 0x100_0000);
        let mut b = Budget::new(1 << 20, QUEUE_COST + (64 << 10) + 64 + 100 * ENTRY_COST);
        let qs = read_all(&mem, &mut dirs, &mut b, true);
        assert_eq!(qs[0].decoded.entries.len(), 100);
        assert_eq!(qs[0].decoded.not_decoded, 1024 - 100);
        assert!(qs[0]
            .decoded
            .notes
            .iter()
            .any(|n| n.contains("924 more queued entries not decoded")
                && n.contains("--max-total-bytes")));
        assert_eq!(b.left(), 0);
        // And a queue's share: its ring (64 KiB) fits, and 32 entries.
        let (mem, mut dirs) = cq_dir(1, 1 << 10, |_| 0x100_0000);
        let mut b = Budget::new(32 * ENTRY_COST, 1 << 30);
        let qs = read_all(&mem, &mut dirs, &mut b, true);
        assert_eq!(qs[0].decoded.entries.len(), 32);
        assert!(
            qs[0]
                .decoded
                .notes
                .iter()
                .any(|n| n.contains("992 more queued entries not decoded")
                    && n.contains("--max-queue-bytes")),
            "{:?}",
            qs[0].decoded.notes
        );
    }
}
