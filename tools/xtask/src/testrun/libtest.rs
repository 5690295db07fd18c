//! Reading libtest's output: the `test result:` counts, the names and first
//! lines of the failed tests, and counting items as tests.

/// Passed and failed counts.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Counts {
    pub passed: u64,
    pub failed: u64,
}

impl Counts {
    pub(super) fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
    }
}

/// Sums libtest's `test result: ok. X passed; Y failed; ...` lines.
pub fn parse_libtest(output: &str) -> (Counts, usize) {
    let mut counts = Counts::default();
    let mut results = 0;
    for line in output.lines() {
        let Some((_, rest)) = line.split_once("test result:") else {
            continue;
        };
        results += 1;
        for part in rest.split(';') {
            let words: Vec<&str> = part.split_whitespace().collect();
            if let [.., n, what] = words.as_slice() {
                let Ok(n) = n.parse::<u64>() else { continue };
                match *what {
                    "passed" => counts.passed += n,
                    "failed" => counts.failed += n,
                    _ => {}
                }
            }
        }
    }
    (counts, results)
}

/// The tests libtest reported as failed (`test NAME ... FAILED`), each with
/// the first lines of its captured output (`---- NAME stdout ----`), so the
/// end of a long run names what failed and why.
pub fn failed_tests(output: &str) -> Vec<String> {
    /// Lines of a failure's output kept for the summary.
    const KEEP: usize = 6;
    let mut names: Vec<String> = output
        .lines()
        .filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... FAILED"))
        .map(str::to_owned)
        .collect();
    names.dedup();
    names
        .into_iter()
        .map(|name| {
            let header = format!("---- {name} stdout ----");
            let detail: Vec<&str> = output
                .lines()
                .skip_while(|l| *l != header)
                .skip(1)
                .take_while(|l| !l.starts_with("---- ") && !l.is_empty())
                .take(KEEP)
                .collect();
            if detail.is_empty() {
                name
            } else {
                format!("{name}: {}", detail.join(" | "))
            }
        })
        .collect()
}

/// Counts for one item from its exit status and output: a failing item
/// whose output reports no failed test counts as one failure; a passing
/// item without libtest lines (a script) counts as one pass.
pub(super) fn item_counts(success: bool, output: &str) -> Counts {
    let (mut counts, results) = parse_libtest(output);
    if !success && counts.failed == 0 {
        counts.failed += 1;
    }
    if success && results == 0 {
        counts.passed += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_libtest_lines() {
        let out = "running 2 tests\n\
            test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\
            test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let (c, n) = parse_libtest(out);
        assert_eq!(n, 2);
        assert_eq!(
            c,
            Counts {
                passed: 5,
                failed: 1
            }
        );
    }

    #[test]
    fn names_failed_tests_with_their_first_lines() {
        let out = "running 3 tests\n\
            test a::ok ... ok\n\
            test a::bad ... FAILED\n\
            test b::worse ... FAILED\n\
            \n\
            failures:\n\
            \n\
            ---- a::bad stdout ----\n\
            thread 'a::bad' panicked at src/a.rs:3:5:\n\
            assertion failed: x\n\
            \n\
            failures:\n\
            \x20   a::bad\n\
            \x20   b::worse\n\
            test result: FAILED. 1 passed; 2 failed;\n";
        assert_eq!(
            failed_tests(out),
            vec![
                "a::bad: thread 'a::bad' panicked at src/a.rs:3:5: | assertion failed: x"
                    .to_string(),
                "b::worse".to_string(),
            ]
        );
        assert!(failed_tests("test result: ok. 2 passed; 0 failed;\n").is_empty());
    }

    #[test]
    fn item_counting() {
        assert_eq!(
            item_counts(true, "hello\n"),
            Counts {
                passed: 1,
                failed: 0
            }
        );
        assert_eq!(
            item_counts(false, "segfault\n"),
            Counts {
                passed: 0,
                failed: 1
            }
        );
        let zero = "test result: ok. 0 passed; 0 failed; 0 ignored;\n";
        assert_eq!(item_counts(true, zero), Counts::default());
    }
}
