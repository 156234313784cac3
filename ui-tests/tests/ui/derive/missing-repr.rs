//! A struct without `#[repr(C)]`: Rust may reorder its fields.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
struct Particle {
    position: [f32; 3],
    mass: f32,
}

fn main() {}
