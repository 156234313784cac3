//! Taking two writable views of overlapping ranges of one buffer and using both.
//!
//! Two `DeviceSliceMut`s of the same memory would let one operation write what another
//! reads or writes through the other view. Like `&mut [T]`, a writable view borrows its
//! buffer exclusively; `split_at_mut` is the way to get disjoint halves.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        let mut a = x.slice_mut(0..8)?;
        let mut b = x.slice_mut(4..12)?;
        s.fill(&mut a, 1.0)?;
        s.fill(&mut b, 2.0)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
