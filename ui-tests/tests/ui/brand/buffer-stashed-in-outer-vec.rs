//! Pushing a `DeviceBuffer` into a `Vec` declared outside the scope.
//!
//! The `Vec` outlives the scope, so the buffer would be used or freed after the
//! scope's stream has been synchronised for the last time. Its brand cannot name the
//! `Vec`'s lifetime (safety rules 2 and 4).
use stream_core::{scope, DeviceBuffer, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut stash: Vec<DeviceBuffer<'_, f32>> = Vec::new();
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        stash.push(x);
        Ok::<_, Error>(())
    })?;
    println!("{}", stash.len());
    Ok(())
}

fn main() {
    let _ = f;
}
