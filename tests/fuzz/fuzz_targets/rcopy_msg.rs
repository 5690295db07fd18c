//! rcopy's messages from a peer (`rverbs_cli::rcopy`): a header
//! (`Hdr::decode`) and the destination path of an OPEN (`dest_name`). A
//! header is an error or one that encodes back to the same bytes; a name
//! is an error or one plain component (no separator, not `.` or `..`).
#![no_main]

use rverbs_cli::rcopy::{dest_name, Hdr, HDR_LEN};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(b) = data.first_chunk::<HDR_LEN>() {
        if let Ok(h) = Hdr::decode(b) {
            assert_eq!(&h.encode(), b);
            assert!(usize::from(h.len) >= HDR_LEN);
        }
    }
    if let Ok(n) = dest_name(data) {
        let s = n.as_os_str().as_encoded_bytes();
        assert!(!s.is_empty() && !s.contains(&b'/') && !s.contains(&0));
        assert!(s != b"." && s != b"..");
    }
});
