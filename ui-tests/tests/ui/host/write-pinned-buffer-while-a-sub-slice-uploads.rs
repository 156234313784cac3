//! Writing a `PinnedBuffer` while an upload of a sub-slice of it may still be reading.
//!
//! `&pinned[8..16]` borrows the whole buffer through `Deref`, so the compiler cannot see
//! that `pinned[0]` lies outside the uploaded range and rejects the write. Split the
//! buffer first (`let (head, tail) = pinned.split_at_mut(8);`) to upload one part while
//! writing the other.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut pinned = stream.device().alloc_pinned::<f32>(16)?;
    scope(stream, |s| {
        let _x = s.upload(&pinned[8..16])?;
        pinned[0] = 1.0;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
