//! The records: copying the caller's command bytes, deciding which ioctl
//! attributes are outputs, and appending one line per command to the log
//! (`UVERBS_TRACE_LOG`, format in the crate docs).
//!
//! Which attributes are outputs: the kernel's method declarations say, and
//! this library does not carry them. It takes as outputs the driver's
//! output (`UVERBS_ATTR_UHW_OUT`), the outputs of the methods the mlx5
//! emulator implements (so that its log and ours match byte for byte),
//! every attribute the kernel marked `UVERBS_ATTR_F_VALID_OUTPUT` after the
//! call, and any attribute so marked earlier in the process for the same
//! method (a failed call marks none). An output is recorded by its length
//! only: its bytes before the call are whatever the caller's buffer held.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};

use libc::c_int;
use preload_libc as real;
use rverbs_abi::ioctl::{
    device_method as dm, invoke_write_attr as iw, mr_method, object, query_gid_entry_attr as ge,
    query_gid_table_attr as gt, query_port_attr as qp, reg_dmabuf_mr_attr as dmabuf, Attr,
    IoctlHdr, UVERBS_ATTR_F_VALID_OUTPUT, UVERBS_ATTR_UHW_IN, UVERBS_ATTR_UHW_OUT,
};
use rverbs_abi::Errno;
use zerocopy::FromBytes;

/// `IB_USER_VERBS_CMD_FLAG_EXTENDED`.
const FLAG_EXTENDED: u32 = 0x8000_0000;
/// Bytes of the ioctl header and of one attribute.
const HDR: usize = size_of::<IoctlHdr>();
const ATTR: usize = size_of::<Attr>();
/// Most attributes read from one call (the kernel's own limit is a page).
const MAX_ATTRS: usize = 4096 / ATTR;
/// Most bytes recorded of one `write()` (a uverbs command is far smaller).
const MAX_WRITE: usize = 1 << 16;

/// The lowest descriptor number the log takes.
const HIGH_FD: c_int = 700;

/// The log's file descriptor, opened on first use; `None`: not recording.
static LOG: OnceLock<Option<Mutex<c_int>>> = OnceLock::new();

fn log() -> Option<&'static Mutex<c_int>> {
    LOG.get_or_init(|| {
        let path = std::env::var_os("UVERBS_TRACE_LOG")?;
        let path = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
            .ok()?;
        // SAFETY: a valid C string; the flags create or append.
        let fd = unsafe {
            real::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
                0o644,
            )
        };
        if fd < 0 {
            return None;
        }
        // Out of the way of the program's own descriptors: a low number
        // taken here would shift every fd it opens after (a completion
        // channel's fd is part of CREATE_CQ, and is compared).
        // SAFETY: fcntl on a descriptor this function owns.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD) };
        if high >= 0 {
            real::close(fd);
            Some(Mutex::new(high))
        } else {
            Some(Mutex::new(fd))
        }
    })
    .as_ref()
}

/// Whether recording is on.
fn enabled() -> bool {
    log().is_some()
}

fn append(line: &str) {
    let Some(log) = log() else { return };
    let Ok(fd) = log.lock() else { return };
    real::write_all(*fd, line.as_bytes());
}

/// `ok`, or the errno's name as the emulator writes it.
fn result_word(err: Option<c_int>) -> String {
    match err {
        None => "ok".into(),
        Some(e) => format!("{:?}", Errno::from_raw(e)),
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// `len` bytes of this process's memory at `addr`, copied by the kernel
/// (`process_vm_readv` on ourselves), so that an unmapped address is
/// `None` rather than a crash.
fn copy(addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut out = vec![0u8; len];
    if len == 0 {
        return Some(out);
    }
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` names `out`, writable for `len` bytes; the remote
    // range is only read, by the kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    (usize::try_from(n).ok() == Some(len)).then_some(out)
}

/// Records a `write()` of `count` bytes at `buf` and its outcome.
pub fn write(buf: u64, count: usize, err: Option<c_int>) {
    if !enabled() {
        return;
    }
    let bytes = copy(buf, count.min(MAX_WRITE)).unwrap_or_default();
    append(&format!("write {} {}\n", result_word(err), hex(&bytes)));
}

/// One attribute as the caller gave it, and its input bytes (inline, the
/// handle's 8 bytes, or what the pointer names; `None`: unreadable).
struct Given {
    attr: Attr,
    bytes: Option<Vec<u8>>,
}

/// An ioctl call as it was before the kernel saw it.
pub struct IoctlCall {
    hdr: IoctlHdr,
    attrs: Vec<Given>,
}

/// The (object, method, attribute) triples known to be outputs.
static OUTPUTS: Mutex<BTreeSet<(u16, u16, u16)>> = Mutex::new(BTreeSet::new());

/// Whether attribute `id` of `object`/`method` is an output by declaration
/// (the methods the emulator implements) or was marked one before.
fn is_output(object_id: u16, method: u16, id: u16) -> bool {
    let declared = id == UVERBS_ATTR_UHW_OUT
        || matches!(
            (object_id, method, id),
            (object::DEVICE, dm::INVOKE_WRITE, iw::CORE_OUT)
                | (object::DEVICE, dm::QUERY_PORT, qp::RESP)
                | (
                    object::DEVICE,
                    dm::QUERY_GID_TABLE,
                    gt::RESP_ENTRIES | gt::RESP_NUM_ENTRIES
                )
                | (object::DEVICE, dm::QUERY_GID_ENTRY, ge::RESP_ENTRY)
                | (
                    object::MR,
                    mr_method::REG_DMABUF_MR,
                    dmabuf::RESP_LKEY | dmabuf::RESP_RKEY
                )
        );
    declared
        || OUTPUTS
            .lock()
            .is_ok_and(|o| o.contains(&(object_id, method, id)))
}

/// Reads the header and attributes at `arg`.
fn read_call(arg: u64) -> Option<(IoctlHdr, Vec<Attr>)> {
    let hdr = IoctlHdr::read_from_bytes(&copy(arg, HDR)?).ok()?;
    let n = usize::from(hdr.num_attrs);
    if n > MAX_ATTRS || usize::from(hdr.length) != HDR + n * ATTR {
        return None;
    }
    let raw = copy(arg.checked_add(HDR as u64)?, n * ATTR)?;
    let attrs = raw
        .chunks_exact(ATTR)
        .filter_map(|c| Attr::read_from_bytes(c).ok())
        .collect();
    Some((hdr, attrs))
}

impl IoctlCall {
    /// Copies the call at `arg` before it runs; `None` when recording is
    /// off or the header cannot be read.
    pub fn before(arg: u64) -> Option<IoctlCall> {
        if !enabled() {
            return None;
        }
        let (hdr, attrs) = read_call(arg)?;
        let attrs = attrs
            .into_iter()
            .map(|a| {
                let len = usize::from(a.len);
                let bytes = match len {
                    0 => Some(a.data.to_ne_bytes().to_vec()),
                    1..=8 => Some(a.data.to_ne_bytes()[..len].to_vec()),
                    _ => copy(a.data, len),
                };
                Given { attr: a, bytes }
            })
            .collect();
        Some(IoctlCall { hdr, attrs })
    }

    fn find(&self, id: u16) -> Option<&Given> {
        self.attrs.iter().find(|g| g.attr.attr_id == id)
    }

    /// The `write()` bytes an `INVOKE_WRITE` carries (headers rebuilt as the
    /// kernel's `write()` path would read them), if its attributes say.
    fn write_bytes(&self) -> Option<Vec<u8>> {
        let cmd = self.find(iw::WRITE_CMD)?.bytes.as_deref()?;
        let command = u32::try_from(u64::from_ne_bytes(cmd.try_into().ok()?)).ok()?;
        let core = self
            .find(iw::CORE_IN)
            .map_or(Some(&[][..]), |g| g.bytes.as_deref())?;
        let drv = self
            .find(UVERBS_ATTR_UHW_IN)
            .map_or(Some(&[][..]), |g| g.bytes.as_deref())?;
        let out = self.find(iw::CORE_OUT).map(|g| g.attr);
        let out_len = out.map_or(0, |a| usize::from(a.len));
        let drv_out = self
            .find(UVERBS_ATTR_UHW_OUT)
            .map_or(0, |g| usize::from(g.attr.len));
        let mut v = Vec::new();
        let mut hdr = |command: u32, inw: u16, outw: u16| {
            v.extend_from_slice(&command.to_le_bytes());
            v.extend_from_slice(&inw.to_le_bytes());
            v.extend_from_slice(&outw.to_le_bytes());
        };
        if command & FLAG_EXTENDED != 0 {
            let words = |n: usize| u16::try_from(n / 8).ok().filter(|_| n % 8 == 0);
            hdr(command, words(core.len())?, words(out_len)?);
            let response = match out {
                Some(a) if a.len > 0 => a.data,
                _ => 0,
            };
            v.extend_from_slice(&response.to_le_bytes());
            v.extend_from_slice(&words(drv.len())?.to_le_bytes());
            v.extend_from_slice(&words(drv_out)?.to_le_bytes());
            v.extend_from_slice(&0u32.to_le_bytes());
        } else {
            let words = |n: usize| u16::try_from(n / 4).ok().filter(|_| n % 4 == 0);
            let total_in = 8 + core.len() + drv.len();
            hdr(command, words(total_in)?, words(out_len + drv_out)?);
        }
        v.extend_from_slice(core);
        v.extend_from_slice(drv);
        Some(v)
    }
}

/// Records the call `call` (copied before it ran at `arg`) and its outcome.
pub fn ioctl(arg: u64, call: Option<IoctlCall>, err: Option<c_int>) {
    let Some(call) = call else { return };
    let (obj, meth) = (call.hdr.object_id, call.hdr.method_id);
    // What the kernel marked as written.
    if err.is_none() {
        if let (Some((_, after)), Ok(mut outs)) = (read_call(arg), OUTPUTS.lock()) {
            for a in after {
                if a.flags & UVERBS_ATTR_F_VALID_OUTPUT != 0 {
                    outs.insert((obj, meth, a.attr_id));
                }
            }
        }
    }
    let result = result_word(err);
    if (obj, meth) == (object::DEVICE, dm::INVOKE_WRITE) {
        if let Some(bytes) = call.write_bytes() {
            append(&format!("write {result} {}\n", hex(&bytes)));
            return;
        }
    }
    let mut line = format!("ioctl {result} {obj:x} {meth:x}");
    for g in &call.attrs {
        let (id, flags) = (g.attr.attr_id, g.attr.flags);
        if is_output(obj, meth, id) {
            let _ = write!(line, " {id:x}:{flags:x}:out{:x}", g.attr.len);
        } else {
            let b = g.bytes.as_deref().unwrap_or(&[]);
            let _ = write!(line, " {id:x}:{flags:x}:{}", hex(b));
        }
    }
    line.push('\n');
    append(&line);
}
