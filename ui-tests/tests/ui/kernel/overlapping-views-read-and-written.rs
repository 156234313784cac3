//! Passing overlapping ranges of one buffer to a kernel as input and output.
//!
//! Views alias their buffer like slices do: a read-only view of `x[0..8]` and a
//! writable one of `x[4..12]` cannot coexist, so `scale` cannot read what it writes.
//! Use `split_at_mut` for disjoint halves.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        let input = x.slice(0..8)?;
        let mut output = x.slice_mut(4..12)?;
        kernels::scale(s, 2.0, &input, &mut output)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
