//! A `bool` field: only the bytes 0 and 1 are valid.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Flags {
    count: u32,
    enabled: bool,
}

fn main() {}
