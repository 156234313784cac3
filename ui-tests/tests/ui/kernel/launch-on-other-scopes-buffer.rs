//! Launching a kernel in an inner scope (stream `b`) on a buffer of the outer scope
//! (stream `a`).
//!
//! The kernel would run on `b`, unordered with the buffer's allocation, earlier writes
//! and free on `a`. Kernel wrappers take the scope and memory of one brand `'s`.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    scope(a, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        scope(b, |t| {
            kernels::fill(t, &mut x, 1.0f32)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
