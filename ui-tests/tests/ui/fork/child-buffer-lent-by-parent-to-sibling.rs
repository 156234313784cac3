//! Lending a child's buffer to a fork of the parent (a sibling of the child).
//!
//! A scope lends only its own memory; the child's buffer is not the parent's. The child
//! can fork and lend it itself, or hand it to the parent first.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream, d: &Stream, out: &mut [f32]) -> Result<(), Error> {
    scope(a, |s| {
        s.fork(b, (), |c, ()| {
            let y = c.alloc_zeroed::<f32>(16)?;
            s.fork(d, &y, |g, v| {
                g.copy_to_host(&v, out)?;
                Ok::<_, Error>(())
            })
        })
    })
}

fn main() {
    let _ = f;
}
