//! Dropping a pinned buffer the graph holds, then replaying.
//!
//! The graph's copy nodes name the buffer's address and run at every replay: it is
//! borrowed by the graph for the graph's whole life.
use stream_core::{scope, Device, Error, Stream};

fn f(dev: &Device, stream: &Stream) -> Result<(), Error> {
    let mut input = dev.alloc_pinned::<f32>(16)?;
    let (mut graph, ()) = dev.capture(&mut input, |g, input| {
        let _x = g.upload(&input)?;
        Ok::<_, Error>(())
    })?;
    drop(input);
    scope(stream, |s| s.replay(&mut graph).map(drop))
}

fn main() {
    let _ = f;
}
