//! Reading what a replay writes between two runs replayed back to back.
//!
//! `replay_again` keeps the graph (hence its outputs) inside the `Pending` it returns:
//! the host reaches it only through `wait`, after every run.
use stream_core::{scope, Error, Graph, PinnedBuffer, Stream};

fn f(stream: &Stream, graph: &mut Graph<PinnedBuffer<f32>>) -> Result<(), Error> {
    scope(stream, |s| {
        let first = s.replay(graph)?;
        let second = s.replay_again(first)?;
        println!("{}", graph.held()[0]);
        second.wait()?;
        Ok::<_, Error>(())
    })
}

fn main() {
    let _ = f;
}
