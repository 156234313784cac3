//! An enum: its discriminant has invalid bit patterns.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
enum Mode {
    Fast,
    Exact,
}

fn main() {}
