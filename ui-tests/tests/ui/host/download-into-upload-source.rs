//! Downloading into host memory that a pending upload is still reading.
//!
//! The download's DMA would overwrite what the upload's DMA reads; `upload` borrows
//! `data` shared for the whole scope (safety rule 3), so it cannot be borrowed mutably.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut data = vec![1f32; 16];
    scope(stream, |s| {
        let x = s.upload(&data)?;
        let _pending = s.copy_to_host(&x, &mut data)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
