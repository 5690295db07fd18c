//! The queue-directory symbols of an ELF file, read in bounded pieces.
//!
//! The file is one the inspected process maps, so it may be anything: a
//! sparse file of gigabytes, section headers that point past its end,
//! tables of any size. Nothing here reads a file whole: the ELF header,
//! the program and section header tables (each at most
//! [`MAX_HEADERS_BYTES`]), then, per symbol table (`.symtab`,
//! `.dynsym`; at most [`MAX_TABLE_BYTES`] each, and its string table
//! too), the string table in pieces of [`CHUNK`] bytes searched for
//! names that start with the directory prefix, and only if one does, the
//! symbol table in pieces too. Every offset and size is checked against
//! the file's length with checked arithmetic; a table over its cap is
//! skipped with a note.
//!
//! 64-bit ELF only (either byte order): the processes this tool reads are
//! 64-bit. Symbol names are the file's bytes, kept as
//! [`Untrusted`] (shown escaped).

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::FileExt;

use rverbs_abi::mlx5::qdir;

use crate::inspect::guard::Untrusted;

/// Bytes read at once.
pub const CHUNK: usize = 1 << 20;
/// Largest program or section header table read.
pub const MAX_HEADERS_BYTES: u64 = 4 << 20;
/// Largest symbol table, and largest string table, searched.
pub const MAX_TABLE_BYTES: u64 = 256 << 20;
/// Most symbol tables searched in one file (an ELF file has two).
const MAX_TABLES: usize = 4;
/// Longest symbol name read.
const MAX_NAME: usize = 256;
/// Most directory symbols taken from one file.
const MAX_SYMBOLS: usize = 16;
/// Most string-table offsets of a name with the prefix remembered.
const MAX_CANDIDATES: usize = 256;

/// Something to read ELF bytes from at an offset.
pub trait ReadAt {
    /// Length in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` from offset `off`, or says why not.
    fn read_exact_at(&self, off: u64, buf: &mut [u8]) -> Result<(), String>;
}

impl ReadAt for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read_exact_at(&self, off: u64, buf: &mut [u8]) -> Result<(), String> {
        let src = usize::try_from(off)
            .ok()
            .and_then(|o| self.get(o..o.checked_add(buf.len())?))
            .ok_or("read past the end")?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// A file, with its length from `fstat`.
#[derive(Debug)]
pub struct FileAt {
    file: File,
    len: u64,
}

impl FileAt {
    /// Wraps `file`.
    pub fn new(file: File) -> std::io::Result<FileAt> {
        let len = file.metadata()?.len();
        Ok(FileAt { file, len })
    }
}

impl ReadAt for FileAt {
    fn size(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, off: u64, buf: &mut [u8]) -> Result<(), String> {
        FileExt::read_exact_at(&self.file, buf, off).map_err(|e| e.to_string())
    }
}

/// What an ELF file says about the directory symbols.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElfInfo {
    /// Whether addresses are relative to a load bias (`ET_DYN`: PIE and
    /// shared objects).
    pub relocatable: bool,
    /// Directory symbols: name (the file's bytes), value, size.
    pub symbols: Vec<(Untrusted, u64, u64)>,
    /// Loadable segments: virtual address, file offset, file size.
    pub loads: Vec<(u64, u64, u64)>,
    /// What was not read (tables over a cap, past the end of the file).
    pub notes: Vec<String>,
}

/// Byte order.
#[derive(Clone, Copy)]
struct Endian(bool);

impl Endian {
    fn u16(self, b: &[u8], at: usize) -> u16 {
        let a = [b[at], b[at + 1]];
        if self.0 {
            u16::from_le_bytes(a)
        } else {
            u16::from_be_bytes(a)
        }
    }
    fn u32(self, b: &[u8], at: usize) -> u32 {
        let mut a = [0; 4];
        a.copy_from_slice(&b[at..at + 4]);
        if self.0 {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    }
    fn u64(self, b: &[u8], at: usize) -> u64 {
        let mut a = [0; 8];
        a.copy_from_slice(&b[at..at + 8]);
        if self.0 {
            u64::from_le_bytes(a)
        } else {
            u64::from_be_bytes(a)
        }
    }
}

/// Reads `n` bytes at `off`, if they lie in the file and within `cap`.
fn read_range<R: ReadAt + ?Sized>(
    src: &R,
    what: &str,
    off: u64,
    n: u64,
    cap: u64,
) -> Result<Vec<u8>, String> {
    if n > cap {
        return Err(format!("{what} of {n} bytes: over the {cap}-byte cap"));
    }
    check_range(src, what, off, n)?;
    let mut buf = vec![0u8; usize::try_from(n).map_err(|_| "too large".to_string())?];
    src.read_exact_at(off, &mut buf)
        .map_err(|e| format!("{what}: {e}"))?;
    Ok(buf)
}

fn check_range<R: ReadAt + ?Sized>(src: &R, what: &str, off: u64, n: u64) -> Result<(), String> {
    match off.checked_add(n) {
        Some(end) if end <= src.size() => Ok(()),
        _ => Err(format!(
            "{what} ({n} bytes at offset {off}) runs past the end of the file ({} bytes)",
            src.size()
        )),
    }
}

/// ELF64 section header fields used here.
#[derive(Debug, Clone, Copy)]
struct Section {
    ty: u32,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_DYNSYM: u32 = 11;
const PT_LOAD: u32 = 1;
const ET_DYN: u16 = 3;
const EHDR: usize = 64;
const PHDR: u64 = 56;
const SHDR: u64 = 64;
const SYM: u64 = 24;

/// The directory symbols, segments and kind of the ELF file `src`, read
/// in bounded pieces (see the module docs). `None`: not a 64-bit ELF
/// file; an error: its headers are unreadable or implausible; a table
/// over its cap is a note.
pub fn read_info<R: ReadAt + ?Sized>(src: &R) -> Result<Option<ElfInfo>, String> {
    let mut eh = [0u8; EHDR];
    if src.size() < EHDR as u64 {
        return Ok(None);
    }
    src.read_exact_at(0, &mut eh)?;
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 {
        return Ok(None);
    }
    let e = match eh[5] {
        1 => Endian(true),
        2 => Endian(false),
        d => return Err(format!("unknown ELF byte order {d}")),
    };
    let mut info = ElfInfo {
        relocatable: e.u16(&eh, 16) == ET_DYN,
        ..ElfInfo::default()
    };
    let (phoff, shoff) = (e.u64(&eh, 32), e.u64(&eh, 40));
    let (phentsize, phnum) = (u64::from(e.u16(&eh, 54)), u64::from(e.u16(&eh, 56)));
    let (shentsize, mut shnum) = (u64::from(e.u16(&eh, 58)), u64::from(e.u16(&eh, 60)));

    // Loadable segments.
    if phnum > 0 {
        if phentsize < PHDR {
            return Err(format!("program headers of {phentsize} bytes"));
        }
        let n = phnum
            .checked_mul(phentsize)
            .ok_or("program header table size overflows")?;
        let t = read_range(src, "program header table", phoff, n, MAX_HEADERS_BYTES)?;
        for p in t.chunks_exact(phentsize as usize) {
            if e.u32(p, 0) == PT_LOAD {
                info.loads.push((e.u64(p, 16), e.u64(p, 8), e.u64(p, 32)));
            }
        }
    }

    // Section headers.
    if shoff == 0 {
        return Ok(Some(info));
    }
    if shentsize < SHDR {
        return Err(format!("section headers of {shentsize} bytes"));
    }
    if shnum == 0 {
        // More than 0xff00 sections: the count is section 0's size.
        let s0 = read_range(src, "section header 0", shoff, SHDR, SHDR)?;
        shnum = e.u64(&s0, 32);
    }
    let n = shnum
        .checked_mul(shentsize)
        .ok_or("section header table size overflows")?;
    let t = read_range(src, "section header table", shoff, n, MAX_HEADERS_BYTES)?;
    let sections: Vec<Section> = t
        .chunks_exact(shentsize as usize)
        .map(|s| Section {
            ty: e.u32(s, 4),
            offset: e.u64(s, 24),
            size: e.u64(s, 32),
            link: e.u32(s, 40),
            entsize: e.u64(s, 56),
        })
        .collect();
    drop(t);
    let mut seen = BTreeSet::new();
    for (i, s) in sections.iter().enumerate() {
        if !matches!(s.ty, SHT_SYMTAB | SHT_DYNSYM) || !seen.insert((s.offset, s.size)) {
            continue;
        }
        let name = if s.ty == SHT_SYMTAB {
            "symbol table"
        } else {
            "dynamic symbol table"
        };
        if seen.len() > MAX_TABLES {
            info.notes.push(format!(
                "more than {MAX_TABLES} symbol tables: the rest not read"
            ));
            break;
        }
        let strtab = sections
            .get(s.link as usize)
            .filter(|t| t.ty == SHT_STRTAB)
            .copied();
        let r = match strtab {
            None => Err(format!("{name} (section {i}) has no string table")),
            Some(st) => symbols(src, e, name, s, &st, &mut info.symbols),
        };
        if let Err(n) = r {
            info.notes.push(n);
        }
        if info.symbols.len() >= MAX_SYMBOLS {
            break;
        }
    }
    Ok(Some(info))
}

/// Adds the directory symbols of symbol table `s` (string table `st`).
fn symbols<R: ReadAt + ?Sized>(
    src: &R,
    e: Endian,
    name: &str,
    s: &Section,
    st: &Section,
    out: &mut Vec<(Untrusted, u64, u64)>,
) -> Result<(), String> {
    for (what, t) in [
        (name.to_string(), s),
        (format!("{name}'s string table"), st),
    ] {
        if t.size > MAX_TABLE_BYTES {
            return Err(format!(
                "{what} of {} bytes is over the {} MiB cap; not read",
                t.size,
                MAX_TABLE_BYTES >> 20
            ));
        }
        check_range(src, &what, t.offset, t.size)?;
    }
    if s.entsize < SYM || s.entsize > CHUNK as u64 {
        return Err(format!("{name}: entries of {} bytes", s.entsize));
    }
    // Names that start with the prefix: their offsets in the string table.
    let prefix = qdir::SYMBOL_PREFIX.as_bytes();
    let mut candidates = BTreeSet::new();
    let mut at = 0u64;
    let mut buf = Vec::new();
    while at < st.size && candidates.len() < MAX_CANDIDATES {
        let n = (st.size - at).min((CHUNK + prefix.len()) as u64) as usize;
        buf.resize(n, 0);
        src.read_exact_at(st.offset + at, &mut buf)?;
        let starts = n.min(CHUNK);
        for i in 0..starts {
            if buf[i] == prefix[0] && buf[i..].starts_with(prefix) {
                candidates.insert(at + i as u64);
            }
        }
        at += CHUNK as u64;
    }
    if candidates.is_empty() {
        return Ok(());
    }
    // The symbols naming them.
    let per = (CHUNK as u64 / s.entsize).max(1);
    let count = s.size / s.entsize;
    let mut first = 0u64;
    while first < count && out.len() < MAX_SYMBOLS {
        let k = per.min(count - first);
        buf.resize((k * s.entsize) as usize, 0);
        src.read_exact_at(s.offset + first * s.entsize, &mut buf)?;
        for sym in buf.chunks_exact(s.entsize as usize) {
            let (st_name, shndx) = (u64::from(e.u32(sym, 0)), e.u16(sym, 6));
            if shndx == 0 || !candidates.contains(&st_name) {
                continue;
            }
            let Some(n) = name_at(src, st, st_name)? else {
                continue;
            };
            if out.len() < MAX_SYMBOLS && !out.iter().any(|(x, _, _)| *x == n) {
                out.push((n, e.u64(sym, 8), e.u64(sym, 16)));
            }
        }
        first += k;
    }
    Ok(())
}

/// The NUL-terminated name at `off` of string table `st`, if it ends
/// within [`MAX_NAME`] bytes and the table: its bytes, UTF-8 or not.
fn name_at<R: ReadAt + ?Sized>(
    src: &R,
    st: &Section,
    off: u64,
) -> Result<Option<Untrusted>, String> {
    let n = (st.size - off).min(MAX_NAME as u64) as usize;
    let mut b = vec![0u8; n];
    src.read_exact_at(st.offset + off, &mut b)?;
    let Some(end) = b.iter().position(|&c| c == 0) else {
        return Ok(None);
    };
    b.truncate(end);
    Ok(Some(Untrusted::new(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectKind, ObjectSegment, ObjectSymbol};

    /// A section header: type, offset, size, link, entry size.
    type Sh = (u32, u64, u64, u32, u64);

    /// A 64-bit ELF of `sections` after `body`, section headers at the
    /// end.
    fn elf(le: bool, body: &[u8], sections: &[Sh]) -> Vec<u8> {
        let w16 = |v: u16| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        let w32 = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        let w64 = |v: u64| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = 2;
        h[5] = if le { 1 } else { 2 };
        h[16..18].copy_from_slice(&w16(2));
        let shoff = (64 + body.len()) as u64;
        h[40..48].copy_from_slice(&w64(shoff));
        h[58..60].copy_from_slice(&w16(64));
        h[60..62].copy_from_slice(&w16(sections.len() as u16));
        h.extend_from_slice(body);
        for &(ty, off, size, link, ent) in sections {
            let mut s = vec![0u8; 64];
            s[4..8].copy_from_slice(&w32(ty));
            s[24..32].copy_from_slice(&w64(off));
            s[32..40].copy_from_slice(&w64(size));
            s[40..44].copy_from_slice(&w32(link));
            s[56..64].copy_from_slice(&w64(ent));
            h.extend_from_slice(&s);
        }
        h
    }

    fn sym(le: bool, name: u32, shndx: u16, value: u64, size: u64) -> Vec<u8> {
        let mut s = vec![0u8; 24];
        if le {
            s[0..4].copy_from_slice(&name.to_le_bytes());
            s[6..8].copy_from_slice(&shndx.to_le_bytes());
            s[8..16].copy_from_slice(&value.to_le_bytes());
            s[16..24].copy_from_slice(&size.to_le_bytes());
        } else {
            s[0..4].copy_from_slice(&name.to_be_bytes());
            s[6..8].copy_from_slice(&shndx.to_be_bytes());
            s[8..16].copy_from_slice(&value.to_be_bytes());
            s[16..24].copy_from_slice(&size.to_be_bytes());
        }
        s
    }

    #[test]
    fn agrees_with_the_object_crate_on_this_program() {
        let data = std::fs::read("/proc/self/exe").unwrap();
        let ours = read_info(&data[..]).unwrap().unwrap();
        let f = object::File::parse(&data[..]).unwrap();
        assert_eq!(ours.relocatable, f.kind() == ObjectKind::Dynamic);
        let loads: Vec<_> = f
            .segments()
            .map(|s| (s.address(), s.file_range().0, s.file_range().1))
            .collect();
        assert_eq!(ours.loads, loads);
        let mut theirs: Vec<(Untrusted, u64, u64)> = Vec::new();
        for s in f.symbols().chain(f.dynamic_symbols()) {
            let Ok(n) = s.name() else { continue };
            if n.starts_with(qdir::SYMBOL_PREFIX)
                && !s.is_undefined()
                && !theirs.iter().any(|(x, _, _)| x.raw() == n.as_bytes())
            {
                theirs.push((n.into(), s.address(), s.size()));
            }
        }
        assert!(!theirs.is_empty(), "the provider's directory is linked in");
        assert_eq!(ours.symbols, theirs);
        assert!(ours.notes.is_empty(), "{:?}", ours.notes);
        // Through a file, in pieces, the same.
        let f = FileAt::new(File::open("/proc/self/exe").unwrap()).unwrap();
        assert_eq!(read_info(&f).unwrap(), Some(ours));
    }

    #[test]
    fn symbols_both_byte_orders_and_a_name_across_pieces() {
        for le in [true, false] {
            // A string table with the name straddling the first CHUNK
            // boundary, and one name that is a suffix of another.
            let name = format!("{}1_TEST", qdir::SYMBOL_PREFIX);
            let mut strtab = vec![0u8; CHUNK - 5];
            let at = strtab.len() as u32;
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            let tail_at = strtab.len() as u32 + 1;
            strtab.push(b'x');
            strtab.extend_from_slice(format!("{}1_SUFFIX", qdir::SYMBOL_PREFIX).as_bytes());
            strtab.push(0);
            let mut symtab = sym(le, 0, 0, 0, 0);
            symtab.extend(sym(le, at, 5, 0x1234, 99));
            symtab.extend(sym(le, at, 0, 0x9999, 1)); // undefined: skipped
            symtab.extend(sym(le, tail_at, 5, 0x10, 8));
            let mut body = symtab.clone();
            body.extend_from_slice(&strtab);
            let sym_off = 64u64;
            let str_off = sym_off + symtab.len() as u64;
            let data = elf(
                le,
                &body,
                &[
                    (0, 0, 0, 0, 0),
                    (SHT_SYMTAB, sym_off, symtab.len() as u64, 2, 24),
                    (SHT_STRTAB, str_off, strtab.len() as u64, 0, 0),
                ],
            );
            let info = read_info(&data[..]).unwrap().unwrap();
            assert_eq!(
                info.symbols,
                vec![
                    (name.as_str().into(), 0x1234, 99),
                    (
                        format!("{}1_SUFFIX", qdir::SYMBOL_PREFIX).as_str().into(),
                        0x10,
                        8
                    )
                ],
                "le {le}"
            );
            assert!(!info.relocatable);
        }
    }

    #[test]
    fn hostile_headers_are_errors_or_notes() {
        // Tables past the end, over the caps, no string table, tiny
        // entries, absurd counts: never a panic, never a big read.
        let cases: &[&[Sh]] = &[
            &[
                (0, 0, 0, 0, 0),
                (SHT_SYMTAB, 64, 1 << 40, 2, 24),
                (SHT_STRTAB, 64, 8, 0, 0),
            ],
            &[
                (0, 0, 0, 0, 0),
                (SHT_SYMTAB, 64, 48, 2, 24),
                (SHT_STRTAB, 64, MAX_TABLE_BYTES + 1, 0, 0),
            ],
            &[
                (0, 0, 0, 0, 0),
                (SHT_SYMTAB, u64::MAX, 48, 2, 24),
                (SHT_STRTAB, 64, 8, 0, 0),
            ],
            &[
                (0, 0, 0, 0, 0),
                (SHT_SYMTAB, 64, 48, 9, 24),
                (SHT_STRTAB, 64, 8, 0, 0),
            ],
            &[
                (0, 0, 0, 0, 0),
                (SHT_SYMTAB, 64, 48, 2, 0),
                (SHT_STRTAB, 64, 8, 0, 0),
            ],
            &[(0, 0, 0, 0, 0), (SHT_SYMTAB, 64, 48, 1, 24)],
        ];
        for c in cases {
            let data = elf(true, &[0u8; 64], c);
            let info = read_info(&data[..]).unwrap().unwrap();
            assert!(info.symbols.is_empty());
            assert_eq!(info.notes.len(), 1, "{c:?}: {:?}", info.notes);
        }
        let note = read_info(&elf(true, &[0u8; 64], cases[0])[..])
            .unwrap()
            .unwrap()
            .notes[0]
            .clone();
        assert!(note.contains("over the 256 MiB cap"), "{note}");
        // Broken headers.
        let mut d = elf(true, &[], &[(0, 0, 0, 0, 0)]);
        d[60..62].copy_from_slice(&0xffffu16.to_le_bytes());
        assert!(read_info(&d[..]).unwrap_err().contains("runs past the end"));
        d[58..60].copy_from_slice(&8u16.to_le_bytes());
        assert!(read_info(&d[..]).is_err());
        let mut d = elf(true, &[], &[]);
        d[56..58].copy_from_slice(&0xffffu16.to_le_bytes());
        d[54..56].copy_from_slice(&0xffffu16.to_le_bytes());
        assert!(read_info(&d[..]).unwrap_err().contains("cap"));
        assert_eq!(read_info(&b"\x7fELF"[..]), Ok(None));
        let text = b"not an ELF file at all, but long enough to hold a header: 64 bytes";
        assert_eq!(read_info(&text[..]), Ok(None));
        let mut d = elf(true, &[], &[]);
        d[4] = 1;
        assert_eq!(read_info(&d[..]), Ok(None));
        d[4] = 2;
        d[5] = 7;
        assert!(read_info(&d[..]).unwrap_err().contains("byte order"));
    }
}
