//! perftest's `-R` comm messages from the peer, as `rverbs perf -R` reads
//! them: the version, an `int`, the MTU message, a dest (56 or 64 bytes)
//! and the five report figures turned back into a report.
#![no_main]

use rverbs_cli::perf::ptcomm::{
    parse_int, parse_mtu_msg, parse_version, BwFigures, PtDest, DEST_LEN,
};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = parse_version(data);
    let _ = parse_int(data);
    let _ = parse_mtu_msg(data);
    if let Ok(d) = PtDest::decode(data) {
        // The 56-byte form round-trips (the padding at 20..24 is dropped).
        if data.len() == DEST_LEN {
            assert_eq!(PtDest::decode(&d.encode()).ok(), Some(d));
        }
    }
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
