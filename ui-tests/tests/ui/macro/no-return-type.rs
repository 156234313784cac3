//! `#[gpu_scope]` on a function returning `()`.
//!
//! The scope's final stream synchronisation can fail (safety rule 1); its error must
//! reach the caller, so the function has to return a `Result`.
use stream_core::{gpu_scope, Scope};

#[gpu_scope]
fn step(s: &Scope) {
    let _ = s;
}

fn main() {
    let _ = step;
}
