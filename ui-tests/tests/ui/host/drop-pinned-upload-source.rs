//! Dropping a `PinnedBuffer` while an upload may still be reading it.
//!
//! An upload from pinned memory is one asynchronous DMA, so dropping the buffer right
//! after enqueueing it would hand the block back (to the pinned pool, or to the driver)
//! while the GPU still reads it. `upload` borrows the buffer's slice until the scope
//! ends (safety rule 3), so the buffer cannot be dropped inside the scope.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let pinned = stream.device().alloc_pinned::<f32>(16)?;
    scope(stream, |s| {
        let _x = s.upload(&pinned)?;
        drop(pinned);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
