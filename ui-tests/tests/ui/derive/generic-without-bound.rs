//! A generic parameter without the `DeviceRepr` bound.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Vec3<T> {
    x: T,
    y: T,
    z: T,
}

fn main() {}
