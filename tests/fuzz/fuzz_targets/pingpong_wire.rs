//! The pingpong tools' address message from the peer
//! (`rverbs::wire::Dest::decode`): any bytes are an error or a
//! destination that encodes back to the same fields.
#![no_main]

use rverbs_cli::wire::{gid_from_wire, Dest};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(d) = Dest::decode(data) {
        let again = d.encode().expect("a decoded destination encodes");
        assert_eq!(Dest::decode(&again).ok(), Some(d));
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = gid_from_wire(s);
    }
});
