//! Using a buffer on its old stream after handing it to the child.
//!
//! After `hand_off` the child's stream owns the buffer and will free it; the old
//! handle was moved into the call.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    scope(a, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        s.fork(b, (), |c, ()| {
            let _y = s.hand_off(x, c)?;
            s.fill(&mut x, 1.0)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
