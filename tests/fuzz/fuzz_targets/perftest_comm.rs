//! perftest's control messages from the peer, as `rverbs perf` reads them
//! over either channel: the version (and the test an `rverbs perf` peer
//! describes after it), an `int`, the MTU message, the keys in their
//! binary form (`-R`: 56 or 64 bytes) and their text form (TCP: the first
//! 59 bytes tell the length, 59 or 108), and the five report figures
//! turned back into a report.
#![no_main]

use rverbs_cli::perf::ptmsg::{
    parse_int, parse_mtu_msg, parse_version, version_msg, BwFigures, PtDest, TestDesc, DEST_LEN,
    KEY_LEN, KEY_LEN_GID,
};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = parse_version(data);
    if let Some(d) = TestDesc::from_version(data) {
        // What we decoded is what we would send.
        assert_eq!(TestDesc::from_version(&version_msg(&d)), Some(d));
        let _ = d.describe();
    }
    let _ = parse_int(data);
    let _ = parse_mtu_msg(data);
    if let Ok(d) = PtDest::decode(data) {
        // The 56-byte form round-trips (the padding at 20..24 is dropped).
        if data.len() == DEST_LEN {
            assert_eq!(PtDest::decode(&d.encode()).ok(), Some(d));
        }
    }
    // The TCP form as the channel reads it: the length from the first
    // KEY_LEN bytes, then the whole message.
    if let Ok(len) = PtDest::text_len(data) {
        assert!(len == KEY_LEN || len == KEY_LEN_GID);
        if let Some(m) = data.get(..len) {
            if let Ok(d) = PtDest::decode_text(m) {
                // Re-encoded in the same form, it decodes the same (our
                // encoder cuts numbers to their widths: the peer's may be
                // shorter or wider, never past the form's length).
                let again = d.encode_text(len == KEY_LEN_GID);
                assert_eq!(again.len(), len);
                let back = PtDest::decode_text(&again).ok();
                assert!(back.is_some());
            }
        }
    }
    let _ = PtDest::decode_text(data);
    if let Some(b) = data.first_chunk::<40>() {
        let mut m = [[0u8; 8]; 5];
        for (i, c) in b.chunks_exact(8).enumerate() {
            m[i].copy_from_slice(c);
        }
        let f = BwFigures::decode(&m);
        for unit in [1_048_576.0, 1.25e8] {
            let r = f.to_report(unit);
            assert!(r.bw_avg.is_finite() && r.bw_peak.is_finite() && r.msg_rate.is_finite());
        }
    }
});
