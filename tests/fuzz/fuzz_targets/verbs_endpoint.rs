//! `rverbs::Endpoint::from_bytes`: a peer's QP address.
#![no_main]

use rverbs::Endpoint;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(b) = data.first_chunk::<{ Endpoint::WIRE_LEN }>() {
        let e = Endpoint::from_bytes(b);
        assert_eq!(&e.to_bytes(), b);
    }
});
