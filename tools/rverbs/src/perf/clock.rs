//! Timestamps for the latency loops: the CPU's time-stamp counter on
//! x86-64 (one `rdtsc`, the counter perftest reads), CLOCK_MONOTONIC
//! elsewhere, converted to nanoseconds with a rate measured against
//! CLOCK_MONOTONIC once per run.
//!
//! Why not `Instant::now()` every iteration: when the kernel's clocksource
//! is not the TSC (a guest under QEMU's TCG picks the HPET), each
//! clock_gettime is a system call that costs about a microsecond, which
//! is several percent of a 20 us round trip, and perftest pays nothing of
//! the kind. A TSC read costs the same few cycles everywhere.

use std::time::{Duration, Instant};

/// How long [`Clock::calibrate`] measures the counter's rate.
const CALIBRATION: Duration = Duration::from_millis(20);

/// The counter's rate, and how often a loop should look at the real clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    ns_per_tick: f64,
    /// Ticks in about a millisecond.
    check: u64,
}

impl Clock {
    /// Measures the counter's rate over [`CALIBRATION`] (a sleep, once per
    /// run, before anything is timed).
    pub fn calibrate() -> Clock {
        let (t0, c0) = (Instant::now(), ticks());
        std::thread::sleep(CALIBRATION);
        let (t1, c1) = (Instant::now(), ticks());
        let ns = t1.saturating_duration_since(t0).as_nanos() as f64;
        let dc = c1.wrapping_sub(c0);
        // A counter that did not move (it cannot, short of a broken TSC)
        // would give no rate: count it as one tick per nanosecond.
        let ns_per_tick = if dc == 0 { 1.0 } else { ns / dc as f64 };
        Clock {
            ns_per_tick,
            check: (1_000_000.0 / ns_per_tick).max(1.0) as u64,
        }
    }

    /// The counter now.
    #[inline(always)]
    pub fn now(&self) -> u64 {
        ticks()
    }

    /// Ticks in about a millisecond: how far apart a loop looks at the
    /// real clock (timeouts, progress line, `-D` phases).
    pub fn check_interval(&self) -> u64 {
        self.check
    }

    /// Turns counter stamps into nanoseconds since the first of them.
    pub fn stamps_to_nanos(&self, stamps: &mut [u64]) {
        let Some(&first) = stamps.first() else {
            return;
        };
        for s in stamps {
            *s = (s.wrapping_sub(first) as f64 * self.ns_per_tick) as u64;
        }
    }
}

/// The time-stamp counter.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn ticks() -> u64 {
    // SAFETY: RDTSC reads a counter and touches no memory; every x86-64
    // CPU has it (CR4.TSD, which would fault it in user mode, is not set
    // by Linux unless a process asked for it with PR_SET_TSC, which we do
    // not).
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_rdtsc()
    }
}

/// Nanoseconds of CLOCK_MONOTONIC since the first call.
#[cfg(not(target_arch = "x86_64"))]
fn ticks() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_convert_to_elapsed_nanoseconds() {
        let c = Clock::calibrate();
        assert!(c.ns_per_tick > 0.0 && c.check_interval() >= 1);
        let t0 = Instant::now();
        let a = c.now();
        std::thread::sleep(Duration::from_millis(30));
        let b = c.now();
        let real = t0.elapsed().as_nanos() as f64;
        let mut s = [a, b];
        c.stamps_to_nanos(&mut s);
        assert_eq!(s[0], 0);
        // Within 20% of CLOCK_MONOTONIC (the sleep is at least 30 ms).
        let got = s[1] as f64;
        assert!(
            got > 0.8 * 30e6 && got < 1.2 * real,
            "30 ms sleep measured as {got} ns by the counter, {real} ns by the clock"
        );
    }
}
