//! Programs that must not compile: misuses of the safe API that would be
//! undefined behaviour if they were accepted (tests/ui/*.rs, each with the
//! compiler's expected error in its .stderr file).

#[test]
fn misuses_do_not_compile() {
    trybuild::TestCases::new().compile_fail("tests/ui/*.rs");
}
