//! Returning a `DeviceBuffer` from the scope's closure.
//!
//! The buffer is freed on the scope's stream and only valid while the scope runs; its
//! brand `'s` is a fresh lifetime of this scope that cannot name anything outside it
//! (safety rules 2 and 4).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let escaped = scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        Ok::<_, Error>(x)
    })?;
    println!("{}", escaped.len());
    Ok(())
}

fn main() {
    let _ = f;
}
