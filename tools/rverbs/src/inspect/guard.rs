//! What bounds `rverbs inspect` against the process it inspects, which may
//! be hostile: it chooses every address, size and count the inspector
//! reads, and the paths its memory map shows.
//!
//! - [`Budget`]: the bytes read from the process and the decoded output
//!   they turn into, per queue and per run (`--max-queue-bytes`,
//!   `--max-total-bytes`). What would pass a limit is not read, and the
//!   output says so.
//! - [`open_mapped`]: a file the process has mapped is opened only if it
//!   is a regular file with the device and inode its memory map shows,
//!   through `/proc/PID/exe`, `/proc/PID/map_files/` or a walk of its path
//!   that follows no symlink; never a FIFO, a device node or a symlink,
//!   and never with a blocking open.
//! - [`read_proc`]: `/proc` files of the process read up to a cap.
//! - [`with_deadline`]: the whole inspection runs against a deadline
//!   (`--timeout`); past it the tool gives up with an error instead of
//!   waiting.
//! - [`Untrusted`]: every string the process chose (its name, the paths
//!   of the files it maps, the symbol names in them) is held as one,
//!   whose `Display` (and JSON) shows it escaped and cut ([`shown`]): it
//!   cannot move the cursor, set the window title, clear the screen or
//!   fake a line of output.

use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, RawFd};
use std::os::fd::{FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode};

/// Default of `--max-queue-bytes`: what is read for one queue.
pub const DEFAULT_MAX_QUEUE_BYTES: u64 = 64 << 20;
/// Default of `--max-total-bytes`: what one run reads and decodes.
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 256 << 20;
/// Default of `--timeout`, in seconds.
pub const DEFAULT_TIMEOUT_SECS: f64 = 10.0;
/// What a decoded entry is charged to the run: an estimate, on the high
/// side, of the memory its JSON and its line of output take.
pub const ENTRY_COST: u64 = 2048;
/// What a listed queue is charged to the run: an estimate, on the high
/// side, of the memory its fields, notes, JSON and row take.
pub const QUEUE_COST: u64 = 8192;
/// Most bytes of `/proc/PID/maps` read (65,530 mappings of short paths
/// fit; a longer map is cut, with a note).
pub const MAX_MAPS_BYTES: u64 = 32 << 20;

/// The bytes an inspection may read from the process (and hold decoded):
/// at most [`Budget::per_queue`] for the ring and arrays of one queue, at
/// most [`Budget::total`] in all. Charges are never given back: `total`
/// bounds the run, not just a moment of it.
#[derive(Debug, Clone)]
pub struct Budget {
    per_queue: u64,
    total: u64,
    used: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget::new(DEFAULT_MAX_QUEUE_BYTES, DEFAULT_MAX_TOTAL_BYTES)
    }
}

impl Budget {
    /// A budget of `per_queue` bytes per queue, `total` in all.
    pub fn new(per_queue: u64, total: u64) -> Budget {
        Budget {
            per_queue,
            total,
            used: 0,
        }
    }

    /// Bytes one queue may read.
    pub fn per_queue(&self) -> u64 {
        self.per_queue
    }

    /// Bytes the run may read and decode.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes charged so far.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Bytes left to the run.
    pub fn left(&self) -> u64 {
        self.total.saturating_sub(self.used)
    }

    /// Charges `n` bytes to the run, or says why not (nothing charged).
    pub fn charge(&mut self, n: u64) -> Result<(), String> {
        match self.used.checked_add(n) {
            Some(u) if u <= self.total => {
                self.used = u;
                Ok(())
            }
            _ => Err(format!(
                "{n} bytes would pass the run's budget ({} of --max-total-bytes {} left)",
                self.left(),
                self.total
            )),
        }
    }

    /// Charges `n` bytes read for a queue that has read `*queue` so far,
    /// to the queue and to the run, or says why not (nothing charged).
    pub fn charge_queue(&mut self, queue: &mut u64, n: u64) -> Result<(), String> {
        match queue.checked_add(n) {
            Some(q) if q <= self.per_queue => {
                self.charge(n)?;
                *queue = q;
                Ok(())
            }
            _ => Err(format!(
                "{n} bytes would pass the per-queue budget (--max-queue-bytes {})",
                self.per_queue
            )),
        }
    }

    /// How many decoded entries (at [`ENTRY_COST`]) one queue may have:
    /// as many as its share holds, and the run has left. Also why not
    /// more, for the note of those left out.
    pub fn entries_for_queue(&self) -> (usize, String) {
        let per_queue = self.per_queue / ENTRY_COST;
        let left = self.left() / ENTRY_COST;
        let why = if per_queue <= left {
            format!(
                "a queue's budget holds {per_queue} (--max-queue-bytes {}, {ENTRY_COST} bytes an entry)",
                self.per_queue
            )
        } else {
            format!(
                "the run's budget is spent (--max-total-bytes {})",
                self.total
            )
        };
        (
            usize::try_from(per_queue.min(left)).unwrap_or(usize::MAX),
            why,
        )
    }
}

/// Runs `f` on a thread of its own and waits for it until `limit` has
/// passed; then gives up with an error naming `what` (the thread is left
/// behind, to end with the process). A result that came after the
/// deadline counts as too late.
pub fn with_deadline<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let start = Instant::now();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("inspect".into())
        .spawn(move || {
            let r = f();
            let _ = tx.send((r, Instant::now()));
        })?;
    let late = || {
        anyhow::anyhow!(
            "{what} did not finish within {} s (--timeout); gave up",
            limit.as_secs_f64()
        )
    };
    match rx.recv_timeout(limit) {
        Ok((r, done)) if done.saturating_duration_since(start) <= limit => r,
        Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(late()),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            anyhow::bail!("{what} failed (its thread ended without a result)")
        }
    }
}

/// The bytes of a `/proc` file of ours to name (`/proc/PID/maps`, ...),
/// at most `cap` of them, cut after the last whole line; `true` if it was
/// longer and cut. Bytes, not text: the paths in it are the process's
/// choice, UTF-8 or not.
pub fn read_proc(path: &str, cap: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let f = File::open(path)?;
    let mut buf = Vec::new();
    f.take(cap.saturating_add(1)).read_to_end(&mut buf)?;
    let cut = buf.len() as u64 > cap;
    if cut {
        buf.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
        // Keep whole lines only.
        let end = buf.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        buf.truncate(end);
    }
    Ok((buf, cut))
}

/// Most characters [`shown`] writes for one string (then it counts the
/// bytes left out): a path or a name is at most a line.
pub const MAX_SHOWN: usize = 512;

/// A string the inspected process chose: its name, a path in its memory
/// map, a symbol name in a file it maps. Held as the bytes it gave (UTF-8
/// or not, for opening and comparing: [`Untrusted::raw`]); shown only
/// escaped: its `Display`, `Debug` and JSON form are [`shown`]'s. Keep
/// such strings in this type from where they are read, so that no print
/// of them can forget the escaping.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Untrusted(Vec<u8>);

impl Untrusted {
    /// The string `bytes`, as the process gave it.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Untrusted {
        Untrusted(bytes.into())
    }

    /// The bytes as the process gave them: to open, to compare, to
    /// match; never to print (print the `Untrusted` itself).
    pub fn raw(&self) -> &[u8] {
        &self.0
    }
}

impl From<&str> for Untrusted {
    fn from(s: &str) -> Untrusted {
        Untrusted::new(s)
    }
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        shown(&self.0).fmt(f)
    }
}

impl fmt::Debug for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", shown(&self.0))
    }
}

/// JSON gets the escaped form too: serde escapes C0 controls in strings
/// but writes DEL, C1 controls and bidi controls as they are, which a
/// terminal showing the JSON would obey.
impl serde::Serialize for Untrusted {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `bytes` a process chose, shown inert: printable characters as they
/// are; a backslash as `\\`; C0 controls and DEL as `\xNN` (`\x1b`);
/// bytes that are not UTF-8 as `\xNN` (`\xff`); C1 controls, bidi
/// controls and the other invisible characters ([`hidden`]) as
/// `\u{N}` (`\u{9b}`, `\u{202e}`). At most [`MAX_SHOWN`] characters,
/// then `...(N more bytes)`. The escaping is unambiguous: each form
/// stands for one thing.
pub fn shown(bytes: &[u8]) -> Shown<'_> {
    Shown(bytes)
}

/// What [`shown`] returns: a `Display` of a process's bytes, escaped.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a>(&'a [u8]);

/// Whether character `c` is shown escaped: a control character (C0, DEL,
/// C1), a bidi control or mark, a line or paragraph separator, or another
/// format or default-ignorable character (zero-width ones, the BOM,
/// variation selectors, tags, interlinear annotations): anything that
/// acts on a terminal or hides or reorders text instead of showing.
pub fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{ad}' | '\u{34f}' | '\u{61c}' | '\u{6dd}' | '\u{70f}' | '\u{8e2}'
            | '\u{180e}' | '\u{3164}' | '\u{feff}' | '\u{ffa0}' | '\u{110bd}' | '\u{110cd}'
            | '\u{600}'..='\u{605}'
            | '\u{890}'..='\u{891}'
            | '\u{115f}'..='\u{1160}'
            | '\u{17b4}'..='\u{17b5}'
            | '\u{180b}'..='\u{180f}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{fe00}'..='\u{fe0f}'
            | '\u{fff0}'..='\u{fffb}'
            | '\u{fffe}'..='\u{ffff}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}')
}

/// One character (or stray byte) of a process's string as [`shown`]
/// writes it.
enum Piece {
    Plain(char),
    Backslash,
    Byte(u8),
    Code(u32),
}

impl Piece {
    fn of(c: char) -> Piece {
        match c {
            '\\' => Piece::Backslash,
            c if c.is_ascii_control() => Piece::Byte(c as u8),
            c if hidden(c) => Piece::Code(c.into()),
            c => Piece::Plain(c),
        }
    }

    /// Characters written.
    fn width(&self) -> usize {
        match self {
            Piece::Plain(_) => 1,
            Piece::Backslash => 2,
            Piece::Byte(_) => 4,
            // \u{...}: 4 and the hex digits.
            Piece::Code(n) => 4 + (32 - (n | 1).leading_zeros()).div_ceil(4) as usize,
        }
    }

    fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Piece::Plain(c) => f.write_char(c),
            Piece::Backslash => f.write_str("\\\\"),
            Piece::Byte(b) => write!(f, "\\x{b:02x}"),
            Piece::Code(n) => write!(f, "\\u{{{n:x}}}"),
        }
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mut width, mut at) = (0usize, 0usize);
        for chunk in self.0.utf8_chunks() {
            let pieces = chunk
                .valid()
                .chars()
                .map(|c| (Piece::of(c), c.len_utf8()))
                .chain(chunk.invalid().iter().map(|&b| (Piece::Byte(b), 1)));
            for (p, len) in pieces {
                width += p.width();
                if width > MAX_SHOWN {
                    return write!(f, "...({} more bytes)", self.0.len() - at);
                }
                p.write(f)?;
                at += len;
            }
        }
        Ok(())
    }
}

/// Which file a memory map line names: its device (major, minor) and
/// inode, as `/proc/PID/maps` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FileId {
    /// Device major and minor.
    pub dev: (u32, u32),
    /// Inode.
    pub inode: u64,
}

impl FileId {
    fn of(st: &FileStat) -> FileId {
        FileId {
            dev: (libc::major(st.st_dev), libc::minor(st.st_dev)),
            inode: st.st_ino,
        }
    }
}

/// Why a mapped file was not opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOpened {
    /// It could not be reached (gone, no permission): nothing to report.
    Unreachable(String),
    /// What was found there was refused: not a regular file, a symlink,
    /// or not the mapped file. Worth a note.
    Refused(String),
}

impl std::fmt::Display for NotOpened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotOpened::Unreachable(s) | NotOpened::Refused(s) => f.write_str(s),
        }
    }
}

fn kind_name(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symlink",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        _ => "of unknown type",
    }
}

/// Takes ownership of a descriptor nix returned.
fn owned(fd: RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful open/openat, and is
    // closed by nothing else: the OwnedFd is its only owner.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// `O_PATH` opens: they resolve a name to an inode and open nothing (no
/// FIFO waits, no device driver runs).
const PATH_FLAGS: OFlag = OFlag::O_PATH.union(OFlag::O_CLOEXEC);

/// Checks an `O_PATH` descriptor: a regular file with identity `want`;
/// then opens it for reading through `/proc/self/fd` (the same inode,
/// without resolving any name again).
fn reopen_checked(fd: OwnedFd, want: FileId) -> Result<File, NotOpened> {
    let st = nix::sys::stat::fstat(fd.as_raw_fd())
        .map_err(|e| NotOpened::Unreachable(format!("fstat: {e}")))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(NotOpened::Refused(format!(
            "{}, not a regular file",
            kind_name(st.st_mode)
        )));
    }
    if FileId::of(&st) != want {
        return Err(NotOpened::Refused(format!(
            "the file there (device {}:{}, inode {}) is not the one mapped (device {}:{}, inode {})",
            libc::major(st.st_dev),
            libc::minor(st.st_dev),
            st.st_ino,
            want.dev.0,
            want.dev.1,
            want.inode
        )));
    }
    let file = nix::fcntl::open(
        format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(|f| File::from(owned(f)))
    .map_err(|e| NotOpened::Unreachable(format!("reopen: {e}")))?;
    let st = nix::sys::stat::fstat(file.as_raw_fd())
        .map_err(|e| NotOpened::Unreachable(format!("fstat: {e}")))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG || FileId::of(&st) != want {
        return Err(NotOpened::Refused("changed while it was opened".into()));
    }
    Ok(file)
}

/// Opens one of `/proc`'s magic links to a file (`/proc/PID/exe`,
/// `/proc/PID/map_files/A-B`): names we build, which the kernel resolves
/// to the very file the process maps.
fn open_magic(path: &str, want: FileId) -> Result<File, NotOpened> {
    let fd = nix::fcntl::open(path, PATH_FLAGS, Mode::empty())
        .map(owned)
        .map_err(|e| NotOpened::Unreachable(format!("{path}: {e}")))?;
    reopen_checked(fd, want)
}

/// Walks `path` (absolute, as the memory map shows it: the process's
/// bytes) from our root one component at a time with `O_PATH |
/// O_NOFOLLOW`: any symlink on the way is refused, as are `.` and `..`.
/// Its messages show the components escaped.
fn open_walk(path: &[u8], want: FileId) -> Result<File, NotOpened> {
    let comps: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .collect();
    let Some((last, dirs)) = comps.split_last() else {
        return Err(NotOpened::Refused("not a file path".into()));
    };
    if comps.iter().any(|c| *c == b"." || *c == b"..") {
        return Err(NotOpened::Refused("a path with . or ..".into()));
    }
    let mut dir = nix::fcntl::open("/", PATH_FLAGS | OFlag::O_DIRECTORY, Mode::empty())
        .map(owned)
        .map_err(|e| NotOpened::Unreachable(format!("/: {e}")))?;
    for c in dirs {
        dir = match nix::fcntl::openat(
            Some(dir.as_raw_fd()),
            *c,
            PATH_FLAGS | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY,
            Mode::empty(),
        ) {
            Ok(fd) => owned(fd),
            Err(Errno::ENOTDIR | Errno::ELOOP) => {
                return Err(NotOpened::Refused(format!(
                    "its directory {} is a symlink or not a directory",
                    shown(c)
                )))
            }
            Err(e) => return Err(NotOpened::Unreachable(format!("{}: {e}", shown(c)))),
        };
    }
    let fd = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        *last,
        PATH_FLAGS | OFlag::O_NOFOLLOW,
        Mode::empty(),
    )
    .map(owned)
    .map_err(|e| NotOpened::Unreachable(format!("{}: {e}", shown(last))))?;
    reopen_checked(fd, want)
}

/// Opens, read-only, the file that process `pid` maps at `start..end`
/// under the name `path` (its bytes, [`Untrusted::raw`]) with identity
/// `want`, if it is a regular file;
/// `is_exe`: it is the program. Tried in turn: `/proc/PID/exe` (the
/// program), `/proc/PID/map_files/START-END` (needs CAP_SYS_ADMIN or
/// CAP_CHECKPOINT_RESTORE), and `path` walked without following symlinks
/// (not for a deleted file). Each is opened `O_PATH` first (which opens
/// nothing), checked with `fstat` to be a regular file of device and
/// inode `want`, and only then opened for reading (`O_NONBLOCK`, through
/// `/proc/self/fd`). The path string is never opened as such.
pub fn open_mapped(
    pid: u32,
    start: u64,
    end: u64,
    path: &[u8],
    want: FileId,
    is_exe: bool,
) -> Result<File, NotOpened> {
    let mut refused = None;
    let mut last = None;
    let mut note = |e: NotOpened| match e {
        NotOpened::Refused(_) => refused = Some(e),
        NotOpened::Unreachable(_) => last = Some(e),
    };
    if is_exe {
        match open_magic(&format!("/proc/{pid}/exe"), want) {
            Ok(f) => return Ok(f),
            Err(e) => note(e),
        }
    }
    match open_magic(&format!("/proc/{pid}/map_files/{start:x}-{end:x}"), want) {
        Ok(f) => return Ok(f),
        Err(e) => note(e),
    }
    if !path.ends_with(b" (deleted)") {
        match open_walk(path, want) {
            Ok(f) => return Ok(f),
            Err(e) => note(e),
        }
    }
    Err(refused
        .or(last)
        .unwrap_or_else(|| NotOpened::Unreachable("deleted".into())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn id(p: &std::path::Path) -> FileId {
        let m = std::fs::symlink_metadata(p).unwrap();
        FileId {
            dev: (libc::major(m.dev()), libc::minor(m.dev())),
            inode: m.ino(),
        }
    }

    #[test]
    fn budget_per_queue_and_total() {
        let mut b = Budget::new(100, 250);
        let mut q = 0;
        assert!(b.charge_queue(&mut q, 60).is_ok());
        let e = b.charge_queue(&mut q, 41).unwrap_err();
        assert!(e.contains("--max-queue-bytes 100"), "{e}");
        assert_eq!((q, b.used()), (60, 60));
        let mut q2 = 0;
        assert!(b.charge_queue(&mut q2, 100).is_ok());
        let mut q3 = 0;
        let e = b.charge_queue(&mut q3, 91).unwrap_err();
        assert!(e.contains("--max-total-bytes 250"), "{e}");
        assert_eq!((q3, b.used(), b.left()), (0, 160, 90));
        assert!(b.charge(u64::MAX).is_err());
        assert!(b.charge_queue(&mut q3, u64::MAX).is_err());
        assert_eq!(b.entries_for_queue().0, 0);
        let mut b = Budget::new(10 * ENTRY_COST, 100 * ENTRY_COST);
        assert_eq!(b.entries_for_queue().0, 10);
        assert!(b.entries_for_queue().1.contains("--max-queue-bytes"));
        b.charge(95 * ENTRY_COST).unwrap();
        assert_eq!(b.entries_for_queue().0, 5);
        assert!(b.entries_for_queue().1.contains("--max-total-bytes"));
    }

    #[test]
    fn deadline_gives_up_on_a_stuck_task() {
        let t = Instant::now();
        let r: anyhow::Result<()> = with_deadline(Duration::from_millis(200), "the task", || {
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        });
        let e = r.unwrap_err().to_string();
        assert!(e.contains("the task did not finish within 0.2 s"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(20));
        assert_eq!(
            with_deadline(Duration::from_secs(60), "x", || Ok(7)).unwrap(),
            7
        );
        assert!(
            with_deadline(Duration::from_secs(60), "x", || -> anyhow::Result<()> {
                anyhow::bail!("inner")
            })
            .is_err()
        );
    }

    #[test]
    fn proc_text_is_cut_at_a_line() {
        let (t, cut) = read_proc("/proc/self/maps", 1 << 30).unwrap();
        assert!(!cut && t.ends_with(b"\n"));
        let (s, cut) = read_proc("/proc/self/maps", 100).unwrap();
        assert!(cut && s.len() <= 100 && t.starts_with(&s));
    }

    /// A process's strings cannot drive a terminal: every control,
    /// invisible character and stray byte is escaped, each one way.
    #[test]
    fn strings_of_the_process_are_shown_escaped() {
        let s = |b: &[u8]| shown(b).to_string();
        assert_eq!(s(b"/usr/lib/libc.so.6"), "/usr/lib/libc.so.6");
        assert_eq!(s("caf\u{e9} \u{4e2d}".as_bytes()), "caf\u{e9} \u{4e2d}");
        assert_eq!(s(b"\x1b]0;pwned\x07"), r"\x1b]0;pwned\x07");
        assert_eq!(s(b"a\r\nb\tc\x00\x7f"), r"a\x0d\x0ab\x09c\x00\x7f");
        // C1 (CSI), bidi override and isolate, zero width, BOM, a tag.
        assert_eq!(
            s("\u{9b}2J\u{202e}x\u{2066}\u{200b}\u{feff}\u{e0041}".as_bytes()),
            r"\u{9b}2J\u{202e}x\u{2066}\u{200b}\u{feff}\u{e0041}"
        );
        // Not UTF-8; a backslash, so that `\x1b` as text stays apart.
        assert_eq!(s(b"\xff\xc3(\xe2\x82"), r"\xff\xc3(\xe2\x82");
        assert_eq!(s(br"\x1b"), r"\\x1b");
        // Bounded: cut at MAX_SHOWN characters, with what was left out.
        let long = s(&[b'a'; 10_000]);
        assert_eq!(
            long,
            format!("{}...(9488 more bytes)", "a".repeat(MAX_SHOWN))
        );
        let esc = s(&[0x1b; 1000]);
        assert_eq!(esc, format!("{}...(872 more bytes)", r"\x1b".repeat(128)));
        for w in ['\u{9b}', '\u{202e}', '\u{e0041}', '\u{10ffff}'] {
            let p = Piece::Code(w.into());
            assert_eq!(p.width(), format!("\\u{{{:x}}}", u32::from(w)).len());
        }
        for b in [
            &[0x1bu8; 1000][..],
            &[0xff; 3000],
            "\u{202e}".repeat(500).as_bytes(),
        ] {
            let t = s(b);
            assert!(t.chars().count() <= MAX_SHOWN + 32, "{}", t.len());
            assert!(!t.chars().any(hidden), "{t}");
        }
        // The type: Display, Debug and JSON all escape.
        let u = Untrusted::new(&b"ev\x1bil\xff"[..]);
        assert_eq!(u.to_string(), r"ev\x1bil\xff");
        assert_eq!(format!("{u:?}"), r#""ev\x1bil\xff""#);
        assert_eq!(
            serde_json::to_string(&Untrusted::from("\u{9b}\u{202e}\x7f")).unwrap(),
            r#""\\u{9b}\\u{202e}\\x7f""#
        );
        assert_eq!(u.raw(), b"ev\x1bil\xff");
    }

    #[test]
    fn only_the_mapped_regular_file_is_opened() {
        let dir = std::env::temp_dir().join(format!("rverbs-guard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let file = dir.join("sub/file");
        std::fs::write(&file, b"data").unwrap();
        let want = id(&file);
        let p = |x: &std::path::Path| x.as_os_str().as_encoded_bytes().to_vec();
        let mut s = String::new();
        open_walk(&p(&file), want)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        assert_eq!(s, "data");
        // Another file at the name: refused.
        let other = dir.join("other");
        std::fs::write(&other, b"x").unwrap();
        let e = open_walk(&p(&other), want).unwrap_err();
        assert!(
            matches!(&e, NotOpened::Refused(m) if m.contains("not the one mapped")),
            "{e}"
        );
        // A FIFO: refused at once, not waited on.
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
        let e = open_walk(&p(&fifo), id(&fifo)).unwrap_err();
        assert!(
            matches!(&e, NotOpened::Refused(m) if m.contains("a FIFO, not a regular file")),
            "{e}"
        );
        // A symlink to the very file: refused, last component or not.
        let link = dir.join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = open_walk(&p(&link), want).unwrap_err();
        assert!(
            matches!(&e, NotOpened::Refused(m) if m.contains("a symlink")),
            "{e}"
        );
        let dlink = dir.join("dlink");
        std::os::unix::fs::symlink(dir.join("sub"), &dlink).unwrap();
        let e = open_walk(&p(&dlink.join("file")), want).unwrap_err();
        assert!(
            matches!(&e, NotOpened::Refused(m) if m.contains("symlink")),
            "{e}"
        );
        let e = open_walk(&[&p(&dir)[..], b"/sub/../sub/file"].concat(), want).unwrap_err();
        assert!(matches!(e, NotOpened::Refused(_)), "{e}");
        // A device node.
        let e = open_walk(b"/dev/null", id(std::path::Path::new("/dev/null"))).unwrap_err();
        assert!(
            matches!(&e, NotOpened::Refused(m) if m.contains("character device")),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_program_through_proc_exe() {
        // stat through the magic link: right even if the file was
        // replaced since this program started.
        let m = std::fs::metadata("/proc/self/exe").unwrap();
        let want = FileId {
            dev: (libc::major(m.dev()), libc::minor(m.dev())),
            inode: m.ino(),
        };
        let f = open_mapped(std::process::id(), 0, 0, b"/nonexistent", want, true).unwrap();
        assert_eq!(f.metadata().unwrap().len(), m.len());
        let wrong = FileId {
            inode: want.inode ^ 1,
            ..want
        };
        let e = open_mapped(std::process::id(), 0, 0, b"/nonexistent", wrong, true).unwrap_err();
        assert!(matches!(e, NotOpened::Refused(_)), "{e}");
    }
}
