//! Writing a buffer on the parent's stream while the child may be reading it, the
//! buffer lent inside an `Option`.
//!
//! `Some(&x)` lends the buffer as `&x` does, until the fork ends: the parent's write
//! would race the child's reads on the other stream.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream, out: &mut [f32]) -> Result<(), Error> {
    scope(a, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        s.fork(b, Some(&x), |c, v| {
            if let Some(v) = v {
                c.copy_to_host(&v, out)?;
            }
            s.fill(&mut x, 1.0)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
