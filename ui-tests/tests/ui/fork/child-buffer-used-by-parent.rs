//! Using a buffer the child allocated on the parent's stream before the join.
//!
//! The child's buffer is written on the child's stream; the parent's stream is not
//! ordered after that work until the fork ends. Hand it over with `c.hand_off(y, s)`.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream, input: &[f32], out: &mut [f32]) -> Result<(), Error> {
    scope(a, |s| {
        s.fork(b, (), |c, ()| {
            let y = c.upload(input)?;
            s.copy_to_host(&y, out)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
