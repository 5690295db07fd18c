//! `rverbs::Grh::parse`: the 40 bytes the network (the peer) puts in
//! front of every UD receive.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(g) = rverbs::Grh::parse(data) {
        let _ = format!("{g:?}");
    }
});
