//! Passing a GEMM's output as one of its operands, read transposed.
//!
//! `sgemm_tiled_op` with `Op::T` reads `a` in place, column after column, while blocks
//! write `c`: with the same memory in both (an "in-place" `c = c^T b`), blocks would read
//! elements other blocks already wrote, and split-k ranges would read a mix. Operands
//! are `&` and the result `&mut`, so the borrow checker rules the aliasing out, whatever
//! the `Op`s.
use kernels::Op;
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let b = s.alloc_zeroed::<f32>(16)?;
        let mut c = s.alloc_zeroed::<f32>(16)?;
        kernels::sgemm_tiled_op(s, Op::T, Op::N, 4, 4, 4, 1.0, &c, &b, 0.0, &mut c)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
