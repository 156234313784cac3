//! `#[gpu_scope]` on a function without a `&Scope` parameter.
//!
//! The attribute replaces the scope parameter with the `&Stream` callers pass; without
//! one there is no stream to open the scope on.
use stream_core::{gpu_scope, Result};

#[gpu_scope]
fn step(input: &[f32]) -> Result<()> {
    let _ = input;
    Ok(())
}

fn main() {
    let _ = step;
}
