//! Reading what a replay writes before the replay is known to be complete.
//!
//! `replay` borrows the graph (hence its outputs) until `wait` hands it back, or until
//! the scope ends.
use stream_core::{scope, Error, Graph, PinnedBuffer, Stream};

fn f(stream: &Stream, graph: &mut Graph<PinnedBuffer<f32>>) -> Result<(), Error> {
    scope(stream, |s| {
        let pending = s.replay(graph)?;
        println!("{}", graph.held()[0]);
        pending.wait()?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
