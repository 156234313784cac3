//! `#[gpu_scope]` on a function whose error type has no `From<stream_core::Error>`.
//!
//! A failed final synchronisation is converted into the function's error type, so that
//! type must implement `From<stream_core::Error>`; the error points at the return type.
use stream_core::{gpu_scope, Scope};

#[derive(Debug)]
struct MyError;

#[gpu_scope]
fn step(s: &Scope) -> Result<(), MyError> {
    let _ = s;
    Ok(())
}

fn main() {
    let _ = step;
}
