//! Reading callgrind's output files: the instruction total that `bench`,
//! `regbench` and `scalebench` each report (shared here so that none of
//! them imports another for it).

/// An instruction-count result: instructions per measured iteration.
/// The instruction total of a callgrind output file (its `summary:` or
/// `totals:` line).
pub fn callgrind_total(data: &str) -> Option<u64> {
    data.lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.trim().parse().ok())
}
