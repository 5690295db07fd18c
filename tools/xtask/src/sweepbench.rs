//! The message-size sweeps of `cargo xtask bench`: `rverbs perf -a` and
//! perftest's `ib_*_{bw,lat} -a` (every power of two from 2 B to 8 MiB,
//! perftest's own sweep), run once each, server and client on rxe0 in the
//! same guest, alternating which tool goes first. Their figures feed the
//! latency and bandwidth charts (module `charts`); the fixed-size cases
//! with repeats and ratio spreads stay in `bench`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{bail, Result};

use crate::perfrun::{
    client_output, measured, parse_perftest_rows, parse_rverbs_rows, server_client, Kind, Sample,
    Tool, DEVICE, GID_INDEX,
};
use crate::util::shell_quote;

/// First TCP port of the sweep runs (the fixed-size cases use 19000 up).
const FIRST_PORT: u16 = 19600;
/// Time limit of one process of a sweep: the 8 MiB step alone moves about
/// a gigabyte through rxe under TCG.
const LIMIT_SECS: u32 = 900;
/// Largest size of perftest's `-a`, which rverbs perf's `-a` matches.
pub const MAX_SIZE: u64 = 1 << 23;

/// One sweep: `rverbs perf VERB KIND -a` against `ib_VERB_KIND -a`.
pub struct Sweep {
    /// send, write or read.
    pub verb: &'static str,
    /// Bandwidth or latency.
    pub kind: Kind,
    /// Iterations per size.
    pub iters: u64,
}

impl Sweep {
    /// `VERB bw` or `VERB lat`.
    pub fn test(&self) -> String {
        format!("{} {}", self.verb, self.kind.name())
    }

    /// The chart's file stem: `bw-write`, `lat-send`, ...
    pub fn stem(&self) -> String {
        format!("{}-{}", self.kind.name(), self.verb)
    }

    /// The options both tools get, with perftest's letters. Bandwidth
    /// sweeps run 64 requests in flight with a completion every 16 (the
    /// same on both sides; perftest would otherwise clamp its depth of 128
    /// to the iteration count and drain its pipeline at every signal).
    fn args(&self, port: u16) -> Vec<String> {
        let mut a: Vec<String> = [
            "-d",
            DEVICE,
            "-x",
            GID_INDEX,
            "-a",
            "-n",
            &self.iters.to_string(),
            "-p",
            &port.to_string(),
            "-F",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if self.kind == Kind::Bw {
            a.extend(["-t", "64", "-Q", "16"].map(String::from));
        }
        a
    }
}

/// The sweeps: bandwidth of WRITE and SEND, latency of SEND, WRITE and
/// READ. Iteration counts keep the whole set to a few minutes under TCG
/// (the large sizes dominate: 128 x 8 MiB per bandwidth sweep).
pub fn sweeps() -> Vec<Sweep> {
    let mut v = Vec::new();
    for verb in ["write", "send"] {
        v.push(Sweep {
            verb,
            kind: Kind::Bw,
            iters: 128,
        });
    }
    for verb in ["send", "write", "read"] {
        v.push(Sweep {
            verb,
            kind: Kind::Lat,
            iters: 64,
        });
    }
    v
}

fn name(index: usize, tool: Tool) -> String {
    format!("sweep-{index}-{}", tool.tag())
}

/// Appends the guest commands of every sweep, both tools, alternating
/// which goes first.
pub fn payload(s: &mut String, rverbs: &str, sweeps: &[Sweep]) -> Result<()> {
    let mut port = FIRST_PORT;
    for (i, sw) in sweeps.iter().enumerate() {
        let order = if i % 2 == 0 {
            [Tool::Rverbs, Tool::RdmaCore]
        } else {
            [Tool::RdmaCore, Tool::Rverbs]
        };
        for tool in order {
            port += 1;
            let mut argv: Vec<String> = match tool {
                Tool::Rverbs => {
                    let mut v = vec![rverbs.to_string(), "perf".into()];
                    v.extend(sw.test().split(' ').map(String::from));
                    v.push("--json".into());
                    // A server that does not run (write bw, read lat)
                    // waits --timeout for the client's whole sweep.
                    v.extend(["--timeout".into(), LIMIT_SECS.to_string()]);
                    v
                }
                Tool::RdmaCore => vec![format!("ib_{}", sw.test().replace(' ', "_"))],
            };
            argv.extend(sw.args(port).iter().map(|a| shell_quote(a)));
            writeln!(s, "echo \"bench: sweep {} {}\"", tool.tag(), sw.test())?;
            server_client(s, &name(i, tool), &argv.join(" "), port, LIMIT_SECS)?;
        }
    }
    Ok(())
}

/// One sweep's figures per size: (bytes, figures), sizes ascending.
pub type Points = Vec<(u64, Sample)>;

/// One tool's sweep: the sizes it measured, and those it printed no
/// measurement for (perftest under TCG now and then prints a row of 0.00
/// or inf for one size: that size is left out, not the whole sweep).
#[derive(Debug, Clone, Default)]
pub struct Sweep1 {
    /// Measured sizes.
    pub points: Points,
    /// Sizes with a row but no measurement.
    pub unmeasured: Vec<u64>,
}

/// Checks a sweep's rows: sizes strictly ascending powers of two within
/// perftest's range; rows without a measurement set aside. Fails if no
/// size was measured.
fn checked(rows: Points) -> Result<Sweep1> {
    let mut last = 0;
    let mut out = Sweep1::default();
    for (bytes, s) in rows {
        if !bytes.is_power_of_two() || bytes <= last || bytes > MAX_SIZE {
            bail!("size {bytes} out of order or out of the sweep's range");
        }
        last = bytes;
        match measured(s) {
            Ok(s) => out.points.push((bytes, s)),
            Err(_) => out.unmeasured.push(bytes),
        }
    }
    if out.points.is_empty() {
        bail!("no size was measured");
    }
    Ok(out)
}

/// Reads one tool's sweep number `index`.
pub fn read(out: &Path, index: usize, sweep: &Sweep, tool: Tool) -> Result<Sweep1> {
    let client = client_output(out, &name(index, tool))?;
    checked(match tool {
        Tool::Rverbs => parse_rverbs_rows(&client, sweep.kind)?,
        Tool::RdmaCore => parse_perftest_rows(&client, sweep.kind)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_tools_sweeps() {
        let dir = std::env::temp_dir().join(format!("sweepbench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sw = Sweep {
            verb: "send",
            kind: Kind::Lat,
            iters: 64,
        };
        let ours = name(0, Tool::Rverbs);
        std::fs::write(dir.join(format!("{ours}.status")), "0 0\n").unwrap();
        std::fs::write(
            dir.join(format!("{ours}.client")),
            r#"{"results":[{"bytes":2,"t_typical_usec":8.1,"t_avg_usec":8.3},{"bytes":4,"t_typical_usec":8.2,"t_avg_usec":8.4}]}"#,
        )
        .unwrap();
        let theirs = name(0, Tool::RdmaCore);
        std::fs::write(dir.join(format!("{theirs}.status")), "0 0\n").unwrap();
        std::fs::write(
            dir.join(format!("{theirs}.client")),
            " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]\n \
             2       64          7.0          90.0      8.30    \t       8.50\n \
             4       64          7.1          91.0      8.40    \t       8.60\n\
             ----------------------------------------\n",
        )
        .unwrap();
        let a = read(&dir, 0, &sw, Tool::Rverbs).unwrap().points;
        let b = read(&dir, 0, &sw, Tool::RdmaCore).unwrap().points;
        assert_eq!(
            a.iter().map(|p| (p.0, p.1.a)).collect::<Vec<_>>(),
            [(2, 8.1), (4, 8.2)]
        );
        assert_eq!(
            b.iter().map(|p| (p.0, p.1.b)).collect::<Vec<_>>(),
            [(2, 8.5), (4, 8.6)]
        );
        // A failed side is an error, not an empty sweep.
        std::fs::write(dir.join(format!("{theirs}.status")), "1 0\n").unwrap();
        assert!(read(&dir, 0, &sw, Tool::RdmaCore).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn refuses_sizes_out_of_order_or_range() {
        let s = Sample { a: 1.0, b: 1.0 };
        assert!(checked(vec![(2, s), (4, s)]).is_ok());
        assert!(checked(vec![(4, s), (2, s)]).is_err());
        assert!(checked(vec![(3, s)]).is_err());
        assert!(checked(vec![(MAX_SIZE * 2, s)]).is_err());
        // A row of 0.00 or inf is set aside, the rest kept; nothing
        // measured at all is an error.
        let zero = Sample { a: 0.0, b: 0.0 };
        let inf = Sample {
            a: f64::INFINITY,
            b: f64::INFINITY,
        };
        let c = checked(vec![(2, s), (4, zero), (8, inf), (16, s)]).unwrap();
        assert_eq!(c.points.iter().map(|p| p.0).collect::<Vec<_>>(), [2, 16]);
        assert_eq!(c.unmeasured, [4, 8]);
        assert!(checked(vec![(2, zero)]).is_err());
    }

    #[test]
    fn both_tools_get_the_same_options() {
        let mut s = String::new();
        payload(&mut s, "/x/rverbs", &sweeps()).unwrap();
        let ours = s
            .lines()
            .find(|l| l.contains("/x/rverbs perf write bw"))
            .unwrap();
        let theirs = s.lines().find(|l| l.contains("ib_write_bw ")).unwrap();
        // Everything after the program but the port, which each run has its own.
        let opts = |l: &str| {
            let a = l.split(" -d ").nth(1).unwrap().split(" >").next().unwrap();
            let (head, tail) = a.split_once(" -p ").unwrap();
            format!("{head} {}", tail.split_once(' ').unwrap().1)
        };
        assert_eq!(opts(ours), opts(theirs));
        assert!(opts(ours).contains("-a -n 128"));
    }
}
