//! Compile-fail tests: what the API must not let safe code write. Every
//! `tests/ui/*.rs` must fail to compile with the error in its `.stderr`
//! (regenerate those with `TRYBUILD=overwrite cargo test -p verbs --test
//! compile_fail` after checking the new errors are the intended ones).

#[test]
fn ui() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
