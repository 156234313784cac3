//! A factor on the GPU that is part of the buffer an in-place reduction writes.
//!
//! NCCL reads the factor while the collective writes the buffer: a view of the buffer
//! borrowed shared for the factor and the buffer borrowed exclusively for the result
//! cannot both be given, so this does not compile.
use stream_core::nccl::Communicator;
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        let mut x = s.alloc_zeroed::<f32>(16)?;
        let factor = x.slice(..1)?;
        s.all_reduce_scaled_in_place(comm, &mut x, &factor)
    })
}

fn main() {
    let _ = f;
}
