//! Using a buffer of one `scope_all!` scope in a sibling's.
//!
//! Each stream of `scope_all!` gets a scope with a brand of its own, so a buffer made on
//! one stream cannot be used on another without a hand-off (which orders the two
//! streams by an event).
use stream_core::{scope_all, Error, Stream};

fn f(s0: &Stream, s1: &Stream) -> Result<(), Error> {
    scope_all!([s0, s1], |a, b| {
        let x = a.alloc_zeroed::<f32>(16)?;
        let mut y = b.alloc::<f32>(16)?;
        b.copy_device(&x, &mut y)?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
