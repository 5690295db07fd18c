//! What every step reports through: a step's failure ([`Fail`], [`R`],
//! [`fail`], [`expect`], [`Ctx::at`] for verbs errors), the PASS/FAIL
//! lines of one group ([`Report`]) and the run's [`BUDGET`].

use std::time::{Duration, Instant};

/// The whole run's budget: what is left is reported as not run (the xtask
/// kills the process after 60 s).
pub(crate) const BUDGET: Duration = Duration::from_secs(50);

/// A step's failure: the step (C name) and why.
#[derive(Debug)]
pub(crate) struct Fail {
    pub(crate) step: &'static str,
    pub(crate) why: String,
}

pub(crate) type R<T = ()> = Result<T, Fail>;

pub(crate) fn fail<T>(step: &'static str, why: impl Into<String>) -> R<T> {
    Err(Fail {
        step,
        why: why.into(),
    })
}

pub(crate) fn expect(step: &'static str, ok: bool, what: &str) -> R {
    if ok {
        Ok(())
    } else {
        fail(step, what)
    }
}

/// Maps a verbs error to a step failure.
pub(crate) trait Ctx<T> {
    fn at(self, step: &'static str) -> R<T>;
}

impl<T, E: std::fmt::Display> Ctx<T> for Result<T, E> {
    fn at(self, step: &'static str) -> R<T> {
        self.map_err(|e| Fail {
            step,
            why: e.to_string(),
        })
    }
}

/// Prints the PASS/FAIL lines of one group and remembers what was said.
pub(crate) struct Report {
    group: &'static str,
    names: &'static [&'static str],
    done: Vec<&'static str>,
    failed: usize,
    start: Instant,
}

impl Report {
    pub(crate) fn new(
        group: &'static str,
        names: &'static [&'static str],
        start: Instant,
    ) -> Report {
        Report {
            group,
            names,
            done: Vec::new(),
            failed: 0,
            start,
        }
    }

    pub(crate) fn pass(&mut self, step: &'static str) {
        self.pass_note(step, "");
    }

    pub(crate) fn pass_note(&mut self, step: &'static str, note: &str) {
        if note.is_empty() {
            println!("PASS {}/{step}", self.group);
        } else {
            println!("PASS {}/{step} ({note})", self.group);
        }
        self.done.push(step);
    }

    pub(crate) fn fail(&mut self, f: &Fail) {
        println!("FAIL {}/{}: {}", self.group, f.step, f.why);
        self.done.push(f.step);
        self.failed += 1;
    }

    /// Reports a scenario's result; `Err` steps print FAIL.
    pub(crate) fn outcome(&mut self, r: R) {
        if let Err(f) = r {
            self.fail(&f);
        }
    }

    pub(crate) fn over_budget(&self) -> bool {
        self.start.elapsed() > BUDGET
    }

    /// FAILs every step of `names` not yet reported, saying why.
    pub(crate) fn not_run(&mut self, names: &[&'static str], why: &str) {
        for &n in names {
            if !self.done.contains(&n) {
                self.fail(&Fail {
                    step: n,
                    why: format!("not run: {why}"),
                });
            }
        }
    }

    /// Closes the group: steps never reported are FAILs.
    pub(crate) fn finish(mut self) -> usize {
        let names = self.names;
        self.not_run(names, "an earlier step of its scenario failed");
        self.failed
    }
}
