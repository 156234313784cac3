//! `scope_all!` with more streams than scope names.
//!
//! Every stream gets a scope, and every scope a name: a stream without one would run
//! work that nothing in the body can reach, so the macro refuses the mismatch.
use stream_core::{scope_all, Error, Stream};

fn f(s0: &Stream, s1: &Stream, s2: &Stream) -> Result<(), Error> {
    scope_all!([s0, s1, s2], |a, b| {
        let _ = (a, b);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
