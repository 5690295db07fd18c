//! WQE recording: with `MLX5_EMU_WQE_LOG=<path>` the HCA appends one text
//! line per object it first sees and per work queue entry it executes or
//! consumes, so `cargo xtask mlx5` can compare what two providers wrote.
//!
//! Format (one record a line, numbers in hex unless said otherwise):
//! - `mr <ord> <hca_va> <len> <lkey> <rkey>`: a memory region, `ord` its
//!   registration ordinal in the process (0, 1, ... by handle order).
//! - `qp <ord> <type> <sq_cnt> <sq_shift> <rq_cnt> <rq_shift> <qpn>`: a QP's
//!   geometry, once, `ord` its creation ordinal (CREATE_QP order).
//! - `srq <ord> <cnt> <shift>`: an SRQ's geometry, once.
//! - `wqe <ord> sq <bb_index> <db> <bytes>`: a send WQE as executed
//!   (`ds * 16` bytes, following the ring wrap), `db` the send doorbell
//!   record value (low 16 bits) the HCA acted on.
//! - `wqe <ord> rq <index> <db> <bytes>` / `wqe <srq_ord> srq <index> <db>
//!   <bytes>`: a receive WQE as consumed: its used bytes (the SRQ's 16-byte
//!   next segment, the scatter entries, and the terminating entry when
//!   there is one inside the stride).
//!
//! Ordinals are handed out when the HCA thread first sees an object (it
//! starts at the first QP or SRQ creation and looks at every pass), in
//! handle order, so they equal the creation order as long as no object is
//! created and destroyed between two passes, which a program that waits
//! for its completions (as wqe_seq.c does) never does.
//!
//! With `MLX5_EMU_CMD_LOG=<path>` every command the device receives is
//! appended too, one line each, before its response is written:
//! - `write <result> <bytes>`: a `write()` command, all its bytes (the
//!   uverbs header, the extended header if any, the core command and the
//!   driver data), `result` `ok` or the errno's name.
//! - `ioctl <result> <object> <method> <attr>...`: an ioctl method, each
//!   attribute as `<id>:<flags>:<data>`, `data` the input bytes (inline
//!   value or the bytes the pointer names) in hex, or `out<len>` for an
//!   output attribute.
//!
//! Not captured: the 8 bytes written to the UAR bfreg (doorbell register or
//! BlueFlame buffer). The emulator never reads them for send queues (it
//! acts on the doorbell record), and a slot is overwritten by the next
//! doorbell before the HCA thread may look at it, so what a concurrent
//! read would see is not deterministic.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use rverbs_abi::Errno;

use crate::emu::Emu;

/// The recorder: the log file and the ordinals handed out so far.
struct Recorder {
    file: File,
    qps: BTreeMap<u32, u32>,
    srqs: BTreeMap<u32, u32>,
    mrs: BTreeMap<u32, u32>,
}

static REC: OnceLock<Option<Mutex<Recorder>>> = OnceLock::new();

fn rec() -> Option<&'static Mutex<Recorder>> {
    REC.get_or_init(|| {
        let path = std::env::var_os("MLX5_EMU_WQE_LOG")?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()?;
        Some(Mutex::new(Recorder {
            file,
            qps: BTreeMap::new(),
            srqs: BTreeMap::new(),
            mrs: BTreeMap::new(),
        }))
    })
    .as_ref()
}

/// Whether recording is on.
pub fn enabled() -> bool {
    rec().is_some()
}

static CMD_LOG: OnceLock<Option<Mutex<File>>> = OnceLock::new();

fn cmd_log() -> Option<&'static Mutex<File>> {
    CMD_LOG
        .get_or_init(|| {
            let path = std::env::var_os("MLX5_EMU_CMD_LOG")?;
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .ok()?;
            Some(Mutex::new(file))
        })
        .as_ref()
}

fn result_word(result: Result<(), Errno>) -> String {
    match result {
        Ok(()) => "ok".into(),
        Err(e) => format!("{e:?}"),
    }
}

fn append_cmd(line: &str) {
    let Some(f) = cmd_log() else { return };
    let Ok(mut f) = f.lock() else { return };
    let _ = f.write_all(line.as_bytes());
}

/// Logs one `write()` command (all of `bytes`) and its outcome.
pub fn write_command(bytes: &[u8], result: Result<(), Errno>) {
    if cmd_log().is_none() {
        return;
    }
    append_cmd(&format!("write {} {}\n", result_word(result), hex(bytes)));
}

/// One ioctl attribute as recorded.
#[derive(Debug, Clone, Copy)]
pub enum AttrData<'a> {
    /// Input data: the inline value or the bytes the pointer names.
    In(&'a [u8]),
    /// An output attribute of this many bytes.
    Out(usize),
}

/// Logs one ioctl method call: object, method, attributes `(id, flags,
/// data)` in the order given, and its outcome.
pub fn ioctl_command(
    object: u16,
    method: u16,
    attrs: &[(u16, u16, AttrData<'_>)],
    result: Result<(), Errno>,
) {
    if cmd_log().is_none() {
        return;
    }
    let mut line = format!("ioctl {} {object:x} {method:x}", result_word(result));
    for (id, flags, data) in attrs {
        match data {
            AttrData::In(b) => line += &format!(" {id:x}:{flags:x}:{}", hex(b)),
            AttrData::Out(n) => line += &format!(" {id:x}:{flags:x}:out{n:x}"),
        }
    }
    line.push('\n');
    append_cmd(&line);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Gives ordinals to (and logs) the MRs, QPs and SRQs not seen before, in
/// handle (that is, creation) order.
pub fn note_objects(e: &Emu) {
    let Some(r) = rec() else { return };
    let Ok(mut r) = r.lock() else { return };
    let mut out = String::new();
    for (h, m) in &e.mrs {
        if !r.mrs.contains_key(h) {
            let ord = r.mrs.len() as u32;
            r.mrs.insert(*h, ord);
            out += &format!(
                "mr {ord} {:x} {:x} {:x} {:x}\n",
                m.hca_va, m.length, m.lkey, m.rkey
            );
        }
    }
    for (h, q) in &e.qps {
        if !r.qps.contains_key(h) {
            let ord = r.qps.len() as u32;
            r.qps.insert(*h, ord);
            out += &format!(
                "qp {ord} {:x} {:x} {:x} {:x} {:x} {:x}\n",
                q.qp_type, q.sq.wqe_cnt, q.sq.wqe_shift, q.rq.wqe_cnt, q.rq.wqe_shift, q.qpn
            );
        }
    }
    for (h, s) in &e.srqs {
        if !r.srqs.contains_key(h) {
            let ord = r.srqs.len() as u32;
            r.srqs.insert(*h, ord);
            let wq = s.wq();
            out += &format!("srq {ord} {:x} {:x}\n", wq.wqe_cnt, wq.wqe_shift);
        }
    }
    if !out.is_empty() {
        let _ = r.file.write_all(out.as_bytes());
    }
}

/// Queue kinds of a `wqe` record.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Send queue of a QP (handle).
    Sq,
    /// Receive queue of a QP (handle).
    Rq,
    /// Shared receive queue (handle).
    Srq,
}

/// Logs one WQE of object `handle`.
pub fn wqe(kind: Kind, handle: u32, index: u32, db: u32, bytes: &[u8]) {
    let Some(r) = rec() else { return };
    let Ok(mut r) = r.lock() else { return };
    let (map, name) = match kind {
        Kind::Sq => (&r.qps, "sq"),
        Kind::Rq => (&r.qps, "rq"),
        Kind::Srq => (&r.srqs, "srq"),
    };
    let ord = map.get(&handle).map_or(u32::MAX, |o| *o);
    let line = format!("wqe {ord} {name} {index:x} {db:x} {}\n", hex(bytes));
    let _ = r.file.write_all(line.as_bytes());
}
