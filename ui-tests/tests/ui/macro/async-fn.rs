//! `#[gpu_scope]` on an `async fn`.
//!
//! The scope synchronises its stream before returning, inside its own stack frame
//! (safety rule 1); a future could be forgotten or leaked mid-scope with copies still
//! borrowing host memory, so the attribute refuses `async`.
use stream_core::{gpu_scope, Result, Scope};

#[gpu_scope]
async fn step(s: &Scope, input: &[f32]) -> Result<()> {
    let _ = (s, input);
    Ok(())
}

fn main() {
    let _ = step;
}
