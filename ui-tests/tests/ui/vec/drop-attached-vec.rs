//! Dropping a `DeviceVec` inside the scope it is attached to.
//!
//! Work enqueued through the attached view may still run; freeing the memory under it
//! is a use after free. `attach` borrows the `DeviceVec` until the scope's final
//! synchronisation.
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(stream: &Stream, mut weights: DeviceVec<f32>) -> Result<(), Error> {
    scope(stream, |s| {
        let mut w = s.attach(&mut weights)?;
        s.fill(&mut w, 1.0)?;
        drop(weights);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
