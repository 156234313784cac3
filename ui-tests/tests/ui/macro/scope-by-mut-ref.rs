//! `#[gpu_scope]` on a function whose first parameter is `&mut Scope`.
//!
//! A scope is shared by everything branded with it (buffers, views, `Pending`s all hold
//! `&'s Scope`-length borrows), so it is only ever handed out as `&Scope`.
use stream_core::{gpu_scope, Result, Scope};

#[gpu_scope]
fn step(s: &mut Scope) -> Result<()> {
    let _ = s;
    Ok(())
}

fn main() {
    let _ = step;
}
