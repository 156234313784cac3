//! Dropping an upload's source while the copy may still be reading it.
//!
//! Freeing a staging buffer right after enqueuing its copy is the Open3D bug: the DMA
//! then reads freed memory. `upload` borrows `input` for the whole scope (safety rule 3).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let input = vec![1f32; 16];
    scope(stream, |s| {
        let _x = s.upload(&input)?;
        drop(input);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
