//! `rverbs perf`'s control channel from the peer: the Hello (its first
//! 80 bytes) and then the tagged control messages, taken off the stream
//! one by one as `Ctrl` does.
#![no_main]

use rverbs_cli::perf::wire::{parse_msg, Hello, Msg, Report, HELLO_LEN, REPORT_LEN};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(h) = data.first_chunk::<HELLO_LEN>() {
        if let Ok(hello) = Hello::decode(h) {
            assert_eq!(Hello::decode(&hello.encode()).ok(), Some(hello));
        }
    }
    if let Some(r) = data.first_chunk::<REPORT_LEN>() {
        let rep = Report::decode(r);
        let _ = (rep.is_lat(), rep.is_duration(), rep.has_peak());
    }
    let mut rest = data;
    while let Ok(Some((m, used))) = parse_msg(rest) {
        assert!(used >= 1 && used <= rest.len());
        if let Msg::Report(r) = m {
            assert_eq!(r.encode(), Report::decode(&r.encode()).encode());
        }
        rest = &rest[used..];
    }
});
