//! Programs that must not compile: misuses of the safe API that would be
//! undefined behaviour if they were accepted. Every `tests/ui/*.rs` must fail
//! to compile with the error in its `.stderr` (regenerate those with
//! `TRYBUILD=overwrite cargo test -p rverbs-cm --test compile_fail` after
//! checking the new errors are the intended ones).

#[test]
fn misuses_do_not_compile() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
