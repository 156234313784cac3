//! A factor on the GPU (`all_reduce_scaled`) from another scope than the collective's.
//!
//! The factor is read by the GPU when the collective runs, on the inner scope's stream,
//! which is not ordered with the outer scope's work on it: it must carry the brand of
//! the scope that issues the collective, like the buffers, so this does not compile.
use stream_core::nccl::Communicator;
use stream_core::{scope, Error, Stream};

fn f(s0: &Stream, s1: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(s0, |a| {
        let factor = a.alloc_zeroed::<f32>(1)?;
        scope(s1, |b| {
            let mut x = b.alloc_zeroed::<f32>(16)?;
            b.all_reduce_scaled_in_place(comm, &mut x, &factor)
        })
    })
}

fn main() {
    let _ = f;
}
