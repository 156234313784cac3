//! Writing a buffer on the parent's stream while the child may write it too.
//!
//! `&mut x` lends the buffer to the child exclusively until the fork ends, so a write
//! by the parent in the meantime would race the child's on another stream.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    scope(a, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        s.fork(b, &mut x, |c, mut v| {
            c.fill(&mut v, 1.0)?;
            s.fill(&mut x, 2.0)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
