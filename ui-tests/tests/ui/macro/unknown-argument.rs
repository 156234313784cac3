//! `#[gpu_scope(foo)]`: an argument the attribute does not know.
//!
//! The only argument is `crate = path`; silently ignoring a misspelled one would hide
//! the user's intent.
use stream_core::{gpu_scope, Result, Scope};

#[gpu_scope(foo)]
fn step(s: &Scope) -> Result<()> {
    let _ = s;
    Ok(())
}

fn main() {
    let _ = step;
}
