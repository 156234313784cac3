//! Using a buffer of an outer scope in an inner scope on another stream.
//!
//! The buffer is allocated and freed stream-ordered on stream `a`; work on stream `b`
//! is not ordered with it (it could run before the allocation or after the free). The
//! two scopes' brands are distinct invariant lifetimes that never unify (safety rules
//! 2 and 4).
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(a, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        scope(b, |t| {
            t.copy_to_host(&x, &mut out)?.wait()?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
