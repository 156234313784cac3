//! Replaying one graph on two streams at once.
//!
//! Refused: a replay borrows the graph exclusively until it is known complete, and both
//! replays would write the same held outputs. Capture the work twice for concurrent
//! replays.
use stream_core::{scope, Error, Graph, PinnedBuffer, Stream};

fn f(a: &Stream, b: &Stream, graph: &mut Graph<PinnedBuffer<f32>>) -> Result<(), Error> {
    scope(a, |s| {
        let _first = s.replay(graph)?;
        scope(b, |t| {
            let _second = t.replay(graph)?;
            Ok::<_, Error>(())
        })
    })
}

fn main() {
    let _ = f;
}
