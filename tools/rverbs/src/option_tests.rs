//! Tests across the tools: every tool's `--timeout` is bounded as
//! `common::timeout_secs` says (one test, so that no tool's module needs
//! another's).

use crate::common::{parse_args, timeout_secs, Common, MAX_TIMEOUT_SECS};
use crate::mckey::MckeyArgs;
use crate::perf::PerfArgs;
use crate::rcopy::RcopyArgs;
use crate::rstream::RstreamArgs;

#[test]
fn every_timeout_option_is_bounded() {
    // Each would have panicked building its deadline (`Instant + Duration`).
    let max = MAX_TIMEOUT_SECS.to_string();
    assert_eq!(timeout_secs(&max), Ok(MAX_TIMEOUT_SECS));
    assert_eq!(timeout_secs("0x10"), Ok(16));
    for over in [(MAX_TIMEOUT_SECS + 1).to_string(), u64::MAX.to_string()] {
        let t = ["--timeout", over.as_str()];
        let e = timeout_secs(&over).unwrap_err();
        assert!(e.contains("longer than the longest timeout"), "{e}");
        let errs = [
            parse_args::<Common>("pp", &t).map(|_| ()),
            parse_args::<PerfArgs>("perf", &[&["write", "bw"][..], &t].concat()).map(|_| ()),
            parse_args::<RstreamArgs>("rstream", &t).map(|_| ()),
            parse_args::<RcopyArgs>("rcopy", &t).map(|_| ()),
        ];
        for e in errs {
            let e = e.unwrap_err().to_string();
            assert!(e.contains("longer than the longest timeout"), "{e}");
        }
        let e = parse_args::<MckeyArgs>("mckey", &t)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&max), "{e}");
    }
    assert_eq!(
        parse_args::<Common>("pp", &["--timeout", &max])
            .unwrap()
            .timeout,
        MAX_TIMEOUT_SECS
    );
    assert_eq!(
        parse_args::<MckeyArgs>("mckey", &["--timeout", &max])
            .unwrap()
            .timeout,
        MAX_TIMEOUT_SECS
    );
}
