//! An argument of `#[device_repr(..)]` other than `crate = path`.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[device_repr(packed = true)]
#[repr(C)]
struct Particle {
    position: [f32; 3],
    mass: f32,
}

fn main() {}
