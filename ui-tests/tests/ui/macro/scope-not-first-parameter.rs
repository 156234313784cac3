//! `#[gpu_scope]` on a function whose `&Scope` parameter is not the first one.
//!
//! The scope must be the first parameter after `self`, so that every `#[gpu_scope]`
//! function is called the same way (`f(&stream, ...)`); the error says to move it.
use stream_core::{gpu_scope, Result, Scope};

#[gpu_scope]
fn step(input: &[f32], s: &Scope) -> Result<()> {
    let _ = (input, s);
    Ok(())
}

fn main() {
    let _ = step;
}
