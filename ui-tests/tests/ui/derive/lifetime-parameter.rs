//! A lifetime parameter: a DeviceRepr type holds no references.
use std::marker::PhantomData;
use stream_core::DeviceRepr;

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Borrowed<'a> {
    value: f32,
    marker: PhantomData<&'a f32>,
}

fn main() {}
