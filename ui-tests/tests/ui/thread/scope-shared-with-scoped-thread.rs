//! Sharing the `&Scope` with a `std::thread::scope` thread.
//!
//! Scoped threads may borrow, but the scope's context is current only on the thread
//! that opened it, and its work must be issued from there. `Scope` is not `Sync`, so
//! `&Scope` cannot be sent (DESIGN.md).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        std::thread::scope(|threads| {
            threads.spawn(|| s.alloc_zeroed::<f32>(16).map(drop));
        });
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
