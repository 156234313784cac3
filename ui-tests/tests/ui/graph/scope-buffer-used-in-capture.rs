//! Using a scope's buffer inside a capture.
//!
//! The scope frees it when it ends, and the graph would use it at every later replay:
//! the capture's brand differs from the scope's, so the buffer cannot enter it. Lend a
//! `DeviceVec` to the capture, or let the graph allocate its own memory.
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream) -> Result<(), Error> {
    scope(stream, |s| {
        let x = s.alloc_zeroed::<f32>(16)?;
        let (_graph, ()) = s.capture((), |g, ()| {
            let mut y = g.alloc::<f32>(16)?;
            g.copy_device(&x, &mut y)?;
            Ok::<_, Error>(())
        })?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
