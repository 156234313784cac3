//! A generic struct whose padding depends on its parameter.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Keyed<T: DeviceRepr> {
    key: u8,
    value: T,
}

fn main() {}
