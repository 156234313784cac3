//! A communicator moved to another thread while a scope that replayed a graph with
//! collectives on it is still open.
//!
//! The scope's end may abort the communicator (a peer never replayed, the timeout
//! passed); another thread enqueuing on it at that moment would race with the abort.
//! `replay_with` borrows the communicator until the scope ends, as a scope's own
//! collectives do, so it cannot be moved out before then.
use stream_core::nccl::{Communicator, Sum};
use stream_core::{scope, Error, Graph, Stream};

fn f(stream: &Stream, other: Stream, comm: Communicator, graph: &mut Graph) -> Result<(), Error> {
    scope(stream, |s| {
        s.replay_with(graph, &[&comm])?;
        std::thread::spawn(move || {
            scope(&other, |s| {
                let mut more = s.alloc_zeroed::<f32>(16)?;
                s.all_reduce_in_place(&comm, &mut more, Sum)
            })
        });
        Ok(())
    })
}

fn main() {
    let _ = f;
}
