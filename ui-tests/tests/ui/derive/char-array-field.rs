//! An array of `char`: not every `u32` is a `char`.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Label {
    letters: [char; 4],
}

fn main() {}
