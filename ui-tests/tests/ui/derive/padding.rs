//! Padding: three bytes after `tag` keep `value` aligned.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Tagged {
    tag: u8,
    value: u32,
}

fn main() {}
