//! Downloading into a `Vec` declared in a `#[gpu_scope]` function's body.
//!
//! The body is the scope's closure: the `Vec` is freed when it returns, before the
//! scope's final synchronisation, while the copy may still write it (safety rule 3).
//! Download into memory the caller passes in instead.
use stream_core::{gpu_scope, Result, Scope};

#[gpu_scope]
fn step(s: &Scope, input: &[f32]) -> Result<()> {
    let x = s.upload(input)?;
    let mut out = vec![0f32; input.len()];
    let _pending = s.copy_to_host(&x, &mut out)?;
    Ok(())
}

fn main() {
    let _ = step;
}
