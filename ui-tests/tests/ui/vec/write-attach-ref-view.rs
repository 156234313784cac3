//! Writing a `DeviceVec` through its read-only `attach_ref` view.
//!
//! `attach_ref` needs only `&DeviceVec`, so other scopes, on other streams and threads,
//! may be reading the same memory at the same time (`DeviceVec` is `Sync`); a write
//! would race them. The view is a `DeviceSlice`, which is not `DeviceMemoryMut`.
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(stream: &Stream, weights: &DeviceVec<f32>, input: &[f32]) -> Result<(), Error> {
    scope(stream, |s| {
        let mut w = s.attach_ref(weights)?;
        s.copy_to_device(input, &mut w)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
