//! Attaching one `DeviceVec` mutably twice in a scope.
//!
//! Two writable views of the same memory could be passed to one operation as source
//! and destination, or as two outputs of a kernel. `attach` borrows the `DeviceVec`
//! mutably for the whole scope, like a `&mut`.
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(stream: &Stream, weights: &mut DeviceVec<f32>) -> Result<(), Error> {
    scope(stream, |s| {
        let mut a = s.attach(weights)?;
        let mut b = s.attach(weights)?;
        s.fill(&mut a, 1.0)?;
        s.fill(&mut b, 2.0)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
