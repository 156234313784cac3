//! A scope's buffer in a collective recorded into a CUDA graph.
//!
//! The graph runs its collectives at every replay, long after the scope that owns the
//! buffer has freed it. The capture's views are branded by the capture, so memory of a
//! scope cannot enter one, for a collective as for a kernel.
use stream_core::nccl::{Communicator, Sum};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        let grad = s.alloc_zeroed::<f32>(16)?;
        let (_graph, ()) = s.capture((), |g, ()| {
            let mut sum = g.alloc::<f32>(16)?;
            g.all_reduce(comm, &grad, &mut sum, Sum)
        })?;
        Ok(())
    })
}

fn main() {
    let _ = f;
}
