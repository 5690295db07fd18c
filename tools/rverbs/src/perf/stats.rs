//! Turning raw timings into perftest's figures (peak and average bandwidth,
//! message rate; latency minimum, maximum, median, mean, deviation and
//! percentiles), and printing them as perftest's tables or as JSON.
//!
//! The definitions follow perftest so the numbers compare: bandwidth is
//! bytes over the time from the first post to the last completion (on the
//! SEND receiver, from releasing the client to the last receive; it has
//! no peak); the peak is the best per-message time over any window that
//! starts at a post and ends at a signaled completion; a latency sample is
//! the time between two consecutive posts of a ping-pong (halved for SEND
//! and WRITE, whose round trip crosses the wire twice), the two worst
//! samples are dropped, and the percentiles index the sorted samples
//! perftest's way.

use serde_json::{json, Value};

/// One size's results, as measured by one side. Bandwidths are in bytes
/// per second, latencies in microseconds, CPU times in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Report {
    /// Bit 0: a latency report (else bandwidth); bit 1: a `-D` run; bit 2:
    /// the peak bandwidth was measured.
    pub flags: u8,
    /// Message size.
    pub size: u64,
    /// Messages (bandwidth) or exchanges (latency) measured.
    pub iters: u64,
    /// Measured time, seconds.
    pub elapsed: f64,
    /// Best bandwidth over any window of messages (0 when not measured).
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Messages per second.
    pub msg_rate: f64,
    /// Smallest latency.
    pub t_min: f64,
    /// Largest latency (after dropping the two worst samples, as perftest).
    pub t_max: f64,
    /// Median latency.
    pub t_typical: f64,
    /// Mean latency.
    pub t_avg: f64,
    /// Standard deviation of the latency.
    pub t_stdev: f64,
    /// 99th percentile latency.
    pub p99: f64,
    /// 99.9th percentile latency.
    pub p999: f64,
    /// Transactions (round trips, reads) per second of a `-D` latency run.
    pub tps: f64,
    /// User CPU time of the measuring process during the run.
    pub cpu_user: f64,
    /// System CPU time of the measuring process during the run.
    pub cpu_sys: f64,
}

impl Report {
    /// Flag bit: latency report.
    pub const LAT: u8 = 1;
    /// Flag bit: `-D` run.
    pub const DURATION: u8 = 2;
    /// Flag bit: peak bandwidth measured.
    pub const PEAK: u8 = 4;

    /// Whether this is a latency report.
    pub fn is_lat(&self) -> bool {
        self.flags & Self::LAT != 0
    }
    /// Whether this comes from a `-D` run.
    pub fn is_duration(&self) -> bool {
        self.flags & Self::DURATION != 0
    }
    /// Whether the peak bandwidth was measured.
    pub fn has_peak(&self) -> bool {
        self.flags & Self::PEAK != 0
    }
}

/// perftest's separator line.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// Samples perftest drops from the top of the sorted latencies.
const LAT_TAIL: usize = 2;

/// Peak bandwidth: for every post (message index `a` = messages posted
/// before it, time `p`) and later signaled completion (`c` = messages
/// complete, time `q`), the time per message `(q - p) / (c - a)`; the best
/// one gives `size / time` bytes per second. Times are in nanoseconds.
/// Work is bounded: posts are sampled evenly when the pairs would exceed
/// about 20 million.
pub fn peak_bw(size: u64, posts: &[(u64, u64)], comps: &[(u64, u64)]) -> f64 {
    if posts.is_empty() || comps.is_empty() {
        return 0.0;
    }
    let budget = 20_000_000usize;
    let stride = (posts.len() * comps.len()).div_ceil(budget).max(1);
    let mut best = f64::INFINITY;
    let mut first = 0usize;
    for &(a, p) in posts.iter().step_by(stride) {
        while first < comps.len() && comps[first].0 <= a {
            first += 1;
        }
        for &(c, q) in &comps[first..] {
            let per = q.saturating_sub(p) as f64 / (c - a) as f64;
            if per < best {
                best = per;
            }
        }
    }
    if best.is_finite() && best > 0.0 {
        size as f64 * 1e9 / best
    } else {
        0.0
    }
}

/// A bandwidth report: `iters` messages of `size` bytes in `elapsed_ns`.
pub fn bw_report(size: u64, iters: u64, elapsed_ns: u64, peak: Option<f64>) -> Report {
    let secs = elapsed_ns.max(1) as f64 / 1e9;
    let mut r = Report {
        size,
        iters,
        elapsed: secs,
        bw_avg: size as f64 * iters as f64 / secs,
        msg_rate: iters as f64 / secs,
        ..Default::default()
    };
    if let Some(p) = peak {
        r.flags |= Report::PEAK;
        r.bw_peak = p;
    }
    r
}

/// A latency report from the post times `posted` (nanoseconds, one per
/// iteration), each sample divided by `rtt_factor`. Sorts `deltas` (a
/// scratch buffer of at least `posted.len() - 1` entries).
pub fn lat_report(size: u64, posted: &[u64], rtt_factor: u32, deltas: &mut Vec<f64>) -> Report {
    let iters = posted.len() as u64;
    deltas.clear();
    let div = 1000.0 * rtt_factor as f64;
    deltas.extend(
        posted
            .windows(2)
            .map(|w| w[1].saturating_sub(w[0]) as f64 / div),
    );
    let elapsed = match (posted.first(), posted.last()) {
        (Some(a), Some(b)) => b.saturating_sub(*a) as f64 / 1e9,
        _ => 0.0,
    };
    let mut r = Report {
        flags: Report::LAT,
        size,
        iters,
        elapsed,
        ..Default::default()
    };
    if deltas.len() <= LAT_TAIL {
        return r;
    }
    deltas.sort_by(|a, b| a.total_cmp(b));
    let m = deltas.len() - LAT_TAIL;
    let kept = &deltas[..m];
    let median = if (m - 1) % 2 == 1 {
        (kept[m / 2] + kept[m / 2 - 1]) / 2.0
    } else {
        kept[m / 2]
    };
    let avg = kept.iter().sum::<f64>() / m as f64;
    let var = kept.iter().map(|d| (d - avg) * (d - avg)).sum::<f64>() / m as f64;
    let at = |q: f64| deltas[((m as f64 * q).ceil() as usize).min(deltas.len() - 1)];
    r.t_min = kept[0];
    r.t_max = deltas[m];
    r.t_typical = median;
    r.t_avg = avg;
    r.t_stdev = var.sqrt();
    r.p99 = at(0.99);
    r.p999 = at(0.999);
    r
}

/// A latency report of a `-D` run: `iters` transactions in `elapsed_ns`.
pub fn lat_duration_report(size: u64, iters: u64, elapsed_ns: u64, rtt_factor: u32) -> Report {
    let secs = elapsed_ns.max(1) as f64 / 1e9;
    let n = iters.max(1) as f64;
    Report {
        flags: Report::LAT | Report::DURATION,
        size,
        iters,
        elapsed: secs,
        t_avg: secs * 1e6 / rtt_factor as f64 / n,
        tps: iters as f64 / secs,
        ..Default::default()
    }
}

/// How results are shown.
#[derive(Debug, Clone, Copy)]
pub struct Format {
    /// Gbit/s instead of MiB/s.
    pub gbits: bool,
    /// Add a CPU utilisation column.
    pub cpu_util: bool,
}

impl Format {
    /// The bandwidth unit: its label and its bytes per second.
    pub fn bw_unit(&self) -> (&'static str, f64) {
        if self.gbits {
            ("Gb/sec", 1.25e8)
        } else {
            ("MB/sec", 1048576.0)
        }
    }

    /// The column header of a report kind (bandwidth, latency, `-D`
    /// latency).
    pub fn header(&self, lat: bool, duration: bool) -> String {
        let mut h = if lat && duration {
            " #bytes        #iterations       t_avg[usec]    tps average".to_string()
        } else if lat {
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    \
             t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
                .to_string()
        } else {
            let (u, _) = self.bw_unit();
            format!(" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]")
        };
        if self.cpu_util {
            h.push_str("    CPU_Util[%]");
        }
        h
    }

    /// One table row, aligned under [`Format::header`].
    pub fn row(&self, r: &Report) -> String {
        let mut s = if r.is_lat() && r.is_duration() {
            format!(
                " {:<13} {:<17} {:<14.2} {:.2}",
                r.size, r.iters, r.t_avg, r.tps
            )
        } else if r.is_lat() {
            format!(
                " {:<6} {:<14} {:<14.2} {:<12.2} {:<18.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
                r.size, r.iters, r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.p99, r.p999
            )
        } else {
            let (_, div) = self.bw_unit();
            format!(
                " {:<10} {:<14} {:<18.2} {:<21.2} {:.6}",
                r.size,
                r.iters,
                r.bw_peak / div,
                r.bw_avg / div,
                r.msg_rate / 1e6
            )
        };
        if self.cpu_util {
            s.push_str(&format!("    {:.2}", cpu_util(r)));
        }
        s
    }

    /// One size as a JSON object.
    pub fn json(&self, r: &Report) -> Value {
        let mut v = if r.is_lat() && r.is_duration() {
            json!({
                "bytes": r.size,
                "iterations": r.iters,
                "t_avg_usec": r.t_avg,
                "tps": r.tps,
            })
        } else if r.is_lat() {
            json!({
                "bytes": r.size,
                "iterations": r.iters,
                "t_min_usec": r.t_min,
                "t_max_usec": r.t_max,
                "t_typical_usec": r.t_typical,
                "t_avg_usec": r.t_avg,
                "t_stdev_usec": r.t_stdev,
                "p99_usec": r.p99,
                "p99_9_usec": r.p999,
            })
        } else {
            let (unit, div) = self.bw_unit();
            json!({
                "bytes": r.size,
                "iterations": r.iters,
                "bw_unit": unit,
                "bw_peak": if r.has_peak() { json!(r.bw_peak / div) } else { Value::Null },
                "bw_average": r.bw_avg / div,
                "bw_average_bytes_per_sec": r.bw_avg,
                "msg_rate_mpps": r.msg_rate / 1e6,
            })
        };
        if let Value::Object(m) = &mut v {
            m.insert("elapsed_sec".into(), json!(r.elapsed));
            m.insert("cpu_user_sec".into(), json!(r.cpu_user));
            m.insert("cpu_sys_sec".into(), json!(r.cpu_sys));
            m.insert("cpu_util_pct".into(), json!(cpu_util(r)));
        }
        v
    }
}

/// CPU time over wall time of the run, percent.
pub fn cpu_util(r: &Report) -> f64 {
    if r.elapsed > 0.0 {
        (r.cpu_user + r.cpu_sys) / r.elapsed * 100.0
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_and_rate() {
        let r = bw_report(1 << 20, 100, 1_000_000_000, None);
        assert_eq!(r.bw_avg, 100.0 * 1048576.0);
        assert_eq!(r.msg_rate, 100.0);
        assert!(!r.has_peak());
        let f = Format {
            gbits: false,
            cpu_util: false,
        };
        let row = f.row(&r);
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols, ["1048576", "100", "0.00", "100.00", "0.000100"]);
        let g = Format {
            gbits: true,
            cpu_util: true,
        };
        assert!(g.header(false, false).contains("BW average[Gb/sec]"));
        assert!(g.header(false, false).ends_with("CPU_Util[%]"));
        let gcols: Vec<String> = g.row(&r).split_whitespace().map(String::from).collect();
        assert_eq!(gcols[3], format!("{:.2}", 100.0 * 1048576.0 * 8.0 / 1e9));
    }

    #[test]
    fn peak_is_the_best_window() {
        // Four messages, one per post; completions after 2 and 4. The
        // window of posts 2..4 (posted at 20, done at 40) is 10 ns/message.
        let posts = [(0, 0), (1, 10), (2, 20), (3, 30)];
        let comps = [(2, 35), (4, 40)];
        let p = peak_bw(10, &posts, &comps);
        assert!((p - 10.0 * 1e9 / 10.0).abs() < 1e-6, "{p}");
        assert_eq!(peak_bw(10, &[], &comps), 0.0);
    }

    #[test]
    fn latency_statistics_follow_perftest() {
        // Post times 0, 10, 20, ... with one slow round trip and two
        // outliers: samples (ns) 10 x7, 30, 1000, 2000.
        let gaps = [10u64, 10, 10, 10, 10, 10, 10, 30, 1000, 2000];
        let mut posted = vec![0u64];
        for g in gaps {
            posted.push(posted.last().unwrap() + g);
        }
        let mut scratch = Vec::new();
        let r = lat_report(2, &posted, 1, &mut scratch);
        assert!(r.is_lat());
        assert_eq!(r.iters, 11);
        // Kept (two worst dropped): 10 x7, 30 -> in usec.
        assert!((r.t_min - 0.01).abs() < 1e-12);
        assert!((r.t_typical - 0.01).abs() < 1e-12);
        assert!((r.t_avg - 0.0125).abs() < 1e-12);
        // perftest's t_max is the first dropped sample.
        assert!((r.t_max - 1.0).abs() < 1e-12);
        assert!((r.p99 - 1.0).abs() < 1e-12, "{}", r.p99);
        let halved = lat_report(2, &posted, 2, &mut scratch);
        assert!((halved.t_min - 0.005).abs() < 1e-12);
        let d = lat_duration_report(64, 1000, 1_000_000_000, 2);
        assert_eq!(d.tps, 1000.0);
        assert!((d.t_avg - 500.0).abs() < 1e-9);
    }

    #[test]
    fn rows_have_one_field_per_column() {
        let f = Format {
            gbits: false,
            cpu_util: true,
        };
        let mut scratch = Vec::new();
        let posted: Vec<u64> = (0..10).map(|i| i * 1000).collect();
        let lat = lat_report(2, &posted, 2, &mut scratch);
        // The header's labels contain spaces ("99% percentile"): count the
        // "[" of the units instead, plus #bytes and #iterations.
        let h = f.header(true, false);
        let cols = h.matches('[').count() + 2;
        assert_eq!(f.row(&lat).split_whitespace().count(), cols);
        let bw = bw_report(65536, 10, 1000, Some(1.0));
        let h = f.header(false, false);
        assert_eq!(
            f.row(&bw).split_whitespace().count(),
            h.matches('[').count() + 2
        );
        let j = f.json(&bw);
        assert_eq!(j["bytes"], 65536);
        assert!(j["cpu_util_pct"].is_number());
    }
}
