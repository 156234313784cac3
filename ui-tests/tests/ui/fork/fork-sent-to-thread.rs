//! Issuing a child's work from another thread.
//!
//! A fork, like a scope, is bound to the thread that opened it (its context is current
//! there, and its join runs there).
use stream_core::{scope, Error, Stream};

fn f(a: &Stream, b: &Stream) -> Result<(), Error> {
    scope(a, |s| {
        s.fork(b, (), |c, ()| {
            std::thread::scope(|t| {
                t.spawn(|| c.alloc::<f32>(16).map(drop));
            });
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
