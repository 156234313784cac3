//! `#[gpu_scope]` on a `const fn`.
//!
//! A scope issues GPU work and synchronises a stream at run time; nothing of it can run
//! in a constant context.
use stream_core::{gpu_scope, Result, Scope};

#[gpu_scope]
const fn step(s: &Scope) -> Result<()> {
    let _ = s;
    Ok(())
}

fn main() {
    let _ = step;
}
