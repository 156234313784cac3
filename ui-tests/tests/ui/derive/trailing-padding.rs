//! Trailing padding: the struct's size is rounded up to its alignment of 8.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Sample {
    time: f64,
    channel: u16,
}

fn main() {}
