//! The barriers between the CPU and the device, each defined once per
//! architecture (the roles of rdma-core's `util/udma_barrier.h`).
//!
//! The device is outside the Rust memory model: what matters is the
//! instruction each barrier becomes. On x86-64 stores reach memory in
//! program order (TSO) and loads are not reordered with older loads, so the
//! ordering barriers only need to stop the compiler; write-combining
//! stores to the UAR are the exception and need `sfence`. On aarch64 the
//! device is in the outer-shareable domain, so the ordering barriers are
//! `dmb osh*` (the inner-shareable `dmb ish*` that Rust's fences emit does
//! not cover it) and flushing write-combining stores takes `dsb st`.
//! Other architectures get a full fence (correct, perhaps slower).

/// Orders the CPU's earlier stores to memory the device reads (WQEs,
/// `wr_id`s, a CQ's compacted entries) before its later stores (the
/// doorbell record that tells the device about them):
/// `udma_to_device_barrier`.
#[inline(always)]
pub(crate) fn to_device() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshst` only orders stores; it touches no memory, stack
    // or flags. Without `nomem` the compiler treats it as a memory access,
    // so it also keeps the compiler from moving stores across it.
    unsafe {
        std::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    // A release fence is no instruction on x86-64 (stores stay in order)
    // and, for a reader in this process (the emulated device), makes the
    // following relaxed doorbell-record store publish the earlier stores.
    #[cfg(target_arch = "x86_64")]
    std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
    #[cfg(not(any(target_arch = "aarch64", target_arch = "x86_64")))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Orders the read of a CQE's ownership byte before the reads of its body
/// (written by the device before the ownership byte):
/// `udma_from_device_barrier`.
#[inline(always)]
pub(crate) fn from_device() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshld` only orders loads; it touches no memory, stack
    // or flags (and, without `nomem`, is a compiler barrier too).
    unsafe {
        std::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    // An acquire fence is no instruction on x86-64 (loads are not
    // reordered with older loads) and, for a producer in this process
    // (the emulated device), the fence that pairs with its release store
    // of the ownership byte.
    #[cfg(not(target_arch = "aarch64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
}

/// Orders earlier stores (the doorbell record) before the following
/// write-combining stores to the UAR: `mmio_wc_start`.
#[inline(always)]
pub(crate) fn wc_start() {
    flush_writes();
}

/// Pushes write-combining stores to the UAR out of the CPU (before another
/// doorbell may follow): `mmio_flush_writes`.
#[inline(always)]
pub(crate) fn flush_writes() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` only orders stores; it touches no memory, stack or
    // flags. (Inline assembly rather than `_mm_sfence`, which is an
    // `unsafe fn` on some toolchains and safe on others.)
    unsafe {
        std::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dsb st` waits for earlier stores to complete; it touches no
    // memory, stack or flags.
    unsafe {
        std::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "aarch64", target_arch = "x86_64")))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The barriers are callable on this architecture (each is inline
    /// assembly or a fence).
    #[test]
    fn barriers() {
        to_device();
        from_device();
        wc_start();
        flush_writes();
    }
}
