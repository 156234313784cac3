//! Prefetching memory that is not managed.
//!
//! Only managed memory migrates between the host and the device; a `DeviceBuffer` is
//! always on the device. `prefetch_to_device` takes views of an attached `ManagedVec`
//! only.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        s.prefetch_to_device(&x)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
