//! Saving a `DeviceBuffer` in an `Option` declared outside the scope.
//!
//! The `Option` outlives the scope, so the buffer would outlive the scope's final
//! synchronisation. Its brand cannot name the `Option`'s lifetime (safety rules 2
//! and 4).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut saved = None;
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        saved = Some(x);
        Ok::<_, Error>(())
    })?;
    println!("{}", saved.is_some());
    Ok(())
}

fn main() {
    let _ = f;
}
