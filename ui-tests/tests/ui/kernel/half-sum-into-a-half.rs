//! `reduce_sum` of `f16` elements into an `f16` result.
//!
//! Half-precision sums accumulate in `f32` (`Float::Accumulator`), and the result is
//! that `f32`: a half-precision `out` would silently round a sum that `f32` holds, so it
//! does not compile.
use half::f16;
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f16>(16)?;
        let mut out = s.alloc_zeroed::<f16>(1)?;
        kernels::reduce_sum(s, &x, &mut out)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
