//! Reading a `PinnedBuffer` while a download into it may still be running.
//!
//! A download into pinned memory is one asynchronous DMA: the host would read bytes the
//! GPU has not written yet. `copy_to_host` borrows the buffer mutably until `wait()` or
//! the scope's end (safety rule 3); call `.wait()` on the `Pending` to read it early.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut pinned = stream.device().alloc_pinned::<f32>(16)?;
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let _pending = s.copy_to_host(&x, &mut pinned)?;
        println!("{}", pinned[0]);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
