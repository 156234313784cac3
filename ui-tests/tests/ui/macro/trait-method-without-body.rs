//! `#[gpu_scope]` on a trait method declaration without a body.
//!
//! There is no body to run inside the scope; put the attribute on the methods of the
//! trait's impls instead.
use stream_core::{gpu_scope, Result, Scope};

trait Step {
    #[gpu_scope]
    fn step(&self, s: &Scope) -> Result<()>;
}

fn main() {}
