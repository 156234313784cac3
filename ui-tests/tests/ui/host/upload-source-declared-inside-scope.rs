//! Uploading from a host buffer declared inside the scope's closure.
//!
//! The buffer is freed when the closure returns, but the copy may run until the scope
//! synchronises after it. Upload sources must outlive the scope (safety rule 3).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let input = vec![1f32; 16];
        let _x = s.upload(&input)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
