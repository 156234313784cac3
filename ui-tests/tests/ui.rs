//! Every misuse in `tests/ui/<area>/*.rs` must fail to compile with the message pinned
//! in its `.stderr`; every program in `tests/pass/*.rs` must compile (and its `main`
//! must run without a GPU).
//!
//! Regenerate the `.stderr` files with `TRYBUILD=overwrite cargo test -p ui-tests`, then
//! read every one: the error must point at the user's line and say what to do.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*/*.rs");
    t.pass("tests/pass/*.rs");
}
