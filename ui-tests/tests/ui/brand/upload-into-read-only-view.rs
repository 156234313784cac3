//! Copying host data into a read-only `DeviceSlice`.
//!
//! A `DeviceSlice` is the device's `&[T]`: it is `Copy` and may alias other views, so
//! writing through it would race them. Operations that write device memory take
//! `&mut impl DeviceMemoryMut`, which `DeviceSlice` does not implement.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, input: &[f32]) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(input.len())?;
        let mut ro = x.slice(..)?;
        s.copy_to_device(input, &mut ro)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
