//! A union.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
union Bits {
    float: f32,
    int: u32,
}

fn main() {}
