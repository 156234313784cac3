//! Replaying a graph after a `DeviceVec` it reads was freed (the hole cudarc leaves open
//! to safe code).
//!
//! The graph borrows the vec for its whole life, so it cannot be dropped while the graph
//! may still be replayed.
use stream_core::{scope, Device, Error, Stream};

fn f(dev: &Device, stream: &Stream) -> Result<(), Error> {
    let weights = dev.upload_vec(&[1.0f32; 16])?;
    let (mut graph, ()) = dev.capture(&weights, |g, w| {
        let mut y = g.alloc::<f32>(16)?;
        g.copy_device(&w, &mut y)?;
        Ok::<_, Error>(())
    })?;
    drop(weights);
    scope(stream, |s| s.replay(&mut graph).map(drop))
}

fn main() {
    let _ = f;
}
