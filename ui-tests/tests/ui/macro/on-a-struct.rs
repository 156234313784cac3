//! `#[gpu_scope]` on a struct.
//!
//! The attribute rewrites a function's body into a scope; it means nothing on a type.
use stream_core::gpu_scope;

#[gpu_scope]
struct Model {
    bias: f32,
}

fn main() {
    let _ = Model { bias: 0.0 }.bias;
}
