//! Reading a download's destination inside a `#[gpu_scope]` function before waiting.
//!
//! The attribute runs the body inside a scope, so the same rules hold as with `scope`:
//! `copy_to_host` borrows `out` for the whole scope (safety rule 3).
use stream_core::{gpu_scope, Result, Scope};

#[gpu_scope]
fn step(s: &Scope, input: &[f32], out: &mut [f32]) -> Result<f32> {
    let x = s.upload(input)?;
    let _pending = s.copy_to_host(&x, out)?;
    Ok(out.iter().sum())
}

fn main() {
    let _ = step;
}
