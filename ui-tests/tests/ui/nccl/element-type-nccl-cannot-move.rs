//! A collective on elements NCCL has no type for (`u16`).
use stream_core::nccl::{Communicator, Sum};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        let mut x = s.alloc_zeroed::<u16>(16)?;
        s.all_reduce_in_place(comm, &mut x, Sum)
    })
}

fn main() {
    let _ = f;
}
