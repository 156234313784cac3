//! A device-to-device copy whose destination is a read-only `DeviceSlice`.
//!
//! Another `DeviceSlice` of the same range may be read at the same time (they are
//! `Copy`), so writing through one would race. Destinations must be
//! `DeviceMemoryMut`: a `DeviceBuffer`, a `DeviceSliceMut` or an `attach`ed view.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let a = s.alloc_zeroed::<f32>(16)?;
        let b = s.alloc_zeroed::<f32>(16)?;
        let mut ro = b.slice(..)?;
        s.copy_device(&a, &mut ro)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
