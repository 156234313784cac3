//! A rejected struct used as an element type: only the derive's error is reported, at the field.
use stream_core::{scope, DeviceRepr, Error, Stream};

#[derive(Clone, Copy, DeviceRepr)]
#[repr(C)]
struct Flags {
    count: u32,
    enabled: bool,
}

fn upload(stream: &Stream, flags: &[Flags]) -> Result<(), Error> {
    scope(stream, |s| {
        let _x = s.upload(flags)?;
        Ok(())
    })
}

fn main() {}
