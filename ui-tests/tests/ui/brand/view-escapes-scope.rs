//! Returning a read-only view of an attached `DeviceVec` from the scope's closure.
//!
//! Views carry the scope's brand: they are only valid on the scope's stream while it
//! runs, even when the memory they view outlives the scope (safety rule 2).
use stream_core::{scope, DeviceVec, Error, Stream};

fn f(stream: &Stream, weights: &DeviceVec<f32>) -> Result<(), Error> {
    let view = scope(stream, |s| {
        let w = s.attach_ref(weights)?;
        Ok::<_, Error>(w)
    })?;
    println!("{}", view.len());
    Ok(())
}

fn main() {
    let _ = f;
}
