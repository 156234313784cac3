//! A raw pointer field: a kernel could be made to write anywhere.
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Output {
    len: u64,
    data: *mut f32,
}

fn main() {}
