//! The emulated device's own thread: started once, it runs passes over
//! the device state for ever (a daemon: the process exits without joining
//! it), with a bounded back-off when a pass finds nothing to do (yield,
//! then sleep 50 us, 100 us, and after about a second without work
//! 500 us), so an idle emulator costs little and a busy one answers at
//! once.

use std::sync::Once;
use std::time::Duration;

/// Starts the device thread once per `once`: `pass` runs again and again
/// and says whether it found work. A failure to spawn is logged; the
/// device then executes nothing (the application's waits time out).
pub fn start(once: &'static Once, name: &str, pass: impl FnMut() -> bool + Send + 'static) {
    once.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || run(pass));
        if let Err(e) = spawned {
            crate::log::always(format_args!("cannot start the device thread: {e}"));
        }
    });
}

/// The thread body.
fn run(mut pass: impl FnMut() -> bool) {
    let mut idle = 0u32;
    loop {
        if pass() {
            idle = 0;
        } else if idle < 64 {
            idle += 1;
            std::thread::yield_now();
        } else if idle < 2048 {
            idle += 1;
            std::thread::sleep(Duration::from_micros(50));
        } else if idle < 12_288 {
            idle += 1;
            std::thread::sleep(Duration::from_micros(100));
        } else {
            // Idle for about a second: poll slower still.
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}
