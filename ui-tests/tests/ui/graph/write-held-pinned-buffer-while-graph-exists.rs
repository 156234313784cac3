//! Writing a pinned buffer the graph holds directly, not through the graph.
//!
//! A replay may be reading it; the host writes inputs through `Graph::held_mut`, which
//! needs the graph, which a replay borrows until it is known complete.
use stream_core::{scope, Device, Error, Stream};

fn f(dev: &Device, stream: &Stream) -> Result<(), Error> {
    let mut input = dev.alloc_pinned::<f32>(16)?;
    let (mut graph, ()) = dev.capture(&mut input, |g, input| {
        let _x = g.upload(&input)?;
        Ok::<_, Error>(())
    })?;
    input[0] = 2.0;
    scope(stream, |s| s.replay(&mut graph).map(drop))
}

fn main() {
    let _ = f;
}
