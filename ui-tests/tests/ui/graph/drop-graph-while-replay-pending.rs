//! Dropping a graph (and the pinned buffers it owns) while a replay may be running.
//!
//! The replay borrows the graph until the scope's final synchronisation; a forgotten or
//! dropped `Pending` does not end that borrow.
use stream_core::{scope, Device, Error, Stream};

fn f(dev: &Device, stream: &Stream) -> Result<(), Error> {
    let out = dev.alloc_pinned::<f32>(16)?;
    let (mut graph, ()) = dev.capture(out, |g, mut out| {
        let x = g.alloc_zeroed::<f32>(16)?;
        g.copy_to_host(&x, &mut out)?;
        Ok::<_, Error>(())
    })?;
    scope(stream, |s| {
        let pending = s.replay(&mut graph)?;
        std::mem::forget(pending);
        drop(graph);
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
