//! Using a buffer on the parent's stream after moving it into a fork.
//!
//! A buffer lent by value is handed off: the child owns it and frees it on its stream.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    scope(a, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        s.fork(b, x, |c, mut x| c.fill(&mut x, 1.0))?;
        s.fill(&mut x, 2.0)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
