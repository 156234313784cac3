//! A field of a type that does not derive `DeviceRepr`.
use stream_core::DeviceRepr;

#[derive(Clone, Copy)]
#[repr(C)]
struct Plain {
    x: f32,
}

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Wrapper {
    inner: Plain,
    scale: f32,
}

fn main() {}
