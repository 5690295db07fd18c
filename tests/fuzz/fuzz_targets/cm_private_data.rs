//! `rverbs_cm::private::unframe` on a peer's private data: the payload
//! is a prefix of what follows the two-byte header, or an error; never a
//! panic. Whatever `frame` makes, `unframe` reads back.
#![no_main]

use rverbs_cm::private::{frame, unframe, FRAME_HEADER};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(p) = unframe(data) {
        assert_eq!(p, &data[FRAME_HEADER..FRAME_HEADER + p.len()]);
    }
    if let Ok(f) = frame(data, 196) {
        assert_eq!(unframe(&f).unwrap(), data);
    }
});
