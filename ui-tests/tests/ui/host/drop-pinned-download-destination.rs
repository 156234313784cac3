//! Dropping a `PinnedBuffer` while a download into it may still be running.
//!
//! `cuMemFreeHost` under a running DMA is a use after free; `copy_to_host` borrows the
//! buffer's slice for the whole scope (safety rule 3), so it cannot be dropped.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut pinned = stream.device().alloc_pinned::<f32>(16)?;
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let _pending = s.copy_to_host(&x, &mut pinned)?;
        drop(pinned);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
