//! Returning a child's buffer from the fork without handing it off.
//!
//! It would still be freed on the child's stream, and the parent's uses would not be
//! ordered after the child's. `c.hand_off(y, s)` returns a buffer the parent owns.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream, input: &[f32]) -> Result<(), Error> {
    scope(a, |s| {
        let _y = s.fork(b, (), |c, ()| {
            let y = c.upload(input)?;
            Ok::<_, Error>(y)
        })?;
        Ok(())
    })
}

fn main() {
    let _ = f;
}
