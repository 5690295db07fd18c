//! The mlx5 queues of a process on our mlx5 provider, read from outside.
//!
//! mlx5 queues are memory the process allocated and gave the device; the
//! kernel describes them nowhere a tool can read. Our provider lists them
//! in its queue directory (`rverbs_abi::mlx5::qdir`): a static exported
//! as `RVERBS_MLX5_QUEUE_DIR_V<layout>_<crate version>`. This module
//! finds that symbol in the ELF symbol tables (`.symtab`, else `.dynsym`;
//! parsed with the `object` crate) of the program (`/proc/PID/exe`) and
//! of every file it has mapped, adds the load bias the mappings in
//! `/proc/PID/maps` give (zero for a fixed-address executable), reads the
//! directory and every listed queue with `process_vm_readv`, checks all
//! of it, and decodes it ([`decode`]).
//!
//! A process without the symbol (on rdma-core's libmlx5, or a stripped
//! binary) cannot be inspected this way: [`no_directory_message`] says so.
//!
//! Like the rxe rings, this is a snapshot of a live process: stop it
//! (SIGSTOP) for a consistent picture. A slot being rewritten while it is
//! read (its sequence counter odd or changed) is read again, a few times.

pub mod decode;
pub mod elf;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;

use object::{Object, ObjectKind, ObjectSegment, ObjectSymbol};
use rverbs_abi::mlx5::qdir::{self, kind, DirHeader, DirSlot};
use serde_json::{json, Value};
use zerocopy::FromBytes;

use super::rings::{read_mem, sge_text, Refused};
use decode::{check_slot, Image, MAX_RING_BYTES};

/// Largest ELF file whose symbols are read.
const MAX_ELF_BYTES: u64 = 2 << 30;
/// Largest directory read (header and slots).
const MAX_DIR_BYTES: u64 = 16 << 20;
/// Reads of a directory until every slot reads the same twice.
const SLOT_ATTEMPTS: usize = 5;

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
    /// The path as the kernel shows it.
    pub path: String,
}

/// The file-backed mappings in the text of `/proc/PID/maps`.
pub fn parse_file_maps(text: &str) -> Vec<FileMap> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(_perms), Some(off), Some(dev), Some(ino)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path: Vec<&str> = it.collect();
        let path = path.join(" ");
        let Ok(inode) = ino.parse::<u64>() else {
            continue;
        };
        if inode == 0 || !path.starts_with('/') {
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
                path,
            });
        }
    }
    out
}

/// What an ELF file says about the directory symbols.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElfInfo {
    /// Whether addresses are relative to a load bias (`ET_DYN`: PIE and
    /// shared objects).
    pub relocatable: bool,
    /// Directory symbols: name, value, size.
    pub symbols: Vec<(String, u64, u64)>,
    /// Loadable segments: virtual address, file offset, file size.
    pub loads: Vec<(u64, u64, u64)>,
}

/// The directory symbols of an ELF image (from `.symtab`, and `.dynsym`).
pub fn elf_info(data: &[u8]) -> Result<ElfInfo, String> {
    let f = object::File::parse(data).map_err(|e| format!("not an ELF file: {e}"))?;
    let mut info = ElfInfo {
        relocatable: f.kind() == ObjectKind::Dynamic,
        ..ElfInfo::default()
    };
    for s in f.symbols().chain(f.dynamic_symbols()) {
        let Ok(name) = s.name() else { continue };
        if name.starts_with(qdir::SYMBOL_PREFIX) && !info.symbols.iter().any(|(n, _, _)| n == name)
        {
            info.symbols.push((name.to_string(), s.address(), s.size()));
        }
    }
    for seg in f.segments() {
        let (off, size) = seg.file_range();
        info.loads.push((seg.address(), off, size));
    }
    Ok(info)
}

/// The load bias of a relocatable file: where a mapping of it shows one
/// of its loadable segments, the mapped address minus the segment's.
pub fn load_bias(info: &ElfInfo, maps: &[&FileMap]) -> Option<u64> {
    if !info.relocatable {
        return Some(0);
    }
    for m in maps {
        for &(vaddr, off, _) in &info.loads {
            let in_map = off >= m.offset && off - m.offset < m.end - m.start;
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
    /// The symbol.
    pub symbol: String,
    /// The file holding it.
    pub file: String,
    /// Its address in the process.
    pub addr: u64,
    /// The symbol's size (0: unknown).
    pub size: u64,
    /// The header, once read and checked.
    pub header: Option<DirHeader>,
    /// Why it could not be used.
    pub error: Option<String>,
}

/// Finds the directory symbols of process `pid`: its program and every
/// mapped file, each ELF file once.
pub fn locate(pid: u32) -> Result<(Vec<Dir>, Vec<String>), Refused> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).map_err(|e| {
        match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => Refused::Denied(pid, "read the memory map".into()),
            Some(libc::ENOENT | libc::ESRCH) => Refused::NoProcess(pid),
            _ => Refused::Other(pid, e),
        }
    })?;
    let maps = parse_file_maps(&text);
    let mut notes = Vec::new();
    let exe = std::fs::metadata(format!("/proc/{pid}/exe")).ok();
    // Each file once, by device and inode.
    let mut files: BTreeMap<((u32, u32), u64), Vec<&FileMap>> = BTreeMap::new();
    for m in &maps {
        files.entry((m.dev, m.inode)).or_default().push(m);
    }
    let mut dirs = Vec::new();
    for (&(dev, inode), ms) in &files {
        let is_exe = exe.as_ref().is_some_and(|md| {
            md.ino() == inode && libc::major(md.dev()) == dev.0 && libc::minor(md.dev()) == dev.1
        });
        let first = ms[0];
        let candidates = if is_exe {
            vec![format!("/proc/{pid}/exe")]
        } else {
            vec![
                format!("/proc/{pid}/map_files/{:x}-{:x}", first.start, first.end),
                first.path.trim_end_matches(" (deleted)").to_string(),
            ]
        };
        let Some(data) = candidates.iter().find_map(|p| read_elf(p)) else {
            if is_exe {
                notes.push(format!("could not read the program {}", first.path));
            }
            continue;
        };
        let Ok(info) = elf_info(&data) else { continue };
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
            });
        }
    }
    Ok((dirs, notes))
}

/// The bytes of the ELF file at `path`, if it is one of sane size.
fn read_elf(path: &str) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic).ok()?;
    if &magic != b"\x7fELF" || f.metadata().ok()?.len() > MAX_ELF_BYTES {
        return None;
    }
    std::fs::read(path).ok()
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
    let total = header + slot * u64::from(h.slot_count);
    if total > MAX_DIR_BYTES || (sym_size != 0 && total > sym_size) {
        return Err(format!(
            "{total} bytes of directory do not fit its symbol ({sym_size} bytes)"
        ));
    }
    Ok(total)
}

/// A listed queue, read.
#[derive(Debug, Clone)]
pub struct Queue {
    /// Index of its directory in the list.
    pub dir: usize,
    /// Its slot.
    pub slot: u32,
    /// What was read.
    pub image: Image,
}

/// Reads the slots of `dir` until each non-free one reads the same twice
/// with an even sequence; returns them, and notes for the torn ones.
fn read_slots(mem: &dyn Memory, dir: &Dir, h: &DirHeader) -> Result<Vec<(u32, DirSlot)>, String> {
    let start = dir.addr + u64::from(h.header_size);
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

/// Reads a queue's ring, doorbell record and bookkeeping.
fn read_queue(mem: &dyn Memory, s: DirSlot) -> Image {
    let mut img = Image {
        slot: s,
        ..Image::default()
    };
    let bytes = match check_slot(&s) {
        Ok(b) => b,
        Err(_) => return img,
    };
    let mut get = |what: &str, addr: u64, len: u64| -> Option<Vec<u8>> {
        if addr == 0 {
            return None;
        }
        match mem.read(addr, len as usize) {
            Ok(v) => Some(v),
            Err(e) => {
                img.notes
                    .push(format!("{what} at {addr:#x} unreadable: {e}"));
                None
            }
        }
    };
    let dbrec = get("doorbell record", s.dbrec, 64);
    let ring = if bytes <= MAX_RING_BYTES {
        get("ring", s.buf, bytes)
    } else {
        None
    };
    let n = u64::from(s.entries);
    let wrid = if s.kind == kind::CQ {
        None
    } else {
        get("wr_id array", s.wrid, n * 8)
    };
    let retired = if s.kind == kind::CQ {
        None
    } else {
        get("retired counter", s.retired, 4)
    };
    let extra = match s.kind {
        kind::SQ => get("WR counters", s.extra, n * 4),
        kind::SRQ => get("WQE list ends", s.extra, 8),
        _ => None,
    };
    let extra2 = match s.kind {
        kind::SRQ => get("completed bitmap", s.extra2, n.div_ceil(64) * 8),
        _ => None,
    };
    if bytes > MAX_RING_BYTES {
        img.notes
            .push(format!("ring of {bytes} bytes not read (counters only)"));
    }
    img.dbrec = dbrec;
    img.ring = ring;
    img.wrid = wrid;
    img.retired = retired.and_then(|b| Some(u32::from_ne_bytes(b.get(..4)?.try_into().ok()?)));
    img.extra = extra;
    img.extra2 = extra2;
    img
}

/// Reads every directory of `dirs` (filling in its header or error) and
/// the queues they list.
pub fn read_all(mem: &dyn Memory, dirs: &mut [Dir]) -> Vec<Queue> {
    let mut queues = Vec::new();
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
        match read_slots(mem, dir, &h) {
            Ok(slots) => {
                for (i, s) in slots {
                    queues.push(Queue {
                        dir: di,
                        slot: i,
                        image: read_queue(mem, s),
                    });
                }
            }
            Err(e) => dir.error = Some(e),
        }
    }
    queues
}

/// Why a process's mlx5 queues cannot be shown, when it has no directory.
pub fn no_directory_message(pid: u32, comm: &str) -> String {
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
    })
}

/// The JSON of a decoded queue.
pub fn queue_json(q: &Queue, with_entries: bool) -> Value {
    let d = decode::decode(&q.image, with_entries);
    let mut m = d.fields;
    m.insert("slot".into(), json!(q.slot));
    if with_entries {
        m.insert("entries_decoded".into(), Value::Array(d.entries));
    }
    m.insert("notes".into(), json!(d.notes));
    Value::Object(m)
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
                    " ud qpn {:#x} qkey {:#x} dlid {}",
                    u["remote_qpn"].as_u64().unwrap_or(0),
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
                " owner {} {} qp {:#x} wqe {}",
                n("owner").unwrap_or(0),
                s("opcode"),
                n("qpn").unwrap_or(0),
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
        let m = parse_file_maps(text);
        assert_eq!(m.len(), 4);
        assert_eq!(
            (m[1].offset, m[1].dev, m[1].inode),
            (0x21000, (0xfd, 1), 1234)
        );
        assert_eq!(m[3].path, "/opt/my lib.so (deleted)");
        let info = ElfInfo {
            relocatable: true,
            symbols: vec![],
            loads: vec![(0, 0, 0x21000), (0x22000, 0x21000, 0x1000)],
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
            .filter(|d| d.symbol.starts_with("RVERBS_MLX5_QUEUE_DIR_V1_"))
            .collect();
        // Found at its real address, whether this program is a PIE or a
        // static fixed-address executable (the musl build).
        assert_eq!(mine.len(), 1, "{dirs:?} {notes:?}");
        assert_eq!(mine[0].addr, real);
        assert!(mine[0].size >= 64);
        // No queue was created here: zero, so "not in use yet".
        let qs = read_all(&Process(pid), &mut dirs);
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
        }];
        let qs = read_all(&mem, &mut dirs);
        assert_eq!(dirs[0].error, None);
        assert_eq!(qs.len(), 1);
        assert_eq!((qs[0].slot, qs[0].image.slot.num), (1, 7));
        let v = queue_json(&qs[0], true);
        assert_eq!(v["queued"], 0);
        assert_eq!(v["consumer"], 0);
        // A slot that stays odd is reported, not shown.
        let mut d2 = dir.clone();
        d2[64 + 80..64 + 160].copy_from_slice(torn.as_bytes());
        mem.0.insert(dir_addr, d2);
        let qs = read_all(&mem, &mut dirs);
        assert!(qs.is_empty());
        assert!(dirs[0].error.as_deref().unwrap().contains("being written"));
        // An unreadable directory is an error, not a panic.
        dirs[0].addr = 0x999_0000;
        dirs[0].error = None;
        assert!(read_all(&mem, &mut dirs).is_empty());
        assert!(dirs[0].error.is_some());
    }
}
