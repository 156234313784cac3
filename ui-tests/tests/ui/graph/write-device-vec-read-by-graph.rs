//! Attaching, writable, a `DeviceVec` that a graph reads, while the graph exists.
//!
//! The graph holds `&weights` and may be replaying: another scope may read the vec, not
//! write it.
use stream_core::{scope, Device, Error, Stream};

fn f(dev: &Device, stream: &Stream) -> Result<(), Error> {
    let mut weights = dev.upload_vec(&[1.0f32; 16])?;
    let (mut graph, ()) = dev.capture(&weights, |g, w| {
        let mut y = g.alloc::<f32>(16)?;
        g.copy_device(&w, &mut y)?;
        Ok::<_, Error>(())
    })?;
    scope(stream, |s| {
        let mut w = s.attach(&mut weights)?;
        s.fill(&mut w, 2.0)?;
        Ok::<_, Error>(())
    })?;
    scope(stream, |s| s.replay(&mut graph).map(drop))
}

fn main() {
    let _ = f;
}
