//! Handing a `DeviceVec` to cudarc while the scope it is attached to may still use it.
//!
//! Work enqueued through the attached view may still run; cudarc could free or write the
//! memory under it. `attach` borrows the `DeviceVec` until the scope's final
//! synchronisation, and `into_cudarc` takes it by value.
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(stream: &Stream, mut weights: DeviceVec<f32>) -> Result<(), Error> {
    let cudarc_stream = stream.device().cudarc_context()?.new_stream().unwrap();
    scope(stream, |s| {
        let mut w = s.attach(&mut weights)?;
        s.fill(&mut w, 1.0)?;
        let _slice = weights.into_cudarc(&cudarc_stream)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
