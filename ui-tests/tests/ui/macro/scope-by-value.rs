//! `#[gpu_scope]` on a function taking the `Scope` by value.
//!
//! Scopes are only ever handed out by reference (`scope` keeps ownership, so the final
//! synchronisation cannot be skipped).
use stream_core::{gpu_scope, Result, Scope};

#[gpu_scope]
fn step(s: Scope) -> Result<()> {
    let _ = s;
    Ok(())
}

fn main() {
    let _ = step;
}
