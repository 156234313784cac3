//! Moving the `&Scope` into a thread started with `std::thread::spawn`.
//!
//! All of a scope's work is issued from the thread that opened it, where the scope's
//! CUDA context is current; another thread has no context bound and is not covered by
//! the scope's borrows. `Scope` is neither `Send` nor `Sync` (DESIGN.md).
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let handle = std::thread::spawn(move || {
            let _ = s.alloc_zeroed::<f32>(16);
        });
        let _ = handle.join();
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
