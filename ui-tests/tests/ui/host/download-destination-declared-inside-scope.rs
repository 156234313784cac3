//! Downloading into a host buffer declared inside the scope's closure.
//!
//! The buffer is freed when the closure returns, but the copy may still write it until
//! the scope synchronises after that (a forgotten `Pending` does not wait). Download
//! destinations must outlive the scope (safety rule 3).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let mut out = vec![0f32; 16];
        let _pending = s.copy_to_host(&x, &mut out)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
