//! `Avg` on integer elements.
//!
//! NCCL's average of integers truncates, which is rarely what a program means; the
//! typed reductions admit `Avg` for floating-point elements only.
use stream_core::nccl::{Avg, Communicator};
use stream_core::{scope, Error, Stream};

fn f(stream: &Stream, comm: &Communicator) -> Result<(), Error> {
    scope(stream, |s| {
        let mut x = s.alloc_zeroed::<u32>(16)?;
        s.all_reduce_in_place(comm, &mut x, Avg)
    })
}

fn main() {
    let _ = f;
}
