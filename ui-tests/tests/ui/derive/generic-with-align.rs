//! `align` on a generic struct: trailing padding for some parameters.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C, align(16))]
struct Vec3<T: DeviceRepr> {
    x: T,
    y: T,
    z: T,
}

fn main() {}
