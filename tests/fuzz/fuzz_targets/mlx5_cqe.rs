//! provider-mlx5's CQE decode (`cq::parse`, CQE versions 0 and 1 share
//! it): 64-byte CQEs as the device would write them, against a QP with
//! any combination of send queue, receive queue and SRQ.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rverbs_mlx5::cq::fuzz::cqes(data);
});
