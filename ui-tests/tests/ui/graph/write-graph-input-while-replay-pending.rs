//! Refilling a graph's input while a replay may still be reading it.
//!
//! Refill between replays: after `wait`, or after the scope that replayed it ended.
use stream_core::{scope, Error, Graph, PinnedBuffer, Stream};

fn f(stream: &Stream, graph: &mut Graph<PinnedBuffer<f32>>) -> Result<(), Error> {
    scope(stream, |s| {
        let _pending = s.replay(graph)?;
        graph.held_mut()[0] = 1.0;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
