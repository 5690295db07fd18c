//! provider-efa's completion entries (`cqe::decode`, `SubCq`): a CQ's
//! ring of sub-CQs with any bytes in it, polled by phase as the provider
//! polls it, 16- and 32-byte entries.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rverbs_efa::cqe::fuzz_ring(data);
});
