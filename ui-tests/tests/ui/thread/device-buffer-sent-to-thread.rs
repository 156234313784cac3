//! Sending a `DeviceBuffer` to another thread (a scoped one, so lifetimes are fine).
//!
//! Dropping it there would enqueue its stream-ordered free from a thread without the
//! scope's context. Everything branded by a scope stays on its thread: `DeviceBuffer`
//! is not `Send`.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        std::thread::scope(|threads| {
            threads.spawn(move || drop(x));
        });
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
