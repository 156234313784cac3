//! A communicator moved to another thread while a scope that issued a collective on it
//! is still open.
//!
//! The scope's end may abort the communicator (a peer died, the timeout passed), and
//! NCCL frees an aborted communicator: another thread enqueuing on it at that moment
//! would use freed memory. A scope's collectives borrow the communicator until the
//! scope ends, so it cannot be moved out before then.
use stream_core::nccl::{Communicator, Sum};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, other: Stream, comm: Communicator) -> Result<(), Error> {
    scope(stream, move |s| {
        let mut grad = s.alloc_zeroed::<f32>(16)?;
        s.all_reduce_in_place(&comm, &mut grad, Sum)?;
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
