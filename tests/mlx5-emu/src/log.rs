//! Logging: with `MLX5_EMU_LOG=1` (any value but empty or `0`), one line
//! per command on stderr, written with the real `write`; silent otherwise.
//! Errors that make the device unusable (sysfs set-up) are always printed.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::real;

/// 0 = not read yet, 1 = off, 2 = on.
static STATE: AtomicU8 = AtomicU8::new(0);

/// Reads `MLX5_EMU_LOG` (called from the constructor; later calls are lazy).
pub fn init() {
    let on = std::env::var_os("MLX5_EMU_LOG").is_some_and(|v| !v.is_empty() && v != "0");
    STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether per-command logging is on.
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        0 => {
            init();
            enabled()
        }
        s => s == 2,
    }
}

/// Writes one line to stderr, regardless of the setting.
pub fn always(args: fmt::Arguments<'_>) {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let line = format!("mlx5-emu[{pid}]: {args}\n");
    real::write_all(2, line.as_bytes());
}

/// Writes one line to stderr if logging is on.
pub fn line(args: fmt::Arguments<'_>) {
    if enabled() {
        always(args);
    }
}
