//! Passing one buffer to a kernel as both its input and its output.
//!
//! `axpy` reads `x` while it writes `y`; with the same memory in both, threads would
//! read elements other threads already wrote. Kernel wrappers take what they read as
//! `&` and what they write as `&mut`, so the borrow checker rules out the aliasing.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let mut y = s.alloc_zeroed::<f32>(16)?;
        kernels::axpy(s, 2.0, &y, &mut y)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
