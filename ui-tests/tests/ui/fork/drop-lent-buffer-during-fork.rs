//! Dropping a buffer the child may still be reading.
//!
//! The drop would queue its free on the parent's stream, which is not ordered after the
//! child's work until the fork ends.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream, out: &mut [f32]) -> Result<(), Error> {
    scope(a, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        s.fork(b, &x, |c, v| {
            c.copy_to_host(&v, out)?;
            drop(x);
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
