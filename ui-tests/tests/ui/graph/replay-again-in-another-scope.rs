//! Replaying a graph again, without a host wait, in another scope than the one whose
//! replay is still in flight.
//!
//! `replay_again` takes the `Pending` of a replay of the same scope (its brand): the
//! run it enqueues is then ordered on that scope's stream, which the scope's end waits
//! for, and never outlives it.
use stream_core::{scope, Error, Graph, PinnedBuffer, Stream};

fn f(a: &Stream, b: &Stream, graph: &mut Graph<PinnedBuffer<f32>>) -> Result<(), Error> {
    scope(a, |outer| {
        let step = outer.replay(graph)?;
        scope(b, |inner| {
            let step = inner.replay_again(step)?;
            step.wait().map(drop)
        })
    })
}

fn main() {
    let _ = f;
}
