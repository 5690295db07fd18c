//! What the device saw, for `cargo xtask efa` to compare two providers.
//!
//! With `EFA_EMU_CMD_LOG=<path>` every `write()` command is appended, one
//! line each: `write <result> <bytes>`, all its bytes in hex (the uverbs
//! header, the core command, EFA's driver data), `result` `ok` or the
//! errno's name.
//!
//! With `EFA_EMU_DESC_LOG=<path>` every descriptor the device executes
//! or consumes is appended: `tx <ord> <index> <bytes>` (a 64-byte send
//! descriptor at ring index `index`) and `rx <ord> <index> <bytes>` (a
//! 16-byte receive descriptor), `ord` the QP's creation ordinal in the
//! process (0, 1, ... in QP number order, which is creation order).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Mutex, OnceLock};

use rverbs_abi::Errno;

/// A log file, if its variable names one.
fn open(var: &str) -> Option<Mutex<File>> {
    let path = std::env::var_os(var)?;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .ok()?;
    Some(Mutex::new(file))
}

static CMDS: OnceLock<Option<Mutex<File>>> = OnceLock::new();
static DESCS: OnceLock<Option<Mutex<File>>> = OnceLock::new();

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn append(log: &OnceLock<Option<Mutex<File>>>, var: &str, line: &str) {
    if let Some(f) = log.get_or_init(|| open(var)) {
        let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(f, "{line}");
    }
}

/// Records a `write()` command and its outcome.
pub fn write_command(bytes: &[u8], result: Result<(), Errno>) {
    let r = match result {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("{e:?}"),
    };
    append(
        &CMDS,
        "EFA_EMU_CMD_LOG",
        &format!("write {r} {}", hex(bytes)),
    );
}

/// Whether descriptors are recorded.
pub fn descriptors() -> bool {
    DESCS.get_or_init(|| open("EFA_EMU_DESC_LOG")).is_some()
}

/// Records a descriptor of QP ordinal `ord` (`kind` `tx` or `rx`).
pub fn descriptor(kind: &str, ord: usize, index: u32, bytes: &[u8]) {
    append(
        &DESCS,
        "EFA_EMU_DESC_LOG",
        &format!("{kind} {ord} {index:x} {}", hex(bytes)),
    );
}
