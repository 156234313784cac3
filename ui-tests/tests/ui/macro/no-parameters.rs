//! `#[gpu_scope]` on a function without any parameter.
//!
//! The attribute replaces the `&Scope` parameter with the `&Stream` callers pass; with
//! no parameter there is no stream to open the scope on.
use stream_core::{gpu_scope, Result};

#[gpu_scope]
fn step() -> Result<()> {
    Ok(())
}

fn main() {
    let _ = step;
}
