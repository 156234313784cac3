//! A graph that outlives the pinned buffer it borrows.
//!
//! The graph's type carries the borrow: it cannot be kept after the buffer is gone.
use stream_core::{scope, Device, Error, Graph, PinnedBuffer, Stream};

fn f(dev: &Device, stream: &Stream) -> Result<(), Error> {
    let mut graph: Graph<&mut PinnedBuffer<f32>>;
    {
        let mut input = dev.alloc_pinned::<f32>(16)?;
        (graph, ()) = dev.capture(&mut input, |g, input| {
            let _x = g.upload(&input)?;
            Ok::<_, Error>(())
        })?;
    }
    scope(stream, |s| s.replay(&mut graph).map(drop))
}

fn main() {
    let _ = f;
}
