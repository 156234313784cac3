//! `#[gpu_scope]` on an `extern "C" fn`.
//!
//! Callers pass a Rust `&Stream` in the scope's place and get a Rust `Result` back;
//! neither has a C ABI.
use stream_core::{gpu_scope, Result, Scope};

#[gpu_scope]
extern "C" fn step(s: &Scope) -> Result<()> {
    let _ = s;
    Ok(())
}

fn main() {
    let _ = step;
}
