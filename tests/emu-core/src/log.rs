//! Logging: with the emulator's log variable set (`MLX5_EMU_LOG=1`,
//! `EFA_EMU_LOG=1`: any value but empty or `0`), one line per command on
//! stderr, written with the real `write`; silent otherwise. Errors that
//! make the device unusable (sysfs set-up) are always printed.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::real;

/// 0 = not read yet, 1 = off, 2 = on.
static STATE: AtomicU8 = AtomicU8::new(0);
/// The emulator's name (line prefix) and log variable, set once by
/// [`init`].
static NAMES: OnceLock<(&'static str, &'static str)> = OnceLock::new();

/// Names the emulator (`name` prefixes every line) and reads its log
/// variable `env` (called from the constructor).
pub fn init(name: &'static str, env: &'static str) {
    let _ = NAMES.set((name, env));
    read_setting();
}

fn read_setting() {
    let on = NAMES
        .get()
        .is_some_and(|(_, env)| std::env::var_os(env).is_some_and(|v| !v.is_empty() && v != "0"));
    STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether per-command logging is on.
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        0 => {
            read_setting();
            enabled()
        }
        s => s == 2,
    }
}

/// Writes one line to stderr, regardless of the setting.
pub fn always(args: fmt::Arguments<'_>) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let name = NAMES.get().map_or("uverbs-emu", |(n, _)| n);
    let line = format!("{name}[{pid}]: {args}\n");
    real::write_all(2, line.as_bytes());
}

/// Writes one line to stderr if logging is on.
pub fn line(args: fmt::Arguments<'_>) {
    if enabled() {
        always(args);
    }
}
