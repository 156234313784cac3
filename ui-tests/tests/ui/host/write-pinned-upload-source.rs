//! Writing a `PinnedBuffer` while its upload may still be reading it.
//!
//! Pinned memory is copied by true asynchronous DMA, so this race is real (cudarc lets
//! safe code do it through `as_mut_slice()`). `upload` borrows the buffer's slice for
//! the whole scope (safety rule 3), and `DerefMut` needs it mutably.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut pinned = stream.device().alloc_pinned::<f32>(16)?;
    scope(stream, |s| {
        let _x = s.upload(&pinned)?;
        pinned[0] = 1.0;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
