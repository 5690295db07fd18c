//! The step protocol of the `mlx5_*` and `efa_*` programs (the same as their
//! C twins in `tests/mlx5-emu/c/` and `tests/efa-emu/c/`): each step prints `PASS <step>`; the
//! first failure prints `FAIL <step>: <why>` and ends the program with a
//! failure status, which `cargo xtask mlx5` and `cargo xtask efa` count.

use std::process::ExitCode;

/// A step's failure: the step and why.
#[derive(Debug)]
pub struct Fail(pub String, pub String);

/// A step's result.
pub type R<T = ()> = Result<T, Fail>;

/// Names the step an error (a verbs error, a lost ring) happened in.
pub trait At<T> {
    /// The error as a failure of `step`.
    fn at(self, step: &str) -> R<T>;
}

impl<T, E: std::fmt::Display> At<T> for Result<T, E> {
    fn at(self, step: &str) -> R<T> {
        self.map_err(|e| Fail(step.to_string(), e.to_string()))
    }
}

/// A failure of `step`.
pub fn fail<T>(step: &str, why: impl Into<String>) -> R<T> {
    Err(Fail(step.to_string(), why.into()))
}

/// `Ok` if `ok`, else a failure of `step` saying `what`.
pub fn expect(step: &str, ok: bool, what: &str) -> R {
    if ok {
        Ok(())
    } else {
        fail(step, what)
    }
}

/// Reports `step` as passed.
pub fn pass(step: &str) {
    println!("PASS {step}");
}

/// Reports `step` as passed, with a note.
pub fn pass_note(step: &str, note: &str) {
    println!("PASS {step} ({note})");
}

/// Runs the program's steps and reports the first failure.
pub fn main_with(run: impl FnOnce() -> R) -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(step, why)) => {
            println!("FAIL {step}: {why}");
            ExitCode::FAILURE
        }
    }
}
