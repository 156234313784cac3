//! A reference field: a host address, meaningless on the GPU.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Weights {
    scale: f32,
    values: &'static [f32; 4],
}

fn main() {}
