//! Keeping the child's view of a lent buffer after the fork.
//!
//! The view is branded by the child; after the fork the parent's uses of the buffer are
//! no longer ordered with the child's stream.
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    scope(a, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let _v = s.fork(b, &x, |_c, v| Ok::<_, Error>(v))?;
        Ok(())
    })
}

fn main() {
    let _ = f;
}
