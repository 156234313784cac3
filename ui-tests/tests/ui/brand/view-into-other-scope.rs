//! Using a view of an outer scope's buffer in an inner scope on another stream.
//!
//! Views carry the brand of the scope whose stream the memory is ordered on; stream
//! `b`'s work would not be ordered after the allocation on `a`, nor before its free
//! (safety rule 2).
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    scope(a, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        let mut view = x.as_slice_mut();
        scope(b, |t| {
            t.fill(&mut view, 1.0)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
