//! Sending a download's `Pending` to another thread (a scoped one) to wait there.
//!
//! Its event belongs to the scope's context, current only on the scope's thread.
//! Everything branded by a scope stays on its thread: `Pending` is not `Send`.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    let mut out = vec![0f32; 16];
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let pending = s.copy_to_host(&x, &mut out)?;
        std::thread::scope(|threads| {
            threads.spawn(move || pending.wait().map(drop));
        });
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
