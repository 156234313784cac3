//! `#[gpu_scope]` on a function returning `u32`, not a `Result`.
//!
//! The scope's final stream synchronisation can fail (safety rule 1); there is no `u32`
//! to report that with.
use stream_core::{gpu_scope, Scope};

#[gpu_scope]
fn step(s: &Scope) -> u32 {
    let _ = s;
    0
}

fn main() {
    let _ = step;
}
