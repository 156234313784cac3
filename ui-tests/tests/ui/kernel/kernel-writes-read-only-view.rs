//! Passing a read-only `attach_ref` view as a kernel's output.
//!
//! `attach_ref` needs only `&DeviceVec`, so other scopes may read the same memory at
//! the same time; a kernel writing it would race them. Kernel outputs must be
//! `DeviceMemoryMut` (a `DeviceBuffer`, a `DeviceSliceMut` or an `attach`ed view).
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(stream: &Stream, weights: &DeviceVec<f32>) -> Result<(), Error> {
    scope(stream, |s| {
        let mut w = s.attach_ref(weights)?;
        kernels::fill(s, &mut w, 1.0f32)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
