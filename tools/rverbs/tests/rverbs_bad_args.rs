//! The built `rverbs` binary given numbers it cannot use: it must exit
//! with status 1 and a clear message, never panic (status 101) or wrap.

use std::process::Command;

/// Runs `rverbs args...`; returns (exit code, stderr).
fn rverbs(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rverbs"))
        .args(args)
        .output()
        .expect("running rverbs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn rx_depths_the_cq_cannot_hold_are_clear_errors() {
    for args in [
        &["rc-pingpong", "-r", "4294967295"][..],
        &["uc-pingpong", "-r", "4294967295", "10.0.0.1"],
        &["ud-pingpong", "-r", "0xffffffff"],
        &["srq-pingpong", "-q", "16", "-r", "4294967290"],
    ] {
        let (code, err) = rverbs(args);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert!(
            err.contains("rverbs: error: -r/--rx-depth") && err.contains("too large"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn numbers_out_of_range_are_refused_by_the_parser() {
    for args in [
        &["rc-pingpong", "-r", "4294967296"][..],
        &["rc-pingpong", "-n", "18446744073709551616"],
        &["perf", "write", "bw", "-s", "18446744073709551615"],
        &["perf", "write", "bw", "-n", "99999999999"],
        &["perf", "send", "bw", "-r", "4294967295"],
        &[
            "perf",
            "write",
            "bw",
            "-D",
            "4294967295",
            "-f",
            "2147483648",
        ],
        &["inspect", "--pid", "4294967296"],
    ] {
        let (code, err) = rverbs(args);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            matches!(code, Some(1) | Some(2)),
            "{args:?}: status {code:?}: {err}"
        );
        assert!(err.contains("error"), "{args:?}: {err}");
    }
}
