//! A struct that is not `Copy`: device memory is copied byte for byte.
use stream_core::DeviceRepr;

#[derive(DeviceRepr)]
#[repr(C)]
struct Particle {
    position: [f32; 3],
    mass: f32,
}

fn main() {}
