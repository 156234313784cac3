//! Using the buffer returned by a hand-off on the stream that gave it away.
//!
//! The returned buffer is branded by the receiving scope; the giving scope cannot use it.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream, out: &mut [f32]) -> Result<(), Error> {
    scope(a, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        s.fork(b, (), |c, ()| {
            let y = s.hand_off(x, c)?;
            s.copy_to_host(&y, out)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
